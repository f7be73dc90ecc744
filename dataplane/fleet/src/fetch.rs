//! Fetching the artifact a pointer names, and checking every byte of it
//! before anything is applied: the metadata, each chunk's SHA-256, the
//! whole file's, the format version, the content hash, and the decoder's
//! own validation. All reads are made at one etcd revision, so a push
//! running meanwhile cannot mix two artifacts: the revision of the
//! pointer that named the artifact, at which a push has just checked that
//! it is stored whole (a later push's collection may delete it from the
//! present; a host still fetches the generation it was told to run).

use crate::error::{ErrorKind, FleetError};
use crate::etcd::{ArtifactMeta, Layout};
use etcd_client::{Client, GetOptions};
use rctl_compiler::artifact;
use sha2::{Digest as _, Sha256};

/// The largest artifact a host accepts (the compiler's own limits keep
/// real ones far below).
pub const MAX_ARTIFACT: u64 = 1 << 30;

fn corrupt(sha: &str, what: String) -> FleetError {
    FleetError::new(
        ErrorKind::Corrupt,
        format!(
            "artifact {}: {what}; it is not applied (push it again to repair it)",
            short(sha)
        ),
    )
}

/// The first 16 hex digits of a hash.
pub fn short(sha: &str) -> &str {
    sha.get(..16).unwrap_or(sha)
}

/// What the metadata of an artifact says it holds is read into memory
/// as it arrives, past this much (a corrupt size allocates nothing).
const PREALLOCATE: u64 = 64 << 20;

/// Fetches and checks artifact `sha` as it was at etcd revision `at` (the
/// pointer's; 0, or a revision etcd has compacted: as it is now); its
/// bytes when every check passes.
pub async fn fetch(
    client: &Client,
    layout: &Layout,
    sha: &str,
    at: i64,
) -> Result<Vec<u8>, FleetError> {
    let mut c = client.clone();
    let now = |r: &etcd_client::GetResponse| r.header().map_or(0, |h| h.revision());
    let (r, revision) = if at > 0 {
        match c
            .get(layout.meta(sha), Some(GetOptions::new().with_revision(at)))
            .await
        {
            Ok(r) => (r, at),
            Err(e) if e.to_string().contains("compacted") => {
                let r = c.get(layout.meta(sha), None).await?;
                let rev = now(&r);
                (r, rev)
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        let r = c.get(layout.meta(sha), None).await?;
        let rev = now(&r);
        (r, rev)
    };
    let Some(kv) = r.kvs().first() else {
        return Err(corrupt(sha, "its metadata is missing".into()));
    };
    let meta: ArtifactMeta = serde_json::from_slice(kv.value())
        .map_err(|e| corrupt(sha, format!("its metadata is not rctl's ({e})")))?;
    if meta.format_version != artifact::FORMAT_VERSION {
        return Err(FleetError::new(
            ErrorKind::FormatVersion,
            format!(
                "artifact {} has format version {}; this rctl reads version {}: upgrade rctl on \
                 this host, or push an artifact compiled by the rctl it runs",
                short(sha),
                meta.format_version,
                artifact::FORMAT_VERSION
            ),
        ));
    }
    if meta.sha256 != sha {
        return Err(corrupt(
            sha,
            format!("its metadata describes {}", short(&meta.sha256)),
        ));
    }
    if meta.size > MAX_ARTIFACT {
        return Err(corrupt(sha, format!("{} bytes is too large", meta.size)));
    }
    let mut bytes = Vec::with_capacity(meta.size.min(PREALLOCATE) as usize);
    let n = meta.chunks.len();
    for (i, want) in meta.chunks.iter().enumerate() {
        let opts = GetOptions::new().with_revision(revision);
        let r = c.get(layout.chunk(sha, i), Some(opts)).await?;
        let Some(kv) = r.kvs().first() else {
            return Err(corrupt(sha, format!("chunk {i} of {n} is missing")));
        };
        let got = artifact::hex(&Sha256::digest(kv.value()));
        if &got != want {
            return Err(corrupt(
                sha,
                format!(
                    "chunk {i} of {n} has SHA-256 {}, its metadata says {}",
                    short(&got),
                    short(want)
                ),
            ));
        }
        bytes.extend_from_slice(kv.value());
        if bytes.len() as u64 > meta.size {
            return Err(corrupt(
                sha,
                format!("its chunks hold more than {} bytes", meta.size),
            ));
        }
    }
    if bytes.len() as u64 != meta.size {
        return Err(corrupt(
            sha,
            format!("its chunks hold {} bytes, not {}", bytes.len(), meta.size),
        ));
    }
    let file = artifact::hex(&Sha256::digest(&bytes));
    if file != meta.file_sha256 {
        return Err(corrupt(sha, "the file's SHA-256 does not match".into()));
    }
    check(&bytes, sha)?;
    Ok(bytes)
}

/// Checks that `bytes` is an artifact this rctl reads, with content hash
/// `sha`.
pub fn check(bytes: &[u8], sha: &str) -> Result<(), FleetError> {
    let version = bytes
        .get(8..10)
        .map(|v| u16::from_le_bytes([v[0], v[1]]))
        .unwrap_or(0);
    if bytes.starts_with(&artifact::MAGIC) && version != artifact::FORMAT_VERSION {
        return Err(FleetError::new(
            ErrorKind::FormatVersion,
            format!(
                "artifact {} has format version {version}; this rctl reads version {}: upgrade \
                 rctl on this host",
                short(sha),
                artifact::FORMAT_VERSION
            ),
        ));
    }
    let content = artifact::content_hash(bytes).map(|h| artifact::hex(&h));
    if content.as_deref() != Some(sha) {
        return Err(corrupt(
            sha,
            "its content hash does not match its name".into(),
        ));
    }
    artifact::decode(bytes).map_err(|e| corrupt(sha, format!("it does not decode: {e}")))?;
    Ok(())
}
