//! Engine benchmarks: ns per request for rulesets of 10 to 10,000 rules,
//! against the reference evaluator (one regex per predicate, a binary
//! search per address set, rules in order, as VCL and HAProxy run) and
//! wirefilter (one compiled filter per deciding rule, in order; see
//! `support/wf.rs` for what it skips); ns per packet at 100,000 prefixes;
//! limiter ns per hit.
//!
//! Before timing, wirefilter's decisions on the whole request mix are
//! checked against the engine's. Time moves forward by 1 µs a request
//! across the whole run, never back.

#[path = "../../compiler/benches/support/gen.rs"]
mod gen;
#[path = "support/mix.rs"]
mod mix;
#[path = "support/wf.rs"]
mod wf;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mix::{requests, Owned};
use rctl_compiler::ir::{Proto, Ruleset};
use rctl_dataplane::limiter::Limiter;
use rctl_dataplane::{Engine, EngineConfig, NaiveEngine, Packet, Request};
use std::net::{IpAddr, Ipv4Addr};

fn ruleset(rules: usize, blocks: usize, cidrs: usize) -> Ruleset {
    let dir =
        std::env::temp_dir().join(format!("rctl-engine-bench-{rules}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    gen::write_ruleset(&dir, blocks, cidrs, rules, rules);
    let c = rctl_compiler::compile_paths(&[dir.join("rules.rctl")], &Default::default());
    let _ = std::fs::remove_dir_all(&dir);
    c.ruleset.expect("generated ruleset compiles")
}

fn bench(c: &mut Criterion) {
    let reqs: &'static [Owned] = Box::leak(requests(4096).into_boxed_slice());
    let mut g = c.benchmark_group("request");
    for &n in &[10usize, 100, 1_000, 10_000] {
        let rs = ruleset(n, (n / 20).clamp(1, 50), 2_000);
        let engine = Engine::new(rs.clone(), &EngineConfig::default()).unwrap();
        let mut scratch = engine.scratch();
        let owned_headers: Vec<Vec<(&[u8], &[u8])>> = reqs
            .iter()
            .map(|r| {
                r.headers
                    .iter()
                    .map(|(a, b)| (a.as_bytes(), b.as_bytes()))
                    .collect()
            })
            .collect();
        let mk = |i: usize, t: u64| Request {
            method: reqs[i].method.as_bytes(),
            host: reqs[i].host.as_bytes(),
            target: reqs[i].target.as_bytes(),
            headers: &owned_headers[i],
            ip: reqs[i].ip,
            dst: None,
            port: 443,
            time_ns: t,
        };
        // One clock for every evaluator at this size: it only moves
        // forward, 1 µs a request, so limiters never see time go back.
        let (mut i, mut t) = (0usize, 0u64);
        let mut next = || {
            i = (i + 1) % reqs.len();
            t += 1_000;
            (i, t)
        };
        g.bench_function(BenchmarkId::new("compiled", n), |b| {
            b.iter(|| {
                let (i, t) = next();
                engine.decide_request_with(&mk(i, t), &mut scratch, None)
            })
        });
        let naive = NaiveEngine::new(rs.clone(), &EngineConfig::default()).unwrap();
        g.bench_function(BenchmarkId::new("naive", n), |b| {
            b.iter(|| {
                let (i, t) = next();
                naive.decide_request(&mk(i, t))
            })
        });
        let wf = wf::Wirefilter::new(&rs);
        let agree = wf::agreement(&rs, &wf, reqs, 1_000);
        eprintln!(
            "wirefilter at {n} rules: {} rules compiled, {} skipped (throttle, log); \
             agrees with the engine on {} of {} requests ({} throttled by the engine)",
            rs.rules.len() - wf.skipped,
            wf.skipped,
            agree.same,
            reqs.len(),
            agree.throttled
        );
        assert!(
            agree.differ.is_empty(),
            "{:?}",
            &agree.differ[..agree.differ.len().min(10)]
        );
        let contexts: Vec<_> = reqs.iter().map(|r| wf.context(r)).collect();
        g.bench_function(BenchmarkId::new("wirefilter", n), |b| {
            b.iter(|| {
                let (i, _) = next();
                wf.decide(&contexts[i])
            })
        });
        g.bench_function(BenchmarkId::new("wirefilter_with_context", n), |b| {
            b.iter(|| {
                let (i, _) = next();
                wf.decide(&wf.context(&reqs[i]))
            })
        });
    }
    g.finish();

    let rs = ruleset(100, 50, 2_000);
    let prefixes: usize = rs.ipsets.iter().map(|s| s.prefixes.len()).sum();
    eprintln!("packet bench: {prefixes} prefixes after merging");
    let engine = Engine::new(rs, &EngineConfig::default()).unwrap();
    let mut scratch = engine.scratch();
    let mut rng = gen::Rng::new(7);
    let ips: Vec<IpAddr> = (0..4096)
        .map(|_| IpAddr::V4(Ipv4Addr::from(rng.next_u64() as u32)))
        .collect();
    let (mut i, mut t) = (0usize, 0u64);
    let mut g = c.benchmark_group("packet");
    g.bench_function("compiled_100k_prefixes", |b| {
        b.iter(|| {
            i = (i + 1) % ips.len();
            t += 1;
            engine.decide_packet_with(
                &Packet {
                    src: ips[i],
                    dst: None,
                    proto: Proto::Tcp,
                    dst_port: 443,
                    syn: i.is_multiple_of(8),
                    time_ns: t,
                },
                &mut scratch,
            )
        })
    });
    g.finish();

    let limiter = Limiter::new(100, 1_000, 100, 60_000, 1 << 20);
    let keys: Vec<[u8; 4]> = (0..100_000u32)
        .map(|k| k.wrapping_mul(2_654_435_761).to_le_bytes())
        .collect();
    let mut t = 0u64;
    let mut g = c.benchmark_group("limiter");
    g.bench_function("hit_100k_keys", |b| {
        b.iter(|| {
            t += 1;
            limiter.hit(&keys[t as usize % keys.len()], t * 1_000)
        })
    });
    // The same hits on a `shared` throttle's limiter, online with four
    // hosts: the mirror's weighted charge, the key's deltas kept for the
    // next sync, and a drain (what the sync task takes) every 10,000 hits
    // counted in. Target: at most 1.2x the local limiter.
    let shared = Limiter::new_shared(100, 1_000, 100, 60_000, 1 << 20);
    let handle = shared.shared().expect("a shared limiter");
    handle.set_online(true);
    handle.set_new_key_weight(4);
    let mut deltas = Vec::new();
    g.bench_function("shared_hit_100k_keys", |b| {
        b.iter(|| {
            t += 1;
            if t.is_multiple_of(10_000) {
                handle.drain(t * 1_000, &mut deltas);
                deltas.clear();
            }
            shared.hit(&keys[t as usize % keys.len()], t * 1_000)
        })
    });
    g.finish();
    let big = Limiter::new(100, 1_000, 100, 0, 1 << 20);
    for k in 0..1_000_000u32 {
        big.hit(&k.to_le_bytes(), u64::from(k));
    }
    eprintln!(
        "limiter memory: {} keys in {} table bytes = {:.1} bytes/key",
        big.len(),
        big.table_bytes(),
        big.table_bytes() as f64 / big.len() as f64
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
