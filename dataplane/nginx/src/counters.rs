//! What the module counts, in the shared zone beside the buckets, so that
//! one status page shows every worker: requests by action, what it could
//! not check (its own errors, each failing open), and which artifact each
//! worker runs.

#![forbid(unsafe_code)]

use rctl_dataplane::answer::Action;
use rctl_dataplane::limiter::zone::ZoneStats;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most workers (and old workers still finishing) the status shows.
pub const WORKERS: usize = 64;

/// The module's own failures; each lets the request through unchecked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Failure {
    /// A panic in the decision (caught at the boundary).
    Panic = 0,
    /// No client address could be read (the connection's peer is no IP
    /// address, e.g. a unix socket, and `rctl_client_ip` gave none).
    ClientIp = 1,
    /// A changed artifact could not be loaded: the worker keeps its
    /// generation (this one does not fail a request).
    Reload = 2,
    /// Sending the answer of a block failed.
    Answer = 3,
    /// `rctl_client_ip`'s value was no address: the connection's peer was
    /// judged instead (the request was checked).
    ClientIpValue = 4,
}

const FAILURES: [(&str, Failure); 5] = [
    ("panic", Failure::Panic),
    ("client-ip", Failure::ClientIp),
    ("reload", Failure::Reload),
    ("answer", Failure::Answer),
    ("client-ip-value", Failure::ClientIpValue),
];

/// One worker's line.
#[repr(C)]
#[derive(Debug, Default)]
pub struct WorkerSlot {
    pid: AtomicU64,
    generation: AtomicU64,
    sha: [AtomicU64; 4],
    loaded_unix: AtomicU64,
    rules: AtomicU64,
}

/// The counters (all atomics: every worker updates them, lock-free).
#[repr(C)]
#[derive(Debug)]
pub struct Counters {
    decided: [AtomicU64; 5],
    shadowed: AtomicU64,
    failures: [AtomicU64; 8],
    /// Generation number (high 24 bits) and artifact tag (low 40 bits)
    /// of the newest artifact a worker loaded.
    newest: AtomicU64,
    workers: [WorkerSlot; WORKERS],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            decided: Default::default(),
            shadowed: AtomicU64::new(0),
            failures: Default::default(),
            newest: AtomicU64::new(0),
            workers: std::array::from_fn(|_| WorkerSlot::default()),
        }
    }
}

/// What one worker says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// Its process id.
    pub pid: u64,
    /// The generation it decides with.
    pub generation: u64,
    /// Its artifact's SHA-256.
    pub sha256: [u8; 32],
    /// When it loaded it (seconds since the epoch).
    pub loaded_unix: u64,
    /// Its rules.
    pub rules: u64,
}

impl Counters {
    /// Counts a decision (`shadowed`: a block that shadow mode served).
    pub fn decided(&self, action: Action, shadowed: bool) {
        self.decided[action.index()].fetch_add(1, Ordering::Relaxed);
        if shadowed {
            self.shadowed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a failure.
    pub fn failed(&self, f: Failure) {
        self.failures[f as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The generation number of the artifact with hash `sha`: the newest
    /// one's if it is the newest artifact loaded, else one more (so every
    /// worker that loads the same artifact gives it the same number, and
    /// a new one gets the next).
    pub fn generation_of(&self, sha: &[u8; 32]) -> u64 {
        let tag = u64::from_le_bytes([sha[0], sha[1], sha[2], sha[3], sha[4], 0, 0, 0]);
        let mut cur = self.newest.load(Ordering::Acquire);
        loop {
            let (gen, seen) = (cur >> 40, cur & ((1 << 40) - 1));
            if gen > 0 && seen == tag {
                return gen;
            }
            let next = ((gen + 1) & ((1 << 24) - 1)).max(1);
            match self.newest.compare_exchange(
                cur,
                (next << 40) | tag,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return next,
                Err(now) => cur = now,
            }
        }
    }

    /// Takes a worker line for process `pid` (a free one, or one whose
    /// process `alive` says is gone); `None` when all are taken.
    pub fn register(&self, pid: u64, alive: impl Fn(u64) -> bool) -> Option<usize> {
        for (i, w) in self.workers.iter().enumerate() {
            let p = w.pid.load(Ordering::Acquire);
            if (p == 0 || p == pid || !alive(p))
                && w.pid
                    .compare_exchange(p, pid, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return Some(i);
            }
        }
        None
    }

    /// Says what worker line `slot` runs.
    pub fn running(&self, slot: usize, generation: u64, sha: &[u8; 32], rules: u64, unix: u64) {
        let Some(w) = self.workers.get(slot) else {
            return;
        };
        w.generation.store(generation, Ordering::Relaxed);
        for (i, part) in sha.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(part);
            w.sha[i].store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        w.rules.store(rules, Ordering::Relaxed);
        w.loaded_unix.store(unix, Ordering::Release);
    }

    /// Frees worker line `slot` of process `pid` (at its exit).
    pub fn unregister(&self, slot: usize, pid: u64) {
        if let Some(w) = self.workers.get(slot) {
            let _ = w
                .pid
                .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The workers whose process `alive` says runs.
    pub fn workers(&self, alive: impl Fn(u64) -> bool) -> Vec<WorkerInfo> {
        let mut out = Vec::new();
        for w in &self.workers {
            let pid = w.pid.load(Ordering::Acquire);
            if pid == 0 || !alive(pid) {
                continue;
            }
            let mut sha = [0u8; 32];
            for (i, part) in sha.chunks_exact_mut(8).enumerate() {
                part.copy_from_slice(&w.sha[i].load(Ordering::Relaxed).to_le_bytes());
            }
            out.push(WorkerInfo {
                pid,
                generation: w.generation.load(Ordering::Relaxed),
                sha256: sha,
                loaded_unix: w.loaded_unix.load(Ordering::Acquire),
                rules: w.rules.load(Ordering::Relaxed),
            });
        }
        out.sort_by_key(|w| w.pid);
        out
    }

    /// The status page: JSON, the same for every worker that serves it.
    pub fn status_json(&self, workers: &[WorkerInfo], zone: &ZoneStats) -> String {
        let mut requests = serde_json::Map::new();
        for a in Action::ALL {
            requests.insert(
                a.as_str().into(),
                self.decided[a.index()].load(Ordering::Relaxed).into(),
            );
        }
        let mut failures = serde_json::Map::new();
        for (name, f) in FAILURES {
            failures.insert(
                name.into(),
                self.failures[f as usize].load(Ordering::Relaxed).into(),
            );
        }
        failures.insert("zone-full".into(), zone.full.into());
        let workers: Vec<serde_json::Value> = workers
            .iter()
            .map(|w| {
                serde_json::json!({
                    "pid": w.pid,
                    "generation": w.generation,
                    "artifact_sha256": rctl_compiler::artifact::hex(&w.sha256),
                    "rules": w.rules,
                    "loaded_unix": w.loaded_unix,
                })
            })
            .collect();
        serde_json::json!({
            "module": "rctl",
            "schema": 1,
            "workers": workers,
            "requests": requests,
            "shadowed": self.shadowed.load(Ordering::Relaxed),
            "unchecked": failures,
            "zone": {
                "slots": zone.slots,
                "live": zone.live,
                "banned": zone.banned,
                "evicted": zone.evicted,
                "full": zone.full,
            },
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_artifact_one_generation_whoever_loads_it() {
        let c = Counters::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert_eq!(c.generation_of(&a), 1);
        assert_eq!(c.generation_of(&a), 1);
        assert_eq!(c.generation_of(&b), 2);
        assert_eq!(c.generation_of(&b), 2);
        assert_eq!(c.generation_of(&a), 3, "going back is a new generation");
    }

    #[test]
    fn workers_take_free_lines_and_dead_ones() {
        let c = Counters::default();
        let alive = |p: u64| p != 7;
        assert_eq!(c.register(7, alive), Some(0));
        assert_eq!(c.register(8, alive), Some(0), "7 is gone");
        assert_eq!(c.register(9, alive), Some(1));
        c.running(1, 4, &[3u8; 32], 11, 100);
        let w = c.workers(alive);
        assert_eq!(w.len(), 2);
        assert_eq!((w[1].pid, w[1].generation, w[1].rules), (9, 4, 11));
        assert_eq!(w[1].sha256, [3u8; 32]);
        c.unregister(1, 9);
        assert_eq!(c.workers(alive).len(), 1);
    }

    #[test]
    fn the_status_counts_every_kind() {
        let c = Counters::default();
        c.decided(Action::Throttle, false);
        c.decided(Action::Pass, true);
        c.failed(Failure::Panic);
        let z = ZoneStats {
            full: 3,
            ..ZoneStats::default()
        };
        let v: serde_json::Value = serde_json::from_str(&c.status_json(&[], &z)).unwrap();
        assert_eq!(v["requests"]["throttle"], 1);
        assert_eq!(v["requests"]["pass"], 1);
        assert_eq!(v["shadowed"], 1);
        assert_eq!(v["unchecked"]["panic"], 1);
        assert_eq!(v["unchecked"]["zone-full"], 3);
    }
}
