//! Parquet tables: arbitrary bytes as a `.parquet` file never panic
//! (the Parquet reader's own panics are kept inside and reported as the
//! file's error), and every row read is judged or reported bad.
#![no_main]

#[expect(dead_code, reason = "the text formats' runner; this target shares only their rules")]
mod common;

use rctl_dataplane::dryrun::DryRun;
use rctl_logs::run::{replay_sources, Options, Source};
use std::io::Write as _;

/// The reader's panics are caught and reported: libfuzzer's hook would
/// abort on them before they are.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quiet_panics();
    let rs = common::ruleset().clone();
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
    let _ = std::fs::remove_file(&path);
});
