//! The cost of counting for `rctl top` on the request path: the engine
//! deciding generated requests with the shipped rules, with and without
//! [`rctl_top::Window::add`] after each decision, interleaved in the same
//! run (five rounds each, medians).
//!
//! ```sh
//! cargo bench -p rctl-top --bench top
//! ```

use rctl_dataplane::{Engine, EngineConfig, Request};
use rctl_top::Window;
use std::net::IpAddr;
use std::path::Path;
use std::time::Instant;

const UAS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "python-requests/2.31.0",
    "curl/7.88.1",
    "wmf-streaming-updater-consumer/0.3.140 (query-service)",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let c = rctl_compiler::compile_paths(&[root.join("rules")], &Default::default());
    let engine = Engine::new(
        c.ruleset.expect("the shipped rules compile"),
        &EngineConfig::default(),
    )
    .expect("an engine");
    let n = 400_000u64;
    let reqs: Vec<(IpAddr, String, &str)> = (0..n)
        .map(|i| {
            let ip = IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
            let target = match i % 4 {
                0 => format!("/wiki/Q{}", i % 50_000),
                1 => format!("/sparql?query=SELECT%20{}", i % 1000),
                2 => "/w/index.php?title=Special:Search&search=rust".to_string(),
                _ => format!("/api/rest_v1/page/html/Title_{}", i % 7000),
            };
            (ip, target, UAS[(i % 4) as usize])
        })
        .collect();
    let mut scratch = engine.scratch();
    let mut window = Window::new(60, 256);
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        for counting in [false, true] {
            let t = Instant::now();
            for (i, (ip, target, ua)) in reqs.iter().enumerate() {
                let headers: [(&[u8], &[u8]); 1] = [(b"user-agent", ua.as_bytes())];
                let r = Request {
                    method: b"GET",
                    host: b"query.wikidata.org",
                    target: target.as_bytes(),
                    headers: &headers,
                    ip: *ip,
                    dst: None,
                    port: 443,
                    time_ns: 1_790_000_000_000_000_000 + i as u64 * 100_000,
                };
                let d = engine.decide_request_with(&r, &mut scratch, None);
                if counting {
                    window.add(r.time_ns / 1_000_000_000, &r, d.verdict.kind());
                }
                std::hint::black_box(&d);
            }
            let s = t.elapsed().as_secs_f64();
            if counting {
                on.push(s);
            } else {
                off.push(s);
            }
        }
    }
    let (a, b) = (median(off), median(on));
    println!(
        "{n} requests: decide {:.0} ns/request, decide and count {:.0} ns/request, ratio {:.2}x",
        a * 1e9 / n as f64,
        b * 1e9 / n as f64,
        b / a
    );
}
