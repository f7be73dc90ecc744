//! The control socket (`--control PATH`, default `/run/rctl/agent.sock`):
//! how `rctl apply` switches the agent's ruleset and `rctl status` reads
//! it. JSON lines: one request object per line, one answer per request.
//!
//! | request | answer |
//! |---|---|
//! | `{"op":"prepare","artifact_hex":"…"}` or `{"op":"prepare","path":"/x.rctlc"}`, optional `"site":"S"` | `{"ok":true,"id":"…","generation":N,"artifact_sha256":"…","rules":R,"carried":{…},"prepare_ms":T,"warnings":[…]}` |
//! | `{"op":"commit","id":"…"}` | `{"ok":true,"generation":N,"artifact_sha256":"…","replaced":N-1}` |
//! | `{"op":"abort","id":"…"}` | `{"ok":true}` |
//! | `{"op":"load",…}` (as prepare) | prepare then commit at once: the commit's answer with the prepare's `carried` |
//! | `{"op":"status"}` | [`AgentStatus`] |
//! | `{"op":"top","seconds":S,"n":N}` (both optional) | the last `S` seconds' heaviest `N` keys of each kind ([`rctl_top::Top`]); refused unless `rctl serve --top` |
//! | `{"op":"tap","seconds":N}` (1 to 3600) | a stream, then the connection closes: `{"ok":true,"tap":{"seconds":N,"headers":[…]}}`, one webrequest JSON line per request decided in the next `N` s (starting `{"dt":`), and `{"ok":true,"summary":{"requests":R,"lost":L,"cut":C,"headers":[…],"why":…}}` ([`TapSummary`]) |
//!
//! A refusal is `{"ok":false,"error":"…"}` and changes nothing.
//!
//! **Tap.** Every request decided while the tap is open is a line, in
//! the schema `rctl --log-format webrequest` reads ([`crate::tap`]), with
//! or without `--top`; `headers` names the webrequest headers the agent
//! receives from the proxies in front (the others are unknown, not
//! absent). Requests the reader was too slow for are counted in `lost`,
//! never waited for; at most [`crate::tap::MAX_TAPS`] taps are open at
//! once.
//!
//! **Two phases.** `prepare` decodes the artifact, builds the engine and
//! links limiter state ([`rctl_dataplane::carry`]): nothing changes for
//! requests yet. `commit` installs it with one atomic swap
//! ([`crate::judge::Judge::install`]). Only one prepare is pending at a
//! time; it is dropped by `abort`, when the connection that made it
//! closes, or when it is older than the prepare TTL (60 s by default). A
//! failed prepare leaves the generation in force serving and says why.
//! Without `site`, the agent's own `--site` applies.

mod fleet;
mod server;
mod tap;

pub use fleet::{EtcdStatus, FleetStatus, SharedLimiter, SharedStatus};
pub use server::{serve, Control, ControlConfig, StatusExtra};
pub use tap::{tap, TapEvent};

use crate::judge::Generation;
use crate::metrics::Counts;
use rctl_dataplane::carry::Carry;
use rctl_dataplane::{Engine, EngineConfig};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default control socket.
pub const DEFAULT_SOCKET: &str = "/run/rctl/agent.sock";

/// The longest request line the agent reads (an artifact in hex).
pub const MAX_LINE: usize = 1 << 30;

/// A request on the control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ControlRequest {
    /// Build a generation; change nothing yet.
    Prepare(Load),
    /// Install the prepared generation.
    Commit {
        /// The prepare's id.
        id: String,
    },
    /// Drop the prepared generation.
    Abort {
        /// The prepare's id.
        id: String,
    },
    /// Prepare and commit at once.
    Load(Load),
    /// What the agent runs and counts.
    Status,
    /// Every request decided in the next `seconds`, streamed as
    /// webrequest lines, then a summary (`rctl tap`; see [`crate::tap`]).
    Tap {
        /// For this many seconds (1 to 3600).
        seconds: u64,
    },
    /// The recent traffic by key, with each key's verdicts (`rctl top`).
    Top {
        /// Over the last this many seconds (at most the agent's window,
        /// 60; default all of it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seconds: Option<u64>,
        /// The heaviest this many keys of each kind (default 20).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n: Option<usize>,
    },
}

/// The last line of a tap: what was sent, what was lost and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapSummary {
    /// Request lines sent.
    pub requests: u64,
    /// Requests decided while the tap was open and not sent (its buffer
    /// was full: the reader was too slow).
    pub lost: u64,
    /// Requests sent with a field cut at [`crate::tap::FIELD_MAX`] bytes.
    pub cut: u64,
    /// Seconds the tap was open.
    pub seconds: f64,
    /// The webrequest headers (lower case) the agent receives from the
    /// proxies in front: the lines' other headers are unknown.
    pub headers: Vec<String>,
    /// Why requests were lost or the tap ended early, if they were or it
    /// did.
    pub why: Option<String>,
}

/// Which artifact to load, and for which site.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// The artifact's bytes, in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_hex: Option<String>,
    /// Or a path the agent reads it from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The site whose rules apply (default: the agent's `--site`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
}

/// The answer to a prepare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepared {
    /// Names the prepare in commit and abort.
    pub id: String,
    /// The generation number it will have.
    pub generation: u64,
    /// The artifact's content SHA-256 (hex), as `rctl compile` prints it.
    pub artifact_sha256: String,
    /// Rules in the ruleset.
    pub rules: usize,
    /// What limiter state carried from the generation in force.
    pub carried: Carry,
    /// Time to build it, in ms.
    pub prepare_ms: u64,
    /// Things the operator should know (a site no rule names).
    pub warnings: Vec<String>,
    /// What the proxies' configurations lack for this ruleset (a header
    /// they do not send, a status they have no line for): emit them
    /// again. `rctl apply` stops here unless told to go on.
    #[serde(default)]
    pub stale_proxies: Vec<String>,
}

/// The answer to a commit (or a load).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The generation now in force.
    pub generation: u64,
    /// Its artifact's content SHA-256 (hex).
    pub artifact_sha256: String,
    /// The generation it replaced.
    pub replaced: u64,
    /// For a load: what carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carry>,
}

/// A pending prepare, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingInfo {
    /// Its id.
    pub id: String,
    /// Its age, in seconds.
    pub age_s: u64,
}

/// The matched-request log's totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogTotals {
    /// Lines written.
    pub written: u64,
    /// Lines the per-rule allowance suppressed.
    pub suppressed: u64,
    /// Lines dropped because the writer was behind.
    pub dropped: u64,
    /// Lines a failed write lost (a full disk).
    #[serde(default)]
    pub failed: u64,
    /// Lines left out because the file reached its size bound.
    #[serde(default)]
    pub over_size: u64,
}

/// What the agent runs and counts (`rctl status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStatus {
    /// The generation in force.
    pub generation: u64,
    /// Its artifact's content SHA-256 (hex).
    pub artifact_sha256: String,
    /// When it was installed (unix seconds).
    pub installed_unix: u64,
    /// When the agent started (unix seconds).
    pub started_unix: u64,
    /// Seconds since the agent started.
    pub uptime_s: u64,
    /// The agent's `--site`.
    pub site: Option<String>,
    /// Whole-ruleset shadow mode.
    pub shadow: bool,
    /// Rules in the generation in force.
    pub rules: usize,
    /// What the agent listens on (`http tcp:…`, `spoe unix:…`, …).
    pub listeners: Vec<String>,
    /// Requests, rules, limiters, errors and reloads.
    pub counts: Counts,
    /// The matched-request log, if one is written.
    pub log: Option<LogTotals>,
    /// A prepare waiting for its commit.
    pub pending: Option<PendingInfo>,
    /// The proxies heard from, against the ruleset in force.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxies: Vec<crate::proxies::ProxyStatus>,
    /// The saved bans and buckets (`--state-dir`), if they are saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_state: Option<crate::persist::PersistStatus>,
    /// What the fleet agent adds (`rctl agent`: etcd, shared limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetStatus>,
}

/// Why a generation could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// What a load builds: the generation, what carried, warnings.
pub type Built = (Generation, Carry, Vec<String>);

/// Builds generation `number` from an artifact's bytes for `site`, each
/// limiter tracking at most `max_keys`, linking limiter state from `old`.
pub fn build(
    bytes: &[u8],
    site: Option<&str>,
    max_keys: usize,
    number: u64,
    old: Option<&Generation>,
) -> Result<Built, LoadError> {
    use rctl_compiler::artifact;
    let rs = artifact::decode(bytes).map_err(|e| LoadError(e.to_string()))?;
    let warnings = rs.site_warning(site).into_iter().collect();
    let config = EngineConfig {
        site: site.map(str::to_string),
        max_keys_per_limiter: max_keys,
    };
    let mut engine = Engine::new(rs, &config).map_err(|e| LoadError(e.to_string()))?;
    let mut carry = old
        .map(|o| engine.carry_limiters(&o.engine))
        .unwrap_or_default();
    // Packet and connection limits are the XDP program's: the agent's
    // report leaves them out.
    let packet: std::collections::HashSet<&str> = engine
        .ruleset()
        .rules
        .iter()
        .filter(|r| r.is_packet_limit())
        .map(|r| r.name.as_str())
        .collect();
    carry.carried.retain(|c| !packet.contains(c.rule.as_str()));
    carry.fresh.retain(|f| !packet.contains(f.rule.as_str()));
    let sha = artifact::content_hash(bytes).unwrap_or_else(|| artifact::sha256(bytes));
    let generation = Generation {
        engine,
        sha256: artifact::hex(&sha),
        number,
        installed_unix: crate::now_unix(),
    };
    Ok((generation, carry, warnings))
}

/// Bytes as lowercase hex.
pub fn to_hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = Vec::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[usize::from(x >> 4)]);
        s.push(DIGITS[usize::from(x & 15)]);
    }
    String::from_utf8(s).unwrap_or_default()
}

/// Hex (either case) as bytes.
pub fn from_hex(s: &str) -> Result<Vec<u8>, LoadError> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let b = s.as_bytes();
    if b.len() & 1 == 1 {
        return Err(LoadError("artifact_hex: an odd number of digits".into()));
    }
    b.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| LoadError("artifact_hex: not hex".into()))
}

/// What went wrong talking to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlErrorKind {
    /// Nobody listens on the socket (no agent, or a stale socket file).
    NotRunning,
    /// The connection failed or timed out.
    Io,
    /// The agent answered something that is not the protocol.
    Protocol,
    /// The agent refused the request (its reason is the message).
    Refused,
}

/// An error talking to the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    /// What kind.
    pub kind: ControlErrorKind,
    /// What happened.
    pub message: String,
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ControlError {}

/// A blocking client of the control socket (for the CLI and tests).
pub struct Client {
    reader: BufReader<UnixStream>,
    path: PathBuf,
}

impl Client {
    /// Connects to the agent at `path`, checking first that only the user
    /// running this may change the socket's directory (as `rctl apply`
    /// checks its state directories): an impostor's socket there could
    /// otherwise answer for the agent. `timeout` bounds each answer.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Client, ControlError> {
        let fail = |kind, message: String| ControlError { kind, message };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            rctl_os::fs::check_private_dir(dir).map_err(|e| {
                // No directory: no agent made its socket there.
                let kind = if dir.exists() {
                    ControlErrorKind::Io
                } else {
                    ControlErrorKind::NotRunning
                };
                fail(kind, e.to_string())
            })?;
        }
        let stream = UnixStream::connect(path).map_err(|e| {
            let kind = match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    ControlErrorKind::NotRunning
                }
                _ => ControlErrorKind::Io,
            };
            fail(
                kind,
                format!(
                    "no agent answers at {}: {e} (is `rctl serve` running, with --control {}?)",
                    path.display(),
                    path.display()
                ),
            )
        })?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| fail(ControlErrorKind::Io, e.to_string()))?;
        Ok(Client {
            reader: BufReader::new(stream),
            path: path.to_path_buf(),
        })
    }

    /// Sends one request; the answer's JSON when it is `ok`.
    pub fn call(&mut self, req: &ControlRequest) -> Result<serde_json::Value, ControlError> {
        let at = self.path.display().to_string();
        let io = |e: std::io::Error| ControlError {
            kind: ControlErrorKind::Io,
            message: format!("the agent at {at}: {e}"),
        };
        let mut line = serde_json::to_vec(req).map_err(|e| ControlError {
            kind: ControlErrorKind::Protocol,
            message: e.to_string(),
        })?;
        line.push(b'\n');
        self.reader.get_mut().write_all(&line).map_err(io)?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer).map_err(io)? == 0 {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed the connection without an answer",
            )));
        }
        let v: serde_json::Value = serde_json::from_str(&answer).map_err(|e| ControlError {
            kind: ControlErrorKind::Protocol,
            message: format!("the agent at {at} answered something that is not JSON: {e}"),
        })?;
        if v["ok"] == true {
            return Ok(v);
        }
        Err(ControlError {
            kind: ControlErrorKind::Refused,
            message: v["error"].as_str().unwrap_or("refused").to_string(),
        })
    }

    fn typed<T: serde::de::DeserializeOwned>(
        &mut self,
        req: &ControlRequest,
    ) -> Result<T, ControlError> {
        let v = self.call(req)?;
        serde_json::from_value(v).map_err(|e| ControlError {
            kind: ControlErrorKind::Protocol,
            message: format!("an answer rctl does not understand: {e}"),
        })
    }

    /// Prepares `artifact` (its bytes) for `site` (default: the agent's).
    pub fn prepare(
        &mut self,
        artifact: &[u8],
        site: Option<&str>,
    ) -> Result<Prepared, ControlError> {
        self.typed(&ControlRequest::Prepare(Load {
            artifact_hex: Some(to_hex(artifact)),
            path: None,
            site: site.map(str::to_string),
        }))
    }

    /// Commits prepare `id`.
    pub fn commit(&mut self, id: &str) -> Result<Committed, ControlError> {
        self.typed(&ControlRequest::Commit { id: id.to_string() })
    }

    /// Aborts prepare `id`.
    pub fn abort(&mut self, id: &str) -> Result<(), ControlError> {
        self.call(&ControlRequest::Abort { id: id.to_string() })
            .map(|_| ())
    }

    /// The agent's status.
    pub fn status(&mut self) -> Result<AgentStatus, ControlError> {
        self.typed(&ControlRequest::Status)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
