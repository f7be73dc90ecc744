//! `rctl suggest` on captures with known offenders and known legitimate
//! clients: the WDQS shape (a python-requests swarm on /sparql, each
//! address under any per-address limit, beside the exempt updater and
//! readers), the re-render loop (one title re-requested with no-cache
//! from several hosts), a browser-UA scraper on one path, an API scraper
//! seen only by its query shape, and a quiet day
//! where the right answer is nothing. Each suggested file passes `rctl
//! check` and `rctl test` as it is, alone and beside the existing rules,
//! and each suggestion's effect equals `rctl dry-run` of the file on the
//! same capture.

use crate::util::{rctl, tempdir};
use rctl_testkit::capgen::Pcap;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The rules in force before the incident: the updater exempt, nothing
/// else (the live test through HAProxy uses them too).
pub(crate) const EXISTING: &str = r#"
ipblock wdqs/updater {
  208.80.154.224/28
}

rule wdqs_updater_exempt {
  priority 10
  when ipblock@wdqs/updater and header("user-agent") starts_with "wmf-streaming-updater-consumer/"
  allow
}
"#;

pub(crate) const FIREFOX: &str =
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
pub(crate) const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36";

/// One request of a scenario.
struct Req {
    t_ms: u64,
    ip: [u8; 4],
    host: &'static str,
    target: String,
    headers: Vec<(&'static str, String)>,
}

/// A scenario's requests, over 60 s.
#[derive(Default)]
struct Traffic(Vec<Req>);

impl Traffic {
    /// `n` requests from `ip`, spread over the minute, targets from `target`.
    fn client(
        &mut self,
        ip: [u8; 4],
        host: &'static str,
        n: u64,
        headers: &[(&'static str, &str)],
        target: impl Fn(u64) -> String,
    ) {
        for i in 0..n {
            self.0.push(Req {
                t_ms: (i * 59_000) / n.max(1) + u64::from(ip[3]) * 7 % 1000,
                ip,
                host,
                target: target(i),
                headers: headers.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            });
        }
    }

    /// Readers: browsers with Accept-Language, a few pages each, some of
    /// them on /sparql.
    fn readers(&mut self, n: u8) {
        for r in 1..=n {
            let ua = if r % 2 == 0 { FIREFOX } else { CHROME };
            let h = [("User-Agent", ua), ("Accept-Language", "en-GB,en;q=0.8")];
            self.client(
                [93, 184, 216, r],
                "www.wikidata.org",
                5 + u64::from(r % 7),
                &h,
                |i| format!("/wiki/Q{}", 42 + i * u64::from(r)),
            );
            self.client(
                [93, 184, 216, r],
                "query.wikidata.org",
                2 + u64::from(r % 4),
                &h,
                |i| format!("/sparql?query=SELECT%20{i}"),
            );
            self.client([93, 184, 216, r], "fr.wikipedia.org", 3, &h, |i| {
                format!("/api/rest_v1/page/html/Titre_{}", u64::from(r) * 3 + i)
            });
        }
    }

    /// Writes the capture: each request its own connection (SYN, then
    /// the head), in time order.
    fn write(mut self, path: &Path) {
        self.0.sort_by_key(|r| r.t_ms);
        let mut pcap = Pcap::new(std::io::BufWriter::new(
            std::fs::File::create(path).unwrap(),
        ))
        .unwrap();
        let server = ([198, 51, 100, 1], 80);
        for (n, r) in self.0.iter().enumerate() {
            let mut head = format!("GET {} HTTP/1.1\r\nHost: {}\r\n", r.target, r.host);
            for (k, v) in &r.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let client = (r.ip, 10_000 + (n % 50_000) as u16);
            let t = 1_790_000_000_000_000 + r.t_ms * 1000;
            pcap.tcp(t, client, server, 1000, 0x02, b"").unwrap();
            pcap.tcp(t + 1, client, server, 1001, 0x18, head.as_bytes())
                .unwrap();
        }
        pcap.finish().unwrap();
    }
}

impl Traffic {
    /// The WDQS shape: 20 readers; 30 python-requests addresses in 30
    /// networks, 20 requests each on /sparql (none stands out alone, no
    /// prefix does either); the updater, far heavier than anyone, and
    /// exempt.
    fn wdqs() -> Traffic {
        let mut t = Traffic::default();
        t.readers(20);
        for i in 1..=30 {
            t.client(
                [185, 100 + i, 101, 7],
                "query.wikidata.org",
                20,
                &[("User-Agent", "python-requests/2.31.0")],
                |n| format!("/sparql?query=SELECT%20*%20WHERE%20{{?s%20?p%20{n}}}"),
            );
        }
        t.client(
            [208, 80, 154, 230],
            "query.wikidata.org",
            600,
            &[("User-Agent", "wmf-streaming-updater-consumer/0.3")],
            |n| format!("/sparql?update={n}"),
        );
        t
    }

    /// Writes the requests as an nginx log of format [`NGINX_MS`] (with
    /// `with_ua`, and `"$http_user_agent"` after it), in time order.
    fn write_log(mut self, path: &Path, with_ua: bool) {
        self.0.sort_by_key(|r| r.t_ms);
        let mut out = String::new();
        for r in &self.0 {
            let t = 1_790_000_000_000 + r.t_ms;
            let [a, b, c, d] = r.ip;
            out.push_str(&format!(
                "{}.{:03} {a}.{b}.{c}.{d} \"{}\" \"GET {} HTTP/1.1\" 200",
                t / 1000,
                t % 1000,
                r.host,
                r.target
            ));
            if with_ua {
                let ua = r.headers.iter().find(|(k, _)| *k == "User-Agent");
                out.push_str(&format!(" \"{}\"", ua.map_or("-", |(_, v)| v.as_str())));
            }
            out.push('\n');
        }
        std::fs::write(path, out).unwrap();
    }
}

/// An nginx `log_format` with millisecond time and the Host, no header.
const NGINX_MS: &str = "nginx:$msec $remote_addr \"$host\" \"$request\" $status";

/// Runs `rctl suggest` (JSON summary); returns it and the written file.
fn suggest(dir: &Path, existing: Option<&Path>, pcap: &Path, extra: &[&str]) -> (Value, String) {
    let (v, file, _) = suggest_on(dir, existing, &["--pcap", pcap.to_str().unwrap()], extra);
    (v, file)
}

/// Runs `rctl suggest` on `input` (`--pcap FILE`, `--log FILE …`);
/// returns the JSON summary, the written file and the warnings.
fn suggest_on(
    dir: &Path,
    existing: Option<&Path>,
    input: &[&str],
    extra: &[&str],
) -> (Value, String, String) {
    let out = dir.join("suggested.rctl");
    let mut args = vec!["suggest"];
    if let Some(e) = existing {
        args.push(e.to_str().unwrap());
    }
    args.extend(input);
    args.extend(["-o", out.to_str().unwrap(), "--format", "json"]);
    args.extend(extra);
    let o = rctl(&args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "rctl suggest: {err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (v, std::fs::read_to_string(&out).unwrap(), err)
}

/// `rctl check` and `rctl test` accept `paths` as they are.
fn accepted(paths: &[&Path]) {
    for cmd in ["check", "test"] {
        let mut args = vec![cmd];
        args.extend(paths.iter().map(|p| p.to_str().unwrap()));
        let o = rctl(&args);
        assert!(
            o.status.success(),
            "rctl {cmd}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Each suggestion's measured effect equals `rctl dry-run`'s count of
/// what its (shadow) rule would throttle, on the same capture.
fn effects_equal_dry_run(rules: &[&Path], pcap: &Path, v: &Value) {
    let mut args = vec!["dry-run"];
    args.extend(rules.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--pcap", pcap.to_str().unwrap(), "--format", "json"]);
    let o = rctl(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    for s in v["suggestions"].as_array().unwrap() {
        if !s["written"].as_bool().unwrap() {
            continue;
        }
        let name = s["rule"].as_str().unwrap();
        let r = rule_in(&d, name);
        assert_eq!(r["shadow"], true, "{r}");
        assert_eq!(
            r["would"]["throttle"], s["effect"]["requests_limited"],
            "{name}: dry run {r}\nsuggest {s}"
        );
    }
}

/// The rule `name` of a dry run's JSON report.
pub(crate) fn rule_in<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["rules"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("{name} not in the dry run: {d}"))
}

fn existing(dir: &Path) -> PathBuf {
    let p = dir.join("existing.rctl");
    std::fs::write(&p, EXISTING).unwrap();
    p
}

fn written(v: &Value) -> Vec<&Value> {
    v["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["written"] == true)
        .collect()
}

#[test]
fn the_wdqs_swarm_the_sample_missed_is_found_and_the_updater_never_limited() {
    let dir = tempdir("suggest-wdqs");
    let t = Traffic::wdqs();
    let pcap = dir.join("wdqs.pcap");
    t.write(&pcap);
    let rules = existing(&dir);
    let (v, file) = suggest(
        &dir,
        Some(&rules),
        &pcap,
        &["--trusted", "ipblock@wdqs/updater", "--budget", "0"],
    );
    let w = written(&v);
    assert_eq!(w.len(), 1, "{v:#}\n{file}");
    let s = w[0];
    assert_eq!(s["key"], "user-agent", "{s}");
    assert!(
        s["what"].as_str().unwrap().contains("from 30 addresses"),
        "{s}"
    );
    // Every swarm request past the limit is limited; no reader, no updater.
    let e = &s["effect"];
    assert_eq!(e["clients_limited"], 30, "{s}");
    assert_eq!(e["collateral_requests"], 0, "{s}");
    assert!(
        e["requests_limited"].as_u64().unwrap() >= 600 - 2 * s["limit"].as_u64().unwrap(),
        "{s}"
    );
    assert!(
        file.contains("header(\"user-agent\") starts_with \"python-requests/\""),
        "{file}"
    );
    assert!(file.contains("  shadow\n"), "{file}");
    let out = dir.join("suggested.rctl");
    accepted(&[&out]);
    accepted(&[&rules, &out]);
    effects_equal_dry_run(&[&rules, &out], &pcap, &v);
    // The updater is allowed, never throttled, in the merged ruleset.
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        out.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    let exempt = rule_in(&d, "wdqs_updater_exempt");
    assert_eq!(exempt["requests"]["allow"], 600, "{exempt}");
}

/// Readers, the re-render loop (one title, no-cache, from six service
/// hosts) and a scraper with a browser's User-Agent on one page.
fn loop_and_scraper() -> Traffic {
    let mut t = Traffic::default();
    t.readers(20);
    // The loop: one title, no-cache, from six service hosts.
    for h in 1..=6 {
        t.client(
            [208, 80, 153, 40 + h],
            "fr.wikipedia.org",
            50,
            &[
                ("User-Agent", "ChangePropagation/WMF"),
                ("Cache-Control", "no-cache"),
            ],
            |_| "/api/rest_v1/page/html/%EA%9D%AE".to_string(),
        );
    }
    // A scraper with a browser's User-Agent (and no language) on one page.
    t.client(
        [45, 83, 64, 7],
        "www.wikidata.org",
        400,
        &[("User-Agent", CHROME)],
        |n| format!("/wiki/Special:EntityData/Q{n}.json"),
    );
    t
}

#[test]
fn a_re_rendered_title_and_a_browser_scraper_are_found_by_what_they_ask() {
    let dir = tempdir("suggest-loop");
    let pcap = dir.join("loop.pcap");
    loop_and_scraper().write(&pcap);
    let (v, file) = suggest(&dir, None, &pcap, &[]);
    let w = written(&v);
    let keys: Vec<&str> = w.iter().map(|s| s["key"].as_str().unwrap()).collect();
    assert!(keys.contains(&"host, path"), "{v:#}");
    assert!(keys.contains(&"ip"), "{v:#}");
    assert_eq!(w.len(), 2, "{v:#}\n{file}");
    for s in &w {
        assert_eq!(s["effect"]["collateral_requests"], 0, "{s}");
        assert!(
            s["effect"]["requests_limited"].as_u64().unwrap() > 200,
            "{s}"
        );
    }
    let lp = w.iter().find(|s| s["key"] == "host, path").unwrap();
    assert_eq!(lp["effect"]["clients_limited"], 6, "{lp}");
    // Cached readers of the title are never limited: no-cache is required.
    assert!(file.contains("contains \"no-cache\""), "{file}");
    let out = dir.join("suggested.rctl");
    accepted(&[&out]);
    effects_equal_dry_run(&[&out], &pcap, &v);
    // Ranked by the cost removed: each request to the entity data costs
    // a hundred, so the scraper comes first, whatever it removes.
    for (cost, first) in [
        ("www.wikidata.org/wiki/Special:EntityData=100", "ip"),
        ("fr.wikipedia.org/api/rest_v1=100", "host, path"),
    ] {
        let (v, _) = suggest(&dir, None, &pcap, &["--cost", cost]);
        let s = &v["suggestions"][0];
        assert_eq!(s["key"], first, "{cost}: {v:#}");
        let limited = s["effect"]["requests_limited"].as_f64().unwrap();
        assert_eq!(s["cost_removed"].as_f64(), Some(100.0 * limited), "{s}");
        assert_eq!(
            v["suggestions"][1]["cost_removed"],
            v["suggestions"][1]["effect"]["requests_limited"]
                .as_f64()
                .unwrap(),
            "{v:#}"
        );
    }
}

#[test]
fn an_api_scraper_hidden_in_its_endpoint_is_found_by_its_query_shape() {
    let dir = tempdir("suggest-shape");
    let mut t = Traffic::default();
    t.readers(20);
    // 40 API readers, 40 queries each; four of them parse a page twice.
    for r in 1..=40u8 {
        let h = [("User-Agent", FIREFOX), ("Accept-Language", "en")];
        t.client([93, 184, 217, r], "en.wikipedia.org", 40, &h, |i| {
            format!("/w/api.php?action=query&format=json&titles=T_{r}_{i}")
        });
        if r <= 4 {
            t.client([93, 184, 217, r], "en.wikipedia.org", 2, &h, |i| {
                format!("/w/api.php?action=parse&format=json&page=P_{r}_{i}")
            });
        }
    }
    // One address parsing 70 pages: 4% of the API's requests, under the
    // share worth a rule there, and nearly all of the parses.
    t.client(
        [45, 83, 64, 9],
        "en.wikipedia.org",
        70,
        &[("User-Agent", CHROME)],
        |i| format!("/w/api.php?page=Page_{i}&action=parse&format=json"),
    );
    let pcap = dir.join("shape.pcap");
    t.write(&pcap);
    let (v, file) = suggest(&dir, None, &pcap, &[]);
    let w = written(&v);
    assert_eq!(w.len(), 1, "{v:#}\n{file}");
    assert_eq!(w[0]["key"], "ip", "{v:#}");
    assert_eq!(w[0]["effect"]["clients_limited"], 1, "{v:#}");
    assert_eq!(w[0]["effect"]["collateral_requests"], 0, "{v:#}");
    assert!(
        file.contains(r#"path == "/w/api.php" and query("action") present and query("format") present and query("page") present"#),
        "{file}"
    );
    let out = dir.join("suggested.rctl");
    accepted(&[&out]);
    effects_equal_dry_run(&[&out], &pcap, &v);
}

#[test]
fn a_quiet_day_gets_no_suggestion() {
    let dir = tempdir("suggest-quiet");
    let mut t = Traffic::default();
    t.readers(40);
    let pcap = dir.join("quiet.pcap");
    t.write(&pcap);
    let rules = existing(&dir);
    let (v, file) = suggest(&dir, Some(&rules), &pcap, &[]);
    assert_eq!(v["suggestions"], serde_json::json!([]), "{v:#}\n{file}");
    assert!(file.contains("Nothing to suggest"), "{file}");
    assert!(v["requests"].as_u64().unwrap() > 400, "{v}");
    accepted(&[&dir.join("suggested.rctl")]);
}

#[test]
fn what_the_existing_rules_already_limit_is_not_suggested_again() {
    let dir = tempdir("suggest-covered");
    let mut t = Traffic::default();
    t.readers(20);
    t.client(
        [45, 83, 64, 7],
        "www.wikidata.org",
        400,
        &[("User-Agent", "Go-http-client/1.1")],
        |n| format!("/wiki/Q{n}"),
    );
    let pcap = dir.join("covered.pcap");
    t.write(&pcap);
    let rules = dir.join("existing.rctl");
    std::fs::write(
        &rules,
        "rule go_clients {\n  when header(\"user-agent\") starts_with \"Go-http-client/\"\n  deny 403 \"no\"\n}\n",
    )
    .unwrap();
    let (v, _) = suggest(&dir, Some(&rules), &pcap, &[]);
    assert_eq!(v["suggestions"], serde_json::json!([]), "{v:#}");
    // Without the rule the same scraper is found.
    let (v, _) = suggest(&dir, None, &pcap, &[]);
    assert_eq!(written(&v).len(), 1, "{v:#}");
}

#[test]
fn a_log_without_the_user_agent_gets_no_rule_reading_it_and_the_updater_is_not_guessed() {
    let dir = tempdir("suggest-log-fields");
    let mut t = Traffic::wdqs();
    // One heavy address: found by address on any log.
    t.client(
        [45, 83, 64, 7],
        "query.wikidata.org",
        300,
        &[("User-Agent", "python-requests/2.31.0")],
        |n| format!("/sparql?query=ASK%20{n}"),
    );
    let log = dir.join("access.log");
    t.write_log(&log, false);
    let rules = existing(&dir);
    let out = dir.join("suggested.rctl");
    let input = ["--log", log.to_str().unwrap(), "--log-format", NGINX_MS];
    let (v, file, err) = suggest_on(&dir, Some(&rules), &input, &[]);
    // Nothing tells a browser here: said, never assumed to be none.
    assert_eq!(v["collateral_measured"], false, "{v}");
    assert!(err.contains("Accept-Language"), "{err}");
    // The swarm's User-Agent is not in the log: no rule reads it. The
    // updater's exemption reads it too, so the updater's verdict is
    // unknown: it is not taken for the heaviest address.
    assert!(!file.contains("user-agent"), "{file}");
    let w = written(&v);
    assert_eq!(w.len(), 1, "{v:#}\n{file}");
    assert_eq!(w[0]["key"], "ip", "{v:#}");
    let what = w[0]["what"].as_str().unwrap();
    assert!(
        what.contains("45.83.64.7") && !what.contains("208.80.154.230"),
        "{what}"
    );
    // The file is judged on the log as it is: the dry run lacks nothing
    // for the suggestion, and counts what the suggester measured.
    let mut args = vec![
        "dry-run",
        rules.to_str().unwrap(),
        out.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend(input);
    let o = rctl(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = rule_in(&d, w[0]["rule"].as_str().unwrap());
    // (Left out of the report when empty.)
    assert!(
        r["missing_fields"].is_null() || r["missing_fields"] == serde_json::json!([]),
        "{r}"
    );
    assert_eq!(
        r["would"]["throttle"], w[0]["effect"]["requests_limited"],
        "{r}"
    );
    let exempt = rule_in(&d, "wdqs_updater_exempt");
    assert_eq!(exempt["unknown"], 600, "{exempt}");
    accepted(&[&rules, &out]);
}

#[test]
fn suggestions_are_also_written_as_requestctl_objects_that_decide_alike() {
    let dir = tempdir("suggest-requestctl");
    let pcap = dir.join("loop.pcap");
    loop_and_scraper().write(&pcap);
    let rq = dir.join("requestctl");
    let (v, _, err) = suggest_on(
        &dir,
        None,
        &["--pcap", pcap.to_str().unwrap()],
        &["--requestctl", rq.to_str().unwrap()],
    );
    let w = written(&v);
    let name = |key: &str| -> String {
        w.iter()
            .find(|s| s["key"] == key)
            .and_then(|s| s["rule"].as_str())
            .unwrap_or_else(|| panic!("no {key} suggestion: {v:#}"))
            .to_string()
    };
    let (ip, page) = (name("ip"), name("host, path"));
    // The address-keyed throttle is requestctl's; the page-keyed one is not,
    // and says why, in the summary and on stderr.
    assert_eq!(v["requestctl"]["written"], serde_json::json!([ip]), "{v:#}");
    let skipped = v["requestctl"]["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{v:#}");
    assert_eq!(skipped[0]["rule"], page.as_str(), "{v:#}");
    let reason = skipped[0]["reason"].as_str().unwrap();
    assert!(
        !reason.is_empty() && err.contains(&format!("requestctl: {page} not written: {reason}")),
        "{err}"
    );
    let action =
        std::fs::read_to_string(rq.join(format!("request-actions/cache-text/{ip}.yaml"))).unwrap();
    assert!(
        action.contains("enabled: false")
            && action.contains("log_matching: true")
            && action.contains("throttle_per_ip: true"),
        "{action}"
    );
    // Read back by `rctl import requestctl`, it decides as the .rctl rule:
    // the same shadow verdicts on every request of the capture, in order.
    let back = crate::requestctl_emit::import(&rq, &dir.join("imported"));
    let c = rctl_compiler::compile_paths(&[dir.join("suggested.rctl")], &Default::default());
    let orig = crate::native::without(&c.ruleset.expect("compiles"), &[(page, String::new())]);
    let f = std::fs::File::open(&pcap).unwrap();
    let (reqs, e) = rctl_dataplane::dryrun::requests_in(std::io::BufReader::new(f));
    assert!(e.is_none(), "{e:?}");
    let want = crate::requestctl_emit::capture_decisions(&orig, &reqs);
    let got = crate::requestctl_emit::capture_decisions(&back, &reqs);
    let limited = want.iter().filter(|o| o.contains(": throttle")).count();
    assert!(limited > 200, "{limited} of {}", want.len());
    let bad: Vec<String> = want
        .iter()
        .zip(&got)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("request {i}: rctl {a}, imported {b}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{} differences:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn a_log_on_standard_input_with_few_keys_held_gives_the_same_rules_and_says_so() {
    let dir = tempdir("suggest-bounded");
    let mut t = Traffic::wdqs();
    // Many light readers, one title each: more keys than held below.
    for i in 0..3_000u32 {
        let [_, a, b, c] = (0x5d00_0000u32 + i * 7).to_be_bytes();
        t.client(
            [93, a, b, c],
            "www.wikidata.org",
            1,
            &[(
                "User-Agent",
                "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
            )],
            move |_| format!("/wiki/Title_{i}"),
        );
    }
    let log = dir.join("access.log");
    t.write_log(&log, true);
    let rules = existing(&dir);
    let format = format!("{NGINX_MS} \"$http_user_agent\"");
    let input = ["--log", log.to_str().unwrap(), "--log-format", &format];
    let (all, file, _) = suggest_on(&dir, Some(&rules), &input, &[]);
    assert_eq!(all["exact"], true, "{all}");
    // The same log on standard input (spooled, read once a pass), with
    // a sixth of its keys held.
    let out = dir.join("bounded.rctl");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args([
            "suggest",
            rules.to_str().unwrap(),
            "--log",
            "-",
            "--log-format",
            &format,
        ])
        .args([
            "--max-keys",
            "256",
            "--format",
            "json",
            "-o",
            out.to_str().unwrap(),
        ])
        .stdin(std::fs::File::open(&log).unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("--max-keys 256"), "{err}");
    let bounded: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(bounded["exact"], false, "{bounded}");
    assert_eq!(bounded["requests"], all["requests"], "{bounded}");
    // The same offenders, their requests counted exactly; the limits,
    // taken from the normal clients that were held, can only be higher,
    // so the effect can only be smaller: nothing is invented.
    let pick = |v: &Value| -> Vec<(Value, Value)> {
        written(v)
            .iter()
            .map(|s| (s["key"].clone(), s["offender_requests"].clone()))
            .collect()
    };
    assert!(!pick(&all).is_empty(), "{all:#}\n{file}");
    assert_eq!(pick(&bounded), pick(&all), "{bounded:#}\n{all:#}");
    for (b, a) in written(&bounded).iter().zip(written(&all)) {
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
        assert!(n(b, "limit") >= n(a, "limit"), "{b}\n{a}");
        assert!(
            n(&b["effect"], "requests_limited") <= n(&a["effect"], "requests_limited"),
            "{b}\n{a}"
        );
    }
    accepted(&[&rules, &out]);
}

impl Traffic {
    /// Writes the requests as HAProxy would log them with
    /// `log-format "%Ts.%ms %ci %hr %{+Q}r %ST"` and `capture request
    /// header Host len 64` and `User-Agent len ua_len`: each captured
    /// value cut at its slot's length.
    fn write_haproxy_log(mut self, path: &Path, ua_len: usize) {
        self.0.sort_by_key(|r| r.t_ms);
        let mut out = String::new();
        for r in &self.0 {
            let t = 1_790_000_000_000 + r.t_ms;
            let [a, b, c, d] = r.ip;
            let ua = r.headers.iter().find(|(k, _)| *k == "User-Agent");
            let ua = ua.map_or("", |(_, v)| v.as_str());
            out.push_str(&format!(
                "{}.{:03} {a}.{b}.{c}.{d} {{{}|{}}} \"GET {} HTTP/1.1\" 200\n",
                t / 1000,
                t % 1000,
                &r.host[..r.host.len().min(64)],
                &ua[..ua.len().min(ua_len)],
                r.target
            ));
        }
        std::fs::write(path, out).unwrap();
    }
}

#[test]
fn a_cut_user_agent_is_suggested_as_a_prefix_and_never_unmasks_the_updater() {
    // HAProxy keeps 12 bytes of each User-Agent: the swarm's
    // `python-requests/2.31.0` is logged as `python-reque`, the
    // updater's as `wmf-streamin`.
    let dir = tempdir("suggest-cut");
    let cut = dir.join("edge.log");
    Traffic::wdqs().write_haproxy_log(&cut, 12);
    let whole = dir.join("whole.log");
    Traffic::wdqs().write_log(&whole, true);
    let rules = existing(&dir);
    let format = "haproxy:%Ts.%ms %ci %hr %{+Q}r %ST";
    let input = [
        "--log",
        cut.to_str().unwrap(),
        "--log-format",
        format,
        "--capture-request-header",
        "Host:64,User-Agent:12",
    ];
    let (v, file, _) = suggest_on(&dir, Some(&rules), &input, &["--budget", "0"]);
    // The updater's exemption reads a User-Agent that may have been cut
    // from `wmf-streaming-updater-consumer/…`: its verdict is unknown, so
    // it is neither counted nor taken for the heaviest address. Read as
    // whole, `wmf-streamin` would fail the exemption and be suggested.
    assert!(!file.contains("208.80.154.230"), "{file}");
    let w = written(&v);
    assert_eq!(w.len(), 1, "{v:#}\n{file}");
    assert_eq!(w[0]["key"], "user-agent", "{v:#}");
    // A prefix of what was sent: `==` on the cut value would never match.
    assert!(
        file.contains("header(\"user-agent\") starts_with \"python-reque\""),
        "{file}"
    );
    // The rule's key is the User-Agent, which the log may have cut: what
    // it does to the swarm's requests cannot be told on this log, and is
    // said, not counted as limited or passed.
    let e = &w[0]["effect"];
    assert_eq!(e["requests_unknown"], 600, "{e}");
    assert_eq!(e["requests_limited"], 0, "{e}");
    assert!(
        file.contains("600 requests it matched could not be judged"),
        "{file}"
    );
    // Live, whole User-Agents arrive: on the same traffic logged whole,
    // the suggested rule limits the swarm past its limit, and the updater
    // stays allowed.
    let out = dir.join("suggested.rctl");
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        out.to_str().unwrap(),
        "--log",
        whole.to_str().unwrap(),
        "--log-format",
        &format!("{NGINX_MS} \"$http_user_agent\""),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = rule_in(&d, w[0]["rule"].as_str().unwrap());
    assert_eq!(r["matches"], 600, "{r}");
    let limit = w[0]["limit"].as_u64().unwrap();
    assert!(
        r["would"]["throttle"].as_u64().unwrap() >= 600 - 2 * limit,
        "{r}"
    );
    let exempt = rule_in(&d, "wdqs_updater_exempt");
    assert_eq!(exempt["requests"]["allow"], 600, "{exempt}");
    accepted(&[&rules, &out]);
    // Without the lengths the values are taken as logged: the updater's
    // `wmf-streamin` fails its exemption and the updater is suggested
    // for limiting, which is why the lengths are given.
    let mut blind = input;
    blind[5] = "Host,User-Agent";
    let (_, file, _) = suggest_on(&dir, Some(&rules), &blind, &["--budget", "0"]);
    assert!(file.contains("208.80.154.230"), "{file}");
}
