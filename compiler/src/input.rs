//! A ruleset from what a command names: one compiled artifact (a regular
//! file that starts with the artifact's magic number), or sources to
//! compile. `rctl explain`, `eval`, `dry-run` and `emit` take either.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("rctl-input-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let src = dir.join("r.rctl");
//! std::fs::write(&src, "rule r { when path == \"/x\" deny 403 }").unwrap();
//! let opts = rctl_compiler::Options::default();
//! let from_sources = rctl_compiler::input::load(&[src.clone()], &opts).unwrap();
//! assert!(!from_sources.is_artifact && !from_sources.diagnostics.has_errors());
//! let rs = from_sources.ruleset.unwrap();
//! let art = dir.join("r.rctlc");
//! std::fs::write(&art, rctl_compiler::artifact::encode(&rs)).unwrap();
//! let from_artifact = rctl_compiler::input::load(&[art.clone()], &opts).unwrap();
//! assert!(from_artifact.is_artifact);
//! assert_eq!(from_artifact.ruleset.unwrap().rules, rs.rules);
//! assert_eq!(from_artifact.inputs, [art]);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use crate::diag::Diagnostics;
use crate::ir::Ruleset;
use crate::source::SourceMap;
use crate::{artifact, files, ArtifactError, Options};
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// A ruleset read from an artifact or compiled from sources.
#[derive(Debug)]
pub struct Input {
    /// The ruleset; `None` when the sources have errors.
    pub ruleset: Option<Ruleset>,
    /// Merged (IPv4, IPv6) prefix counts per named ipblock.
    pub ipblock_sizes: Vec<(String, usize, usize)>,
    /// Every file it was read from: the artifact, or each source.
    pub inputs: Vec<PathBuf>,
    /// Whether it was one artifact.
    pub is_artifact: bool,
    /// The sources read (none for an artifact), for rendering the
    /// diagnostics.
    pub sources: SourceMap,
    /// The compilation's errors and warnings (none for an artifact).
    pub diagnostics: Diagnostics,
}

/// Why an artifact could not be read. (Sources that fail to compile are
/// not an error: their diagnostics say why.)
#[derive(Debug)]
#[non_exhaustive]
pub enum InputError {
    /// The file could not be read.
    Read {
        /// The artifact.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// It is not a valid artifact.
    Decode {
        /// The artifact.
        path: PathBuf,
        /// Why.
        error: ArtifactError,
    },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Read { path, .. } => write!(f, "reading {}", path.display()),
            InputError::Decode { path, .. } => write!(f, "{}", path.display()),
        }
    }
}

impl std::error::Error for InputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InputError::Read { error, .. } => Some(error),
            InputError::Decode { error, .. } => Some(error),
        }
    }
}

/// Whether `paths` is one compiled artifact: a regular file that starts
/// with the artifact's magic number.
pub fn is_artifact(paths: &[PathBuf]) -> bool {
    let [path] = paths else { return false };
    let mut magic = [0u8; artifact::MAGIC.len()];
    path.is_file()
        && std::fs::File::open(path).is_ok_and(|f| {
            f.take(magic.len() as u64).read_exact(&mut magic).is_ok() && magic == artifact::MAGIC
        })
}

/// The ruleset of `paths`: decoded when they are one artifact, else
/// compiled with `opts` (then [`Input::diagnostics`] says how it went).
pub fn load(paths: &[PathBuf], opts: &Options) -> Result<Input, InputError> {
    if is_artifact(paths) {
        return read_artifact(&paths[0]);
    }
    let c = crate::compile_paths(paths, opts);
    Ok(Input {
        ruleset: c.ruleset,
        ipblock_sizes: c.ipblock_sizes,
        inputs: c.sources.files().iter().map(|f| f.path.clone()).collect(),
        is_artifact: false,
        sources: c.sources,
        diagnostics: c.diagnostics,
    })
}

/// Reads and decodes the artifact at `path`.
fn read_artifact(path: &Path) -> Result<Input, InputError> {
    let bytes =
        files::read_binary(path, files::MAX_BINARY_BYTES).map_err(|error| InputError::Read {
            path: path.to_path_buf(),
            error,
        })?;
    let rs = artifact::decode(&bytes).map_err(|error| InputError::Decode {
        path: path.to_path_buf(),
        error,
    })?;
    let sizes = rs
        .ipsets
        .iter()
        .filter(|s| s.name != "inline")
        .map(|s| (s.name.clone(), s.prefixes.v4.len(), s.prefixes.v6.len()))
        .collect();
    Ok(Input {
        ruleset: Some(rs),
        ipblock_sizes: sizes,
        inputs: vec![path.to_path_buf()],
        is_artifact: true,
        sources: SourceMap::new(),
        diagnostics: Diagnostics::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rctl-input-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const SRC: &str = "ipblock cloud/x {\n  192.0.2.0/24\n}\nrule r { when ipblock@cloud/x deny 403 }\nrule s { when ip in { 198.51.100.0/24 } deny 403 }\n";

    #[test]
    fn an_artifact_and_its_sources_give_the_same_ruleset_and_sizes() {
        let d = dir("same");
        let src = d.join("r.rctl");
        std::fs::write(&src, SRC).unwrap();
        let opts = Options::default();
        let s = load(std::slice::from_ref(&src), &opts).unwrap();
        assert!(!s.is_artifact);
        assert_eq!(s.inputs, std::slice::from_ref(&src));
        assert_eq!(s.ipblock_sizes, [("cloud/x".to_string(), 1, 0)]);
        let rs = s.ruleset.unwrap();
        let art = d.join("r.rctlc");
        std::fs::write(&art, artifact::encode(&rs)).unwrap();
        assert!(is_artifact(std::slice::from_ref(&art)));
        let a = load(std::slice::from_ref(&art), &opts).unwrap();
        assert!(a.is_artifact);
        assert_eq!(
            a.diagnostics.error_count() + a.diagnostics.warning_count(),
            0
        );
        assert_eq!(
            a.ipblock_sizes, s.ipblock_sizes,
            "the inline set is left out"
        );
        assert_eq!(a.ruleset.unwrap(), rs);
        // Two paths are sources, even if one is an artifact.
        assert!(!is_artifact(&[art.clone(), src]));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn sources_with_errors_are_diagnostics_not_an_error() {
        let d = dir("errors");
        let src = d.join("bad.rctl");
        std::fs::write(&src, "rule r { when nonsense }").unwrap();
        let i = load(std::slice::from_ref(&src), &Options::default()).unwrap();
        assert!(i.ruleset.is_none() && i.diagnostics.has_errors());
        assert_eq!(i.sources.files().len(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_damaged_artifact_is_a_decode_error_naming_it() {
        let d = dir("damaged");
        let c = crate::compile_str("r.rctl", SRC, &Options::default());
        let mut bytes = artifact::encode(&c.ruleset.unwrap());
        let last = bytes.len() - 1;
        bytes[last] ^= 0x55;
        let art = d.join("bad.rctlc");
        std::fs::write(&art, &bytes).unwrap();
        let e = load(std::slice::from_ref(&art), &Options::default()).unwrap_err();
        assert!(matches!(&e, InputError::Decode { path, .. } if *path == art));
        assert_eq!(e.to_string(), art.display().to_string());
        assert!(std::error::Error::source(&e).is_some());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_or_a_short_file_is_not_an_artifact() {
        let d = dir("short");
        assert!(!is_artifact(std::slice::from_ref(&d)));
        let f = d.join("short.rctlc");
        std::fs::write(&f, &artifact::MAGIC[..2]).unwrap();
        assert!(!is_artifact(std::slice::from_ref(&f)));
        let _ = std::fs::remove_dir_all(&d);
    }
}
