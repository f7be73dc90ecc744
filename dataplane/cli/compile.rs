//! `rctl compile`: a ruleset into one versioned artifact, written
//! atomically.

use crate::common::{report, Limits};
use anyhow::{bail, Result};
use rctl_compiler::artifact;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl compile`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// .rctl files, or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Where to write the artifact (written atomically; a new path or a
    /// regular file, not one of the sources).
    #[arg(short, long)]
    output: PathBuf,
    /// Treat warnings as errors.
    #[arg(long)]
    deny_warnings: bool,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when the sources have errors (nothing is written).
pub fn run(a: Args) -> Result<ExitCode> {
    let c = rctl_compiler::compile_paths(&a.paths, &a.limits.options());
    if report(&c.sources, &c.diagnostics, a.deny_warnings) {
        return Ok(crate::common::failure(&c.diagnostics));
    }
    let Some(rs) = c.ruleset else {
        bail!("no ruleset produced")
    };
    let bytes = artifact::encode(&rs);
    let sources: Vec<PathBuf> = c.sources.files().iter().map(|f| f.path.clone()).collect();
    crate::output::write(&a.output, &bytes, &sources)?;
    let hash = artifact::content_hash(&bytes)
        .map(|h| artifact::hex(&h))
        .unwrap_or_default();
    let _ = writeln!(
        std::io::stderr().lock(),
        "wrote {} ({}, {}, content sha256 {hash})",
        a.output.display(),
        crate::common::count(bytes.len(), "byte"),
        crate::common::count(rs.rules.len(), "rule")
    );
    Ok(ExitCode::SUCCESS)
}
