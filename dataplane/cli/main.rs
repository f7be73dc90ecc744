//! `rctl`: compile, check, explain, test and format rule sets.

mod dryrun;
mod eval;
mod explain;
mod host;
mod html;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use rctl_compiler::diag::{Diagnostics, Severity};
use rctl_compiler::source::SourceMap;
use rctl_compiler::{artifact, Compilation, Options};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rctl",
    version,
    about = "Rule compiler and edge-filter data plane for scraper blocking and rate limits"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Limits {
    /// Deepest parenthesis nesting allowed in an expression.
    #[arg(long, default_value_t = 64)]
    max_depth: usize,
    /// Most rules allowed.
    #[arg(long, default_value_t = 50_000)]
    max_rules: usize,
    /// Most prefixes allowed across all ipblocks, after merging.
    #[arg(long, default_value_t = 4_000_000)]
    max_prefixes: usize,
}

impl Limits {
    fn options(&self) -> Options {
        Options {
            max_depth: self.max_depth,
            max_rules: self.max_rules,
            max_prefixes: self.max_prefixes,
            ..Options::default()
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Check rule files and directories; report every error and warning.
    Check {
        /// .rctl files, or directories of them (one ruleset).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Treat warnings as errors.
        #[arg(long)]
        deny_warnings: bool,
        #[command(flatten)]
        limits: Limits,
    },
    /// Compile a ruleset into one versioned artifact.
    Compile {
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Where to write the artifact (written atomically).
        #[arg(short, long)]
        output: PathBuf,
        /// Treat warnings as errors.
        #[arg(long)]
        deny_warnings: bool,
        #[command(flatten)]
        limits: Limits,
    },
    /// Print the plan: rules in evaluation order, their plane and keys.
    Explain {
        /// Sources, or one compiled .rctlc artifact.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Show only rules for this site.
        #[arg(long)]
        site: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Decide one request and print a trace: predicates, rules, verdict.
    Eval {
        /// Sources, or one compiled .rctlc artifact.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The URL: a path (`/sparql?query=…`) or `https://host/path`.
        #[arg(long, default_value = "/")]
        url: String,
        /// HTTP method.
        #[arg(long, short = 'X', default_value = "GET")]
        method: String,
        /// Host (default: the URL's, or the Host header).
        #[arg(long)]
        host: Option<String>,
        /// A header, `Name: value`; repeatable.
        #[arg(long = "header", short = 'H')]
        headers: Vec<String>,
        /// Client address.
        #[arg(long, default_value = "192.0.2.1")]
        ip: std::net::IpAddr,
        /// The edge address the client reached (`dst_ip` rules are false
        /// without it).
        #[arg(long)]
        dst_ip: Option<std::net::IpAddr>,
        /// Destination port (default: the URL's scheme's, else 443).
        #[arg(long)]
        port: Option<u16>,
        /// Evaluate this site's rules.
        #[arg(long)]
        site: Option<String>,
        /// Send the request this many times at once (to see limits act);
        /// at most 1,000,000.
        #[arg(long, default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(eval::MAX_COUNT)))]
        count: u32,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Replay captured traffic through the rules and report what each rule
    /// would do, to whom.
    DryRun {
        /// Sources, or one compiled .rctlc artifact.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Capture files (pcap or pcapng), directories of them, or `-`.
        #[arg(long, required = true)]
        pcap: Vec<PathBuf>,
        /// Compare with an older ruleset (artifact or sources): which
        /// decisions change, for how many requests, and for whom.
        #[arg(long)]
        against: Option<PathBuf>,
        /// Also write a self-contained HTML report here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Evaluate this site's rules.
        #[arg(long)]
        site: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Run the ruleset's `test` blocks through the engine.
    Test {
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Run only tests whose name contains this.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Format rule files canonically.
    Fmt {
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Do not write; exit 1 if any file is not formatted.
        #[arg(long)]
        check: bool,
    },
    /// Enforce a compiled ruleset's packet plane on an interface (XDP),
    /// atomically replacing what runs there, and install the artifact.
    Apply {
        /// The compiled .rctlc artifact.
        artifact: PathBuf,
        /// The interface.
        #[arg(long)]
        iface: String,
        /// XDP mode.
        #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
        mode: ModeArg,
        /// The clock rate limits read.
        #[arg(long, value_enum, default_value_t = ClockArg::Tick)]
        clock: ClockArg,
        /// Enforce this site's rules.
        #[arg(long)]
        site: Option<String>,
        /// The XDP object (default: RCTL_XDP_OBJECT, else the one built in).
        #[arg(long)]
        object: Option<PathBuf>,
        #[command(flatten)]
        host: host::HostPaths,
    },
    /// Show what rctl enforces where: mode, ruleset hash, counters per
    /// rule, rate-limit table fill.
    Status {
        /// Only this interface.
        #[arg(long)]
        iface: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        host: host::HostPaths,
    },
    /// Follow the program's events (sources entering a ban), across
    /// applies.
    Log {
        /// The interface.
        #[arg(long)]
        iface: String,
        /// Stop after this many seconds (default: run until interrupted).
        #[arg(long)]
        seconds: Option<f64>,
        #[command(flatten)]
        host: host::HostPaths,
    },
    /// Remove rctl's program from an interface, with its pins.
    Detach {
        /// The interface.
        #[arg(long)]
        iface: String,
        #[command(flatten)]
        host: host::HostPaths,
    },
    /// Show a compiler stage: the AST, the IR or the plan.
    Debug {
        /// ast, ir or plan.
        #[arg(value_enum)]
        stage: Stage,
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

#[derive(Copy, Clone, ValueEnum)]
enum ModeArg {
    /// Native (driver) XDP, else skb mode with a warning.
    Auto,
    /// Native XDP or fail.
    Native,
    /// Generic (skb) XDP.
    Skb,
}

#[derive(Copy, Clone, ValueEnum)]
enum ClockArg {
    /// The kernel tick (1/HZ): one load per packet; the average rate is
    /// exact, a burst may run over by one tick's worth of packets.
    Tick,
    /// The exact clock: a helper call per limited packet (tens of ns).
    Exact,
}

#[derive(Copy, Clone, ValueEnum)]
enum Stage {
    Ast,
    Ir,
    Plan,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("rctl: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Prints diagnostics to stderr with a summary; returns whether the run fails.
fn report(map: &SourceMap, diags: &Diagnostics, deny_warnings: bool) -> bool {
    let mut err = std::io::stderr().lock();
    for d in diags.sorted() {
        let _ = writeln!(err, "{}", d.render(map));
    }
    let (e, w) = (diags.error_count(), diags.warning_count());
    if e + w > 0 {
        let _ = writeln!(
            err,
            "{e} error{}, {w} warning{}",
            if e == 1 { "" } else { "s" },
            if w == 1 { "" } else { "s" }
        );
    }
    e > 0 || (deny_warnings && diags.iter().any(|d| d.severity == Severity::Warning))
}

fn compile(paths: &[PathBuf], opts: &Options) -> Compilation {
    rctl_compiler::compile_paths(paths, opts)
}

/// Merged (IPv4, IPv6) prefix counts per ipblock.
type IpblockSizes = Vec<(String, usize, usize)>;

/// A ruleset from one artifact or from sources (reporting diagnostics);
/// `None` if the sources have errors.
fn load_ruleset(paths: &[PathBuf]) -> Result<Option<(rctl_compiler::ir::Ruleset, IpblockSizes)>> {
    if is_artifact(paths) {
        let bytes = std::fs::read(&paths[0])?;
        let rs = artifact::decode(&bytes).with_context(|| format!("{}", paths[0].display()))?;
        let sizes = rs
            .ipsets
            .iter()
            .filter(|s| s.name != "inline")
            .map(|s| (s.name.clone(), s.prefixes.v4.len(), s.prefixes.v6.len()))
            .collect();
        return Ok(Some((rs, sizes)));
    }
    let c = compile(paths, &Options::default());
    if report(&c.sources, &c.diagnostics, false) {
        return Ok(None);
    }
    let Some(rs) = c.ruleset else {
        bail!("no ruleset produced")
    };
    Ok(Some((rs, c.ipblock_sizes)))
}

fn is_artifact(paths: &[PathBuf]) -> bool {
    paths.len() == 1
        && paths[0].is_file()
        && std::fs::read(&paths[0]).is_ok_and(|b| b.starts_with(&artifact::MAGIC))
}

/// Writes a file atomically: a temporary file in the same directory, then a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(rctl_dataplane::xdp::host::write_atomic(path, bytes)?)
}

fn run(cli: Cli) -> Result<ExitCode> {
    let fail = |b: bool| {
        if b {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    };
    match cli.command {
        Command::Check {
            paths,
            deny_warnings,
            limits,
        } => {
            let c = compile(&paths, &limits.options());
            let failed = report(&c.sources, &c.diagnostics, deny_warnings);
            if let (false, Some(rs)) = (failed, &c.ruleset) {
                let prefixes: usize = rs.ipsets.iter().map(|s| s.prefixes.len()).sum();
                eprintln!(
                    "ok: {} files, {} rules, {} predicates, {} prefixes, {} tests",
                    c.files.len(),
                    rs.rules.len(),
                    rs.atoms.len(),
                    prefixes,
                    c.tests.len()
                );
            }
            Ok(fail(failed))
        }
        Command::Compile {
            paths,
            output,
            deny_warnings,
            limits,
        } => {
            let c = compile(&paths, &limits.options());
            if report(&c.sources, &c.diagnostics, deny_warnings) {
                return Ok(ExitCode::from(1));
            }
            let Some(rs) = c.ruleset else {
                bail!("no ruleset produced")
            };
            let bytes = artifact::encode(&rs);
            write_atomic(&output, &bytes)?;
            let hash = artifact::content_hash(&bytes)
                .map(|h| artifact::hex(&h))
                .unwrap_or_default();
            eprintln!(
                "wrote {} ({} bytes, {} rules, content sha256 {hash})",
                output.display(),
                bytes.len(),
                rs.rules.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval {
            paths,
            url,
            method,
            host,
            headers,
            ip,
            dst_ip,
            port,
            site,
            count,
            format,
        } => {
            let Some((rs, _)) = load_ruleset(&paths)? else {
                return Ok(ExitCode::from(1));
            };
            let args = eval::EvalArgs {
                method,
                url,
                host,
                headers,
                ip,
                dst_ip,
                port,
                site,
                count,
                json: format == Format::Json,
            };
            let out = eval::run(rs, &args)?;
            std::io::stdout().lock().write_all(out.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::DryRun {
            paths,
            pcap,
            against,
            report,
            site,
            format,
        } => {
            let Some((rs, _)) = load_ruleset(&paths)? else {
                return Ok(ExitCode::from(1));
            };
            let files = dryrun::inputs(&pcap)?;
            let mut run = rctl_dataplane::dryrun::DryRun::new(rs, site.clone())?;
            if let Some(old) = against {
                let Some((old, _)) = load_ruleset(&[old])? else {
                    return Ok(ExitCode::from(1));
                };
                run.against(old, site)?;
            }
            let complete = dryrun::replay_all(&mut run, &files);
            let html_path = report;
            let report = run.finish();
            if let Some(p) = html_path {
                write_atomic(&p, html::render(&report).as_bytes())?;
            }
            let out = match format {
                Format::Text => dryrun::text(&report),
                Format::Json => serde_json::to_string_pretty(&report)? + "\n",
            };
            std::io::stdout().lock().write_all(out.as_bytes())?;
            Ok(fail(!complete))
        }
        Command::Explain {
            paths,
            site,
            format,
        } => {
            let Some((rs, sizes)) = load_ruleset(&paths)? else {
                return Ok(ExitCode::from(1));
            };
            let out = match format {
                Format::Text => explain::text(&rs, &sizes, site.as_deref()),
                Format::Json => explain::json(&rs, &sizes, site.as_deref())?,
            };
            std::io::stdout().lock().write_all(out.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Test { paths, filter } => {
            let c = compile(&paths, &Options::default());
            if report(&c.sources, &c.diagnostics, false) {
                return Ok(ExitCode::from(1));
            }
            let Some(rs) = c.ruleset else {
                bail!("no ruleset produced")
            };
            let mut out = std::io::stdout().lock();
            let (mut passed, mut failed) = (0, 0);
            for t in c
                .tests
                .iter()
                .filter(|t| filter.as_deref().is_none_or(|f| t.name.contains(f)))
            {
                let r = rctl_dataplane::testing::run_test(&rs, t)?;
                let loc = c
                    .sources
                    .get(t.span.file)
                    .map(|f| format!("{}:{}", f.path.display(), t.span.line))
                    .unwrap_or_default();
                if r.passed() {
                    passed += 1;
                    writeln!(out, "ok   {} ({} sent)", r.name, r.sent)?;
                } else {
                    failed += 1;
                    writeln!(out, "FAIL {} ({loc})", r.name)?;
                    for (i, msg) in &r.failures {
                        let line = t.expects[*i].span.line;
                        writeln!(out, "     line {line}: {msg}")?;
                    }
                }
            }
            writeln!(out, "test result: {passed} passed, {failed} failed")?;
            Ok(fail(failed > 0))
        }
        Command::Fmt { paths, check } => fmt(&paths, check),
        Command::Apply {
            artifact,
            iface,
            mode,
            clock,
            site,
            object,
            host,
        } => {
            let mode = match mode {
                ModeArg::Auto => rctl_dataplane::xdp::host::Mode::Auto,
                ModeArg::Native => rctl_dataplane::xdp::host::Mode::Native,
                ModeArg::Skb => rctl_dataplane::xdp::host::Mode::Skb,
            };
            let clock = match clock {
                ClockArg::Tick => rctl_dataplane::xdp::ClockMode::Tick,
                ClockArg::Exact => rctl_dataplane::xdp::ClockMode::Exact,
            };
            host::apply(
                artifact,
                &iface,
                mode,
                clock,
                site.as_deref(),
                object,
                &host,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status {
            iface,
            format,
            host,
        } => {
            host::status(iface.as_deref(), format == Format::Json, &host)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Log {
            iface,
            seconds,
            host,
        } => {
            host::log(&iface, seconds, &host)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Detach { iface, host } => {
            host::detach(&iface, &host)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Debug { stage, paths } => {
            let c = compile(&paths, &Options::default());
            let mut out = std::io::stdout().lock();
            match stage {
                Stage::Ast => {
                    for (id, f) in &c.files {
                        let name = c
                            .sources
                            .get(*id)
                            .map(|s| s.path.display().to_string())
                            .unwrap_or_default();
                        writeln!(out, "// {name}\n{:#?}", f.items)?;
                    }
                }
                Stage::Ir | Stage::Plan => {
                    if report(&c.sources, &c.diagnostics, false) {
                        return Ok(ExitCode::from(1));
                    }
                    let Some(rs) = c.ruleset else {
                        bail!("no ruleset produced")
                    };
                    let v = if matches!(stage, Stage::Ir) {
                        serde_json::json!({ "ipsets": rs.ipsets.iter().map(|s| serde_json::json!({"name": s.name, "v4": s.prefixes.v4.len(), "v6": s.prefixes.v6.len()})).collect::<Vec<_>>(), "atoms": rs.atoms, "rules": rs.rules })
                    } else {
                        serde_json::json!(rs
                            .rules
                            .iter()
                            .zip(&rs.plan)
                            .map(|(r, p)| serde_json::json!({"rule": r.name, "plan": p}))
                            .collect::<Vec<_>>())
                    };
                    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn fmt(paths: &[PathBuf], check: bool) -> Result<ExitCode> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            collect(p, &mut files)?;
        } else {
            files.push(p.clone());
        }
    }
    let mut unformatted = 0;
    let mut broken = false;
    for path in files {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut map = SourceMap::new();
        let id = map.add(path.clone(), text.clone());
        let Some(src) = map.get(id) else { continue };
        let mut diags = Diagnostics::default();
        let file = rctl_compiler::parse::parse_file(src, id, &Default::default(), &mut diags);
        if diags.has_errors() {
            report(&map, &diags, false);
            broken = true;
            continue;
        }
        let formatted = rctl_compiler::fmt::format_file(&file, src);
        if formatted != text {
            unformatted += 1;
            if check {
                println!("{} is not formatted", path.display());
            } else {
                write_atomic(&path, formatted.as_bytes())?;
                println!("formatted {}", path.display());
            }
        }
    }
    Ok(if broken || (check && unformatted > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "rctl") {
            out.push(p);
        }
    }
    Ok(())
}
