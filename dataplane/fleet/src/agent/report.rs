//! The host's report: `P/hosts/H` under a lease (kept alive every third
//! of its TTL; gone when the host is), and `P/seen/H`, the same without a
//! lease, so that `rctl fleet status` can say what a host that is gone ran
//! last. Written at every change, and again after a reconnect (with a
//! new lease). On a clean stop the lease is revoked.

use super::Ctx;
use crate::backoff::{sleep_or_stop, Backoff};
use crate::error::FleetError;
use crate::etcd::{now_unix, HostReport};
use etcd_client::{Client, PutOptions};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch::Receiver;

/// The report as it stands.
fn report(ctx: &Ctx) -> HostReport {
    let p = ctx.progress();
    HostReport {
        host: ctx.config.host.clone(),
        site: ctx.config.site.clone(),
        generation: p.generation,
        artifact_sha256: ctx.judge.current().sha256.clone(),
        applied_unix: p.applied_unix,
        last_error: p.last_error,
        error_generation: p.error_generation,
        state: p.state,
        iface: ctx.config.xdp.as_ref().map(|x| x.iface.clone()),
        started_unix: ctx.started_unix,
        reported_unix: now_unix(),
    }
}

async fn put(client: &Client, ctx: &Ctx, lease: i64) -> Result<(), FleetError> {
    let layout = ctx.config.etcd.layout();
    let value = serde_json::to_vec(&report(ctx)).unwrap_or_default();
    let mut c = client.clone();
    c.put(
        layout.host(&ctx.config.host, false),
        value.clone(),
        Some(PutOptions::new().with_lease(lease)),
    )
    .await?;
    c.put(layout.host(&ctx.config.host, true), value, None)
        .await?;
    Ok(())
}

/// The reporter task: runs until `stop` fires.
pub(crate) async fn run(ctx: Arc<Ctx>, mut stop: Receiver<bool>) {
    let mut changed = ctx.changed.subscribe();
    let mut backoff = Backoff::new();
    let ttl = i64::try_from(ctx.config.report_ttl.as_secs().max(2)).unwrap_or(10);
    loop {
        let client = match ctx.config.etcd.connect().await {
            Ok(c) => c,
            Err(e) => {
                ctx.set_report_error(Some(e.message));
                if sleep_or_stop(backoff.next(), &mut stop).await {
                    return;
                }
                continue;
            }
        };
        match session(&ctx, &client, ttl, &mut changed, &mut stop).await {
            Ok(lease) => {
                // Stopping: the host leaves the live list at once.
                let mut c = client.clone();
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = put(&client, &ctx, lease).await;
                    c.lease_revoke(lease).await
                })
                .await;
                return;
            }
            Err(e) => {
                ctx.set_report_error(Some(e.message));
                if sleep_or_stop(backoff.next(), &mut stop).await {
                    return;
                }
            }
        }
    }
}

/// One lease: reports until an error, or `stop` (`Ok(lease)`).
async fn session(
    ctx: &Arc<Ctx>,
    client: &Client,
    ttl: i64,
    changed: &mut Receiver<u64>,
    stop: &mut Receiver<bool>,
) -> Result<i64, FleetError> {
    let mut c = client.clone();
    let lease = c
        .lease_grant(ttl, None)
        .await
        .map_err(|e| FleetError::from(e).context("granting the report's lease"))?
        .id();
    let (mut keeper, mut alive) = c.lease_keep_alive(lease).await?;
    put(client, ctx, lease).await.map_err(|e| {
        e.context(format!(
            "writing {}",
            ctx.config.etcd.layout().host(&ctx.config.host, false)
        ))
    })?;
    ctx.set_report_error(None);
    let every = Duration::from_millis(u64::try_from(ttl).unwrap_or(10) * 1000 / 3);
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.changed() => {
                ctx.update(|p| p.state = "stopped".into());
                return Ok(lease);
            }
            r = changed.changed() => {
                if r.is_err() {
                    return Ok(lease);
                }
                changed.borrow_and_update();
                put(client, ctx, lease).await?;
            }
            _ = tick.tick() => {
                keeper.keep_alive().await?;
                let answer = tokio::time::timeout(every, alive.message()).await;
                match answer {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => {}
                    Ok(Err(e)) => return Err(e.into()),
                    // Expired (TTL 0), closed, or no answer in time.
                    _ => return Err(FleetError::new(
                        crate::error::ErrorKind::Unavailable,
                        "the report's lease was lost",
                    )),
                }
            }
        }
    }
}
