//! Metrics, the matched-request log and the graceful stop, checked
//! against what the clients counted.

use super::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Responses by `X-Rctl-Action`, and refusals (400s).
#[derive(Debug, Default, Clone)]
struct Tally {
    actions: HashMap<String, u64>,
    refused: u64,
    /// Answers by the rule that decided them.
    rules: HashMap<String, u64>,
}

impl Tally {
    fn add(&mut self, r: &Resp) {
        if r.status == 400 {
            self.refused += 1;
            return;
        }
        let a = r.header("x-rctl-action").expect("an action").to_string();
        *self.actions.entry(a).or_default() += 1;
        if let Some(rule) = r.header("x-rctl-rule") {
            *self.rules.entry(rule.to_string()).or_default() += 1;
        }
    }
    fn of(&self, a: &str) -> u64 {
        self.actions.get(a).copied().unwrap_or(0)
    }
}

/// Sends a mix: readers, a scraper past its burst, the updater, and
/// requests without a client address.
fn mix(a: &Agent, t: &mut Tally) {
    let mut c = a.conn();
    for i in 0..120 {
        let r = match i % 6 {
            0 | 1 => c.send(
                "GET",
                "/check/wiki/Paris",
                &client("93.184.216.4", READER_UA),
            ),
            2 | 3 => c.send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA)),
            4 => c.send("POST", "/check/sparql", &client(UPDATER_IP, UPDATER_UA)),
            _ if i % 12 == 5 => c.send("GET", "/check/x", &[]),
            _ => c.send(
                "GET",
                "/check/wiki/Berlin",
                &client("93.184.216.5", READER_UA),
            ),
        };
        t.add(&r.unwrap());
    }
}

#[test]
fn agent_metrics_parse_and_count_what_the_clients_saw() {
    let dir = tempdir("agent-metrics");
    let a = Agent::start(&compile(&dir, "r", ""), &[]);
    let mut t = Tally::default();
    mix(&a, &mut t);
    assert_eq!(
        (t.of("throttle"), t.of("allow"), t.refused),
        (30, 20, 10),
        "{t:?}"
    );
    let m = a.metrics();
    let get = |k: &str| {
        m.get(k)
            .copied()
            .unwrap_or_else(|| panic!("no {k} in {m:#?}"))
    };
    for action in ["pass", "allow", "deny", "throttle", "drop"] {
        assert_eq!(
            get(&format!("rctl_requests_total{{action={action:?}}}")),
            t.of(action) as f64,
            "{action}"
        );
    }
    let decided: u64 = t.actions.values().sum();
    assert_eq!(get("rctl_decision_seconds_count"), decided as f64);
    assert!(get("rctl_decision_seconds_sum") > 0.0);
    assert_eq!(
        get("rctl_listener_errors_total{kind=\"http-request\"}"),
        t.refused as f64
    );
    for (rule, n) in &t.rules {
        assert_eq!(
            get(&format!("rctl_rule_matches_total{{rule={rule:?}}}")),
            *n as f64,
            "{rule}"
        );
    }
    assert_eq!(
        get("rctl_rule_verdicts_total{rule=\"wdqs_generic_clients\",verdict=\"throttle\"}"),
        30.0
    );
    assert_eq!(
        get("rctl_rule_verdicts_total{rule=\"wdqs_updater_exempt\",verdict=\"allow\"}"),
        20.0
    );
    assert_eq!(get("rctl_limiter_keys{rule=\"wdqs_generic_clients\"}"), 1.0);
    assert_eq!(
        get("rctl_limiter_banned{rule=\"wdqs_generic_clients\"}"),
        1.0
    );
    assert_eq!(get("rctl_generation"), 1.0);
    assert_eq!(get("rctl_reloads_total{result=\"ok\"}"), 0.0);
    // A reload counts, and the generation moves.
    let o = a.rctl(&["apply", compile(&dir, "r2", "").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = a.metrics();
    assert_eq!(m["rctl_reloads_total{result=\"ok\"}"], 1.0);
    assert_eq!(m["rctl_generation"], 2.0);
    // Counts are by rule name: they continue across the reload.
    assert_eq!(
        m["rctl_rule_verdicts_total{rule=\"wdqs_generic_clients\",verdict=\"throttle\"}"],
        30.0
    );
}

/// The JSON lines of a log file.
fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// An agent writing the log to a file, with `rate` lines a second and
/// bursts of `burst` per rule, a summary every second; and the log.
fn logging(tag: &str, rate: &str, burst: &str) -> (TempDir, Agent, PathBuf) {
    let dir = tempdir(tag);
    let log = dir.join("matched.jsonl");
    let l = log.to_str().unwrap();
    let args = [
        "--log",
        l,
        "--log-rate",
        rate,
        "--log-burst",
        burst,
        "--log-summary",
        "1",
    ];
    let agent = Agent::start(&compile(&dir, "r", ""), &args);
    (dir, agent, log)
}

#[test]
fn agent_the_log_is_rate_limited_per_rule_and_counts_what_it_suppressed() {
    let (_dir, mut a, log) = logging("agent-log", "1", "5");
    let started = Instant::now();
    let mut t = Tally::default();
    for _ in 0..4 {
        mix(&a, &mut t);
    }
    let elapsed = started.elapsed().as_secs() + 1;
    std::thread::sleep(Duration::from_millis(1500));
    let m = a.metrics();
    assert_eq!(a.terminate().code(), Some(0));
    let all = lines(&log);
    let written = |rule: &str| all.iter().filter(|l| l["rule"] == rule).count() as u64;
    let suppressed = |rule: &str| {
        all.iter()
            .filter_map(|l| l["suppressed"][rule].as_u64())
            .sum::<u64>()
    };
    for (rule, action) in [
        ("wdqs_generic_clients", "throttle"),
        ("wdqs_updater_exempt", "allow"),
    ] {
        let sent = t.rules[rule];
        let (w, s) = (written(rule), suppressed(rule));
        assert!(
            w >= 5 && w <= 5 + elapsed,
            "{rule}: {w} lines in {elapsed} s"
        );
        assert_eq!(
            w + s,
            sent,
            "{rule}: every matched request written or counted"
        );
        assert_eq!(
            m.get(&format!("rctl_log_suppressed_total{{rule={rule:?}}}"))
                .copied(),
            Some(s as f64)
        );
        let line = all.iter().find(|l| l["rule"] == rule).unwrap();
        assert_eq!(line["action"], action);
        assert_eq!(line["generation"], 1);
        assert_eq!(line["target"], "/sparql");
        assert_eq!(line["host"], "query.wikidata.org");
        assert!(line["time"].as_f64().unwrap() > 1.7e9);
    }
    // Readers matched no rule: not logged.
    assert!(all.iter().all(|l| l["target"] != "/wiki/Paris"));
}

#[test]
fn agent_sigterm_stops_accepting_answers_what_it_took_and_exits() {
    let (_dir, mut a, log) = logging("agent-stop", "2", "3");
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (addr, stop) = (a.http, Arc::clone(&stop));
            std::thread::spawn(move || {
                let ip = format!("185.220.{i}.7");
                let mut t = Tally::default();
                let mut c = Conn::open(addr);
                while !stop.load(Ordering::Relaxed) {
                    let r = c.send("GET", "/check/sparql", &client(&ip, SCRAPER_UA));
                    match r {
                        Ok(r) => {
                            assert!([200, 429].contains(&r.status), "{r:?}");
                            t.add(&r);
                        }
                        // Closed by the stop, before any byte of an answer.
                        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::ConnectionReset
                                    | std::io::ErrorKind::BrokenPipe
                            ) =>
                        {
                            break
                        }
                        Err(e) => panic!("a broken answer: {e}"),
                    }
                }
                t
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let status = a.terminate();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(status.code(), Some(0), "{}", a.stderr());
    let mut throttled = 0;
    for c in clients {
        let t = c.join().expect("a client saw a broken answer");
        assert!(t.of("pass") == 10, "{t:?}");
        throttled += t.of("throttle");
    }
    assert!(throttled > 0);
    assert!(a.stderr().contains("rctl serve: stopped"), "{}", a.stderr());
    assert!(!a.control.exists(), "the control socket is removed");
    // Not "connect to a.http fails": the process has exited, so its
    // listener is gone, and a server of a test running in parallel may
    // already have taken the freed port (this flaked).
    // Everything it answered is accounted for in the log, which was
    // flushed with a last summary.
    let all = lines(&log);
    let written = all.iter().filter(|l| l["rule"].is_string()).count() as u64;
    let suppressed: u64 = all
        .iter()
        .filter_map(|l| l["suppressed"]["wdqs_generic_clients"].as_u64())
        .sum();
    assert_eq!(written + suppressed, throttled, "{all:?}");
}
