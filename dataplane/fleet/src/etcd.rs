//! Talking to etcd: connection options (TLS, client certificates), the
//! key layout under the prefix, and the records stored there.
//!
//! # Layout (prefix `P`, `/rctl` by default)
//!
//! | key | value |
//! |---|---|
//! | `P/artifacts/SHA/meta` | [`ArtifactMeta`]: format version, sizes, the SHA-256 of every chunk and of the whole file |
//! | `P/artifacts/SHA/chunk/NNNNNN` | the artifact's bytes, in chunks under etcd's request limit |
//! | `P/current` | [`Pointer`] for every site: the artifact hosts run |
//! | `P/sites/S/current` | [`Pointer`] for site `S` |
//! | `P/history/all`, `P/history/sites/S` | [`History`]: what was pushed to that target, latest last |
//! | `P/hosts/H` | [`HostReport`] of host `H`, under its lease: gone when the host is |
//! | `P/seen/H` | the same report without a lease: the last one, for hosts that are gone |
//!
//! `SHA` is the artifact's content hash in hex, as `rctl compile` prints
//! it. A host follows whichever of `P/current` and its site's pointer was
//! written last; the **generation** it runs is that pointer's etcd
//! `mod_revision`, so every push and rollback makes a new, larger one.

use crate::error::{ErrorKind, FleetError};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How long [`EtcdConfig::connect`] waits for each endpoint's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How to reach etcd.
#[derive(Debug, Clone, Default)]
pub struct EtcdConfig {
    /// Endpoints, `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    /// The key prefix everything lives under (`/rctl`).
    pub prefix: String,
    /// A CA bundle (PEM) to verify etcd's certificate with (https).
    pub ca: Option<PathBuf>,
    /// A client certificate (PEM) for etcd's `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// The name etcd's certificate is checked against (default: the
    /// endpoint's host).
    pub server_name: Option<String>,
    /// Bound on each request.
    pub timeout: Duration,
}

impl EtcdConfig {
    /// `endpoints` (comma-separated lists are split) under `prefix`.
    pub fn new(endpoints: &[String], prefix: &str) -> EtcdConfig {
        EtcdConfig {
            endpoints: endpoints
                .iter()
                .flat_map(|e| e.split(','))
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(|e| {
                    if e.contains("://") {
                        e.to_string()
                    } else {
                        format!("http://{e}")
                    }
                })
                .collect(),
            prefix: prefix.trim_end_matches('/').to_string(),
            timeout: Duration::from_secs(5),
            ..EtcdConfig::default()
        }
    }

    /// The key layout.
    pub fn layout(&self) -> Layout {
        Layout {
            prefix: self.prefix.clone(),
        }
    }

    /// Connects: with one endpoint lazily (a first request to an etcd
    /// that is down fails, the connection does not); with several, to the
    /// first that answers a read, tried from a random one.
    pub async fn connect(&self) -> Result<Client, FleetError> {
        if self.endpoints.is_empty() {
            return Err(FleetError::new(
                ErrorKind::Invalid,
                "no etcd endpoint: give --etcd http://HOST:2379[,…]",
            ));
        }
        let read = |p: &PathBuf, what: &str| {
            std::fs::read(p).map_err(|e| {
                FleetError::new(
                    ErrorKind::Io,
                    format!("reading the etcd {what} {}: {e}", p.display()),
                )
            })
        };
        let mut opts = ConnectOptions::new()
            .with_timeout(self.timeout)
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let tls = self.ca.is_some() || self.cert.is_some() || self.key.is_some();
        if tls {
            let mut t = TlsOptions::new();
            if let Some(ca) = &self.ca {
                t = t.ca_certificate(Certificate::from_pem(read(ca, "CA")?));
            }
            match (&self.cert, &self.key) {
                (Some(c), Some(k)) => {
                    t = t.identity(Identity::from_pem(
                        read(c, "client certificate")?,
                        read(k, "client key")?,
                    ));
                }
                (None, None) => {}
                _ => {
                    return Err(FleetError::new(
                        ErrorKind::Invalid,
                        "a client certificate needs both --etcd-cert and --etcd-key",
                    ))
                }
            }
            if let Some(n) = &self.server_name {
                t = t.domain_name(n.clone());
            }
            opts = opts.with_tls(t);
            if let Some(e) = self.endpoints.iter().find(|e| e.starts_with("http://")) {
                return Err(FleetError::new(
                    ErrorKind::Invalid,
                    format!("{e}: TLS options are given, so use https:// endpoints"),
                ));
            }
        }
        if self.endpoints.len() == 1 {
            let c = Client::connect(&self.endpoints, Some(opts))
                .await
                .map_err(|e| FleetError::from(e).context("connecting to etcd"))?;
            if tls {
                // One serializable read checks the handshake now, so that a
                // certificate etcd refuses is said as such and not retried
                // as an outage; an etcd that is down or has no leader is
                // left to the requests' own retries, as without TLS.
                let mut probing = c.clone();
                let probe = probing.get(
                    self.prefix.as_bytes(),
                    Some(
                        etcd_client::GetOptions::new()
                            .with_count_only()
                            .with_serializable(),
                    ),
                );
                if let Ok(Err(e)) = tokio::time::timeout(PROBE_TIMEOUT, probe).await {
                    let e = self.refused(FleetError::from(e));
                    if e.kind == ErrorKind::Refused {
                        return Err(
                            e.context(format!("connecting to etcd at {}", self.endpoints[0]))
                        );
                    }
                }
            }
            return Ok(c);
        }
        // etcd-client's balanced channel fails a request when the endpoint
        // it picks is down (etcdv3/etcd-client#39): with one member of
        // three killed, push, status and the agents failed. Each endpoint
        // is tried on its own instead, from a random one (so hosts spread
        // over the members), and the first that answers a linearizable
        // read (it is in a majority with a leader) is used; a client that
        // loses it later connects again through here.
        let n = self.endpoints.len();
        let start = {
            use std::hash::{BuildHasher as _, Hasher as _};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish() as usize
        };
        let mut last = None;
        for k in 0..n {
            let e = &self.endpoints[(start + k) % n];
            let tried = async {
                let mut c = Client::connect([e], Some(opts.clone())).await?;
                c.get(
                    self.prefix.as_bytes(),
                    Some(etcd_client::GetOptions::new().with_count_only()),
                )
                .await?;
                Ok::<_, etcd_client::Error>(c)
            };
            match tokio::time::timeout(PROBE_TIMEOUT, tried).await {
                Ok(Ok(c)) => return Ok(c),
                Ok(Err(err)) => last = Some(self.refused(FleetError::from(err)).context(e)),
                Err(_) => {
                    last = Some(FleetError::new(
                        ErrorKind::Unavailable,
                        format!("{e}: no answer within {PROBE_TIMEOUT:?}"),
                    ))
                }
            }
        }
        Err(last
            .unwrap_or_else(|| FleetError::new(ErrorKind::Unavailable, "no endpoint"))
            .context(format!(
                "connecting to etcd (none of {n} endpoints answered)"
            )))
    }
}

impl EtcdConfig {
    /// A first request over TLS whose connection etcd closed: with TLS 1.3
    /// the client's certificate is checked after the client thinks the
    /// handshake is done, so a refused one shows as a connection closed
    /// (its alert is lost) rather than as an alert.
    fn refused(&self, e: FleetError) -> FleetError {
        let tls = self.ca.is_some() || self.cert.is_some();
        let closed = ["connection closed", "broken pipe", "connection reset"]
            .iter()
            .any(|m| e.message.contains(m));
        if tls && closed && e.kind != ErrorKind::Refused {
            FleetError::new(
                ErrorKind::Refused,
                format!(
                    "{}: etcd closed the connection right after the TLS handshake ({})",
                    crate::error::CLIENT_CERT_REFUSED,
                    e.message
                ),
            )
        } else {
            e
        }
    }
}

/// Key names under the prefix.
#[derive(Debug, Clone)]
pub struct Layout {
    prefix: String,
}

/// Which hosts a push is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every host.
    All,
    /// The hosts of one site.
    Site(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::All => f.write_str("all sites"),
            Target::Site(s) => write!(f, "site {s}"),
        }
    }
}

impl Layout {
    /// The layout under `prefix`.
    pub fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// `P/artifacts/SHA/`.
    pub fn artifact(&self, sha: &str) -> String {
        format!("{}/artifacts/{sha}/", self.prefix)
    }

    /// `P/artifacts/`.
    pub fn artifacts(&self) -> String {
        format!("{}/artifacts/", self.prefix)
    }

    /// `P/artifacts/SHA/meta`.
    pub fn meta(&self, sha: &str) -> String {
        format!("{}meta", self.artifact(sha))
    }

    /// `P/artifacts/SHA/chunk/NNNNNN`.
    pub fn chunk(&self, sha: &str, i: usize) -> String {
        format!("{}chunk/{i:06}", self.artifact(sha))
    }

    /// The pointer of `target`.
    pub fn pointer(&self, target: &Target) -> String {
        match target {
            Target::All => format!("{}/current", self.prefix),
            Target::Site(s) => format!("{}/sites/{s}/current", self.prefix),
        }
    }

    /// `P/sites/`: every site's pointer is below it.
    pub fn sites(&self) -> String {
        format!("{}/sites/", self.prefix)
    }

    /// The site of a key below [`Layout::sites`], if it is a pointer.
    pub fn site_of_pointer<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(&self.sites())?.strip_suffix("/current")
    }

    /// The history of `target`.
    pub fn history(&self, target: &Target) -> String {
        match target {
            Target::All => format!("{}/history/all", self.prefix),
            Target::Site(s) => format!("{}/history/sites/{s}", self.prefix),
        }
    }

    /// `P/history/`: every history is below it.
    pub fn histories(&self) -> String {
        format!("{}/history/", self.prefix)
    }

    /// `P/hosts/H` (leased) or, with `seen`, `P/seen/H`.
    pub fn host(&self, host: &str, seen: bool) -> String {
        format!("{}{host}", self.hosts(seen))
    }

    /// `P/hosts/` or `P/seen/`.
    pub fn hosts(&self, seen: bool) -> String {
        format!("{}/{}/", self.prefix, if seen { "seen" } else { "hosts" })
    }
}

/// What a pointer says: run this artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pointer {
    /// The artifact's content SHA-256 (hex).
    pub sha256: String,
    /// When it was pushed (unix seconds).
    pub pushed_unix: u64,
    /// Who pushed it (`user@host`).
    pub pushed_by: String,
    /// For a rollback: how many pushes back it went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<usize>,
}

/// A pointer as read: what it says and its generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// The target it is for.
    pub target: Target,
    /// What it says.
    pub pointer: Pointer,
    /// Its etcd mod_revision: the generation hosts report.
    pub generation: i64,
}

impl Current {
    /// Parses a pointer's value.
    pub fn parse(target: Target, value: &[u8], mod_revision: i64) -> Result<Current, FleetError> {
        let pointer: Pointer = serde_json::from_slice(value).map_err(|e| {
            FleetError::new(
                ErrorKind::Corrupt,
                format!("the pointer for {target} is not rctl's: {e}"),
            )
        })?;
        if !is_sha(&pointer.sha256) {
            return Err(FleetError::new(
                ErrorKind::Corrupt,
                format!(
                    "the pointer for {target} names {:?}, which is not a SHA-256",
                    pointer.sha256
                ),
            ));
        }
        Ok(Current {
            target,
            pointer,
            generation: mod_revision,
        })
    }
}

/// The newer of two pointers: what a host of that site follows.
pub fn newer<'a>(a: Option<&'a Current>, b: Option<&'a Current>) -> Option<&'a Current> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.generation > a.generation { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An artifact's metadata, written after its chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactMeta {
    /// The artifact format version (its header's).
    pub format_version: u16,
    /// The content SHA-256 (hex), as `rctl compile` prints it.
    pub sha256: String,
    /// SHA-256 of the whole file (hex).
    pub file_sha256: String,
    /// The file's size in bytes.
    pub size: u64,
    /// SHA-256 of each chunk (hex), in order.
    pub chunks: Vec<String>,
    /// Rules in the ruleset.
    pub rules: usize,
}

/// What was pushed to a target, latest last.
pub type History = Vec<HistoryEntry>;

/// One push (or rollback) in a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The artifact's content SHA-256.
    pub sha256: String,
    /// When.
    pub pushed_unix: u64,
    /// Who.
    pub pushed_by: String,
}

/// What a host reports (under its lease, and as its last report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostReport {
    /// The host's name.
    pub host: String,
    /// Its site, if it has one.
    pub site: Option<String>,
    /// The generation it runs (the pointer's revision it applied; 0: a
    /// generation from local disk or `--artifact`, before etcd answered).
    pub generation: i64,
    /// The artifact it runs (content SHA-256, hex).
    pub artifact_sha256: String,
    /// When it applied it (unix seconds; 0: not yet).
    pub applied_unix: u64,
    /// Why the generation it should run is not running, if it is not.
    pub last_error: Option<String>,
    /// The generation that error is about.
    #[serde(default)]
    pub error_generation: i64,
    /// `ok`, `applying`, `failed`, `waiting` (no artifact yet).
    pub state: String,
    /// The interface its packet plane runs on, if any.
    pub iface: Option<String>,
    /// When the agent started.
    pub started_unix: u64,
    /// When it wrote this.
    pub reported_unix: u64,
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `user@host` of this process, for the pointers it writes.
pub fn whoami() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "root".into());
    format!("{user}@{}", hostname())
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Checks a host or site name before it becomes part of a key: 1 to 253
/// characters of letters, digits, `.`, `-` and `_`.
pub fn check_name(what: &str, name: &str) -> Result<(), FleetError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(FleetError::new(
            ErrorKind::Invalid,
            format!("{what} {name:?}: use letters, digits, '.', '-' and '_' (at most 253)"),
        ))
    }
}
