//! Generates large rulesets shaped like real edge policies, for the
//! compiler's scaling benchmarks (10,000 and 50,000 rules): most rules are
//! scoped to one of a hundred wikis by `host`, share a few path prefixes
//! and a few dozen User-Agent patterns, and overlap the way an operator's
//! rules do (the same site and path under several rules; narrower rules
//! after wider ones, some of them unreachable). Exemptions come in both
//! shapes the analysis must prove: trusted clients before every enforcing
//! rule, and health checks after all of them, which every enforcing rule
//! excludes by its path. A few address rules go to XDP, within its limits.

use crate::gen::{self, Rng};
use std::fmt::Write as _;
use std::path::Path;

const LANGS: &[&str] = &[
    "en", "de", "fr", "es", "ja", "ru", "it", "zh", "pt", "pl", "nl", "sv", "ar", "fa", "uk", "ko",
    "he", "id", "vi", "tr", "cs", "fi", "hu", "no", "ro",
];
const PROJECTS: &[&str] = &["wikipedia", "wiktionary", "wikisource", "wikivoyage"];
const PREFIXES: &[&str] = &[
    "/w/index.php",
    "/w/api.php",
    "/w/load.php",
    "/wiki/Special:",
    "/wiki/",
    "/api/rest_v1/page/html/",
    "/api/rest_v1/page/summary/",
    "/api/rest_v1/media/math/",
    "/static/images/",
    "/sparql",
];
/// The benchmark generator's User-Agents, and a few more.
fn agents() -> Vec<&'static str> {
    let mut v = gen::UAS.to_vec();
    v.extend(["node-fetch", "aiohttp", "libwww-perl", "Java"]);
    v
}

fn host(i: usize) -> String {
    let lang = LANGS[i % LANGS.len()];
    let project = PROJECTS[(i / LANGS.len()) % PROJECTS.len()];
    format!("{lang}.{project}.org")
}

/// A host index skewed towards the big wikis, as traffic and rules are.
fn pick_host(r: &mut Rng) -> usize {
    let hosts = (LANGS.len() * PROJECTS.len()) as u64;
    let a = r.below(hosts);
    let b = r.below(hosts);
    a.min(b) as usize
}

/// Writes `rules.rctl` (and `lists/`) with `rules` rules in all into
/// `dir`; returns the size of `rules.rctl` in bytes.
pub fn write_realistic(dir: &Path, rules: usize) -> usize {
    let mut r = Rng::new(0xed9e);
    std::fs::create_dir_all(dir.join("lists")).unwrap();
    let mut src = String::new();
    for b in 0..8 {
        let mut list = String::from("# cloud ranges\n");
        for _ in 0..1_000 {
            let len = 16 + r.below(9) as u32;
            let mut net = (r.next_u64() as u32) & (u32::MAX << (32 - len));
            // Clouds are not the edge's own networks (10/8, 208/8).
            if matches!(net >> 24, 10 | 208) {
                net ^= 1 << 31;
            }
            let _ = writeln!(list, "{}/{len}", std::net::Ipv4Addr::from(net));
        }
        std::fs::write(dir.join(format!("lists/cloud{b}.txt")), list).unwrap();
        let _ = writeln!(
            src,
            "ipblock cloud/c{b} {{\n  file \"lists/cloud{b}.txt\"\n}}\n"
        );
    }
    src +=
        "ipblock internal/trusted {\n  10.64.0.0/12\n  208.80.152.0/22\n  2620:0:860::/46\n}\n\n";
    let agents = agents();
    for (i, a) in agents.iter().enumerate() {
        let _ = writeln!(
            src,
            "pattern ua/a{i} {{\n  header(\"user-agent\") ~* \"^{a}[/ ]\"\n}}\n"
        );
    }
    for (i, p) in PREFIXES.iter().enumerate() {
        let _ = writeln!(
            src,
            "pattern path/p{i} {{\n  path starts_with \"{p}\"\n}}\n"
        );
    }
    // The packet plane: a handful of address and flood rules, early (after
    // the trusted clients' exemptions, which come first of all).
    for b in 0..8 {
        let _ = writeln!(
            src,
            "rule drop_cloud{b} {{\n  priority 1\n  when ipblock@cloud/c{b} and proto == udp\n  drop\n}}\n"
        );
    }
    src += "rule syn_flood {\n  priority 2\n  when proto == tcp and port in { 80, 443 }\n  throttle 100 connections per 1s burst 200 by ip ban 1m\n}\n\n";
    for i in 0..rules.saturating_sub(9) {
        let h = pick_host(&mut r);
        let scope = match r.below(20) {
            0..=15 => format!("host == \"{}\" and ", host(h)),
            16..=18 => format!(
                "host in {{ \"{}\", \"{}\", \"{}\" }} and ",
                host(h),
                host(h + 1),
                host(h + 7)
            ),
            _ => String::new(),
        };
        let p = r.below(PREFIXES.len() as u64) as usize;
        let ua = r.below(agents.len() as u64) as usize;
        let sites = if r.below(10) == 0 {
            "  sites { eqiad, codfw }\n"
        } else {
            ""
        };
        let (priority, when, action) = match i % 20 {
            // Trusted clients, exempted before anything can enforce.
            0 if i % 200 == 0 => (
                0,
                format!(
                    "ipblock@internal/trusted and header(\"user-agent\") starts_with \"wmf-{}/\"",
                    i % 97
                ),
                "allow".to_string(),
            ),
            // Health checks on the service port, exempted after everything:
            // every enforcing rule excludes their path or their port.
            1 => (
                900,
                format!(
                    "{scope}proto == tcp and port == 8080 and path == \"/healthz/{i}\""
                ),
                "allow".to_string(),
            ),
            0 | 2..=8 => (
                100,
                format!("{scope}pattern@path/p{p} and pattern@ua/a{ua}"),
                "deny 403 \"Please respect the User-Agent policy\"".to_string(),
            ),
            9..=14 => (
                200,
                format!(
                    "{scope}path starts_with \"{}{}\" and not ipblock@internal/trusted",
                    PREFIXES[p],
                    r.below(50)
                ),
                format!(
                    "throttle {} requests per 1m by {}",
                    10 + r.below(1000),
                    ["ip", "prefix(24, 64)", "host, path", "header(\"user-agent\")"]
                        [r.below(4) as usize]
                ),
            ),
            15 | 16 => (
                50,
                format!("{scope}pattern@ua/a{ua}"),
                "log".to_string(),
            ),
            17 => (
                100,
                format!(
                    "{scope}path == \"{}{i}\" and method in {{ POST, PUT }}",
                    PREFIXES[p]
                ),
                "deny 405".to_string(),
            ),
            18 => (
                150,
                format!(
                    "{scope}ipblock@cloud/c{} and pattern@path/p{p} and query(\"action\") in {{ \"raw\", \"render\" }}",
                    ua % 8
                ),
                "drop".to_string(),
            ),
            _ => (
                120,
                format!(
                    "{scope}path starts_with \"{}\" and header(\"referer\") ~ \"^https?://spam{}\\\\.example/\"",
                    PREFIXES[p],
                    i / 20
                ),
                "deny".to_string(),
            ),
        };
        let _ = writeln!(
            src,
            "rule r{i} {{\n  priority {priority}\n{sites}  when {when}\n  {action}\n}}\n"
        );
    }
    std::fs::write(dir.join("rules.rctl"), &src).unwrap();
    src.len()
}
