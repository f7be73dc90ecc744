//! What the fleet agent (`rctl agent`) adds to the agent's status: where
//! it follows etcd, what it runs against what it is told to run, and the
//! shared limits. Plain data: the fleet crate fills it, `rctl status`
//! reads it; on the wire it is the status's `fleet` object.

use serde::{Deserialize, Serialize};

/// The fleet agent's part of [`super::AgentStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetStatus {
    /// This host's name in reports.
    pub host: String,
    /// Its site.
    pub site: Option<String>,
    /// etcd, as the agent sees it.
    pub etcd: EtcdStatus,
    /// The fleet generation it runs (0: from local disk or bootstrap).
    pub generation: i64,
    /// When it applied it (unix seconds).
    pub applied_unix: u64,
    /// `ok`, `applying`, `failed` or `waiting`.
    pub state: String,
    /// Why the target does not run, if it does not.
    pub last_error: Option<String>,
    /// The target's generation, as last seen (0: none).
    pub target_generation: i64,
    /// The target's artifact, as last seen.
    pub target_sha256: Option<String>,
    /// Applies that failed.
    pub failures: u64,
    /// What happened at start.
    pub started: String,
    /// The interface of its packet plane, if it has one.
    pub iface: Option<String>,
    /// The shared limits, if it counts them in Redis.
    pub shared: Option<SharedStatus>,
}

/// etcd, as the fleet agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdStatus {
    /// Its endpoints.
    pub endpoints: Vec<String>,
    /// The key prefix.
    pub prefix: String,
    /// Whether the watch is established.
    pub connected: bool,
    /// Why it is not, if it is not.
    pub error: Option<String>,
    /// Why the host's report could not be written, if it could not.
    pub report_error: Option<String>,
    /// The last revision seen.
    pub revision: i64,
}

/// The shared limits' sync with Redis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedStatus {
    /// The Redis URL, its password left out.
    pub redis: String,
    /// The site whose limits it shares (`all`: every host's).
    pub site: String,
    /// Whether the last sync worked.
    pub online: bool,
    /// Hosts of the site that Redis counts as live.
    pub hosts: u32,
    /// Milliseconds between syncs.
    pub sync_ms: u64,
    /// Syncs that worked.
    pub syncs_ok: u64,
    /// Syncs that failed.
    pub syncs_failed: u64,
    /// Keys synced, in total.
    pub keys_synced: u64,
    /// Bans published to the other hosts.
    pub bans_published: u64,
    /// How long the last sync took, in microseconds.
    pub last_sync_us: u64,
    /// Why the last sync failed, if it did.
    pub last_error: Option<String>,
    /// Something the operator should know (Redis let the agent in without
    /// a password).
    pub warning: Option<String>,
    /// Each shared limiter.
    pub limiters: Vec<SharedLimiter>,
}

/// One shared limiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedLimiter {
    /// Its rule.
    pub rule: String,
    /// Whether it counts site-wide now (else per host).
    pub online: bool,
    /// Requests it decided per host while Redis was away.
    pub offline_hits: u64,
    /// Bans it took from other hosts.
    pub remote_bans: u64,
}
