//! Writing outputs (`compile -o`, `dry-run --report`): only a new path or a
//! regular file is replaced, and never one of the run's own inputs.

use anyhow::{bail, Result};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Refuses an output path that exists and is not a regular file (a
/// symlink, a device, a FIFO, a directory), or that is one of `inputs`
/// (compared by device and inode, so another name for an input is caught
/// too).
pub fn check_target(path: &Path, inputs: &[PathBuf]) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => bail!("cannot write {}: {e}", path.display()),
    };
    if meta.file_type().is_symlink() {
        let to = std::fs::read_link(path).unwrap_or_default();
        bail!(
            "refusing to write {}: it is a symbolic link (to {}); rctl replaces only regular \
             files: name the file the link points to, or remove the link",
            path.display(),
            to.display()
        );
    }
    if !meta.is_file() {
        bail!(
            "refusing to write {}: it is {}, not a regular file; rctl replaces only regular \
             files: choose another path",
            path.display(),
            rctl_compiler::files::kind(&meta)
        );
    }
    for input in inputs {
        if std::fs::metadata(input).is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino())) {
            bail!(
                "refusing to write {}: it is one of this run's inputs ({}); choose another path",
                path.display(),
                input.display()
            );
        }
    }
    Ok(())
}

/// Checks the target ([`check_target`]), then writes atomically: a
/// temporary file beside it, renamed over it.
pub fn write(path: &Path, bytes: &[u8], inputs: &[PathBuf]) -> Result<()> {
    check_target(path, inputs)?;
    Ok(rctl_os::fs::write_atomic(path, bytes)?)
}
