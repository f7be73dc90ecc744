//! Reading requestctl's files under the compiler's rules for rule files
//! ([`rctl_compiler::files`]), for the same reason: `rctl import` may run
//! as root, so a tree must not make it read `/etc/shadow` (and quote it in
//! a diagnostic), block on a FIFO, or read `/dev/zero` until memory runs
//! out.
//!
//! - A tree is read only below its root (the directory named, symlinks
//!   resolved). A symlink is followed only where it leads below the root,
//!   as the compiler's directory walk follows them ([`files::follow`]); one
//!   to a directory or a `.yaml` file elsewhere is an error naming it, and
//!   nothing of it is read. Each file is opened as the compiler opens one
//!   ([`Roots::read`]: `O_NOFOLLOW`, `O_NONBLOCK`, the opened file's own
//!   path checked again).
//! - Only regular files are read: a FIFO, device or socket is an error
//!   naming it, found without opening it (a FIFO never blocks).
//! - A file is read within [`Limits::max_file_bytes`], a tree's files
//!   within [`Limits::max_total_bytes`] in all, both held while reading
//!   (whatever the file's size says), and a walk looks at no more than
//!   [`Limits::max_entries`] directory entries. The walk is three levels
//!   deep by construction (`<type>/<tag>/<name>.yaml`): it never recurses.
//! - A dump file named on the command line is read as given (a symlink
//!   named there is followed, as the compiler reads a file named on its
//!   command line), but only if it is a regular file, within the per-file
//!   limit.

use crate::{Imported, Limits};
use rctl_compiler::diag::{code, Diagnostic};
use rctl_compiler::files::{self, Roots};
use rctl_compiler::load::LoadError;
use rctl_compiler::source::FileId;
use std::fs::Metadata;
use std::path::{Path, PathBuf};

/// One import's reading: where it may read, and what it has read so far.
pub(crate) struct Reader {
    /// `Some` for a tree: its root.
    roots: Option<Roots>,
    limits: Limits,
    /// Bytes read so far, of every file.
    total: usize,
    /// Directory entries looked at so far.
    entries: usize,
    /// YAML nodes read so far.
    nodes: usize,
    /// A limit of the whole walk was reached: read nothing more.
    pub(crate) stopped: bool,
}

/// What a tree's entry is, as the walk sees it.
pub(crate) enum Entry {
    /// A directory (or a symlink to one below the root).
    Dir,
    /// A regular file (or a symlink to one below the root).
    File,
    /// Not a directory nor a regular file: what it is ("a FIFO", ...).
    Special(&'static str),
    /// A dangling symlink (to skip unless a file was wanted).
    Dangling,
}

impl Reader {
    /// A reader for the tree at `root`, confined to it.
    pub(crate) fn tree(root: &Path, limits: &Limits) -> Reader {
        let (roots, _) = Roots::new(&[root.to_path_buf()], &[]);
        Reader {
            roots: Some(roots),
            limits: limits.clone(),
            total: 0,
            entries: 0,
            nodes: 0,
            stopped: false,
        }
    }

    /// A reader for a dump file named on the command line.
    pub(crate) fn dump(limits: &Limits) -> Reader {
        Reader {
            roots: None,
            limits: limits.clone(),
            total: 0,
            entries: 0,
            nodes: 0,
            stopped: false,
        }
    }

    fn root(&self) -> String {
        self.roots
            .as_ref()
            .and_then(|r| r.dirs().first())
            .map_or_else(String::new, |d| d.display().to_string())
    }

    /// The entries of a tree's directory, sorted by path, hidden ones left
    /// out; every entry counts against [`Limits::max_entries`].
    pub(crate) fn entries(&mut self, dir: &Path, imp: &mut Imported) -> Vec<PathBuf> {
        if self.stopped {
            return Vec::new();
        }
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => {
                imp.diagnostics.push(io_error(dir, &e));
                return Vec::new();
            }
        };
        let mut v = Vec::new();
        for e in rd {
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                imp.diagnostics.push(
                    Diagnostic::error(
                        code::LIMIT,
                        format!(
                            "the tree has more than {} files and directories; stopped in `{}`",
                            self.limits.max_entries,
                            dir.display()
                        ),
                    )
                    .hint("name the root of a requestctl tree (what `requestctl sync -g` reads), not a larger directory"),
                );
                self.stopped = true;
                return Vec::new();
            }
            if let Ok(e) = e {
                let p = e.path();
                if !hidden(&p) {
                    v.push(p);
                }
            }
        }
        v.sort();
        v
    }

    /// What a tree's entry is, a symlink followed only below the root;
    /// `wanted` says whether the walk reads it as a file (a `.yaml` name).
    /// `None` (with an error) where it leads outside or cannot be examined;
    /// an entry that does not exist is `None` without one.
    pub(crate) fn examine(&self, p: &Path, wanted: bool, imp: &mut Imported) -> Option<Entry> {
        let roots = self.roots.as_ref()?;
        match files::follow(p, roots, wanted) {
            Ok(Some(m)) => Some(entry(&m)),
            Ok(None) => Some(Entry::Dangling),
            Err(LoadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && !wanted => None,
            Err(e) => {
                imp.diagnostics.push(self.error(e, p));
                None
            }
        }
    }

    /// Reads one file: a tree's (below its root) or the dump named on the
    /// command line, within the limits. `None` (with an error) if it cannot
    /// be.
    pub(crate) fn read(&mut self, path: &Path, imp: &mut Imported) -> Option<FileId> {
        if self.stopped {
            return None;
        }
        let room = self.limits.max_total_bytes.saturating_sub(self.total);
        let limit = self.limits.max_file_bytes.min(room);
        let read = match &self.roots {
            Some(roots) => roots.read(path, true, limit),
            None => files::read_source(path, None, limit),
        };
        match read {
            Ok(text) => {
                self.total += text.len();
                Some(imp.sources.add(path.to_path_buf(), text))
            }
            Err(LoadError::TooLarge(_)) if limit < self.limits.max_file_bytes => {
                imp.diagnostics.push(
                    Diagnostic::error(
                        code::LIMIT,
                        format!(
                            "the tree's files are over the limit of {} in all; stopped at `{}`",
                            bytes(self.limits.max_total_bytes),
                            path.display()
                        ),
                    )
                    .hint("name the root of a requestctl tree (what `requestctl sync -g` reads); its objects are far smaller"),
                );
                self.stopped = true;
                None
            }
            Err(e) => {
                imp.diagnostics.push(self.error(e, path));
                None
            }
        }
    }

    /// Counts the YAML nodes of one more file against
    /// [`Limits::max_total_nodes`]; past it, the error (and the walk stops).
    pub(crate) fn count_nodes(&mut self, n: usize, path: &Path) -> Option<Diagnostic> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes <= self.limits.max_total_nodes {
            return None;
        }
        self.stopped = true;
        Some(
            Diagnostic::error(
                code::LIMIT,
                format!(
                    "the tree's files hold more than {} YAML values, lists and mappings in all; stopped at `{}`",
                    self.limits.max_total_nodes,
                    path.display()
                ),
            )
            .hint("name the root of a requestctl tree (what `requestctl sync -g` reads); its objects are far smaller"),
        )
    }

    /// The diagnostic for a file or entry that cannot be read.
    fn error(&self, e: LoadError, path: &Path) -> Diagnostic {
        let p = path.display();
        match e {
            LoadError::Io(e) => io_error(path, &e),
            LoadError::NotUtf8 { valid_up_to, .. } => Diagnostic::error(
                code::NOT_UTF8,
                format!("`{p}` is not UTF-8 (byte {valid_up_to})"),
            )
            .hint("requestctl's files are UTF-8 YAML"),
            LoadError::TooLarge(_) => Diagnostic::error(
                code::TOO_LARGE,
                format!(
                    "`{p}` is over the size limit of {} for one file",
                    bytes(self.limits.max_file_bytes)
                ),
            )
            .hint("requestctl's objects are far smaller: check that this is the right file, or split the object"),
            LoadError::NotRegular(kind) => not_regular(path, kind),
            LoadError::Outside { resolved, .. } => Diagnostic::error(
                code::OUTSIDE_ROOT,
                format!(
                    "`{p}` leads outside the tree's root `{}` (to `{}`)",
                    self.root(),
                    resolved.display()
                ),
            )
            .hint("the importer reads only below the tree named, and follows symbolic links only to files and directories below it: copy what the link names into the tree"),
        }
    }
}

fn entry(m: &Metadata) -> Entry {
    if m.is_dir() {
        Entry::Dir
    } else if m.is_file() {
        Entry::File
    } else {
        Entry::Special(files::kind(m))
    }
}

fn io_error(path: &Path, e: &std::io::Error) -> Diagnostic {
    Diagnostic::error(code::IO, format!("cannot read `{}`: {e}", path.display()))
        .hint("check the path and its permissions")
}

/// A byte count for messages: "64 MiB", "1000 bytes".
fn bytes(n: usize) -> String {
    if n >= 1 << 20 && n & ((1 << 20) - 1) == 0 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// Hidden entries (`.git`, editors' files) are skipped, as requestctl
/// skips them.
pub(crate) fn hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

/// The diagnostic for a `.yaml` entry that is not a regular file.
pub(crate) fn not_regular(path: &Path, kind: &str) -> Diagnostic {
    Diagnostic::error(
        code::NOT_REGULAR,
        format!("`{}` is {kind}, not a regular file", path.display()),
    )
    .hint("requestctl's objects are regular YAML files; devices, FIFOs and sockets are never read: remove it, or put the file it stands for in its place")
}
