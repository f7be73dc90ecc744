//! The flags that read access logs (`--log` and its companions), shared
//! by every command that takes logs as input (`rctl dry-run`, `rctl
//! suggest`): the reading options they make (`rctl_logs::Options`), and
//! what makes a read fail.
//!
//! **The running agent as one more log** (`--agent SOCKET --for DUR`):
//! a command calls [`LogInputArgs::tap_agent`] once, before it reads,
//! and keeps the [`Spool`](crate::tap::Spool) it returns alive while it
//! reads. The call taps every request the agent decides for `DUR` into a
//! file in a private temporary directory (removed when the spool is
//! dropped) and adds it to `log`, with its format (webrequest, only the
//! headers the agent received) in the options [`LogInputArgs::options`]
//! makes; from there the spool is a regular log file, read as often as
//! the command needs.

use anyhow::{bail, Context, Result};
use clap::Args;
use rctl_logs::detect::Spec;
use rctl_logs::run::{Options, Summary};
use std::net::IpAddr;
use std::path::PathBuf;

/// How access logs are read.
#[derive(Args, Debug, Clone, Default)]
pub struct LogInputArgs {
    /// Access logs (files, directories of them, `-` for stdin; gzip and
    /// zstd read as they are), merged in time order.
    #[arg(long)]
    pub log: Vec<PathBuf>,
    /// The logs' format: haproxy-httplog, haproxy-clf, nginx-combined, nginx-main,
    /// varnishncsa, webrequest, or a custom one as haproxy:FORMAT, nginx:FORMAT,
    /// varnishncsa:FORMAT; detected from the first lines if left out.
    /// Parquet files are recognised as such and read as
    /// webrequest-parquet.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// HAProxy: the `capture request header` names, in order (comma
    /// separated or repeated), each as NAME:LEN with its `len` (the dry
    /// run judges a value that long only as far as its start tells: it
    /// may have been cut).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub capture_request_header: Vec<String>,
    /// HAProxy: read the capture names from this configuration.
    #[arg(long, value_name = "FILE")]
    pub haproxy_config: Option<PathBuf>,
    /// With --haproxy-config: the frontend whose captures the log holds
    /// (needed when several capture headers).
    #[arg(long, value_name = "NAME")]
    pub haproxy_frontend: Option<String>,
    /// Take the client address from this logged header (X-Client-IP,
    /// X-Forwarded-For: its last address not of a --trusted-proxy).
    #[arg(long, value_name = "HEADER")]
    pub client_ip_field: Option<String>,
    /// A proxy (address or CIDR) whose addresses in --client-ip-field are
    /// skipped from the right.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    pub trusted_proxy: Vec<String>,
    /// Fail (exit 1) when more lines than this cannot be judged.
    #[arg(long, value_name = "N")]
    pub max_bad_lines: Option<u64>,
    /// The longest line read (at most 1GiB); a longer one is reported and
    /// skipped.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = crate::common::parse_line_size)]
    pub max_line: usize,
    /// Also read the running agent's traffic: every request it decides
    /// in the next --for, through its control socket (as `rctl tap`),
    /// with only the headers the proxy sends it.
    #[arg(long, value_name = "SOCKET", requires = "tap_for")]
    pub agent: Option<PathBuf>,
    /// With --agent: for how long, like 60s or 5m (at most 1h).
    #[arg(long = "for", value_name = "DURATION", requires = "agent", value_parser = crate::top::seconds)]
    pub tap_for: Option<u64>,
    /// Judge each log's lines in time order within this window, like 60s
    /// or 5m (at most 1h): a server that writes a request's line when it
    /// ends, with the time it began (HAProxy's %tr), writes a slow request
    /// after later ones. Lines are held a window long (at most 256 MiB
    /// for each input open at once); with --follow, also at most a window
    /// of wall time after they came.
    #[arg(long, value_name = "DURATION", value_parser = crate::top::seconds)]
    pub reorder_window: Option<u64>,
    /// Inputs whose format is given whole (a tap's spool).
    #[arg(skip)]
    pub formats: Vec<(PathBuf, rctl_logs::Format)>,
}

fn cidr(s: &str) -> Result<(IpAddr, u8)> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = a
        .parse()
        .with_context(|| format!("--trusted-proxy {s}: not an address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .with_context(|| format!("--trusted-proxy {s}: the prefix length is 0 to {max}"))?,
        None => max,
    };
    Ok((ip, len))
}

impl LogInputArgs {
    /// The reading options these flags make.
    pub fn options(&self) -> Result<Options> {
        if self.log.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
            bail!("--log - is given more than once: standard input can be read only once");
        }
        let mut captures = self
            .capture_request_header
            .iter()
            .map(|c| rctl_logs::template::Capture::parse(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("--capture-request-header {e}"))?;
        if let Some(cfg) = &self.haproxy_config {
            let text = std::fs::read_to_string(cfg)
                .with_context(|| format!("cannot read {}", cfg.display()))?;
            let all = rctl_logs::haproxy::captures_in_config(&text);
            let with: Vec<_> = all.iter().filter(|(_, c)| !c.is_empty()).collect();
            let chosen =
                match &self.haproxy_frontend {
                    Some(n) => all.iter().find(|(f, _)| f == n).with_context(|| {
                        format!("{}: no frontend or listen section {n}", cfg.display())
                    })?,
                    None if with.len() <= 1 => match with.first() {
                        Some(c) => c,
                        None => &all.first().cloned().unwrap_or_default(),
                    },
                    None => bail!(
                    "{}: several sections capture headers ({}): name one with --haproxy-frontend",
                    cfg.display(),
                    with.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                ),
                };
            captures = chosen.1.clone();
        }
        let trusted = self
            .trusted_proxy
            .iter()
            .map(|s| cidr(s))
            .collect::<Result<Vec<_>>>()?;
        Ok(Options {
            format: self.log_format.clone(),
            spec: Spec { captures },
            client_ip_field: self.client_ip_field.clone().map(|h| (h, trusted)),
            max_line: self.max_line,
            sampled: None,
            formats: self.formats.clone(),
            reorder_window_ns: self.reorder_window.map(|s| s * 1_000_000_000),
        })
    }

    /// With `--agent`: taps the agent for `--for` into a spool, and
    /// adds the spool to the logs read (see the module's documentation);
    /// keep what it returns while reading. Nothing without `--agent`.
    pub fn tap_agent(&mut self) -> Result<Option<crate::tap::Spool>> {
        let (Some(socket), Some(seconds)) = (&self.agent, self.tap_for) else {
            return Ok(None);
        };
        if self.log.iter().any(|p| p.as_os_str() == "-") {
            bail!("--agent with --log -: read standard input or tap the agent, not both at once");
        }
        let spool = crate::tap::spool(socket, seconds)?;
        self.log.push(spool.path.clone());
        self.formats
            .push((spool.path.clone(), spool.format.clone()));
        Ok(Some(spool))
    }

    /// Reports what stopped the read of `summary` on stderr, and captured
    /// headers left unread for want of their names; true when it must
    /// fail: a read error, an input with no line of its format,
    /// more bad lines than `--max-bad-lines`.
    pub fn failed(&self, summary: &Summary) -> bool {
        let bad = summary.bad_lines();
        let mut failed = !summary.errors.is_empty();
        for e in &summary.errors {
            eprintln!("rctl: error: {e}; the report covers everything before it");
        }
        for (name, l) in &summary.inputs {
            if l.unnamed_captures > 0 {
                crate::common::warn(&format!("{name}: {}", unnamed_captures(l.unnamed_captures)));
            }
            if l.lines > 0 && l.judged == 0 {
                eprintln!(
                    "rctl: error: {name}: none of its {} lines is a {} line",
                    l.lines, l.format
                );
                failed = true;
            }
        }
        if let Some(max) = self.max_bad_lines {
            if bad > max {
                eprintln!("rctl: error: {bad} lines could not be judged (--max-bad-lines {max})");
                failed = true;
            }
        }
        failed
    }
}

/// What to say of `n` lines whose captured request headers were not read
/// for want of their names.
pub fn unnamed_captures(n: u64) -> String {
    format!(
        "{n} lines hold captured request headers {{…}} whose names were not given, so they were not read: name them with --haproxy-config (and --haproxy-frontend) or --capture-request-header"
    )
}
