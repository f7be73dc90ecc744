//! The shared decision corpus (`tests/corpus/*.rctl`) on every evaluator,
//! and a differential test of the compiled engine against the reference on
//! random rulesets and traffic.

use crate::util::*;
use rctl_compiler::ir::Proto;
use rctl_dataplane::testing::{run_test, run_test_reference};
use rctl_dataplane::{EngineConfig, NaiveEngine, Packet};

#[test]
fn corpus_passes_on_the_compiled_engine_and_the_reference() {
    let files = corpus_files();
    assert!(files.len() >= 6);
    let mut tests = 0;
    for f in files {
        let c = rctl_compiler::compile_paths(std::slice::from_ref(&f), &Default::default());
        let rs = c
            .ruleset
            .unwrap_or_else(|| panic!("{} does not compile", f.display()));
        for t in &c.tests {
            let fast = run_test(&rs, t).unwrap();
            assert!(
                fast.passed(),
                "{}: {}: {:?}",
                f.display(),
                t.name,
                fast.failures
            );
            let reference = run_test_reference(&rs, t).unwrap();
            assert!(
                reference.passed(),
                "reference: {}: {}: {:?}",
                f.display(),
                t.name,
                reference.failures
            );
            tests += 1;
        }
    }
    assert!(tests >= 20, "{tests}");
}

const PATHS: &[&str] = &[
    "/",
    "/sparql",
    "/w/index.php",
    "/w/api.php",
    "/api/rest_v1/page/html/%EA%9D%AE",
    "/api/rest_v1/page/html/Paris",
    "/wiki/Main_Page",
    "/%73parql",
    "/static/x.png",
];
const UAS: &[&str] = &[
    "",
    "curl/8.4",
    "python-requests/2.31",
    "Mozilla/5.0 (X11) Firefox/128",
    "Googlebot/2.1",
    "zgrab/0.x",
    "wmf-updater/1",
];
const HOSTS: &[&str] = &[
    "fr.wikipedia.org",
    "EN.wikipedia.org:443",
    "query.wikidata.org",
    "example.org",
];
const QUERIES: &[&str] = &[
    "",
    "?action=purge",
    "?format=json&action=query",
    "?query=SELECT+%3Fx",
    "?title=A&title=B",
    "?action",
];
const METHODS: &[&str] = &["GET", "POST", "HEAD", "get", "PURGE"];
const IPS: &[&str] = &[
    "198.51.100.7",
    "198.51.100.200",
    "203.0.113.5",
    "10.1.2.3",
    "2001:db8::1",
    "2001:db8:1::9",
    "::ffff:10.1.2.3",
    "192.0.2.1",
];

fn random_condition(r: &mut Rng, depth: u32) -> String {
    if depth > 2 || r.next() % 3 == 0 {
        return match r.next() % 15 {
            0 => format!("path == \"{}\"", r.pick(PATHS)),
            1 => format!(
                "path starts_with \"{}\"",
                r.pick(PATHS).get(..2).unwrap_or("/")
            ),
            2 => format!("path ends_with \"{}\"", r.pick(&["php", "png", "/", "%AE"])),
            3 => format!("path contains \"{}\"", r.pick(&["rest", "wiki", "%EA"])),
            4 => format!(
                "header(\"user-agent\") ~* \"{}\"",
                r.pick(&["^curl", "bot", "python|zgrab", "^$", "firefox/\\d+"])
            ),
            5 => format!("header(\"user-agent\") {}", r.pick(&["present", "absent"])),
            6 => format!(
                "host == \"{}\"",
                r.pick(&["fr.wikipedia.org", "en.wikipedia.org", "query.wikidata.org"])
            ),
            7 => format!("host ~ \"{}\"", r.pick(&["wikipedia", "^query\\.", "org$"])),
            8 => format!(
                "query(\"action\") {}",
                r.pick(&["== \"purge\"", "present", "absent", "!= \"query\""])
            ),
            9 => format!(
                "method in {{ {} }}",
                r.pick(&["GET", "GET, HEAD", "POST, PURGE"])
            ),
            10 => format!(
                "ip in {{ {} }}",
                r.pick(&[
                    "198.51.100.0/24",
                    "10.0.0.0/8, 2001:db8::/32",
                    "203.0.113.5",
                    "192.0.2.0/25"
                ])
            ),
            11 => format!(
                "query contains \"{}\"",
                r.pick(&["json", "title", "SELECT"])
            ),
            12 => format!("port in {{ {} }}", r.pick(&["80", "443", "80, 8000-9000"])),
            13 => format!(
                "dst_ip in {{ {} }}",
                r.pick(&[
                    "198.51.100.0/24",
                    "10.0.0.0/8, 2001:db8::/32",
                    "203.0.113.5"
                ])
            ),
            _ => format!("path !~ \"{}\"", r.pick(&["^/w/", "html"])),
        };
    }
    let a = random_condition(r, depth + 1);
    let b = random_condition(r, depth + 1);
    match r.next() % 3 {
        0 => format!("({a} and {b})"),
        1 => format!("({a} or {b})"),
        _ => format!("not ({a})"),
    }
}

fn random_ruleset(r: &mut Rng, rules: usize) -> String {
    let mut src = String::new();
    for i in 0..rules {
        let action = match r.next() % 7 {
            0 => "allow".to_string(),
            1 => "log".to_string(),
            2 => "drop".to_string(),
            3 | 4 => format!("deny {}", 400 + r.next() % 100),
            _ => format!(
                "throttle {} requests per 1s by {}",
                1 + r.next() % 3,
                r.pick(&[
                    "ip",
                    "host, path",
                    "prefix(24, 64)",
                    "header(\"user-agent\")",
                    "global"
                ])
            ),
        };
        let shadow = if r.next() % 8 == 0 { "shadow\n" } else { "" };
        // Allows mostly go first, as they should; some come late, and the
        // compiler rejects those that conflict.
        let priority = if action == "allow" && r.next() % 4 != 0 {
            -1
        } else {
            (r.next() % 5) as i64
        };
        src += &format!(
            "rule r{i} {{\npriority {priority}\n{shadow}when {}\n{action}\n}}\n",
            random_condition(r, 0)
        );
    }
    src
}

#[test]
fn compiled_engine_agrees_with_the_reference_on_random_rulesets() {
    let mut r = Rng(0x0dd_ba11_cafe);
    let mut decisions = 0;
    let mut decided_by_rule = 0;
    for _ in 0..150 {
        let n = 1 + (r.next() % 30) as usize;
        let src = random_ruleset(&mut r, n);
        let c = compile(&src);
        let Some(rs) = c.ruleset else {
            // Exemption conflicts are errors; random rulesets hit them.
            let codes: Vec<&str> = c
                .diagnostics
                .iter()
                .filter(|d| d.severity == rctl_compiler::diag::Severity::Error)
                .map(|d| d.code)
                .collect();
            assert!(codes.iter().all(|c| *c == "E0050"), "{codes:?}\n{src}");
            continue;
        };
        let config = EngineConfig::default();
        let fast = rctl_dataplane::Engine::new(rs.clone(), &config).unwrap();
        let naive = NaiveEngine::new(rs, &config).unwrap();
        let mut scratch = fast.scratch();
        for t in 0..300u64 {
            let ua = r.pick(UAS);
            let mut headers: Vec<(&[u8], &[u8])> = Vec::new();
            if !ua.is_empty() || r.next() % 2 == 0 {
                headers.push((b"User-Agent", ua.as_bytes()));
            }
            let target = format!("{}{}", r.pick(PATHS), r.pick(QUERIES));
            let req = rctl_dataplane::Request {
                method: r.pick(METHODS).as_bytes(),
                host: r.pick(HOSTS).as_bytes(),
                target: target.as_bytes(),
                headers: &headers,
                ip: r.pick(IPS).parse().unwrap(),
                dst: match r.next() % 3 {
                    0 => None,
                    _ => Some(r.pick(IPS).parse().unwrap()),
                },
                port: if r.next() % 2 == 0 { 443 } else { 80 },
                time_ns: t * 50_000_000,
            };
            let a = fast.decide_request_with(&req, &mut scratch, None);
            let b = naive.decide_request(&req);
            assert_eq!(a, b, "ruleset:\n{src}\nrequest: {req:?}");
            decisions += 1;
            decided_by_rule += usize::from(a.verdict.rule().is_some());
            let p = Packet {
                src: req.ip,
                dst: req.dst,
                proto: [Proto::Tcp, Proto::Udp][t as usize % 2],
                dst_port: req.port,
                syn: t % 3 == 0,
                time_ns: req.time_ns,
            };
            assert_eq!(
                fast.decide_packet(&p),
                naive.decide_packet(&p),
                "ruleset:\n{src}\npacket: {p:?}"
            );
        }
    }
    assert!(decisions > 20_000, "{decisions}");
    assert!(
        decided_by_rule > decisions / 4,
        "random rules should decide often: {decided_by_rule} of {decisions}"
    );
}
