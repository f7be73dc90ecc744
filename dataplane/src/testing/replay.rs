//! Tests on real traffic: the requests of a test's `replay` files, judged
//! in time order on one fresh engine as `rctl dry-run` judges them (a log
//! through what its format carries, a capture through everything), each
//! expectation counted over the requests its label selects, without
//! keeping them. A request whose verdict the input leaves unknown is
//! never counted as passing: an expectation that selects one fails,
//! saying so.

use super::{describe, matches, TestReport};
use crate::partial::{Blind, Judged, Known, PartialTrace};
use crate::request::Request;
use crate::{Decision, Engine, EngineConfig, EngineError, Verdict};
use rctl_compiler::ir::Ruleset;
use rctl_compiler::spec::{Expect, Quantity, TestCase};
use std::collections::BTreeMap;
use std::path::Path;

/// Reads the files a test replays.
pub trait Replayer {
    /// Calls `each` with every request of `files` (each with its log
    /// format, `None`: detected, or a capture), merged in time order,
    /// with the index of its file and what that file carries. An error
    /// says why the files cannot be read whole: a test on part of a file
    /// would not be the test written.
    fn replay(
        &mut self,
        files: &[(&Path, Option<&str>)],
        each: &mut dyn FnMut(usize, &Known, &Request<'_>),
    ) -> Result<(), String>;
}

/// A runner that reads no file: a test that replays one is an error.
pub struct NoFiles;

impl Replayer for NoFiles {
    fn replay(
        &mut self,
        _: &[(&Path, Option<&str>)],
        _: &mut dyn FnMut(usize, &Known, &Request<'_>),
    ) -> Result<(), String> {
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
    // Each file once, however many replays select from it, in the one
    // format they name.
    let mut files: Vec<(&Path, Option<&str>)> = Vec::new();
    let mut file_of = Vec::with_capacity(test.replays.len());
    for r in &test.replays {
        let (path, format) = (r.path.as_path(), r.format.as_deref());
        let i = match files.iter().position(|x| x.0 == path) {
            Some(i) => i,
            None => {
                files.push((path, None));
                files.len() - 1
            }
        };
        match (files[i].1, format) {
            (Some(a), Some(b)) if a != b => {
                return Err(EngineError::Replay {
                    test: test.name.clone(),
                    message: format!(
                        "{}: replayed as {a:?} and as {b:?}: a file has one format",
                        path.display()
                    ),
                })
            }
            (None, Some(b)) => files[i].1 = Some(b),
            _ => {}
        }
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
    let mut blinds: Vec<Option<Blind>> = vec![None; files.len()];
    let mut sent = 0u64;
    let mut each = |file: usize, known: &Known, req: &Request<'_>| {
        let mine = |r: usize| file_of[r] == file && test.replays[r].selects(req.ip);
        if !(0..test.replays.len()).any(mine) {
            return;
        }
        sent += 1;
        let blind = blinds[file].get_or_insert_with(|| engine.blind(known));
        let d = match engine.judge_request(req, blind, &mut scratch, &mut trace) {
            Judged::Decided(d) => Some(d),
            Judged::Stopped(rule) => Some(Decision {
                verdict: Verdict::Drop { rule },
                logged: Vec::new(),
            }),
            Judged::Unknown { .. } => None,
        };
        for (xi, x) in test.expects.iter().enumerate() {
            if selects[xi].iter().any(|&r| mine(r)) {
                count(ruleset, x, d.as_ref(), &mut tallies[xi]);
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

fn count(ruleset: &Ruleset, x: &Expect, d: Option<&Decision>, t: &mut Tally) {
    t.selected += 1;
    let (hit, what) = match d {
        Some(d) => (matches(ruleset, x, d), describe(ruleset, &d.verdict)),
        None => {
            t.unknown += 1;
            (
                false,
                "unknown (the input lacks what a rule reads)".to_string(),
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

/// The failure message of an expectation, if it does not hold.
fn verdict_of(x: &Expect, t: &Tally) -> Option<String> {
    let (n, hits) = (t.selected, t.hits);
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
            "; {} of them could not be judged, so the expectation cannot be shown to hold",
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
