//! Bans and buckets that survive a restart, a crash and a reboot: with
//! `--state-dir DIR`, the agent saves every throttle rule's state to
//! `DIR/limits.snapshot` every `--snapshot-every` seconds (10) and when it
//! stops, and puts it back when it starts, by rule name, dropping what
//! ended meanwhile (see `rctl_dataplane::snapshot`). A crash loses at
//! most one interval of what changed. A snapshot that cannot be read is
//! reported and ignored, never fatal: the agent starts with empty buckets.
//!
//! The artifact in force is kept there too (`DIR/active.rctlc`, written
//! at every commit): a restart starts from what was last applied, and
//! `--artifact` is only the first start's.
//!
//! Times are saved on the wall clock, so a reboot (which restarts the
//! monotonic clock) does not stretch or shorten a ban; a wall clock set
//! back or forth by hand moves the saved bans by as much.

use crate::judge::{Generation, Judge};
use rctl_dataplane::snapshot;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The snapshot's file name in the state directory.
pub const FILE: &str = "limits.snapshot";
/// The artifact in force, in the state directory.
pub const ARTIFACT: &str = "active.rctlc";

/// The artifact kept in `dir` by the last commit, if there is one.
pub fn kept_artifact(dir: &Path) -> Option<(PathBuf, Vec<u8>)> {
    let path = dir.join(ARTIFACT);
    let bytes = rctl_os::fs::read_private(&path).ok()?;
    Some((path, bytes))
}

/// Where and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The state directory (created 0700 if missing).
    pub dir: PathBuf,
    /// How often to save.
    pub every: Duration,
}

/// What status shows of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistStatus {
    /// The snapshot file.
    pub path: String,
    /// Keys put back at start.
    pub restored_keys: usize,
    /// Why the snapshot found at start was not used, if it was not.
    pub restore_error: Option<String>,
    /// Why the artifact last applied could not be kept, if it could not.
    pub artifact_error: Option<String>,
    /// The last save (unix seconds; 0: none yet).
    pub saved_unix: u64,
    /// Keys it held.
    pub saved_keys: usize,
    /// Why the last save failed, if it did.
    pub save_error: Option<String>,
}

/// The saver: its file, and what it did.
#[derive(Debug)]
pub struct Persist {
    path: PathBuf,
    every: Duration,
    status: Mutex<PersistStatus>,
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Persist {
    /// Opens the state directory, and puts the snapshot found there (if
    /// any) back into `first` (before it decides anything: the judge's
    /// clock starts at 0 about now). Returns the saver and, when the
    /// snapshot could not be used, why (a warning: the agent starts
    /// afresh).
    pub fn open(c: &Config, first: &mut Generation) -> Result<(Persist, Option<String>), String> {
        rctl_os::fs::ensure_private_dir(&c.dir, &mut Vec::new())
            .map_err(|e| format!("--state-dir {}: {e}", c.dir.display()))?;
        let path = c.dir.join(FILE);
        let mut status = PersistStatus {
            path: path.display().to_string(),
            ..PersistStatus::default()
        };
        let warning = match rctl_os::fs::read_private(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(format!("{}: {e}", path.display())),
            Ok(bytes) => match snapshot::read(&bytes) {
                Err(e) => Some(format!("{}: {e}", path.display())),
                Ok(snap) => {
                    let report = snapshot::restore(&mut first.engine, &snap, 0, unix_ns());
                    status.restored_keys = report.keys();
                    None
                }
            },
        };
        if let Some(w) = &warning {
            status.restore_error = Some(w.clone());
        }
        let p = Persist {
            path,
            every: c.every.max(Duration::from_secs(1)),
            status: Mutex::new(status),
        };
        let warning = warning.map(|w| format!("limit state not restored, starting afresh: {w}"));
        Ok((p, warning))
    }

    /// How often it saves.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Saves the state of the generation in force (blocking: file I/O).
    pub fn save(&self, judge: &Judge) {
        let g = judge.current();
        let saved = snapshot::save(&g.engine, judge.now_ns(), unix_ns());
        let keys = saved.keys;
        let result = rctl_os::fs::write_private(&self.path, &saved.bytes);
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => {
                st.saved_unix = crate::now_unix();
                st.saved_keys = keys;
                st.save_error = None;
            }
            Err(e) => st.save_error = Some(e.to_string()),
        }
    }

    /// Keeps `artifact` as the one a restart starts from.
    pub fn keep_artifact(&self, artifact: &[u8]) {
        let path = self.path.with_file_name(ARTIFACT);
        let r = rctl_os::fs::write_private(&path, artifact);
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .artifact_error = r.err().map(|e| e.to_string());
    }

    /// What it did.
    pub fn status(&self) -> PersistStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
