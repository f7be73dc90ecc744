//! Reading sources: files, whole directories and includes.

use crate::ast::{self, Item};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::files::{self, Roots};
use crate::parse::{parse_file, ParseLimits};
use crate::source::{FileId, SourceMap, Span};
use crate::Options;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

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
                let hint = if e.kind() == std::io::ErrorKind::NotFound {
                    "paths in `include` and `file` are relative to the file that names them"
                } else {
                    "check the file's permissions"
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

/// Parsed sources of one ruleset.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every file read, rule files and list files.
    pub map: SourceMap,
    /// The parsed rule files, in load order.
    pub files: Vec<(FileId, ast::File)>,
    /// Where `include` and `file` may read.
    pub roots: Roots,
}

/// Loads files and directories (every `.rctl` below them) as one ruleset,
/// following includes. Each file is read once.
///
/// Files named in `paths` are read as given; every other file (found by a
/// directory walk, or named by `include`) must resolve below the ruleset's
/// [`Roots`]: the directories in `paths`, the directories of the files in
/// `paths`, and [`Options::allow_paths`].
pub fn load_paths(paths: &[PathBuf], opts: &Options, diags: &mut Diagnostics) -> Loaded {
    let (roots, errors) = Roots::new(paths, &opts.allow_paths);
    for d in errors {
        diags.push(d);
    }
    let mut loaded = Loaded {
        roots,
        ..Loaded::default()
    };
    // (path as shown, where it was named, whether it must be below a root)
    let mut queue: Vec<(PathBuf, Option<Span>, bool)> = Vec::new();
    for p in paths {
        if p.is_dir() {
            let walk = files::rctl_files(p, &loaded.roots, opts.max_dir_depth);
            let none = walk.files.is_empty() && walk.errors.is_empty();
            for d in walk.errors {
                diags.push(d);
            }
            if none {
                diags.push(
                    Diagnostic::error(
                        code::NO_SOURCES,
                        format!("no .rctl files in `{}`", p.display()),
                    )
                    .hint("rule files end in .rctl; name a file or a directory that holds some"),
                );
            }
            queue.extend(walk.files.into_iter().map(|f| (f, None, true)));
        } else {
            queue.push((p.clone(), None, false));
        }
    }
    let limits = ParseLimits {
        max_depth: opts.max_depth,
    };
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut i = 0;
    while i < queue.len() {
        let (path, from, confined) = queue[i].clone();
        i += 1;
        let read = loaded.roots.locate(&path, confined).and_then(|canon| {
            if seen.insert(canon) {
                loaded
                    .roots
                    .read(&path, confined, opts.max_file_bytes)
                    .map(Some)
            } else {
                Ok(None)
            }
        });
        let text = match read {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                let d = e.into_diagnostic(&mut loaded.map, from, &path);
                diags.push(d);
                continue;
            }
        };
        let id = loaded.map.add(path.clone(), text);
        let Some(src) = loaded.map.get(id) else {
            continue;
        };
        let file = parse_file(src, id, &limits, diags);
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for item in &file.items {
            if let Item::Include(w) = item {
                queue.push((dir.join(&w.text), Some(w.span), true));
            }
        }
        loaded.files.push((id, file));
    }
    loaded
}
