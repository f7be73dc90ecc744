//! `rctl log`: the XDP program's events (sources entering a ban), one
//! line each, followed across applies.

use crate::hostargs::HostPaths;
use crate::term;
use anyhow::{Context, Result};
use rctl_loader::host;
use std::io::Write as _;
use std::process::ExitCode;

/// `rctl log`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The interface.
    #[arg(long)]
    iface: String,
    /// Stop after this many seconds (default: run until interrupted).
    #[arg(long)]
    seconds: Option<f64>,
    #[command(flatten)]
    host: HostPaths,
}

/// Runs until `--seconds` pass, or its output is closed.
pub fn run(a: Args) -> Result<ExitCode> {
    let until = match a.seconds {
        Some(s) => Some(
            std::time::Instant::now()
                + std::time::Duration::try_from_secs_f64(s)
                    .with_context(|| format!("--seconds {s}: not a number of seconds"))?,
        ),
        None => None,
    };
    let stop = || until.is_some_and(|u| std::time::Instant::now() >= u);
    let mut out = std::io::stdout().lock();
    let iface = &a.iface;
    host::follow_events(
        &a.host.paths(),
        iface,
        |generation, line| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            writeln!(
                out,
                "{now:.3} {iface} gen-{generation} {}",
                term::text(line)
            )
            .and_then(|()| out.flush())
            .is_ok()
        },
        stop,
    )?;
    Ok(ExitCode::SUCCESS)
}
