//! `rctl emit`: the edge proxies' configuration for a ruleset
//! (`rctl-emit` writes it; this parses flags and writes files).

use crate::{load_ruleset, output, Limits};
use anyhow::{Context, Result};
use rctl_compiler::artifact;
use rctl_emit::{haproxy_spoe, nginx, Agent, Emitted};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What every target takes.
#[derive(clap::Args)]
pub struct Common {
    /// One compiled .rctlc artifact, or sources.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Write the files into DIR (created if missing); default: print them.
    #[arg(short, long, value_name = "DIR")]
    output: Option<PathBuf>,
    #[command(flatten)]
    limits: Limits,
}

/// The proxies `rctl emit` writes for.
#[derive(clap::Subcommand)]
pub enum Target {
    /// HAProxy 2.6+: a SPOE engine asking `rctl serve --spoe`, the agent's
    /// backend, and the http-request rules acting on its verdicts.
    HaproxySpoe {
        #[command(flatten)]
        common: Common,
        /// Where the agent listens: unix:PATH, tcp:ADDR:PORT or ADDR:PORT.
        #[arg(long, default_value = "unix:/run/rctl/spoe.sock", value_parser = parse_agent)]
        agent: Agent,
        /// The agent's backend name in HAProxy.
        #[arg(long, value_name = "NAME", default_value = "rctl-agent")]
        backend: String,
        /// The directory spoe-rctl.conf will be in on the HAProxy host
        /// (default: the -o directory, else /etc/haproxy/rctl).
        #[arg(long, value_name = "DIR")]
        config_dir: Option<PathBuf>,
        /// How long a request waits for its verdict before it goes on
        /// unchecked (SPOE `timeout processing`), in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 50)]
        timeout_ms: u64,
        /// Also send this header (repeatable), so that a later ruleset may
        /// read it without a new configuration.
        #[arg(long = "header", value_name = "NAME")]
        headers: Vec<String>,
    },
    /// nginx 1.22+: auth_request asking `rctl serve --http`.
    Nginx {
        #[command(flatten)]
        common: Common,
        /// The agent's check endpoint: ADDR:PORT or tcp:ADDR:PORT.
        #[arg(long, default_value = "127.0.0.1:9781", value_parser = parse_agent)]
        agent: Agent,
        /// How long a request waits for the agent (connect, send, read)
        /// before it goes on unchecked, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 100)]
        timeout_ms: u64,
    },
}

fn parse_agent(s: &str) -> Result<Agent, rctl_emit::Error> {
    Agent::parse(s)
}

/// Runs `rctl emit TARGET`.
pub fn run(target: Target) -> Result<ExitCode> {
    let (common, emitted) = match target {
        Target::HaproxySpoe {
            common,
            agent,
            backend,
            config_dir,
            timeout_ms,
            headers,
        } => {
            let Some((rs, inputs)) = load(&common)? else {
                return Ok(ExitCode::from(1));
            };
            let config_dir = match (config_dir, &common.output) {
                (Some(d), _) => d,
                (None, Some(out)) => absolute(out)?,
                (None, None) => PathBuf::from("/etc/haproxy/rctl"),
            };
            let o = haproxy_spoe::Options {
                agent,
                backend,
                config_dir: config_dir.to_string_lossy().into_owned(),
                timeout_ms,
                extra_headers: rctl_emit::header_names(&headers)?,
                source: source(&rs),
            };
            (common, (haproxy_spoe::emit(&rs, &o)?, inputs))
        }
        Target::Nginx {
            common,
            agent,
            timeout_ms,
        } => {
            let Some((rs, inputs)) = load(&common)? else {
                return Ok(ExitCode::from(1));
            };
            let o = nginx::Options {
                agent,
                timeout_ms,
                source: source(&rs),
            };
            (common, (nginx::emit(&rs, &o)?, inputs))
        }
    };
    let (emitted, inputs) = emitted;
    for w in &emitted.warnings {
        crate::host::warn(w);
    }
    match &common.output {
        Some(dir) => write_dir(dir, &emitted, &inputs)?,
        None => {
            let mut out = std::io::stdout().lock();
            for f in &emitted.files {
                writeln!(out, "# ==> {} ({}) <==", f.name, f.role)?;
                out.write_all(f.text.as_bytes())?;
                writeln!(out)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

type Loaded = (rctl_compiler::ir::Ruleset, Vec<PathBuf>);

fn load(c: &Common) -> Result<Option<Loaded>> {
    Ok(load_ruleset(&c.paths, &c.limits.options())?.map(|(rs, _, inputs)| (rs, inputs)))
}

/// "ruleset sha256 HASH (N rules)": the hash `rctl compile` prints for
/// the ruleset's artifact.
fn source(rs: &rctl_compiler::ir::Ruleset) -> String {
    let hash = artifact::content_hash(&artifact::encode(rs))
        .map(|h| artifact::hex(&h))
        .unwrap_or_default();
    format!("ruleset sha256 {hash} ({} rules)", rs.rules.len())
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    Ok(std::env::current_dir()
        .context("the working directory")?
        .join(p))
}

fn write_dir(dir: &Path, e: &Emitted, inputs: &[PathBuf]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut err = std::io::stderr().lock();
    for f in &e.files {
        let path = dir.join(f.name);
        output::write(&path, f.text.as_bytes(), inputs)?;
        let _ = writeln!(err, "wrote {} ({})", path.display(), f.role);
    }
    Ok(())
}
