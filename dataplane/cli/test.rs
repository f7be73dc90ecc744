//! `rctl test`: the ruleset's `test` blocks through the engine
//! (`rctl_dataplane::testing` runs them; this prints the results).

use crate::common::{exit, report, Limits};
use crate::term;
use anyhow::{bail, Result};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl test`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// .rctl files, or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Run only tests whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when the sources have errors or a test fails.
pub fn run(a: Args) -> Result<ExitCode> {
    let c = rctl_compiler::compile_paths(&a.paths, &a.limits.options());
    if report(&c.sources, &c.diagnostics, false) {
        return Ok(ExitCode::from(1));
    }
    if c.ruleset.is_none() {
        bail!("no ruleset produced")
    }
    let mut out = std::io::stdout().lock();
    let (mut passed, mut failed) = (0, 0);
    for r in rctl_dataplane::testing::run_tests(&c, a.filter.as_deref()) {
        let r = r?;
        if r.passed() {
            passed += 1;
            writeln!(out, "ok   {} ({} sent)", term::text(&r.name), r.sent)?;
        } else {
            failed += 1;
            let loc = r
                .file
                .as_ref()
                .map(|f| format!("{}:{}", f.display(), r.line))
                .unwrap_or_default();
            let (name, loc) = (term::text(&r.name), term::text(&loc));
            writeln!(out, "FAIL {name} ({loc})")?;
            for f in &r.failures {
                writeln!(out, "     line {}: {}", f.line, term::text(&f.message))?;
            }
        }
    }
    writeln!(out, "test result: {passed} passed, {failed} failed")?;
    Ok(exit(failed > 0))
}
