//! The agent's side of `rctl apply` and `rctl status`, and `rctl serve`.
//!
//! `rctl apply` switches both planes, two-phase: the agent prepares the
//! new generation (nothing changes), then the XDP program is applied (if
//! `--iface`), then the agent commits (one atomic swap). Any failure
//! before the commit aborts the prepare: the agent keeps its generation.

use crate::host::{self, short, warn, HostPaths, XdpArgs};
use anyhow::{bail, Context, Result};
use rctl_agent::control::{AgentStatus, Client, ControlErrorKind, Prepared, DEFAULT_SOCKET};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How long rctl waits for one answer of the agent (a prepare of a large
/// ruleset takes seconds).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// The agent's control socket: `--agent`, else the default when it exists.
fn socket(flag: Option<PathBuf>) -> Option<(PathBuf, bool)> {
    match flag {
        Some(p) => Some((p, true)),
        None => {
            let p = PathBuf::from(DEFAULT_SOCKET);
            std::fs::symlink_metadata(&p).is_ok().then_some((p, false))
        }
    }
}

/// Whether the agent's default control socket exists.
pub fn default_socket_exists() -> bool {
    socket(None).is_some()
}

/// `rctl apply`: exit 0 when every plane runs the new generation, 1 when
/// one does but a step after its switch failed (the message says which),
/// 2 (an error) when nothing changed.
pub fn apply(
    artifact: &Path,
    xdp: Option<XdpArgs<'_>>,
    agent: Option<PathBuf>,
    site: Option<&str>,
    paths: &HostPaths,
) -> Result<ExitCode> {
    let bytes = rctl_compiler::files::read_binary(artifact, rctl_compiler::files::MAX_BINARY_BYTES)
        .with_context(|| format!("reading {}", artifact.display()))?;
    let shown = artifact.display();
    let xdp = xdp.as_ref();
    let Some((sock, named)) = socket(agent) else {
        // No agent: the packet plane alone, as before.
        let Some(x) = xdp else {
            bail!(
                "{shown}: nothing to apply it to: give --iface IF to enforce its packet plane \
                 with XDP, and/or run `rctl serve` for its HTTP plane (no agent's control \
                 socket at {DEFAULT_SOCKET}; --agent PATH names another)"
            );
        };
        let a = host::apply_xdp(&bytes, x, site, paths)
            .with_context(|| format!("{shown}: not applied"))?;
        return Ok(exit(host::report_incomplete(&a)));
    };
    let mut client = match Client::connect(&sock, ANSWER_TIMEOUT) {
        Ok(c) => c,
        Err(e) if !named && e.kind == ControlErrorKind::NotRunning && xdp.is_some() => {
            warn(&format!(
                "{e}; only the packet plane is switched (a stale socket file? remove it, or \
                 name the agent with --agent)"
            ));
            let x = xdp.context("no interface")?;
            let a = host::apply_xdp(&bytes, x, site, paths)
                .with_context(|| format!("{shown}: not applied"))?;
            return Ok(exit(host::report_incomplete(&a)));
        }
        Err(e) => bail!("{shown}: not applied: {e}"),
    };
    let t = std::time::Instant::now();
    let prepared = client
        .prepare(&bytes, site)
        .with_context(|| format!("{shown}: not applied: the agent at {}", sock.display()))?;
    let applied = match xdp {
        None => None,
        Some(x) => match host::apply_xdp(&bytes, x, site, paths) {
            Ok(a) => Some(a),
            Err(e) => {
                let kept = match client.abort(&prepared.id) {
                    Ok(()) => format!(
                        "the agent keeps generation {}",
                        prepared.generation.saturating_sub(1)
                    ),
                    Err(a) => format!(
                        "the agent's prepare could not be aborted ({a}); it keeps its \
                         generation and drops the prepare when this connection closes"
                    ),
                };
                return Err(e.context(format!("{shown}: not applied ({kept})")));
            }
        },
    };
    let incomplete = applied.as_ref().is_some_and(host::report_incomplete);
    match client.commit(&prepared.id) {
        Ok(c) => {
            print_agent(&sock, &prepared, c.replaced, t.elapsed());
            Ok(exit(incomplete))
        }
        Err(e) if applied.is_some() => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "rctl: error: the packet plane runs the new generation, but the agent at {} \
                 did not commit it ({}): it keeps its generation; apply again",
                sock.display(),
                crate::term::text(&e.message)
            );
            Ok(ExitCode::from(1))
        }
        Err(e) => bail!("{shown}: not applied: the agent at {}: {e}", sock.display()),
    }
}

fn exit(failed: bool) -> ExitCode {
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_agent(sock: &Path, p: &Prepared, replaced: u64, took: Duration) {
    let names = |v: Vec<String>| {
        if v.is_empty() {
            String::new()
        } else {
            format!(" ({})", v.join(", "))
        }
    };
    let carried = names(p.carried.carried.iter().map(|c| c.rule.clone()).collect());
    let fresh = names(
        p.carried
            .fresh
            .iter()
            .map(|f| format!("{}: {}", f.rule, f.why.describe()))
            .collect(),
    );
    for w in &p.warnings {
        warn(&format!("agent: {w}"));
    }
    let line = format!(
        "agent at {}: generation {} replaced generation {replaced}, artifact {}, {} rules; \
         rate-limit state carried for {} rules{carried}, fresh for {}{fresh}; prepared in {} ms, \
         switched in {:.2?}",
        sock.display(),
        p.generation,
        short(&p.artifact_sha256),
        p.rules,
        p.carried.carried.len(),
        p.carried.fresh.len(),
        p.prepare_ms,
        took
    );
    let _ = writeln!(std::io::stdout().lock(), "{}", crate::term::text(&line));
}

/// What `rctl status` learned of the agent.
pub struct Seen {
    socket: PathBuf,
    status: Result<AgentStatus, String>,
}

impl Seen {
    /// Asks the agent at `--agent`, or at the default socket when it
    /// exists and no `--iface` narrows the question; `None` when there is
    /// no agent to show.
    pub fn ask(flag: Option<PathBuf>, iface: Option<&str>) -> Option<Seen> {
        let (socket, named) = socket(flag)?;
        if iface.is_some() && !named {
            return None;
        }
        let status = Client::connect(&socket, Duration::from_secs(10))
            .and_then(|mut c| c.status())
            .map_err(|e| e.message);
        Some(Seen { socket, status })
    }

    /// Whether the agent answered.
    pub fn serving(&self) -> bool {
        self.status.is_ok()
    }

    /// The JSON form: `{"socket", "serving", "status"|"error"}`.
    pub fn json(&self) -> serde_json::Value {
        match &self.status {
            Ok(s) => serde_json::json!({"socket": self.socket, "serving": true, "status": s}),
            Err(e) => serde_json::json!({"socket": self.socket, "serving": false, "error": e}),
        }
    }

    /// The text form.
    pub fn text(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let sock = self.socket.display();
        let s = match &self.status {
            Ok(s) => s,
            Err(e) => {
                return writeln!(
                    out,
                    "agent at {sock}: NOT SERVING: {}",
                    crate::term::text(e)
                );
            }
        };
        let site = s.site.as_deref().unwrap_or("all sites");
        writeln!(
            out,
            "agent at {sock}: serving{}: generation {}, artifact {}, installed at {} (unix), \
             {} rules, {}, up {} s",
            if s.shadow { " in shadow mode" } else { "" },
            s.generation,
            s.artifact_sha256,
            s.installed_unix,
            s.rules,
            crate::term::text(site),
            s.uptime_s
        )?;
        writeln!(out, "  listening: {}", s.listeners.join(", "))?;
        if let Some(f) = &s.fleet {
            crate::fleet::status_text(f, out)?;
        }
        let c = &s.counts;
        let by = |m: &std::collections::BTreeMap<String, u64>| {
            ["pass", "allow", "deny", "throttle", "drop"]
                .iter()
                .map(|k| format!("{} {k}", m.get(*k).copied().unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(out, "  requests: {}", by(&c.requests))?;
        if s.shadow {
            writeln!(out, "  would have enforced: {}", by(&c.shadowed))?;
        }
        let errors: Vec<String> = c.errors.iter().map(|(k, v)| format!("{v} {k}")).collect();
        writeln!(
            out,
            "  not checked (refused or failed): {}",
            if errors.is_empty() {
                "none".to_string()
            } else {
                errors.join(", ")
            }
        )?;
        writeln!(
            out,
            "  reloads: {} ok, {} failed{}",
            c.reloads_ok,
            c.reloads_failed,
            s.pending
                .as_ref()
                .map(|p| format!("; a prepare pending for {} s", p.age_s))
                .unwrap_or_default()
        )?;
        if let Some(l) = &s.log {
            writeln!(
                out,
                "  log: {} lines written, {} suppressed by the per-rule allowance, {} dropped",
                l.written, l.suppressed, l.dropped
            )?;
        }
        for l in &c.limiters {
            writeln!(
                out,
                "  limiter {}: {} keys of {}, {} banned",
                crate::term::text(&l.rule),
                l.keys,
                l.capacity,
                l.banned
            )?;
        }
        for r in &c.rules {
            let v: Vec<String> = r.verdicts.iter().map(|(k, n)| format!("{n} {k}")).collect();
            writeln!(
                out,
                "  {:>12} matches  {}  ({})",
                r.matches,
                crate::term::text(&r.rule),
                v.join(", ")
            )?;
        }
        Ok(())
    }
}
