//! Files rctl's state lives in: directories only the user running rctl
//! may change, files written whole or not at all under names nobody can
//! predict, and locks.
//!
//! Modes are set explicitly (`fchmod`/`chmod` after creating), never
//! left to the caller's umask.

use crate::errno::io_error;
use std::fmt;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt,
};
use std::path::{Component, Path, PathBuf};

/// The mode of rctl's directories.
pub const DIR_MODE: u32 = 0o700;
/// The mode of rctl's files.
pub const FILE_MODE: u32 = 0o600;
/// The mode of parents rctl has to create above a state directory.
const PARENT_MODE: u32 = 0o755;

/// Why a state file or folder could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    /// What kind of failure.
    pub kind: FsErrorKind,
    /// What happened, and what to do.
    pub message: String,
}

/// The kinds of [`FsError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FsErrorKind {
    /// Someone else could change what is there: a folder another user
    /// owns or may write, or one under such a folder.
    Unsafe,
    /// A system call failed (the message has its errno).
    Io,
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FsError {}

fn unsafe_dir(message: String) -> FsError {
    FsError {
        kind: FsErrorKind::Unsafe,
        message,
    }
}

fn io(message: String) -> FsError {
    FsError {
        kind: FsErrorKind::Io,
        message,
    }
}

fn euid() -> u32 {
    crate::users::euid()
}

fn owner(uid: u32) -> String {
    if uid == 0 {
        "root".into()
    } else {
        uid.to_string()
    }
}

/// `path` made absolute (against the working directory), without
/// resolving symbolic links.
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    }
}

/// Every directory above `path` (lexically, then after resolving links),
/// root first.
fn ancestors(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in [Some(absolute(path)), path.canonicalize().ok()]
        .into_iter()
        .flatten()
    {
        let mut cur = PathBuf::new();
        let comps: Vec<Component<'_>> = p.components().collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            cur.push(c);
            if !out.contains(&cur) {
                out.push(cur.clone());
            }
        }
    }
    out
}

/// Refuses `dir` as a place for rctl's state unless only the user running
/// rctl can change it: `dir` must be a directory owned by that user and
/// writable by nobody else, and every directory above it owned by root or
/// that user and writable by nobody else (unless sticky, as /tmp is).
/// The error says how to fix it.
pub fn check_private_dir(dir: &Path) -> Result<(), FsError> {
    let me = euid();
    let md =
        std::fs::metadata(dir).map_err(|e| io(format!("{}: {}", dir.display(), io_error(&e))))?;
    let shown = dir.display();
    if !md.is_dir() {
        return Err(unsafe_dir(format!(
            "{shown} is not a directory: rctl keeps its state there (move it away)"
        )));
    }
    if md.uid() != me {
        return Err(unsafe_dir(format!(
            "refusing to use {shown}: it is owned by uid {}, not by {} who runs rctl, so \
             someone else could change what rctl trusts there (fix: chown {} {shown})",
            md.uid(),
            owner(me),
            owner(me)
        )));
    }
    let mode = md.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "refusing to use {shown}: it is writable by {} (mode {mode:04o}), who could \
             then switch enforcement off or plant files rctl trusts (fix: chmod 0700 {shown})",
            writers(mode)
        )));
    }
    for a in ancestors(dir) {
        let Ok(md) = std::fs::metadata(&a) else {
            continue;
        };
        let mode = md.permissions().mode() & 0o7777;
        let shown_a = a.display();
        if md.uid() != 0 && md.uid() != me {
            return Err(unsafe_dir(format!(
                "refusing to use {shown}: {shown_a} above it is owned by uid {}, who could \
                 replace it (fix: chown root {shown_a})",
                md.uid()
            )));
        }
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(unsafe_dir(format!(
                "refusing to use {shown}: {shown_a} above it is writable by {} (mode \
                 {mode:04o}), who could replace it (fix: chmod go-w {shown_a})",
                writers(mode)
            )));
        }
    }
    Ok(())
}

fn writers(mode: u32) -> &'static str {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "its group and others",
        (true, false) => "its group",
        _ => "others",
    }
}

/// Makes `dir` a private directory: created with mode 0700 if missing
/// (and its missing parents 0755), then checked ([`check_private_dir`]).
/// Directories it created are pushed on `created`, parents first.
pub fn ensure_private_dir(dir: &Path, created: &mut Vec<PathBuf>) -> Result<(), FsError> {
    let mut missing = Vec::new();
    let mut p = Some(dir);
    while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(d) {
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::NotFound => missing.push(d.to_path_buf()),
            Err(e) => return Err(io(format!("{}: {}", d.display(), io_error(&e)))),
        }
        p = d.parent();
    }
    for d in missing.iter().rev() {
        let mode = if d == dir { DIR_MODE } else { PARENT_MODE };
        match std::fs::DirBuilder::new().mode(mode).create(d) {
            Ok(()) => {
                // The umask may have taken bits away: set them exactly.
                std::fs::set_permissions(d, Permissions::from_mode(mode))
                    .map_err(|e| io(format!("chmod {}: {}", d.display(), io_error(&e))))?;
                created.push(d.clone());
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(io(format!("creating {}: {}", d.display(), io_error(&e))));
            }
        }
    }
    check_private_dir(dir)
}

/// Removes `dirs` (deepest first) where they are empty; others stay.
pub fn remove_empty(dirs: &[PathBuf]) {
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}

use crate::unpredictable;

/// Writes `bytes` to `path` whole or not at all, with mode `mode` whatever
/// the umask: a temporary file with an unpredictable name beside it
/// (`O_CREAT | O_EXCL | O_NOFOLLOW`, so nothing planted there is
/// followed or reused), synced, renamed over `path`, then the directory
/// synced. A symbolic link at `path` is replaced, not written through.
fn replace(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FsError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "rctl".into());
    let fail = |what: &str, e: &std::io::Error| {
        io(format!(
            "writing {} ({what}): {}",
            path.display(),
            io_error(e)
        ))
    };
    let (tmp, mut f) = loop {
        let tmp = dir.join(format!(".{name}.{:032x}.tmp", unpredictable()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail("creating a temporary file", &e)),
        }
    };
    let written = f
        .set_permissions(Permissions::from_mode(mode))
        .and_then(|()| f.write_all(bytes))
        .and_then(|()| f.sync_all())
        .map_err(|e| fail("writing", &e))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| fail("renaming into place", &e)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir);
    Ok(())
}

/// Makes a rename or removal in `dir` durable (best effort).
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes one of rctl's state files (mode 0600), whole or not at all.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    replace(path, bytes, FILE_MODE)
}

/// Writes `bytes` to `path` whole or not at all (see the module docs):
/// readers see the old file or the new, never a part, and nothing planted
/// at a temporary name is followed. The file keeps the mode of the file
/// it replaces, else gets 0644.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    let mode = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map_or(0o644, |m| m.permissions().mode() & 0o7777);
    replace(path, bytes, mode)
}

/// Renames `from` over `to` (same directory) and syncs the directory.
pub fn rename_durably(from: &Path, to: &Path) -> Result<(), FsError> {
    std::fs::rename(from, to).map_err(|e| {
        io(format!(
            "renaming {} to {}: {}",
            from.display(),
            to.display(),
            io_error(&e)
        ))
    })?;
    if let Some(d) = to.parent() {
        sync_dir(d);
    }
    Ok(())
}

/// The most rctl reads of one of its own files: metadata runs to a few MB
/// for 50,000 rules; an artifact with millions of prefixes to tens of MB.
const READ_LIMIT: u64 = 1 << 30;

/// Reads one of rctl's state files: a regular file, not through a
/// symbolic link, and at most [`READ_LIMIT`] bytes.
pub fn read_private(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let mut out = Vec::new();
    f.take(READ_LIMIT + 1).read_to_end(&mut out)?;
    if out.len() as u64 > READ_LIMIT {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("larger than {READ_LIMIT} bytes"),
        ));
    }
    Ok(out)
}

/// Removes a file if it is there.
pub fn remove_file(path: &Path) -> Result<(), FsError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(io(format!("removing {}: {}", path.display(), io_error(&e))))
        }
        _ => Ok(()),
    }
}

/// Waits for an exclusive or shared `flock` on `file` (the standard
/// library's `File::lock` needs Rust 1.89, past this crate's MSRV).
#[expect(unsafe_code, reason = "flock(2) on a descriptor the File owns")]
fn flock(file: &File, exclusive: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    loop {
        // SAFETY: the descriptor is open for as long as `file` lives, and
        // flock only reads it.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// An interface's lock: `flock` on `RUN/IF.lock`, exclusive for a writer
/// (apply, detach), shared for a reader (status). Released when dropped
/// (or when the process dies).
pub struct Lock {
    file: File,
    path: PathBuf,
}

impl Lock {
    /// Waits for the lock on `path`, creating the file (0600) if needed.
    /// A writer may remove the file while it holds it; a waiter that then
    /// gets the lock on the removed file tries again on the new one.
    pub fn acquire(path: &Path, exclusive: bool) -> Result<Lock, FsError> {
        let fail = |e: &std::io::Error| io(format!("locking {}: {}", path.display(), io_error(e)));
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(FILE_MODE)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(|e| fail(&e))?;
            file.set_permissions(Permissions::from_mode(FILE_MODE))
                .map_err(|e| fail(&e))?;
            flock(&file, exclusive).map_err(|e| fail(&e))?;
            let held = file.metadata().map_err(|e| fail(&e))?;
            match std::fs::symlink_metadata(path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Lock {
                        file,
                        path: path.to_path_buf(),
                    });
                }
                _ => continue,
            }
        }
    }

    /// Removes the lock file, then releases the lock (writers only: the
    /// interface has no state left).
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "rctl-files-{tag}-{}-{:x}",
            std::process::id(),
            unpredictable() as u32
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let d = tmp("symlink");
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let target = d.join("state.json");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        write_private(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(mode(&target), 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn write_atomic_keeps_the_mode_it_replaces() {
        let d = tmp("mode");
        let f = d.join("out");
        write_atomic(&f, b"a").unwrap();
        assert_eq!(mode(&f), 0o644);
        std::fs::set_permissions(&f, Permissions::from_mode(0o640)).unwrap();
        write_atomic(&f, b"b").unwrap();
        assert_eq!(mode(&f), 0o640);
        assert_eq!(std::fs::read(&f).unwrap(), b"b");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn temporary_names_are_unpredictable() {
        let a: Vec<u128> = (0..1000).map(|_| unpredictable()).collect();
        let mut b = a.clone();
        b.sort_unstable();
        b.dedup();
        assert_eq!(a.len(), b.len());
    }

    #[test]
    fn private_dirs_ignore_the_umask_and_refuse_loose_ones() {
        let d = tmp("dirs");
        let state = d.join("a/b/state");
        let mut created = Vec::new();
        ensure_private_dir(&state, &mut created).unwrap();
        assert_eq!(created, vec![d.join("a"), d.join("a/b"), state.clone()]);
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&d.join("a")), 0o755);
        std::fs::set_permissions(&state, Permissions::from_mode(0o770)).unwrap();
        let e = check_private_dir(&state).unwrap_err().to_string();
        assert!(e.contains("its group") && e.contains("chmod 0700"), "{e}");
        std::fs::set_permissions(&state, Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(d.join("a"), Permissions::from_mode(0o777)).unwrap();
        let e = check_private_dir(&state).unwrap_err().to_string();
        assert!(e.contains("above it") && e.contains("chmod go-w"), "{e}");
        std::fs::set_permissions(d.join("a"), Permissions::from_mode(0o1777)).unwrap();
        check_private_dir(&state).unwrap();
        remove_empty(&created);
        assert!(!d.join("a").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
