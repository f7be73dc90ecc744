//! Refined webrequest tables: Parquet files partitioned by hour, judged
//! as the same rows written as raw webrequest JSON lines are; only the
//! columns the ruleset reads decoded; a column the table lacks leaves
//! the rules reading it not judged; a corrupt file is a clear error.

use super::{dry_run, per_rule, rule};
use crate::util::{rctl, tempdir};
use arrow_array::{ArrayRef, RecordBatch, StringArray, TimestampMillisecondArray};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::Arc;

/// Two throttles in sequence (a row the first limits never reaches the
/// second), and a rule on a header, first.
const RULES: &str = r#"rule lang_probe {
  priority 1
  when path starts_with "/wiki/" and header("accept-language") == "xx"
  deny 403 "no"
}
rule sparql_ua {
  priority 2
  when path starts_with "/sparql" and header("user-agent") starts_with "python-requests/"
  throttle 20 requests per 1m burst 10 by header("user-agent") status 429 reason "slow down"
}
rule per_ip {
  priority 3
  when path starts_with "/"
  throttle 10 requests per 1m burst 5 by ip status 429 reason "slow down"
}
"#;

/// One request a row.
struct Row {
    ms: i64,
    ip: String,
    host: &'static str,
    path: &'static str,
    query: &'static str,
    ua: &'static str,
    lang: &'static str,
}

/// 6,000 requests over 20 minutes, each at its own millisecond: a
/// python-requests swarm on /sparql, heavy and light readers.
fn rows() -> Vec<Row> {
    let t0 = 1_778_673_600_000i64; // 2026-05-13T12:00:00Z
    let mut v = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..6000i64 {
        let r = next();
        let (ip, path, query, ua, lang) = match r % 10 {
            0..=3 => (
                format!("185.220.101.{}", 1 + r / 10 % 40),
                "/sparql",
                "?query=SELECT",
                "python-requests/2.31.0",
                "",
            ),
            4..=6 => (
                format!("93.184.216.{}", 1 + r / 10 % 5),
                "/wiki/Main_Page",
                "",
                "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
                "en",
            ),
            _ => (
                format!("2001:db8::{:x}", 1 + r / 10 % 300),
                "/w/api.php",
                "?action=query",
                "curl/7.88.1",
                "",
            ),
        };
        v.push(Row {
            ms: t0 + i * 200,
            ip,
            host: "query.wikidata.org",
            path,
            query,
            ua,
            lang,
        });
    }
    v
}

fn iso(ms: i64) -> String {
    let s = ms / 1000 - 1_778_673_600;
    format!(
        "2026-05-13T{:02}:{:02}:{:02}.{:03}Z",
        12 + s / 3600,
        s / 60 % 60,
        s % 60,
        ms % 1000
    )
}

/// The rows as raw webrequest, one JSON object a line.
fn json_lines(rows: &[Row]) -> String {
    rows.iter()
        .map(|r| {
            serde_json::json!({
                "dt": iso(r.ms), "ip": r.ip, "uri_host": r.host, "uri_path": r.path,
                "uri_query": r.query, "http_method": "GET", "user_agent": r.ua,
                "accept_language": r.lang, "referer": "-", "x_analytics": "",
                "http_status": "200",
            })
            .to_string()
                + "\n"
        })
        .collect()
}

/// Writes `rows` as a refined webrequest table (`ts` a timestamp, `dt`
/// text, and the request columns; `accept_language` left out if not
/// `with_lang`), in row groups of 500.
fn write_table(path: &Path, rows: &[&Row], compression: Compression, with_lang: bool) {
    let s = |f: &dyn Fn(&Row) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| f(r))))
    };
    let mut cols: Vec<(&str, ArrayRef)> = vec![
        ("hostname", s(&|_| "cp5012.eqsin.wmnet".into())),
        ("dt", s(&|r| iso(r.ms))),
        ("ip", s(&|r| r.ip.clone())),
        ("http_status", s(&|_| "200".into())),
        ("http_method", s(&|_| "GET".into())),
        ("uri_host", s(&|r| r.host.into())),
        ("uri_path", s(&|r| r.path.into())),
        ("uri_query", s(&|r| r.query.into())),
        ("referer", s(&|_| "-".into())),
        ("user_agent", s(&|r| r.ua.into())),
        ("x_analytics", s(&|_| "https=1".into())),
        (
            "ts",
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.ms),
            )),
        ),
    ];
    if with_lang {
        cols.push(("accept_language", s(&|r| r.lang.into())));
    }
    let batch = RecordBatch::try_from_iter(cols).unwrap();
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(500))
        .build();
    let f = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// The table as a job writes it: `year=/month=/day=/hour=` folders, four
/// files an hour with the rows dealt among them (every client's rows
/// spread over files), one file out of time order, `_SUCCESS` markers.
fn partitioned(dir: &Path, rows: &[Row], with_lang: bool) {
    let codecs = [
        Compression::SNAPPY,
        Compression::ZSTD(ZstdLevel::default()),
        Compression::UNCOMPRESSED,
        Compression::LZ4_RAW,
    ];
    // Minutes 0-9 in one folder, 10-19 in the next (a folder per hour
    // in the real table; these are short hours).
    for (h, part) in rows.chunks(rows.len() / 2).enumerate() {
        let d = dir.join(format!("year=2026/month=5/day=13/hour={}", 12 + h));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("_SUCCESS"), "").unwrap();
        for (k, codec) in codecs.iter().enumerate() {
            let mut mine: Vec<&Row> = part.iter().skip(k).step_by(codecs.len()).collect();
            if k == 1 {
                // Out of order: read whole and visited by time.
                mine.reverse();
                let n = mine.len();
                mine[..n / 2].reverse();
            }
            write_table(
                &d.join(format!("part-{k:05}.parquet")),
                &mine,
                *codec,
                with_lang,
            );
        }
    }
}

#[test]
fn a_partitioned_table_is_judged_as_its_rows_in_json_lines_are() {
    let dir = tempdir("logs-parquet");
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, RULES).unwrap();
    let rows = rows();
    std::fs::write(dir.join("raw.json"), json_lines(&rows)).unwrap();
    let table = dir.join("webrequest");
    partitioned(&table, &rows, true);
    let p = |f: &Path| f.display().to_string();
    let (want, _) = dry_run(&rules, &["--log", &p(&dir.join("raw.json"))]);
    let (got, err) = dry_run(&rules, &["--log", &p(&table)]);
    let w = per_rule(&want);
    assert_eq!(per_rule(&got), w, "{err}");
    // Both throttles limit, in sequence; the probe matches nothing.
    let limited = |name: &str| w.iter().find(|(n, _)| n == name).unwrap().1[3];
    assert!(limited("sparql_ua") > 100, "{w:?}");
    assert!(limited("per_ip") > 100, "{w:?}");
    assert_eq!(got["totals"], want["totals"]);
    let inputs = got["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 8, "eight files, no markers: {inputs:?}");
    let mut judged = 0;
    for i in inputs {
        let log = &i["log"];
        assert_eq!(log["format"], "webrequest-parquet");
        assert_eq!(log["bad_lines"], 0);
        judged += log["judged"].as_u64().unwrap();
        // What the rules and the report read; not hostname, referer,
        // x_analytics, http_status, http_method or uri_host.
        let cols: Vec<&str> = log["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(
            cols,
            ["ip", "uri_path", "user_agent", "ts", "accept_language"],
            "{}",
            i["path"]
        );
    }
    assert_eq!(judged, rows.len() as u64);
}

#[test]
fn a_column_the_table_lacks_leaves_its_rules_not_judged() {
    let dir = tempdir("logs-parquet-lacks");
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, RULES).unwrap();
    let rows = rows();
    let table = dir.join("webrequest");
    partitioned(&table, &rows, false);
    let (got, _) = dry_run(&rules, &["--log", &table.display().to_string()]);
    let probe = rule(&got, "lang_probe");
    // Every /wiki/ row could be the probe's: its verdict is unknown,
    // never a pass, and no later rule decides it.
    let wiki = rows.iter().filter(|r| r.path.starts_with("/wiki/")).count() as u64;
    assert_eq!(probe["unknown"], wiki, "{probe}");
    assert_eq!(got["totals"]["unknown_requests"], wiki);
    assert!(
        probe["missing_fields"]
            .to_string()
            .contains("accept-language"),
        "{probe}"
    );
}

#[test]
fn a_corrupt_table_is_named_with_what_is_wrong() {
    let dir = tempdir("logs-parquet-corrupt");
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, RULES).unwrap();
    let rows = rows();
    let whole = dir.join("whole.parquet");
    write_table(
        &whole,
        &rows.iter().collect::<Vec<_>>(),
        Compression::SNAPPY,
        true,
    );
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--log",
        cut.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("cut.parquet") && err.contains("not a readable Parquet file"),
        "{err}"
    );
    // A table without an address column says so.
    let noip = dir.join("noip.parquet");
    let batch = RecordBatch::try_from_iter([(
        "dt",
        Arc::new(StringArray::from(vec![iso(rows[0].ms)])) as ArrayRef,
    )])
    .unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(&noip).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let o = rctl(&[
        "dry-run",
        rules.to_str().unwrap(),
        "--log",
        noip.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("no ip column"), "{err}");
}

#[test]
fn what_an_old_ruleset_reads_is_decoded_and_bad_rows_are_named_by_their_place() {
    let dir = tempdir("logs-parquet-against");
    let rules = dir.join("r.rctl");
    std::fs::write(&rules, RULES).unwrap();
    // The old rules read X-Analytics, which the new ones do not.
    let old = dir.join("old.rctl");
    std::fs::write(
        &old,
        "rule by_analytics {\n  priority 1\n  when header(\"x-analytics\") == \"https=1\"\n  deny 403 \"no\"\n}\n",
    )
    .unwrap();
    let rows = rows();
    let table = dir.join("t.parquet");
    write_table(
        &table,
        &rows.iter().collect::<Vec<_>>(),
        Compression::SNAPPY,
        true,
    );
    let (got, err) = dry_run(
        &rules,
        &[
            "--log",
            table.to_str().unwrap(),
            "--against",
            old.to_str().unwrap(),
        ],
    );
    let cols = got["inputs"][0]["log"]["columns"].to_string();
    assert!(cols.contains("x_analytics"), "{cols}\n{err}");
    // Every row the old rule denied moves to the new ruleset's verdicts.
    let moved: u64 = got["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["from"].as_str().unwrap().starts_with("deny"))
        .map(|c| c["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(moved, rows.len() as u64, "{}", got["changes"]);

    // Out of time order, with rows that have no address at the file's
    // rows 3 and 7: reported there, not where time order put them.
    let bad = dir.join("bad.parquet");
    let n = 10i64;
    let ips: Vec<Option<&str>> = (0..n)
        .map(|i| {
            if i == 2 || i == 6 {
                None
            } else {
                Some("192.0.2.1")
            }
        })
        .collect();
    let batch = RecordBatch::try_from_iter([
        (
            "ts",
            Arc::new(TimestampMillisecondArray::from_iter_values(
                (0..n).map(|i| rows[0].ms + (n - i) * 1000),
            )) as ArrayRef,
        ),
        ("ip", Arc::new(StringArray::from(ips)) as ArrayRef),
        (
            "uri_path",
            Arc::new(StringArray::from_iter_values((0..n).map(|_| "/wiki/A"))) as ArrayRef,
        ),
    ])
    .unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(&bad).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let (got, _) = dry_run(&rules, &["--log", bad.to_str().unwrap()]);
    let log = &got["inputs"][0]["log"];
    assert_eq!(
        (log["judged"].as_u64(), log["bad_lines"].as_u64()),
        (Some(8), Some(2)),
        "{log}"
    );
    let mut at: Vec<u64> = log["bad"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["line"].as_u64().unwrap())
        .collect();
    at.sort();
    assert_eq!(at, [3, 7], "{log}");
}
