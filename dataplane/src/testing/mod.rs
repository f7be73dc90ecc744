//! Runs a ruleset's `test` blocks (`rctl test`) through any evaluator: the
//! compiled engine, the reference, and (later) the XDP program all answer
//! the same [`Decider`] questions, so one corpus pins them all down. Tests
//! that replay real traffic run on the engine alone ([`replay`]).

pub mod replay;
pub use replay::{NoFiles, ReplayFile, Replayer};

use crate::request::{Packet, Request};
use crate::{Decision, Engine, EngineConfig, EngineError, NaiveEngine, Scratch, Verdict};
use rctl_compiler::ir::Ruleset;
use rctl_compiler::spec::{Expect, Outcome, Quantity, Sample, SampleKind, TestCase};
use rctl_compiler::Compilation;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The result of one test.
#[derive(Debug, Clone)]
pub struct TestReport {
    /// The test's name.
    pub name: String,
    /// How many requests and packets it sent.
    pub sent: u64,
    /// One message per failed expectation, with the expectation's index.
    pub failures: Vec<(usize, String)>,
}

impl TestReport {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// One test of a compilation, run: its report, located in the sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    /// The test's name.
    pub name: String,
    /// How many requests and packets it sent.
    pub sent: u64,
    /// The file it is in (`None` if the compilation does not know it).
    pub file: Option<PathBuf>,
    /// The line its `test` starts on.
    pub line: u32,
    /// Each expectation that failed, in the test's order.
    pub failures: Vec<Failure>,
}

/// An expectation of a test that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The line of its `expect`.
    pub line: u32,
    /// What happened instead.
    pub message: String,
}

impl TestResult {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs the tests of `c` whose name contains `filter` (every test
/// without one), in source order, each on a fresh engine. A compilation
/// with errors has no ruleset and so no tests. The results come as each
/// test ends. A test that replays a file is an error here: see
/// [`run_tests_with`].
pub fn run_tests<'a>(
    c: &'a Compilation,
    filter: Option<&'a str>,
) -> impl Iterator<Item = Result<TestResult, EngineError>> + 'a {
    run_tests_with(c, filter, Box::new(NoFiles))
}

/// [`run_tests`], reading the files tests replay through `replayer`
/// (`rctl test`).
pub fn run_tests_with<'a>(
    c: &'a Compilation,
    filter: Option<&'a str>,
    mut replayer: Box<dyn Replayer + 'a>,
) -> impl Iterator<Item = Result<TestResult, EngineError>> + 'a {
    let rs = c.ruleset.as_ref();
    c.tests
        .iter()
        .filter(move |t| rs.is_some() && filter.is_none_or(|f| t.name.contains(f)))
        .filter_map(move |t| {
            let rs = rs?;
            let r = if t.replays.is_empty() {
                run_test(rs, t)
            } else {
                replay::run_replay_test(rs, t, replayer.as_mut())
            };
            Some(r.map(|r| {
                TestResult {
                    failures: r
                        .failures
                        .into_iter()
                        .map(|(i, message)| Failure {
                            line: t.expects[i].span.line,
                            message,
                        })
                        .collect(),
                    name: r.name,
                    sent: r.sent,
                    file: c.sources.get(t.span.file).map(|f| f.path.clone()),
                    line: t.span.line,
                }
            }))
        })
}

struct Event {
    time_ms: u64,
    sample: usize,
    copy: u32,
}

/// Runs one test on a fresh engine (fresh limiter state). A test that
/// replays files is an error here (see [`replay::run_replay_test`]).
pub fn run_test(ruleset: &Ruleset, test: &TestCase) -> Result<TestReport, EngineError> {
    if !test.replays.is_empty() {
        return replay::run_replay_test(ruleset, test, &mut NoFiles);
    }
    let config = EngineConfig {
        site: test.site.clone(),
        ..EngineConfig::default()
    };
    let engine = Engine::new(ruleset.clone(), &config)?;
    let mut scratch = engine.scratch();
    run_test_on(&mut (&engine, &mut scratch), ruleset, test)
}

/// An evaluator that tests can run on.
pub trait Decider {
    /// Decides a request.
    fn request(&mut self, r: &Request<'_>) -> Decision;
    /// Decides a packet.
    fn packet(&mut self, p: &Packet) -> Decision;
}

impl Decider for (&Engine, &mut Scratch) {
    fn request(&mut self, r: &Request<'_>) -> Decision {
        self.0.decide_request_with(r, self.1, None)
    }
    fn packet(&mut self, p: &Packet) -> Decision {
        self.0.decide_packet_with(p, self.1)
    }
}

impl Decider for &NaiveEngine {
    fn request(&mut self, r: &Request<'_>) -> Decision {
        self.decide_request(r)
    }
    fn packet(&mut self, p: &Packet) -> Decision {
        self.decide_packet(p)
    }
}

/// Runs one test on the reference evaluator.
pub fn run_test_reference(ruleset: &Ruleset, test: &TestCase) -> Result<TestReport, EngineError> {
    let config = EngineConfig {
        site: test.site.clone(),
        ..EngineConfig::default()
    };
    let naive = NaiveEngine::new(ruleset.clone(), &config)?;
    run_test_on(&mut &naive, ruleset, test)
}

/// Runs one test on any evaluator, freshly loaded with `ruleset`.
pub fn run_test_on(
    engine: &mut impl Decider,
    ruleset: &Ruleset,
    test: &TestCase,
) -> Result<TestReport, EngineError> {
    let mut events = Vec::new();
    for (si, s) in test.samples.iter().enumerate() {
        for i in 0..s.count {
            events.push(Event {
                time_ms: s.time_of(i),
                sample: si,
                copy: i,
            });
        }
    }
    events.sort_by_key(|e| (e.time_ms, e.copy, e.sample));
    // Test time starts at 1000 s so that no arithmetic sits at zero.
    let base_ns = 1_000_000_000_000u64;
    let mut decisions: Vec<Vec<Decision>> = vec![Vec::new(); test.samples.len()];
    for e in &events {
        let s = &test.samples[e.sample];
        let now = base_ns + e.time_ms * 1_000_000;
        let d = match &s.kind {
            SampleKind::Request { .. } => {
                with_sample_request(s, now, |r| engine.request(r)).expect("a request sample")
            }
            SampleKind::Packet { proto, syn } => engine.packet(&Packet {
                src: s.ip,
                dst: s.dst,
                proto: *proto,
                dst_port: s.port,
                syn: *syn,
                time_ns: now,
            }),
        };
        decisions[e.sample].push(d);
    }
    // Per sample, decisions are in send order; merge selected ones by time.
    let mut failures = Vec::new();
    for (xi, x) in test.expects.iter().enumerate() {
        let mut selected: Vec<(u64, &Decision)> = Vec::new();
        for (si, s) in test.samples.iter().enumerate() {
            if x.label.is_none() || x.label == s.label {
                for (i, d) in decisions[si].iter().enumerate() {
                    selected.push((s.time_of(i as u32), d));
                }
            }
        }
        selected.sort_by_key(|(t, _)| *t);
        if let Some(msg) = check(ruleset, x, &selected) {
            failures.push((xi, msg));
        }
    }
    Ok(TestReport {
        name: test.name.clone(),
        sent: events.len() as u64,
        failures,
    })
}

/// Runs `f` on a test sample's request as the engine reads it, at
/// `time_ns`; `None` when the sample is a packet.
pub fn with_sample_request<T>(
    s: &Sample,
    time_ns: u64,
    f: impl FnOnce(&Request<'_>) -> T,
) -> Option<T> {
    let SampleKind::Request {
        method,
        host,
        target,
        headers,
    } = &s.kind
    else {
        return None;
    };
    let hs: Vec<(&[u8], &[u8])> = headers
        .iter()
        .map(|(a, b)| (a.as_bytes(), b.as_bytes()))
        .collect();
    Some(f(&Request {
        method: method.as_bytes(),
        host: host.as_bytes(),
        target: target.as_bytes(),
        headers: &hs,
        ip: s.ip,
        dst: s.dst,
        port: s.port,
        time_ns,
    }))
}

fn matches(engine: &Ruleset, x: &Expect, d: &Decision) -> bool {
    let name = |i: usize| engine.rules[i].name.as_str();
    let by = |i: Option<usize>| x.rule.as_deref().is_none_or(|r| i.map(name) == Some(r));
    match x.outcome {
        Outcome::Logged => d.logged.iter().any(|(i, _)| by(Some(*i))),
        o => d.verdict.kind() == o.as_str() && by(d.verdict.rule()),
    }
}

fn describe(engine: &Ruleset, v: &Verdict) -> String {
    match v.rule() {
        Some(i) => format!("{} by {}", v.kind(), engine.rules[i].name),
        None => v.kind().to_string(),
    }
}

/// A quantity as written.
fn quantity(q: Quantity) -> String {
    match q {
        Quantity::All => "all".to_string(),
        Quantity::None => "none".to_string(),
        Quantity::First => "first".to_string(),
        Quantity::Last => "last".to_string(),
        Quantity::Count(k) => k.to_string(),
    }
}

fn check(engine: &Ruleset, x: &Expect, selected: &[(u64, &Decision)]) -> Option<String> {
    let n = selected.len();
    let hits = selected
        .iter()
        .filter(|(_, d)| matches(engine, x, d))
        .count();
    let ok = match x.quantity {
        Quantity::All => hits == n && n > 0,
        Quantity::None => hits == 0,
        Quantity::First => selected.first().is_some_and(|(_, d)| matches(engine, x, d)),
        Quantity::Last => selected.last().is_some_and(|(_, d)| matches(engine, x, d)),
        Quantity::Count(k) => hits == k as usize,
    };
    if ok {
        return None;
    }
    let mut dist: BTreeMap<String, usize> = BTreeMap::new();
    for (_, d) in selected {
        *dist.entry(describe(engine, &d.verdict)).or_default() += 1;
    }
    let got: Vec<String> = dist.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let q = quantity(x.quantity);
    let by = x
        .rule
        .as_ref()
        .map_or(String::new(), |r| format!(" by {r}"));
    let position = match x.quantity {
        Quantity::First => selected
            .first()
            .map(|(_, d)| format!("; the first was {}", describe(engine, &d.verdict))),
        Quantity::Last => selected
            .last()
            .map(|(_, d)| format!("; the last was {}", describe(engine, &d.verdict))),
        _ => None,
    }
    .unwrap_or_default();
    Some(format!(
        "expected {q} {}{by} of {n}, matched {hits}; got {}{position}",
        x.outcome.as_str(),
        got.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
rule old_bots {
  when header("User-Agent") contains "OldBot"
  deny 403
}

test "old bots are denied" {
  request bot {
    header "User-Agent" "OldBot/1.0"
  }
  expect all deny by old_bots
}

test "readers pass" {
  request reader {
    header "User-Agent" "Firefox"
    repeat 3
  }
  expect all pass
}

test "a wrong expectation fails" {
  request reader {
    header "User-Agent" "Firefox"
  }
  expect all pass
  expect all deny by old_bots
}
"#;

    fn compiled() -> Compilation {
        let c = rctl_compiler::compile_str("t.rctl", SRC, &Default::default());
        assert!(!c.diagnostics.has_errors(), "{:?}", c.diagnostics);
        c
    }

    #[test]
    fn every_test_runs_in_order_located_with_its_failed_lines() {
        let c = compiled();
        let all: Vec<TestResult> = run_tests(&c, None).map(Result::unwrap).collect();
        let names: Vec<(&str, bool, u64)> = all
            .iter()
            .map(|r| (r.name.as_str(), r.passed(), r.sent))
            .collect();
        assert_eq!(
            names,
            [
                ("old bots are denied", true, 1),
                ("readers pass", true, 3),
                ("a wrong expectation fails", false, 1)
            ]
        );
        let bad = &all[2];
        assert_eq!(bad.file.as_deref(), Some(std::path::Path::new("t.rctl")));
        assert_eq!(bad.line, 22);
        assert_eq!(bad.failures.len(), 1, "{:?}", bad.failures);
        assert_eq!(bad.failures[0].line, 27);
        assert!(!bad.failures[0].message.is_empty());
    }

    #[test]
    fn a_filter_runs_only_the_tests_whose_name_contains_it() {
        let c = compiled();
        let names: Vec<String> = run_tests(&c, Some("pass"))
            .map(|r| r.unwrap().name)
            .collect();
        assert_eq!(names, ["readers pass"]);
        assert_eq!(run_tests(&c, Some("nothing like it")).count(), 0);
    }

    #[test]
    fn a_compilation_with_errors_has_no_tests_to_run() {
        let c =
            rctl_compiler::compile_str("t.rctl", "rule r { when nonsense }", &Default::default());
        assert!(c.diagnostics.has_errors());
        assert_eq!(run_tests(&c, None).count(), 0);
    }
}
