//! `rctl fmt`: rewrite rule files canonically.
//!
//! Files are found as `check` finds them (the same confined walk) and read
//! as `check` reads them (regular files only, within the size limit). A
//! symbolic link is never written through: fmt names the file it points to,
//! to be formatted instead.

use crate::common::{report, Limits};
use crate::term;
use anyhow::Result;
use rctl_compiler::diag::{Diagnostic, Diagnostics};
use rctl_compiler::files::{self, Roots};
use rctl_compiler::source::SourceMap;
use rctl_compiler::Options;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `rctl fmt`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// .rctl files, or directories of them; `-` reads standard input and
    /// writes the formatted text to standard output.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Do not write; exit 1 if any file is not formatted.
    #[arg(long)]
    check: bool,
    /// Do not write; print a unified diff of what formatting would change
    /// (exit 1 if anything would).
    #[arg(long)]
    diff: bool,
    #[command(flatten)]
    limits: Limits,
}

/// Formats the files named (and every `.rctl` file below directories);
/// with `--check`, only reports which are not formatted.
pub fn run(a: Args) -> Result<ExitCode> {
    let mode = match (a.check, a.diff) {
        (_, true) => Mode::Diff,
        (true, false) => Mode::Check,
        (false, false) => Mode::Write,
    };
    if a.paths.iter().any(|p| p.as_os_str() == "-") {
        if a.paths.len() > 1 {
            anyhow::bail!("`-` (standard input) is formatted alone: name no other path with it");
        }
        return stdin(mode, &a.limits.options());
    }
    fmt(&a.paths, mode, &a.limits.options())
}

/// What is done with a file that is not formatted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Rewrite it.
    Write,
    /// Name it.
    Check,
    /// Show the change.
    Diff,
}

/// The canonical form of `src`, or its parse errors in `errors`.
fn formatted(
    src: &rctl_compiler::source::SourceFile,
    id: rctl_compiler::source::FileId,
    opts: &Options,
    errors: &mut Diagnostics,
) -> Option<String> {
    let limits = rctl_compiler::parse::ParseLimits {
        max_depth: opts.max_depth,
    };
    let file = rctl_compiler::parse::parse_file(src, id, &limits, errors);
    (!errors.has_errors()).then(|| rctl_compiler::fmt::format_file(&file, src))
}

/// A unified diff of `old` into `new`, for `path`.
fn unified(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

/// `rctl fmt -`: standard input, formatted, on standard output (with
/// `--check`, nothing but the exit code; with `--diff`, the diff).
fn stdin(mode: Mode, opts: &Options) -> Result<ExitCode> {
    use std::io::{Read as _, Write as _};
    let mut bytes = Vec::new();
    std::io::stdin()
        .take((opts.max_file_bytes as u64).saturating_add(1))
        .read_to_end(&mut bytes)?;
    let shown = PathBuf::from("<stdin>");
    let mut map = SourceMap::new();
    let mut diags = Diagnostics::default();
    if bytes.len() > opts.max_file_bytes {
        diags.push(
            files::LoadError::TooLarge(opts.max_file_bytes as u64)
                .into_diagnostic(&mut map, None, &shown),
        );
        report(&map, &diags, false);
        return Ok(ExitCode::from(1));
    }
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let valid_up_to = e.utf8_error().valid_up_to();
            let err = files::LoadError::NotUtf8 {
                valid_up_to,
                bytes: e.into_bytes(),
            };
            diags.push(err.into_diagnostic(&mut map, None, &shown));
            report(&map, &diags, false);
            return Ok(ExitCode::from(1));
        }
    };
    let id = map.add(shown, text);
    let Some(src) = map.get(id) else {
        return Ok(ExitCode::from(1));
    };
    let Some(out) = formatted(src, id, opts, &mut diags) else {
        report(&map, &diags, false);
        return Ok(ExitCode::from(1));
    };
    let changed = out != src.text;
    let mut stdout = std::io::stdout().lock();
    match mode {
        Mode::Write => stdout.write_all(out.as_bytes())?,
        Mode::Check => {}
        Mode::Diff => {
            stdout.write_all(term::text(&unified("<stdin>", &src.text, &out)).as_bytes())?
        }
    }
    Ok(if changed && mode != Mode::Write {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn fmt(paths: &[PathBuf], mode: Mode, opts: &Options) -> Result<ExitCode> {
    let mut map = SourceMap::new();
    let mut diags = Diagnostics::default();
    let (roots, errors) = Roots::new(paths, &opts.allow_paths);
    errors.into_iter().for_each(|d| diags.push(d));
    // (path, whether it must be below a root)
    let mut found: Vec<(PathBuf, bool)> = Vec::new();
    for p in paths {
        if p.is_dir() {
            let walk = files::rctl_files(p, &roots, opts.max_dir_depth);
            walk.errors.into_iter().for_each(|d| diags.push(d));
            found.extend(walk.files.into_iter().map(|f| (f, true)));
        } else {
            found.push((p.clone(), false));
        }
    }
    let mut unformatted = 0;
    let mut refused = false;
    let mut out = std::io::stdout().lock();
    for (path, confined) in found {
        let text = match roots.read(&path, confined, opts.max_file_bytes) {
            Ok(t) => t,
            Err(e) => {
                diags.push(e.into_diagnostic(&mut map, None, &path));
                continue;
            }
        };
        let id = map.add(path.clone(), text);
        let Some(src) = map.get(id) else { continue };
        let mut errors = Diagnostics::default();
        let Some(formatted) = formatted(src, id, opts, &mut errors) else {
            diags.extend(errors);
            continue;
        };
        if formatted == src.text {
            continue;
        }
        unformatted += 1;
        let shown = term::text(&path.display().to_string()).into_owned();
        use std::io::Write as _;
        if mode == Mode::Check {
            writeln!(out, "{shown} is not formatted")?;
        } else if mode == Mode::Diff {
            let d = unified(&path.display().to_string(), &src.text, &formatted);
            write!(out, "{}", term::text(&d))?;
        } else if let Some(target) = link_target(&path) {
            refused = true;
            diags.push(
                Diagnostic::error(
                    rctl_compiler::diag::code::IO,
                    format!(
                        "`{}` is a symbolic link; rctl fmt does not rewrite through links",
                        path.display()
                    ),
                )
                .hint(format!(
                    "format the file itself: rctl fmt {}",
                    target.display()
                )),
            );
        } else {
            crate::output::write(&path, formatted.as_bytes(), &[])?;
            writeln!(out, "formatted {shown}")?;
        }
    }
    let broken = report(&map, &diags, false);
    Ok(if broken {
        crate::common::failure(&diags)
    } else if refused || (mode != Mode::Write && unformatted > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Where `path` leads, if it is a symbolic link.
fn link_target(path: &Path) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_symlink() {
        return None;
    }
    Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}
