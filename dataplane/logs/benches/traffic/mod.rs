//! The benchmark's traffic: value distributions shaped like a large
//! wiki's edge, so that nothing that keys on a field's value (a cache, a
//! memo, a counter table) sees fewer distinct values than it would in
//! production.
//!
//! - Titles: Zipf (s ≈ 1) over about a million distinct titles, some of
//!   them non-ASCII (percent-encoded UTF-8), in page views, REST, the
//!   action API, `index.php` with revision ids, and searches.
//! - Hosts: about 300 wikis (languages × projects) plus Wikidata's.
//! - User-Agents: browsers by version, build and platform, crawlers,
//!   tools with contact addresses, libraries' defaults by version, an
//!   absent one now and then, and the shapes the shipped rules single out
//!   (library clients on `/sparql`, the index updater from its hosts,
//!   scanners). Full build numbers make most browser strings rare: a
//!   256 MB log (1.1 million lines) holds about 580,000 distinct
//!   User-Agents, and the 4,096 most frequent cover half of its lines, so
//!   a memo of recent values would miss about half the time.
//! - Clients: Zipf over about two million addresses (a few heavy ones),
//!   some IPv6, some in the cloud and monitoring ranges the rules name.

use rctl_testkit::Rng;

/// One request's values.
pub struct Hit {
    /// The client address.
    pub ip: String,
    /// The Host.
    pub host: String,
    /// The path.
    pub path: String,
    /// The query, without `?` (empty: none).
    pub query: String,
    /// The User-Agent (`None`: not sent).
    pub ua: Option<String>,
    /// The Referer (`None`: not sent).
    pub referer: Option<String>,
    /// The method.
    pub method: &'static str,
    /// The status.
    pub status: u16,
    /// The response size.
    pub bytes: u64,
}

const SYL: [&str; 64] = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "to",
    "vi",
    "an",
    "el",
    "in",
    "or",
    "us",
    "ber",
    "dor",
    "fen",
    "gal",
    "hor",
    "jun",
    "kel",
    "lin",
    "mor",
    "nar",
    "pol",
    "quin",
    "ros",
    "sul",
    "tan",
    "ur",
    "val",
    "wen",
    "xan",
    "yor",
    "zel",
    "bri",
    "cas",
    "del",
    "fir",
    "gre",
    "hel",
    "ist",
    "jor",
    "kry",
    "lam",
    "mon",
    "nor",
    "oct",
    "pra",
    "que",
    "ris",
    "ste",
    "tre",
    "uni",
    "ver",
    "wol",
    "xer",
    "yst",
    "zor",
    "%C3%A9",
    "%C3%B6",
    "%E5%9B%BD",
    "%D0%B4",
    "%EA%9D%AE",
    "%CE%B1",
];

const WORDS: [&str; 16] = [
    "",
    "River",
    "Battle",
    "University",
    "Station",
    "Church",
    "District",
    "Album",
    "Film",
    "Football_Club",
    "Lake",
    "Island",
    "Railway",
    "Treaty",
    "Dynasty",
    "(disambiguation)",
];

const LANGS: [&str; 60] = [
    "en", "de", "fr", "es", "ja", "ru", "it", "zh", "pt", "pl", "nl", "ar", "fa", "uk", "sv", "id",
    "vi", "ko", "he", "cs", "fi", "tr", "hu", "no", "ro", "ca", "sr", "el", "da", "bg", "th", "ms",
    "hi", "sk", "eo", "lt", "et", "sl", "hr", "eu", "gl", "hy", "ka", "kk", "bn", "ta", "ur", "lv",
    "az", "be", "simple", "sh", "uz", "nn", "la", "af", "mk", "ml", "te", "cy",
];

const PROJECTS: [&str; 5] = [
    "wikipedia",
    "wiktionary",
    "wikisource",
    "wikibooks",
    "wikivoyage",
];

/// Zipf-distributed (s ≈ 1) rank in `0..n`: the inverse of the CDF's
/// logarithmic approximation, `n^u - 1`.
fn zipf(r: &mut Rng, n: u64) -> u64 {
    let u = (r.next() >> 11) as f64 / (1u64 << 53) as f64;
    ((n as f64).powf(u) as u64).saturating_sub(1).min(n - 1)
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The title of rank `i` (distinct for each `i` below 2^24).
fn title(i: u64) -> String {
    let h = mix(i);
    let mut t = String::with_capacity(40);
    for k in 0..4 {
        let s = SYL[((i >> (6 * k)) & 63) as usize];
        if k == 0 {
            let mut c = s.chars();
            if let Some(f) = c.next() {
                t.push(f.to_ascii_uppercase());
                t.push_str(c.as_str());
            }
        } else {
            if k == 2 {
                t.push('_');
            }
            t.push_str(s);
        }
    }
    let w = WORDS[(h % 16) as usize];
    if !w.is_empty() {
        t.push('_');
        t.push_str(w);
    }
    t
}

fn ua(r: &mut Rng) -> Option<String> {
    let os = [
        "Windows NT 10.0; Win64; x64",
        "Macintosh; Intel Mac OS X 10_15_7",
        "X11; Linux x86_64",
        "X11; Ubuntu; Linux x86_64",
        "Linux; Android 14; Pixel 8",
        "Linux; Android 13; SM-S918B",
        "iPhone; CPU iPhone OS 17_5 like Mac OS X",
        "Windows NT 6.1; Win64; x64",
    ];
    let o = os[r.below(os.len() as u64) as usize];
    Some(match r.below(1000) {
        0..=379 => {
            let v = 100 + r.below(32);
            format!(
                "Mozilla/5.0 ({o}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.{}.{} Safari/537.36",
                5000 + r.below(1500),
                r.below(200)
            )
        }
        380..=559 => {
            let v = 100 + r.below(36);
            format!("Mozilla/5.0 ({o}; rv:{v}.0) Gecko/20100101 Firefox/{v}.0")
        }
        560..=679 => format!(
            "Mozilla/5.0 ({o}) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/{}.{} Mobile/15E148 Safari/604.1",
            14 + r.below(5),
            r.below(7)
        ),
        680..=729 => format!(
            "Mozilla/5.0 ({o}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{}.0.0.0 Safari/537.36 Edg/{}.0.{}.{}",
            110 + r.below(22),
            110 + r.below(22),
            2000 + r.below(600),
            r.below(100)
        ),
        730..=789 => [
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
            "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
            "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
            "Mozilla/5.0 (compatible; Applebot/0.1; +http://www.apple.com/go/applebot)",
            "DuckDuckBot/1.1; (+http://duckduckgo.com/duckduckbot.html)",
            "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
        ][r.below(6) as usize]
            .to_string(),
        790..=869 => format!(
            "{}Bot/{}.{} (https://tools.example.org/{}; maintainer{}@example.org) {}",
            ["Citation", "Archive", "Link", "Stub", "Cat", "Lint", "Stats", "Ref"]
                [r.below(8) as usize],
            r.below(4),
            r.below(20),
            r.below(3000),
            r.below(3000),
            ["pywikibot/9.1.2", "mwclient/0.11.0", "Wikimate/1.0", "requests/2.31"]
                [r.below(4) as usize]
        ),
        870..=909 => format!("python-requests/2.{}.{}", 20 + r.below(13), r.below(4)),
        910..=929 => format!("curl/{}.{}.{}", 7 + r.below(2), r.below(89), r.below(3)),
        930..=944 => ["Go-http-client/1.1", "Go-http-client/2.0"][r.below(2) as usize].to_string(),
        945..=954 => format!(
            "Java/{}.0.{}",
            [11, 17, 21][r.below(3) as usize],
            r.below(25)
        ),
        955..=964 => format!("okhttp/4.{}.{}", r.below(13), r.below(3)),
        965..=974 => format!("aiohttp/3.{}.{}", r.below(10), r.below(6)),
        975..=979 => format!("Wget/1.{}.{}", 19 + r.below(3), r.below(5)),
        980..=984 => [
            "sqlmap/1.7.2#stable (https://sqlmap.org)",
            "Mozilla/5.0 zgrab/0.x",
            "Nuclei - Open-source project (github.com/projectdiscovery/nuclei)",
            "Mozilla/5.00 (Nikto/2.5.0) (Evasions:None) (Test:000001)",
        ][r.below(4) as usize]
            .to_string(),
        _ => return None,
    })
}

fn v4(a: u64, b: u64, c: u64, d: u64) -> String {
    format!("{a}.{b}.{c}.{d}")
}

/// A client address: Zipf over about two million, some in named ranges.
fn client(r: &mut Rng) -> String {
    match r.below(1000) {
        0..=29 => {
            // Cloud: AWS's 3.5.140.0/22 and GCP's 34.64.0.0/10.
            if r.below(2) == 0 {
                v4(3, 5, 140 + r.below(4), r.below(256))
            } else {
                v4(34, 64 + r.below(64), r.below(256), 1 + r.below(254))
            }
        }
        30..=31 => v4(91, 198, 174, 192 + r.below(32)),
        32 => v4(10, r.below(256), r.below(256), 1 + r.below(254)),
        33..=109 => {
            let k = mix(zipf(r, 200_000) ^ 0x6666);
            format!(
                "2a0{}:{:x}:{:x}::{:x}",
                1 + k % 9,
                (k >> 8) & 0xffff,
                (k >> 24) & 0xffff,
                (k >> 40) & 0xffff
            )
        }
        _ => {
            let k = mix(zipf(r, 2_000_000));
            v4(
                11 + (k & 0xff) % 180,
                (k >> 8) & 0xff,
                (k >> 16) & 0xff,
                1 + ((k >> 24) & 0xff) % 254,
            )
        }
    }
}

fn host(r: &mut Rng) -> String {
    let l = LANGS[zipf(r, LANGS.len() as u64) as usize];
    let p = PROJECTS[zipf(r, PROJECTS.len() as u64) as usize];
    let m = if r.below(4) == 0 { ".m" } else { "" };
    format!("{l}{m}.{p}.org")
}

/// Draws the next request.
pub fn hit(r: &mut Rng) -> Hit {
    let t = title(zipf(r, 1_000_000));
    let mut h = Hit {
        ip: client(r),
        host: host(r),
        path: String::new(),
        query: String::new(),
        ua: ua(r),
        referer: None,
        method: "GET",
        status: [200, 200, 200, 200, 200, 200, 304, 301, 404, 429][r.below(10) as usize],
        bytes: r.below(200_000),
    };
    match r.below(1000) {
        0..=559 => h.path = format!("/wiki/{t}"),
        560..=639 => {
            h.path = format!(
                "/api/rest_v1/page/{}/{t}",
                ["html", "summary", "mobile-sections"][r.below(3) as usize]
            )
        }
        640..=709 => {
            h.path = "/w/api.php".into();
            h.query = format!(
                "action=query&format=json&prop={}&titles={t}&formatversion=2",
                ["revisions", "info", "pageimages", "extracts"][r.below(4) as usize]
            );
        }
        710..=759 => {
            h.path = "/w/index.php".into();
            h.query = match r.below(3) {
                0 => format!("title={t}&action=history"),
                1 => format!("title={t}&oldid={}", 1_000_000_000 + r.below(250_000_000)),
                _ => format!("title={t}&action=edit&section={}", r.below(12)),
            };
        }
        760..=789 => {
            h.path = "/w/index.php".into();
            h.query = format!("search={t}&title=Special:Search&ns0=1&fulltext=1");
        }
        790..=879 => {
            h.path = format!(
                "/static/images/project-logos/{}wiki{}.png",
                LANGS[r.below(LANGS.len() as u64) as usize],
                ["", "-1.5x", "-2x"][r.below(3) as usize]
            )
        }
        880..=939 => {
            h.path = "/w/load.php".into();
            h.query = format!(
                "lang={}&modules=startup&only=scripts&raw=1&skin={}&version={:x}",
                LANGS[r.below(LANGS.len() as u64) as usize],
                ["vector-2022", "minerva", "vector", "timeless"][r.below(4) as usize],
                r.below(1 << 20)
            );
        }
        _ => {
            h.host = "query.wikidata.org".into();
            h.path =
                ["/sparql", "/bigdata/namespace/wdq/sparql", "/sparql"][r.below(3) as usize].into();
            h.query = format!(
                "query=SELECT%20%3Fitem%20WHERE%20%7B%20%3Fitem%20wdt%3AP{}%20wd%3AQ{}%20%7D%20LIMIT%20{}",
                r.below(12_000),
                r.below(120_000_000),
                [10, 100, 1000][r.below(3) as usize]
            );
            if r.below(10) == 0 {
                // The index updater, from its hosts.
                h.ip = v4(208, 80, 154, 224 + r.below(16));
                h.ua = Some(format!(
                    "wmf-streaming-updater-consumer/0.3.{} (query-service)",
                    130 + r.below(20)
                ));
                h.method = "POST";
            }
        }
    }
    if r.below(3) == 0 {
        h.referer = Some(format!(
            "https://{}/wiki/{}",
            h.host,
            title(zipf(r, 1_000_000))
        ));
    }
    h
}
