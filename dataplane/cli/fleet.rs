//! `rctl fleet status`: every host's generation and artifact against its
//! target, from etcd (`rctl_fleet::status`).

use crate::common::{exit, print, Format};
use crate::etcd::{runtime, EtcdArgs};
use anyhow::Result;
use clap::Subcommand;
use std::process::ExitCode;

/// `rctl fleet`'s subcommands.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every host's generation and artifact against its target (exit 1
    /// unless every host runs its target).
    Status {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

/// `rctl fleet status`: exit 1 unless every host runs its target.
pub fn run(a: Args) -> Result<ExitCode> {
    let Command::Status { etcd, format } = a.command;
    let config = etcd.config()?;
    let layout = config.layout();
    let s = runtime()?
        .block_on(async {
            let client = config.connect().await?;
            rctl_fleet::status::read(&client, &layout).await
        })
        .map_err(rctl_fleet::status::unreachable)?;
    let out = match format {
        Format::Text => rctl_fleet::status::text(&s),
        Format::Json => serde_json::to_string_pretty(&s)? + "\n",
    };
    print(&out, format)?;
    Ok(exit(!s.converged()))
}
