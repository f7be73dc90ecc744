//! Compressed logs (gzip, zstd, or neither): arbitrary bytes, damaged
//! and cut-short streams among them, through the decompressor and the
//! line reader into a dry run. Never a panic; every line read is judged
//! or reported bad; a failing stream stops its input with an error, not
//! the run.
#![no_main]

#[expect(dead_code, reason = "the text formats' runner; this target shares only their rules")]
mod common;

use rctl_dataplane::dryrun::DryRun;
use rctl_logs::run::{replay_sources, Options, Source};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Named, and detected from the first lines (an empty input has a
    // format of its own).
    for format in [Some("nginx-combined".to_string()), None] {
        let Ok((r, _)) = rctl_logs::input::decompress(Box::new(std::io::Cursor::new(data.to_vec())))
        else {
            continue;
        };
        let mut run = DryRun::new(common::ruleset().clone(), None).expect("engine");
        let opts = Options {
            format,
            max_line: 256,
            ..Options::default()
        };
        let Ok(src) = Source::from_reader(&mut run, "fuzz", r, &opts) else { continue };
        let summary = replay_sources(&mut run, vec![src]);
        let (_, l) = &summary.inputs[0];
        assert_eq!(l.judged + l.bad_lines, l.lines, "every line judged or bad");
        let report = run.finish();
        assert_eq!(report.totals.captured_requests, l.judged);
    }
});
