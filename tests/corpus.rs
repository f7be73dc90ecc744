//! The shared decision corpus (`tests/corpus/*.rctl`) on every evaluator,
//! and a differential test of the compiled engine against the reference on
//! random rulesets and traffic.

use crate::util::*;
use rctl_compiler::ir::Proto;
use rctl_dataplane::testing::{run_test, run_test_reference};
use rctl_dataplane::{EngineConfig, NaiveEngine, Packet};
use rctl_testkit::Rng;

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

pub(crate) fn random_condition(r: &mut Rng, depth: u32) -> String {
    if depth > 2 || r.next() % 3 == 0 {
        return match r.next() % 16 {
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
                    "192.0.2.0/25",
                    // Overlaps each of the first two in part.
                    "198.51.100.128/25, 10.1.0.0/16, 2001:db8:1::/48, 203.0.113.0/24"
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
            14 => format!(
                "url ~ \"{}\"",
                r.pick(&[
                    "(?-u)^/w/api\\.php\\?",
                    "[?&]title=",
                    "(?-u)%EA.",
                    "^/wiki/[^?]*$"
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

pub(crate) fn random_ruleset(r: &mut Rng, rules: usize) -> String {
    random_rules(r, rules).concat()
}

/// Random rules, one string each.
pub(crate) fn random_rules(r: &mut Rng, rules: usize) -> Vec<String> {
    let mut src = Vec::new();
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
        src.push(format!(
            "rule r{i} {{\npriority {priority}\n{shadow}when {}\n{action}\n}}\n",
            random_condition(r, 0)
        ));
    }
    src
}

/// Rules whose conditions are one or two address tests, over sets that
/// overlap each other in every way: equal, nested, in part, not at all.
pub(crate) fn address_rules(r: &mut Rng, rules: usize) -> Vec<String> {
    const SETS: &[&str] = &[
        "198.51.100.0/24",
        "198.51.100.0/25",
        "198.51.100.128/25, 10.1.0.0/16",
        "10.0.0.0/8, 2001:db8::/32",
        "2001:db8::/48, 203.0.113.0/24",
        "192.0.2.0/25",
    ];
    (0..rules)
        .map(|i| {
            let test = |r: &mut Rng| {
                let field = r.pick(&["ip", "ip", "dst_ip"]);
                let not = r.pick(&["", "", "not "]);
                format!("{not}{field} in {{ {} }}", r.pick(SETS))
            };
            let mut when = test(r);
            if r.next() % 3 == 0 {
                when = format!("{when} and {}", test(r));
            }
            let action = r.pick(&["allow", "deny", "drop", "throttle 1 requests per 1h by ip"]);
            format!(
                "rule r{i} {{\npriority {}\nwhen {when}\n{action}\n}}\n",
                r.next() % 4
            )
        })
        .collect()
}

/// A random request.
pub(crate) fn random_request<'a>(
    r: &mut Rng,
    headers: &'a mut Vec<(&'static [u8], &'static [u8])>,
    target: &'a mut String,
    t: u64,
) -> rctl_dataplane::Request<'a> {
    let ua = r.pick(UAS);
    headers.clear();
    if !ua.is_empty() || r.next() % 2 == 0 {
        headers.push((b"User-Agent", ua.as_bytes()));
    }
    *target = format!("{}{}", r.pick(PATHS), r.pick(QUERIES));
    rctl_dataplane::Request {
        method: r.pick(METHODS).as_bytes(),
        host: r.pick(HOSTS).as_bytes(),
        target: target.as_bytes(),
        headers,
        ip: r.pick(IPS).parse().unwrap(),
        dst: match r.next() % 3 {
            0 => None,
            _ => Some(r.pick(IPS).parse().unwrap()),
        },
        port: if r.next() % 2 == 0 { 443 } else { 80 },
        time_ns: t * 50_000_000,
    }
}

#[test]
fn no_exemption_the_compiler_accepts_is_preempted_on_random_traffic() {
    // Random rulesets in which allows come anywhere; the allows the
    // compiler reports (E0050) are removed until it accepts the rest. Every
    // remaining allow after enforcing rules is then a promise: checked on
    // random traffic by the reference evaluator, rule by rule.
    let mut r = Rng(0xa110_3e5e);
    let (mut checked, mut removed, mut late) = (0, 0, 0);
    for round in 0..900 {
        let n = 2 + (r.next() % 12) as usize;
        // Two rulesets in three are random; the third kind is made of
        // address tests, to put the address-set reasoning on trial.
        let mut rules = if round % 3 == 2 {
            address_rules(&mut r, n)
        } else {
            random_rules(&mut r, n)
        };
        for rule in rules.iter_mut() {
            // Any priority, allows included; a third of the rules allow.
            let mut lines: Vec<String> = rule.lines().map(String::from).collect();
            lines[1] = format!("priority {}", r.next() % 4);
            if r.next() % 3 == 0 {
                let action = lines.len() - 2;
                lines[action] = "allow".into();
            }
            *rule = lines.join("\n") + "\n";
        }
        let (rs, src) = loop {
            let src = rules.concat();
            let c = compile(&src);
            if let Some(rs) = c.ruleset {
                break (rs, src);
            }
            let mut bad: Vec<String> = Vec::new();
            for d in c
                .diagnostics
                .iter()
                .filter(|d| d.severity == rctl_compiler::diag::Severity::Error)
            {
                assert_eq!(d.code, "E0050", "{src}");
                let name = d.message.split('`').nth(1).unwrap();
                bad.push(format!("rule {name} {{"));
            }
            removed += bad.len();
            rules.retain(|x| !bad.iter().any(|b| x.starts_with(b.as_str())));
        };
        late += rs
            .rules
            .iter()
            .enumerate()
            .filter(|(a, x)| {
                x.action == rctl_compiler::ir::Action::Allow
                    && rs.rules[..*a].iter().any(|e| {
                        e.action.is_terminal()
                            || matches!(e.action, rctl_compiler::ir::Action::Throttle(_))
                    })
            })
            .count();
        let naive = NaiveEngine::new(rs.clone(), &EngineConfig::default()).unwrap();
        let (mut headers, mut target) = (Vec::new(), String::new());
        for t in 0..600 {
            let req = random_request(&mut r, &mut headers, &mut target, t);
            checked += no_allow_is_preempted(&rs, &naive, &req, &src);
        }
    }
    assert!(removed > 50 && late > 100, "{removed} {late}");
    assert!(checked > 2_000, "{checked}");
}

/// The compiler's promise about exemptions, checked on traffic by an
/// independent route: when it reported no conflict, no request that an
/// allow matches reaches an enforcing rule evaluated before it. Walking
/// the rules before the allow in order, the first active one that matches
/// the request and decides or limits (allow, deny, drop, throttle) must be
/// an allow, when there is one (each rule's match computed on its own by
/// the reference evaluator, not by any evaluator's decision path). Returns
/// the requests on which an allow matched with enforcing rules before it.
pub(crate) fn no_allow_is_preempted(
    rs: &rctl_compiler::ir::Ruleset,
    naive: &NaiveEngine,
    req: &rctl_dataplane::Request<'_>,
    src: &str,
) -> usize {
    use rctl_compiler::ir::Action;
    let acting = |r: &rctl_compiler::ir::Rule| {
        r.enabled && !r.shadow && !r.is_packet_limit() && r.action != Action::Log
    };
    let mut checked = 0;
    for (a, allow) in rs.rules.iter().enumerate() {
        if !allow.enabled || allow.shadow || allow.action != Action::Allow {
            continue;
        }
        let earlier: Vec<usize> = (0..a).filter(|&i| acting(&rs.rules[i])).collect();
        if earlier.iter().all(|&i| rs.rules[i].action == Action::Allow)
            || !naive.rule_matches(a, req)
        {
            continue;
        }
        checked += 1;
        if let Some(&i) = earlier.iter().find(|&&i| naive.rule_matches(i, req)) {
            assert!(
                rs.rules[i].action == Action::Allow,
                "`{}` ({}) decides a request that the allow `{}` after it matches, and no E0050 was reported\nruleset:\n{src}\nrequest: {req:?}",
                rs.rules[i].name,
                rs.rules[i].action.kind(),
                allow.name
            );
        }
    }
    checked
}

#[test]
fn compiled_engine_agrees_with_the_reference_on_random_rulesets() {
    let mut r = Rng(0x0dd_ba11_cafe);
    let mut decisions = 0;
    let mut decided_by_rule = 0;
    let mut exemptions_checked = 0;
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
        let naive = NaiveEngine::new(rs.clone(), &config).unwrap();
        let mut scratch = fast.scratch();
        let (mut headers, mut target) = (Vec::new(), String::new());
        for t in 0..300u64 {
            let req = random_request(&mut r, &mut headers, &mut target, t);
            let a = fast.decide_request_with(&req, &mut scratch, None);
            let b = naive.decide_request(&req);
            assert_eq!(a, b, "ruleset:\n{src}\nrequest: {req:?}");
            exemptions_checked += no_allow_is_preempted(&rs, &naive, &req, &src);
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
    let _ = exemptions_checked;
    assert!(
        decided_by_rule > decisions / 4,
        "random rules should decide often: {decided_by_rule} of {decisions}"
    );
}
