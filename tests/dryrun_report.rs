//! `rctl dry-run --report`: the HTML page against the JSON report of the
//! same run (every figure on the page is marked with the JSON pointer of
//! the same figure), and rendered in headless Chromium: no horizontal
//! overflow at 1,000 and 1,400 px, every count labelled, clock times on
//! the time axes, the head's figures equal to the JSON's. Screenshots of
//! each case go to `<target>/tmp/report-screenshots/`.

use crate::dryrun::{rule_entry, FIXTURES};
use crate::util::*;
use rctl_testkit::capgen::Pcap;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One marked figure of a page: JSON pointer, value, shown text, label.
#[derive(Debug, Clone, PartialEq)]
struct Figure {
    pointer: String,
    value: u64,
    text: String,
    label: String,
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = tag[at..].find('"')? + at;
    Some(tag[at..end].to_string())
}

/// Every `<data>` figure of a page (as rctl writes it, or as Chromium
/// serialises it).
fn figures(html: &str) -> Vec<Figure> {
    html.split("<data ")
        .skip(1)
        .map(|rest| {
            let (tag, after) = rest.split_once('>').expect("a closed <data> tag");
            let tag = &format!(" {tag}");
            let text = after.split_once("</data>").expect("</data>").0;
            Figure {
                pointer: attr(tag, "data-f").expect("data-f"),
                value: attr(tag, "value")
                    .and_then(|v| v.parse().ok())
                    .expect("value"),
                text: text.to_string(),
                label: attr(tag, "data-l").expect("data-l"),
            }
        })
        .collect()
}

/// `n` with thousands separators, as a reader expects it.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = Vec::new();
    for (i, chunk) in s.as_bytes().rchunks(3).enumerate() {
        if i > 0 {
            out.insert(0, ",");
        }
        out.insert(0, std::str::from_utf8(chunk).unwrap());
    }
    out.concat()
}

/// Checks every figure of `page` against `json`; returns the figures.
fn check_figures(case: &str, page: &str, json: &Value) -> Vec<Figure> {
    let figs = figures(page);
    for f in &figs {
        let want = json
            .pointer(&f.pointer)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{case}: {} is not a number in the JSON", f.pointer));
        assert_eq!(f.value, want, "{case}: {}", f.pointer);
        assert_eq!(f.text, grouped(want), "{case}: {} as shown", f.pointer);
        assert!(!f.label.is_empty(), "{case}: {} has no label", f.pointer);
    }
    // The figures a responder reads first are all there.
    let has = |p: &str| figs.iter().any(|f| f.pointer == p);
    for k in ["deny", "throttle", "drop", "total"] {
        for x in ["requests", "clients"] {
            assert!(has(&format!("/affected/{k}/{x}")), "{case}: {k} {x}");
        }
    }
    assert!(has("/affected/total/legit_requests") && has("/affected/total/legit_clients"));
    for (i, rule) in json["rules"].as_array().unwrap().iter().enumerate() {
        for k in ["matches", "passed", "requests/allow", "requests/deny"] {
            assert!(has(&format!("/rules/{i}/{k}")), "{case}: rule {i} {k}");
        }
        for k in ["requests/throttle", "requests/drop", "requests/log"] {
            assert!(has(&format!("/rules/{i}/{k}")), "{case}: rule {i} {k}");
        }
        if rule["matches"].as_u64() > Some(0) {
            for (j, _) in rule["top_prefixes"].as_array().unwrap().iter().enumerate() {
                assert!(has(&format!("/rules/{i}/top_prefixes/{j}/count")), "{case}");
            }
        }
        if let Some(top) = rule["throttle"]["top"].as_array() {
            for j in 0..top.len() {
                for k in ["requests", "limited", "passed"] {
                    assert!(has(&format!("/rules/{i}/throttle/top/{j}/{k}")), "{case}");
                }
            }
        }
    }
    // Each chart draws its rule's whole series (per 100 ms when the JSON
    // has them, else per second), from the capture's first packet.
    let first_ns = json["totals"]["first_ns"].as_u64();
    let sum = |series: &Value, k: usize| -> u64 {
        series
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[k].as_u64().unwrap())
            .sum()
    };
    for svg in page.split("<svg class=chart ").skip(1) {
        let tag = format!(" {}", svg.split_once('>').unwrap().0);
        let num = |k: &str| attr(&tag, k).and_then(|v| v.parse::<u64>().ok()).unwrap();
        let i = num("data-series") as usize;
        let unit = num("data-unit-ms");
        let fine = &json["series_100ms"];
        let series = if fine.is_null() {
            &json["series"][i]
        } else {
            &fine[i]
        };
        assert_eq!(unit, if fine.is_null() { 1000 } else { 100 }, "{case}");
        assert_eq!(num("data-matched"), sum(series, 0), "{case}");
        assert_eq!(num("data-enforced"), sum(series, 1), "{case}");
        assert_eq!(
            Some(num("data-start-ms")),
            first_ns.map(|f| f / 1_000_000 / unit * unit),
            "{case}"
        );
        if !fine.is_null() {
            // Both resolutions count the same requests.
            assert_eq!(sum(&fine[i], 0), sum(&json["series"][i], 0), "{case}");
            assert_eq!(sum(&fine[i], 1), sum(&json["series"][i], 1), "{case}");
        }
    }
    figs
}

/// Runs a dry run with `--report` and `--format json`: (page, JSON).
fn report(dir: &Path, case: &str, args: &[&str]) -> (PathBuf, String, Value) {
    let html = dir.join(format!("{case}.html"));
    let mut all = vec!["dry-run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json", "--report", html.to_str().unwrap()]);
    let o = rctl(&all);
    assert!(
        o.status.success(),
        "{case}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let json: Value = serde_json::from_slice(&o.stdout).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        !page.contains("<script") && !page.contains("http://") && !page.contains("https://"),
        "{case}: self-contained"
    );
    (html, page, json)
}

fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures/pcap")
        .join(name)
        .display()
        .to_string()
}

fn fixture_rules() -> String {
    root().join("tests/fixtures/rules").display().to_string()
}

#[test]
fn every_figure_on_the_page_equals_the_json_for_every_fixture() {
    let dir = tempdir("report-figures");
    let rules = fixture_rules();
    let shipped = root().join("rules").display().to_string();
    let mut checked = 0;
    for name in FIXTURES {
        let pcap = fixture(&format!("{name}.pcap"));
        // The fixture rules (HTTP rules decide) and the shipped rules
        // (the packet plane drops the fixtures' loopback traffic).
        for (tag, r) in [("fixture", &rules), ("shipped", &shipped)] {
            let case = format!("{name}-{tag}");
            let (_, page, json) = report(&dir, &case, &[r.as_str(), "--pcap", &pcap]);
            checked += check_figures(&case, &page, &json).len();
        }
    }
    assert!(checked > 1_000, "{checked} figures checked");
    // The incidents under the fixture rules: each scraper address is a key
    // of the throttle, with its 10 requests passed and 20 limited.
    let (_, _, json) = report(
        &dir,
        "keys",
        &[&rules, "--pcap", &fixture("incidents.pcap")],
    );
    let rule = |n: &str| rule_entry(&json, n).clone();
    let s = rule("sparql_scrapers");
    assert_eq!(s["throttle"]["by"], "ip");
    assert_eq!(s["throttle"]["limited_keys"], 3);
    assert_eq!(s["passed"], 30);
    for k in s["throttle"]["top"].as_array().unwrap() {
        assert_eq!(
            (k["limited"].as_u64(), k["passed"].as_u64()),
            (Some(20), Some(10)),
            "{k}"
        );
    }
    let r = rule("rerender");
    assert_eq!(r["throttle"]["by"], "host, path");
    assert_eq!(r["throttle"]["top"][0]["limited"], 20);
    assert_eq!(r["throttle"]["top"][0]["passed"], 5);
    assert_eq!(json["affected"]["throttle"]["requests"], 80);
    assert_eq!(json["affected"]["total"]["requests"], 80);
    assert!(
        json["affected"]["legit_unmeasured"].is_null(),
        "a capture carries every header"
    );
    // The updater is exempt: its address is in the allow rule's block, and
    // it is never among the stopped.
    assert_eq!(rule("updater")["passed"], 0);
}

/// A capture of `reqs` (time in µs, client, path, User-Agent, whether
/// it sends Accept-Language), each client on one keep-alive flow.
fn capture(path: &Path, reqs: &[(u64, [u8; 4], &str, &str, bool)]) {
    let mut p = Pcap::new(std::fs::File::create(path).unwrap()).unwrap();
    let server = ([198, 51, 100, 10], 80);
    let mut seqs: std::collections::HashMap<[u8; 4], u32> = Default::default();
    for &(t, ip, target, ua, lang) in reqs {
        let client = (ip, 40_000 + u16::from(ip[3]));
        let seq = seqs.entry(ip).or_insert_with(|| {
            p.tcp(t, client, server, 0, 0x02, b"").unwrap();
            1
        });
        let lang = if lang { "Accept-Language: en\r\n" } else { "" };
        let head = format!(
            "GET {target} HTTP/1.1\r\nHost: query.example\r\nUser-Agent: {ua}\r\n{lang}\r\n"
        );
        p.tcp(t, client, server, *seq, 0x18, head.as_bytes())
            .unwrap();
        *seq += head.len() as u32;
    }
    p.finish().unwrap();
}

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
const RULES: &str =
    "rule scrapers { when header(\"user-agent\") ~* \"python\" deny 403 \"scripts\" }\n\
     rule sparql { when path == \"/sparql\" throttle 10 requests per 1m by ip }\n";

/// A generated client: address, path, User-Agent, whether it sends
/// Accept-Language.
type Client<'a> = ([u8; 4], &'a str, &'a str, bool);

/// The generated cases: a 2 s capture and a day.
fn generated(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let rules = dir.join("gen.rctl");
    std::fs::write(&rules, RULES).unwrap();
    // 2 s from 2026-12-01 17:05:09 UTC: a browser hitting /sparql 30
    // times (throttled past 10: legitimate-looking), two scripts 20 times
    // each (denied), and another browser reading pages.
    let t0 = 1_796_144_709_000_000u64;
    let python = "python-requests/2.31";
    let plan: [(Client, u64, u64); 4] = [
        (([203, 0, 113, 7], "/sparql", BROWSER, true), 30, 66_000),
        (([203, 0, 113, 20], "/sparql", python, false), 20, 95_000),
        (
            ([203, 0, 113, 21], "/w/index.php", python, false),
            20,
            97_000,
        ),
        (
            ([192, 0, 2, 44], "/wiki/Main_Page", BROWSER, true),
            30,
            60_000,
        ),
    ];
    let mut short: Vec<_> = plan
        .iter()
        .enumerate()
        .flat_map(|(k, &((ip, path, ua, lang), n, step))| {
            (0..n).map(move |i| (t0 + i * step + k as u64 * 10, ip, path, ua, lang))
        })
        .collect();
    short.sort_by_key(|r| r.0);
    let two = dir.join("two-seconds.pcap");
    capture(&two, &short);
    // A day from 2026-12-01 00:00 UTC: 2,880 requests, one every 30 s,
    // over four clients, one of them a script.
    let d0 = 1_796_083_200_000_000u64;
    let clients: [Client; 4] = [
        ([203, 0, 113, 7], "/sparql", BROWSER, true),
        ([203, 0, 113, 20], "/sparql", "python-requests/2.31", false),
        ([192, 0, 2, 44], "/wiki/Main_Page", BROWSER, true),
        ([192, 0, 2, 45], "/sparql", "curl/8.5.0", false),
    ];
    let day: Vec<_> = (0..2_880u64)
        .map(|i| {
            let (ip, path, ua, lang) = clients[(i % 4) as usize];
            (d0 + i * 30_000_000, ip, path, ua, lang)
        })
        .collect();
    let long = dir.join("a-day.pcap");
    capture(&long, &day);
    (rules, two, long)
}

#[test]
fn generated_captures_report_who_is_stopped_and_when() {
    let dir = tempdir("report-generated");
    let (rules, two, long) = generated(&dir);
    let r = rules.to_str().unwrap();
    let (_, page, json) = report(&dir, "two", &[r, "--pcap", two.to_str().unwrap()]);
    check_figures("two", &page, &json);
    let a = &json["affected"];
    assert_eq!(a["deny"]["requests"], 40);
    assert_eq!(a["deny"]["clients"], 2);
    assert_eq!(a["throttle"]["requests"], 20);
    assert_eq!(a["throttle"]["clients"], 1);
    assert_eq!(
        (
            a["total"]["requests"].as_u64(),
            a["total"]["clients"].as_u64()
        ),
        (Some(60), Some(3))
    );
    // Only the browser's throttled requests look legitimate.
    assert_eq!(a["total"]["legit_requests"], 20);
    assert_eq!(a["total"]["legit_clients"], 1);
    assert_eq!(json["rules"][1]["throttle"]["top"][0]["key"], "203.0.113.7");
    assert_eq!(json["rules"][1]["top_prefixes"][0]["key"], "203.0.113.0/24");
    // Bars of a tenth of a second with clock ticks for a 2 s capture.
    assert!(json["series_100ms"][1].as_array().unwrap().len() >= 20);
    assert!(page.contains("data-bucket-ms=\"100\""), "100 ms bars");
    for t in ["17:05:09.0", "17:05:09.5", "17:05:10.0"] {
        assert!(page.contains(&format!(">{t}</text>")), "tick {t}");
    }
    assert!(page.contains("2026-12-01 17:05:09."), "the time range");
    // The text report carries the same head.
    let o = rctl(&["dry-run", r, "--pcap", two.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("would deny 40 requests from 2 clients, throttle 20 requests from 1 client, drop 0 requests from 0 clients"),
        "{text}"
    );
    assert!(
        text.contains("20 requests from 1 client look legitimate"),
        "{text}"
    );
    assert!(
        text.contains(
            "keys (by ip): 1 counted, 1 limited; top: 203.0.113.7 (20 limited, 10 passed)"
        ),
        "{text}"
    );

    let (_, page, json) = report(&dir, "day", &[r, "--pcap", long.to_str().unwrap()]);
    check_figures("day", &page, &json);
    assert_eq!(json["totals"]["requests"], 2_880);
    assert!(json["series_100ms"].is_null(), "no tenths for a day");
    assert!(
        page.contains("data-bucket-ms=\"600000\""),
        "a day in 10 min bars"
    );
    assert!(
        page.contains(">03:00</text>") && page.contains(">21:00</text>"),
        "hour ticks"
    );
}

/// A log whose client is in an `allow` rule's block (the updater's
/// address, under the fixture rules) but does not send the updater's
/// User-Agent: throttled with the scrapers, and counted as legitimate.
#[test]
fn a_log_run_names_its_format_and_counts_allow_blocks_as_legitimate() {
    let dir = tempdir("report-log");
    let mut log: String = (0..20)
        .map(|s| {
            format!(
                "127.0.0.9 - - [13/May/2026:12:00:{s:02} +0000] \"GET /sparql HTTP/1.1\" 200 1 \"-\" \"curl/8.5.0\"\n"
            )
        })
        .collect();
    // And a line that is no request: the page names it.
    log.push_str("not <a> request\n");
    let path = dir.join("access.log");
    std::fs::write(&path, log).unwrap();
    let l = path.to_str().unwrap();
    let rules = fixture_rules();
    let (_, page, json) = report(&dir, "log", &[&rules, "--log", l]);
    check_figures("log", &page, &json);
    // 10 a minute with a burst of 10, one request a second for 20 s: the
    // first 10 pass, then one more each 6 s (at 12, 18 s, and the bucket
    // refilled from 0 s): 13 pass, 7 are throttled.
    let throttled = rule_entry(&json, "sparql_scrapers")["requests"]["throttle"].clone();
    assert_eq!(throttled, 7);
    let a = &json["affected"]["throttle"];
    assert_eq!((&a["requests"], &a["clients"]), (&throttled, &1.into()));
    assert_eq!(
        (&a["legit_requests"], &a["legit_clients"]),
        (&throttled, &1.into())
    );
    assert!(json["series_100ms"].is_null(), "a log timed to the second");
    // nginx's combined format logs no Accept-Language: only the allow
    // blocks tell there, and the page says the figures are lower bounds.
    assert_eq!(json["affected"]["legit_unmeasured"], serde_json::json!([l]));
    let lead = page
        .split("id=verdict>")
        .nth(1)
        .and_then(|p| p.split("</p>").next())
        .unwrap_or_default();
    assert!(
        lead.contains("<strong class=legit>at least ")
            && lead.contains("<span id=legit-unmeasured>")
            && lead.contains("so these are lower bounds"),
        "{lead}"
    );
    assert!(
        page.contains("access log (nginx-combined)"),
        "the input type"
    );
    assert!(page.contains("every request counted, nothing sampled"));
    // A log has no packets or flows to tell.
    assert!(
        page.contains("the packet rules would have stopped the other")
            && !page.contains("TCP flows"),
        "the traffic line"
    );
    // What the text report says of the log, the page says too: its bad
    // line (escaped), and that limiters ran on second timestamps.
    assert_eq!(json["inputs"][0]["log"]["bad_lines"], 1);
    assert!(
        page.contains("line 21 (byte ") && page.contains("<code>not &lt;a&gt; request</code>"),
        "the bad line"
    );
    assert!(page.contains("limiters ran on 1 s timestamps"));
    // Sampled: the page says so, and its figures are the scaled JSON's.
    let (_, page, json) = report(&dir, "sampled", &[&rules, "--log", l, "--sampled", "4"]);
    check_figures("sampled", &page, &json);
    assert!(page.contains("sampled: one line in 4, counts scaled by 4; throttles not simulated"));
    assert_eq!(json["totals"]["captured_requests"], 80);
}

/// Chromium, if installed (a failure under CI when not).
fn chromium() -> Option<&'static str> {
    let c = ["chromium", "chromium-browser"].into_iter().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if c.is_none() {
        assert!(
            !rctl_testkit::skip::in_ci(),
            "chromium must be installed in CI"
        );
        rctl_testkit::skip::skipped(
            "chromium, for the rendering checks (apt-get install chromium)",
        );
    }
    c
}

/// Runs headless Chromium on `page` at `width` with `extra` flags; stdout.
fn browse(
    chromium: &str,
    profile: &Path,
    width: u32,
    height: u32,
    extra: &[String],
    page: &Path,
) -> String {
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={width},{height}"))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the probe measures in the rendered page: the window's and the
/// document's widths, each figure and whether its label shows beside
/// it, the time axes' tick labels and the head's figures.
const PROBE: &str = r#"<script>(() => {
const d = document.documentElement;
const figs = [...document.querySelectorAll('data')].map(e => {
  const near = e.closest('.fig, li, tr');
  return [e.dataset.f, Number(e.value), e.textContent, !!near && near.innerText.includes(e.dataset.l)];
});
const r = {inner: innerWidth, scroll: d.scrollWidth, body: document.body.scrollWidth, figs,
  ticks: [...document.querySelectorAll('svg.chart text.tick')].map(t => t.textContent),
  head: [...document.querySelectorAll('#verdict data')].map(e => [e.dataset.f, Number(e.value)]),
  wide: [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1 && !e.closest('.scroll')).map(e => e.tagName + '.' + e.className).slice(0, 5)};
const p = document.createElement('pre'); p.id = 'probe'; p.hidden = true;
p.textContent = JSON.stringify(r); document.body.appendChild(p);
})()</script>"#;

fn probe(chromium: &str, dir: &Path, case: &str, html: &Path, width: u32) -> Value {
    let page = std::fs::read_to_string(html).unwrap();
    let probed = dir.join(format!("{case}-probe.html"));
    std::fs::write(&probed, page.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let dom = browse(
        chromium,
        &dir.join("profile"),
        width,
        900,
        &["--dump-dom".into()],
        &probed,
    );
    let body = dom
        .split_once("<pre id=\"probe\" hidden=\"\">")
        .and_then(|(_, r)| r.split_once("</pre>"))
        .unwrap_or_else(|| panic!("{case}: no probe in the DOM: {dom:.2000}"))
        .0;
    let text = body
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_page_reads_at_a_glance_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let dir = tempdir("report-chromium");
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let (rules, two, long) = generated(&dir);
    let fixtures = root().join("tests/fixtures/pcap").display().to_string();
    let old = root()
        .join("tests/fixtures/rules-old")
        .display()
        .to_string();
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "fixtures",
            vec![fixture_rules(), "--pcap".into(), fixtures.clone()],
        ),
        (
            "two-seconds",
            vec![
                rules.display().to_string(),
                "--pcap".into(),
                two.display().to_string(),
            ],
        ),
        (
            "a-day",
            vec![
                rules.display().to_string(),
                "--pcap".into(),
                long.display().to_string(),
            ],
        ),
        (
            "against",
            vec![
                fixture_rules(),
                "--against".into(),
                old,
                "--pcap".into(),
                fixture("incidents.pcap"),
            ],
        ),
    ];
    for (case, args) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (html, page, json) = report(&dir, case, &args);
        let figs = check_figures(case, &page, &json);
        for width in [1000, 1400] {
            let p = probe(chromium, &dir, case, &html, width);
            let at = format!("{case} at {width} px");
            assert_eq!(
                p["inner"].as_u64(),
                Some(u64::from(width)),
                "{at}: the window"
            );
            assert!(
                p["scroll"].as_u64() <= p["inner"].as_u64(),
                "{at}: overflows: {}",
                p["wide"]
            );
            assert_eq!(p["wide"], serde_json::json!([]), "{at}");
            // The browser shows every figure rctl wrote, each with its label.
            let shown = p["figs"].as_array().unwrap();
            assert_eq!(shown.len(), figs.len(), "{at}");
            for (s, f) in shown.iter().zip(&figs) {
                assert_eq!(s[0], f.pointer.as_str(), "{at}");
                assert_eq!(s[1].as_u64(), Some(f.value), "{at}");
                assert_eq!(s[2], f.text.as_str(), "{at}");
                assert_eq!(
                    s[3], true,
                    "{at}: {} has no visible label `{}`",
                    f.pointer, f.label
                );
            }
            let ticks = p["ticks"].as_array().unwrap();
            assert!(!ticks.is_empty(), "{at}: no time axis");
            for t in ticks {
                let t = t.as_str().unwrap();
                // HH:MM, HH:MM:SS or HH:MM:SS.d
                let (hms, tenth) = t.split_once('.').unwrap_or((t, "0"));
                let ok = hms.len() >= 5
                    && tenth.len() == 1
                    && tenth.chars().all(|c| c.is_ascii_digit())
                    && hms
                        .split(':')
                        .all(|x| x.len() == 2 && x.chars().all(|c| c.is_ascii_digit()));
                assert!(ok, "{at}: tick `{t}` is not a clock time");
            }
            // The head's affected figures are the JSON's.
            let head = p["head"].as_array().unwrap();
            assert!(head.len() >= 10, "{at}: {head:?}");
            for h in head {
                let ptr = h[0].as_str().unwrap();
                assert_eq!(
                    h[1].as_u64(),
                    json.pointer(ptr).and_then(Value::as_u64),
                    "{at}: {ptr}"
                );
            }
        }
        let png = shots.join(format!("{case}-1400.png"));
        browse(
            chromium,
            &dir.join("profile"),
            1400,
            2600,
            &[format!("--screenshot={}", png.display())],
            &html,
        );
        assert!(
            std::fs::read(&png).unwrap().starts_with(b"\x89PNG"),
            "{case}: screenshot"
        );
        eprintln!("screenshot: {}", png.display());
    }
    // The against case narrow and dark, and printed on A4.
    let html = dir.join("against.html");
    for (file, height, flag, magic) in [
        (
            "against-1000-dark.png",
            2600,
            "--force-dark-mode",
            &b"\x89PNG"[..],
        ),
        ("against-a4.pdf", 900, "--no-pdf-header-footer", b"%PDF"),
    ] {
        let out = shots.join(file);
        let to = if file.ends_with(".pdf") {
            "--print-to-pdf"
        } else {
            "--screenshot"
        };
        let flags = [flag.to_string(), format!("{to}={}", out.display())];
        browse(chromium, &dir.join("profile"), 1000, height, &flags, &html);
        assert!(std::fs::read(&out).unwrap().starts_with(magic), "{file}");
    }
    eprintln!("screenshots and print: {}", shots.display());
}
