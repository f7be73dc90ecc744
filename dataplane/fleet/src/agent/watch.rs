//! Following the pointers, confd style: read them once, then watch from
//! the next revision, never poll; after a lost connection, resume the
//! watch from the last revision seen; if that revision was compacted,
//! read everything again. Reconnects back off (100 ms doubling to 5 s,
//! with jitter); meanwhile the agent keeps enforcing what it runs.

use super::{apply, Ctx};
use crate::backoff::{sleep_or_stop, Backoff};
use crate::error::{ErrorKind, FleetError};
use crate::etcd::{Current, Layout, Target};
use crate::fetch;
use etcd_client::{Client, EventType, WatchOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch::Receiver;

/// A pointer as last seen: its revision, and what it says (or why it
/// cannot be read).
#[derive(Debug, Clone)]
struct Slot {
    rev: i64,
    value: Result<Current, FleetError>,
}

/// The pointers this host follows.
#[derive(Debug, Default)]
struct View {
    global: Option<Slot>,
    site: Option<Slot>,
    /// The last revision seen (0: read everything).
    revision: i64,
}

impl View {
    /// The newer pointer (by revision), read or not.
    fn target(&self) -> Option<&Slot> {
        match (&self.global, &self.site) {
            (Some(a), Some(b)) => Some(if b.rev > a.rev { b } else { a }),
            (a, b) => a.as_ref().or(b.as_ref()),
        }
    }
}

/// The watcher task: runs until `stop` fires.
pub(crate) async fn run(ctx: Arc<Ctx>, mut stop: Receiver<bool>) {
    let mut backoff = Backoff::new();
    let mut view = View::default();
    let mut failed: Option<(i64, Instant)> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let result = match ctx.config.etcd.connect().await {
            Ok(client) => {
                session(
                    &ctx,
                    &client,
                    &mut view,
                    &mut failed,
                    &mut stop,
                    &mut backoff,
                )
                .await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => return,
            Err(e) => ctx.update(|p| {
                p.etcd_connected = false;
                p.etcd_error = Some(e.message.clone());
            }),
        }
        if sleep_or_stop(backoff.next(), &mut stop).await {
            return;
        }
    }
}

/// Reads both pointers; sets the view and its revision.
async fn load(
    client: &Client,
    layout: &Layout,
    site: Option<&str>,
    view: &mut View,
) -> Result<(), FleetError> {
    let mut c = client.clone();
    let r = c.get(layout.pointer(&Target::All), None).await?;
    let rev = r.header().map_or(0, |h| h.revision());
    let slot = |target: Target, kv: Option<&etcd_client::KeyValue>| {
        kv.map(|kv| Slot {
            rev: kv.mod_revision(),
            value: Current::parse(target, kv.value(), kv.mod_revision()),
        })
    };
    view.global = slot(Target::All, r.kvs().first());
    view.site = None;
    if let Some(s) = site {
        let opts = etcd_client::GetOptions::new().with_revision(rev);
        let r = c
            .get(layout.pointer(&Target::Site(s.into())), Some(opts))
            .await?;
        view.site = slot(Target::Site(s.into()), r.kvs().first());
    }
    view.revision = rev;
    Ok(())
}

/// One connection: watch from the view's revision until an error, or
/// `stop` (`Ok`).
async fn session(
    ctx: &Arc<Ctx>,
    client: &Client,
    view: &mut View,
    failed: &mut Option<(i64, Instant)>,
    stop: &mut Receiver<bool>,
    backoff: &mut Backoff,
) -> Result<(), FleetError> {
    let layout = ctx.config.etcd.layout();
    let site = ctx.config.site.clone();
    let keys: Vec<(String, Target)> = std::iter::once(Target::All)
        .chain(site.clone().map(Target::Site))
        .map(|t| (layout.pointer(&t), t))
        .collect();
    loop {
        if view.revision == 0 {
            load(client, &layout, site.as_deref(), view).await?;
        }
        let opts = || {
            Some(
                WatchOptions::new()
                    .with_start_revision(view.revision + 1)
                    .with_progress_notify(),
            )
        };
        let mut c = client.clone();
        let mut stream = c.watch(keys[0].0.clone(), opts()).await?;
        for (k, _) in &keys[1..] {
            stream.watch(k.clone(), opts()).await?;
        }
        ctx.update(|p| {
            p.etcd_connected = true;
            p.etcd_error = None;
            p.sessions += 1;
            p.revision = view.revision;
        });
        evaluate(ctx, client, view, failed).await;
        loop {
            let retry_in = failed.map(|(_, at)| ctx.config.retry.saturating_sub(at.elapsed()));
            let msg = tokio::select! {
                _ = stop.changed() => return Ok(()),
                m = stream.message() => m?,
                () = tokio::time::sleep(retry_in.unwrap_or(Duration::from_secs(3600))), if retry_in.is_some() => {
                    evaluate(ctx, client, view, failed).await;
                    continue;
                }
            };
            let Some(resp) = msg else {
                return Err(FleetError::new(
                    ErrorKind::Unavailable,
                    "etcd closed the watch",
                ));
            };
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    // The revision to resume from is gone: read everything.
                    view.revision = 0;
                    break;
                }
                return Err(FleetError::new(
                    ErrorKind::Unavailable,
                    format!("etcd canceled the watch: {}", resp.cancel_reason()),
                ));
            }
            backoff.reset();
            // The resume point moves only with events. A response's header
            // says how far the store is, not how far this stream has
            // delivered: two watchers share it, and the reply that creates
            // or reports progress on one can come before the other's
            // catch-up events, which a resume past them would lose.
            let mut moved = false;
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let Some((_, target)) = keys.iter().find(|(k, _)| k.as_bytes() == kv.key()) else {
                    continue;
                };
                let slot = match ev.event_type() {
                    EventType::Put => Some(Slot {
                        rev: kv.mod_revision(),
                        value: Current::parse(target.clone(), kv.value(), kv.mod_revision()),
                    }),
                    EventType::Delete => None,
                };
                view.revision = view.revision.max(kv.mod_revision());
                match target {
                    Target::All => view.global = slot,
                    Target::Site(_) => view.site = slot,
                }
                moved = true;
            }
            ctx.update(|p| p.revision = view.revision);
            if moved {
                evaluate(ctx, client, view, failed).await;
            }
        }
    }
}

/// Brings the host to the view's target: fetch, check, apply; or says
/// why not.
async fn evaluate(
    ctx: &Arc<Ctx>,
    client: &Client,
    view: &View,
    failed: &mut Option<(i64, Instant)>,
) {
    let Some(slot) = view.target() else {
        // Nothing to apply, so nothing to retry.
        *failed = None;
        ctx.update(|p| {
            p.target_generation = 0;
            p.target_sha256 = None;
        });
        return;
    };
    let cur = match &slot.value {
        Ok(c) => c.clone(),
        Err(e) => {
            fail(ctx, slot.rev, e, failed);
            return;
        }
    };
    let (generation, sha) = (cur.generation, cur.pointer.sha256.clone());
    let before = ctx.progress().target_generation;
    if before != generation {
        rctl_agent::event::line(&format!(
            "target changed: generation {generation} (artifact {}), was {before}",
            fetch::short(&sha)
        ));
    }
    ctx.update(|p| {
        p.target_generation = generation;
        p.target_sha256 = Some(sha.clone());
    });
    let p = ctx.progress();
    let running = ctx.judge.current().sha256.clone();
    if p.generation == generation && running == sha && p.state == "ok" {
        *failed = None;
        return;
    }
    if running == sha && p.state != "failed" {
        // It runs that artifact already (a rollback to it, or what it
        // found on disk): only the generation changes.
        apply::record(ctx, generation, &sha).await;
        ctx.update(|p| {
            p.generation = generation;
            p.state = "ok".into();
            p.last_error = None;
        });
        *failed = None;
        return;
    }
    if let Some((g, at)) = failed {
        if *g == generation && at.elapsed() < ctx.config.retry {
            return;
        }
    }
    ctx.update(|p| p.state = "applying".into());
    let result = match fetch::fetch(client, &ctx.config.etcd.layout(), &sha, slot.rev).await {
        Ok(bytes) => apply::apply(ctx, generation, &sha, bytes).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(apply::Outcome::Applied) => {
            *failed = None;
            ctx.update(|p| {
                p.generation = generation;
                p.applied_unix = crate::etcd::now_unix();
                p.state = "ok".into();
                p.last_error = None;
                p.error_generation = 0;
            });
        }
        Ok(apply::Outcome::Incomplete(why)) => {
            // It runs the generation, but is not done with it: failed,
            // with what did not happen, until a try finishes it.
            *failed = Some((generation, Instant::now()));
            ctx.update(|p| {
                p.generation = generation;
                p.applied_unix = crate::etcd::now_unix();
                p.state = "failed".into();
                p.failures += 1;
                p.error_generation = generation;
                p.last_error = Some(format!("generation {generation} applied: {why}"));
            });
        }
        Err(e) => fail(ctx, generation, &e, failed),
    }
}

fn fail(ctx: &Ctx, generation: i64, e: &FleetError, failed: &mut Option<(i64, Instant)>) {
    *failed = Some((generation, Instant::now()));
    let running = ctx.judge.current().sha256.clone();
    ctx.update(|p| {
        p.state = "failed".into();
        p.failures += 1;
        p.error_generation = generation;
        p.last_error = Some(format!(
            "generation {generation} not applied: {}; still running generation {} (artifact {})",
            e.message,
            p.generation,
            fetch::short(&running)
        ));
        rctl_agent::event::line(&format!(
            "apply failed: {}",
            p.last_error.as_deref().unwrap_or_default()
        ));
    });
}
