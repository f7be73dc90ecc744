//! What the agent knows of itself: what its report, its status and its
//! metrics say.

use serde::Serialize;

/// What the agent knows of itself, for reports, status and metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// The fleet generation it runs (0: from local disk or bootstrap).
    pub generation: i64,
    /// When it applied it.
    pub applied_unix: u64,
    /// `ok`, `applying`, `failed`, `waiting`.
    pub state: String,
    /// Why the target does not run.
    pub last_error: Option<String>,
    /// The generation that error is about.
    pub error_generation: i64,
    /// The target's generation and artifact, as last seen.
    pub target_generation: i64,
    /// The target's artifact.
    pub target_sha256: Option<String>,
    /// Whether the watch is established.
    pub etcd_connected: bool,
    /// Why etcd is not, if it is not.
    pub etcd_error: Option<String>,
    /// Why its report could not be written to etcd, if it could not (the
    /// host is then missing from, or `down` in, `rctl fleet status`).
    pub report_error: Option<String>,
    /// The last etcd revision seen.
    pub revision: i64,
    /// Applies that failed.
    pub failures: u64,
    /// Times the watch was (re)established.
    pub sessions: u64,
    /// What happened at start.
    pub started: String,
}
