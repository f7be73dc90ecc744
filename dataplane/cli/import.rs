//! `rctl import requestctl DIR|DUMP [-o OUTDIR]`: requestctl's objects as
//! rctl rulesets (crate `rctl-import`), each checked once written.

use crate::common::report;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use rctl_import::{HeaderSchema, Options};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// What to import from.
#[derive(Subcommand)]
pub enum ImportSource {
    /// A requestctl tree (request-ipblocks/, request-patterns/,
    /// request-actions/, request-haproxy-actions/) or a `requestctl dump`
    /// file: one ruleset per cluster and target, in OUTDIR/varnish/<cluster>
    /// and OUTDIR/haproxy/<cluster>.
    Requestctl(RequestctlArgs),
}

/// `rctl import requestctl` options.
#[derive(Args)]
pub struct RequestctlArgs {
    /// The tree's root directory, or a dump file.
    input: PathBuf,
    /// Where to write the rulesets.
    #[arg(short, long, default_value = "requestctl-rctl")]
    output: PathBuf,
    /// Import what has no rctl equivalent anyway, with a warning and a
    /// comment on the rule (request_body dropped, as requestctl's VCL
    /// does; bw_throttle and per_ip_concurrency as `log`; invalid CIDRs
    /// left out, as requestctl does).
    #[arg(long)]
    lossy: bool,
    /// How a pattern without `header_is_set` reads (default: from the tree).
    #[arg(long, value_enum)]
    header_schema: Option<SchemaArg>,
    /// Treat warnings as errors (nothing is written).
    #[arg(long)]
    deny_warnings: bool,
}

#[derive(Copy, Clone, ValueEnum)]
enum SchemaArg {
    /// An empty header_value means the header is absent.
    Old,
    /// header_is_set decides; missing means false.
    New,
}

/// Exit 1 when the import has errors (or warnings, with
/// --deny-warnings), or a ruleset written does not check.
pub fn run(src: ImportSource) -> Result<ExitCode> {
    let ImportSource::Requestctl(a) = src;
    let opts = Options {
        lossy: a.lossy,
        header_schema: a.header_schema.map(|s| match s {
            SchemaArg::Old => HeaderSchema::Old,
            SchemaArg::New => HeaderSchema::New,
        }),
        ..Options::default()
    };
    let imp = rctl_import::import_path(&a.input, &opts);
    let mut err = std::io::stderr().lock();
    for n in &imp.notes {
        writeln!(err, "note: {}", crate::term::text(n))?;
    }
    drop(err);
    if report(&imp.sources, &imp.diagnostics, a.deny_warnings) {
        return Ok(ExitCode::from(1));
    }
    let dirs = imp
        .write(&a.output)
        .with_context(|| format!("writing {}", a.output.display()))?;
    let mut failed = false;
    for dir in dirs {
        let c = rctl_compiler::compile_paths(std::slice::from_ref(&dir), &Default::default());
        // The objects/ library holds every object, used or not.
        let mut diags = rctl_compiler::diag::Diagnostics::default();
        for d in c.diagnostics.iter() {
            if !(dir.ends_with("objects") && d.code == rctl_compiler::diag::code::UNUSED) {
                diags.push(d.clone());
            }
        }
        let bad = report(&c.sources, &diags, false);
        failed |= bad;
        let mut err = std::io::stderr().lock();
        match (&c.ruleset, bad) {
            (Some(rs), false) => writeln!(
                err,
                "wrote {}: {}, {}; rctl check: ok",
                dir.display(),
                crate::common::count(c.files.len(), "file"),
                crate::common::count(rs.rules.len(), "rule")
            )?,
            _ => writeln!(
                err,
                "wrote {}: rctl check FAILED (a bug: please report it)",
                dir.display()
            )?,
        }
    }
    Ok(crate::common::exit(failed))
}
