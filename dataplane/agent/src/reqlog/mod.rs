//! The matched-request log (`--log PATH`, or `-` for stdout): one JSON
//! line per request that a `log`, `shadow` or enforcing rule matched.
//!
//! ```json
//! {"time":1715600000.123,"generation":3,"client":"185.220.101.33","method":"GET","host":"query.wikidata.org","target":"/sparql?query=…","rule":"wdqs_generic_clients","action":"throttle","status":429,"tags":["wdqs_watch"]}
//! ```
//!
//! `rule` is the deciding rule (`null` when only `log`/`shadow` rules
//! matched), `action` what the proxy was told (`shadowed`, in `--shadow`
//! mode, what would have been enforced), `tags` the `log` and `shadow`
//! rules that matched. Bytes that are not UTF-8 become U+FFFD; the host
//! and target are cut at [`FIELD_MAX`] bytes.
//!
//! **A flood cannot fill the disk.** Each rule has a token bucket
//! ([`Config::lines_per_s`], [`Config::burst`]); a request is charged to
//! its deciding rule, else to its first tag. Lines over the allowance are
//! not written but counted, and every [`Config::summary_every`] a line
//! says how many each rule lost:
//!
//! ```json
//! {"time":1715600060.000,"suppressed":{"wdqs_generic_clients":51234},"dropped":0}
//! ```
//!
//! **The request path never waits for the disk.** It only checks the
//! bucket and hands the line to a writer thread through a bounded queue;
//! when the queue is full the line is dropped and counted (`dropped`).
//!
//! **Only whole lines, only where asked** (see [`out`]): the file is
//! opened without following a symbolic link, in a folder nobody else may
//! write; a write that fails part way (a full disk) is cut back to the
//! last whole line and its lost lines counted as `failed`; with
//! [`Config::max_bytes`], lines past the bound are counted as
//! `over_size` until the file is rotated. [`ReqLog::reopen`] (SIGHUP in
//! `rctl serve`) opens the path again after logrotate moved the file.
//!
//! Text from requests is written as JSON strings in which C0 and C1
//! controls, DEL and bidirectional-text overrides are `\uXXXX` escapes:
//! the same value, safe to show in a terminal.

use crate::byrule::ByRule;
use crate::judge::{Fields, Generation, Observer, Outcome};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use rctl_dataplane::Decision;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod out;

/// The most bytes of a host or target a line keeps.
pub const FIELD_MAX: usize = 2048;

/// Where the lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Standard output.
    Stdout,
    /// A file, appended to (created 0640).
    File(PathBuf),
}

/// The log's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to write.
    pub target: Target,
    /// Lines each rule may write per second, sustained.
    pub lines_per_s: u32,
    /// Lines each rule may write at once.
    pub burst: u32,
    /// How often the summary of suppressed lines is written.
    pub summary_every: Duration,
    /// Lines waiting for the writer before new ones are dropped.
    pub queue: usize,
    /// The most bytes the file may reach; lines past it are counted
    /// (`over_size`) and left out until the file is rotated.
    pub max_bytes: Option<u64>,
}

impl Config {
    /// Defaults: 10 lines a second per rule, bursts of 100, a summary a
    /// minute, 8,192 lines queued, files up to 1 GiB.
    pub fn new(target: Target) -> Config {
        Config {
            target,
            lines_per_s: 10,
            burst: 100,
            summary_every: Duration::from_secs(60),
            queue: 8192,
            max_bytes: Some(1 << 30),
        }
    }
}

/// One rule's line allowance (GCRA on one atomic) and losses.
#[derive(Debug, Default)]
pub(crate) struct RuleLog {
    tat: AtomicU64,
    suppressed: AtomicU64,
    reported: AtomicU64,
}

impl RuleLog {
    fn admit(&self, now: u64, interval: u64, tolerance: u64) -> bool {
        let mut tat = self.tat.load(Relaxed);
        loop {
            let t = tat.max(now);
            if t - now > tolerance {
                return false;
            }
            match self
                .tat
                .compare_exchange_weak(tat, t + interval, Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct Line {
    time: f64,
    generation: u64,
    client: String,
    method: String,
    host: String,
    target: String,
    rule: Option<String>,
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    shadowed: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    tags: Vec<String>,
}

#[derive(Debug, Default)]
struct Stats {
    rules: ByRule<RuleLog>,
    written: AtomicU64,
    dropped: AtomicU64,
    dropped_reported: AtomicU64,
    failed: AtomicU64,
    over_size: AtomicU64,
    /// Set by [`ReqLog::reopen`], taken by the writer.
    reopen: std::sync::atomic::AtomicBool,
}

/// Lines written and lost, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Written whole.
    pub written: u64,
    /// Held back by their rule's allowance.
    pub suppressed: u64,
    /// Dropped because the writer was behind.
    pub dropped: u64,
    /// Lost to a failed write (a full disk).
    pub failed: u64,
    /// Left out for the size bound.
    pub over_size: u64,
}

/// The log: an [`Observer`] and, for `/metrics`, a [`Collector`].
#[derive(Debug)]
pub struct ReqLog {
    stats: Arc<Stats>,
    tx: Mutex<Option<SyncSender<Box<Line>>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    epoch: Instant,
    interval_ns: u64,
    tolerance_ns: u64,
}

/// Appends `json` to `out` with the characters a terminal would act on
/// (controls, DEL, bidirectional overrides) as `\uXXXX` escapes: they
/// can only be inside JSON strings, where the escape is the same value.
pub(crate) fn safe_json(out: &mut Vec<u8>, json: &str) {
    for c in json.chars() {
        if rctl_compiler::diag::is_unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            let mut b = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
        }
    }
}

fn text(b: &[u8]) -> String {
    let b = &b[..b.len().min(FIELD_MAX)];
    String::from_utf8_lossy(b).into_owned()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl ReqLog {
    /// Opens the target and starts the writer thread.
    pub fn start(config: &Config) -> io::Result<ReqLog> {
        let out = match &config.target {
            Target::Stdout => out::Out::Stdout,
            Target::File(p) => out::open(p)?,
        };
        let (tx, rx) = sync_channel::<Box<Line>>(config.queue.max(1));
        let stats = Arc::new(Stats::default());
        let (every, max_bytes) = (config.summary_every, config.max_bytes);
        let s = Arc::clone(&stats);
        let writer = std::thread::Builder::new()
            .name("rctl-reqlog".into())
            .spawn(move || {
                Writer {
                    out,
                    stats: &s,
                    max_bytes,
                    buf: Vec::new(),
                    ends: Vec::new(),
                    requests: Vec::new(),
                }
                .run(rx, every);
            })?;
        let interval_ns = 1_000_000_000 / u64::from(config.lines_per_s.max(1));
        Ok(ReqLog {
            stats,
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            epoch: Instant::now(),
            interval_ns,
            tolerance_ns: interval_ns * u64::from(config.burst.max(1) - 1),
        })
    }

    /// Opens the file again, at the writer's next turn (within 200 ms):
    /// after logrotate moved it away, new lines go to a new file.
    pub fn reopen(&self) {
        self.stats.reopen.store(true, Relaxed);
    }

    /// Writes what is queued and a last summary, and stops the writer.
    pub fn close(&self) {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = w {
            let _ = w.join();
        }
    }

    /// Lines written and lost, by why.
    pub fn totals(&self) -> Totals {
        let suppressed = self
            .stats
            .rules
            .all()
            .iter()
            .map(|(_, r)| r.suppressed.load(Relaxed))
            .sum();
        let s = &self.stats;
        Totals {
            written: s.written.load(Relaxed),
            suppressed,
            dropped: s.dropped.load(Relaxed),
            failed: s.failed.load(Relaxed),
            over_size: s.over_size.load(Relaxed),
        }
    }
}

impl Drop for ReqLog {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer thread's state: lines as they come, batched, a summary
/// when due, a write whenever the queue is empty (or the batch is big).
struct Writer<'a> {
    out: out::Out,
    stats: &'a Stats,
    max_bytes: Option<u64>,
    buf: Vec<u8>,
    ends: Vec<usize>,
    /// Per line: whether it is a request's (not a summary).
    requests: Vec<bool>,
}

/// A batch is written once it holds this much.
const BATCH_BYTES: usize = 64 * 1024;

impl Writer<'_> {
    fn run(mut self, rx: std::sync::mpsc::Receiver<Box<Line>>, every: Duration) {
        let mut next = Instant::now() + every;
        loop {
            if self.stats.reopen.swap(false, Relaxed) {
                self.flush();
                if let Err(e) = self.out.reopen() {
                    // Written where the agent's own messages go (journald).
                    eprintln!("rctl: warning: reopening the request log: {e}; writing on to the file in use");
                }
            }
            let wait = next.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Ok(j) = serde_json::to_string(&line) {
                        self.push(&j, true);
                    }
                    if self.buf.len() >= BATCH_BYTES {
                        self.flush();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.summary();
                    self.flush();
                    return;
                }
            }
            self.flush();
            if Instant::now() >= next {
                self.summary();
                self.flush();
                next = Instant::now() + every;
            }
        }
    }

    /// Adds one JSON line, with the characters a terminal would act on
    /// escaped (they can only be inside strings, where `\uXXXX` is valid).
    fn push(&mut self, json: &str, request: bool) {
        safe_json(&mut self.buf, json);
        self.buf.push(b'\n');
        self.ends.push(self.buf.len());
        self.requests.push(request);
    }

    fn flush(&mut self) {
        if self.ends.is_empty() {
            return;
        }
        let w = self.out.write(&self.buf, &self.ends, self.max_bytes);
        // Lines go out in order: the written ones first, then the ones a
        // failed write lost, then the ones over the bound. Only requests'
        // lines are counted.
        let (a, b) = (w.written as usize, (w.written + w.failed) as usize);
        let count = |r: &[bool]| r.iter().filter(|&&x| x).count() as u64;
        let r = &self.requests;
        self.stats.written.fetch_add(count(&r[..a]), Relaxed);
        self.stats.failed.fetch_add(count(&r[a..b]), Relaxed);
        self.stats.over_size.fetch_add(count(&r[b..]), Relaxed);
        self.buf.clear();
        self.ends.clear();
        self.requests.clear();
    }

    /// Adds what was suppressed and dropped since the last summary, if any.
    fn summary(&mut self) {
        let stats = self.stats;
        let mut suppressed = BTreeMap::new();
        for (name, r) in stats.rules.all() {
            let total = r.suppressed.load(Relaxed);
            let before = r.reported.swap(total, Relaxed);
            if total > before {
                suppressed.insert(name, total - before);
            }
        }
        let dropped = stats.dropped.load(Relaxed);
        let dropped = dropped - stats.dropped_reported.swap(dropped, Relaxed);
        if suppressed.is_empty() && dropped == 0 {
            return;
        }
        let j = serde_json::json!({
            "time": unix_now(),
            "suppressed": suppressed,
            "dropped": dropped,
        });
        self.push(&j.to_string(), false);
    }
}

impl Observer for ReqLog {
    fn decided(
        &self,
        g: &Generation,
        f: &Fields<'_>,
        outcome: &Outcome,
        decision: &Decision,
        _: Duration,
    ) {
        let charged = decision
            .verdict
            .rule()
            .or_else(|| decision.logged.first().map(|(i, _)| *i));
        let Some(charged) = charged else { return };
        let rules = self.stats.rules.of(g);
        let Some(r) = rules.get(charged) else { return };
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if !r.admit(now, self.interval_ns, self.tolerance_ns) {
            r.suppressed.fetch_add(1, Relaxed);
            return;
        }
        let line = Box::new(Line {
            time: unix_now(),
            generation: g.number,
            client: f.ip.to_string(),
            method: text(f.method),
            host: text(f.host),
            target: text(f.target),
            rule: outcome.rule.clone(),
            action: outcome.action.as_str(),
            shadowed: outcome.shadowed.map(|a| a.as_str()),
            status: (outcome.status != 0).then_some(outcome.status),
            tags: outcome.tags.clone(),
        });
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match tx.map(|tx| tx.try_send(line)) {
            Some(Ok(())) => {}
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                self.stats.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    fn failed(&self, _: &'static str, _: &str) {}
}

impl Collector for ReqLog {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.stats;
        crate::metrics::counter_family(
            &mut e,
            "rctl_log_lines",
            "Matched-request log lines written",
            "result",
            [
                ("written", s.written.load(Relaxed)),
                ("dropped", s.dropped.load(Relaxed)),
                ("failed", s.failed.load(Relaxed)),
                ("over_size", s.over_size.load(Relaxed)),
            ],
        )?;
        let rules = s.rules.all();
        crate::metrics::counter_family(
            &mut e,
            "rctl_log_suppressed",
            "Matched-request log lines a rule's allowance suppressed",
            "rule",
            rules
                .iter()
                .map(|(n, r)| (n.as_str(), r.suppressed.load(Relaxed)))
                .filter(|(_, n)| *n > 0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::byrule::tests::generation;
    use crate::judge::Judge;

    #[test]
    fn lines_are_rate_limited_per_rule_and_the_losses_summarised() {
        let dir = std::env::temp_dir().join(format!("rctl-reqlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.jsonl");
        let mut c = Config::new(Target::File(path.clone()));
        (c.lines_per_s, c.burst) = (1, 5);
        let log = ReqLog::start(&c).unwrap();
        let judge = Judge::new(
            generation(
                r#"rule flood { when path == "/f" deny 403 "no" }
rule watch { when path == "/w" log }"#,
                1,
            ),
            false,
        );
        let send = |target: &[u8], n: usize| {
            for _ in 0..n {
                let f = Fields {
                    method: b"GET",
                    host: b"ex\xffample.org",
                    target,
                    headers: &[],
                    ip: "192.0.2.9".parse().unwrap(),
                    dst: None,
                    port: 443,
                };
                let g = judge.current();
                let (o, d) = judge.decide_with(&g, &f);
                log.decided(&g, &f, &o, &d, Duration::ZERO);
            }
        };
        send(b"/f", 1000);
        send(b"/w", 3);
        send(b"/", 50);
        log.close();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let of = |rule: &str| {
            lines
                .iter()
                .filter(|l| l["rule"] == rule || (l["rule"].is_null() && l["tags"][0] == rule))
                .count()
        };
        assert_eq!(of("flood"), 5, "the burst, then nothing:\n{text}");
        assert_eq!(of("watch"), 3);
        let first = &lines[0];
        assert_eq!(first["action"], "deny");
        assert_eq!(first["status"], 403);
        assert_eq!(first["host"], "ex\u{fffd}ample.org");
        assert_eq!(first["client"], "192.0.2.9");
        let last = lines.last().unwrap();
        assert_eq!(last["suppressed"]["flood"], 995, "{text}");
        assert_eq!(last["dropped"], 0);
        let t = log.totals();
        assert_eq!(
            (t.written, t.suppressed, t.dropped, t.failed),
            (8, 995, 0, 0)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
