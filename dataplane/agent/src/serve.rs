//! `rctl serve`: loads the artifact, binds every listener (a taken
//! address fails the start, before anything is served), serves until
//! SIGTERM or SIGINT, then drains: listeners stop accepting, connections
//! finish the request in hand, the log is flushed, socket files removed.
//!
//! Works without any XDP program: a host may run only the HTTP plane.

use crate::control::{self, Control, ControlConfig};
use crate::http::{self, Limits};
use crate::judge::{Fields, Generation, Judge, Observer, Outcome};
use crate::listen::{Bind, Endpoint, Listener};
use crate::metrics::Metrics;
use crate::reqlog::{self, ReqLog};
use crate::shutdown::{self, Shutdown};
use rctl_dataplane::Decision;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What `rctl serve` runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The compiled artifact to start with.
    pub artifact: PathBuf,
    /// HAProxy SPOE endpoints.
    pub spoe: Vec<Endpoint>,
    /// How SPOE sockets are made and whom they serve.
    pub spoe_bind: Bind,
    /// The SPOE connections' timeouts and limits.
    pub spoe_config: crate::spop::Config,
    /// The HTTP check endpoint.
    pub http: Option<Endpoint>,
    /// How the HTTP check endpoint's socket is made and whom it serves.
    pub http_bind: Bind,
    /// Where `/metrics` is served.
    pub metrics: Option<SocketAddr>,
    /// The control socket (`None`: no control socket; `rctl apply` then
    /// cannot switch this agent).
    pub control: Option<PathBuf>,
    /// A group whose members may use the control socket too (besides
    /// root and the agent's user).
    pub control_group: Option<u32>,
    /// The matched-request log.
    pub log: Option<reqlog::Config>,
    /// Whole-ruleset shadow mode: decide, tag and count, never enforce.
    pub shadow: bool,
    /// Count the recent traffic by key for `rctl top` (off by default:
    /// it costs every request a lock and a few counters).
    pub top: bool,
    /// Only this site's rules (and rules for all sites) apply.
    pub site: Option<String>,
    /// Most keys each limiter tracks.
    pub max_keys_per_limiter: usize,
    /// Bounds of the HTTP check endpoint.
    pub http_limits: Limits,
    /// How long a prepare waits for its commit.
    pub prepare_ttl: Duration,
    /// The artifact's bytes, if given here rather than read from
    /// `artifact` (which then only names it in messages).
    pub artifact_bytes: Option<Vec<u8>>,
    /// Where bans and buckets are saved across restarts (`None`: they
    /// are not).
    pub persist: Option<crate::persist::Config>,
    /// The number of the generation it starts with (default 1): the fleet
    /// agent starts with the fleet's, so that one number names it.
    pub first_generation: Option<u64>,
    /// HAProxy's stats socket, read for `/metrics`
    /// ([`crate::proxy_stats`]).
    pub haproxy_stats: Option<crate::proxy_stats::Config>,
}

impl Config {
    /// Defaults for everything but the artifact: no listener, the control
    /// socket at [`control::DEFAULT_SOCKET`].
    pub fn new(artifact: PathBuf) -> Config {
        Config {
            artifact,
            spoe: Vec::new(),
            spoe_bind: Bind::default(),
            spoe_config: crate::spop::Config::default(),
            http: None,
            http_bind: Bind::default(),
            metrics: None,
            control: Some(control::DEFAULT_SOCKET.into()),
            control_group: None,
            log: None,
            shadow: false,
            top: false,
            site: None,
            max_keys_per_limiter: rctl_dataplane::EngineConfig::default().max_keys_per_limiter,
            http_limits: Limits::default(),
            prepare_ttl: Duration::from_secs(60),
            artifact_bytes: None,
            persist: None,
            first_generation: None,
            haproxy_stats: None,
        }
    }
}

/// Why the agent could not start.
#[derive(Debug)]
pub struct ServeError {
    /// What happened, and what to do.
    pub message: String,
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServeError {}

fn fail(message: String) -> ServeError {
    ServeError { message }
}

/// Metrics, the log, the top counters and the taps, seen as one observer.
struct Observers {
    metrics: Arc<Metrics>,
    log: Option<Arc<ReqLog>>,
    top: Option<Arc<crate::top::TopCounts>>,
    /// Open taps (one load when none is).
    taps: Arc<crate::tap::Taps>,
}

impl Observer for Observers {
    fn decided(
        &self,
        g: &Generation,
        f: &Fields<'_>,
        o: &Outcome,
        d: &Decision,
        elapsed: Duration,
    ) {
        self.metrics.decided(g, f, o, d, elapsed);
        if let Some(l) = &self.log {
            l.decided(g, f, o, d, elapsed);
        }
        if let Some(t) = &self.top {
            t.decided(g, f, o, d, elapsed);
        }
        self.taps.record(f);
    }

    fn failed(&self, kind: &'static str, detail: &str) {
        self.metrics.failed(kind, detail);
    }
}

/// An agent with every listener bound, not serving yet.
pub struct Server {
    judge: Arc<Judge>,
    metrics: Arc<Metrics>,
    log: Option<Arc<ReqLog>>,
    http: Option<Listener>,
    http_limits: Limits,
    metrics_listener: Option<Listener>,
    spoe: Vec<SpoeListener>,
    spoe_config: crate::spop::Config,
    control: Arc<Control>,
    control_listener: Option<Listener>,
    collectors: Vec<Arc<dyn prometheus_client::collector::Collector>>,
    reopen: Option<tokio::signal::unix::Signal>,
    persist: Option<Arc<crate::persist::Persist>>,
    proxy_stats: Option<(
        Arc<crate::proxy_stats::ProxyStats>,
        crate::proxy_stats::Config,
    )>,
    bound: Vec<String>,
}

impl Server {
    /// Loads the artifact and binds every listener.
    pub async fn bind(config: Config) -> Result<Server, ServeError> {
        // With a state directory, what was last applied wins over the
        // artifact named at start (not over bytes a caller hands in: the
        // fleet agent decides its own start).
        let kept = config
            .persist
            .as_ref()
            .filter(|_| config.artifact_bytes.is_none())
            .and_then(|p| crate::persist::kept_artifact(&p.dir))
            .filter(|(_, b)| rctl_compiler::artifact::decode(b).is_ok());
        let (config, kept_note) = match kept {
            Some((path, b)) => {
                let note = format!(
                    "starting from the artifact last applied, {}",
                    path.display()
                );
                (
                    Config {
                        artifact: path,
                        artifact_bytes: Some(b),
                        ..config
                    },
                    Some(note),
                )
            }
            None => (config, None),
        };
        let shown = config.artifact.display().to_string();
        let bytes = match &config.artifact_bytes {
            Some(b) => b.clone(),
            None => rctl_compiler::files::read_binary(
                &config.artifact,
                rctl_compiler::files::MAX_BINARY_BYTES,
            )
            .map_err(|e| fail(format!("reading {shown}: {e}")))?,
        };
        let (mut first, _, warnings) = control::build(
            &bytes,
            config.site.as_deref(),
            config.max_keys_per_limiter,
            config.first_generation.unwrap_or(1).max(1),
            None,
        )
        .map_err(|e| fail(format!("{shown}: {e}")))?;
        let mut bound = warnings
            .into_iter()
            .map(|w| format!("warning {w}"))
            .collect::<Vec<_>>();
        bound.extend(kept_note.map(|n| format!("note {n}")));
        let persist = match &config.persist {
            Some(c) => {
                let (p, warning) = crate::persist::Persist::open(c, &mut first).map_err(fail)?;
                bound.extend(warning.map(|w| format!("warning {w}")));
                Some(Arc::new(p))
            }
            None => None,
        };
        let judge = Arc::new(Judge::new(first, config.shadow));
        let metrics = Arc::new(Metrics::new(Arc::clone(&judge)));
        let bind = |what: &str, ep: &Endpoint, b: &Bind| {
            Listener::bind(ep, b).map_err(|e| fail(format!("--{what} {ep}: {e}")))
        };
        let http = match &config.http {
            Some(ep) => Some(bind("http", ep, &config.http_bind)?),
            None => None,
        };
        let metrics_listener = match config.metrics {
            Some(a) => {
                let b = Bind {
                    limits: crate::peers::PeerLimits {
                        total: 64,
                        per_peer: 16,
                        reserved: 16,
                    },
                    ..Bind::default()
                };
                Some(bind("metrics", &Endpoint::Tcp(a), &b)?)
            }
            None => None,
        };
        let mut spoe = Vec::new();
        for ep in &config.spoe {
            spoe.push(
                crate::spop::Listener::bind_with(ep, &config.spoe_bind)
                    .map_err(|e| fail(format!("--spoe {ep}: {e}")))?,
            );
        }
        for (what, l) in [("http", &http), ("metrics", &metrics_listener)] {
            if let Some(l) = l {
                bound.push(format!("{what} {}", l.address()));
            }
        }
        for l in &spoe {
            bound.push(format!("spoe {}", l.address()));
        }
        let control_listener = match &config.control {
            Some(p) => {
                let access = match config.control_group {
                    Some(g) => rctl_os::socket::Access::group(g),
                    None => rctl_os::socket::Access::OWNER,
                };
                let b = Bind {
                    limits: crate::peers::PeerLimits {
                        total: 64,
                        per_peer: 64,
                        reserved: 0,
                    },
                    ..Bind::default()
                }
                .with_access(access);
                // An existing folder is held to the state folders' rule:
                // owned by the agent's user, written by nobody else.
                if let Some(dir) = p.parent().filter(|d| d.exists()) {
                    rctl_os::fs::check_private_dir(dir)
                        .map_err(|e| fail(format!("--control {}: {e}", p.display())))?;
                }
                let l = bind("control", &Endpoint::Unix(p.clone()), &b)?;
                bound.push(format!("control unix:{}", p.display()));
                Some(l)
            }
            None => None,
        };
        // From here on SIGHUP reopens the log instead of ending the agent
        // (its default), whoever runs the server.
        let reopen = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let listeners = bound
            .iter()
            .filter(|b| !b.starts_with("warning ") && !b.starts_with("note "))
            .cloned()
            .collect();
        let control_config = ControlConfig {
            site: config.site.clone(),
            max_keys_per_limiter: config.max_keys_per_limiter,
            prepare_ttl: config.prepare_ttl,
            listeners,
        };
        let log = match &config.log {
            Some(c) => Some(Arc::new(
                ReqLog::start(c).map_err(|e| fail(format!("--log: {e}")))?,
            )),
            None => None,
        };
        let control = Arc::new(Control::new(
            Arc::clone(&judge),
            Arc::clone(&metrics),
            log.clone(),
            control_config,
        ));
        if let Some(p) = &persist {
            control.set_persist(Arc::clone(p));
        }
        if config.top {
            control.count_top();
        }
        let proxy_stats = config
            .haproxy_stats
            .clone()
            .map(|c| (Arc::new(crate::proxy_stats::ProxyStats::default()), c));
        let collectors: Vec<Arc<dyn prometheus_client::collector::Collector>> = proxy_stats
            .iter()
            .map(|(p, _)| Arc::clone(p) as Arc<dyn prometheus_client::collector::Collector>)
            .collect();
        Ok(Server {
            judge,
            metrics,
            log,
            http,
            http_limits: config.http_limits,
            metrics_listener,
            spoe,
            spoe_config: config.spoe_config,
            control,
            control_listener,
            collectors,
            reopen,
            persist,
            proxy_stats,
            bound,
        })
    }

    /// What it listens on (`http tcp:127.0.0.1:8080`, `control
    /// unix:/run/rctl/agent.sock`, …), and `warning …` and `note …` lines.
    pub fn bound(&self) -> &[String] {
        &self.bound
    }

    /// The judge (the generation in force).
    pub fn judge(&self) -> &Arc<Judge> {
        &self.judge
    }

    /// The saver of bans and buckets, if `--state-dir` was given.
    pub fn persist(&self) -> Option<&Arc<crate::persist::Persist>> {
        self.persist.as_ref()
    }

    /// The agent's control: how an in-process client prepares and
    /// commits a generation, as `rctl apply` does through the socket.
    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// The agent's counters (the fleet agent adds its packet plane to
    /// `rctl_up`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Adds metrics of its own to `/metrics` (the fleet agent's).
    pub fn add_collector(&mut self, c: Arc<dyn prometheus_client::collector::Collector>) {
        self.collectors.push(c);
    }

    /// Tells systemd (`Type=notify`) the agent is ready, with what it runs
    /// as the unit's status line; nothing without `$NOTIFY_SOCKET`.
    pub fn notify_ready(&self) {
        let g = self.judge.current();
        let status = format!(
            "generation {}, artifact {}, {} rules",
            g.number,
            &g.sha256[..g.sha256.len().min(16)],
            g.engine.ruleset().rules.len()
        );
        let _ = rctl_os::notify::ready(&status);
    }

    /// Serves until `until` completes, then drains and returns.
    pub async fn run(self, until: impl Future<Output = ()>) {
        let (trigger, shutdown) = shutdown::channel();
        let observer: Arc<dyn Observer> = Arc::new(Observers {
            metrics: Arc::clone(&self.metrics),
            log: self.log.clone(),
            top: self.control.counts_top().then(|| self.control.top()),
            taps: self.control.taps(),
        });
        let mut tasks = tokio::task::JoinSet::new();
        if let Some(l) = self.http {
            tasks.spawn(http::serve(
                l,
                Arc::clone(&self.judge),
                Arc::clone(&observer),
                self.http_limits.clone(),
                shutdown.clone(),
            ));
        }
        if let Some((p, c)) = self.proxy_stats.clone() {
            tasks.spawn(p.poll(c, shutdown.clone()));
        }
        if let Some(l) = self.metrics_listener {
            let (m, log) = (Arc::clone(&self.metrics), self.log.clone());
            let collectors = self.collectors.clone();
            let render = Arc::new(move || {
                let extra: Vec<Arc<dyn prometheus_client::collector::Collector>> = log
                    .iter()
                    .map(|l| Arc::clone(l) as Arc<dyn prometheus_client::collector::Collector>)
                    .chain(collectors.iter().cloned())
                    .collect();
                m.render(&extra)
            });
            tasks.spawn(http::serve_metrics(
                l,
                render,
                Arc::clone(&observer),
                shutdown.clone(),
            ));
        }
        for l in self.spoe {
            tasks.spawn(spoe(
                l,
                Arc::clone(&self.judge),
                Arc::clone(&observer),
                self.spoe_config.clone(),
                shutdown.clone(),
            ));
        }
        if let (Some(mut hup), Some(log)) = (self.reopen, self.log.clone()) {
            let mut s = shutdown.clone();
            tasks.spawn(async move {
                loop {
                    tokio::select! {
                        got = hup.recv() => {
                            if got.is_none() {
                                break;
                            }
                            log.reopen();
                        }
                        () = s.fired() => break,
                    }
                }
            });
        }
        if let Some(l) = self.control_listener {
            tasks.spawn(control::serve(l, self.control, shutdown.clone()));
        }
        if let Some(p) = self.persist.clone() {
            let (judge, mut s) = (Arc::clone(&self.judge), shutdown.clone());
            tasks.spawn(async move {
                let mut tick = tokio::time::interval(p.every());
                tick.tick().await;
                loop {
                    tokio::select! {
                        _ = tick.tick() => {
                            let (p, j) = (Arc::clone(&p), Arc::clone(&judge));
                            let _ = tokio::task::spawn_blocking(move || p.save(&j)).await;
                        }
                        () = s.fired() => break,
                    }
                }
            });
        }
        until.await;
        let _ = rctl_os::notify::stopping();
        trigger.fire();
        while tasks.join_next().await.is_some() {}
        // The state as the drain left it: what a restart starts from.
        if let Some(p) = &self.persist {
            let (p, j) = (Arc::clone(p), Arc::clone(&self.judge));
            let _ = tokio::task::spawn_blocking(move || p.save(&j)).await;
        }
        if let Some(l) = &self.log {
            l.close();
        }
    }
}

// The HAProxy SPOE server: bound before serving (it makes, checks and
// removes its own socket files), then served until shutdown.

type SpoeListener = crate::spop::Listener;

async fn spoe(
    l: SpoeListener,
    judge: Arc<Judge>,
    observer: Arc<dyn Observer>,
    config: crate::spop::Config,
    s: Shutdown,
) {
    let mut s = s;
    // It reports its own failures to the observer.
    let _ =
        crate::spop::serve_with(l, judge, observer, config, async move { s.fired().await }).await;
}

/// Catches SIGTERM and SIGINT from now on (call it within the runtime);
/// the future completes at the first of them.
pub fn signalled() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            // Without signal handlers, serve until killed.
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// `rctl serve`: binds, calls `ready` (to report what is bound), serves
/// until SIGTERM or SIGINT, drains, returns.
pub fn run(config: Config, ready: impl FnOnce(&Server)) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rctl-serve")
        .build()
        .map_err(|e| fail(format!("starting the runtime: {e}")))?;
    rt.block_on(async move {
        let signals = signalled();
        let server = Server::bind(config).await?;
        ready(&server);
        server.notify_ready();
        server.run(signals).await;
        Ok(())
    })
}
