//! Parquet tables: arbitrary bytes as a `.parquet` file never panic
//! (the Parquet reader's own panics are kept inside and reported as the
//! file's error), and every row read is judged or reported bad.
#![no_main]

use rctl_dataplane::dryrun::DryRun;
use rctl_logs::run::{replay_sources, Options, Source};
use std::io::Write as _;
use std::sync::OnceLock;

const RULES: &str = r#"rule by_lang {
  priority 1
  when path starts_with "/wiki/" and header("accept-language") == "xx"
  deny 403 "no"
}
rule per_ip {
  priority 2
  when path starts_with "/w/" and method == "GET"
  throttle 10 requests per 1m burst 5 by ip status 429 reason "slow"
}
"#;

fn ruleset() -> &'static rctl_compiler::ir::Ruleset {
    static R: OnceLock<rctl_compiler::ir::Ruleset> = OnceLock::new();
    R.get_or_init(|| {
        // The reader's panics are caught and reported: libfuzzer's hook
        // would abort on them before they are.
        std::panic::set_hook(Box::new(|_| {}));
        let c = rctl_compiler::compile_str("fuzz.rctl", RULES, &Default::default());
        c.ruleset.expect("the fuzz rules compile")
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let rs = ruleset().clone();
    let path = std::env::temp_dir().join(format!("rctl-fuzz-{}.parquet", std::process::id()));
    let mut f = std::fs::File::create(&path).expect("a temporary file");
    f.write_all(data).expect("written");
    drop(f);
    let mut run = DryRun::new(rs, None).expect("an engine");
    if let Ok(src) = Source::open(&mut run, &path, &Options::default()) {
        let summary = replay_sources(&mut run, vec![src]);
        let (_, l) = &summary.inputs[0];
        assert_eq!(l.judged + l.bad_lines, l.lines, "every row judged or bad");
        let report = run.finish();
        assert!(report.totals.unknown_requests <= report.totals.captured_requests);
    }
});
