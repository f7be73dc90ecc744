//! Reading sources: files, whole directories and includes.

use crate::ast::{self, Item};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::parse::{parse_file, ParseLimits};
use crate::source::{FileId, SourceMap, Span};
use crate::Options;
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
    /// Larger than the limit.
    TooLarge(u64),
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
                format!("`{}` is {n} bytes, over the size limit", path.display()),
            )
            .hint("split the file, or raise the limit"),
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

/// Reads one file as UTF-8 text, within a size limit.
pub fn read_source(path: &Path, max_bytes: usize) -> Result<String, LoadError> {
    let meta = std::fs::metadata(path).map_err(LoadError::Io)?;
    if meta.len() > max_bytes as u64 {
        return Err(LoadError::TooLarge(meta.len()));
    }
    let bytes = std::fs::read(path).map_err(LoadError::Io)?;
    String::from_utf8(bytes).map_err(|e| {
        let valid_up_to = e.utf8_error().valid_up_to();
        LoadError::NotUtf8 {
            valid_up_to,
            bytes: e.into_bytes(),
        }
    })
}

/// Every `.rctl` file under `dir`, recursively, sorted by path. Hidden
/// entries are skipped.
fn rctl_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'))
        {
            continue;
        }
        if p.is_dir() {
            rctl_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "rctl") {
            out.push(p);
        }
    }
    Ok(())
}

/// Parsed sources of one ruleset.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every file read, rule files and list files.
    pub map: SourceMap,
    /// The parsed rule files, in load order.
    pub files: Vec<(FileId, ast::File)>,
}

/// Loads files and directories (every `.rctl` below them) as one ruleset,
/// following includes. Each file is read once.
pub fn load_paths(paths: &[PathBuf], opts: &Options, diags: &mut Diagnostics) -> Loaded {
    let mut loaded = Loaded::default();
    let mut queue: Vec<(PathBuf, Option<Span>)> = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found = Vec::new();
            if let Err(e) = rctl_files(p, &mut found) {
                diags.push(Diagnostic::error(
                    code::IO,
                    format!("cannot read directory `{}`: {e}", p.display()),
                ));
                continue;
            }
            if found.is_empty() {
                diags.push(
                    Diagnostic::error(
                        code::NO_SOURCES,
                        format!("no .rctl files in `{}`", p.display()),
                    )
                    .hint("rule files end in .rctl; name a file or a directory that holds some"),
                );
            }
            queue.extend(found.into_iter().map(|f| (f, None)));
        } else {
            queue.push((p.clone(), None));
        }
    }
    let limits = ParseLimits {
        max_depth: opts.max_depth,
    };
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut i = 0;
    while i < queue.len() {
        let (path, from) = queue[i].clone();
        i += 1;
        let canon = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if seen.contains(&canon) {
            continue;
        }
        seen.push(canon);
        let text = match read_source(&path, opts.max_file_bytes) {
            Ok(t) => t,
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
                queue.push((dir.join(&w.text), Some(w.span)));
            }
        }
        loaded.files.push((id, file));
    }
    loaded
}
