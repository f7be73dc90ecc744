//! `rctl fleet status`: what each host runs against what it should run.
//!
//! A host's target is the newer of `P/current` and its site's pointer.
//! Its state, from its report under its lease (`P/hosts/H`) or, once the
//! lease has expired, its last report (`P/seen/H`):
//!
//! - `ok`: it runs the target's artifact at the target's generation;
//! - `lagging`: alive, not on the target yet, no error (an apply in
//!   progress, or etcd just switched);
//! - `failed`: alive, and the target could not be applied (its error
//!   says why: a corrupt chunk, another format version, an apply error);
//!   it keeps running a complete earlier generation, or runs the target
//!   in user space but its packet plane could not be applied;
//! - `down`: no live report (stopped, crashed, or cut off from etcd);
//!   what it ran last is shown;
//! - `no target`: nothing was pushed for it;
//! - `unreadable`: its report is not rctl's (a bad write to etcd), so
//!   nobody can say what it runs.
//!
//! A pointer that is not rctl's is listed under `unreadable`, and the
//! hosts it would target are `failed` with why: the status goes on for
//! everything else, and never counts as converged.

use crate::error::{ErrorKind, FleetError};
use crate::etcd::{newer, now_unix, Current, HostReport, Layout, Target};
use etcd_client::{Client, GetOptions};
use serde::Serialize;
use std::collections::BTreeMap;

/// One host's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostStatus {
    /// The host.
    pub host: String,
    /// Its site.
    pub site: Option<String>,
    /// `ok`, `lagging`, `failed`, `down` or `no target`.
    pub state: String,
    /// Whether its lease is alive.
    pub live: bool,
    /// The generation it runs.
    pub generation: i64,
    /// The artifact it runs (hex).
    pub artifact_sha256: String,
    /// The generation it should run.
    pub target_generation: i64,
    /// The artifact it should run.
    pub target_sha256: String,
    /// When it applied what it runs.
    pub applied_unix: u64,
    /// Seconds since its target was pushed, while it is not on it.
    pub lag_s: u64,
    /// Why it is not on its target.
    pub last_error: Option<String>,
    /// Its last report.
    pub reported_unix: u64,
    /// The interface of its packet plane.
    pub iface: Option<String>,
}

/// What `rctl fleet status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetStatus {
    /// The pointer for every site, if any.
    pub all: Option<PointerStatus>,
    /// The pointers of sites.
    pub sites: BTreeMap<String, PointerStatus>,
    /// Every host that ever reported, by name.
    pub hosts: Vec<HostStatus>,
    /// Hosts per state.
    pub counts: BTreeMap<String, usize>,
    /// Keys holding something that is not rctl's (a pointer or a
    /// report), with why.
    pub unreadable: Vec<Unreadable>,
}

/// A key whose value rctl cannot read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    /// The etcd key.
    pub key: String,
    /// Why it cannot be read.
    pub error: String,
}

/// A pointer, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PointerStatus {
    /// Its generation.
    pub generation: i64,
    /// The artifact.
    pub sha256: String,
    /// When it was pushed.
    pub pushed_unix: u64,
    /// By whom.
    pub pushed_by: String,
    /// For a rollback: how far back.
    pub rollback: Option<usize>,
}

impl From<&Current> for PointerStatus {
    fn from(c: &Current) -> PointerStatus {
        PointerStatus {
            generation: c.generation,
            sha256: c.pointer.sha256.clone(),
            pushed_unix: c.pointer.pushed_unix,
            pushed_by: c.pointer.pushed_by.clone(),
            rollback: c.pointer.rollback,
        }
    }
}

impl FleetStatus {
    /// Whether every host runs its target, and everything could be read
    /// (false when no host reported: nothing is known to run it).
    pub fn converged(&self) -> bool {
        self.health().level() == rctl_agent::health::Level::Ok
    }

    /// The fleet graded as monitoring grades it: no host, a host down or
    /// failed, critical; one lagging, or nothing pushed, a warning; keys
    /// that cannot be read, unknown.
    pub fn health(&self) -> rctl_agent::health::Health {
        use rctl_agent::health::{Health, Level};
        let mut h = Health::default();
        if self.hosts.is_empty() {
            h.add(
                Level::Critical,
                "no host reported: no agent runs, or none reaches etcd",
            );
        }
        if self.all.is_none() && self.sites.is_empty() {
            h.add(Level::Warning, "nothing has been pushed (rctl push)");
        }
        let now = rctl_os::clock::now_unix();
        for x in &self.hosts {
            match x.state.as_str() {
                "ok" => {}
                "down" => h.add(
                    Level::Critical,
                    format!(
                        "{} is down (its last report: {})",
                        x.host,
                        rctl_os::clock::ago(x.reported_unix, now)
                    ),
                ),
                "failed" => h.add(
                    Level::Critical,
                    format!(
                        "{} failed to apply generation {}: {}",
                        x.host,
                        x.target_generation,
                        x.last_error.as_deref().unwrap_or("see its log")
                    ),
                ),
                "no target" => h.add(
                    Level::Warning,
                    format!("{} has no target (nothing pushed for its site)", x.host),
                ),
                _ => h.add(
                    Level::Warning,
                    format!(
                        "{} runs generation {}, its target {} (for {} s)",
                        x.host, x.generation, x.target_generation, x.lag_s
                    ),
                ),
            }
        }
        for u in &self.unreadable {
            h.add(
                Level::Unknown,
                format!("{} cannot be read: {}", u.key, u.error),
            );
        }
        h.figure("hosts", self.hosts.len() as u64);
        let ok = self.hosts.iter().filter(|x| x.state == "ok").count();
        h.figure("ok", ok as u64);
        h
    }
}

/// Reads the pointers and every host's report.
pub async fn read(client: &Client, layout: &Layout) -> Result<FleetStatus, FleetError> {
    let mut c = client.clone();
    // One revision for everything, so the picture is consistent.
    let global = c.get(layout.pointer(&Target::All), None).await?;
    let rev = global.header().map_or(0, |h| h.revision());
    let at = || Some(GetOptions::new().with_prefix().with_revision(rev));
    let mut unreadable = Vec::new();
    let mut bad = |key: &[u8], error: String| {
        unreadable.push(Unreadable {
            key: String::from_utf8_lossy(key).into_owned(),
            error,
        });
    };
    let mut all_broken = None;
    let all = match global.kvs().first() {
        Some(kv) => match Current::parse(Target::All, kv.value(), kv.mod_revision()) {
            Ok(c) => Some(c),
            Err(e) => {
                all_broken = Some(e.to_string());
                bad(kv.key(), e.to_string());
                None
            }
        },
        None => None,
    };
    let mut sites = BTreeMap::new();
    let mut broken_sites = BTreeMap::new();
    for kv in c.get(layout.sites(), at()).await?.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let Some(site) = layout.site_of_pointer(&key) else {
            continue;
        };
        match Current::parse(Target::Site(site.into()), kv.value(), kv.mod_revision()) {
            Ok(cur) => {
                sites.insert(site.to_string(), cur);
            }
            Err(e) => {
                broken_sites.insert(site.to_string(), e.to_string());
                bad(kv.key(), e.to_string());
            }
        }
    }
    // The last reports, then the live ones (written with them) over them.
    let mut reports: BTreeMap<String, (HostReport, bool)> = BTreeMap::new();
    let mut unreadable_hosts: BTreeMap<String, (String, bool)> = BTreeMap::new();
    for live in [false, true] {
        let prefix = layout.hosts(!live);
        for kv in c.get(prefix.clone(), at()).await?.kvs() {
            match serde_json::from_slice::<HostReport>(kv.value()) {
                Ok(r) => {
                    unreadable_hosts.remove(&r.host);
                    reports.insert(r.host.clone(), (r, live));
                }
                Err(e) => {
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    let host = key.strip_prefix(&prefix).unwrap_or(&key).to_string();
                    let why = format!("its report is not rctl's JSON: {e}");
                    bad(kv.key(), why.clone());
                    // A readable live report wins over an unreadable
                    // last one; an unreadable live one makes it unknown.
                    if live || !reports.contains_key(&host) {
                        reports.remove(&host);
                        unreadable_hosts.insert(host, (why, live));
                    }
                }
            }
        }
    }
    let now = now_unix();
    let mut hosts: Vec<HostStatus> = reports
        .into_values()
        .map(|(r, live)| {
            let broken = r
                .site
                .as_ref()
                .and_then(|s| broken_sites.get(s))
                .or(all_broken.as_ref())
                .cloned();
            let site = r.site.as_ref().and_then(|s| sites.get(s));
            let target = newer(all.as_ref(), site);
            let mut h = host_status(r, live, target, now);
            if let (Some(why), true) = (broken, live) {
                h.state = "failed".into();
                h.last_error = Some(format!("its target pointer is unreadable: {why}"));
            }
            h
        })
        .collect();
    for (host, (why, live)) in unreadable_hosts {
        hosts.push(HostStatus {
            host,
            site: None,
            state: "unreadable".into(),
            live,
            generation: 0,
            artifact_sha256: String::new(),
            target_generation: 0,
            target_sha256: String::new(),
            applied_unix: 0,
            lag_s: 0,
            last_error: Some(why),
            reported_unix: 0,
            iface: None,
        });
    }
    hosts.sort_by(|a, b| a.host.cmp(&b.host));
    let mut counts = BTreeMap::new();
    for h in &hosts {
        *counts.entry(h.state.clone()).or_insert(0) += 1;
    }
    Ok(FleetStatus {
        all: all.as_ref().map(PointerStatus::from),
        sites: sites.iter().map(|(k, v)| (k.clone(), v.into())).collect(),
        hosts,
        counts,
        unreadable,
    })
}

fn host_status(r: HostReport, live: bool, target: Option<&Current>, now: u64) -> HostStatus {
    let (tgen, tsha, pushed) = target.map_or((0, String::new(), 0), |t| {
        (
            t.generation,
            t.pointer.sha256.clone(),
            t.pointer.pushed_unix,
        )
    });
    // A host that runs the target's artifact in one plane but says the
    // target failed (its packet plane could not be applied), or is trying
    // it again after that, is not on it.
    let says_failed = r.state != "ok" && r.last_error.is_some() && r.error_generation >= tgen;
    let on_target =
        target.is_some() && r.generation == tgen && r.artifact_sha256 == tsha && !says_failed;
    let error = r
        .last_error
        .clone()
        .filter(|_| !on_target && r.error_generation >= tgen);
    let state = if !live {
        "down"
    } else if target.is_none() {
        "no target"
    } else if on_target {
        "ok"
    } else if error.is_some() {
        "failed"
    } else {
        "lagging"
    };
    HostStatus {
        host: r.host,
        site: r.site,
        state: state.into(),
        live,
        generation: r.generation,
        artifact_sha256: r.artifact_sha256,
        target_generation: tgen,
        target_sha256: tsha,
        applied_unix: r.applied_unix,
        lag_s: if on_target || target.is_none() {
            0
        } else {
            now.saturating_sub(pushed)
        },
        last_error: error.or(r.last_error.filter(|_| !live)),
        reported_unix: r.reported_unix,
        iface: r.iface,
    }
}

/// The status as text.
pub fn text(s: &FleetStatus) -> String {
    use std::fmt::Write as _;
    let now = rctl_os::clock::now_unix();
    let short = |h: &str| h.get(..12).unwrap_or(h).to_string();
    let mut o = String::new();
    let line = |t: &PointerStatus| {
        format!(
            "generation {}, artifact {}, pushed {} by {}{}",
            t.generation,
            short(&t.sha256),
            rctl_os::clock::when(t.pushed_unix, now),
            t.pushed_by,
            t.rollback
                .map(|n| format!(", a rollback of {n}"))
                .unwrap_or_default()
        )
    };
    match &s.all {
        Some(t) => {
            let _ = writeln!(o, "all sites: {}", line(t));
        }
        None => {
            let _ = writeln!(o, "all sites: nothing pushed");
        }
    }
    for (site, t) in &s.sites {
        let _ = writeln!(o, "site {site}: {}", line(t));
    }
    let _ = writeln!(o);
    for h in &s.hosts {
        let site = h.site.as_deref().unwrap_or("-");
        let what = match h.state.as_str() {
            "ok" => format!(
                "generation {}, artifact {}, applied {}",
                h.generation,
                short(&h.artifact_sha256),
                rctl_os::clock::when(h.applied_unix, now)
            ),
            _ => format!(
                "runs generation {} (artifact {}), should run {} (artifact {}){}; reported {}",
                h.generation,
                short(&h.artifact_sha256),
                h.target_generation,
                short(&h.target_sha256),
                if h.lag_s > 0 {
                    format!(", {} s behind", h.lag_s)
                } else {
                    String::new()
                },
                rctl_os::clock::when(h.reported_unix, now)
            ),
        };
        let _ = writeln!(
            o,
            "{:<10} {}  site {site}  {what}",
            h.state.to_uppercase(),
            h.host
        );
        if let Some(e) = &h.last_error {
            let _ = writeln!(o, "           {}", e);
        }
    }
    for u in &s.unreadable {
        let _ = writeln!(o, "UNREADABLE {}: {}", u.key, u.error);
    }
    let counts: Vec<String> = s.counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let n = s.hosts.len();
    let _ = writeln!(
        o,
        "\n{n} host{}: {}",
        if n == 1 { "" } else { "s" },
        if counts.is_empty() {
            "none reported".to_string()
        } else {
            counts.join(", ")
        }
    );
    o
}

/// An error for a status read that could not reach etcd.
pub fn unreachable(e: FleetError) -> FleetError {
    if e.kind == ErrorKind::Unavailable {
        e.context(
            "the fleet's state cannot be read (etcd does not answer, or has no leader: is a \
             majority of its members down?)",
        )
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::Pointer;

    fn report(state: &str, generation: i64, error_generation: i64) -> HostReport {
        HostReport {
            host: "cp0".into(),
            site: None,
            generation,
            artifact_sha256: "aa".into(),
            applied_unix: 1,
            last_error: (state == "failed").then(|| "the packet plane on eth0: no".into()),
            error_generation,
            state: state.into(),
            iface: Some("eth0".into()),
            started_unix: 1,
            reported_unix: 2,
        }
    }

    fn target(generation: i64) -> Current {
        Current {
            target: Target::All,
            generation,
            pointer: Pointer {
                sha256: "aa".into(),
                pushed_unix: 1,
                pushed_by: "op".into(),
                rollback: None,
            },
        }
    }

    #[test]
    fn a_host_on_target_that_says_the_target_failed_is_failed() {
        let t = target(7);
        let state = |r| host_status(r, true, Some(&t), 3).state;
        assert_eq!(state(report("ok", 7, 0)), "ok");
        assert_eq!(state(report("failed", 7, 7)), "failed");
        let mut again = report("failed", 7, 7);
        again.state = "applying".into();
        assert_eq!(state(again), "failed", "trying again after the failure");
        // A failure of an older generation does not count against this one.
        assert_eq!(state(report("failed", 7, 6)), "ok");
        assert_eq!(state(report("ok", 6, 0)), "lagging");
    }
}
