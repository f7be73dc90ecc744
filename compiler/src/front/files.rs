//! Reading files safely: where a ruleset may read ([`Roots`]), what it may
//! read (regular files, within a size limit) and how directories are walked.
//!
//! The compiler runs as root on edge hosts, so a rule file must not be able
//! to make it read `/etc/shadow` (and echo it in diagnostics), block on a
//! FIFO, or read `/dev/zero` until memory runs out.

use crate::diag::{code, Diagnostic};
use crate::source::{SourceMap, Span};
use std::collections::HashSet;
use std::fs::{File, Metadata};
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The directories a ruleset may read below, canonical (symlinks resolved).
///
/// They are the directories named on the command line, the directory of
/// each file named there, and every extra root given explicitly
/// ([`crate::Options::allow_paths`], `rctl --allow-path`). `include` and
/// `file` paths, and every file a directory walk finds, must resolve (after
/// symlinks) below one of them.
#[derive(Debug, Clone, Default)]
pub struct Roots {
    dirs: Vec<PathBuf>,
}

impl Roots {
    /// The roots of a ruleset read from `inputs` (files and directories as
    /// given on the command line), plus the explicitly allowed `extra`
    /// paths. An input that cannot be resolved adds nothing (reading it
    /// reports the error); an extra path that cannot be resolved is an error.
    pub fn new(inputs: &[PathBuf], extra: &[PathBuf]) -> (Roots, Vec<Diagnostic>) {
        let mut roots = Roots::default();
        let mut errors = Vec::new();
        for p in inputs {
            let dir = if p.is_dir() {
                p.as_path()
            } else {
                p.parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
            };
            if let Ok(c) = std::fs::canonicalize(dir) {
                roots.push(c);
            }
        }
        for p in extra {
            match std::fs::canonicalize(p) {
                Ok(c) => roots.push(c),
                Err(e) => errors.push(
                    Diagnostic::error(
                        code::IO,
                        format!("cannot use the allowed path `{}`: {e}", p.display()),
                    )
                    .hint("`--allow-path` takes an existing directory (or file)"),
                ),
            }
        }
        (roots, errors)
    }

    fn push(&mut self, dir: PathBuf) {
        if !self.dirs.contains(&dir) {
            self.dirs.push(dir);
        }
    }

    /// Whether a canonical path is one of the roots or below one.
    pub fn contains(&self, canonical: &Path) -> bool {
        self.dirs.iter().any(|d| canonical.starts_with(d))
    }

    /// The roots, for messages.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Resolves `path` (symlinks included) and checks that it is below a
    /// root; returns the canonical path.
    ///
    /// A path that does not exist is placed where it would be (its
    /// longest existing ancestor resolved, the rest appended): outside the
    /// roots it is the same "outside" error as an existing one, so that a
    /// rule file cannot probe which files exist elsewhere.
    pub fn resolve(&self, path: &Path) -> Result<PathBuf, LoadError> {
        let canonical = match std::fs::canonicalize(path) {
            Ok(c) => c,
            Err(e) => {
                let would = would_be(path);
                return Err(if self.contains(&would) {
                    LoadError::Io(e)
                } else {
                    self.outside(would)
                });
            }
        };
        if self.contains(&canonical) {
            Ok(canonical)
        } else {
            Err(self.outside(canonical))
        }
    }

    /// The canonical path of a file to read: below a root if `confined`
    /// (a file found by a walk, or named by `include` or `file`), else as
    /// given (a file named on the command line), resolved where it exists.
    pub fn locate(&self, path: &Path, confined: bool) -> Result<PathBuf, LoadError> {
        if confined {
            self.resolve(path)
        } else {
            Ok(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
        }
    }

    /// Reads a file as [`read_source`] does: if `confined`, only below a
    /// root and through no symlink that leads out; else as given.
    pub fn read(&self, path: &Path, confined: bool, max_bytes: usize) -> Result<String, LoadError> {
        if confined {
            read_source(&self.resolve(path)?, Some(self), max_bytes)
        } else {
            read_source(path, None, max_bytes)
        }
    }

    fn outside(&self, resolved: PathBuf) -> LoadError {
        LoadError::Outside {
            resolved,
            roots: self.list(),
        }
    }

    /// The roots as a quoted, comma-separated list.
    fn list(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("`{}`", d.display()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where a path that does not exist would be: its longest existing
/// ancestor, symlinks resolved, with the rest appended (`.` and `..`
/// folded: a component that does not exist cannot be a symlink).
fn would_be(path: &Path) -> PathBuf {
    use std::path::Component;
    let parts: Vec<Component<'_>> = path.components().collect();
    for k in (0..=parts.len()).rev() {
        let prefix: PathBuf = parts[..k].iter().collect();
        let prefix = if prefix.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            prefix
        };
        if let Ok(mut base) = std::fs::canonicalize(&prefix) {
            for c in &parts[k..] {
                match c {
                    Component::ParentDir => {
                        base.pop();
                    }
                    Component::Normal(n) => base.push(n),
                    _ => {}
                }
            }
            return base;
        }
    }
    path.to_path_buf()
}

/// What kind of file this is, for "not a regular file" messages: "a FIFO",
/// "a character device", "a directory", ...
pub fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

fn regular(meta: &Metadata) -> Result<(), LoadError> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(LoadError::NotRegular(kind(meta)))
    }
}

/// Opens a regular file for reading, and nothing else: the type is checked
/// before opening (a device is never opened) and again on the opened file
/// (what was checked is what is read). `O_NONBLOCK` keeps a FIFO swapped in
/// between the two from blocking the open.
///
/// With `roots`, `path` must be canonical and below a root, the last
/// component must not be a symlink (`O_NOFOLLOW`), and the opened file's
/// own path (`/proc/self/fd`) must be below a root too, so that a directory
/// swapped for a symlink after [`Roots::resolve`] cannot lead outside.
pub fn open_regular(path: &Path, roots: Option<&Roots>) -> Result<File, LoadError> {
    regular(&std::fs::metadata(path).map_err(LoadError::Io)?)?;
    let mut flags = libc::O_NONBLOCK;
    if roots.is_some() {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(LoadError::Io)?;
    regular(&file.metadata().map_err(LoadError::Io)?)?;
    if let Some(roots) = roots {
        use std::os::fd::AsRawFd as _;
        // Where /proc is not mounted, the check before opening stands.
        if let Ok(real) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            if !roots.contains(&real) {
                return Err(roots.outside(real));
            }
        }
    }
    Ok(file)
}

/// Reads at most `max_bytes` of an opened file as UTF-8 text. The limit
/// holds while reading (at most `max_bytes + 1` bytes are read), whatever
/// the metadata says: `/proc` files report a size of 0.
pub fn read_text(file: File, max_bytes: usize) -> Result<String, LoadError> {
    let limit = max_bytes as u64;
    let hint = file.metadata().map_or(0, |m| m.len()).min(limit) as usize;
    let mut bytes = Vec::with_capacity(hint);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(LoadError::Io)?;
    if bytes.len() > max_bytes {
        return Err(LoadError::TooLarge(limit));
    }
    String::from_utf8(bytes).map_err(|e| LoadError::NotUtf8 {
        valid_up_to: e.utf8_error().valid_up_to(),
        bytes: e.into_bytes(),
    })
}

/// Reads one regular file as UTF-8 text, within a size limit (see
/// [`open_regular`] for `roots`).
pub fn read_source(
    path: &Path,
    roots: Option<&Roots>,
    max_bytes: usize,
) -> Result<String, LoadError> {
    read_text(open_regular(path, roots)?, max_bytes)
}

/// A directory walk's result: the files found, and what went wrong.
#[derive(Debug, Default)]
pub struct Walk {
    /// Every `.rctl` file found, in walk order (sorted by path, depth first).
    pub files: Vec<PathBuf>,
    /// Errors: links that lead outside the roots, unreadable entries, too
    /// deep a tree.
    pub errors: Vec<Diagnostic>,
}

/// Every `.rctl` file under `dir`, recursively, sorted by path; hidden
/// entries are skipped.
///
/// The walk follows a symlink only to a directory or file below one of the
/// `roots` (a link that leads elsewhere is an error naming it), enters each
/// directory once (by device and inode, so symlink loops end), and goes at
/// most `max_depth` directories deep.
pub fn rctl_files(dir: &Path, roots: &Roots, max_depth: usize) -> Walk {
    let mut w = Walker {
        roots,
        max_depth,
        visited: HashSet::new(),
        out: Walk::default(),
    };
    match std::fs::metadata(dir) {
        Ok(m) => {
            w.visited.insert((m.dev(), m.ino()));
            w.dir(dir, 0);
        }
        Err(e) => w.io(dir, &e),
    }
    w.out
}

struct Walker<'a> {
    roots: &'a Roots,
    max_depth: usize,
    visited: HashSet<(u64, u64)>,
    out: Walk,
}

fn is_rctl(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "rctl")
}

impl Walker<'_> {
    fn io(&mut self, p: &Path, e: &std::io::Error) {
        self.out.errors.push(Diagnostic::error(
            code::IO,
            format!("cannot read `{}`: {e}", p.display()),
        ));
    }

    fn dir(&mut self, dir: &Path, depth: usize) {
        let entries = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => return self.io(dir, &e),
        };
        let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            if p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'))
            {
                continue;
            }
            let Some(meta) = self.follow(&p) else {
                continue;
            };
            if meta.is_dir() {
                if !self.visited.insert((meta.dev(), meta.ino())) {
                    continue; // a loop, or a second way into one directory
                }
                if depth + 1 > self.max_depth {
                    self.out.errors.push(
                        Diagnostic::error(
                            code::LIMIT,
                            format!(
                                "`{}` is nested more than {} directories deep",
                                p.display(),
                                self.max_depth
                            ),
                        )
                        .hint("name the deeper directory on the command line"),
                    );
                    continue;
                }
                self.dir(&p, depth + 1);
            } else if is_rctl(&p) {
                self.out.files.push(p);
            }
        }
    }

    /// The metadata of an entry, following a symlink only where it stays
    /// below a root; `None` for entries to skip.
    fn follow(&mut self, p: &Path) -> Option<Metadata> {
        match follow(p, self.roots, is_rctl(p)) {
            Ok(m) => m,
            Err(LoadError::Outside { resolved, roots }) => {
                let d = outside_diagnostic(p, &resolved, &roots);
                self.out.errors.push(d);
                None
            }
            Err(LoadError::Io(e)) => {
                self.io(p, &e);
                None
            }
            Err(other) => {
                let e = std::io::Error::other(format!("{other:?}"));
                self.io(p, &e);
                None
            }
        }
    }
}

/// What a directory walk finds at `p`, following a symlink only where it
/// stays below one of the `roots`: the policy of [`rctl_files`], for any
/// walk that reads below a root.
///
/// - `Ok(Some(meta))`: the entry (for a symlink, what it leads to, below a
///   root, or a file the walk would not read anyway);
/// - `Ok(None)`: a symlink to skip: dangling or self-referencing (unless
///   `wanted`), or leading to a file that is not `wanted`;
/// - `Err(LoadError::Outside)`: a symlink to a directory, or to a `wanted`
///   file, that leads outside the roots (nothing of it is read);
/// - `Err(LoadError::Io)`: the entry cannot be examined, or a `wanted`
///   symlink is dangling.
///
/// `wanted` says whether the walk would read the entry as a file (its name
/// is one the walk reads, such as `*.rctl`). Nothing is opened: a FIFO or a
/// device is only examined.
pub fn follow(p: &Path, roots: &Roots, wanted: bool) -> Result<Option<Metadata>, LoadError> {
    let meta = std::fs::symlink_metadata(p).map_err(LoadError::Io)?;
    if !meta.file_type().is_symlink() {
        return Ok(Some(meta));
    }
    let target = match std::fs::canonicalize(p) {
        Ok(t) => t,
        // A dangling or self-referencing link: an error only where it
        // claims to be a file the walk reads.
        Err(e) if wanted => return Err(LoadError::Io(e)),
        Err(_) => return Ok(None),
    };
    let meta = std::fs::metadata(&target).map_err(LoadError::Io)?;
    if !meta.is_dir() && !wanted {
        return Ok(None);
    }
    if !roots.contains(&target) {
        return Err(roots.outside(target));
    }
    Ok(Some(meta))
}

/// Largest binary input rctl reads whole: a compiled artifact or the XDP
/// object (an artifact holding every limit's worth of prefixes and
/// regexes is far smaller).
pub const MAX_BINARY_BYTES: usize = 1 << 30;

/// Reads a compiled artifact or another binary input whole: regular files
/// only (a device, FIFO or socket is refused without being read, as rule
/// files are), and at most `max_bytes`, a limit held while reading. The
/// error says which, as an [`std::io::Error`] for the caller's context.
pub fn read_binary(path: &Path, max_bytes: usize) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    let file = open_regular(path, None).map_err(|e| match e {
        LoadError::Io(e) => e,
        LoadError::NotRegular(kind) => Error::new(
            ErrorKind::InvalidInput,
            format!("it is {kind}, not a regular file (devices, FIFOs and sockets are never read)"),
        ),
        other => Error::other(format!("{other:?}")),
    })?;
    let limit = max_bytes as u64;
    let mut bytes = Vec::with_capacity(file.metadata().map_or(0, |m| m.len()).min(limit) as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() > max_bytes {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("it is larger than the {} MiB limit", max_bytes >> 20),
        ));
    }
    Ok(bytes)
}

/// Why a source could not be read.
#[derive(Debug)]
pub enum LoadError {
    /// The OS said no.
    Io(std::io::Error),
    /// The bytes are not UTF-8; `valid_up_to` is the offset of the first bad one.
    NotUtf8 {
        /// Offset of the first invalid byte.
        valid_up_to: usize,
        /// The file's bytes.
        bytes: Vec<u8>,
    },
    /// Larger than the limit (in bytes).
    TooLarge(u64),
    /// Not a regular file: what it is ("a FIFO", "a character device", ...).
    NotRegular(&'static str),
    /// The path resolves outside the ruleset's roots ([`Roots`]).
    Outside {
        /// Where the path leads, symlinks resolved.
        resolved: PathBuf,
        /// The roots, quoted, for the hint.
        roots: String,
    },
}

/// The diagnostic for a path that leads outside the ruleset's roots.
pub(crate) fn outside_diagnostic(path: &Path, resolved: &Path, roots: &str) -> Diagnostic {
    let leads = if path == resolved {
        String::new()
    } else {
        format!(" (it leads to `{}`)", resolved.display())
    };
    Diagnostic::error(
        code::OUTSIDE_ROOT,
        format!("`{}` is outside the ruleset's root{leads}", path.display()),
    )
    .hint(format!(
        "rules may read only below the directory named on the command line, or the \
         directory of a file named there ({roots}); to read elsewhere, allow the \
         directory with `--allow-path DIR`"
    ))
}

/// The hint for a path named on the command line that does not exist:
/// the nearest name beside it, or which part of it is missing.
fn missing_hint(path: &Path) -> String {
    let parent = match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => return "give a .rctl file, or a directory of them".into(),
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return format!(
            "`{}` does not exist either: give a .rctl file, or a directory of them",
            parent.display()
        );
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let wanted = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match crate::diag::nearest(&wanted, names.iter().map(String::as_str)) {
        Some(n) => format!("did you mean `{}`?", parent.join(n).display()),
        None => format!(
            "no such file in `{}`: give a .rctl file, or a directory of them",
            parent.display()
        ),
    }
}

impl LoadError {
    /// Turns the error into a diagnostic. Non-UTF-8 files are added to the
    /// map (lossily) so that the diagnostic can point at the bad byte.
    pub fn into_diagnostic(
        self,
        map: &mut SourceMap,
        from: Option<Span>,
        path: &Path,
    ) -> Diagnostic {
        let d = match self {
            LoadError::Io(e) => {
                let hint = match (e.kind(), from) {
                    (std::io::ErrorKind::NotFound, Some(_)) => {
                        "paths in `include` and `file` are relative to the file that names them"
                            .to_string()
                    }
                    (std::io::ErrorKind::NotFound, None) => missing_hint(path),
                    _ => "check the file's permissions".to_string(),
                };
                Diagnostic::error(code::IO, format!("cannot read `{}`: {e}", path.display()))
                    .hint(hint)
            }
            LoadError::TooLarge(n) => Diagnostic::error(
                code::TOO_LARGE,
                format!("`{}` is over the size limit of {n} bytes", path.display()),
            )
            .hint("split the file, or raise the limit"),
            LoadError::NotRegular(kind) => Diagnostic::error(
                code::NOT_REGULAR,
                format!("`{}` is {kind}, not a regular file", path.display()),
            )
            .hint("rule and list files must be regular files; devices, FIFOs and sockets are never read"),
            LoadError::Outside { resolved, roots } => outside_diagnostic(path, &resolved, &roots),
            LoadError::NotUtf8 { valid_up_to, bytes } => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let id = map.add(path.to_path_buf(), text);
                let span = map
                    .get(id)
                    .map(|f| f.span(id, valid_up_to, valid_up_to + 1))
                    .unwrap_or_default();
                return Diagnostic::error(
                    code::NOT_UTF8,
                    format!(
                        "`{}` is not valid UTF-8 (byte offset {valid_up_to})",
                        path.display()
                    ),
                )
                .primary(span, "invalid byte here")
                .hint("rule and list files must be UTF-8 text");
            }
        };
        match from {
            Some(s) => d.primary(s, "named here"),
            None => d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc` files report a size of 0 whatever they hold: only a limit
    /// enforced while reading catches them.
    #[test]
    fn size_limit_holds_while_reading() {
        let status = Path::new("/proc/self/status");
        let all = read_source(status, None, 1 << 20).unwrap();
        assert!(all.len() > 100, "{all}");
        assert_eq!(std::fs::metadata(status).unwrap().len(), 0);
        assert!(matches!(
            read_source(status, None, 100),
            Err(LoadError::TooLarge(100))
        ));
    }

    #[test]
    fn devices_and_directories_are_not_opened() {
        for (p, want) in [
            ("/dev/zero", "a character device"),
            ("/dev/urandom", "a character device"),
            ("/", "a directory"),
        ] {
            match read_source(Path::new(p), None, 1 << 20) {
                Err(LoadError::NotRegular(k)) => assert_eq!(k, want, "{p}"),
                other => panic!("{p}: {other:?}"),
            }
        }
    }

    #[test]
    fn roots_contain_by_component() {
        let (r, e) = Roots::new(&[PathBuf::from("/tmp")], &[]);
        assert!(e.is_empty());
        let tmp = std::fs::canonicalize("/tmp").unwrap();
        assert!(r.contains(&tmp.join("x/y")));
        assert!(!r.contains(Path::new("/tmpx/y")));
        assert!(!r.contains(Path::new("/etc/passwd")));
    }
}
