//! What every log-format target does with its input.
//!
//! Input framing: the first line is a custom format in the program's own
//! syntax (tried after the predefined one, if it compiles), the rest is
//! the log. Each line goes through the parser alone (and through the
//! format's template alone, which must read it the same), then the whole log
//! through a dry run with a small line bound (the line reader, the
//! engine): never a panic, and the counts add up.

use rctl_dataplane::dryrun::DryRun;
use rctl_logs::detect::{by_name, Spec};
use rctl_logs::run::{replay_sources, Options, Source};
use rctl_logs::template::Capture;
use std::sync::OnceLock;

/// Small (an engine is built for every input), but reading every
/// field a log may lack, with a throttle on the log's clock.
const RULES: &str = r#"rule by_header {
  priority 1
  when header("x-debug") present and port == 443
  deny 403 "no"
}
rule by_ua {
  priority 2
  when header("user-agent") starts_with "evil" or host == "a.example"
  deny 403 "no"
}
rule per_ip {
  priority 3
  when path starts_with "/w/" and method == "GET"
  throttle 10 requests per 1m burst 5 by ip status 429 reason "slow"
}
"#;

pub fn ruleset() -> &'static rctl_compiler::ir::Ruleset {
    static R: OnceLock<rctl_compiler::ir::Ruleset> = OnceLock::new();
    R.get_or_init(|| {
        let c = rctl_compiler::compile_str("fuzz.rctl", RULES, &Default::default());
        c.ruleset.expect("the fuzz rules compile")
    })
}

/// Fuzzes `predefined` and, from the input's first line, `kind:FORMAT`.
pub fn run(data: &[u8], predefined: &str, kind: Option<&str>) {
    let (first, log) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    // Short capture lengths, so that values are often cut (and judged
    // only as far as their start tells).
    let cap = |n: &str, len| Capture {
        name: n.into(),
        len: Some(len),
    };
    let spec = Spec {
        captures: vec![cap("user-agent", 6), cap("host", 9), "referer".into()],
    };
    let mut names = vec![predefined.to_string()];
    if let (Some(k), Ok(f)) = (kind, std::str::from_utf8(first)) {
        names.push(format!("{k}:{f}"));
    }
    for name in names {
        let Ok(format) = by_name(&name, &spec) else { continue };
        // A format with a reader written for it (nginx's combined) reads
        // every line as its template alone does.
        let template = format.template_only();
        for line in log.split(|&b| b == b'\n') {
            let got = rctl_logs::record::parse_owned(&format, line);
            assert_eq!(got, rctl_logs::record::parse_owned(&template, line), "{name}: as the template reads it");
        }
        let mut run = DryRun::new(ruleset().clone(), None).expect("engine");
        let opts = Options {
            format: Some(name.clone()),
            spec: spec.clone(),
            max_line: 256,
            ..Options::default()
        };
        let r: Box<dyn std::io::Read + Send> = Box::new(std::io::Cursor::new(log.to_vec()));
        let Ok(src) = Source::from_reader(&mut run, "fuzz", r, &opts) else { continue };
        let summary = replay_sources(&mut run, vec![src]);
        let (_, l) = &summary.inputs[0];
        assert_eq!(l.judged + l.bad_lines, l.lines, "{name}: every line judged or bad");
        // Held and judged in time order: the same lines, judged or bad,
        // and no line judged late that file order did not judge late.
        let mut again = DryRun::new(ruleset().clone(), None).expect("engine");
        let window = Options {
            reorder_window_ns: Some(2_000_000_000),
            ..opts.clone()
        };
        let r: Box<dyn std::io::Read + Send> = Box::new(std::io::Cursor::new(log.to_vec()));
        if let Ok(src) = Source::from_reader(&mut again, "fuzz", r, &window) {
            let s = replay_sources(&mut again, vec![src]);
            let (_, o) = &s.inputs[0];
            assert_eq!((o.lines, o.judged, o.bad_lines), (l.lines, l.judged, l.bad_lines), "{name}: reordered");
            assert!(o.late_lines <= l.late_lines, "{name}: reordering adds no late line");
        }
        let report = run.finish();
        assert!(report.totals.unknown_requests <= report.totals.captured_requests);
        let cut = report.inputs[0].log.as_ref().map_or(0, |l| l.cut_lines);
        assert!(cut <= l.judged, "{name}: cut lines are judged lines");
    }
}
