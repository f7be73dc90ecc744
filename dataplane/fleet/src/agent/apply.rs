//! One apply of both planes: the two phases of `rctl apply`
//! ([`rctl_agent::apply`]: the agent prepares, the XDP generation
//! switches, the agent commits; its module docs give the rules for a
//! failure at each step), in process, with the agent's records on local
//! disk around them ([`super::local`]):
//!
//! - the artifact is written as `pending` first;
//! - when nothing switched (the prepare, the packet plane or, without a
//!   packet plane, the commit failed), `pending` is dropped: both planes
//!   keep their generation, and so does the disk;
//! - when the packet plane switched but the agent did not commit,
//!   `pending` stays: it is what the packet plane runs, so a restart
//!   promotes it and the agent starts with it; without a restart, the
//!   next try applies both planes;
//! - when both switched, `pending` becomes `last-good`; if steps after
//!   the packet plane's switch failed (its artifact not installed, say),
//!   the apply is applied but [`Outcome::Incomplete`]: the host reports
//!   itself failed, saying what did not happen, and the next try
//!   finishes it.
//!
//! Test-only fault steps (`RCTL_FAULT`), besides the XDP apply's own:
//! `agent-fetched` (the artifact is checked and written as pending),
//! `agent-prepared` (the agent prepared, nothing switched),
//! `agent-committed` (both planes switched, `last-good` not yet renamed).

use super::local::{Local, Record};
use super::{Ctx, XdpConfig};
use crate::error::{ErrorKind, FleetError};
use crate::etcd::now_unix;
use rctl_agent::apply::{Apply, ApplyError, HttpPlane, PacketPlane, Session, Switched};
use rctl_agent::control::{Committed, ControlError, Prepared};
use rctl_loader::host::{self as xdp, fault};
use std::sync::Arc;

/// What an apply that happened left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Both planes run the new generation, every step done.
    Applied,
    /// Both planes run it, but steps after the packet plane's switch
    /// failed: what did not happen.
    Incomplete(String),
}

fn blocking_failed(e: tokio::task::JoinError) -> FleetError {
    FleetError::new(ErrorKind::Io, format!("a blocking task failed: {e}"))
}

/// Applies `bytes` (checked) as generation `generation` to both planes.
pub(crate) async fn apply(
    ctx: &Arc<Ctx>,
    generation: i64,
    sha: &str,
    bytes: Vec<u8>,
) -> Result<Outcome, FleetError> {
    let rec = Record {
        generation,
        sha256: sha.to_string(),
        applied_unix: now_unix(),
    };
    let c = Arc::clone(ctx);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        // One number names a generation on every plane that can carry it:
        // the agent's is the fleet's.
        let session = Session::new(Arc::clone(&c.control), runtime);
        let agent = Agent(match u64::try_from(generation) {
            Ok(n) if n > 0 => session.numbered(n),
            _ => session,
        });
        let packet = c.config.xdp.as_ref().map(Xdp);
        both(
            &c.local,
            &rec,
            &bytes,
            c.config.site.as_deref(),
            agent,
            packet,
        )
    })
    .await
    .map_err(blocking_failed)?
}

/// The agent in process, with the fault step after its prepare.
struct Agent(Session);

impl HttpPlane for Agent {
    fn prepare(&mut self, artifact: &[u8], site: Option<&str>) -> Result<Prepared, ControlError> {
        let p = self.0.prepare(artifact, site)?;
        fault("agent-prepared");
        Ok(p)
    }

    fn commit(&mut self, id: &str) -> Result<Committed, ControlError> {
        self.0.commit(id)
    }

    fn abort(&mut self, id: &str) -> Result<(), ControlError> {
        self.0.abort(id)
    }
}

/// The packet plane of the agent's interface.
struct Xdp<'a>(&'a XdpConfig);

impl PacketPlane for Xdp<'_> {
    type Report = ();
    type Error = String;

    fn switch(&mut self, artifact: &[u8], site: Option<&str>) -> Result<Switched<()>, String> {
        let x = self.0;
        xdp::apply(
            artifact, &x.object, &x.iface, x.mode, x.clock, site, &x.paths,
        )
        .map(|a| Switched {
            report: (),
            incomplete: a.incomplete,
        })
        .map_err(|e| format!("the packet plane on {}: {e}", x.iface))
    }
}

/// The apply's steps and the records around them (on a blocking
/// thread). `packet`'s errors say which plane they are about.
fn both<H: HttpPlane, P: PacketPlane<Error = String>>(
    local: &Local,
    rec: &Record,
    bytes: &[u8],
    site: Option<&str>,
    agent: H,
    packet: Option<P>,
) -> Result<Outcome, FleetError> {
    local.write_pending(rec, bytes)?;
    fault("agent-fetched");
    match Apply::new(bytes, site, Some(agent), packet).run() {
        Ok(a) => {
            fault("agent-committed");
            local.promote()?;
            Ok(match a.incomplete() {
                [] => Outcome::Applied,
                steps => Outcome::Incomplete(format!(
                    "both planes run it, but steps after the packet plane's switch failed: {}; \
                     the next try finishes them",
                    steps.join("; ")
                )),
            })
        }
        Err(e) => {
            if !e.switched() {
                local.drop_pending();
            }
            Err(FleetError::new(ErrorKind::Invalid, failure(&e)))
        }
    }
}

/// What a failed apply leaves, for the host's report.
fn failure<R>(e: &ApplyError<String, R>) -> String {
    match e {
        ApplyError::NoPlane => "nothing to apply it to".into(),
        ApplyError::Prepare(e) => format!("the agent: {e}"),
        // Not asked for here: the fleet applies, and the agent's status
        // and metrics say what is stale.
        e @ ApplyError::StaleProxy { .. } => e.to_string(),
        ApplyError::Packet { error, agent } => {
            match agent.as_ref().and_then(|k| k.abort_failed.as_ref()) {
                None => format!("{error} (both planes keep their generation)"),
                Some(a) => format!(
                    "{error} (both planes keep their generation; the agent's prepare could not be \
                 aborted ({a}), and was dropped with its connection)"
                ),
            }
        }
        ApplyError::Commit {
            error,
            switched: Some(_),
            ..
        } => format!(
            "the agent did not commit ({error}); the packet plane runs the new generation: the \
             next try applies both"
        ),
        ApplyError::Commit {
            error,
            switched: None,
            ..
        } => format!("the agent did not commit ({error})"),
    }
}

/// Records generation `generation` for the artifact that already runs
/// (a rollback to it, or a restart that found it on disk).
pub(crate) async fn record(ctx: &Arc<Ctx>, generation: i64, sha: &str) {
    let c = Arc::clone(ctx);
    let sha = sha.to_string();
    let _ = tokio::task::spawn_blocking(move || {
        let (old, bytes) = c.local.read("last-good")?;
        (old.sha256 == sha).then_some(())?;
        let rec = Record {
            generation,
            sha256: sha,
            applied_unix: old.applied_unix,
        };
        c.local.record(&rec, &bytes).ok()
    })
    .await;
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
