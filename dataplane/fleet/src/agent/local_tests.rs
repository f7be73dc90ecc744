//! The agent's files: every step of an apply leaves a `last-good` that
//! reads back whole.

use super::{Local, Record};
use std::path::PathBuf;

/// A fresh private directory for one test.
fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rctl-local-{tag}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An artifact denying `path`, and its record as generation `generation`.
fn artifact(path: &str, generation: i64) -> (Record, Vec<u8>) {
    let src = format!("rule r {{\n  when path == \"{path}\"\n  deny\n}}\n");
    let c = rctl_compiler::compile_str("t.rctl", &src, &rctl_compiler::Options::default());
    let bytes = rctl_compiler::artifact::encode(&c.ruleset.expect("compiles"));
    let sha = rctl_compiler::artifact::content_hash(&bytes).unwrap();
    let rec = Record {
        generation,
        sha256: rctl_compiler::artifact::hex(&sha),
        applied_unix: 1,
    };
    (rec, bytes)
}

/// The artifacts kept in the store, by file name.
fn stored(l: &Local) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(l.store())
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn every_step_of_an_apply_leaves_a_whole_last_good() {
    let d = dir("apply");
    let l = Local::open(&d).unwrap();
    let (a, ab) = artifact("/a", 1);
    let (b, bb) = artifact("/b", 2);
    l.record(&a, &ab).unwrap();
    assert_eq!(l.read("last-good"), Some((a.clone(), ab.clone())));
    // Pending written: a crash here (a restart opens the directory
    // afresh) finds both generations whole.
    l.write_pending(&b, &bb).unwrap();
    let again = Local::open(&d).unwrap();
    assert_eq!(again.read("last-good"), Some((a.clone(), ab.clone())));
    assert_eq!(again.read("pending"), Some((b.clone(), bb.clone())));
    // Promoted: one rename; A's artifact goes once nothing names it.
    l.promote().unwrap();
    assert_eq!(l.read("last-good"), Some((b.clone(), bb)));
    assert_eq!(l.read("pending"), None);
    assert_eq!(stored(&l), vec![format!("{}.rctlc", b.sha256)]);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn no_instant_of_a_promotion_lacks_a_whole_last_good() {
    // What a kill at any instant would leave, seen by a reader racing
    // the promotions: `last-good` is always one whole generation. (A
    // promotion that removed the old record before renaming the new one
    // in left instants with none: a restarted agent then ran an empty
    // ruleset.)
    let d = dir("instants");
    let l = Local::open(&d).unwrap();
    let gens = [artifact("/a", 1), artifact("/b", 2)];
    l.record(&gens[0].0, &gens[0].1).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (l, done) = (l.clone(), std::sync::Arc::clone(&done));
        let shas: Vec<String> = gens.iter().map(|g| g.0.sha256.clone()).collect();
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let rec = l
                    .record_of("last-good")
                    .expect("a moment without last-good.json");
                assert!(shas.contains(&rec.sha256));
                if l.read("last-good").is_none() {
                    // Its artifact went: only because the record moved on.
                    let now = l.record_of("last-good").expect("no last-good.json");
                    assert_ne!(now, rec, "last-good names an artifact not on disk");
                }
                reads += 1;
            }
            reads
        })
    };
    for i in 0..300 {
        let (rec, bytes) = &gens[(i + 1) % 2];
        l.write_pending(rec, bytes).unwrap();
        l.promote().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    assert_eq!(l.read("last-good").map(|g| g.0), Some(gens[0].0.clone()));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_dropped_pending_keeps_last_good_and_its_artifact() {
    let d = dir("drop");
    let l = Local::open(&d).unwrap();
    let (a, ab) = artifact("/a", 1);
    let (b, bb) = artifact("/b", 2);
    l.record(&a, &ab).unwrap();
    l.write_pending(&b, &bb).unwrap();
    l.drop_pending();
    assert_eq!(l.read("pending"), None);
    assert_eq!(l.read("last-good"), Some((a.clone(), ab)));
    assert_eq!(stored(&l), vec![format!("{}.rctlc", a.sha256)]);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn recording_a_generation_keeps_a_pending_apply() {
    let d = dir("record");
    let l = Local::open(&d).unwrap();
    let (a, ab) = artifact("/a", 1);
    let (b, bb) = artifact("/b", 2);
    l.record(&a, &ab).unwrap();
    l.write_pending(&b, &bb).unwrap();
    let renumbered = Record {
        generation: 7,
        ..a.clone()
    };
    l.record(&renumbered, &ab).unwrap();
    assert_eq!(l.read("last-good"), Some((renumbered, ab)));
    assert_eq!(l.read("pending"), Some((b, bb)));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_corrupt_or_missing_artifact_is_never_read() {
    let d = dir("corrupt");
    let l = Local::open(&d).unwrap();
    let (a, ab) = artifact("/a", 1);
    l.record(&a, &ab).unwrap();
    let path = l.artifact_path(&a.sha256).unwrap();
    let mut bytes = ab.clone();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(l.read("last-good"), None);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(l.read("last-good"), None);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_record_naming_no_hash_names_no_file() {
    let d = dir("names");
    let l = Local::open(&d).unwrap();
    let (_, ab) = artifact("/a", 1);
    for sha in ["../last-good", "", &"g".repeat(64), &"a".repeat(63)] {
        let rec = Record {
            generation: 1,
            sha256: sha.to_string(),
            applied_unix: 1,
        };
        assert!(l.write_pending(&rec, &ab).is_err(), "{sha:?}");
        std::fs::write(
            d.join("agent/last-good.json"),
            serde_json::to_vec(&rec).unwrap(),
        )
        .unwrap();
        assert_eq!(l.read("last-good"), None, "{sha:?}");
    }
    assert!(stored(&l).is_empty());
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn the_layout_before_the_store_is_read_then_replaced() {
    // An agent upgraded in place: `last-good.rctlc` beside its record.
    let d = dir("legacy");
    let l = Local::open(&d).unwrap();
    let (a, ab) = artifact("/a", 1);
    let (b, bb) = artifact("/b", 2);
    std::fs::write(d.join("agent/last-good.rctlc"), &ab).unwrap();
    std::fs::write(
        d.join("agent/last-good.json"),
        serde_json::to_vec(&a).unwrap(),
    )
    .unwrap();
    assert_eq!(l.read("last-good"), Some((a, ab)));
    l.write_pending(&b, &bb).unwrap();
    l.promote().unwrap();
    assert_eq!(l.read("last-good"), Some((b, bb)));
    assert!(!d.join("agent/last-good.rctlc").exists());
    let _ = std::fs::remove_dir_all(d);
}
