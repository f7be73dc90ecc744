//! Reading sources: files, whole directories and includes.

use crate::ast::{self, Item};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::files::{self, Roots};
use crate::parse::{parse_file, ParseLimits};
use crate::source::{FileId, SourceMap, Span};
use crate::Options;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

pub use crate::files::LoadError;

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
