//! The benchmarks' baselines decide the bench's requests as the engine
//! does, so their figures compare like with like: wirefilter (for the rules
//! it runs) on the whole request mix, at the bench's ruleset sizes.

use rctl_compiler::ir::{Action, Ruleset};
use rctl_testkit::mix::{self, Owned};
use rctl_testkit::{gen, wf};

fn ruleset(rules: usize, blocks: usize, cidrs: usize) -> Ruleset {
    // One directory per call: the tests run in parallel threads of one
    // process, and two of them generating the same size in one directory
    // deleted each other's files (a flaky "generated ruleset compiles").
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "rctl-baselines-{rules}-{}-{call}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    gen::write_ruleset(&dir, blocks, cidrs, rules, rules);
    let c = rctl_compiler::compile_paths(&[dir.join("rules.rctl")], &Default::default());
    let _ = std::fs::remove_dir_all(&dir);
    c.ruleset.expect("generated ruleset compiles")
}

fn mix() -> &'static [Owned] {
    Box::leak(mix::requests(4096).into_boxed_slice())
}

/// wirefilter decides every request of the mix by the same rule as the
/// engine (or leaves it alone as the engine does), and the mix reaches
/// every kind of decision, so agreeing is not agreeing on "pass".
#[test]
fn wirefilter_decides_the_bench_mix_as_the_engine_does() {
    let reqs = mix();
    for (rules, blocks) in [(10, 1), (100, 5), (1_000, 50)] {
        // Fewer addresses than the bench (the sets are not what differs).
        let rs = ruleset(rules, blocks, 50);
        let wf = wf::Wirefilter::new(&rs);
        let throttles = rs
            .rules
            .iter()
            .filter(|r| matches!(r.action, Action::Throttle(_)))
            .count();
        assert!(wf.skipped >= throttles && throttles > 0, "{rules} rules");
        let a = wf::agreement(&rs, &wf, reqs, 1_000);
        assert!(
            a.differ.is_empty(),
            "{rules} rules: {} differ, first {:?}",
            a.differ.len(),
            &a.differ[..a.differ.len().min(5)]
        );
        assert_eq!(a.same + a.throttled, reqs.len());
        // Decided ones: some by a rule, some by none.
        let ctxs: Vec<_> = reqs.iter().map(|r| wf.context(r)).collect();
        let decided = ctxs.iter().filter(|c| wf.decide(c).is_some()).count();
        assert!(
            decided > 0 && decided < reqs.len(),
            "{rules} rules: {decided} of {} decided",
            reqs.len()
        );
    }
}

/// The agreement check catches a baseline that decides differently: a
/// wirefilter built without one of the rules that decide the mix does not
/// agree with the engine on the whole ruleset.
#[test]
fn the_agreement_check_sees_a_disagreement() {
    let reqs = mix();
    let rs = ruleset(100, 5, 50);
    let wf = wf::Wirefilter::new(&rs);
    let used = reqs
        .iter()
        .find_map(|r| wf.decide(&wf.context(r)))
        .expect("some request is decided");
    let mut fewer = rs.clone();
    fewer.rules[used].enabled = false;
    let wf = wf::Wirefilter::new(&fewer);
    let a = wf::agreement(&rs, &wf, reqs, 1_000);
    assert!(!a.differ.is_empty());
}

/// What the baseline does not do, as its documentation says: it reads the
/// path as sent, so a percent-encoded path that the engine decodes and
/// denies passes wirefilter. (The mix sends none; this keeps the caveat
/// true.)
#[test]
fn wirefilter_does_not_normalise_paths() {
    let rs = ruleset(10, 1, 50);
    let wf = wf::Wirefilter::new(&rs);
    let req = |target: &str| -> &'static [Owned] {
        Box::leak(Box::new([Owned {
            method: "GET",
            host: "en.wikipedia.org",
            target: target.to_string(),
            headers: vec![("User-Agent", "curl/8".to_string())],
            ip: std::net::Ipv4Addr::new(198, 51, 100, 1).into(),
        }]))
    };
    let plain = req("/w/index.php270");
    let encoded = req("/w/%69ndex.php270");
    assert!(wf.decide(&wf.context(&plain[0])).is_some());
    assert!(wf::agreement(&rs, &wf, plain, 1_000).differ.is_empty());
    let a = wf::agreement(&rs, &wf, encoded, 1_000);
    assert!(matches!(a.differ[..], [(0, Some(_), None)]), "{a:?}");
}
