//! Whether requests are checked: what `rctl status` and `rctl fleet
//! status` judge from what they read, graded as monitoring grades it
//! (Nagios/Icinga plugin states), with the exit codes and the one-line
//! `--check` form those systems read.
//!
//! | state | exit | when |
//! |---|---|---|
//! | OK | 0 | every plane shown enforces what was installed, and nothing went unchecked |
//! | WARNING | 1 | rules are enforced, but not as meant: a proxy configuration stale for the ruleset, shadow mode, shared limits counted per host, state not saved, a host lagging |
//! | CRITICAL | 2 | requests go unchecked, or could: the agent is down, HAProxy let requests through unchecked in the last minute, XDP is not attached where it should be, a plane runs another generation than the one installed, a host failed or is down, no host reported |
//! | UNKNOWN | 3 | what would tell could not be read (no permission on a socket, HAProxy's stats socket unreachable, etcd unreadable) |
//!
//! ```
//! use rctl_agent::health::{Health, Level};
//! let mut h = Health::default();
//! h.add(Level::Warning, "shadow mode: nothing is enforced");
//! h.add(Level::Critical, "the agent at /run/rctl/agent.sock is down");
//! assert_eq!(h.exit_code(), 2);
//! assert_eq!(
//!     h.check_line("RCTL", "all checked"),
//!     "RCTL CRITICAL - the agent at /run/rctl/agent.sock is down; also: shadow mode: nothing is enforced"
//! );
//! ```

use crate::control::{AgentStatus, ControlError, ControlErrorKind};
use crate::haproxy_stats::{StatsError, Unchecked};
use std::fmt;

/// A plugin state. Ordered by how bad it is: a critical finding hides
/// an unknown one, an unknown one a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// All is checked.
    Ok,
    /// Enforced, but not as meant.
    Warning,
    /// What would tell could not be read.
    Unknown,
    /// Requests go unchecked.
    Critical,
}

impl Level {
    /// The plugin exit code: 0, 1, 2 or 3.
    pub fn exit_code(self) -> u8 {
        match self {
            Level::Ok => 0,
            Level::Warning => 1,
            Level::Critical => 2,
            Level::Unknown => 3,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Ok => "OK",
            Level::Warning => "WARNING",
            Level::Critical => "CRITICAL",
            Level::Unknown => "UNKNOWN",
        })
    }
}

/// One thing found, and how bad it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// How bad.
    #[serde(serialize_with = "level_name")]
    pub level: Level,
    /// What, in one sentence.
    pub what: String,
}

fn level_name<S: serde::Serializer>(l: &Level, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&l.to_string())
}

/// Everything found, in the order found, and the figures for the
/// `--check` line's performance data.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// What was found (empty: all is well).
    pub findings: Vec<Finding>,
    /// `name=value` figures.
    pub perf: Vec<(String, u64)>,
}

impl Health {
    /// Records a finding.
    pub fn add(&mut self, level: Level, what: impl Into<String>) {
        self.findings.push(Finding {
            level,
            what: what.into(),
        });
    }

    /// Records a figure for the performance data.
    pub fn figure(&mut self, name: &str, value: u64) {
        self.perf.push((name.to_string(), value));
    }

    /// The worst level found (OK when nothing was).
    pub fn level(&self) -> Level {
        self.findings
            .iter()
            .map(|f| f.level)
            .max()
            .unwrap_or(Level::Ok)
    }

    /// The exit code for the worst level.
    pub fn exit_code(&self) -> u8 {
        self.level().exit_code()
    }

    /// The plugin output: `SERVICE STATE - the worst finding; also: the
    /// others | figures`, on one line (`ok` is said when all is well).
    pub fn check_line(&self, service: &str, ok: &str) -> String {
        let mut sorted: Vec<&Finding> = self.findings.iter().collect();
        sorted.sort_by_key(|f| std::cmp::Reverse(f.level));
        let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut line = format!("{service} {} - ", self.level());
        match sorted.split_first() {
            None => line.push_str(ok),
            Some((first, rest)) => {
                line.push_str(&one_line(&first.what));
                if !rest.is_empty() {
                    let rest: Vec<String> = rest.iter().map(|f| one_line(&f.what)).collect();
                    line.push_str("; also: ");
                    line.push_str(&rest.join("; "));
                }
            }
        }
        // `|` starts the performance data: none may be in the text.
        let mut line = line.replace('|', "/");
        if !self.perf.is_empty() {
            let perf: Vec<String> = self.perf.iter().map(|(k, v)| format!("{k}={v}")).collect();
            line.push_str(" | ");
            line.push_str(&perf.join(" "));
        }
        line
    }

    /// What the agent's answer (or its absence) at `socket` says.
    pub fn agent(&mut self, socket: &str, answer: &Result<AgentStatus, ControlError>) {
        let s = match answer {
            Ok(s) => s,
            Err(e) if e.kind == ControlErrorKind::NotRunning => {
                return self.add(
                    Level::Critical,
                    format!(
                        "the agent at {socket} is down ({}): the proxies serve unchecked",
                        e.message
                    ),
                );
            }
            Err(e) => {
                return self.add(
                    Level::Unknown,
                    format!("the agent at {socket} could not be asked: {}", e.message),
                );
            }
        };
        if s.shadow {
            self.add(
                Level::Warning,
                "the agent runs in shadow mode: it decides and counts, but enforces nothing",
            );
        }
        for p in &s.proxies {
            for stale in &p.stale {
                self.add(Level::Warning, stale.clone());
            }
        }
        if let Some(p) = &s.limit_state {
            if let Some(e) = &p.save_error {
                self.add(
                    Level::Warning,
                    format!("bans and buckets are not saved ({e}): a restart forgets them"),
                );
            }
            if let Some(e) = &p.artifact_error {
                self.add(
                    Level::Critical,
                    format!(
                        "the agent runs generation {} but could not install its artifact ({e}): \
                         a restart would start from another",
                        s.generation
                    ),
                );
            }
        }
        if let Some(f) = &s.fleet {
            if !f.etcd.connected {
                self.add(
                    Level::Warning,
                    format!(
                        "the fleet agent is not connected to etcd ({}): it enforces generation {} \
                         and sees no new one",
                        f.etcd.error.as_deref().unwrap_or("no answer"),
                        f.generation
                    ),
                );
            }
            match f.state.as_str() {
                "failed" => self.add(
                    Level::Critical,
                    format!(
                        "the fleet agent failed to apply generation {}: {}",
                        f.target_generation,
                        f.last_error.as_deref().unwrap_or("see its log")
                    ),
                ),
                "ok" | "waiting"
                    if f.generation == f.target_generation || f.target_generation == 0 => {}
                _ => self.add(
                    Level::Warning,
                    format!(
                        "the fleet agent runs generation {}, its target is {} ({})",
                        f.generation, f.target_generation, f.state
                    ),
                ),
            }
            if let Some(sh) = &f.shared {
                if !sh.online {
                    self.add(
                        Level::Warning,
                        format!(
                            "shared limits are counted per host: Redis {} is away",
                            sh.redis
                        ),
                    );
                }
            }
        }
        self.figure("generation", s.generation);
    }

    /// What HAProxy's table of unchecked requests (at `socket`) says: any
    /// request let through unchecked in the last minute is critical.
    pub fn unchecked(&mut self, socket: &str, table: &Result<Vec<Unchecked>, StatsError>) {
        let v = match table {
            Ok(v) => v,
            Err(e) => {
                return self.add(
                    Level::Unknown,
                    format!("HAProxy's unchecked requests could not be read: {e}"),
                )
            }
        };
        let minute: u64 = v.iter().map(|u| u.per_minute).sum();
        let total: u64 = v.iter().map(|u| u.requests).sum();
        self.figure("unchecked_last_minute", minute);
        self.figure("unchecked", total);
        if minute > 0 {
            let why: Vec<String> = v
                .iter()
                .filter(|u| u.per_minute > 0)
                .map(|u| format!("{} {}", u.per_minute, u.meaning))
                .collect();
            self.add(
                Level::Critical,
                format!(
                    "HAProxy at {socket} let {minute} requests through unchecked in the last \
                     minute ({})",
                    why.join(", ")
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unchecked(error: u64, per_minute: u64) -> Unchecked {
        Unchecked {
            error,
            meaning: crate::haproxy_stats::meaning(error),
            requests: per_minute * 10,
            per_minute,
        }
    }

    #[test]
    fn the_worst_finding_decides_and_leads_the_line() {
        let mut h = Health::default();
        assert_eq!((h.level(), h.exit_code()), (Level::Ok, 0));
        assert_eq!(h.check_line("RCTL", "all checked"), "RCTL OK - all checked");
        h.add(Level::Unknown, "stats | unreadable");
        assert_eq!(h.exit_code(), 3);
        h.add(Level::Warning, "stale\n  config");
        assert_eq!(h.exit_code(), 3, "unknown is worse than a warning");
        h.add(Level::Critical, "down");
        h.figure("unchecked", 4);
        assert_eq!(
            h.check_line("RCTL", "x"),
            "RCTL CRITICAL - down; also: stats / unreadable; stale config | unchecked=4"
        );
    }

    #[test]
    fn unchecked_requests_in_the_last_minute_are_critical_older_ones_not() {
        let mut h = Health::default();
        h.unchecked("/s", &Ok(vec![unchecked(2, 0)]));
        assert_eq!(h.level(), Level::Ok);
        h.unchecked("/s", &Ok(vec![unchecked(2, 3), unchecked(1, 0)]));
        assert_eq!(h.level(), Level::Critical);
        assert!(
            h.findings[0].what.contains("3 requests through unchecked"),
            "{:?}",
            h.findings
        );
    }

    #[test]
    fn an_agent_that_is_not_running_is_critical_one_not_asked_unknown() {
        let mut h = Health::default();
        let e = |kind| ControlError {
            kind,
            message: "m".into(),
        };
        h.agent("/a", &Err(e(ControlErrorKind::NotRunning)));
        assert_eq!(h.level(), Level::Critical);
        let mut h = Health::default();
        h.agent("/a", &Err(e(ControlErrorKind::Io)));
        assert_eq!(h.level(), Level::Unknown);
    }
}
