//! Differential: what the proxies configured by `rctl emit haproxy`, `rctl
//! emit vcl` and `rctl emit haproxy-spoe` (with `rctl serve`) answer, next
//! to what `rctl eval` decides for the same request.
//!
//! The rulesets: the decision corpus (`tests/corpus`), the shipped rules,
//! and two hostile ones beside this file: values HAProxy's or Varnish's
//! parsers could take for something else (`hostile_values.rctl`: leading
//! `-`, the empty string, `-f /etc/hostname`, `-m found`, `-i`, quotes,
//! backslashes, `$`, `#`, spaces, `%`, bytes beyond ASCII, regex
//! metacharacters) and header names with `'#$%&|`
//! (`hostile_names.rctl`). The requests ([`requests`]): each ruleset's
//! `test` blocks', a witness per rule from the compiler's analysis, and
//! every predicate's values on that witness, hit and missed narrowly.
//!
//! Each request is decided alone ([`reference`]): a request no request
//! throttle counts is sent once, all of them a few at a time; one that a
//! throttle counts is sent as a burst of copies after the proxy's
//! throttle state is reset, and the statuses must come in the order `rctl
//! eval --count` gives for copies at one instant. The proxies and their
//! resets are in [`proxies`].
//!
//! Excluded, by name: the rules an emitter leaves out (printed with the
//! reason; the reference is the ruleset without them, which is what the
//! proxy runs). Nothing else: HAProxy's sliding window and vsthrottle's
//! refill differ from rctl's buckets only after a burst, and a burst here
//! is all at once; packet and connection limits are never asked about a
//! request. `rctl eval` is asked about each request with the whole
//! ruleset (the answers are shared by the three tests), then, for the
//! requests a rule left out matched, with the ruleset the proxy runs: a
//! rule that does not match a request cannot change its verdict.
//!
//! `RCTL_DIFF_LOGS=1` prints the proxy's logs after a ruleset with
//! disagreements.

mod proxies;
mod reference;
mod requests;

use crate::util::{corpus_files, root, tempdir};
use proxies::{Kind, Proxy};
use rctl_compiler::ir::Ruleset;
use rctl_testkit::lab;
use rctl_testkit::servers::{haproxy, varnish};
use rctl_testkit::skip::require;
use reference::{expect_all, Expected};
use requests::Req;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Most value-derived requests per ruleset (the test blocks' and the
/// witnesses' are all sent).
const CAP: usize = 120;

/// The rulesets: the corpus, the shipped rules, the hostile ones.
fn rulesets() -> Vec<PathBuf> {
    let here = root().join("tests/edge/differential");
    let mut v = corpus_files();
    v.push(root().join("rules"));
    v.push(here.join("hostile_values.rctl"));
    v.push(here.join("hostile_names.rctl"));
    v
}

/// The ruleset without the rules an emitter left out.
fn without(rs: &Ruleset, skipped: &[(String, String)]) -> Ruleset {
    let keep: Vec<bool> = rs
        .rules
        .iter()
        .map(|x| !skipped.iter().any(|s| s.0 == x.name))
        .collect();
    let mut r = rs.clone();
    let mut k = keep.iter();
    r.rules.retain(|_| *k.next().unwrap());
    let mut k = keep.iter();
    r.plan.retain(|_| *k.next().unwrap());
    // File-order positions stay a permutation of 0..n.
    let mut seqs: Vec<u32> = r.rules.iter().map(|x| x.seq).collect();
    seqs.sort_unstable();
    for x in &mut r.rules {
        x.seq = seqs.binary_search(&x.seq).unwrap() as u32;
    }
    r
}

/// `rs` as an artifact in a directory shared by the tests, named by its
/// hash (so that the reference's answers are shared too). The directory
/// is Cargo's temporary directory for tests, in `target/`: a static is
/// never dropped, so a directory of the system's would be left behind.
fn artifact(rs: &Ruleset) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential-ref");
        std::fs::create_dir_all(&d).unwrap();
        d
    });
    let bytes = rctl_compiler::artifact::encode(rs);
    let hash = rctl_compiler::artifact::content_hash(&bytes).expect("hash");
    let path = dir.join(format!("{}.rctlc", rctl_compiler::artifact::hex(&hash)));
    if !path.exists() {
        static N: AtomicUsize = AtomicUsize::new(0);
        let tmp = dir.join(format!(
            "{}-{}.tmp",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

/// What one proxy did across the rulesets.
#[derive(Default)]
struct Report {
    rulesets: usize,
    requests: usize,
    bursts: usize,
    copies: usize,
    left_out: Vec<String>,
    disagreements: Vec<String>,
    /// Emitting, starting the proxy and asking `rctl eval` meanwhile.
    starting: Duration,
    /// Asking `rctl eval` about the ruleset without the rules left out.
    evaluating: Duration,
    sending: Duration,
}

/// Sends the requests no throttle counts, eight at a time; their statuses.
fn send_all(p: &Proxy, reqs: &[&Req]) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<String>> = reqs.iter().map(|_| Mutex::new(String::new())).collect();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(r) = reqs.get(i) else { break };
                *out[i].lock().unwrap() = p.send(r);
            });
        }
    });
    out.into_iter().map(|m| m.into_inner().unwrap()).collect()
}

/// One ruleset through one proxy.
fn run(kind: Kind, source: &Path, dir: &Path, report: &mut Report) {
    let name = source
        .strip_prefix(root())
        .unwrap_or(source)
        .display()
        .to_string();
    let c = rctl_compiler::compile_paths(&[source.to_path_buf()], &Default::default());
    let rs = c.ruleset.unwrap_or_else(|| panic!("{name} compiles"));
    let reqs: Vec<Req> = requests::requests(&rs, &c.tests, CAP)
        .into_iter()
        .filter(Req::sendable)
        .collect();
    // What the ruleset decides (asked while the proxy starts), then what
    // the ruleset the proxy runs decides where it differs: a rule left out
    // can change the verdict of a request it matches, and of no other.
    let t = Instant::now();
    let (mut proxy, mut expected) = std::thread::scope(|s| {
        let full = s.spawn(|| expect_all(&artifact(&rs), &rs, &reqs));
        let proxy = Proxy::start(kind, source, &artifact(&rs), &rs, dir);
        (proxy, full.join().expect("rctl eval"))
    });
    let t_start = t.elapsed();
    for (rule, why) in &proxy.skipped {
        report.left_out.push(format!("{name}: {rule}: {why}"));
    }
    let t = Instant::now();
    if !proxy.skipped.is_empty() {
        let reference = without(&rs, &proxy.skipped);
        let again: Vec<usize> = (0..reqs.len())
            .filter(|&i| {
                expected[i]
                    .matched
                    .iter()
                    .any(|m| proxy.skipped.iter().any(|(s, _)| s == m))
            })
            .collect();
        let subset: Vec<Req> = again.iter().map(|&i| reqs[i].clone()).collect();
        for (i, e) in again
            .iter()
            .zip(expect_all(&artifact(&reference), &reference, &subset))
        {
            expected[*i] = e;
        }
    }
    let t_eval = t.elapsed();
    let t = Instant::now();
    let mut differ = |r: &Req, e: &Expected, got: &[String]| {
        if e.statuses != got {
            report.disagreements.push(format!(
                "{name}: {}: rctl eval {:?} (rule {:?}), {kind:?} {got:?}",
                r.show(),
                e.statuses,
                e.rule
            ));
        }
    };
    let (once, counted): (Vec<_>, Vec<_>) =
        reqs.iter().zip(&expected).partition(|(_, e)| !e.counted);
    let sent: Vec<&Req> = once.iter().map(|(r, _)| *r).collect();
    for ((r, e), got) in once.iter().zip(send_all(&proxy, &sent)) {
        differ(r, e, &[got]);
    }
    for (r, e) in &counted {
        proxy.reset();
        let got: Vec<String> = e.statuses.iter().map(|_| proxy.send(r)).collect();
        differ(r, e, &got);
        report.copies += got.len();
    }
    report.starting += t_start;
    report.evaluating += t_eval;
    report.sending += t.elapsed();
    report.rulesets += 1;
    report.requests += reqs.len();
    report.bursts += counted.len();
    if !report.disagreements.is_empty() && std::env::var_os("RCTL_DIFF_LOGS").is_some() {
        eprintln!("{}", proxy.logs());
    }
}

/// Every ruleset through `kind`; asserts no disagreement.
fn differential(kind: Kind) {
    let needs = match kind {
        Kind::Vcl => varnish::require(),
        Kind::Haproxy | Kind::Spoe => require(haproxy::BIN),
    };
    if !(needs && lab::available()) {
        return;
    }
    let _serial = super::stack::serial();
    // A namespace of its own: port 443 on its loopback is the test's.
    let _netns = lab::Inside::private(&[]);
    let dir = tempdir(&format!("differential-{kind:?}"));
    let t0 = Instant::now();
    let mut report = Report::default();
    for (i, source) in rulesets().iter().enumerate() {
        run(kind, source, &dir.join(i.to_string()), &mut report);
    }
    let summary = format!(
        "{kind:?}: {} rulesets, {} requests compared ({} as bursts of {} copies in all) in {:.1?} (starting and rctl eval {:.1?}, rctl eval again {:.1?}, sending {:.1?}); rules left out: {}",
        report.rulesets,
        report.requests,
        report.bursts,
        report.copies,
        t0.elapsed(),
        report.starting,
        report.evaluating,
        report.sending,
        report.left_out.len()
    );
    eprintln!("{summary}");
    for l in &report.left_out {
        eprintln!("  left out: {l}");
    }
    assert!(
        report.disagreements.is_empty(),
        "{summary}\n{} disagreements:\n{}",
        report.disagreements.len(),
        report.disagreements.join("\n")
    );
    // Not vacuous: the rulesets were all run, with bursts among them.
    assert!(report.requests > 600 && report.bursts > 15, "{summary}");
}

#[test]
fn emit_haproxy_answers_as_rctl_eval() {
    differential(Kind::Haproxy);
}

#[test]
fn emit_vcl_answers_as_rctl_eval() {
    differential(Kind::Vcl);
}

#[test]
fn emit_haproxy_spoe_answers_as_rctl_eval() {
    differential(Kind::Spoe);
}
