//! `rctl serve`: flags in, `rctl_agent::serve::run` out.

use anyhow::{Context, Result};
use rctl_agent::listen::Endpoint;
use rctl_agent::reqlog;
use rctl_agent::serve::Config;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `rctl serve`'s flags.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// The compiled .rctlc artifact to start with (`rctl apply` switches it).
    #[arg(long)]
    artifact: PathBuf,
    /// HAProxy SPOE endpoint, unix:PATH or tcp:ADDR:PORT (repeatable).
    #[arg(long, value_name = "ENDPOINT", value_parser = Endpoint::parse)]
    spoe: Vec<Endpoint>,
    /// The HTTP check endpoint (nginx auth_request, Envoy ext_authz), ADDR:PORT.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// The control socket `rctl apply` and `rctl status` use.
    #[arg(long, value_name = "PATH", default_value = rctl_agent::control::DEFAULT_SOCKET)]
    control: PathBuf,
    /// Run without a control socket (then `rctl apply` cannot switch it).
    #[arg(long, conflicts_with = "control")]
    no_control: bool,
    /// Write matched requests as JSON lines to PATH (`-`: stdout).
    #[arg(long, value_name = "PATH")]
    log: Option<PathBuf>,
    /// Log lines each rule may write per second.
    #[arg(long, default_value_t = 10)]
    log_rate: u32,
    /// Log lines each rule may write at once.
    #[arg(long, default_value_t = 100)]
    log_burst: u32,
    /// Seconds between summaries of suppressed log lines.
    #[arg(long, default_value_t = 60)]
    log_summary: u64,
    /// Decide, tag and count, but never enforce (whole ruleset).
    #[arg(long)]
    shadow: bool,
    /// Only this site's rules (and rules for all sites) apply.
    #[arg(long)]
    site: Option<String>,
    /// Most keys each rate limiter tracks.
    #[arg(long, default_value_t = 1 << 20)]
    max_keys: usize,
    /// Connections the HTTP check endpoint serves at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
}

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(a: ServeArgs) -> Result<()> {
    let mut c = Config::new(a.artifact);
    c.spoe = a.spoe;
    c.http = a.http;
    c.metrics = a.metrics;
    c.control = (!a.no_control).then_some(a.control);
    c.log = a.log.map(|p| {
        let target = if p.as_os_str() == "-" {
            reqlog::Target::Stdout
        } else {
            reqlog::Target::File(p)
        };
        let mut l = reqlog::Config::new(target);
        l.lines_per_s = a.log_rate;
        l.burst = a.log_burst;
        l.summary_every = std::time::Duration::from_secs(a.log_summary.max(1));
        l
    });
    c.shadow = a.shadow;
    c.site = a.site;
    c.max_keys_per_limiter = a.max_keys;
    c.http_limits.max_connections = a.max_connections;
    rctl_agent::serve::run(c, |server| {
        let g = server.judge().current();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "rctl serve: generation {}, artifact {}, {} rules{}",
            g.number,
            crate::host::short(&g.sha256),
            g.engine.ruleset().rules.len(),
            if server.judge().shadow() {
                ", shadow mode"
            } else {
                ""
            }
        );
        for b in server.bound() {
            let line = match b.strip_prefix("warning ") {
                Some(w) => format!("rctl: warning: {w}"),
                None => format!("rctl serve: listening: {b}"),
            };
            let _ = writeln!(err, "{}", crate::term::text(&line));
        }
        let _ = writeln!(err, "rctl serve: ready");
    })
    .context("rctl serve")?;
    let _ = writeln!(std::io::stderr().lock(), "rctl serve: stopped");
    Ok(())
}
