//! Arbitrary bytes as a capture: the reader, the decoder, the reassembler,
//! the HTTP parser and the dry-run must never panic; a read error must name
//! an offset inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_dataplane::dryrun::{requests_in, DryRun};

static RULES: &[u8] = include_bytes!("../../../tests/data/artifact-v1.rctlc");

fuzz_target!(|data: &[u8]| {
    let (_, err) = requests_in(data);
    if let Some(e) = err {
        assert!(e.offset <= data.len() as u64, "offset {} past the end of {} bytes", e.offset, data.len());
    }
    let rs = rctl_compiler::artifact::decode(RULES).expect("fixture decodes");
    let mut run = DryRun::new(rs, None).expect("engine");
    let _ = run.replay("fuzz", data);
    let report = run.finish();
    assert!(report.totals.requests <= data.len() as u64);
});
