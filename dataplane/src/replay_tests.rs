//! [`crate::Replay`]: throttle outcomes given from outside decide as the
//! limiters themselves do, one throttle rule at a time.

use crate::{Engine, EngineConfig, Replay, Request, Verdict};

fn engine(src: &str) -> Engine {
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    let rs = c.ruleset.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    Engine::new(rs, &EngineConfig::default()).unwrap()
}

const RULES: &str = r#"
rule per_ip {
  priority 10
  when path starts_with "/x"
  throttle 3 requests per 1m burst 3 by ip
}
rule shadow_per_path {
  priority 20
  shadow
  when path starts_with "/x"
  throttle 2 requests per 1m burst 2 by path
}
rule per_path {
  priority 30
  when path starts_with "/x"
  throttle 4 requests per 1m burst 4 by path
}
"#;

fn request<'a>(path: &'a str, ip: &str, i: u64) -> Request<'a> {
    Request::get(path, ip, i * 1_000_000)
}

#[test]
fn replayed_outcomes_decide_as_the_limiters_do_one_rule_at_a_time() {
    let traffic: Vec<(&str, &str)> = (0..24)
        .map(|i| {
            (
                ["/x/a", "/x/b"][i % 2],
                ["192.0.2.1", "192.0.2.2", "192.0.2.3"][i % 3],
            )
        })
        .collect();
    // The single run: every rule's limiter counts as requests come.
    let whole = engine(RULES);
    let want: Vec<(Verdict, Vec<(usize, Verdict)>)> = traffic
        .iter()
        .enumerate()
        .map(|(i, (p, ip))| {
            let d = whole.decide_request(&request(p, ip, i as u64));
            (d.verdict, d.logged)
        })
        .collect();
    assert!(want.iter().any(|(v, _)| v.kind() == "throttle"));
    assert!(want
        .iter()
        .any(|(_, l)| l.iter().any(|(_, v)| v.kind() == "throttle")));

    // The staged run: decisions that take outcomes from a replay, and
    // each throttle rule's limiter run apart, rule after rule.
    let decide = engine(RULES);
    let limits = engine(RULES);
    let mut s = decide.scratch();
    let mut replays = vec![Replay::default(); traffic.len()];
    let mut pending: Vec<Option<(usize, Vec<u8>)>> = vec![None; traffic.len()];
    let stage = |s: &mut crate::Scratch, i: usize, r: &Replay| {
        s.replay = Some(r.clone());
        let (p, ip) = traffic[i];
        let d = decide.decide_request_with(&request(p, ip, i as u64), s, None);
        (d, s.replay.take().unwrap().pending)
    };
    for i in 0..traffic.len() {
        pending[i] = stage(&mut s, i, &replays[i]).1;
    }
    for rule in 0..3 {
        for i in 0..traffic.len() {
            let Some((r, key)) = pending[i].clone() else {
                continue;
            };
            if r != rule {
                continue;
            }
            let o = limits
                .limiter(rule)
                .unwrap()
                .hit(&key, i as u64 * 1_000_000);
            replays[i].outcomes.push((rule, o));
            pending[i] = stage(&mut s, i, &replays[i]).1;
        }
    }
    // No limiter of the deciding engine counted anything: a fresh
    // decision of the first request passes every throttle.
    assert_eq!(
        decide
            .decide_request(&request("/x/a", "192.0.2.1", 0))
            .verdict,
        Verdict::Pass
    );
    for i in 0..traffic.len() {
        assert_eq!(pending[i], None, "request {i} still waits");
        let (d, p) = stage(&mut s, i, &replays[i]);
        assert_eq!(p, None);
        assert_eq!((d.verdict, d.logged), want[i], "request {i}");
    }
}
