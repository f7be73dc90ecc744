//! A worker's ruleset: the artifact read and decoded, its engine built
//! and bound to the shared zone, and how a worker notices that the file
//! changed (`rctl apply --nginx-artifact`, or any atomic rename over it).

#![forbid(unsafe_code)]

use rctl_compiler::artifact;
use rctl_dataplane::limiter::zone::Zone;
use rctl_dataplane::{Engine, EngineConfig, Scratch};
use std::fmt;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Why an artifact could not be loaded.
#[derive(Debug)]
pub struct LoadError {
    path: PathBuf,
    kind: LoadErrorKind,
}

/// The kinds of [`LoadError`].
#[derive(Debug)]
#[non_exhaustive]
pub enum LoadErrorKind {
    /// Reading the file failed.
    Read(std::io::Error),
    /// The bytes are not a valid artifact.
    Decode(String),
    /// The ruleset cannot be built into an engine.
    Engine(String),
}

impl LoadError {
    /// What went wrong.
    pub fn kind(&self) -> &LoadErrorKind {
        &self.kind
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        match &self.kind {
            LoadErrorKind::Read(e) => write!(f, "{p}: {e}"),
            LoadErrorKind::Decode(e) => write!(f, "{p}: not a valid rctl artifact: {e}"),
            LoadErrorKind::Engine(e) => write!(f, "{p}: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// What identifies a file's contents without reading it: device, inode,
/// size and modification time. An atomic rename over the path gives a
/// new inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    /// Modification time: seconds and nanoseconds (two words, not an
    /// `i128`: its 16-byte alignment would pass to the configuration
    /// nginx allocates, which its pools align to 8).
    mtime: (i64, i64),
}

impl FileId {
    /// The identity of the file at `path` now (`None` if it cannot be
    /// looked at).
    pub fn of(path: &Path) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
        })
    }
}

/// One loaded ruleset.
pub struct Generation {
    /// The engine; its GCRA limiters count in the zone.
    pub engine: Engine,
    /// The artifact's content SHA-256.
    pub sha256: [u8; 32],
    /// The file it was read from, as it was when read.
    pub file: FileId,
    /// Rules whose buckets are the worker's own (`bucket vsthrottle`).
    pub own_buckets: Vec<String>,
    /// Its generation number (see [`crate::counters::Counters::generation_of`]);
    /// 0 until a worker numbers it.
    pub number: u64,
    /// Decision memory reused by every request of this generation.
    pub scratch: Scratch,
}

impl Generation {
    /// Reads and decodes the artifact at `path` and builds its engine for
    /// `site`, its throttles counting in `zone` when given.
    pub fn load(
        path: &Path,
        site: Option<&str>,
        zone: Option<Zone>,
    ) -> Result<Generation, LoadError> {
        let err = |kind| LoadError {
            path: path.to_path_buf(),
            kind,
        };
        let file = FileId::of(path).unwrap_or_default();
        let bytes = rctl_compiler::files::read_binary(path, rctl_compiler::files::MAX_BINARY_BYTES)
            .map_err(|e| err(LoadErrorKind::Read(e)))?;
        let rs = artifact::decode(&bytes).map_err(|e| err(LoadErrorKind::Decode(e.to_string())))?;
        let config = EngineConfig {
            site: site.map(str::to_string),
            ..EngineConfig::default()
        };
        let mut engine =
            Engine::new(rs, &config).map_err(|e| err(LoadErrorKind::Engine(e.to_string())))?;
        let own_buckets = match zone {
            Some(z) => engine.count_in_zone(z),
            None => Vec::new(),
        };
        let sha256 = artifact::content_hash(&bytes).unwrap_or_else(|| artifact::sha256(&bytes));
        let scratch = engine.scratch();
        Ok(Generation {
            engine,
            sha256,
            file,
            own_buckets,
            number: 0,
            scratch,
        })
    }

    /// The artifact hash in hex.
    pub fn sha256_hex(&self) -> String {
        artifact::hex(&self.sha256)
    }
}
