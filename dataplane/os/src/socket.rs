//! Unix sockets that nobody can reach before they have their final owner
//! and mode.
//!
//! `bind(2)` creates the socket file with the process's umask, so binding
//! at the final path and then `chmod`-ing it leaves a window in which any
//! local user may connect (under umask 000, an unprivileged client that
//! spins on `connect()` wins it most of the time). [`bind`] closes that
//! window: it binds inside a fresh folder of mode 0700 beside the final
//! path, sets the socket's mode and group there, and only then renames it
//! into place. The rename is atomic, so the path shows either the old
//! file or the finished socket, never a socket with the umask's mode.
//!
//! The folder the socket goes in must not be writable by group or
//! others (a writer could replace the socket); a missing one is created.
//! A socket file left by a process that is gone is replaced; a live one
//! (something answers on it) or any other kind of file is an error.

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Who may open the socket file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The socket file's mode (the low 9 bits; 0600 is owner only).
    pub mode: u32,
    /// The socket file's group (`None`: the process's own).
    pub group: Option<u32>,
}

impl Access {
    /// Mode 0600: only the owner (and root).
    pub const OWNER: Access = Access {
        mode: 0o600,
        group: None,
    };

    /// Mode 0660, group `gid`: the owner and that group.
    pub fn group(gid: u32) -> Access {
        Access {
            mode: 0o660,
            group: Some(gid),
        }
    }
}

/// Why a socket could not be bound.
#[derive(Debug)]
pub struct BindError {
    /// The socket's path.
    pub path: PathBuf,
    /// What kind of failure.
    pub kind: BindErrorKind,
}

/// The kinds of [`BindError`].
#[derive(Debug)]
#[non_exhaustive]
pub enum BindErrorKind {
    /// Another process answers on the path.
    InUse,
    /// Something other than a socket is at the path.
    NotASocket,
    /// The folder is not a folder, or others could replace the socket in it.
    UnsafeFolder(String),
    /// The mode has bits other than read and write.
    BadMode(u32),
    /// A system call failed.
    Io(&'static str, io::Error),
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        match &self.kind {
            BindErrorKind::InUse => write!(
                f,
                "{p}: another process is listening there (another rctl serve?)"
            ),
            BindErrorKind::NotASocket => write!(
                f,
                "{p} exists and is not a socket: remove it or choose another path"
            ),
            BindErrorKind::UnsafeFolder(why) => write!(f, "{p}: {why}"),
            BindErrorKind::BadMode(m) => write!(
                f,
                "{p}: mode {m:04o}: a socket's mode takes read and write bits only (such as 0600 or 0660)"
            ),
            BindErrorKind::Io(what, e) => write!(f, "{p}: {what}: {e}"),
        }
    }
}

impl std::error::Error for BindError {}

/// The socket file a listener made: removed on drop if the path still
/// names the same file (another process may have replaced it since).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    id: (u64, u64),
}

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.id {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Binds a unix stream socket at `path` with `access`, never reachable
/// with another mode or group (see the module's docs). The listener is
/// blocking; set it non-blocking for an async runtime.
pub fn bind(path: &Path, access: Access) -> Result<(UnixListener, SocketFile), BindError> {
    let fail = |kind| BindError {
        path: path.to_path_buf(),
        kind,
    };
    let io = |what: &'static str| move |e: io::Error| fail(BindErrorKind::Io(what, e));
    if access.mode & !0o666 != 0 {
        return Err(fail(BindErrorKind::BadMode(access.mode)));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    folder(dir, access).map_err(|why| fail(BindErrorKind::UnsafeFolder(why)))?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(BindErrorKind::Io("reading", e))),
        Ok(m) if !m.file_type().is_socket() => return Err(fail(BindErrorKind::NotASocket)),
        Ok(_) => {
            if UnixStream::connect(path).is_ok() {
                return Err(fail(BindErrorKind::InUse));
            }
            // Nobody answers: a socket left by a process that is gone,
            // replaced by the rename below.
        }
    }
    let tmp = dir.join(format!(".rctl-{:016x}", crate::unpredictable() as u64));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(io("creating a private folder to bind in"))?;
    let result = (|| {
        let inner = tmp.join("s");
        let listener = UnixListener::bind(&inner).map_err(io("bind"))?;
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(access.mode))
            .map_err(io("chmod"))?;
        if let Some(gid) = access.group {
            std::os::unix::fs::chown(&inner, None, Some(gid)).map_err(io("chgrp"))?;
        }
        std::fs::rename(&inner, path).map_err(io("moving the socket into place"))?;
        let m = std::fs::symlink_metadata(path).map_err(io("reading"))?;
        Ok((
            listener,
            SocketFile {
                path: path.to_path_buf(),
                id: (m.dev(), m.ino()),
            },
        ))
    })();
    let _ = std::fs::remove_file(tmp.join("s"));
    let _ = std::fs::remove_dir(&tmp);
    result
}

/// How many finished connections a listener's queue holds before the
/// kernel drops new ones (capped by `net.core.somaxconn`, 4096 by default
/// since Linux 5.4). The standard library listens with 128, which a local
/// user's reconnect loop fills: a proxy's connection that finds the queue
/// full waits a second for its SYN's retransmission, past any check
/// deadline.
pub const BACKLOG: i32 = 4096;

/// Sets a listening socket's queue length to [`BACKLOG`]: `listen(2)`
/// again on a socket that listens already only changes its backlog.
pub fn deepen_backlog(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: listen() takes a descriptor the borrow keeps open and an int.
    if unsafe { libc::listen(fd.as_raw_fd(), BACKLOG) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Checks the socket's folder, creating it if missing: 0700, or 0750 with
/// the socket's group when the group may connect (it must reach the
/// socket through the folder), or 0755 when others may.
fn folder(dir: &Path, access: Access) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mode = if access.mode & 0o006 != 0 {
                0o755
            } else if access.mode & 0o060 != 0 && access.group.is_some() {
                0o750
            } else {
                0o700
            };
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
            if mode == 0o750 {
                std::os::unix::fs::chown(dir, None, access.group)
                    .map_err(|e| format!("chgrp {}: {e}", dir.display()))?;
            }
            Ok(())
        }
        Err(e) => Err(format!("{}: {e}", dir.display())),
        Ok(m) if !m.is_dir() => Err(format!("{} is not a folder", dir.display())),
        Ok(m) if m.mode() & 0o022 != 0 => Err(format!(
            "folder {} is writable by group or others (mode {:o}), who could replace the \
             socket: put it in a folder only its owner may write, such as /run/rctl",
            dir.display(),
            m.mode() & 0o7777
        )),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rctl-os-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_socket_has_its_mode_and_group_a_live_one_and_other_files_are_refused() {
        let d = tempdir("bind");
        let p = d.join("run/s.sock");
        let (live, file) = bind(&p, Access::OWNER).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(d.join("run")).unwrap().mode() & 0o777,
            0o700
        );
        // Nothing is left beside it.
        let names: Vec<_> = std::fs::read_dir(d.join("run"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["s.sock"]);
        assert!(matches!(
            bind(&p, Access::OWNER).unwrap_err().kind,
            BindErrorKind::InUse
        ));
        drop(live);
        // A socket nobody answers on is replaced, and the old SocketFile
        // does not remove the new one. Its group: any as root, one of its
        // own groups otherwise (all a user may give a file).
        let group = if crate::users::euid() == 0 {
            4242
        } else {
            crate::users::egid()
        };
        let (_again, file2) = bind(&p, Access::group(group)).unwrap();
        drop(file);
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.mode() & 0o777, m.gid()), (0o660, group));
        drop(file2);
        assert!(!p.exists());
        let f = d.join("run/file");
        std::fs::write(&f, "keep").unwrap();
        assert!(matches!(
            bind(&f, Access::OWNER).unwrap_err().kind,
            BindErrorKind::NotASocket
        ));
        assert_eq!(std::fs::read(&f).unwrap(), b"keep");
        let wide = d.join("wide");
        std::fs::create_dir(&wide).unwrap();
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = bind(&wide.join("s"), Access::OWNER).unwrap_err();
        assert!(e.to_string().contains("writable by group or others"), "{e}");
        assert!(matches!(
            bind(
                &d.join("x"),
                Access {
                    mode: 0o4755,
                    group: None
                }
            )
            .unwrap_err()
            .kind,
            BindErrorKind::BadMode(_)
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn under_umask_000_the_path_never_shows_a_socket_others_may_open() {
        // The socket is bound in a 0700 folder and renamed into place
        // with its mode set: whatever the umask, every time the final
        // path exists it already has mode 0600.
        let d = tempdir("umask");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("c.sock");
        // SAFETY: umask only swaps the process's file mode mask.
        let old = unsafe { libc::umask(0) };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(m) = std::fs::symlink_metadata(&p) {
                        seen.insert(m.mode() & 0o777);
                    }
                }
                seen
            })
        };
        for _ in 0..200 {
            let (l, f) = bind(&p, Access::OWNER).unwrap();
            drop(l);
            drop(f);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let seen: Vec<String> = watcher
            .join()
            .unwrap()
            .iter()
            .map(|m| format!("{m:o}"))
            .collect();
        assert!(!seen.is_empty());
        assert!(seen.iter().all(|m| m == "600"), "{seen:?}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
