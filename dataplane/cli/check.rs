//! `rctl check`: every error and warning of a ruleset, and a summary.

use crate::common::{exit, print, report, Format, Limits};
use anyhow::Result;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl check`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// .rctl files, or directories of them (one ruleset).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Treat warnings as errors.
    #[arg(long)]
    deny_warnings: bool,
    /// Print, on stdout, a `test` block for each exemption conflict: a
    /// request both rules match, ready to paste into a rule file.
    #[arg(long)]
    witness: bool,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when there are errors (or warnings, with --deny-warnings).
pub fn run(a: Args) -> Result<ExitCode> {
    let c = rctl_compiler::compile_paths(&a.paths, &a.limits.options());
    let failed = report(&c.sources, &c.diagnostics, a.deny_warnings);
    if a.witness {
        let tests: Vec<&str> = c
            .diagnostics
            .sorted()
            .into_iter()
            .filter_map(|d| d.witness.as_deref())
            .collect();
        print(&tests.join("\n"), Format::Text)?;
    }
    if let (false, Some(rs)) = (failed, &c.ruleset) {
        let prefixes: usize = rs.ipsets.iter().map(|s| s.prefixes.len()).sum();
        let _ = writeln!(
            std::io::stderr().lock(),
            "ok: {} files, {} rules, {} predicates, {} prefixes, {} tests",
            c.files.len(),
            rs.rules.len(),
            rs.atoms.len(),
            prefixes,
            c.tests.len()
        );
    }
    Ok(exit(failed))
}
