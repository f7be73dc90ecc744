//! The request mix of the benchmarks: browsers reading articles, API
//! clients, crawlers and scrapers, with 4–5 headers each: what the engine
//! bench, the SPOE agent's bench and the baselines' test decide.

use crate::gen;
use std::net::{IpAddr, Ipv4Addr};

/// One request of the mix, owned.
pub struct Owned {
    /// The method.
    pub method: &'static str,
    /// The Host header.
    pub host: &'static str,
    /// Path and query.
    pub target: String,
    /// The other headers, in order.
    pub headers: Vec<(&'static str, String)>,
    /// The client's address.
    pub ip: IpAddr,
}

const BROWSERS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
];

/// A realistic mix: mostly browsers reading articles, some API clients and
/// crawlers, a few scrapers that the generated rules are about.
pub fn requests(n: usize) -> Vec<Owned> {
    let mut rng = gen::Rng::new(0xbeef);
    (0..n)
        .map(|i| {
            let bot = [
                "python-requests",
                "Go-http-client",
                "curl",
                "Scrapy",
                "AhrefsBot",
                "GPTBot",
                "Bytespider",
            ][i % 7];
            let (ua, path) = match rng.below(10) {
                0..=5 => (
                    BROWSERS[i % 3].to_string(),
                    format!("/wiki/Article_{}", rng.below(100_000)),
                ),
                6 => (
                    format!("{bot}/2.{}", rng.below(40)),
                    "/w/api.php".to_string(),
                ),
                7 => (
                    format!("{bot}/{}", rng.below(1_000)),
                    format!("/api/rest_v1/page/html/T{}", rng.below(1000)),
                ),
                8 => (
                    format!("Mozilla/5.0 (compatible; {bot}/1.0)"),
                    format!("/w/index.php{}", rng.below(2000)),
                ),
                _ => (BROWSERS[0].to_string(), "/sparql".to_string()),
            };
            let query = match rng.below(4) {
                0 => format!("?action=q{}&format=json", rng.below(2000)),
                1 => "?title=Special:Search&search=x".to_string(),
                _ => String::new(),
            };
            let mut headers = vec![
                ("User-Agent", ua),
                ("Accept", "text/html".to_string()),
                ("Accept-Language", "en".to_string()),
                ("Cookie", "session=abc".to_string()),
            ];
            if rng.below(3) == 0 {
                headers.push((
                    "Referer",
                    format!("https://spam{}.example/", rng.below(3000)),
                ));
            }
            Owned {
                method: ["GET", "GET", "GET", "POST", "HEAD"][i % 5],
                host: "en.wikipedia.org",
                target: format!("{path}{query}"),
                headers,
                ip: IpAddr::V4(Ipv4Addr::from(rng.next_u64() as u32)),
            }
        })
        .collect()
}
