//! One apply of both planes, as `rctl apply` does it: the agent prepares
//! (decodes, builds the engine, links limiter state; nothing changes),
//! the XDP generation switches (its own commit point), the agent commits
//! (one pointer swap). A failure before the agent's commit aborts the
//! prepare: both planes keep the generation they run.
//!
//! Test-only fault steps (`RCTL_FAULT`), besides the XDP apply's own:
//! `agent-fetched` (the artifact is checked and written as pending),
//! `agent-prepared` (the agent prepared, nothing switched),
//! `agent-committed` (both planes switched, `last-good` not yet renamed).

use super::local::Record;
use super::Ctx;
use crate::error::{ErrorKind, FleetError};
use crate::etcd::now_unix;
use rctl_loader::host::{self as xdp, fault};

fn blocking_failed(e: tokio::task::JoinError) -> FleetError {
    FleetError::new(ErrorKind::Io, format!("a blocking task failed: {e}"))
}

/// Applies `bytes` (checked) as generation `generation` to both planes.
pub(crate) async fn apply(
    ctx: &std::sync::Arc<Ctx>,
    generation: i64,
    sha: &str,
    bytes: Vec<u8>,
) -> Result<(), FleetError> {
    let rec = Record {
        generation,
        sha256: sha.to_string(),
        applied_unix: now_unix(),
    };
    {
        let (c, rec, bytes) = (std::sync::Arc::clone(ctx), rec.clone(), bytes.clone());
        tokio::task::spawn_blocking(move || c.local.write_pending(&rec, &bytes))
            .await
            .map_err(blocking_failed)??;
    }
    fault("agent-fetched");
    let control = &ctx.control;
    let conn = control.connection();
    let prepared = control
        .prepare_artifact(conn, bytes.clone(), ctx.config.site.clone())
        .await
        .map_err(|e| {
            ctx.local.drop_pending();
            FleetError::new(ErrorKind::Invalid, format!("the agent: {e}"))
        })?;
    fault("agent-prepared");
    if let Some(x) = ctx.config.xdp.clone() {
        let site = ctx.config.site.clone();
        let b = bytes.clone();
        let applied = tokio::task::spawn_blocking(move || {
            xdp::apply(
                &b,
                &x.object,
                &x.iface,
                x.mode,
                x.clock,
                site.as_deref(),
                &x.paths,
            )
            .map_err(|e| format!("the packet plane on {}: {e}", x.iface))
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        if let Err(e) = applied {
            let _ = control.abort(&prepared.id);
            ctx.local.drop_pending();
            return Err(FleetError::new(
                ErrorKind::Invalid,
                format!("{e} (both planes keep their generation)"),
            ));
        }
    }
    if let Err(e) = control.commit(&prepared.id, None) {
        let _ = control.abort(&prepared.id);
        return Err(FleetError::new(
            ErrorKind::Invalid,
            format!(
                "the agent did not commit ({e}){}",
                if ctx.config.xdp.is_some() {
                    "; the packet plane runs the new generation: the next try applies both"
                } else {
                    ""
                }
            ),
        ));
    }
    fault("agent-committed");
    let c = std::sync::Arc::clone(ctx);
    tokio::task::spawn_blocking(move || c.local.promote())
        .await
        .map_err(blocking_failed)?
}

/// Records generation `generation` for the artifact that already runs
/// (a rollback to it, or a restart that found it on disk).
pub(crate) async fn record(ctx: &std::sync::Arc<Ctx>, generation: i64, sha: &str) {
    let c = std::sync::Arc::clone(ctx);
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
