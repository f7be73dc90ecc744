//! `rctl generate`: what is written from rctl's own flag definitions, so
//! that flags are never documented by hand twice: man pages (one a
//! subcommand, through clap_mangen), shell completions (clap_complete),
//! and the Markdown command reference committed beside the CLI's code
//! (`dataplane/cli/README.md`; a test fails when it is stale).

use anyhow::{Context, Result};
use clap::Command;
use std::io::Write as _;
use std::path::PathBuf;

/// `rctl generate`'s flags.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Man pages, one a subcommand (`rctl.1`, `rctl-check.1`, …), into DIR.
    Man {
        /// Where to write them (created if missing).
        dir: PathBuf,
    },
    /// A shell's completions, on stdout.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// The Markdown command reference, on stdout.
    Reference,
}

/// The width the reference and man pages are laid out for, whatever the
/// terminal: the same bytes on every machine.
const WIDTH: usize = 100;

fn command() -> Command {
    crate::cli_command().term_width(WIDTH).max_term_width(WIDTH)
}

/// Runs `rctl generate`.
pub fn run(a: Args) -> Result<std::process::ExitCode> {
    match a.what {
        What::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command(), &dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
        What::Completions { shell } => {
            // Into memory first: clap_complete panics on a failed write
            // (`rctl generate completions bash | head`).
            let mut cmd = command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "rctl", &mut buf);
            let mut out = std::io::stdout().lock();
            out.write_all(&buf)?;
            out.flush()?;
        }
        What::Reference => {
            std::io::stdout().lock().write_all(reference().as_bytes())?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The command reference: each subcommand's `--help`, in the order `rctl
/// --help` lists them, nested ones under their parent.
pub fn reference() -> String {
    let mut cmd = command();
    cmd.build();
    let mut out = String::from(
        "# rctl command reference\n\nWritten by `rctl generate reference` from rctl's own flag \
         definitions (the same text as `rctl COMMAND --help`); a test fails when this file \
         and the program disagree. `rctl generate man DIR` writes the same as man pages.\n",
    );
    section(&mut out, &mut cmd, &[]);
    out
}

fn section(out: &mut String, cmd: &mut Command, parents: &[String]) {
    let mut path = parents.to_vec();
    path.push(cmd.get_name().to_string());
    let help = cmd.render_long_help().to_string();
    let depth = if parents.is_empty() {
        2
    } else {
        2 + parents.len().min(2)
    };
    out.push_str(&format!(
        "\n{} `{}`\n\n```text\n{}\n```\n",
        "#".repeat(depth),
        path.join(" "),
        help.trim_end()
    ));
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|c| c.get_name() != "help" && !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .collect();
    for n in names {
        if let Some(sub) = cmd.find_subcommand_mut(&n) {
            section(out, sub, &path);
        }
    }
}
