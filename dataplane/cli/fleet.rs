//! `rctl fleet status`: every host's generation and artifact against its
//! target, from etcd (`rctl_fleet::status`).

use crate::common::{print, Format};
use crate::etcd::{runtime, EtcdArgs};
use anyhow::Result;
use clap::Subcommand;
use rctl_agent::health::Level;
use std::io::Write as _;
use std::process::ExitCode;

/// `rctl fleet`'s subcommands.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every host's generation and artifact against its target (exit 0
    /// when every host runs its target, 1 when one lags or nothing was
    /// pushed, 2 when no host reported or one is down or failed, 3 when
    /// etcd or a key cannot be read).
    Status {
        #[command(flatten)]
        etcd: EtcdArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Print one line for a Nagios/Icinga check (`RCTL FLEET OK - …`),
        /// with the same exit code.
        #[arg(long)]
        check: bool,
    },
}

/// `rctl fleet status`, with the plugin exit codes
/// (`rctl_agent::health`).
pub fn run(a: Args) -> Result<ExitCode> {
    let Command::Status {
        etcd,
        format,
        check,
    } = a.command;
    let config = etcd.config()?;
    let layout = config.layout();
    let read = runtime()?
        .block_on(async {
            let client = config.connect().await?;
            rctl_fleet::status::read(&client, &layout).await
        })
        .map_err(rctl_fleet::status::unreachable);
    let s = match read {
        Ok(s) => s,
        Err(e) if check => {
            let line = format!("RCTL FLEET UNKNOWN - {e}");
            writeln!(std::io::stdout().lock(), "{}", crate::term::text(&line))?;
            return Ok(ExitCode::from(Level::Unknown.exit_code()));
        }
        Err(e) => return Err(e.into()),
    };
    let health = s.health();
    if check {
        let ok = match s.hosts.len() {
            1 => "1 host, on its target".to_string(),
            n => format!("{n} hosts, every one on its target"),
        };
        let line = health.check_line("RCTL FLEET", &ok);
        writeln!(std::io::stdout().lock(), "{}", crate::term::text(&line))?;
        return Ok(ExitCode::from(health.exit_code()));
    }
    let out = match format {
        Format::Text => {
            let mut t = rctl_fleet::status::text(&s);
            t.push_str(&format!("state: {}\n", health.level()));
            for f in &health.findings {
                t.push_str(&format!("  {}: {}\n", f.level, f.what));
            }
            t
        }
        Format::Json => {
            let mut v = serde_json::to_value(&s)?;
            v["health"] = serde_json::json!({
                "state": health.level().to_string(),
                "findings": health.findings,
            });
            serde_json::to_string_pretty(&v)? + "\n"
        }
    };
    print(&out, format)?;
    Ok(ExitCode::from(health.exit_code()))
}
