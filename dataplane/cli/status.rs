//! `rctl status`: what rctl enforces where. Per interface, what the
//! packet plane's state says (read by `rctl_loader::host::status`); the
//! agent's status over its control socket, with the fleet agent's part;
//! and, with `--haproxy-socket`, the requests HAProxy let through
//! unchecked (read by `rctl_agent::haproxy_stats`). This module asks and
//! renders, as text or JSON.
//!
//! The exit code is the monitoring plugins' (`rctl_agent::health`): 0
//! all is checked, 1 a warning (enforced, not as meant), 2 critical
//! (requests go, or may go, unchecked), 3 unknown (what would tell could
//! not be read). `--check` prints only the one-line plugin output.

use crate::agent_socket;
use crate::common::{short, warn, Format};
use crate::hostargs::{clock_name, mode_name, HostPaths};
use crate::term;
use anyhow::Result;
use rctl_agent::control::{AgentStatus, Client, ControlError, FleetStatus};
use rctl_agent::haproxy_stats::{self, StatsError, Unchecked};
use rctl_agent::health::{Health, Level};
use rctl_emit::haproxy_spoe::UNCHECKED_TABLE;
use rctl_loader::host::{self, Status};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `rctl status`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// Only this interface (the agent is then shown only with --agent).
    #[arg(long)]
    iface: Option<String>,
    /// The agent's control socket (default: /run/rctl/agent.sock when
    /// it exists).
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// HAProxy's stats socket: also show the requests HAProxy let
    /// through unchecked (the table `rctl emit haproxy-spoe` writes).
    #[arg(long, value_name = "PATH")]
    haproxy_socket: Option<PathBuf>,
    /// Print one line for a Nagios/Icinga check (`RCTL OK - …`), with the
    /// same exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    host: HostPaths,
}

/// `rctl status`.
pub fn run(a: Args) -> Result<ExitCode> {
    let iface = a.iface.as_deref();
    let agent = Agent::ask(a.agent, iface);
    let proxy = a.haproxy_socket.map(Haproxy::ask);
    let mut health = Health::default();
    let all = match host::status(&a.host.paths(), iface) {
        Ok(all) => all,
        // A host may run only the HTTP plane: the agent is still shown.
        Err(e) if (agent.is_some() || proxy.is_some()) && iface.is_none() => {
            if !a.check {
                warn(&format!("packet plane: {e}"));
            }
            Vec::new()
        }
        Err(e) if a.check => {
            health.add(Level::Unknown, format!("the packet plane's state: {e}"));
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    judge(&mut health, &all, agent.as_ref(), proxy.as_ref());
    if a.check {
        let line = health.check_line("RCTL", &ok_summary(&all, agent.as_ref(), proxy.as_ref()));
        writeln!(std::io::stdout().lock(), "{}", term::text(&line))?;
        return Ok(ExitCode::from(health.exit_code()));
    }
    for s in &all {
        for p in &s.problems {
            warn(&format!("{}: {p}", s.iface));
        }
    }
    let mut out = std::io::stdout().lock();
    if a.format == Format::Json {
        let v = serde_json::json!({
            "interfaces": all,
            "agent": agent.as_ref().map(Agent::json),
            "haproxy": proxy.as_ref().map(Haproxy::json),
            "health": {
                "state": health.level().to_string(),
                "findings": health.findings,
            },
        });
        writeln!(out, "{}", term::json(&serde_json::to_string_pretty(&v)?))?;
    } else {
        if all.is_empty() {
            writeln!(out, "rctl is not attached to any interface")?;
        }
        for s in &all {
            interface_text(&mut out, s)?;
        }
        if let Some(a) = &agent {
            a.text(&mut out)?;
        }
        if let Some(p) = &proxy {
            p.text(&mut out)?;
        }
        writeln!(out, "state: {}", health.level())?;
        for f in &health.findings {
            writeln!(out, "  {}: {}", f.level, term::text(&f.what))?;
        }
    }
    Ok(ExitCode::from(health.exit_code()))
}

/// Grades what was read (`rctl_agent::health`): each interface here,
/// the agent's and HAProxy's there.
fn judge(h: &mut Health, all: &[Status], agent: Option<&Agent>, proxy: Option<&Haproxy>) {
    for s in all {
        if !s.enforcing {
            let why = s.problems.first().map_or("see rctl status", String::as_str);
            h.add(
                Level::Critical,
                format!(
                    "XDP is not enforcing on {} where rctl's state says it should: {why}",
                    s.iface
                ),
            );
        } else if s.runs_installed == Some(false) {
            h.add(
                Level::Critical,
                format!(
                    "the packet plane on {} runs another generation than the one installed ({})",
                    s.iface,
                    s.artifact.display()
                ),
            );
        } else {
            for p in &s.problems {
                h.add(Level::Warning, format!("{}: {p}", s.iface));
            }
        }
    }
    if let Some(a) = agent {
        h.agent(&a.socket.display().to_string(), &a.status);
        // Both planes are switched together: one that runs another
        // ruleset is the rest of an apply that failed half-way.
        if let Ok(st) = &a.status {
            for s in all.iter().filter(|s| s.enforcing) {
                if let Some(at) = &s.attached {
                    if at.artifact_sha256 != st.artifact_sha256 {
                        h.add(
                            Level::Critical,
                            format!(
                                "the packet plane on {} runs artifact {}, the agent {}: apply \
                                 one to both",
                                s.iface,
                                short(&at.artifact_sha256),
                                short(&st.artifact_sha256)
                            ),
                        );
                    }
                }
            }
        }
    }
    if let Some(p) = proxy {
        h.unchecked(&p.socket.display().to_string(), &p.result);
    }
    if all.is_empty() && agent.is_none() && proxy.is_none() {
        h.add(
            Level::Critical,
            "rctl enforces nothing here: no interface has its program and no agent was found",
        );
    }
}

/// What an OK line says.
fn ok_summary(all: &[Status], agent: Option<&Agent>, proxy: Option<&Haproxy>) -> String {
    let mut parts = Vec::new();
    for s in all {
        if let Some(a) = &s.attached {
            parts.push(format!(
                "XDP on {} runs generation {}",
                s.iface, a.generation
            ));
        }
    }
    if let Some(Ok(st)) = agent.map(|a| &a.status) {
        parts.push(format!(
            "the agent runs generation {} ({}, {})",
            st.generation,
            short(&st.artifact_sha256),
            crate::common::count(st.rules, "rule")
        ));
    }
    if proxy.is_some() {
        parts.push("HAProxy let nothing through unchecked in the last minute".into());
    }
    parts.join("; ")
}

/// One interface, as text.
fn interface_text(out: &mut impl Write, s: &Status) -> std::io::Result<()> {
    let indent = if s.enforcing {
        write!(out, "{}: enforcing: ", s.iface)?;
        ""
    } else {
        let why = s
            .problems
            .first()
            .map_or("see the warnings", String::as_str);
        writeln!(out, "{}: NOT ENFORCING: {why}", s.iface)?;
        write!(out, "  what is pinned: ")?;
        "  "
    };
    let Some(a) = &s.attached else {
        return writeln!(out, "not known (no metadata or artifact matches it)");
    };
    writeln!(
        out,
        "{} mode, {} clock, generation {}, artifact {}, applied at {} (unix)",
        mode_name(a.mode),
        clock_name(a.clock),
        a.generation,
        a.artifact_sha256,
        a.applied_unix
    )?;
    writeln!(
        out,
        "{indent}  {} terms; {} IPv4 and {} IPv6 prefixes; rate-limit buckets: {} of {} \
         occupied, {} live, {} banned",
        a.terms,
        a.prefixes.0,
        a.prefixes.1,
        s.buckets_used,
        s.buckets_capacity,
        s.buckets_live,
        s.buckets_banned
    )?;
    for c in &s.counters {
        if let (Some(p), Some(b)) = (c.packets, c.bytes) {
            if p > 0 {
                writeln!(
                    out,
                    "{indent}  {p:>12} packets {b:>14} bytes  {}",
                    term::text(&c.rule)
                )?;
            }
        }
    }
    let uncounted = s.counters.iter().filter(|c| c.packets.is_none()).count();
    if uncounted > 0 {
        writeln!(
            out,
            "{indent}  {uncounted} rules have no counter (the program counts the first {}; \
             the rest are HTTP rules)",
            s.counters.len() - uncounted
        )?;
    }
    Ok(())
}

/// What `rctl status` learned of the agent.
struct Agent {
    socket: PathBuf,
    status: Result<AgentStatus, ControlError>,
}

impl Agent {
    /// Asks the agent at `--agent`, or at the default socket when it
    /// exists and no `--iface` narrows the question; `None` when there is
    /// no agent to show.
    fn ask(flag: Option<PathBuf>, iface: Option<&str>) -> Option<Agent> {
        let (socket, named) = agent_socket::find(flag)?;
        if iface.is_some() && !named {
            return None;
        }
        let status = Client::connect(&socket, Duration::from_secs(10)).and_then(|mut c| c.status());
        Some(Agent { socket, status })
    }

    /// The JSON form: `{"socket", "serving", "status"|"error"}`.
    fn json(&self) -> serde_json::Value {
        match &self.status {
            Ok(s) => serde_json::json!({"socket": self.socket, "serving": true, "status": s}),
            Err(e) => {
                serde_json::json!({"socket": self.socket, "serving": false, "error": e.message})
            }
        }
    }

    /// The text form.
    fn text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let sock = self.socket.display();
        let s = match &self.status {
            Ok(s) => s,
            Err(e) => {
                return writeln!(
                    out,
                    "agent at {sock}: NOT SERVING: {}",
                    term::text(&e.message)
                );
            }
        };
        let site = s.site.as_deref().unwrap_or("all sites");
        writeln!(
            out,
            "agent at {sock}: serving{}: generation {}, artifact {}, installed {} ({}), {}, {}, \
             up {} s",
            if s.shadow { " in shadow mode" } else { "" },
            s.generation,
            short(&s.artifact_sha256),
            rctl_os::clock::rfc3339(s.installed_unix),
            rctl_os::clock::ago(s.installed_unix, rctl_os::clock::now_unix()),
            crate::common::count(s.rules, "rule"),
            term::text(site),
            s.uptime_s
        )?;
        writeln!(out, "  listening: {}", s.listeners.join(", "))?;
        if let Some(f) = &s.fleet {
            fleet_text(f, out)?;
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
                term::text(&l.rule),
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
                term::text(&r.rule),
                v.join(", ")
            )?;
        }
        Ok(())
    }
}

/// The fleet agent's part of the agent's status, as text.
fn fleet_text(f: &FleetStatus, out: &mut impl Write) -> std::io::Result<()> {
    let s = |v: &Option<String>| term::text(v.as_deref().unwrap_or("-")).into_owned();
    let etcd = &f.etcd;
    writeln!(
        out,
        "  fleet: host {}, site {}, {} generation {} ({}), target generation {}{}",
        term::text(&f.host),
        s(&f.site),
        if etcd.connected {
            "etcd connected,".to_string()
        } else {
            format!("etcd NOT CONNECTED ({}),", s(&etcd.error))
        },
        f.generation,
        term::text(&f.state),
        f.target_generation,
        f.iface
            .as_ref()
            .map(|i| format!(", packet plane on {i}"))
            .unwrap_or_default()
    )?;
    if let Some(e) = &f.last_error {
        writeln!(out, "  fleet: {}", term::text(e))?;
    }
    if let Some(e) = &etcd.report_error {
        writeln!(
            out,
            "  fleet: this host's report is not in etcd: {}",
            term::text(e)
        )?;
    }
    if let Some(sh) = &f.shared {
        let offline: u64 = sh.limiters.iter().map(|l| l.offline_hits).sum();
        writeln!(
            out,
            "  shared limits: Redis {} {} ({} hosts live), sync every {} ms, {} syncs ok, {} \
             failed; {offline} requests decided per host while Redis was away{}",
            term::text(&sh.redis),
            if sh.online {
                "online"
            } else {
                "AWAY: per-host limits"
            },
            sh.hosts,
            sh.sync_ms,
            sh.syncs_ok,
            sh.syncs_failed,
            sh.last_error
                .as_ref()
                .map(|e| format!(" (last error: {})", term::text(e)))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// What `rctl status` learned from HAProxy.
struct Haproxy {
    socket: PathBuf,
    result: Result<Vec<Unchecked>, StatsError>,
}

impl Haproxy {
    /// Asks HAProxy's stats socket at `socket` for the unchecked table.
    fn ask(socket: PathBuf) -> Haproxy {
        let result = haproxy_stats::unchecked(&socket, UNCHECKED_TABLE);
        Haproxy { socket, result }
    }

    /// The JSON form: `{"socket", "table", "unchecked", "by_error"}` or
    /// `{"socket", "error"}`.
    fn json(&self) -> serde_json::Value {
        match &self.result {
            Ok(v) => serde_json::json!({
                "socket": self.socket,
                "table": UNCHECKED_TABLE,
                "unchecked": v.iter().map(|u| u.requests).sum::<u64>(),
                "by_error": v.iter().map(|u| serde_json::json!({
                    "error": u.error,
                    "meaning": u.meaning,
                    "requests": u.requests,
                    "per_minute": u.per_minute,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({"socket": self.socket, "error": e.to_string()}),
        }
    }

    /// The text form.
    fn text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let sock = self.socket.display();
        match &self.result {
            Err(e) => writeln!(out, "haproxy at {sock}: {}", term::text(&e.to_string())),
            Ok(v) => {
                let total: u64 = v.iter().map(|u| u.requests).sum();
                writeln!(
                    out,
                    "haproxy at {sock}: {total} requests not checked by the agent (served: fail open)"
                )?;
                for u in v {
                    writeln!(
                        out,
                        "  error {:>3} {:<48} {:>10} requests, {} in the last minute",
                        u.error, u.meaning, u.requests, u.per_minute
                    )?;
                }
                Ok(())
            }
        }
    }
}
