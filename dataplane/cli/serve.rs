//! `rctl serve`: flags in, `rctl_agent::serve::run` out, until SIGTERM
//! or SIGINT.

use crate::listen::{print_ready, ListenArgs};
use anyhow::{Context, Result};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl serve`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The compiled .rctlc artifact to start with (`rctl apply` switches
    /// it); with --state-dir, only when the directory keeps none from an
    /// earlier apply.
    #[arg(long, value_name = "FILE")]
    artifact: Option<PathBuf>,
    /// Keep bans and rate-limit buckets across restarts in DIR
    /// (`DIR/limits.snapshot`, saved every --snapshot-every seconds and at
    /// stop; a crash loses at most one interval).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    listen: ListenArgs,
}

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(a: Args) -> Result<ExitCode> {
    rctl_agent::event::set_name("rctl serve");
    let kept = a
        .state_dir
        .as_ref()
        .map(|d| d.join(rctl_agent::persist::ARTIFACT))
        .filter(|p| p.exists());
    let Some(artifact) = a.artifact.or(kept) else {
        anyhow::bail!(
            "no ruleset to start with: give --artifact FILE (RCTL_ARTIFACT), a ruleset \
             compiled by `rctl compile`{}",
            match &a.state_dir {
                Some(d) => format!(" ({} keeps none from an earlier apply)", d.display()),
                None => String::new(),
            }
        );
    };
    let c = a.listen.config(artifact, a.state_dir)?;
    rctl_agent::serve::run(c, |server| print_ready("rctl serve", server)).context("rctl serve")?;
    let _ = writeln!(std::io::stderr().lock(), "rctl serve: stopped");
    Ok(ExitCode::SUCCESS)
}
