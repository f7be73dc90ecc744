//! Arbitrary bytes as a capture: the reader, the decoder, the reassembler,
//! the HTTP parser and the dry-run must never panic; a read error must name
//! an offset inside the input; what the flows hold stays within the bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_compiler::ir::Ruleset;
use rctl_dataplane::dryrun::{requests_in, DryRun};
use std::sync::OnceLock;

static RULES: &[u8] = include_bytes!("../../../tests/data/artifact-v1.rctlc");

fn ruleset() -> &'static Ruleset {
    static R: OnceLock<Ruleset> = OnceLock::new();
    R.get_or_init(|| rctl_compiler::artifact::decode(RULES).expect("fixture decodes"))
}

fuzz_target!(|data: &[u8]| {
    let (_, err) = requests_in(data);
    if let Some(e) = err {
        assert!(e.offset <= data.len() as u64, "offset {} past the end of {} bytes", e.offset, data.len());
    }
    let mut run = DryRun::new(ruleset().clone(), None).expect("engine");
    // Half the inputs get a bound small ones can pass, so that shedding
    // runs too.
    if data.len() % 2 == 1 {
        run.set_max_buffered(4096);
    }
    let _ = run.replay("fuzz", data);
    let report = run.finish();
    let t = &report.totals;
    assert!(t.requests <= data.len() as u64);
    assert!(
        t.buffered_peak_bytes <= t.max_buffered_bytes,
        "peak {} over the bound {}",
        t.buffered_peak_bytes,
        t.max_buffered_bytes
    );
    assert!(t.shed_bytes <= data.len() as u64);
});
