//! `rctl emit`: the edge proxies' configuration for a ruleset
//! (`rctl-emit` writes it; this parses flags and writes files).

use crate::common::{load_ruleset, warn, Limits};
use crate::output;
use anyhow::{Context, Result};
use rctl_compiler::artifact;
use rctl_emit::{haproxy, haproxy_spoe, nginx, requestctl, vcl, Agent, Emitted, File};
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
        /// Take the client's address from this header's last address (set
        /// by a TLS terminator or load balancer in front), else the
        /// connection's; trust it only behind such a proxy: a client that
        /// reaches the proxy directly could write any address there.
        #[arg(long, value_name = "NAME")]
        client_ip_header: Option<String>,
    },
    /// nginx 1.22+: auth_request asking `rctl serve --http`, or with
    /// `--module` rctl's own nginx module (no agent).
    Nginx {
        #[command(flatten)]
        common: Common,
        /// Write the configuration of rctl's nginx module
        /// (ngx_http_rctl_module.so) instead of auth_request's.
        #[arg(long)]
        module: bool,
        #[command(flatten)]
        nginx_module: NginxModule,
        /// The agent's check endpoint: unix:PATH (`rctl serve --http
        /// unix:PATH --http-group www-data`), or ADDR:PORT, tcp:ADDR:PORT (a
        /// TCP endpoint is reachable by every local user).
        #[arg(long, default_value = "unix:/run/rctl/http.sock", value_parser = parse_agent)]
        agent: Agent,
        /// How long a request waits for the agent (connect, send, read)
        /// before it goes on unchecked, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 100)]
        timeout_ms: u64,
        /// Take the client's address from this header's last address (set
        /// by a TLS terminator or load balancer in front), else the
        /// connection's; trust it only behind such a proxy: a client that
        /// reaches the proxy directly could write any address there.
        #[arg(long, value_name = "NAME")]
        client_ip_header: Option<String>,
    },
    /// Varnish 7.1+ with vmod_vsthrottle: the rules themselves in VCL, in
    /// requestctl's shape (one `if` per rule), no agent.
    Vcl {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        alone: Standalone,
        /// The backend of rctl-main.vcl, HOST:PORT.
        #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", value_parser = parse_backend)]
        backend: (String, u16),
    },
    /// requestctl's objects: the YAML tree `requestctl sync` loads
    /// (request-ipblocks/, request-patterns/, request-actions/CLUSTER/),
    /// from which requestctl writes its own VCL.
    Requestctl {
        #[command(flatten)]
        common: Common,
        /// The cluster the actions are for (request-actions/CLUSTER/).
        #[arg(long, value_name = "CLUSTER", default_value = "cache-text")]
        cluster: String,
        /// Leave out the rules requestctl cannot express (each named with
        /// the reason on stderr) instead of refusing the ruleset.
        #[arg(long)]
        skip_unsupported: bool,
    },
    /// HAProxy 2.6+: the rules themselves as ACLs, map files and stick
    /// tables, no agent.
    Haproxy {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        alone: Standalone,
        /// The directory the map files will be in on the HAProxy host
        /// (default: the -o directory, else /etc/haproxy/rctl).
        #[arg(long, value_name = "DIR")]
        config_dir: Option<PathBuf>,
    },
}

/// `rctl emit nginx --module`'s values.
#[derive(clap::Args)]
pub struct NginxModule {
    /// With --module: the artifact every worker loads and watches.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/rctl/active.rctlc"
    )]
    artifact: String,
    /// With --module: the module's file, as load_module takes it.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "modules/ngx_http_rctl_module.so"
    )]
    module_path: String,
    /// With --module: the shared zone's size (nginx's sizes: 16m).
    #[arg(long, value_name = "SIZE", default_value = "16m")]
    zone: String,
}

/// What the targets that decide by themselves (vcl, haproxy) take.
#[derive(clap::Args)]
pub struct Standalone {
    /// Take the client's address from this header, as the TLS terminator
    /// in front sets it (requestctl's X-Client-IP); `-` for the
    /// connection's address. Default: X-Client-IP for vcl, the
    /// connection's for haproxy.
    #[arg(long, value_name = "HEADER")]
    client_ip_header: Option<String>,
    /// Only the rules for this site (as requestctl writes one file per
    /// cluster and site).
    #[arg(long)]
    site: Option<String>,
    /// Leave out the rules the target cannot express (each named with the
    /// reason on stderr) instead of refusing the ruleset.
    #[arg(long)]
    skip_unsupported: bool,
}

impl Standalone {
    fn client_ip(&self, default: Option<&str>) -> Option<String> {
        match self.client_ip_header.as_deref().or(default) {
            None | Some("-") => None,
            Some(h) => Some(h.to_string()),
        }
    }
}

fn parse_backend(s: &str) -> Result<(String, u16), String> {
    let (h, p) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: expected HOST:PORT"))?;
    let p = p
        .parse()
        .map_err(|_| format!("{s:?}: the port is not a number from 0 to 65535"))?;
    Ok((
        h.trim_start_matches('[').trim_end_matches(']').to_string(),
        p,
    ))
}

/// The files, notes and left-out rules of `vcl` and `haproxy`, as an
/// [`Emitted`].
fn standalone(
    files: Vec<(String, String)>,
    notes: Vec<String>,
    skipped: Vec<(String, String)>,
) -> Emitted {
    let mut warnings = notes;
    warnings.extend(
        skipped
            .into_iter()
            .map(|(rule, why)| format!("rule {rule} left out: {why}")),
    );
    let files = files
        .into_iter()
        .map(|(name, text)| File {
            role: role(&name),
            name,
            text,
        })
        .collect();
    Emitted { files, warnings }
}

fn role(name: &str) -> &'static str {
    match name {
        vcl::RULES_FILE => "VCL to include: the rules, sub rctl_recv and rctl_synth",
        vcl::MAIN_FILE => "a complete VCL running the rules in front of one backend",
        haproxy::FRONTEND_FILE => "http-request rules for the frontend",
        haproxy::SECTIONS_FILE => {
            "global and stick-table sections: load with -f before the frontend's file"
        }
        n if n.starts_with("request-ipblocks/") => "a requestctl ipblock",
        n if n.starts_with("request-patterns/") => "a requestctl pattern",
        n if n.starts_with("request-actions/") => "a requestctl action",
        _ => "a map file of addresses (map_ip)",
    }
}

/// Refused rules (or options, named `--…`), each with the reason, and
/// the exit status 1.
fn refused(target: &str, why: &[(String, String)]) -> ExitCode {
    let mut err = std::io::stderr().lock();
    for (what, reason) in why {
        let _ = writeln!(
            err,
            "rctl: error: emit {target}: {}: {}",
            crate::term::text(what),
            crate::term::text(reason)
        );
    }
    let rules = why.iter().filter(|(w, _)| !w.starts_with("--")).count();
    if rules > 0 {
        let _ = writeln!(
            err,
            "rctl: {rules} rule(s) cannot be written for {target}; nothing was written (--skip-unsupported leaves them out and writes the rest)"
        );
    }
    ExitCode::from(1)
}

/// `--agent`, for clap (which names the flag itself).
fn parse_agent(s: &str) -> Result<Agent, String> {
    Agent::parse(s).map_err(|e| e.kind().to_string())
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
            client_ip_header,
        } => {
            let Some((rs, inputs)) = load(&common)? else {
                return Ok(ExitCode::from(1));
            };
            let config_dir = haproxy_dir(config_dir, &common)?;
            let o = haproxy_spoe::Options {
                agent,
                backend,
                config_dir: config_dir.to_string_lossy().into_owned(),
                timeout_ms,
                extra_headers: rctl_emit::header_names(&headers)?,
                source: source(&rs),
                client_ip_header,
            };
            (common, (haproxy_spoe::emit(&rs, &o)?, inputs))
        }
        Target::Nginx {
            common,
            module,
            nginx_module,
            agent,
            timeout_ms,
            client_ip_header,
        } => {
            let Some((rs, inputs)) = load(&common)? else {
                return Ok(ExitCode::from(1));
            };
            if module {
                let o = rctl_emit::nginx_module::Options {
                    artifact: nginx_module.artifact,
                    module: nginx_module.module_path,
                    zone: nginx_module.zone,
                    source: source(&rs),
                    client_ip_header,
                };
                let e = rctl_emit::nginx_module::emit(&rs, &o)?;
                return finish(&common, &e, &inputs);
            }
            let o = nginx::Options {
                agent,
                timeout_ms,
                source: source(&rs),
                client_ip_header,
            };
            (common, (nginx::emit(&rs, &o)?, inputs))
        }
        Target::Vcl {
            common,
            alone,
            backend,
        } => {
            let Some((rs, inputs)) = load(&common)? else {
                return Ok(ExitCode::from(1));
            };
            let o = vcl::Options {
                client_ip: match alone.client_ip(Some("X-Client-IP")) {
                    Some(h) => vcl::ClientIp::Header(h),
                    None => vcl::ClientIp::Connection,
                },
                site: alone.site.clone(),
                backend,
                skip_unsupported: alone.skip_unsupported,
            };
            let v = match vcl::emit(&rs, &o) {
                Ok(v) => v,
                Err(why) => return Ok(refused("vcl", &why)),
            };
            let e = standalone(v.files, v.notes, v.skipped);
            return finish(&common, &e, &inputs);
        }
        Target::Requestctl {
            common,
            cluster,
            skip_unsupported,
        } => {
            let Some((rs, inputs)) = load(&common)? else {
                return Ok(ExitCode::from(1));
            };
            let o = requestctl::Options {
                cluster,
                skip_unsupported,
            };
            let t = match requestctl::emit(&rs, &o) {
                Ok(t) => t,
                Err(requestctl::Error::Unsupported(why)) => return Ok(refused("requestctl", &why)),
                Err(requestctl::Error::Option(flag, why)) => {
                    return Ok(refused("requestctl", &[(flag.to_string(), why)]))
                }
            };
            let e = standalone(t.files, t.notes, t.skipped);
            return finish(&common, &e, &inputs);
        }
        Target::Haproxy {
            common,
            alone,
            config_dir,
        } => {
            let Some((rs, inputs)) = load(&common)? else {
                return Ok(ExitCode::from(1));
            };
            let config_dir = haproxy_dir(config_dir, &common)?;
            let o = haproxy::Options {
                client_ip_header: alone.client_ip(None),
                site: alone.site.clone(),
                config_dir: config_dir.to_string_lossy().into_owned(),
                skip_unsupported: alone.skip_unsupported,
            };
            let h = match haproxy::emit(&rs, &o) {
                Ok(h) => h,
                Err(why) => return Ok(refused("haproxy", &why)),
            };
            let e = standalone(h.files, h.notes, h.skipped);
            return finish(&common, &e, &inputs);
        }
    };
    let (emitted, inputs) = emitted;
    finish(&common, &emitted, &inputs)
}

/// Warns, then writes the files into -o DIR or prints them.
fn finish(common: &Common, emitted: &Emitted, inputs: &[PathBuf]) -> Result<ExitCode> {
    for w in &emitted.warnings {
        warn(w);
    }
    match &common.output {
        Some(dir) => write_dir(dir, emitted, inputs)?,
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
    Ok(load_ruleset(&c.paths, &c.limits.options())?.map(|l| (l.ruleset, l.inputs)))
}

/// "ruleset sha256 HASH (N rules)": the hash `rctl compile` prints for
/// the ruleset's artifact.
fn source(rs: &rctl_compiler::ir::Ruleset) -> String {
    let hash = artifact::content_hash(&artifact::encode(rs))
        .map(|h| artifact::hex(&h))
        .unwrap_or_default();
    format!(
        "ruleset sha256 {hash} ({})",
        crate::common::count(rs.rules.len(), "rule")
    )
}

/// --config-dir, else the -o directory, else /etc/haproxy/rctl.
fn haproxy_dir(config_dir: Option<PathBuf>, common: &Common) -> Result<PathBuf> {
    Ok(match (config_dir, &common.output) {
        (Some(d), _) => d,
        (None, Some(out)) => absolute(out)?,
        (None, None) => PathBuf::from("/etc/haproxy/rctl"),
    })
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
        let path = dir.join(&f.name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        output::write(&path, f.text.as_bytes(), inputs)?;
        let _ = writeln!(err, "wrote {} ({})", path.display(), f.role);
    }
    Ok(())
}
