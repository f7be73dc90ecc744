//! What the agent keeps on local disk, so that after a restart it
//! enforces its last good generation before etcd answers.
//!
//! In `STATE/agent/` (0700, files 0600, each written whole or not at all):
//!
//! | file | what |
//! |---|---|
//! | `artifacts/<sha256>.rctlc` | the artifacts the records name, by content hash |
//! | `last-good.json` | the generation both planes run: its number and artifact hash |
//! | `pending.json` | a generation being applied (written before the packet plane switches) |
//!
//! An apply writes the artifact, then `pending.json`, switches the packet
//! plane (the commit point of the XDP apply), commits the agent, then
//! renames `pending.json` over `last-good.json`: one rename, so a crash at
//! any point leaves a `last-good` whose artifact is on disk (an artifact is
//! removed only once no record names it). After a crash the packet plane
//! says which of the two is live: if it runs `pending`'s artifact, the
//! switch happened and `pending` becomes `last-good`; otherwise `pending`
//! is dropped.
//!
//! Agents before this layout kept the artifact beside its record
//! (`last-good.rctlc`); such a file is still read, and removed at the next
//! promotion.

use crate::error::{ErrorKind, FleetError};
use rctl_os::fs;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A generation on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The fleet generation (pointer revision; 0: not from etcd).
    pub generation: i64,
    /// The artifact's content SHA-256 (hex).
    pub sha256: String,
    /// When it was applied.
    pub applied_unix: u64,
}

/// The agent's directory.
#[derive(Debug, Clone)]
pub struct Local {
    dir: PathBuf,
}

fn io(e: impl std::fmt::Display) -> FleetError {
    FleetError::new(ErrorKind::Io, e.to_string())
}

impl Local {
    /// `STATE/agent`, created 0700 (refused when others could write it).
    pub fn open(state_dir: &Path) -> Result<Local, FleetError> {
        let dir = state_dir.join("agent");
        fs::ensure_private_dir(&dir, &mut Vec::new()).map_err(io)?;
        fs::check_private_dir(&dir).map_err(io)?;
        Ok(Local { dir })
    }

    /// A record's file.
    fn record_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// The artifacts' directory.
    fn store(&self) -> PathBuf {
        self.dir.join("artifacts")
    }

    /// Where the artifact of content hash `sha` is kept (`None` for a
    /// hash that is not 64 hex digits: it never names a file).
    fn artifact_path(&self, sha: &str) -> Option<PathBuf> {
        (sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.store().join(format!("{sha}.rctlc")))
    }

    /// The record `name` (`last-good` or `pending`), if readable.
    fn record_of(&self, name: &str) -> Option<Record> {
        serde_json::from_slice(&fs::read_private(&self.record_path(name)).ok()?).ok()
    }

    /// Reads `last-good` or `pending`: the record and its artifact, when
    /// both are there and agree (the artifact is checked in full).
    pub fn read(&self, name: &str) -> Option<(Record, Vec<u8>)> {
        let rec = self.record_of(name)?;
        let stored = self.artifact_path(&rec.sha256)?;
        let legacy = self.dir.join(format!("{name}.rctlc"));
        [stored, legacy].iter().find_map(|p| {
            let bytes = fs::read_private(p).ok()?;
            crate::fetch::check(&bytes, &rec.sha256).ok()?;
            Some((rec.clone(), bytes))
        })
    }

    /// Writes the artifact `bytes` of `rec`, then `rec` as `name`.
    fn write(&self, name: &str, rec: &Record, bytes: &[u8]) -> Result<(), FleetError> {
        let path = self.artifact_path(&rec.sha256).ok_or_else(|| {
            FleetError::new(
                ErrorKind::Invalid,
                format!("artifact hash {:?} is not 64 hex digits", rec.sha256),
            )
        })?;
        fs::ensure_private_dir(&self.store(), &mut Vec::new()).map_err(io)?;
        fs::write_private(&path, bytes).map_err(io)?;
        let json = serde_json::to_vec(rec).map_err(io)?;
        fs::write_private(&self.record_path(name), &json).map_err(io)
    }

    /// Writes `pending` (its artifact first).
    pub fn write_pending(&self, rec: &Record, bytes: &[u8]) -> Result<(), FleetError> {
        self.write("pending", rec, bytes)
    }

    /// Makes `pending` the `last-good`: one rename of its record (its
    /// artifact is already in place), then the artifacts no record names
    /// go.
    pub fn promote(&self) -> Result<(), FleetError> {
        fs::rename_durably(&self.record_path("pending"), &self.record_path("last-good"))
            .map_err(io)?;
        self.collect();
        Ok(())
    }

    /// Writes `last-good` directly (a generation recorded without an
    /// apply: one whose artifact already runs). `pending` is untouched.
    pub fn record(&self, rec: &Record, bytes: &[u8]) -> Result<(), FleetError> {
        self.write("last-good", rec, bytes)?;
        self.collect();
        Ok(())
    }

    /// Drops `pending`.
    pub fn drop_pending(&self) {
        let _ = fs::remove_file(&self.record_path("pending"));
        self.collect();
    }

    /// Removes the artifacts neither record names, and the files of the
    /// layout before this one once `last-good` has its artifact in the
    /// store. Best effort: a file left is removed next time.
    fn collect(&self) {
        let keep: Vec<String> = ["last-good", "pending"]
            .iter()
            .filter_map(|n| self.record_of(n))
            .map(|r| format!("{}.rctlc", r.sha256))
            .collect();
        let Ok(entries) = std::fs::read_dir(self.store()) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".rctlc") && !keep.contains(&name) {
                let _ = fs::remove_file(&e.path());
            }
        }
        let stored = self
            .record_of("last-good")
            .and_then(|r| self.artifact_path(&r.sha256))
            .is_some_and(|p| p.is_file());
        if stored {
            for legacy in ["last-good.rctlc", "pending.rctlc"] {
                let _ = fs::remove_file(&self.dir.join(legacy));
            }
        }
    }
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
