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
    /// .rctl files, or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Do not write; exit 1 if any file is not formatted.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    limits: Limits,
}

/// Formats the files named (and every `.rctl` file below directories);
/// with `--check`, only reports which are not formatted.
pub fn run(a: Args) -> Result<ExitCode> {
    fmt(&a.paths, a.check, &a.limits.options())
}

fn fmt(paths: &[PathBuf], check: bool, opts: &Options) -> Result<ExitCode> {
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
        let limits = rctl_compiler::parse::ParseLimits {
            max_depth: opts.max_depth,
        };
        let file = rctl_compiler::parse::parse_file(src, id, &limits, &mut errors);
        if errors.has_errors() {
            diags.extend(errors);
            continue;
        }
        let formatted = rctl_compiler::fmt::format_file(&file, src);
        if formatted == src.text {
            continue;
        }
        unformatted += 1;
        let shown = term::text(&path.display().to_string()).into_owned();
        use std::io::Write as _;
        if check {
            writeln!(out, "{shown} is not formatted")?;
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
    Ok(if broken || refused || (check && unformatted > 0) {
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
