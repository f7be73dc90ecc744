//! `rctl agent`: `rctl serve` that follows etcd (`rctl_fleet::agent`):
//! flags in, the fleet agent run until SIGTERM or SIGINT.

use crate::etcd::EtcdArgs;
use crate::hostargs::{object, ClockArg, HostPaths, ModeArg};
use crate::listen::{print_ready, ListenArgs};
use crate::term;
use anyhow::{Context, Result};
use rctl_fleet::agent::{AgentConfig, XdpConfig};
use rctl_fleet::etcd::check_name;
use rctl_fleet::shared::RedisConfig;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `rctl agent`'s flags.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("plane").required(true).args(["iface", "no_xdp"])))]
pub struct Args {
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
pub fn run(a: Args) -> Result<ExitCode> {
    rctl_agent::event::set_name("rctl agent");
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
            object: object(a.object.clone())?,
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
        print_ready("rctl agent", server);
        let _ = writeln!(
            std::io::stderr().lock(),
            "rctl agent: {}",
            term::text(started)
        );
    })
    .context("rctl agent")?;
    let _ = writeln!(std::io::stderr().lock(), "rctl agent: stopped");
    Ok(ExitCode::SUCCESS)
}
