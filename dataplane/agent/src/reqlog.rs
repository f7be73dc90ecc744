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

use crate::byrule::ByRule;
use crate::judge::{Fields, Generation, Observer, Outcome};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use rctl_dataplane::Decision;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
}

impl Config {
    /// Defaults: 10 lines a second per rule, bursts of 100, a summary a
    /// minute, 8,192 lines queued.
    pub fn new(target: Target) -> Config {
        Config {
            target,
            lines_per_s: 10,
            burst: 100,
            summary_every: Duration::from_secs(60),
            queue: 8192,
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
        let out: Box<dyn Write + Send> = match &config.target {
            Target::Stdout => Box::new(io::stdout()),
            Target::File(p) => {
                use std::os::unix::fs::OpenOptionsExt as _;
                Box::new(
                    std::fs::OpenOptions::new()
                        .append(true)
                        .create(true)
                        .mode(0o640)
                        .open(p)
                        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?,
                )
            }
        };
        let (tx, rx) = sync_channel::<Box<Line>>(config.queue.max(1));
        let stats = Arc::new(Stats::default());
        let every = config.summary_every;
        let s = Arc::clone(&stats);
        let writer = std::thread::Builder::new()
            .name("rctl-reqlog".into())
            .spawn(move || write_lines(rx, io::BufWriter::new(out), &s, every))?;
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

    /// Writes what is queued and a last summary, and stops the writer.
    pub fn close(&self) {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = w {
            let _ = w.join();
        }
    }

    /// Lines written, suppressed (all rules), and dropped (queue full).
    pub fn totals(&self) -> (u64, u64, u64) {
        let suppressed = self
            .stats
            .rules
            .all()
            .iter()
            .map(|(_, r)| r.suppressed.load(Relaxed))
            .sum();
        (
            self.stats.written.load(Relaxed),
            suppressed,
            self.stats.dropped.load(Relaxed),
        )
    }
}

impl Drop for ReqLog {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer thread: lines as they come, a summary when due, a flush
/// whenever the queue is empty.
fn write_lines(
    rx: std::sync::mpsc::Receiver<Box<Line>>,
    mut out: impl Write,
    stats: &Stats,
    every: Duration,
) {
    let mut next = Instant::now() + every;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        let msg = rx.recv_timeout(wait.min(Duration::from_millis(200)));
        match msg {
            Ok(line) => {
                if let Ok(j) = serde_json::to_string(&line) {
                    let _ = writeln!(out, "{j}");
                    stats.written.fetch_add(1, Relaxed);
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                summary(&mut out, stats);
                let _ = out.flush();
                return;
            }
        }
        let _ = out.flush();
        if Instant::now() >= next {
            summary(&mut out, stats);
            let _ = out.flush();
            next = Instant::now() + every;
        }
    }
}

/// Writes what was suppressed and dropped since the last summary, if any.
fn summary(out: &mut impl Write, stats: &Stats) {
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
    let _ = writeln!(out, "{j}");
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
        assert_eq!(log.totals(), (8, 995, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
