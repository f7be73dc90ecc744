//! `rctl debug ast|ir|plan`: one compiler stage, for people working on
//! the compiler.

use crate::common::{report, Limits};
use crate::term;
use anyhow::{bail, Result};
use clap::ValueEnum;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl debug`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// ast, ir or plan.
    #[arg(value_enum)]
    stage: Stage,
    /// .rctl files, or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    limits: Limits,
}

/// A compiler stage.
#[derive(Copy, Clone, ValueEnum)]
enum Stage {
    Ast,
    Ir,
    Plan,
}

/// The AST is printed whatever the diagnostics; the IR and the plan only
/// without errors (exit 1).
pub fn run(a: Args) -> Result<ExitCode> {
    let c = rctl_compiler::compile_paths(&a.paths, &a.limits.options());
    let mut out = std::io::stdout().lock();
    match a.stage {
        Stage::Ast => {
            for (id, f) in &c.files {
                let name = c
                    .sources
                    .get(*id)
                    .map(|s| s.path.display().to_string())
                    .unwrap_or_default();
                let text = format!("// {name}\n{:#?}", f.items);
                writeln!(out, "{}", term::text(&text))?;
            }
        }
        Stage::Ir | Stage::Plan => {
            if report(&c.sources, &c.diagnostics, false) {
                return Ok(crate::common::failure(&c.diagnostics));
            }
            let Some(rs) = c.ruleset else {
                bail!("no ruleset produced")
            };
            let v = if matches!(a.stage, Stage::Ir) {
                serde_json::json!({ "ipsets": rs.ipsets.iter().map(|s| serde_json::json!({"name": s.name, "v4": s.prefixes.v4.len(), "v6": s.prefixes.v6.len()})).collect::<Vec<_>>(), "atoms": rs.atoms, "rules": rs.rules })
            } else {
                serde_json::json!(rs
                    .rules
                    .iter()
                    .zip(&rs.plan)
                    .map(|(r, p)| serde_json::json!({"rule": r.name, "plan": p}))
                    .collect::<Vec<_>>())
            };
            writeln!(out, "{}", term::json(&serde_json::to_string_pretty(&v)?))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
