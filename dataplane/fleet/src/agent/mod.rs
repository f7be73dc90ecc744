//! `rctl agent`: one process runs `rctl serve`'s listeners (the HTTP
//! check endpoint, SPOE, metrics, the control socket) and follows etcd:
//! it watches its target's pointer, fetches and checks the artifact, and
//! applies both planes with the same two phases as `rctl apply` (prepare
//! the agent, switch the XDP generation, commit the agent). It reports
//! under a lease, keeps enforcing when etcd is away, and after a restart
//! enforces its last good generation from local disk before etcd answers.
//!
//! - [`local`]: the last good and pending artifacts on disk.
//! - `apply`: one apply of both planes ([`rctl_agent::apply`], as `rctl
//!   apply` runs it), and the records on disk around it.
//! - `watch`: following the pointers from a revision.
//! - `report`: the host's report under its lease.

mod apply;
pub mod local;
pub mod progress;
mod report;
mod watch;

use crate::error::{ErrorKind, FleetError};
use crate::etcd::{now_unix, EtcdConfig};
use crate::shared::RedisConfig;
use local::{Local, Record};
pub use progress::Progress;
use rctl_agent::control::{Control, EtcdStatus, FleetStatus};
use rctl_agent::judge::Judge;
use rctl_agent::serve::{Config as ServeConfig, Server};
use rctl_dataplane::xdp::ClockMode;
use rctl_loader::host::{self as xdp, Mode, Paths};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The packet plane the agent applies to.
#[derive(Debug, Clone)]
pub struct XdpConfig {
    /// The interface.
    pub iface: String,
    /// XDP mode.
    pub mode: Mode,
    /// The limits' clock.
    pub clock: ClockMode,
    /// The XDP object.
    pub object: Vec<u8>,
    /// Where the pins, metadata and installed artifacts live.
    pub paths: Paths,
}

/// What `rctl agent` runs, besides `rctl serve`'s listeners.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// etcd.
    pub etcd: EtcdConfig,
    /// This host's name in reports.
    pub host: String,
    /// Its site (also the rules it enforces).
    pub site: Option<String>,
    /// Its state directory (the agent's files go in `agent/` below it).
    pub state_dir: PathBuf,
    /// The packet plane, if any.
    pub xdp: Option<XdpConfig>,
    /// The report's lease.
    pub report_ttl: Duration,
    /// How long a failed apply waits before it is tried again.
    pub retry: Duration,
    /// The artifact to start with when there is none on local disk.
    pub bootstrap: Option<PathBuf>,
    /// Site-wide limits in Redis.
    pub redis: Option<RedisConfig>,
}

/// The state the agent's tasks share.
pub(crate) struct Ctx {
    pub config: AgentConfig,
    pub judge: Arc<Judge>,
    pub control: Arc<Control>,
    pub local: Local,
    pub progress: Arc<Mutex<Progress>>,
    /// Bumped on every change a report should carry.
    pub changed: tokio::sync::watch::Sender<u64>,
    pub started_unix: u64,
}

impl Ctx {
    /// Changes the progress and has it reported.
    pub fn update(&self, f: impl FnOnce(&mut Progress)) {
        f(&mut self.progress.lock().unwrap_or_else(|p| p.into_inner()));
        self.changed.send_modify(|v| *v += 1);
    }

    /// Sets why the report could not be written (`None`: it was), telling
    /// the reporter only when that changes.
    pub fn set_report_error(&self, e: Option<String>) {
        if self.progress().report_error != e {
            self.update(|p| p.report_error = e);
        }
    }

    /// A copy of the progress.
    pub fn progress(&self) -> Progress {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Where the agent started from.
struct Startup {
    bytes: Vec<u8>,
    record: Option<Record>,
    note: String,
    /// Why the packet plane does not run what was recovered, if it does
    /// not (the host then reports itself failed until an apply works).
    packet_error: Option<String>,
}

fn empty_ruleset() -> Vec<u8> {
    let c = rctl_compiler::compile_str(
        "no-artifact-yet.rctl",
        "",
        &rctl_compiler::Options::default(),
    );
    c.ruleset
        .map(|rs| rctl_compiler::artifact::encode(&rs))
        .unwrap_or_default()
}

/// The artifact the packet plane of `x` runs, if rctl enforces there.
fn xdp_running(x: &XdpConfig) -> Option<String> {
    let all = xdp::status(&x.paths, Some(&x.iface)).ok()?;
    let s = all.into_iter().next().filter(|s| s.enforcing)?;
    s.attached.map(|a| a.artifact_sha256)
}

/// Decides what to enforce before etcd answers (runs on a blocking
/// thread): an interrupted apply is finished or dropped (the packet plane
/// says which), then the last good generation is applied to the packet
/// plane if it does not run it.
fn recover(config: &AgentConfig, local: &Local) -> Result<Startup, FleetError> {
    let pending = local.read("pending");
    let running = config.xdp.as_ref().and_then(xdp_running);
    let mut notes = Vec::new();
    match (&pending, &running) {
        (Some((p, _)), Some(r)) if &p.sha256 == r => {
            local.promote()?;
            notes.push(format!(
                "an apply of generation {} was interrupted after the packet plane switched: \
                 finished",
                p.generation
            ));
        }
        (Some((p, _)), _) => {
            local.drop_pending();
            notes.push(format!(
                "an apply of generation {} was interrupted before the packet plane switched: \
                 dropped",
                p.generation
            ));
        }
        (None, _) => {}
    }
    let mut chosen = local.read("last-good").map(|(r, b)| (Some(r), b));
    if chosen.is_none() {
        if let Some(p) = &config.bootstrap {
            let b = rctl_compiler::files::read_binary(p, rctl_compiler::files::MAX_BINARY_BYTES)
                .map_err(|e| {
                    FleetError::new(ErrorKind::Io, format!("--artifact {}: {e}", p.display()))
                })?;
            let sha = rctl_compiler::artifact::content_hash(&b)
                .map(|h| rctl_compiler::artifact::hex(&h))
                .unwrap_or_default();
            crate::fetch::check(&b, &sha).map_err(|e| e.context(p.display()))?;
            notes.push(format!("no last good generation on disk: {}", p.display()));
            chosen = Some((None, b));
        }
    }
    let Some((record, bytes)) = chosen else {
        notes.push(
            "no generation on disk and no --artifact: nothing is enforced until etcd answers"
                .into(),
        );
        return Ok(Startup {
            bytes: empty_ruleset(),
            record: None,
            note: notes.join("; "),
            packet_error: None,
        });
    };
    if let Some(r) = &record {
        notes.push(format!(
            "generation {} (artifact {}) from local disk",
            r.generation,
            crate::fetch::short(&r.sha256)
        ));
    }
    let mut packet_error = None;
    if let Some(x) = &config.xdp {
        let sha = rctl_compiler::artifact::content_hash(&bytes)
            .map(|h| rctl_compiler::artifact::hex(&h))
            .unwrap_or_default();
        if running.as_deref() != Some(sha.as_str()) || pending.is_some() {
            match xdp::apply(
                &bytes,
                &x.object,
                &x.iface,
                x.mode,
                x.clock,
                config.site.as_deref(),
                &x.paths,
            ) {
                Ok(a) => notes.push(format!(
                    "the packet plane on {} re-applied (generation {})",
                    x.iface, a.attached.generation
                )),
                Err(e) => {
                    let e = format!("the packet plane on {} was not re-applied: {e}", x.iface);
                    notes.push(e.clone());
                    packet_error = Some(e);
                }
            }
        }
    }
    Ok(Startup {
        bytes,
        record,
        note: notes.join("; "),
        packet_error,
    })
}

/// Runs the agent until SIGTERM or SIGINT: binds `serve`'s listeners with
/// the generation recovered from disk, calls `ready`, then serves while
/// following etcd. `serve`'s artifact and site are set here.
pub fn run(
    config: AgentConfig,
    mut serve: ServeConfig,
    ready: impl FnOnce(&Server, &str),
) -> Result<(), FleetError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rctl-agent")
        .build()
        .map_err(|e| FleetError::new(ErrorKind::Io, format!("starting the runtime: {e}")))?;
    rt.block_on(async move {
        let signals = rctl_agent::serve::signalled();
        let local = Local::open(&config.state_dir)?;
        let (config, local, start) = tokio::task::spawn_blocking(move || {
            let s = recover(&config, &local);
            (config, local, s)
        })
        .await
        .map_err(|e| FleetError::new(ErrorKind::Io, e.to_string()))?;
        let start = start?;
        serve.artifact_bytes = Some(start.bytes);
        serve.first_generation = start
            .record
            .as_ref()
            .and_then(|r| u64::try_from(r.generation).ok());
        serve.site = config.site.clone();
        let mut server = Server::bind(serve)
            .await
            .map_err(|e| FleetError::new(ErrorKind::Io, e.message))?;
        if let Some(x) = &config.xdp {
            // rctl_up{plane="xdp"}: the program attached, read at scrape.
            let (paths, iface) = (x.paths.clone(), x.iface.clone());
            server.metrics().add_plane(
                "xdp",
                Arc::new(move || {
                    rctl_loader::host::status(&paths, Some(&iface))
                        .is_ok_and(|v| v.iter().all(|s| s.enforcing) && !v.is_empty())
                }),
            );
        }
        let (changed, _) = tokio::sync::watch::channel(0);
        let generation = start.record.as_ref().map_or(0, |r| r.generation);
        let progress = Progress {
            generation,
            applied_unix: start.record.as_ref().map_or(0, |r| r.applied_unix),
            // A packet plane that does not run the recovered generation is
            // a failure of that generation: the host says so, and applies
            // both planes again once etcd names a target.
            state: match (&start.packet_error, &start.record) {
                (Some(_), _) => "failed",
                (None, Some(_)) => "ok",
                (None, None) => "waiting",
            }
            .into(),
            failures: u64::from(start.packet_error.is_some()),
            error_generation: if start.packet_error.is_some() {
                generation
            } else {
                0
            },
            last_error: start.packet_error.clone(),
            started: start.note.clone(),
            ..Progress::default()
        };
        let ctx = Arc::new(Ctx {
            judge: Arc::clone(server.judge()),
            control: Arc::clone(server.control()),
            local,
            progress: Arc::new(Mutex::new(progress)),
            changed,
            started_unix: now_unix(),
            config,
        });
        let shared = ctx.config.redis.clone().map(|r| {
            Arc::new(crate::shared::Sync::new(
                r,
                &ctx.config.host,
                ctx.config.site.as_deref(),
            ))
        });
        server.add_collector(Arc::new(crate::metrics::FleetMetrics {
            progress: Arc::clone(&ctx.progress),
            host: ctx.config.host.clone(),
            judge: Arc::clone(&ctx.judge),
            shared: shared.clone(),
        }));
        {
            let (ctx, shared) = (Arc::clone(&ctx), shared.clone());
            server
                .control()
                .set_status_extra(Box::new(move || status(&ctx, shared.as_deref())));
        }
        ready(&server, &start.note);
        server.notify_ready();
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(watch::run(Arc::clone(&ctx), stop.clone()));
        tasks.spawn(report::run(Arc::clone(&ctx), stop.clone()));
        if let Some(s) = &shared {
            tasks.spawn(crate::shared::run(
                Arc::clone(s),
                Arc::clone(&ctx.judge),
                stop.clone(),
            ));
        }
        server.run(signals).await;
        let _ = stop_tx.send(true);
        // The reporter revokes the lease (the host shows as stopped at
        // once); nothing waits long for an etcd that is away.
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        Ok(())
    })
}

/// What `rctl status` shows of the fleet agent.
fn status(ctx: &Ctx, shared: Option<&crate::shared::Sync>) -> FleetStatus {
    let p = ctx.progress();
    FleetStatus {
        host: ctx.config.host.clone(),
        site: ctx.config.site.clone(),
        etcd: EtcdStatus {
            endpoints: ctx.config.etcd.endpoints.clone(),
            prefix: ctx.config.etcd.prefix.clone(),
            connected: p.etcd_connected,
            error: p.etcd_error,
            report_error: p.report_error,
            revision: p.revision,
        },
        generation: p.generation,
        applied_unix: p.applied_unix,
        state: p.state,
        last_error: p.last_error,
        target_generation: p.target_generation,
        target_sha256: p.target_sha256,
        failures: p.failures,
        started: p.started,
        iface: ctx.config.xdp.as_ref().map(|x| x.iface.clone()),
        shared: shared.map(|s| s.status(&ctx.judge)),
    }
}
