//! `rctl push`, `rctl agent` and `rctl fleet status`: flags in, the
//! fleet crate out.

use crate::host::{self, HostPaths};
use crate::serve::ListenArgs;
use crate::{ClockArg, Format, ModeArg};
use anyhow::{bail, Context, Result};
use rctl_fleet::agent::{AgentConfig, XdpConfig};
use rctl_fleet::etcd::{check_name, EtcdConfig, Target};
use rctl_fleet::shared::RedisConfig;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Where etcd is, and how to talk to it.
#[derive(clap::Args, Clone)]
pub struct EtcdArgs {
    /// etcd endpoints, comma-separated or repeated (`http://10.0.0.1:2379`;
    /// `https://…` with the TLS options).
    #[arg(long, value_name = "URLS", required = true)]
    etcd: Vec<String>,
    /// The key prefix rctl keeps everything under.
    #[arg(long, default_value = "/rctl")]
    prefix: String,
    /// CA bundle (PEM) to check etcd's certificate with.
    #[arg(long, value_name = "FILE")]
    etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM), for etcd's --client-cert-auth.
    #[arg(long, value_name = "FILE", requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// The name etcd's certificate must carry (default: the endpoint's host).
    #[arg(long, value_name = "NAME")]
    etcd_server_name: Option<String>,
}

impl EtcdArgs {
    fn config(&self) -> Result<EtcdConfig> {
        let mut c = EtcdConfig::new(&self.etcd, &self.prefix);
        if !c.prefix.starts_with('/') || c.prefix.len() < 2 {
            bail!(
                "--prefix {:?}: give an absolute key prefix such as /rctl",
                self.prefix
            );
        }
        c.ca = self.etcd_ca.clone();
        c.cert = self.etcd_cert.clone();
        c.key = self.etcd_key.clone();
        c.server_name = self.etcd_server_name.clone();
        Ok(c)
    }
}

/// `rctl push`'s flags.
#[derive(clap::Args)]
pub struct PushArgs {
    /// The compiled .rctlc artifact (not with --rollback).
    #[arg(required_unless_present = "rollback", conflicts_with = "rollback")]
    artifact: Option<PathBuf>,
    #[command(flatten)]
    etcd: EtcdArgs,
    /// Only the hosts of this site (default: every host).
    #[arg(long, conflicts_with = "all")]
    site: Option<String>,
    /// Every host (the default).
    #[arg(long)]
    all: bool,
    /// Pushes kept per target, for rollbacks.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    keep: u32,
    /// Point the target back at the artifact pushed N pushes before the
    /// one it runs (default 1); a second rollback of 1 goes forward again.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1")]
    rollback: Option<usize>,
    /// Bytes per chunk (etcd refuses requests over --max-request-bytes,
    /// 1.5 MiB by default).
    #[arg(long, default_value_t = rctl_fleet::push::CHUNK_SIZE, hide = true)]
    chunk_size: usize,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}

/// `rctl push`.
pub fn push(a: PushArgs) -> Result<ExitCode> {
    let config = a.etcd.config()?;
    let target = match &a.site {
        Some(s) => {
            check_name("--site", s)?;
            Target::Site(s.clone())
        }
        None => Target::All,
    };
    let bytes = match &a.artifact {
        Some(p) => Some(
            rctl_compiler::files::read_binary(p, rctl_compiler::files::MAX_BINARY_BYTES)
                .with_context(|| format!("reading {}", p.display()))?,
        ),
        None => None,
    };
    if !(1..=1_400_000).contains(&a.chunk_size) {
        bail!("--chunk-size {}: from 1 byte to 1.4 MB", a.chunk_size);
    }
    let layout = config.layout();
    let keep = a.keep as usize;
    let pushed = runtime()?.block_on(async {
        let client = config.connect().await?;
        match (&bytes, a.rollback) {
            (_, Some(n)) => rctl_fleet::push::rollback(&client, &layout, &target, n, keep).await,
            (Some(b), None) => {
                rctl_fleet::push::push(&client, &layout, b, &target, keep, a.chunk_size).await
            }
            (None, None) => unreachable!("clap requires one"),
        }
    });
    let shown = a
        .artifact
        .as_ref()
        .map_or_else(|| "rollback".to_string(), |p| p.display().to_string());
    let p = pushed.with_context(|| format!("{shown}: {target} not switched"))?;
    let what = match a.rollback {
        Some(n) => format!(
            "{target} rolled back {n} push{} (from generation {})",
            if n == 1 { "" } else { "es" },
            p.replaced.map_or("-".into(), |g| g.to_string())
        ),
        None => format!("{target} switched ({} chunks stored)", p.chunks),
    };
    let _ = writeln!(
        std::io::stdout().lock(),
        "{what}: generation {}, artifact {}{}",
        p.generation,
        p.sha256,
        if p.collected > 0 {
            format!("; {} artifacts no longer kept were deleted", p.collected)
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `rctl fleet status`.
pub fn status(etcd: &EtcdArgs, format: Format) -> Result<ExitCode> {
    let config = etcd.config()?;
    let layout = config.layout();
    let s = runtime()?
        .block_on(async {
            let client = config.connect().await?;
            rctl_fleet::status::read(&client, &layout).await
        })
        .map_err(rctl_fleet::status::unreachable)?;
    let out = match format {
        Format::Text => rctl_fleet::status::text(&s),
        Format::Json => serde_json::to_string_pretty(&s)? + "\n",
    };
    crate::print(&out, format)?;
    Ok(if s.converged() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `rctl agent`'s flags.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("plane").required(true).args(["iface", "no_xdp"])))]
pub struct AgentArgs {
    #[command(flatten)]
    etcd: EtcdArgs,
    /// The interface the packet plane (XDP) is applied to.
    #[arg(long)]
    iface: Option<String>,
    /// No packet plane: the HTTP plane only.
    #[arg(long)]
    no_xdp: bool,
    /// This host's name in reports (default: the system's host name).
    #[arg(long)]
    host: Option<String>,
    /// The artifact to start with when the state directory holds none
    /// (default: nothing is enforced until etcd answers).
    #[arg(long)]
    artifact: Option<PathBuf>,
    /// Count `shared` throttles site-wide in this Redis
    /// (`redis://[USER:PASS@]HOST:6379[/DB]`, `rediss://` for TLS); without
    /// it they count per host. Whoever can write to it can limit keys on
    /// every host: give it a password (or ACL user) and TLS.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// The CA (PEM) that signed the Redis server's certificate
    /// (`rediss://`; default: the system's CAs).
    #[arg(long, value_name = "FILE", requires = "redis")]
    redis_ca: Option<PathBuf>,
    /// A client certificate (PEM) for Redis, with --redis-key.
    #[arg(long, value_name = "FILE", requires = "redis_key")]
    redis_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "redis_cert")]
    redis_key: Option<PathBuf>,
    /// Milliseconds between syncs with Redis.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    sync_ms: u64,
    /// Seconds the host's report outlives it (its lease's TTL).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=3600))]
    report_ttl: u64,
    /// Seconds before a failed apply is tried again.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    retry: u64,
    /// XDP mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    mode: ModeArg,
    /// The clock rate limits read.
    #[arg(long, value_enum, default_value_t = ClockArg::Tick)]
    clock: ClockArg,
    /// The XDP object (default: RCTL_XDP_OBJECT, else the one built in).
    #[arg(long)]
    object: Option<PathBuf>,
    #[command(flatten)]
    paths: HostPaths,
    #[command(flatten)]
    listen: ListenArgs,
}

/// `rctl agent`: runs until SIGTERM or SIGINT.
pub fn agent(a: AgentArgs) -> Result<ExitCode> {
    let etcd = a.etcd.config()?;
    let host = a.host.clone().unwrap_or_else(rctl_fleet::etcd::hostname);
    check_name("--host", &host)?;
    let site = a.listen.site().map(str::to_string);
    if let Some(s) = &site {
        check_name("--site", s)?;
    }
    let xdp = match &a.iface {
        None => None,
        Some(iface) => Some(XdpConfig {
            iface: iface.clone(),
            mode: a.mode.into(),
            clock: a.clock.into(),
            object: host::object(a.object.clone())?,
            paths: a.paths.paths(),
        }),
    };
    let config = AgentConfig {
        etcd,
        host,
        site,
        state_dir: a.paths.paths().state,
        xdp,
        report_ttl: Duration::from_secs(a.report_ttl),
        retry: Duration::from_secs(a.retry),
        bootstrap: a.artifact.clone(),
        redis: a.redis.as_deref().map(|u| {
            let mut r = RedisConfig::new(u, Duration::from_millis(a.sync_ms));
            r.tls = rctl_fleet::shared::RedisTls {
                ca: a.redis_ca.clone(),
                client: a.redis_cert.clone().zip(a.redis_key.clone()),
            };
            r
        }),
    };
    let serve = a.listen.config(
        PathBuf::from("(etcd)"),
        Some(a.paths.paths().state.join("agent")),
    )?;
    rctl_fleet::agent::run(config, serve, |server, started| {
        crate::serve::print_ready("rctl agent", server);
        let _ = writeln!(
            std::io::stderr().lock(),
            "rctl agent: {}",
            crate::term::text(started)
        );
    })
    .context("rctl agent")?;
    let _ = writeln!(std::io::stderr().lock(), "rctl agent: stopped");
    Ok(ExitCode::SUCCESS)
}

/// The fleet section of `rctl status`, as text.
pub fn status_text(f: &serde_json::Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let s = |v: &serde_json::Value| crate::term::text(v.as_str().unwrap_or("-")).into_owned();
    let etcd = &f["etcd"];
    writeln!(
        out,
        "  fleet: host {}, site {}, {} generation {} ({}), target generation {}{}",
        s(&f["host"]),
        s(&f["site"]),
        if etcd["connected"] == true {
            "etcd connected,".to_string()
        } else {
            format!("etcd NOT CONNECTED ({}),", s(&etcd["error"]))
        },
        f["generation"],
        s(&f["state"]),
        f["target_generation"],
        f["iface"]
            .as_str()
            .map(|i| format!(", packet plane on {i}"))
            .unwrap_or_default()
    )?;
    if let Some(e) = f["last_error"].as_str() {
        writeln!(out, "  fleet: {}", crate::term::text(e))?;
    }
    if let Some(e) = etcd["report_error"].as_str() {
        writeln!(
            out,
            "  fleet: this host's report is not in etcd: {}",
            crate::term::text(e)
        )?;
    }
    let sh = &f["shared"];
    if sh.is_object() {
        let offline: u64 = sh["limiters"]
            .as_array()
            .map(|l| l.iter().filter_map(|x| x["offline_hits"].as_u64()).sum())
            .unwrap_or(0);
        writeln!(
            out,
            "  shared limits: Redis {} {} ({} hosts live), sync every {} ms, {} syncs ok, {} \
             failed; {offline} requests decided per host while Redis was away{}",
            s(&sh["redis"]),
            if sh["online"] == true {
                "online"
            } else {
                "AWAY: per-host limits"
            },
            sh["hosts"],
            sh["sync_ms"],
            sh["syncs_ok"],
            sh["syncs_failed"],
            sh["last_error"]
                .as_str()
                .map(|e| format!(" (last error: {})", crate::term::text(e)))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}
