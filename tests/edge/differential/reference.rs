//! The reference: `rctl eval` on each request, alone, with the address
//! and port the proxy sees (`--dst-ip 127.0.0.1 --port 443`). A request
//! that a throttle rule counts is decided as a burst (`--count N`): the
//! statuses of N copies at one instant, in order.

use super::requests::Req;
use rctl_compiler::ir::{Action, Ruleset, Unit};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What `rctl eval` says of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The statuses of the copies in order (`200` pass or allow, the
    /// block's status, `closed` for a drop); one copy unless throttled.
    pub statuses: Vec<String>,
    /// Whether a request throttle rule counted it (then it is sent as a
    /// burst, after the proxy's throttle state is reset).
    pub counted: bool,
    /// The deciding rule, for failure messages.
    pub rule: String,
    /// Every rule that matched the first copy (a later copy stops at
    /// its throttle, so matches no more).
    pub matched: Vec<String>,
}

/// The status a verdict text of `rctl eval` stands for: `deny 451 "…",
/// by r`, `throttle 429 "…", Retry-After: 1, by r`, `pass …`, `allow, by
/// r`, `drop …`.
fn status_of(text: &str) -> String {
    let mut w = text.split_whitespace();
    match w.next().map(|k| k.trim_end_matches(',')) {
        Some("pass") | Some("allow") => "200".into(),
        Some("drop") => "closed".into(),
        Some("deny") | Some("throttle") => w.next().unwrap_or("?").to_string(),
        other => panic!("verdict text {text:?}: {other:?}"),
    }
}

fn eval(art: &Path, r: &Req, count: u32) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
    // `--flag=VALUE`: a value may start with `-`.
    cmd.arg("eval")
        .arg(art)
        .arg(format!("--url={}", r.target))
        .arg(format!("--method={}", r.method))
        .arg(format!("--ip={}", r.ip))
        .args(["--dst-ip=127.0.0.1", "--port=443", "--format=json"])
        .arg(format!("--count={count}"));
    for (n, v) in &r.headers {
        cmd.arg(format!("--header={n}: {v}"));
    }
    let o = cmd.output().expect("run rctl eval");
    assert!(
        o.status.success(),
        "rctl eval {} on {}: {}",
        art.display(),
        r.show(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("rctl eval --format json")
}

/// The tally of `--count N`: status -> copies.
fn tally(v: &serde_json::Value) -> BTreeMap<String, u32> {
    let mut t = BTreeMap::new();
    for (text, n) in v["tally"].as_object().expect("tally") {
        *t.entry(status_of(text)).or_default() += n.as_u64().unwrap() as u32;
    }
    t
}

/// Most copies in a burst.
const MAX_BURST: u32 = 40;

/// Decides `r` with the ruleset of artifact `art` (`rs` is the same
/// ruleset, to know which rules throttle).
fn decide(art: &Path, rs: &Ruleset, r: &Req) -> Expected {
    let one = eval(art, r, 1);
    let rule = one["verdict"]["rule"].as_str().unwrap_or("").to_string();
    let matched: Vec<String> = one["matched"]
        .as_array()
        .expect("matched")
        .iter()
        .map(|m| m["rule"].as_str().unwrap().to_string())
        .collect();
    // The request throttles it counts against, and their largest burst.
    let mut burst = None;
    for name in &matched {
        if let Some(x) = rs.rules.iter().find(|x| x.name == *name) {
            if let Action::Throttle(t) = &x.action {
                if t.unit == Unit::Requests {
                    burst = Some(burst.unwrap_or(0).max(t.burst));
                }
            }
        }
    }
    let Some(burst) = burst else {
        let text = one["verdict"]["text"].as_str().unwrap();
        return Expected {
            statuses: vec![status_of(text)],
            counted: false,
            rule,
            matched,
        };
    };
    let n = (burst + 2).min(MAX_BURST);
    let all = tally(&eval(art, r, n));
    let statuses = if all.len() == 1 || (all.len() == 2 && all.contains_key("200")) {
        // At one instant a bucket admits, then refuses: passes first.
        let mut s = vec!["200".to_string(); *all.get("200").unwrap_or(&0) as usize];
        for (st, k) in all.iter().filter(|(st, _)| *st != "200") {
            s.extend(std::iter::repeat_n(st.clone(), *k as usize));
        }
        s
    } else {
        // Several refusing rules: the order from the tallies of 1..N.
        let mut s = Vec::new();
        let mut before = BTreeMap::new();
        for i in 1..=n {
            let now = tally(&eval(art, r, i));
            let new = now
                .iter()
                .find(|(st, k)| before.get(*st).copied().unwrap_or(0) < **k)
                .map(|(st, _)| st.clone())
                .expect("one more copy decided");
            s.push(new);
            before = now;
        }
        s
    };
    Expected {
        statuses,
        counted: true,
        rule,
        matched,
    }
}

/// `rctl eval`'s answers, kept per artifact and request: the three
/// proxies' tests ask about the same requests of the same rulesets.
static CACHE: Mutex<Option<HashMap<(PathBuf, Req), Expected>>> = Mutex::new(None);

/// What `rctl eval` says of each request with the artifact `art` (of
/// ruleset `rs`), two at a time.
pub fn expect_all(art: &Path, rs: &Ruleset, reqs: &[Req]) -> Vec<Expected> {
    let key = |r: &Req| (art.to_path_buf(), r.clone());
    let cached = |r: &Req| {
        CACHE
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .get(&key(r))
            .cloned()
    };
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<Expected>>> = reqs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(r) = reqs.get(i) else { break };
                let e = cached(r).unwrap_or_else(|| {
                    let e = decide(art, rs, r);
                    CACHE
                        .lock()
                        .unwrap()
                        .get_or_insert_with(HashMap::new)
                        .insert(key(r), e.clone());
                    e
                });
                *out[i].lock().unwrap() = Some(e);
            });
        }
    });
    out.into_iter()
        .map(|m| m.into_inner().unwrap().expect("decided"))
        .collect()
}
