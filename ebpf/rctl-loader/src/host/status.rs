//! `rctl status`, `rctl log` and `rctl detach`.

use super::observe::{
    has_state, header_hash, open_map, resolve, staged_metas, LinkState, MetaSource, Observed,
};
use super::paths::{generation_of, IfName, Paths};
use super::sys::describe;
use super::{check_bpffs, check_privileges, check_read_privileges, fault, monotonic_ns, Attached};
use crate::error::{err, ErrorKind, LoaderError};
use aya::maps::{Array, Map, PerCpuArray};
use rctl_common::{maps, BucketSet, Counters, BANNED, MAX_BUCKETS, MAX_RULES, SETS};
use rctl_os::fs::{check_private_dir, ensure_private_dir, remove_file, Lock};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One rule's counters, summed over CPUs.
#[derive(Debug, Clone, Serialize)]
pub struct RuleCounters {
    /// Rule name (`#N` when the metadata is missing).
    pub rule: String,
    /// Packets it decided in the program; `null` for a rule past the
    /// program's counter table ([`MAX_RULES`]), which has no counter.
    pub packets: Option<u64>,
    /// Their bytes (likewise).
    pub bytes: Option<u64>,
}

/// What `rctl status` shows for one interface.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The interface.
    pub iface: String,
    /// Whether the kernel runs one of rctl's generations on the interface
    /// now: a pinned link, attached to the interface of that name, running
    /// a pinned generation's program.
    pub enforcing: bool,
    /// Whether something is pinned as the interface's link.
    pub link_pinned: bool,
    /// The pinned link, as the kernel reports it.
    pub link: Option<LinkState>,
    /// The interface's index now (`null`: there is no such interface).
    pub ifindex: Option<u32>,
    /// The metadata of the generation the link runs (or, when none runs,
    /// of the one the next apply carries state from).
    pub attached: Option<Attached>,
    /// Where that metadata came from.
    pub metadata: MetaSource,
    /// Counters per rule, in rule order (rules that decided no packet
    /// included).
    pub counters: Vec<RuleCounters>,
    /// Occupied rate-limit buckets.
    pub buckets_used: usize,
    /// Of those, live ones (banned, or ahead of the clock, read from
    /// /proc/timer_list).
    pub buckets_live: usize,
    /// Of those, banned sources.
    pub buckets_banned: usize,
    /// The bucket table's capacity.
    pub buckets_capacity: u32,
    /// Where the interface's artifact is installed.
    pub artifact: PathBuf,
    /// Whether the artifact installed for the interface is the one its
    /// live generation runs (`None`: no generation runs, or an apply left
    /// its artifact staged).
    pub runs_installed: Option<bool>,
    /// What is wrong, and what fixes it.
    pub problems: Vec<String>,
}

/// Refuses state directories others could change (those that exist):
/// the roots, and `name`'s own.
fn check_dirs(paths: &Paths, name: Option<&IfName>) -> Result<(), LoaderError> {
    let mut dirs = vec![paths.run.clone(), paths.state.clone(), paths.pin_root()];
    if let Some(n) = name {
        dirs.extend([paths.pins(n), paths.artifacts(n)]);
    }
    for d in dirs {
        if std::fs::symlink_metadata(&d).is_ok() {
            check_private_dir(&d)?;
        }
    }
    Ok(())
}

/// Every interface rctl has state for.
fn interfaces(paths: &Paths) -> Vec<IfName> {
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let dirs = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out: Vec<IfName> = names(&paths.run)
        .into_iter()
        .filter_map(|n| {
            // `IF.json`, or `IF.json.gen-N` (IF may hold dots itself).
            if let Some(stem) = n.strip_suffix(".json") {
                return Some(stem.to_string());
            }
            let (stem, g) = n.rsplit_once(".json.")?;
            generation_of(g).map(|_| stem.to_string())
        })
        .chain(dirs(&paths.pin_root()))
        .chain(dirs(&paths.state))
        .filter_map(|n| IfName::new(&n).ok())
        .filter(|n| has_state(paths, n))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The status of every interface rctl has state for (or of `iface`).
pub fn status(paths: &Paths, iface: Option<&str>) -> Result<Vec<Status>, LoaderError> {
    let only = iface.map(IfName::new).transpose()?;
    check_read_privileges("status")?;
    check_bpffs(&paths.bpffs)?;
    check_dirs(paths, None)?;
    let names = match only {
        Some(n) if has_state(paths, &n) => vec![n],
        Some(n) => {
            return Err(LoaderError::new(
                ErrorKind::Interface,
                format!("rctl has nothing attached to {n}"),
            ))
        }
        None => interfaces(paths),
    };
    let mut out = Vec::new();
    for name in names {
        check_dirs(paths, Some(&name))?;
        // Shared: no writer is half-way through while this reads.
        let _lock = if paths.run.is_dir() {
            Some(Lock::acquire(&paths.lock(&name), false)?)
        } else {
            None
        };
        out.push(one(paths, &name));
    }
    Ok(out)
}

fn one(paths: &Paths, name: &IfName) -> Status {
    let obs = Observed::read(paths, name);
    let mut problems: Vec<String> = obs
        .not_enforcing(name)
        .into_iter()
        .chain(obs.unknown_program())
        .collect();
    let link = obs.link.as_ref().map(|(_, l)| l.clone());
    let source = obs.source(paths, name);
    let resolved = source.map(|g| resolve(paths, name, g, link.as_ref()));
    for g in obs.gens.keys().filter(|g| Some(**g) != source) {
        problems.push(format!(
            "generation {g} is left over from an interrupted apply or detach (the next apply \
             or detach removes it)"
        ));
    }
    for (g, p) in staged_metas(paths, name) {
        if Some(g) != obs.live {
            problems.push(format!(
                "{} is left over from an interrupted apply (the next apply or detach removes it)",
                p.display()
            ));
        }
    }
    let (attached, metadata) = match resolved {
        Some(r) => {
            problems.extend(r.warnings);
            (r.meta, r.source)
        }
        None => (None, MetaSource::Missing),
    };
    let mut runs_installed = None;
    if let (Some(a), Some(g)) = (&attached, obs.live) {
        let installed = paths.artifact(name);
        let staged = paths.staged_artifact(name, g);
        if staged.exists() {
            problems.push(format!(
                "generation {g}'s artifact is still at {} (an apply was interrupted, or failed \
                 to install it, after its switch): the next apply or detach finishes this",
                staged.display()
            ));
        } else if header_hash(&installed).as_ref() != Some(&a.artifact_sha256) {
            runs_installed = Some(false);
            problems.push(format!(
                "{} is not the artifact in force (the next apply installs its own)",
                installed.display()
            ));
        } else {
            runs_installed = Some(true);
        }
    }
    let mut st = Status {
        iface: name.to_string(),
        enforcing: obs.enforcing(),
        link_pinned: obs.link_pinned,
        link,
        ifindex: obs.ifindex,
        attached,
        metadata,
        counters: Vec::new(),
        buckets_used: 0,
        buckets_live: 0,
        buckets_banned: 0,
        buckets_capacity: MAX_BUCKETS,
        artifact: paths.artifact(name),
        runs_installed,
        problems,
    };
    if let Some(g) = source {
        let dir = paths.generation(name, g);
        let rules = st.attached.as_ref().map(|a| a.rules.clone());
        match counters(&dir, rules.as_deref()) {
            Ok(c) => st.counters = c,
            Err(e) => st.problems.push(format!("counters not read: {e}")),
        }
        match buckets(&dir) {
            Ok((used, live, banned)) => {
                (st.buckets_used, st.buckets_live, st.buckets_banned) = (used, live, banned)
            }
            Err(e) => st
                .problems
                .push(format!("rate-limit buckets not read: {e}")),
        }
    }
    st
}

/// Per-rule counters of the generation pinned in `dir`, summed over CPUs:
/// for `rules` by name, or (not known) the rules that counted something,
/// by index.
fn counters(dir: &Path, rules: Option<&[String]>) -> Result<Vec<RuleCounters>, LoaderError> {
    let map = PerCpuArray::<_, Counters>::try_from(Map::PerCpuArray(open_map(
        &dir.join(maps::COUNTERS),
    )?))
    .map_err(|e| err(describe(&e)))?;
    let read = |i: usize| -> Result<Option<(u64, u64)>, LoaderError> {
        if i >= MAX_RULES as usize {
            return Ok(None);
        }
        let v = map
            .get(&(i as u32), 0)
            .map_err(|e| err(format!("reading counters: {}", describe(&e))))?;
        Ok(Some((
            v.iter().map(|c| c.packets).sum(),
            v.iter().map(|c| c.bytes).sum(),
        )))
    };
    let mut out = Vec::new();
    match rules {
        Some(rules) => {
            for (i, rule) in rules.iter().enumerate() {
                let c = read(i)?;
                out.push(RuleCounters {
                    rule: rule.clone(),
                    packets: c.map(|c| c.0),
                    bytes: c.map(|c| c.1),
                });
            }
        }
        None => {
            for i in 0..MAX_RULES as usize {
                if let Some((p, b)) = read(i)?.filter(|c| c.0 > 0) {
                    out.push(RuleCounters {
                        rule: format!("#{i}"),
                        packets: Some(p),
                        bytes: Some(b),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Occupied, live (banned, or running ahead of the clock: a bucket that
/// has fully recovered is as good as none) and banned buckets.
fn buckets(dir: &Path) -> Result<(usize, usize, usize), LoaderError> {
    let buckets = Array::<_, BucketSet>::try_from(Map::Array(open_map(&dir.join(maps::BUCKETS))?))
        .map_err(|e| err(describe(&e)))?;
    let now = monotonic_ns();
    let (mut used, mut live, mut banned) = (0, 0, 0);
    for set in (0..SETS).filter_map(|i| buckets.get(&i, 0).ok()) {
        for b in set.iter().filter(|b| b.tag != 0) {
            used += 1;
            let ban = b.tat & BANNED != 0 && b.tat & !BANNED > now;
            live += usize::from(ban || (b.tat & BANNED == 0 && b.tat > now));
            banned += usize::from(ban);
        }
    }
    Ok((used, live, banned))
}

/// Removes a generation's pins and folder (or any other entry).
pub(crate) fn remove_pinned(path: &Path) {
    // Unpinning drops the pins' references; the kernel frees the objects
    // once nothing (no link, no process) holds them.
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        let _ = std::fs::remove_dir(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

/// Detaches rctl from `iface` and removes its pins, metadata, installed
/// artifact and lock; returns what was attached (`None` if no metadata
/// describes what was left). Works from whatever an interrupted apply or
/// detach left.
pub fn detach(iface: &str, paths: &Paths) -> Result<Option<Attached>, LoaderError> {
    let name = IfName::new(iface)?;
    check_privileges()?;
    check_bpffs(&paths.bpffs)?;
    check_dirs(paths, Some(&name))?;
    if !has_state(paths, &name) {
        // An apply killed right after taking the lock leaves only the lock.
        if paths.lock(&name).exists() {
            let lock = Lock::acquire(&paths.lock(&name), true)?;
            if !has_state(paths, &name) {
                lock.remove();
            }
        }
        return Err(LoaderError::new(
            ErrorKind::Interface,
            format!("rctl has nothing attached to {name}"),
        ));
    }
    ensure_private_dir(&paths.run, &mut Vec::new())?;
    let lock = Lock::acquire(&paths.lock(&name), true)?;
    fault("detach-locked");
    let obs = Observed::read(paths, &name);
    let link = obs.link.as_ref().map(|(_, l)| l.clone());
    let meta = obs
        .source(paths, &name)
        .and_then(|g| resolve(paths, &name, g, link.as_ref()).meta);
    if obs.link_pinned {
        // Unpinning drops the pin's reference; the kernel detaches the
        // program when our descriptor (held by `obs`) closes.
        let pin = paths.link(&name);
        remove_file(&pin)?;
    }
    drop(obs);
    fault("detach-unlinked");
    let pins = paths.pins(&name);
    if let Ok(entries) = std::fs::read_dir(&pins) {
        for e in entries.flatten() {
            remove_pinned(&e.path());
        }
    }
    let _ = std::fs::remove_dir(&pins);
    if pins.exists() {
        return Err(err(format!(
            "{} could not be removed completely (see what is left in it)",
            pins.display()
        )));
    }
    fault("detach-unpinned");
    remove_file(&paths.meta(&name))?;
    for (_, p) in staged_metas(paths, &name) {
        remove_file(&p)?;
    }
    let artifacts = paths.artifacts(&name);
    if let Ok(entries) = std::fs::read_dir(&artifacts) {
        for e in entries.flatten() {
            remove_file(&e.path())?;
        }
    }
    match std::fs::remove_dir(&artifacts) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(err(format!(
                "removing {}: {}",
                artifacts.display(),
                super::sys::io_error(&e)
            )))
        }
        _ => {}
    }
    lock.remove();
    Ok(meta)
}

/// Collects aya-log records as lines.
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl log::Log for Lines {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// Follows the events (sources entering a ban) of the program rctl runs
/// on `iface`, across applies, calling `emit(generation, line)` for each,
/// until `stop()` returns true or `emit` returns false (its output is
/// gone). Events are produced whether or not anyone follows them; unread
/// ones are dropped when the ring buffer is full.
pub fn follow_events(
    paths: &Paths,
    iface: &str,
    mut emit: impl FnMut(u64, &str) -> bool,
    stop: impl Fn() -> bool,
) -> Result<(), LoaderError> {
    let name = IfName::new(iface)?;
    check_read_privileges("log")?;
    check_bpffs(&paths.bpffs)?;
    check_dirs(paths, Some(&name))?;
    let mut current: Option<(u32, u64, aya_log::EbpfLogger<Lines>)> = None;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    loop {
        // The program the pinned link runs now (during an apply's
        // re-attach there may briefly be none: keep the last one).
        let obs = Observed::read(paths, &name);
        match (&obs.link, &current) {
            (None, None) => {
                return Err(LoaderError::new(
                    ErrorKind::Interface,
                    format!("rctl has nothing attached to {name}"),
                ))
            }
            (Some((_, l)), c) if c.as_ref().map(|c| c.0) != Some(l.prog_id) => {
                let id = l.prog_id;
                let logger =
                    aya_log::EbpfLogger::init_from_id_with_logger(id, Lines(lines.clone()))
                        .map_err(|e| {
                            err(format!(
                                "reading the events of program {id}: {}",
                                describe(&e)
                            ))
                        })?;
                current = Some((id, obs.live.unwrap_or(0), logger));
            }
            _ => {}
        }
        drop(obs);
        if let Some((_, generation, logger)) = current.as_mut() {
            logger.flush();
            let drained: Vec<String> = lines
                .lock()
                .map(|mut v| std::mem::take(&mut *v))
                .unwrap_or_default();
            for l in drained {
                if !emit(*generation, &l) {
                    return Ok(());
                }
            }
        }
        if stop() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_found_by_their_files_whatever_dots_they_hold() {
        let d = std::env::temp_dir().join(format!("rctl-ifaces-{}", std::process::id()));
        let paths = Paths {
            bpffs: d.join("bpffs"),
            run: d.join("run"),
            state: d.join("state"),
        };
        for dir in [
            paths.run.clone(),
            paths.state.join("vlan.100"),
            paths.pin_root().join("br0"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
        }
        for f in [
            "eth0.json.json",
            "a.json.gen-3",
            "b.lock",
            "c.json.gen-x",
            "..json",
        ] {
            std::fs::write(paths.run.join(f), "").unwrap();
        }
        // The shared artifact of old (a file) is no interface.
        std::fs::write(paths.state.join("active.rctlc"), "").unwrap();
        let names: Vec<String> = interfaces(&paths).iter().map(|n| n.to_string()).collect();
        assert_eq!(names, ["a", "br0", "eth0.json", "vlan.100"]);
        let _ = std::fs::remove_dir_all(&d);
    }
}
