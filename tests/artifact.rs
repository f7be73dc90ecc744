//! The artifact: determinism, validation, and no panics on corrupt bytes.

use crate::util::*;
use rctl_compiler::artifact::{decode, encode, FORMAT_VERSION, MAGIC};
use rctl_compiler::ArtifactErrorKind;

fn fixture() -> Vec<u8> {
    let c =
        rctl_compiler::compile_paths(&["tests/data/artifact-v1.rctl".into()], &Default::default());
    assert!(!c.diagnostics.has_errors());
    encode(&c.ruleset.unwrap())
}

#[test]
fn round_trips_and_is_deterministic() {
    let c = rctl_compiler::compile_paths(&[root().join("rules")], &Default::default());
    let rs = c.ruleset.unwrap();
    let bytes = encode(&rs);
    assert_eq!(decode(&bytes).unwrap(), rs);
    let again = rctl_compiler::compile_paths(&[root().join("rules")], &Default::default());
    assert_eq!(encode(&again.ruleset.unwrap()), bytes);
    assert_eq!(&bytes[..8], &MAGIC);
}

#[test]
fn version_1_artifacts_still_decode_and_match_the_compiler() {
    let stored = std::fs::read("tests/data/artifact-v1.rctlc").unwrap();
    let rs = decode(&stored).expect("stored v1 artifact decodes");
    assert_eq!(rs.rules.len(), 7);
    assert_eq!(FORMAT_VERSION, 1);
    assert_eq!(
        fixture(),
        stored,
        "compiling the same source must give the same bytes"
    );
}

#[test]
fn header_errors_are_named() {
    let good = fixture();
    assert_eq!(decode(b"").unwrap_err().kind, ArtifactErrorKind::BadMagic);
    assert_eq!(
        decode(b"RCTLC\0\r\n").unwrap_err().kind,
        ArtifactErrorKind::Truncated
    );
    let mut v2 = good.clone();
    v2[8] = 2;
    assert_eq!(
        decode(&v2).unwrap_err().kind,
        ArtifactErrorKind::UnsupportedVersion(2)
    );
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(
        decode(&flipped).unwrap_err().kind,
        ArtifactErrorKind::ChecksumMismatch
    );
    let mut long = good.clone();
    long.push(0);
    assert!(matches!(
        decode(&long).unwrap_err().kind,
        ArtifactErrorKind::Invalid(_)
    ));
}

#[test]
fn every_truncation_and_bit_flip_is_an_error_not_a_panic() {
    let good = fixture();
    for n in 0..good.len() {
        assert!(decode(&good[..n]).is_err(), "truncated at {n}");
    }
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0x40;
        assert!(decode(&b).is_err(), "flip at {i}");
    }
}

/// Corrupts the payload but fixes the checksum, so the structural checks
/// are what must catch it.
#[test]
fn structurally_corrupt_payloads_never_panic() {
    let good = fixture();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rejected = 0;
    for round in 0..20_000 {
        let mut b = good.clone();
        for _ in 0..1 + round % 4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = 56 + (seed as usize) % (b.len() - 56);
            b[i] = (seed >> 32) as u8;
        }
        let hash = rctl_compiler::artifact::sha256(&b[56..]);
        b[24..56].copy_from_slice(&hash);
        if decode(&b).is_err() {
            rejected += 1;
        }
    }
    assert!(
        rejected > 10_000,
        "only {rejected} of 20000 corruptions were rejected"
    );
}
