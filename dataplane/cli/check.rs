//! `rctl check`: every error and warning of a ruleset, and a summary.

use crate::common::{count, failure, print, report, Format, Limits};
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
    /// `json`: one document on stdout (diagnostics with their file, line
    /// and column, counts, the ruleset's size) instead of text on stderr.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when there are errors (or warnings, with --deny-warnings), 2
/// when a file could not be read.
pub fn run(a: Args) -> Result<ExitCode> {
    let c = rctl_compiler::compile_paths(&a.paths, &a.limits.options());
    if a.format == Format::Json {
        return json(&c, a.deny_warnings);
    }
    let failed = report(&c.sources, &c.diagnostics, a.deny_warnings);
    if a.witness {
        let tests: Vec<&str> = c
            .diagnostics
            .sorted()
            .into_iter()
            .filter_map(|d| d.witness.as_deref())
            .collect();
        let mut text = tests.join("\n");
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        print(&text, Format::Text)?;
    }
    if let (false, Some(rs)) = (failed, &c.ruleset) {
        let prefixes: usize = rs.ipsets.iter().map(|s| s.prefixes.len()).sum();
        let _ = writeln!(
            std::io::stderr().lock(),
            "ok: {}, {}, {}, {}, {}",
            count(c.files.len(), "file"),
            count(rs.rules.len(), "rule"),
            count(rs.atoms.len(), "predicate"),
            count(prefixes, "prefix"),
            count(c.tests.len(), "test")
        );
    }
    Ok(if failed {
        failure(&c.diagnostics)
    } else {
        ExitCode::SUCCESS
    })
}

/// `rctl check --format json`.
fn json(c: &rctl_compiler::Compilation, deny_warnings: bool) -> Result<ExitCode> {
    use rctl_compiler::diag::Severity;
    let d = &c.diagnostics;
    let (errors, warnings) = (d.error_count(), d.warning_count());
    let failed = errors > 0 || (deny_warnings && warnings > 0);
    let ruleset = c.ruleset.as_ref().filter(|_| errors == 0).map(|rs| {
        serde_json::json!({
            "files": c.files.len(),
            "rules": rs.rules.len(),
            "predicates": rs.atoms.len(),
            "prefixes": rs.ipsets.iter().map(|s| s.prefixes.len()).sum::<usize>(),
            "tests": c.tests.len(),
        })
    });
    let v = serde_json::json!({
        "ok": !failed,
        "errors": errors,
        "warnings": warnings,
        "diagnostics": d.sorted().into_iter().map(|x| crate::common::diagnostic_json(x, &c.sources)).collect::<Vec<_>>(),
        "witnesses": d.iter().filter(|x| x.severity == Severity::Error).filter_map(|x| x.witness.as_deref()).collect::<Vec<_>>(),
        "ruleset": ruleset,
    });
    print(&(serde_json::to_string_pretty(&v)? + "\n"), Format::Json)?;
    Ok(if failed {
        failure(d)
    } else {
        ExitCode::SUCCESS
    })
}
