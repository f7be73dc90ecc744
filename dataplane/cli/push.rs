//! `rctl push`: an artifact stored in etcd and every host (or a site's)
//! pointed at it in one transaction, or a rollback
//! (`rctl_fleet::push`).

use crate::etcd::{runtime, EtcdArgs};
use anyhow::{bail, Context, Result};
use rctl_fleet::etcd::{check_name, Target};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl push`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The compiled .rctlc artifact (not with --rollback).
    #[arg(required_unless_present = "rollback", conflicts_with = "rollback")]
    artifact: Option<PathBuf>,
    #[command(flatten)]
    etcd: EtcdArgs,
    /// Only the hosts of this site (default: every host).
    #[arg(long, conflicts_with = "all")]
    site: Option<String>,
    /// Every host (the default).
    #[arg(long)]
    all: bool,
    /// Pushes kept per target, for rollbacks.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    keep: u32,
    /// Point the target back at the artifact pushed N pushes before the
    /// one it runs (default 1); a second rollback of 1 goes forward again.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1")]
    rollback: Option<usize>,
    /// Bytes per chunk (etcd refuses requests over --max-request-bytes,
    /// 1.5 MiB by default).
    #[arg(long, default_value_t = rctl_fleet::push::CHUNK_SIZE, hide = true)]
    chunk_size: usize,
}

/// `rctl push`.
pub fn run(a: Args) -> Result<ExitCode> {
    let config = a.etcd.config()?;
    let target = match &a.site {
        Some(s) => {
            check_name("--site", s)?;
            Target::Site(s.clone())
        }
        None => Target::All,
    };
    let bytes = match &a.artifact {
        Some(p) => Some(
            rctl_compiler::files::read_binary(p, rctl_compiler::files::MAX_BINARY_BYTES)
                .with_context(|| format!("reading {}", p.display()))?,
        ),
        None => None,
    };
    if !(1..=1_400_000).contains(&a.chunk_size) {
        bail!("--chunk-size {}: from 1 byte to 1.4 MB", a.chunk_size);
    }
    let layout = config.layout();
    let keep = a.keep as usize;
    let pushed = runtime()?.block_on(async {
        let client = config.connect().await?;
        match (&bytes, a.rollback) {
            (_, Some(n)) => rctl_fleet::push::rollback(&client, &layout, &target, n, keep).await,
            (Some(b), None) => {
                rctl_fleet::push::push(&client, &layout, b, &target, keep, a.chunk_size).await
            }
            (None, None) => unreachable!("clap requires one"),
        }
    });
    let shown = a
        .artifact
        .as_ref()
        .map_or_else(|| "rollback".to_string(), |p| p.display().to_string());
    let p = pushed.with_context(|| format!("{shown}: {target} not switched"))?;
    let what = match a.rollback {
        Some(n) => format!(
            "{target} rolled back {n} push{} (from generation {})",
            if n == 1 { "" } else { "es" },
            p.replaced.map_or("-".into(), |g| g.to_string())
        ),
        None => format!("{target} switched ({} chunks stored)", p.chunks),
    };
    let _ = writeln!(
        std::io::stdout().lock(),
        "{what}: generation {}, artifact {}{}",
        p.generation,
        p.sha256,
        if p.collected > 0 {
            format!("; {} artifacts no longer kept were deleted", p.collected)
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
