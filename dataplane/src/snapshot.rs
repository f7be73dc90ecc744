//! Rate-limit state saved across a restart: every throttle rule's keys,
//! buckets and bans ([`crate::limiter::SavedLimiter`]), in one file, put
//! back into a new engine by rule name where the rule still counts the
//! same thing (as [`crate::carry`] links them between generations).
//!
//! # Format
//!
//! Little-endian. `RCTLLIMS`, format version (u16, 1), saved at (unix ns,
//! u64), rule count (u32); per rule: its name (u16 length, UTF-8), the
//! fingerprint of what it counts (u64: its unit, keys, bucket and sharing),
//! the table's kind (u8), the hasher's key (2 × u64), entry count (u32),
//! then 36 bytes an entry (hash, t1, t2, id as u64, n as u32); and last,
//! the SHA-256 of everything before it. A file that is short, long,
//! altered or of another version is refused whole, with the offset of the
//! first thing wrong: nothing of it is put back.

use crate::limiter::{Restored, SavedEntry, SavedKind, SavedLimiter};
use crate::Engine;
use rctl_compiler::ir::{Action, Rule};
use std::fmt;

/// The magic number.
pub const MAGIC: [u8; 8] = *b"RCTLLIMS";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;

/// Why a snapshot could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError {
    /// The byte offset of the first thing wrong.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for SnapshotError {}

/// A rule's limiter as read from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedRule {
    /// The rule's name.
    pub rule: String,
    /// What it counts ([`fingerprint`]).
    pub fingerprint: u64,
    /// Its keys and buckets.
    pub limiter: SavedLimiter,
}

/// A snapshot as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// When it was saved (unix ns).
    pub saved_unix_ns: u64,
    /// Its rules.
    pub rules: Vec<SavedRule>,
}

/// What a restore did, by rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Rules whose state came back, with what came back.
    pub restored: Vec<(String, Restored)>,
    /// Saved rules the engine has no throttle of the same name counting
    /// the same thing for (their state is dropped).
    pub unmatched: Vec<String>,
}

impl Report {
    /// Keys put back, over every rule.
    pub fn keys(&self) -> usize {
        self.restored.iter().map(|(_, r)| r.keys).sum()
    }
}

/// What a throttle rule counts, as one number: a snapshot's state goes
/// back only to a rule of the same name and fingerprint.
pub fn fingerprint(rule: &Rule) -> Option<u64> {
    let Action::Throttle(t) = &rule.action else {
        return None;
    };
    let text = format!("{:?}|{:?}|{:?}|{}", t.unit, t.keys, t.bucket, t.shared);
    let h = rctl_compiler::artifact::sha256(text.as_bytes());
    Some(u64::from_le_bytes([
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
    ]))
}

/// A saved snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// Keys it holds, over every rule.
    pub keys: usize,
}

/// Saves every throttle rule's state of `engine` at `now_ns` (its clock),
/// `unix_ns` being the wall clock then.
pub fn save(engine: &Engine, now_ns: u64, unix_ns: u64) -> Saved {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&unix_ns.to_le_bytes());
    let rules: Vec<(&Rule, u64, SavedLimiter)> = engine
        .ruleset()
        .rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let l = engine.limiter(i)?;
            Some((r, fingerprint(r)?, l.save(now_ns, unix_ns)))
        })
        .collect();
    out.extend_from_slice(&(rules.len() as u32).to_le_bytes());
    for (r, fp, l) in &rules {
        let name = &r.name.as_bytes()[..r.name.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&fp.to_le_bytes());
        out.push(l.kind.to_byte());
        out.extend_from_slice(&l.keys.0.to_le_bytes());
        out.extend_from_slice(&l.keys.1.to_le_bytes());
        out.extend_from_slice(&(l.entries.len() as u32).to_le_bytes());
        for e in &l.entries {
            for v in [e.hash, e.t1, e.t2, e.id] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&e.n.to_le_bytes());
        }
    }
    let sum = rctl_compiler::artifact::sha256(&out);
    out.extend_from_slice(&sum);
    Saved {
        bytes: out,
        keys: rules.iter().map(|(_, _, l)| l.entries.len()).sum(),
    }
}

/// A bounds-checked reader that says where it stopped.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(SnapshotError {
                offset: self.at,
                message: format!("ends inside {what}"),
            });
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u64(&mut self, what: &str) -> Result<u64, SnapshotError> {
        let s = self.take(8, what)?;
        Ok(u64::from_le_bytes([
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
        ]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, SnapshotError> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u16(&mut self, what: &str) -> Result<u16, SnapshotError> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
}

/// Reads a snapshot; nothing is trusted before its checksum is.
pub fn read(b: &[u8]) -> Result<Snapshot, SnapshotError> {
    let bad = |offset, message: &str| SnapshotError {
        offset,
        message: message.to_string(),
    };
    if b.len() < MAGIC.len() + 2 + 8 + 4 + 32 {
        return Err(bad(b.len(), "too short to be a snapshot"));
    }
    if b[..8] != MAGIC {
        return Err(bad(0, "not a limiter snapshot (no RCTLLIMS magic)"));
    }
    let (body, sum) = b.split_at(b.len() - 32);
    if rctl_compiler::artifact::sha256(body)[..] != *sum {
        return Err(bad(
            body.len(),
            "the checksum does not match: the file was altered or cut",
        ));
    }
    let mut r = Reader { b: body, at: 8 };
    let version = r.u16("the version")?;
    if version != VERSION {
        return Err(bad(
            8,
            &format!("format version {version}, this build reads {VERSION}"),
        ));
    }
    let saved_unix_ns = r.u64("the time")?;
    let n = r.u32("the rule count")? as usize;
    let mut rules = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let len = r.u16("a rule name's length")? as usize;
        let at = r.at;
        let name = std::str::from_utf8(r.take(len, "a rule name")?)
            .map_err(|_| bad(at, "a rule name is not UTF-8"))?
            .to_string();
        let fingerprint = r.u64("a fingerprint")?;
        let at = r.at;
        let kind = SavedKind::from_byte(r.take(1, "a table kind")?[0])
            .ok_or_else(|| bad(at, "an unknown table kind"))?;
        let keys = (r.u64("a hasher key")?, r.u64("a hasher key")?);
        let count = r.u32("an entry count")? as usize;
        if count.saturating_mul(36) > body.len() - r.at {
            return Err(bad(r.at, "more entries than the file holds"));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(SavedEntry {
                hash: r.u64("an entry")?,
                t1: r.u64("an entry")?,
                t2: r.u64("an entry")?,
                id: r.u64("an entry")?,
                n: r.u32("an entry")?,
            });
        }
        rules.push(SavedRule {
            rule: name,
            fingerprint,
            limiter: SavedLimiter {
                kind,
                keys,
                entries,
            },
        });
    }
    if r.at != body.len() {
        return Err(bad(r.at, "bytes after the last rule"));
    }
    Ok(Snapshot {
        saved_unix_ns,
        rules,
    })
}

/// Puts `snapshot` back into `engine` (fresh: before it decides
/// anything), rule by rule, by name and fingerprint.
pub fn restore(engine: &mut Engine, snapshot: &Snapshot, now_ns: u64, unix_ns: u64) -> Report {
    let mut report = Report::default();
    let rules: Vec<(usize, String, Option<u64>)> = engine
        .ruleset()
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.name.clone(), fingerprint(r)))
        .collect();
    for saved in &snapshot.rules {
        let target = rules
            .iter()
            .find(|(_, name, fp)| *name == saved.rule && *fp == Some(saved.fingerprint))
            .map(|(i, _, _)| *i);
        match target.and_then(|i| engine.limiter_mut(i)) {
            Some(l) => {
                let r = l.restore(&saved.limiter, now_ns, unix_ns);
                report.restored.push((saved.rule.clone(), r));
            }
            None => report.unmatched.push(saved.rule.clone()),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Outcome;
    use crate::EngineConfig;

    const S: u64 = 1_000_000_000;

    fn engine(src: &str) -> Engine {
        let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
        Engine::new(c.ruleset.expect("compiles"), &EngineConfig::default()).unwrap()
    }

    const RULES: &str = r#"
rule login { when path == "/login" throttle 1 requests per 1m burst 1 by ip ban 5m }
rule api { when path starts_with "/api" throttle 10 requests per 1s by ip }
"#;

    #[test]
    fn a_ban_comes_back_by_rule_name_and_a_changed_rule_starts_afresh() {
        let e = engine(RULES);
        let l = e.limiter(0).unwrap();
        let _ = l.hit(b"203.0.113.9", S);
        let _ = l.hit(b"203.0.113.9", S);
        let saved = save(&e, 2 * S, 1_000 * S);
        assert_eq!(saved.keys, 1);
        let snap = read(&saved.bytes).unwrap();
        assert_eq!(snap.saved_unix_ns, 1_000 * S);
        assert_eq!(snap.rules.len(), 2);
        let mut fresh = engine(RULES);
        let rep = restore(&mut fresh, &snap, 0, 1_060 * S);
        assert_eq!(rep.keys(), 1, "{rep:?}");
        assert!(matches!(
            fresh.limiter(0).unwrap().hit(b"203.0.113.9", 0),
            Outcome::Limited { retry_after_ns } if retry_after_ns == 239 * S
        ));
        // Keyed by something else now: not put back.
        let mut changed = engine(&RULES.replace("burst 1 by ip ban", "burst 1 by ip, path ban"));
        let rep = restore(&mut changed, &snap, 0, 1_060 * S);
        assert_eq!(rep.unmatched, ["login"]);
        assert_eq!(rep.keys(), 0);
    }

    #[test]
    fn a_damaged_snapshot_is_refused_whole_with_its_offset() {
        let e = engine(RULES);
        let _ = e.limiter(0).unwrap().hit(b"x", S);
        let bytes = save(&e, S, S).bytes;
        assert!(read(&bytes).is_ok());
        for cut in [0, 5, 20, bytes.len() - 1] {
            assert!(read(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        let err = read(&flipped).unwrap_err();
        assert!(err.message.contains("checksum"), "{err}");
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(read(&longer).is_err());
        assert!(read(b"RCTLLIMS not a snapshot at all, but long enough to look at").is_err());
        // Garbage never panics.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..200 {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = read(&junk);
        }
    }
}
