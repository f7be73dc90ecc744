//! The listeners' flags and the lines a starting agent prints, shared by
//! `rctl serve` and `rctl agent`. A leaf.

use crate::common::short;
use crate::term;
use anyhow::Context;
use rctl_agent::listen::Endpoint;
use rctl_agent::reqlog;
use rctl_agent::serve::Config;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The listeners and their settings (`rctl serve`, `rctl agent`).
#[derive(clap::Args)]
pub struct ListenArgs {
    /// HAProxy SPOE endpoint, unix:PATH or tcp:ADDR:PORT (repeatable).
    #[arg(long, value_name = "ENDPOINT", value_parser = Endpoint::parse)]
    spoe: Vec<Endpoint>,
    /// The SPOE socket file's group (Debian's HAProxy runs as `haproxy`):
    /// its members may connect, and are trusted.
    #[arg(long, value_name = "GROUP")]
    spoe_group: Option<String>,
    /// The SPOE socket file's mode (default 0600, or 0660 with --spoe-group).
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    spoe_mode: Option<u32>,
    /// How long an SPOE connection may sit idle, in seconds (longer than
    /// HAProxy's `timeout idle`, 30 s in what `rctl emit` writes).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    spoe_idle_timeout: u64,
    /// The HTTP check endpoint (nginx auth_request, Envoy ext_authz):
    /// unix:PATH or ADDR:PORT.
    #[arg(long, value_name = "ENDPOINT", value_parser = Endpoint::parse)]
    http: Option<Endpoint>,
    /// The HTTP socket file's group (Debian's nginx runs as `www-data`).
    #[arg(long, value_name = "GROUP")]
    http_group: Option<String>,
    /// The HTTP socket file's mode (default 0600, or 0660 with --http-group).
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    http_mode: Option<u32>,
    /// How long an HTTP connection may sit idle, or take to send a request
    /// head, in seconds (longer than nginx's upstream keepalive_timeout,
    /// 60 s by default).
    #[arg(long, value_name = "SECONDS", default_value_t = 75)]
    http_idle_timeout: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// The control socket `rctl apply` and `rctl status` use.
    #[arg(long, value_name = "PATH", default_value = rctl_agent::control::DEFAULT_SOCKET)]
    control: PathBuf,
    /// A group whose members may use the control socket too (besides root
    /// and the agent's user): they can switch and read the ruleset.
    #[arg(long, value_name = "GROUP")]
    control_group: Option<String>,
    /// Run without a control socket (then `rctl apply` cannot switch it).
    #[arg(long, conflicts_with = "control")]
    no_control: bool,
    /// A peer given priority on the SPOE and HTTP listeners: USER, @GROUP,
    /// or the IP address of a proxy on another host (repeatable). Root,
    /// the agent's user and the socket groups are always trusted.
    #[arg(long, value_name = "PEER")]
    trust_peer: Vec<String>,
    /// Connections each listener serves at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Connections one untrusted peer (a user on this host, or an address)
    /// may hold on a listener.
    #[arg(long, default_value_t = 256)]
    max_peer_connections: usize,
    /// Connections of each listener kept for trusted peers.
    #[arg(long, default_value_t = 256)]
    reserved_connections: usize,
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
    /// The largest the log file may grow (like 1GiB; 0: no bound); lines
    /// past it are counted and left out until the file is rotated.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_bytes)]
    log_max_size: u64,
    /// Decide, tag and count, but never enforce (whole ruleset).
    #[arg(long)]
    shadow: bool,
    /// Count the recent traffic by address, prefix, User-Agent and path,
    /// with its verdicts, for `rctl top`, on a thread of its own (off by
    /// default: the counting costs about a third more CPU in all, if
    /// little on the request path; see the agent manual).
    #[arg(long)]
    top: bool,
    /// Only this site's rules (and rules for all sites) apply.
    #[arg(long)]
    site: Option<String>,
    /// Most keys each rate limiter tracks.
    #[arg(long, default_value_t = 1 << 20)]
    max_keys: usize,
    /// HAProxy's stats socket: its count of requests let through without
    /// the agent's answer goes on /metrics (rctl_proxy_unchecked_*),
    /// read every 10 s.
    #[arg(long, value_name = "PATH")]
    haproxy_socket: Option<PathBuf>,
    /// Seconds between saves of bans and buckets (with a state directory).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    snapshot_every: u64,
}

/// A file mode in octal (`0660`, `660`).
fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| m & !0o666 == 0)
        .ok_or_else(|| {
            format!("`{s}` is not a socket mode: give octal read/write bits such as 0600 or 0660")
        })
}

/// A size in bytes (`0`, `512MiB`, `1GiB`).
fn parse_bytes(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    crate::common::parse_size(s).map(|b| b as u64)
}

impl ListenArgs {
    /// Only this site's rules apply (`--site`).
    pub fn site(&self) -> Option<&str> {
        self.site.as_deref()
    }

    /// The agent's configuration, starting from `artifact`, its bans and
    /// buckets kept in `state_dir` if given.
    pub fn config(self, artifact: PathBuf, state_dir: Option<PathBuf>) -> anyhow::Result<Config> {
        use rctl_agent::listen::Bind;
        use rctl_os::socket::Access;
        let a = self;
        let group = |flag: &str, g: &Option<String>| -> anyhow::Result<Option<u32>> {
            g.as_deref()
                .map(rctl_os::users::group_id)
                .transpose()
                .with_context(|| format!("--{flag}"))
        };
        let access = |gid: Option<u32>, mode: Option<u32>| Access {
            mode: mode.unwrap_or(if gid.is_some() { 0o660 } else { 0o600 }),
            group: gid,
        };
        let mut peers = rctl_agent::peers::PeerPolicy::default();
        for p in &a.trust_peer {
            peers
                .add(p)
                .map_err(|e| anyhow::anyhow!("--trust-peer {p}: {e}"))?;
        }
        let base = Bind {
            peers,
            limits: rctl_agent::peers::PeerLimits {
                total: a.max_connections,
                per_peer: a.max_peer_connections,
                reserved: a.reserved_connections,
            },
            ..Bind::default()
        };
        let mut c = Config::new(artifact);
        c.spoe = a.spoe;
        c.spoe_bind = base
            .clone()
            .with_access(access(group("spoe-group", &a.spoe_group)?, a.spoe_mode));
        c.spoe_config.idle_timeout = std::time::Duration::from_secs(a.spoe_idle_timeout.max(1));
        c.http = a.http;
        c.http_bind = base.with_access(access(group("http-group", &a.http_group)?, a.http_mode));
        c.http_limits.header_timeout = std::time::Duration::from_secs(a.http_idle_timeout.max(1));
        c.metrics = a.metrics;
        c.control = (!a.no_control).then_some(a.control);
        c.control_group = group("control-group", &a.control_group)?;
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
            l.max_bytes = (a.log_max_size > 0).then_some(a.log_max_size);
            l
        });
        c.shadow = a.shadow;
        c.top = a.top;
        c.site = a.site;
        c.max_keys_per_limiter = a.max_keys;
        c.haproxy_stats = a
            .haproxy_socket
            .map(|socket| rctl_agent::proxy_stats::Config {
                socket,
                table: rctl_emit::haproxy_spoe::UNCHECKED_TABLE.to_string(),
                every: std::time::Duration::from_secs(10),
            });
        c.persist = state_dir.map(|dir| rctl_agent::persist::Config {
            dir,
            every: std::time::Duration::from_secs(a.snapshot_every.max(1)),
        });
        Ok(c)
    }
}

/// Prints what a starting agent runs and listens on (`name`: `rctl
/// serve` or `rctl agent`), then `NAME: ready`.
pub fn print_ready(name: &str, server: &rctl_agent::serve::Server) {
    let g = server.judge().current();
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "{name}: generation {}, artifact {}, {}{}",
        g.number,
        short(&g.sha256),
        crate::common::count(g.engine.ruleset().rules.len(), "rule"),
        if server.judge().shadow() {
            ", shadow mode"
        } else {
            ""
        }
    );
    for b in server.bound() {
        let line = if let Some(w) = b.strip_prefix("warning ") {
            format!("rctl: warning: {w}")
        } else if let Some(n) = b.strip_prefix("note ") {
            format!("{name}: {n}")
        } else {
            format!("{name}: listening: {b}")
        };
        let _ = writeln!(err, "{}", term::text(&line));
    }
    let _ = writeln!(err, "{name}: ready");
}
