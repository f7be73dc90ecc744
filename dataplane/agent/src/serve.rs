//! `rctl serve`: loads the artifact, binds every listener (a taken
//! address fails the start, before anything is served), serves until
//! SIGTERM or SIGINT, then drains: listeners stop accepting, connections
//! finish the request in hand, the log is flushed, socket files removed.
//!
//! Works without any XDP program: a host may run only the HTTP plane.

use crate::control::{self, Control, ControlConfig};
use crate::http::{self, Limits};
use crate::judge::{Fields, Generation, Judge, Observer, Outcome};
use crate::listen::{self, Endpoint, UnixPath};
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
use tokio::net::{TcpListener, UnixListener};

/// What `rctl serve` runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The compiled artifact to start with.
    pub artifact: PathBuf,
    /// HAProxy SPOE endpoints.
    pub spoe: Vec<Endpoint>,
    /// The HTTP check endpoint.
    pub http: Option<SocketAddr>,
    /// Where `/metrics` is served.
    pub metrics: Option<SocketAddr>,
    /// The control socket (`None`: no control socket; `rctl apply` then
    /// cannot switch this agent).
    pub control: Option<PathBuf>,
    /// The matched-request log.
    pub log: Option<reqlog::Config>,
    /// Whole-ruleset shadow mode: decide, tag and count, never enforce.
    pub shadow: bool,
    /// Only this site's rules (and rules for all sites) apply.
    pub site: Option<String>,
    /// Most keys each limiter tracks.
    pub max_keys_per_limiter: usize,
    /// Bounds of the HTTP check endpoint.
    pub http_limits: Limits,
    /// How long a prepare waits for its commit.
    pub prepare_ttl: Duration,
}

impl Config {
    /// Defaults for everything but the artifact: no listener, the control
    /// socket at [`control::DEFAULT_SOCKET`].
    pub fn new(artifact: PathBuf) -> Config {
        Config {
            artifact,
            spoe: Vec::new(),
            http: None,
            metrics: None,
            control: Some(control::DEFAULT_SOCKET.into()),
            log: None,
            shadow: false,
            site: None,
            max_keys_per_limiter: rctl_dataplane::EngineConfig::default().max_keys_per_limiter,
            http_limits: Limits::default(),
            prepare_ttl: Duration::from_secs(60),
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

/// Metrics and the log, seen as one observer.
struct Observers {
    metrics: Arc<Metrics>,
    log: Option<Arc<ReqLog>>,
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
    http: Option<TcpListener>,
    http_limits: Limits,
    metrics_listener: Option<TcpListener>,
    spoe: Vec<SpoeListener>,
    control: Option<(UnixListener, ControlConfig)>,
    /// Socket files removed when the server is dropped.
    paths: Vec<UnixPath>,
    bound: Vec<String>,
}

impl Server {
    /// Loads the artifact and binds every listener.
    pub async fn bind(config: Config) -> Result<Server, ServeError> {
        let shown = config.artifact.display().to_string();
        let bytes = rctl_compiler::files::read_binary(
            &config.artifact,
            rctl_compiler::files::MAX_BINARY_BYTES,
        )
        .map_err(|e| fail(format!("reading {shown}: {e}")))?;
        let (first, _, warnings) = control::build(
            &bytes,
            config.site.as_deref(),
            config.max_keys_per_limiter,
            1,
            None,
        )
        .map_err(|e| fail(format!("{shown}: {e}")))?;
        let mut bound = warnings
            .into_iter()
            .map(|w| format!("warning {w}"))
            .collect::<Vec<_>>();
        let judge = Arc::new(Judge::new(first, config.shadow));
        let metrics = Arc::new(Metrics::new(Arc::clone(&judge)));
        let mut paths = Vec::new();
        let tcp = |what: &'static str, a: SocketAddr| async move {
            TcpListener::bind(a)
                .await
                .map_err(|e| fail(format!("--{what} {a}: {e}")))
        };
        let http = match config.http {
            Some(a) => Some(tcp("http", a).await?),
            None => None,
        };
        let metrics_listener = match config.metrics {
            Some(a) => Some(tcp("metrics", a).await?),
            None => None,
        };
        let mut spoe = Vec::new();
        for ep in &config.spoe {
            spoe.push(bind_spoe(ep).map_err(|e| fail(format!("--spoe {ep}: {e}")))?);
        }
        for (what, l) in [("http", &http), ("metrics", &metrics_listener)] {
            if let Some(a) = l.as_ref().and_then(|l| l.local_addr().ok()) {
                bound.push(format!("{what} tcp:{a}"));
            }
        }
        for l in &spoe {
            bound.push(format!("spoe {}", spoe_address(l)));
        }
        let control = match &config.control {
            Some(p) => {
                let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
                if let Some(dir) = dir {
                    rctl_dataplane::xdp::host::ensure_private_dir(dir, &mut Vec::new())
                        .map_err(|e| fail(format!("--control {}: {e}", p.display())))?;
                }
                let l = listen::bind_unix(p, 0o600)
                    .await
                    .map_err(|e| fail(format!("--control {}: {e}", p.display())))?;
                paths.push(UnixPath(p.clone()));
                bound.push(format!("control unix:{}", p.display()));
                let listeners = bound
                    .iter()
                    .filter(|b| !b.starts_with("warning "))
                    .cloned()
                    .collect();
                Some((
                    l,
                    ControlConfig {
                        site: config.site.clone(),
                        max_keys_per_limiter: config.max_keys_per_limiter,
                        prepare_ttl: config.prepare_ttl,
                        listeners,
                    },
                ))
            }
            None => None,
        };
        let log = match &config.log {
            Some(c) => Some(Arc::new(
                ReqLog::start(c).map_err(|e| fail(format!("--log: {e}")))?,
            )),
            None => None,
        };
        Ok(Server {
            judge,
            metrics,
            log,
            http,
            http_limits: config.http_limits,
            metrics_listener,
            spoe,
            control,
            paths,
            bound,
        })
    }

    /// What it listens on (`http tcp:127.0.0.1:8080`, `control
    /// unix:/run/rctl/agent.sock`, …), then `warning …` lines.
    pub fn bound(&self) -> &[String] {
        &self.bound
    }

    /// The judge (the generation in force).
    pub fn judge(&self) -> &Arc<Judge> {
        &self.judge
    }

    /// Serves until `until` completes, then drains and returns.
    pub async fn run(self, until: impl Future<Output = ()>) {
        let (trigger, shutdown) = shutdown::channel();
        let observer: Arc<dyn Observer> = Arc::new(Observers {
            metrics: Arc::clone(&self.metrics),
            log: self.log.clone(),
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
        if let Some(l) = self.metrics_listener {
            let (m, log) = (Arc::clone(&self.metrics), self.log.clone());
            let render = Arc::new(move || {
                let extra: Vec<Arc<dyn prometheus_client::collector::Collector>> = log
                    .iter()
                    .map(|l| Arc::clone(l) as Arc<dyn prometheus_client::collector::Collector>)
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
                shutdown.clone(),
            ));
        }
        if let Some((l, config)) = self.control {
            let control = Arc::new(Control::new(
                Arc::clone(&self.judge),
                Arc::clone(&self.metrics),
                self.log.clone(),
                config,
            ));
            tasks.spawn(control::serve(l, control, shutdown.clone()));
        }
        until.await;
        trigger.fire();
        while tasks.join_next().await.is_some() {}
        if let Some(l) = &self.log {
            l.close();
        }
        drop(self.paths);
    }
}

// The HAProxy SPOE server: bound before serving (it makes, checks and
// removes its own socket files), then served until shutdown.

type SpoeListener = crate::spop::Listener;

fn bind_spoe(ep: &Endpoint) -> Result<SpoeListener, String> {
    crate::spop::Listener::bind(&ep.to_string()).map_err(|e| e.to_string())
}

fn spoe_address(l: &SpoeListener) -> String {
    l.address()
}

async fn spoe(l: SpoeListener, judge: Arc<Judge>, observer: Arc<dyn Observer>, s: Shutdown) {
    let mut s = s;
    // It reports its own failures to the observer.
    let _ = crate::spop::serve(l, judge, observer, async move { s.fired().await }).await;
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
        server.run(signals).await;
        Ok(())
    })
}
