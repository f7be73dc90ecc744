//! Where the matched-request log's lines go, and how they get there
//! whole or not at all.
//!
//! - The file is opened with `O_NOFOLLOW` (a symbolic link planted at the
//!   path is refused, not written through), must be a regular file, and
//!   its folder must not be writable by group or others (who could
//!   replace it).
//! - Lines are written in batches. When a write fails part way (a full
//!   disk), the file is cut back to the last whole line, so the first
//!   line written once there is room again starts on a line of its own;
//!   the lines that did not make it are counted as failed, never as
//!   written.
//! - With a size bound, lines that would take the file past it are
//!   counted and not written, until the file is rotated.
//! - [`Out::reopen`] opens the path again (after logrotate moved the
//!   file away).

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The open log.
pub(super) enum Out {
    /// Standard output (nothing to cut back or reopen).
    Stdout,
    /// A file, appended to.
    File {
        file: File,
        path: PathBuf,
        /// Its size (what this writer knows of it).
        size: u64,
    },
}

/// What one batch came to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wrote {
    /// Lines written whole.
    pub written: u64,
    /// Lines a failed write lost.
    pub failed: u64,
    /// Lines left out for the size bound.
    pub over_size: u64,
}

/// Opens `path` for appending: a regular file (created 0640), not through
/// a symbolic link, in a folder only its owner may write.
pub(super) fn open(path: &Path) -> io::Result<Out> {
    let shown = path.display();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let md = std::fs::metadata(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    if md.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{shown}: its folder {} is writable by group or others (mode {:o}), who could \
                 make the log write elsewhere: use a folder only its owner may write, such as \
                 /var/log/rctl",
                dir.display(),
                md.mode() & 0o7777
            ),
        ));
    }
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            let why = if e.raw_os_error() == Some(libc::ELOOP) {
                "it is a symbolic link (refused: the log is never written through one)".to_string()
            } else {
                e.to_string()
            };
            io::Error::new(e.kind(), format!("{shown}: {why}"))
        })?;
    let md = file.metadata()?;
    if !md.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{shown} is not a regular file"),
        ));
    }
    Ok(Out::File {
        file,
        path: path.to_path_buf(),
        size: md.len(),
    })
}

impl Out {
    /// Writes `buf`, whose lines end at `ends` (offsets just past each
    /// newline), whole lines only.
    pub(super) fn write(&mut self, buf: &[u8], ends: &[usize], max_bytes: Option<u64>) -> Wrote {
        let mut w = Wrote::default();
        match self {
            Out::Stdout => {
                let mut out = io::stdout().lock();
                if out.write_all(buf).and_then(|()| out.flush()).is_ok() {
                    w.written = ends.len() as u64;
                } else {
                    w.failed = ends.len() as u64;
                }
            }
            Out::File { file, size, .. } => {
                // The lines that fit under the bound.
                let room = max_bytes.map_or(u64::MAX, |m| m.saturating_sub(*size));
                let fit = ends.iter().take_while(|&&e| e as u64 <= room).count();
                w.over_size = (ends.len() - fit) as u64;
                let want = if fit == 0 { 0 } else { ends[fit - 1] };
                let mut done = 0usize;
                while done < want {
                    match file.write(&buf[done..want]) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                let whole = ends[..fit].iter().take_while(|&&e| e <= done).count();
                let keep = if whole == 0 { 0 } else { ends[whole - 1] };
                if keep < done {
                    // A torn line: cut the file back to the last whole one.
                    let _ = file.set_len(*size + keep as u64);
                }
                *size += keep as u64;
                w.written = whole as u64;
                w.failed = (fit - whole) as u64;
            }
        }
        w
    }

    /// Opens the path again (the file may have been moved away); on
    /// failure the open file stays in use.
    pub(super) fn reopen(&mut self) -> io::Result<()> {
        if let Out::File { path, .. } = self {
            let fresh = open(&path.clone())?;
            *self = fresh;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rctl-out-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn lines(n: usize) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for i in 0..n {
            buf.extend_from_slice(format!("{{\"line\":{i}}}\n").as_bytes());
            ends.push(buf.len());
        }
        (buf, ends)
    }

    #[test]
    fn links_shared_folders_and_other_files_are_refused() {
        let d = dir("refuse");
        let target = d.join("secret");
        std::fs::write(&target, "root only\n").unwrap();
        let link = d.join("log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open(&link).err().unwrap();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "root only\n");
        let shared = d.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = open(&shared.join("log")).err().unwrap();
        assert!(e.to_string().contains("writable by group or others"), "{e}");
        assert!(open(&d).is_err(), "a folder is not a log");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_size_bound_keeps_whole_lines_and_counts_the_rest() {
        let d = dir("bound");
        let p = d.join("log");
        let mut out = open(&p).unwrap();
        let (buf, ends) = lines(10);
        let bound = ends[3] as u64 + 2;
        let w = out.write(&buf, &ends, Some(bound));
        assert_eq!(
            w,
            Wrote {
                written: 4,
                failed: 0,
                over_size: 6
            }
        );
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert!(text.ends_with('\n'));
        // Rotated away: a new file has room again.
        std::fs::rename(&p, d.join("log.1")).unwrap();
        out.reopen().unwrap();
        assert_eq!(out.write(&buf, &ends, Some(bound)).written, 4);
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 4);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn on_a_full_disk_no_line_is_torn_and_lost_lines_are_failures() {
        // /dev/full fails every write with ENOSPC, as a full disk does.
        let Ok(file) = std::fs::OpenOptions::new().append(true).open("/dev/full") else {
            return;
        };
        let mut out = Out::File {
            file,
            path: "/dev/full".into(),
            size: 0,
        };
        let (buf, ends) = lines(5);
        assert_eq!(
            out.write(&buf, &ends, None),
            Wrote {
                written: 0,
                failed: 5,
                over_size: 0
            }
        );
    }
}
