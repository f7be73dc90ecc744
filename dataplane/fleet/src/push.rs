//! `rctl push`: store an artifact in chunks, then switch a target's
//! pointer to it in one transaction; `rctl push --rollback`.
//!
//! The chunks and the metadata are written first (idempotent puts,
//! retried while etcd has no leader); nothing points at them yet. Then one
//! transaction, guarded by the history's revision (a concurrent push
//! makes it retry) and by the metadata's existence (a concurrent garbage
//! collection makes it upload again), rewrites the metadata (bumping its
//! revision, which a collection in flight checks), switches the pointer
//! and appends to the history. A push killed before that transaction
//! leaves unreferenced chunks, which the next push collects; hosts never
//! see them.
//!
//! Artifacts are kept while a target's history (the last `keep` pushes)
//! or a pointer names them; the rest are deleted, each in a transaction
//! that fails if a push touched the artifact meanwhile. Chunks a push
//! left without metadata (it died first) stay until the same artifact is
//! pushed again: they could belong to a push in progress.

use crate::error::{ErrorKind, FleetError};
use crate::etcd::{
    now_unix, whoami, ArtifactMeta, Current, History, HistoryEntry, Layout, Pointer, Target,
};
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use sha2::{Digest as _, Sha256};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The default chunk size: under etcd's default request limit (1.5 MiB)
/// with room for the request's own framing.
pub const CHUNK_SIZE: usize = 1 << 20;

/// How long a push keeps retrying while etcd has no leader.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// How many tries the switch gets against concurrent pushes.
const SWITCH_TRIES: usize = 20;

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The artifact's content SHA-256 (hex).
    pub sha256: String,
    /// The target's new generation (the pointer's revision).
    pub generation: i64,
    /// Chunks stored (0 for a rollback).
    pub chunks: usize,
    /// Artifacts no longer kept, deleted.
    pub collected: usize,
    /// For a rollback: the generation it replaced.
    pub replaced: Option<i64>,
}

fn hex(b: &[u8]) -> String {
    rctl_compiler::artifact::hex(b)
}

/// Runs `op` until it succeeds, fails for a reason other than etcd being
/// unavailable, or [`RETRY_FOR`] has passed.
async fn retry<T, F, Fut>(what: &str, mut op: F) -> Result<T, FleetError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, FleetError>>,
{
    let start = Instant::now();
    let mut wait = Duration::from_millis(100);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.kind == ErrorKind::Unavailable && start.elapsed() < RETRY_FOR => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                return Err(e.context(format!(
                    "{what} (after {:.1} s of tries)",
                    start.elapsed().as_secs_f64()
                )))
            }
        }
    }
}

/// The metadata of `bytes`, an artifact this rctl reads, split into
/// chunks of `chunk_size`.
pub fn describe(bytes: &[u8], chunk_size: usize) -> Result<ArtifactMeta, FleetError> {
    use rctl_compiler::artifact;
    let rs = artifact::decode(bytes)
        .map_err(|e| FleetError::new(ErrorKind::Invalid, format!("not pushed: {e}")))?;
    let sha = artifact::content_hash(bytes)
        .ok_or_else(|| FleetError::new(ErrorKind::Invalid, "not an artifact"))?;
    Ok(ArtifactMeta {
        format_version: artifact::FORMAT_VERSION,
        sha256: hex(&sha),
        file_sha256: hex(&Sha256::digest(bytes)),
        size: bytes.len() as u64,
        chunks: bytes
            .chunks(chunk_size.max(1))
            .map(|c| hex(&Sha256::digest(c)))
            .collect(),
        rules: rs.rules.len(),
    })
}

/// Stores `bytes` (chunks, then metadata): nothing points at it yet.
pub async fn store(
    client: &Client,
    layout: &Layout,
    bytes: &[u8],
    meta: &ArtifactMeta,
    chunk_size: usize,
) -> Result<(), FleetError> {
    for (i, chunk) in bytes.chunks(chunk_size.max(1)).enumerate() {
        let key = layout.chunk(&meta.sha256, i);
        retry(&format!("storing chunk {i}"), || {
            let (mut c, key, chunk) = (client.clone(), key.clone(), chunk.to_vec());
            async move {
                c.put(key, chunk, None)
                    .await
                    .map(|_| ())
                    .map_err(Into::into)
            }
        })
        .await?;
    }
    let value = serde_json::to_vec(meta).unwrap_or_default();
    let key = layout.meta(&meta.sha256);
    retry("storing the metadata", || {
        let (mut c, key, value) = (client.clone(), key.clone(), value.clone());
        async move {
            c.put(key, value, None)
                .await
                .map(|_| ())
                .map_err(Into::into)
        }
    })
    .await
}

/// A key's value and mod_revision (0: absent).
async fn get(client: &Client, key: &str) -> Result<Option<(Vec<u8>, i64)>, FleetError> {
    let key = key.to_string();
    retry(&format!("reading {key}"), || {
        let (mut c, key) = (client.clone(), key.clone());
        async move {
            let r = c.get(key, None).await?;
            Ok(r.kvs()
                .first()
                .map(|kv| (kv.value().to_vec(), kv.mod_revision())))
        }
    })
    .await
}

fn history(value: Option<&[u8]>, key: &str) -> Result<History, FleetError> {
    match value {
        None => Ok(History::new()),
        Some(v) => serde_json::from_slice(v).map_err(|e| {
            FleetError::new(
                ErrorKind::Corrupt,
                format!("{key} is not a history rctl wrote ({e}); delete it to start afresh"),
            )
        }),
    }
}

/// Switches `target` to `meta`'s artifact (stored), appending to its
/// history (kept to `keep`); returns the new generation.
async fn switch(
    client: &Client,
    layout: &Layout,
    target: &Target,
    meta_value: &[u8],
    sha: &str,
    keep: usize,
    rollback: Option<usize>,
) -> Result<i64, FleetError> {
    // The first chunk is written first and the metadata last, and a
    // collection deletes the whole artifact at once: if both are still
    // there at the switch, no collection deleted any part of it since
    // this push began storing it (one that deleted it before rewrote none
    // of what this push wrote).
    let (hkey, pkey, mkey, first) = (
        layout.history(target),
        layout.pointer(target),
        layout.meta(sha),
        layout.chunk(sha, 0),
    );
    for _ in 0..SWITCH_TRIES {
        let seen = get(client, &hkey).await?;
        let mut h = history(seen.as_ref().map(|(v, _)| v.as_slice()), &hkey)?;
        let entry = HistoryEntry {
            sha256: sha.to_string(),
            pushed_unix: now_unix(),
            pushed_by: whoami(),
        };
        h.push(entry.clone());
        let excess = h.len().saturating_sub(keep.max(1));
        h.drain(..excess);
        let pointer = Pointer {
            sha256: sha.to_string(),
            pushed_unix: entry.pushed_unix,
            pushed_by: entry.pushed_by,
            rollback,
        };
        let history_guard = match &seen {
            Some((_, rev)) => Compare::mod_revision(hkey.clone(), CompareOp::Equal, *rev),
            None => Compare::version(hkey.clone(), CompareOp::Equal, 0),
        };
        let txn = Txn::new()
            .when([
                history_guard,
                Compare::version(mkey.clone(), CompareOp::Greater, 0),
                Compare::version(first.clone(), CompareOp::Greater, 0),
            ])
            .and_then([
                TxnOp::put(mkey.clone(), meta_value.to_vec(), None),
                TxnOp::put(
                    pkey.clone(),
                    serde_json::to_vec(&pointer).unwrap_or_default(),
                    None,
                ),
                TxnOp::put(
                    hkey.clone(),
                    serde_json::to_vec(&h).unwrap_or_default(),
                    None,
                ),
            ])
            .or_else([
                TxnOp::get(mkey.clone(), None),
                TxnOp::get(first.clone(), Some(GetOptions::new().with_keys_only())),
            ]);
        let mut c = client.clone();
        let r = match c.txn(txn).await {
            Ok(r) => r,
            Err(e) => {
                let e = FleetError::from(e);
                if e.kind != ErrorKind::Unavailable {
                    return Err(e.context("switching the pointer"));
                }
                // The switch may have happened before the answer was lost:
                // if the pointer says exactly this, it did.
                if let Some((v, rev)) = get(client, &pkey).await? {
                    if serde_json::from_slice::<Pointer>(&v).ok().as_ref() == Some(&pointer) {
                        return Ok(rev);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if r.succeeded() {
            return Ok(r.header().map_or(0, |h| h.revision()));
        }
        let gone = r.op_responses().iter().any(|o| match o {
            TxnOpResponse::Get(g) => g.kvs().is_empty(),
            _ => false,
        });
        if gone {
            return Err(FleetError::new(
                ErrorKind::Conflict,
                format!(
                    "the artifact {sha} was deleted (by another push's collection) while it \
                     was being switched to"
                ),
            ));
        }
        // Another push changed the history: read it again.
    }
    Err(FleetError::new(
        ErrorKind::Conflict,
        format!("{SWITCH_TRIES} other pushes changed {hkey} while this one tried; push again"),
    ))
}

/// `rctl push ARTIFACT`: stores it and switches `target` to it.
pub async fn push(
    client: &Client,
    layout: &Layout,
    bytes: &[u8],
    target: &Target,
    keep: usize,
    chunk_size: usize,
) -> Result<Pushed, FleetError> {
    let meta = describe(bytes, chunk_size)?;
    let value = serde_json::to_vec(&meta).unwrap_or_default();
    let mut tries = 0;
    let generation = loop {
        store(client, layout, bytes, &meta, chunk_size).await?;
        match switch(client, layout, target, &value, &meta.sha256, keep, None).await {
            Err(e) if e.kind == ErrorKind::Conflict && tries < 3 => tries += 1,
            other => break other?,
        }
    };
    let collected = collect(client, layout).await.unwrap_or(0);
    Ok(Pushed {
        sha256: meta.sha256,
        generation,
        chunks: meta.chunks.len(),
        collected,
        replaced: None,
    })
}

/// `rctl push --rollback N`: points `target` at the artifact pushed `n`
/// pushes before the one it runs (appending it to the history, so a
/// second rollback of 1 goes forward again, as `kubectl rollout undo`).
pub async fn rollback(
    client: &Client,
    layout: &Layout,
    target: &Target,
    n: usize,
    keep: usize,
) -> Result<Pushed, FleetError> {
    let hkey = layout.history(target);
    let h = history(
        get(client, &hkey)
            .await?
            .as_ref()
            .map(|(v, _)| v.as_slice()),
        &hkey,
    )?;
    let Some(entry) = h.len().checked_sub(n + 1).and_then(|i| h.get(i)) else {
        return Err(FleetError::new(
            ErrorKind::Invalid,
            format!(
                "{target} has {} push(es) in its history, so it cannot go back {n}: \
                 `rctl fleet status` shows what runs; push an artifact instead",
                h.len()
            ),
        ));
    };
    let replaced = match get(client, &layout.pointer(target)).await? {
        Some((v, rev)) => Current::parse(target.clone(), &v, rev)
            .ok()
            .map(|c| c.generation),
        None => None,
    };
    let mkey = layout.meta(&entry.sha256);
    let Some((meta, _)) = get(client, &mkey).await? else {
        return Err(FleetError::new(
            ErrorKind::Corrupt,
            format!(
                "the artifact {} is no longer stored ({mkey} is missing): push it again",
                entry.sha256
            ),
        ));
    };
    let generation = switch(client, layout, target, &meta, &entry.sha256, keep, Some(n)).await?;
    Ok(Pushed {
        sha256: entry.sha256.clone(),
        generation,
        chunks: 0,
        collected: 0,
        replaced,
    })
}

/// Deletes every stored artifact that no history and no pointer names;
/// returns how many.
///
/// Everything is read at one revision, and an artifact is deleted only if
/// its metadata has not been written since: a push that switched to it
/// after that revision rewrote the metadata (the switch puts it), and one
/// storing it now either wrote the metadata already or finds its first
/// chunk gone at the switch and stores it again.
pub async fn collect(client: &Client, layout: &Layout) -> Result<usize, FleetError> {
    let mut keep = HashSet::new();
    let mut c = client.clone();
    let histories = c
        .get(layout.histories(), Some(GetOptions::new().with_prefix()))
        .await?;
    let at = histories.header().map_or(0, |h| h.revision());
    let opts = || Some(GetOptions::new().with_revision(at));
    for kv in histories.kvs() {
        if let Ok(h) = serde_json::from_slice::<History>(kv.value()) {
            keep.extend(h.into_iter().map(|e| e.sha256));
        }
    }
    let pointers = c
        .get(layout.sites(), opts().map(|o| o.with_prefix()))
        .await?;
    let global = c.get(layout.pointer(&Target::All), opts()).await?;
    for kv in pointers.kvs().iter().chain(global.kvs()) {
        if let Ok(p) = serde_json::from_slice::<Pointer>(kv.value()) {
            keep.insert(p.sha256);
        }
    }
    let metas = c
        .get(
            layout.artifacts(),
            opts().map(|o| o.with_prefix().with_keys_only()),
        )
        .await?;
    let mut stored: Vec<(String, i64)> = Vec::new();
    for kv in metas.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let Some(rest) = key.strip_prefix(&layout.artifacts()) else {
            continue;
        };
        let sha = rest.split('/').next().unwrap_or_default().to_string();
        if rest.ends_with("/meta") {
            stored.push((sha, kv.mod_revision()));
        }
    }
    let mut collected = 0;
    for (sha, rev) in &stored {
        if keep.contains(sha) {
            continue;
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(
                layout.meta(sha),
                CompareOp::Equal,
                *rev,
            )])
            .and_then([TxnOp::delete(
                layout.artifact(sha),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )]);
        if c.txn(txn).await?.succeeded() {
            collected += 1;
        }
    }
    // Chunks without metadata (a push that died before writing it, or one
    // in progress) are left alone: deleting those of a push in progress
    // could leave it pointing at an incomplete artifact. Pushing the same
    // artifact again rewrites them.
    Ok(collected)
}
