//! Tests on real traffic: every request of a test's `replay` files,
//! judged in time order on one fresh engine as `rctl dry-run` judges them
//! (a log through what its format carries, a capture through everything;
//! the limiters see all of the traffic, whichever clients the replays
//! select), each expectation counted over the requests its label selects,
//! without keeping them. A request whose verdict the input leaves unknown is
//! never counted as passing: it is counted as what it may be (no verdict
//! of a rule before the one left unknown, any of the rules from there
//! on), and an expectation it could turn fails, saying so.

use super::{describe, matches, TestReport};
use crate::partial::{Blind, Judged, Known, PartialTrace};
use crate::request::Request;
use crate::{Decision, Engine, EngineConfig, EngineError, Verdict};
use rctl_compiler::ir::Ruleset;
use rctl_compiler::spec::{Expect, Outcome, Quantity, TestCase};
use std::collections::BTreeMap;
use std::path::Path;

/// A file a test replays, to be read as its `replay` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayFile<'a> {
    /// The file or folder.
    pub path: &'a Path,
    /// Its log format (`None`: detected, or a capture).
    pub format: Option<&'a str>,
    /// The request headers an HAProxy log captured, in its slots' order,
    /// with the lengths their values are cut at.
    pub captured: &'a [(String, Option<usize>)],
}

/// Reads the files a test replays.
pub trait Replayer {
    /// Calls `each` with every request of `files` (each with its log
    /// format, `None`: detected, or a capture), merged in time order:
    /// with the indices in `files` of those it is a request of (a file
    /// named twice, directly or in a folder, is read once, for both), the
    /// number of the file read (a folder's files apart), and what that
    /// file carries. An error says why the files cannot be read whole: a
    /// test on part of a file would not be the test written.
    fn replay(&mut self, files: &[ReplayFile<'_>], each: &mut Each<'_>) -> Result<(), String>;
}

/// What a [`Replayer`] hands each request to: the indices of the replayed
/// files it is of, the number of the file read, what that file carries,
/// the request, and its captured headers that may have been cut.
pub type Each<'a> = dyn FnMut(&[usize], usize, &Known, &Request<'_>, &[&[u8]]) + 'a;

/// A runner that reads no file: a test that replays one is an error.
pub struct NoFiles;

impl Replayer for NoFiles {
    fn replay(&mut self, _: &[ReplayFile<'_>], _: &mut Each<'_>) -> Result<(), String> {
        Err("this runner reads no files (run it with `rctl test`)".into())
    }
}

/// What one expectation has seen so far.
#[derive(Default)]
struct Tally {
    selected: u64,
    hits: u64,
    unknown: u64,
    first: Option<(bool, String)>,
    last: Option<(bool, String)>,
    got: BTreeMap<String, u64>,
}

/// Runs a test whose traffic is replayed from files.
pub fn run_replay_test(
    ruleset: &Ruleset,
    test: &TestCase,
    replayer: &mut dyn Replayer,
) -> Result<TestReport, EngineError> {
    let config = EngineConfig {
        site: test.site.clone(),
        ..EngineConfig::default()
    };
    let engine = Engine::new(ruleset.clone(), &config)?;
    let mut scratch = engine.scratch();
    let mut trace = PartialTrace::default();
    // Each (file, format, captures) once, however many replays select
    // from it; the replayer reads a file named in two ways once, and
    // refuses two formats for it.
    let mut files: Vec<ReplayFile<'_>> = Vec::new();
    let mut file_of = Vec::with_capacity(test.replays.len());
    for r in &test.replays {
        let f = ReplayFile {
            path: r.path.as_path(),
            format: r.format.as_deref(),
            captured: &r.captured,
        };
        let i = files.iter().position(|x| *x == f).unwrap_or_else(|| {
            files.push(f);
            files.len() - 1
        });
        file_of.push(i);
    }
    // Per expectation: the replays it selects.
    let selects: Vec<Vec<usize>> = test
        .expects
        .iter()
        .map(|x| {
            (0..test.replays.len())
                .filter(|&i| x.label.is_none() || x.label == test.replays[i].label)
                .collect()
        })
        .collect();
    let mut tallies: Vec<Tally> = test.expects.iter().map(|_| Tally::default()).collect();
    // Per file read: what it lacks, for this ruleset.
    let mut blinds: Vec<Option<Blind>> = Vec::new();
    let mut sent = 0u64;
    let mut each = |of: &[usize], input: usize, known: &Known, req: &Request<'_>, cut: &[&[u8]]| {
        if blinds.len() <= input {
            blinds.resize(input + 1, None);
        }
        let blind = blinds[input].get_or_insert_with(|| engine.blind(known));
        // Every request counts in the limiters, selected or not.
        let judged = engine.judge_request_cut(req, blind, cut, &mut scratch, &mut trace);
        let mine = |r: usize| of.contains(&file_of[r]) && test.replays[r].selects(req.ip);
        if !(0..test.replays.len()).any(mine) {
            return;
        }
        sent += 1;
        let d = match judged {
            Judged::Decided(d) => Ok(d),
            Judged::Stopped(rule) => Ok(Decision {
                verdict: Verdict::Drop { rule },
                logged: Vec::new(),
            }),
            Judged::Unknown { rule, logged } => Err((rule, logged)),
        };
        for (xi, x) in test.expects.iter().enumerate() {
            if selects[xi].iter().any(|&r| mine(r)) {
                count(ruleset, x, d.as_ref(), &trace.unknown, &mut tallies[xi]);
            }
        }
    };
    replayer
        .replay(&files, &mut each)
        .map_err(|message| EngineError::Replay {
            test: test.name.clone(),
            message,
        })?;
    let failures = test
        .expects
        .iter()
        .zip(&tallies)
        .enumerate()
        .filter_map(|(i, (x, t))| verdict_of(x, t).map(|m| (i, m)))
        .collect();
    Ok(TestReport {
        name: test.name.clone(),
        sent,
        failures,
    })
}

/// A request the input leaves unknown from rule `.0` on, with the log
/// and shadow rules that matched before it.
type Unknown = (usize, Vec<(usize, Verdict)>);

/// Counts one selected request: `d` its decision or where it is unknown
/// from, `unknown` the rules the judge left unknown (shadow and log rules
/// among them may have logged it).
fn count(
    ruleset: &Ruleset,
    x: &Expect,
    d: Result<&Decision, &Unknown>,
    unknown: &[usize],
    t: &mut Tally,
) {
    t.selected += 1;
    // A log or shadow rule left unknown may have logged it.
    let may_log = x.outcome == Outcome::Logged
        && unknown
            .iter()
            .any(|&i| ruleset.rules.get(i).is_some_and(logs) && by(ruleset, x, i));
    let (hit, what) = match d {
        Ok(d) => {
            let hit = matches(ruleset, x, d);
            if !hit && may_log {
                t.unknown += 1;
            }
            (hit, describe(ruleset, &d.verdict))
        }
        Err(u) => {
            let (hit, maybe) = may_match(ruleset, x, u);
            let maybe = maybe || (!hit && may_log);
            if maybe {
                t.unknown += 1;
            }
            let from = ruleset.rules.get(u.0).map_or("", |r| r.name.as_str());
            (
                hit,
                format!("unknown from {from} on (it reads what the input lacks)"),
            )
        }
    };
    t.hits += u64::from(hit);
    if t.first.is_none() {
        t.first = Some((hit, what.clone()));
    }
    *t.got.entry(what.clone()).or_default() += 1;
    t.last = Some((hit, what));
}

/// Whether a request left unknown from rule `u.0` on has what `x`
/// expects (`.0`), or may have it (`.1`): its verdict is none of the
/// rules' before that one, and may be any rule's from there on, or a pass.
fn may_match(ruleset: &Ruleset, x: &Expect, u: &Unknown) -> (bool, bool) {
    let by = |i: usize| by(ruleset, x, i);
    // Unknown on the packet plane (a drop that may hold), the request may
    // have gone on to any rule of the HTTP plane.
    let packet = ruleset.plan.get(u.0).is_some_and(|p| p.xdp.is_some());
    let later = ruleset
        .rules
        .iter()
        .enumerate()
        .skip(if packet { 0 } else { u.0 });
    match x.outcome {
        Outcome::Logged => {
            if u.1.iter().any(|&(i, _)| by(i)) {
                return (true, false);
            }
            (false, later.filter(|(_, r)| logs(r)).any(|(i, _)| by(i)))
        }
        Outcome::Pass => (false, x.rule.is_none()),
        o => (
            false,
            later
                .filter(|(_, r)| !r.shadow && r.action.kind() == o.as_str())
                .any(|(i, _)| by(i)),
        ),
    }
}

/// Whether a rule records what it matches without deciding it.
fn logs(r: &rctl_compiler::ir::Rule) -> bool {
    r.shadow || r.action.kind() == "log"
}

/// Whether rule `i` is the one `x` names (any rule, if it names none).
fn by(ruleset: &Ruleset, x: &Expect, i: usize) -> bool {
    x.rule
        .as_deref()
        .is_none_or(|r| ruleset.rules.get(i).is_some_and(|rule| rule.name == r))
}

/// The failure message of an expectation, if it does not hold.
fn verdict_of(x: &Expect, t: &Tally) -> Option<String> {
    let (n, hits) = (t.selected, t.hits);
    // Shown to hold whatever the unknown requests turn out to be.
    let ok = t.unknown == 0
        && match x.quantity {
            Quantity::All => hits == n && n > 0,
            Quantity::None => hits == 0,
            Quantity::First => t.first.as_ref().is_some_and(|f| f.0),
            Quantity::Last => t.last.as_ref().is_some_and(|l| l.0),
            Quantity::Count(k) => hits == u64::from(k),
        };
    if ok {
        return None;
    }
    let got: Vec<String> = t.got.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let by = x
        .rule
        .as_ref()
        .map_or(String::new(), |r| format!(" by {r}"));
    let unknown = if t.unknown > 0 {
        format!(
            "; {} of them could not be judged and may have it, so the expectation cannot be shown to hold",
            t.unknown
        )
    } else {
        String::new()
    };
    Some(format!(
        "expected {} {}{by} of {n} replayed, matched {hits}; got {}{unknown}",
        super::quantity(x.quantity),
        x.outcome.as_str(),
        if got.is_empty() {
            "no request".to_string()
        } else {
            got.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partial::KnownHeaders;
    use crate::testing::run_tests_with;

    /// Hands the test a day of requests: a scraper and a reader, every
    /// second, through a log that carries no Host.
    struct Day;

    impl Replayer for Day {
        fn replay(&mut self, files: &[ReplayFile<'_>], each: &mut Each<'_>) -> Result<(), String> {
            assert_eq!(files.len(), 1, "one file, read once");
            let mut known = Known::all();
            known.host = false;
            known.headers = KnownHeaders::Only(vec!["user-agent".into()]);
            for s in 0..30u64 {
                for (ip, ua) in [
                    ("45.83.64.7", "sqlmap/1.7"),
                    ("93.184.216.34", "Mozilla/5.0"),
                ] {
                    let headers: [(&[u8], &[u8]); 1] = [(b"user-agent", ua.as_bytes())];
                    each(
                        &[0],
                        0,
                        &known,
                        &Request {
                            method: b"GET",
                            host: b"",
                            target: b"/sparql",
                            headers: &headers,
                            ip: ip.parse().unwrap(),
                            dst: None,
                            port: 443,
                            time_ns: 1_000_000_000_000 + s * 1_000_000_000,
                        },
                        &[],
                    );
                }
            }
            Ok(())
        }
    }

    const SRC: &str = r#"
rule scrapers {
  priority 1
  when header("user-agent") starts_with "sqlmap"
  deny 403
}
rule per_ip {
  priority 2
  when path == "/sparql"
  throttle 10 requests per 1m by ip
}
rule on_host {
  priority 3
  when host == "query.wikidata.org"
  deny 403
}

test "a day" {
  replay scraper "day.log" ip 45.83.64.0/24
  replay reader "day.log" ip 93.184.216.34
  replay "day.log"
  expect for scraper all deny by scrapers
  expect for reader 16 throttle by per_ip
  expect 30 deny by scrapers
  expect for reader first pass
  expect for reader none deny
}
"#;

    #[test]
    fn expectations_count_the_requests_their_label_selects_and_unknown_never_passes() {
        let c = rctl_compiler::compile_str("t.rctl", SRC, &Default::default());
        assert!(!c.diagnostics.has_errors(), "{:?}", c.diagnostics);
        let r: Vec<_> = run_tests_with(&c, None, Box::new(Day))
            .map(Result::unwrap)
            .collect();
        // The reader's requests within the limit reach `on_host`, which
        // the log cannot judge: they are not per_ip's throttles nor
        // scrapers' denials, but each may be a pass or a denial, so
        // `first pass` and `none deny` cannot be shown, and fail.
        assert_eq!(r[0].sent, 60);
        let f = &r[0].failures;
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].message.starts_with("expected first pass"), "{f:?}");
        assert!(
            f[1].message
                .starts_with("expected none deny of 30 replayed, matched 0"),
            "{f:?}"
        );
        assert!(
            f[1].message
                .contains("; 14 of them could not be judged and may have it"),
            "{f:?}"
        );
        // Without a runner that reads files, such a test is an error.
        let e = crate::testing::run_tests(&c, None).next().unwrap();
        assert!(matches!(e, Err(EngineError::Replay { .. })));
    }
}

#[cfg(test)]
mod may_match_tests {
    use super::*;
    use rctl_compiler::source::Span;

    fn expect(outcome: Outcome, rule: Option<&str>) -> Expect {
        Expect {
            label: None,
            quantity: Quantity::None,
            outcome,
            rule: rule.map(str::to_string),
            span: Span::default(),
        }
    }

    #[test]
    fn an_unknown_packet_plane_drop_may_be_followed_by_any_http_rule() {
        let src = "rule deny_bots {\n  priority 1\n  when header(\"user-agent\") contains \"bot\"\n  deny 403\n}\n\
                   rule edge_only {\n  priority 50\n  when dst_ip in { 198.51.100.0/24 }\n  drop\n}\n\
                   rule later {\n  priority 60\n  when path == \"/x\"\n  deny 403\n}\n";
        let rs = rctl_compiler::compile_str("t.rctl", src, &Default::default())
            .ruleset
            .unwrap();
        let drop = rs.rules.iter().position(|r| r.name == "edge_only").unwrap();
        let later = rs.rules.iter().position(|r| r.name == "later").unwrap();
        assert!(rs.plan[drop].xdp.is_some());
        let deny_bots = expect(Outcome::Deny, Some("deny_bots"));
        // From the packet plane, even a rule before the drop may decide.
        assert_eq!(may_match(&rs, &deny_bots, &(drop, vec![])), (false, true));
        // From an HTTP rule on, the rules before it did not decide.
        assert_eq!(may_match(&rs, &deny_bots, &(later, vec![])), (false, false));
        let pass = expect(Outcome::Pass, None);
        assert_eq!(may_match(&rs, &pass, &(later, vec![])), (false, true));
    }
}
