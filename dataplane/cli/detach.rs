//! `rctl detach`: rctl's program off an interface, with its pins and
//! state.

use crate::common::short;
use crate::hostargs::HostPaths;
use anyhow::Result;
use rctl_loader::host;
use std::io::Write as _;
use std::process::ExitCode;

/// `rctl detach`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The interface.
    #[arg(long)]
    iface: String,
    #[command(flatten)]
    host: HostPaths,
}

/// `rctl detach`. Once detached, a closed stdout does not make that a
/// failure.
pub fn run(a: Args) -> Result<ExitCode> {
    let iface = &a.iface;
    let detached = host::detach(iface, &a.host.paths())?;
    let mut out = std::io::stdout().lock();
    let _ = match detached {
        Some(a) => writeln!(
            out,
            "detached from {iface} (generation {}, artifact {})",
            a.generation,
            short(&a.artifact_sha256)
        ),
        None => writeln!(
            out,
            "removed what an interrupted apply or detach left for {iface}"
        ),
    };
    Ok(ExitCode::SUCCESS)
}
