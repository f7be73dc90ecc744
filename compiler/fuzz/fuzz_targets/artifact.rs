//! Decode arbitrary bytes as an artifact: errors, never panics; anything
//! accepted re-encodes to the same bytes. The input is tried twice: as a
//! whole file, and as a payload behind a valid header (magic, version,
//! length, hash), so the structural checks are fuzzed too and not only the
//! checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_compiler::artifact;

fuzz_target!(|data: &[u8]| {
    if let Ok(rs) = artifact::decode(data) {
        assert_eq!(artifact::encode(&rs), data);
    }
    let mut file = Vec::with_capacity(56 + data.len());
    file.extend_from_slice(&artifact::MAGIC);
    file.extend_from_slice(&artifact::FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&0u16.to_le_bytes());
    file.extend_from_slice(&0x0102_0304u32.to_le_bytes());
    file.extend_from_slice(&(data.len() as u64).to_le_bytes());
    file.extend_from_slice(&artifact::sha256(data));
    file.extend_from_slice(data);
    if let Ok(rs) = artifact::decode(&file) {
        assert_eq!(artifact::encode(&rs), file, "accepted payloads are canonical");
    }
});
