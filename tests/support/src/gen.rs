//! Generates a large, realistic ruleset for benchmarks: 100,000 CIDRs in 50
//! ipblock list files, 1,000 patterns and 1,000 rules. The packet plane's
//! part stays within the XDP program's tables at any size.
//!
//! The tests that a rule or pattern `and`s together are written in an
//! order drawn at random (from a fixed seed), not in a chosen one: an
//! evaluator that tests them left to right (the reference, wirefilter, VCL,
//! HAProxy) meets a costly address test before a cheap test that is always
//! false as often as after it, so no order favours one evaluator.

use std::fmt::Write as _;
use std::path::Path;

/// A small deterministic generator (xorshift64*), so every run compiles the
/// same input.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 counts as 1).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Joins `tests` with `and`, in an order drawn from `rng`.
fn and(rng: &mut Rng, mut tests: Vec<String>) -> String {
    for i in (1..tests.len()).rev() {
        tests.swap(i, rng.below(i as u64 + 1) as usize);
    }
    tests.join(" and ")
}

/// User-Agents of clients that rules single out.
pub const UAS: &[&str] = &[
    "python-requests",
    "Go-http-client",
    "curl",
    "Wget",
    "okhttp",
    "axios",
    "Scrapy",
    "HeadlessChrome",
    "PetalBot",
    "AhrefsBot",
    "SemrushBot",
    "MJ12bot",
    "DotBot",
    "BLEXBot",
    "DataForSeoBot",
    "Bytespider",
    "ClaudeBot",
    "GPTBot",
    "CCBot",
    "Amazonbot",
];
const PATHS: &[&str] = &[
    "/w/index.php",
    "/w/api.php",
    "/wiki/Special:",
    "/api/rest_v1/page/html/",
    "/sparql",
    "/bigdata/namespace/wdq/sparql",
    "/w/load.php",
    "/static/images/",
    "/api/rest_v1/media/math/",
    "/wiki/",
];

/// Writes the ruleset into `dir` (`rules.rctl` and `lists/*.txt`); returns
/// the number of source bytes of `rules.rctl`.
pub fn write_ruleset(
    dir: &Path,
    blocks: usize,
    cidrs_per_block: usize,
    patterns: usize,
    rules: usize,
) -> usize {
    let mut rng = Rng::new(0x5eed);
    // Its own stream, so the lists stay what they were.
    let mut order = Rng::new(0x0bde2);
    std::fs::create_dir_all(dir.join("lists")).unwrap();
    let mut src = String::new();
    // Each block draws from its own first octet (IPv4) or first 16 bits
    // (IPv6), so blocks are disjoint, as providers' ranges are.
    let (span4, span6) = (223 / blocks.max(1) as u64, 0x1000 / blocks.max(1) as u64);
    for b in 0..blocks {
        let mut list = String::from("# generated\n");
        for _ in 0..cidrs_per_block {
            if rng.below(10) == 0 {
                let hi = 0x2000 + (b as u64 * span6 + rng.below(span6)) as u16;
                let _ = writeln!(
                    list,
                    "{hi:x}:{:x}:{:x}::/{}",
                    rng.next_u64() as u16,
                    rng.next_u64() as u16,
                    32 + rng.below(33)
                );
            } else {
                let first = 1 + b as u64 * span4 + rng.below(span4);
                let a = (rng.next_u64() as u32 & 0x00ff_ffff) | (first as u32) << 24;
                let len = 16 + rng.below(17) as u32;
                let net = a & (u32::MAX << (32 - len));
                let _ = writeln!(list, "{}/{len}", std::net::Ipv4Addr::from(net));
            }
        }
        std::fs::write(dir.join(format!("lists/block{b}.txt")), list).unwrap();
        let _ = writeln!(
            src,
            "ipblock gen/b{b} {{\n  file \"lists/block{b}.txt\"\n}}\n"
        );
    }
    for p in 0..patterns {
        let ua = UAS[p % UAS.len()];
        let path = PATHS[(p / UAS.len()) % PATHS.len()];
        let body = match p % 5 {
            0 => and(
                &mut order,
                vec![
                    format!("header(\"user-agent\") ~* \"^{ua}[/ ]\""),
                    format!("path starts_with \"{path}\""),
                ],
            ),
            1 => format!("header(\"user-agent\") contains \"{ua}/{p}\""),
            2 => and(
                &mut order,
                vec![
                    format!("path starts_with \"{path}{p}\""),
                    "method in { GET, HEAD }".to_string(),
                ],
            ),
            3 => and(
                &mut order,
                vec![
                    format!("query(\"action\") == \"q{p}\""),
                    format!("path == \"{path}\""),
                ],
            ),
            _ => format!("header(\"referer\") ~ \"^https?://spam{p}\\\\.example/\""),
        };
        let _ = writeln!(src, "pattern gen/p{p} {{\n  {body}\n}}\n");
    }
    for r in 0..rules {
        let p = r % patterns;
        let b = r % blocks;
        let ip = format!("ipblock@gen/b{b}");
        let pat = format!("pattern@gen/p{p}");
        let (prio, tests, action) = match r % 10 {
            0 => (
                1,
                vec![
                    ip,
                    "port in { 80, 443 }".to_string(),
                    format!("header(\"x-trusted-{r}\") present"),
                ],
                "allow".to_string(),
            ),
            1..=4 => (100, vec![pat], "deny 403 \"blocked\"".to_string()),
            5..=7 => (
                200,
                vec![pat, format!("not {ip}")],
                format!("throttle {} requests per 1m by ip", 10 + r),
            ),
            8 => (300, vec![pat], "log".to_string()),
            // The packet plane holds a few dozen terms: the first drops are
            // address and port rules (first of all, in XDP), the rest read
            // the path too (user space).
            _ if r < 300 => (
                0,
                vec![ip, format!("port == {}", 1000 + r)],
                "drop".to_string(),
            ),
            _ => (
                5,
                vec![ip, format!("path starts_with \"/x{r}/\"")],
                "drop".to_string(),
            ),
        };
        let when = and(&mut order, tests);
        let _ = writeln!(
            src,
            "rule gen_r{r} {{\n  priority {prio}\n  when {when}\n  {action}\n}}\n"
        );
    }
    std::fs::write(dir.join("rules.rctl"), &src).unwrap();
    src.len()
}
