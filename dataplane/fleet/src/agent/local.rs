//! What the agent keeps on local disk, so that after a restart it
//! enforces its last good generation before etcd answers.
//!
//! In `STATE/agent/` (0700, files 0600, written whole or not at all):
//!
//! | file | what |
//! |---|---|
//! | `last-good.rctlc`, `last-good.json` | the artifact both planes run, and its generation |
//! | `pending.rctlc`, `pending.json` | an artifact being applied (written before the packet plane switches) |
//!
//! An apply writes `pending`, switches the packet plane (the commit point
//! of the XDP apply), commits the agent, then renames `pending` over
//! `last-good`. After a crash the packet plane says which of the two is
//! live: if it runs `pending`'s artifact, the switch happened and
//! `pending` becomes `last-good`; otherwise `pending` is dropped.

use crate::error::{ErrorKind, FleetError};
use rctl_dataplane::xdp::host as xdp;
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
        xdp::ensure_private_dir(&dir, &mut Vec::new()).map_err(io)?;
        xdp::check_private_dir(&dir).map_err(io)?;
        Ok(Local { dir })
    }

    fn paths(&self, name: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{name}.rctlc")),
            self.dir.join(format!("{name}.json")),
        )
    }

    /// Reads `last-good` or `pending`: the record and the artifact, when
    /// both are there and agree (the artifact is checked in full).
    pub fn read(&self, name: &str) -> Option<(Record, Vec<u8>)> {
        let (a, j) = self.paths(name);
        let rec: Record = serde_json::from_slice(&xdp::read_private(&j).ok()?).ok()?;
        let bytes = xdp::read_private(&a).ok()?;
        crate::fetch::check(&bytes, &rec.sha256).ok()?;
        Some((rec, bytes))
    }

    /// Writes `pending`.
    pub fn write_pending(&self, rec: &Record, bytes: &[u8]) -> Result<(), FleetError> {
        let (a, j) = self.paths("pending");
        xdp::write_private(&a, bytes).map_err(io)?;
        xdp::write_private(&j, &serde_json::to_vec(rec).unwrap_or_default()).map_err(io)
    }

    /// Makes `pending` the `last-good` (artifact first: a crash between
    /// the two renames leaves a record that does not match its artifact,
    /// which [`Local::read`] refuses, and the other pair).
    pub fn promote(&self) -> Result<(), FleetError> {
        let (pa, pj) = self.paths("pending");
        let (la, lj) = self.paths("last-good");
        xdp::remove_file(&lj).map_err(io)?;
        xdp::rename_durably(&pa, &la).map_err(io)?;
        xdp::rename_durably(&pj, &lj).map_err(io)
    }

    /// Writes `last-good` directly (a generation recorded without an
    /// apply: one whose artifact already runs).
    pub fn record(&self, rec: &Record, bytes: &[u8]) -> Result<(), FleetError> {
        self.write_pending(rec, bytes)?;
        self.promote()
    }

    /// Drops `pending`.
    pub fn drop_pending(&self) {
        let (a, j) = self.paths("pending");
        let _ = xdp::remove_file(&j);
        let _ = xdp::remove_file(&a);
    }
}
