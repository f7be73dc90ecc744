//! `rctl`: compile, check, explain, test and format rule sets.

mod agent;
mod dryrun;
mod dryrun_log;
mod emit;
mod eval;
mod explain;
mod fleet;
mod format;
mod haproxy;
mod host;
mod html;
mod import;
mod output;
mod serve;
mod term;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use rctl_compiler::diag::{Diagnostics, Severity};
use rctl_compiler::source::SourceMap;
use rctl_compiler::{artifact, Compilation, Options};
use std::io::Write;
use std::path::PathBuf;
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
    /// Also let `include` and `file` read below DIR (repeatable). Without
    /// it they read only below the ruleset's root: the directory named, or
    /// the directory of the file named.
    #[arg(long = "allow-path", value_name = "DIR")]
    allow_paths: Vec<PathBuf>,
}

impl Limits {
    fn options(&self) -> Options {
        Options {
            max_depth: self.max_depth,
            max_rules: self.max_rules,
            max_prefixes: self.max_prefixes,
            allow_paths: self.allow_paths.clone(),
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
        /// Print, on stdout, a `test` block for each exemption conflict: a
        /// request both rules match, ready to paste into a rule file.
        #[arg(long)]
        witness: bool,
        #[command(flatten)]
        limits: Limits,
    },
    /// Compile a ruleset into one versioned artifact.
    Compile {
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Where to write the artifact (written atomically; a new path or a
        /// regular file, not one of the sources).
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
        /// Also print, per rule, a request that reaches it (or the rules
        /// that decide all of its traffic first), as text.
        #[arg(long)]
        witness: bool,
        #[command(flatten)]
        limits: Limits,
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
        #[command(flatten)]
        limits: Limits,
    },
    /// Replay captured traffic through the rules and report what each rule
    /// would do, to whom.
    DryRun {
        /// Sources, or one compiled .rctlc artifact.
        #[arg(required_unless_present = "explain_input")]
        paths: Vec<PathBuf>,
        /// Capture files (pcap or pcapng), directories of them, or `-`.
        #[arg(long, required_unless_present_any = ["log", "explain_input"])]
        pcap: Vec<PathBuf>,
        #[command(flatten)]
        logs: dryrun_log::LogArgs,
        /// Compare with an older ruleset (artifact or sources): which
        /// decisions change, for how many requests, and for whom.
        #[arg(long)]
        against: Option<PathBuf>,
        /// Also write a self-contained HTML report here (a new path or a
        /// regular file, not one of the inputs).
        #[arg(long)]
        report: Option<PathBuf>,
        /// Evaluate this site's rules.
        #[arg(long)]
        site: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Most stream bytes held by all flows together (partial heads,
        /// out-of-order data), like 256MiB or 1GiB; past it, the flows
        /// holding the most are dropped first, and counted in the report.
        #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = dryrun::parse_size)]
        max_buffered: usize,
        #[command(flatten)]
        limits: Limits,
    },
    /// Run the ruleset's `test` blocks through the engine.
    Test {
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Run only tests whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        #[command(flatten)]
        limits: Limits,
    },
    /// Format rule files canonically.
    Fmt {
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Do not write; exit 1 if any file is not formatted.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        limits: Limits,
    },
    /// Enforce a compiled ruleset: its packet plane on an interface (XDP)
    /// and its HTTP plane in the running agent (`rctl serve`), each
    /// switched atomically; installs the artifact.
    Apply {
        /// The compiled .rctlc artifact.
        artifact: PathBuf,
        /// The interface for the packet plane (without it, only the agent
        /// is switched).
        #[arg(long)]
        iface: Option<String>,
        /// The agent's control socket (default: /run/rctl/agent.sock when
        /// it exists).
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
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
    /// Show what rctl enforces where: per interface and in the agent,
    /// ruleset hash, counters per rule, rate-limit table fill.
    Status {
        /// Only this interface (the agent is then shown only with --agent).
        #[arg(long)]
        iface: Option<String>,
        /// The agent's control socket (default: /run/rctl/agent.sock when
        /// it exists).
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// HAProxy's stats socket: also show the requests HAProxy let
        /// through unchecked (the table `rctl emit haproxy-spoe` writes).
        #[arg(long, value_name = "PATH")]
        haproxy_socket: Option<PathBuf>,
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
    /// Serve live HTTP enforcement: HAProxy SPOE, an HTTP check endpoint
    /// for nginx and Envoy, metrics, the matched-request log; switched by
    /// `rctl apply` through its control socket.
    Serve(serve::ServeArgs),
    /// Import another tool's rules: `rctl import requestctl DIR|DUMP -o OUTDIR`.
    #[command(subcommand)]
    Import(import::ImportSource),
    /// Store an artifact in etcd and point every host (or a site's) at it,
    /// in one transaction; or roll back.
    Push(fleet::PushArgs),
    /// `rctl serve` that follows etcd: applies what `rctl push` points at
    /// to both planes, reports under a lease, counts `shared` limits in
    /// Redis.
    Agent(Box<fleet::AgentArgs>),
    /// The fleet: which host runs what, who lags or failed.
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
    },
    /// Write an edge proxy's configuration for a ruleset: HAProxy SPOE or
    /// nginx auth_request asking `rctl serve`, or VCL and HAProxy ACLs that
    /// decide by themselves (requestctl's shape).
    Emit {
        #[command(subcommand)]
        target: emit::Target,
    },
    /// Show a compiler stage: the AST, the IR or the plan.
    Debug {
        /// ast, ir or plan.
        #[arg(value_enum)]
        stage: Stage,
        /// .rctl files, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        limits: Limits,
    },
}

#[derive(Subcommand)]
enum FleetCommand {
    /// Every host's generation and artifact against its target (exit 1
    /// unless every host runs its target).
    Status {
        #[command(flatten)]
        etcd: fleet::EtcdArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
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

impl From<ModeArg> for rctl_loader::host::Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Auto => Self::Auto,
            ModeArg::Native => Self::Native,
            ModeArg::Skb => Self::Skb,
        }
    }
}

impl From<ClockArg> for rctl_dataplane::xdp::ClockMode {
    fn from(c: ClockArg) -> Self {
        match c {
            ClockArg::Tick => Self::Tick,
            ClockArg::Exact => Self::Exact,
        }
    }
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
            // A closed pipe (`rctl status | head -1`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            let _ = writeln!(
                std::io::stderr().lock(),
                "rctl: error: {}",
                term::text(&format!("{e:#}"))
            );
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

/// Writes a command's output to stdout, escaped for a terminal.
fn print(out: &str, format: Format) -> Result<()> {
    let out = match format {
        Format::Text => term::text(out),
        Format::Json => term::json(out),
    };
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(())
}

/// Merged (IPv4, IPv6) prefix counts per ipblock.
type IpblockSizes = Vec<(String, usize, usize)>;

/// A ruleset, its ipblock sizes and the files it was read from.
type LoadedRuleset = (rctl_compiler::ir::Ruleset, IpblockSizes, Vec<PathBuf>);

/// A ruleset from one artifact or from sources (reporting diagnostics);
/// `None` if the sources have errors.
fn load_ruleset(paths: &[PathBuf], opts: &Options) -> Result<Option<LoadedRuleset>> {
    if is_artifact(paths) {
        let bytes =
            rctl_compiler::files::read_binary(&paths[0], rctl_compiler::files::MAX_BINARY_BYTES)
                .with_context(|| format!("reading {}", paths[0].display()))?;
        let rs = artifact::decode(&bytes).with_context(|| format!("{}", paths[0].display()))?;
        let sizes = rs
            .ipsets
            .iter()
            .filter(|s| s.name != "inline")
            .map(|s| (s.name.clone(), s.prefixes.v4.len(), s.prefixes.v6.len()))
            .collect();
        return Ok(Some((rs, sizes, paths.to_vec())));
    }
    let c = compile(paths, opts);
    if report(&c.sources, &c.diagnostics, false) {
        return Ok(None);
    }
    let Some(rs) = c.ruleset else {
        bail!("no ruleset produced")
    };
    Ok(Some((rs, c.ipblock_sizes, source_paths(&c.sources))))
}

/// The paths of every file a compilation read.
fn source_paths(map: &SourceMap) -> Vec<PathBuf> {
    map.files().iter().map(|f| f.path.clone()).collect()
}

/// Whether `paths` is one compiled artifact (a regular file that starts
/// with the artifact's magic number).
fn is_artifact(paths: &[PathBuf]) -> bool {
    use std::io::Read as _;
    let [path] = paths else { return false };
    let mut magic = [0u8; artifact::MAGIC.len()];
    path.is_file()
        && std::fs::File::open(path).is_ok_and(|f| {
            f.take(magic.len() as u64).read_exact(&mut magic).is_ok() && magic == artifact::MAGIC
        })
}

/// Warns when `--site` names a site no rule names.
fn warn_site(rs: &rctl_compiler::ir::Ruleset, site: Option<&str>) {
    if let Some(w) = rs.site_warning(site) {
        host::warn(&w);
    }
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
        Command::Import(src) => import::run(src),
        Command::Check {
            paths,
            deny_warnings,
            witness,
            limits,
        } => {
            let c = compile(&paths, &limits.options());
            let failed = report(&c.sources, &c.diagnostics, deny_warnings);
            if witness {
                let tests: Vec<&str> = c
                    .diagnostics
                    .sorted()
                    .into_iter()
                    .filter_map(|d| d.witness.as_deref())
                    .collect();
                print(&tests.join("\n"), Format::Text)?;
            }
            if let (false, Some(rs)) = (failed, &c.ruleset) {
                let prefixes: usize = rs.ipsets.iter().map(|s| s.prefixes.len()).sum();
                let _ = writeln!(
                    std::io::stderr().lock(),
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
            output::write(&output, &bytes, &source_paths(&c.sources))?;
            let hash = artifact::content_hash(&bytes)
                .map(|h| artifact::hex(&h))
                .unwrap_or_default();
            let _ = writeln!(
                std::io::stderr().lock(),
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
            limits,
        } => {
            let Some((rs, _, _)) = load_ruleset(&paths, &limits.options())? else {
                return Ok(ExitCode::from(1));
            };
            warn_site(&rs, site.as_deref());
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
            print(&out, format)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::DryRun {
            paths,
            pcap,
            against,
            report,
            site,
            format,
            limits,
            max_buffered,
            logs,
        } => {
            if logs.explain_input {
                print(&dryrun_log::explain_input(&logs)?, Format::Text)?;
                return Ok(ExitCode::SUCCESS);
            }
            let opts = limits.options();
            let Some((rs, _, mut inputs)) = load_ruleset(&paths, &opts)? else {
                return Ok(ExitCode::from(1));
            };
            warn_site(&rs, site.as_deref());
            let files = dryrun::inputs(&pcap)?;
            let mut run = rctl_dataplane::dryrun::DryRun::new(rs, site.clone())?;
            run.set_max_buffered(max_buffered);
            if let Some(old) = against {
                let Some((old, _, old_inputs)) = load_ruleset(&[old], &opts)? else {
                    return Ok(ExitCode::from(1));
                };
                inputs.extend(old_inputs);
                run.against(old, site)?;
            }
            inputs.extend(files.iter().cloned());
            inputs.extend(logs.log.iter().cloned());
            // Refused before the replay, which can take long, and again
            // when written.
            if let Some(p) = &report {
                output::check_target(p, &inputs)?;
            }
            let mut complete = dryrun::replay_all(&mut run, &files);
            let from_logs = if logs.log.is_empty() {
                None
            } else {
                let (summary, failed) = dryrun_log::replay(&mut run, &logs)?;
                complete &= !failed;
                Some(summary)
            };
            let sampled = logs.sampled.filter(|&n| n > 1);
            let html_path = report;
            let mut report = run.finish();
            if let Some(n) = sampled {
                dryrun_log::scale(&mut report, n);
            }
            if let Some(p) = html_path {
                output::write(&p, html::render(&report).as_bytes(), &inputs)?;
            }
            let out = match (format, &from_logs) {
                (Format::Text, None) => dryrun::text(&report),
                (Format::Text, Some(s)) => {
                    dryrun::text(&report) + "\n" + &dryrun_log::text(&report, s, sampled)
                }
                (Format::Json, _) => dryrun_log::json(&report, sampled)?,
            };
            print(&out, format)?;
            Ok(fail(!complete))
        }
        Command::Explain {
            paths,
            site,
            format,
            witness,
            limits,
        } => {
            let opts = limits.options();
            let Some((rs, sizes, _)) = load_ruleset(&paths, &opts)? else {
                return Ok(ExitCode::from(1));
            };
            warn_site(&rs, site.as_deref());
            let out = match format {
                Format::Text => explain::text(&rs, &sizes, site.as_deref()),
                Format::Json => explain::json(&rs, &sizes, site.as_deref())?,
            };
            print(&out, format)?;
            if witness {
                print(&explain::reaching(&rs, &opts), Format::Text)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Test {
            paths,
            filter,
            limits,
        } => {
            let c = compile(&paths, &limits.options());
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
                    writeln!(out, "ok   {} ({} sent)", term::text(&r.name), r.sent)?;
                } else {
                    failed += 1;
                    let (name, loc) = (term::text(&r.name), term::text(&loc));
                    writeln!(out, "FAIL {name} ({loc})")?;
                    for (i, msg) in &r.failures {
                        let line = t.expects[*i].span.line;
                        writeln!(out, "     line {line}: {}", term::text(msg))?;
                    }
                }
            }
            writeln!(out, "test result: {passed} passed, {failed} failed")?;
            Ok(fail(failed > 0))
        }
        Command::Fmt {
            paths,
            check,
            limits,
        } => format::run(&paths, check, &limits.options()),
        Command::Apply {
            artifact,
            iface,
            agent,
            mode,
            clock,
            site,
            object,
            host,
        } => {
            let (mode, clock) = (mode.into(), clock.into());
            let xdp = iface.as_deref().map(|iface| host::XdpArgs {
                iface,
                mode,
                clock,
                object,
            });
            agent::apply(&artifact, xdp, agent, site.as_deref(), &host)
        }
        Command::Status {
            iface,
            agent,
            format,
            haproxy_socket,
            host,
        } => {
            let seen = agent::Seen::ask(agent, iface.as_deref());
            let proxy = haproxy_socket.map(haproxy::Seen::ask);
            host::status(iface.as_deref(), seen, proxy, format == Format::Json, &host)
        }
        Command::Serve(args) => {
            serve::run(args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Push(args) => fleet::push(args),
        Command::Agent(args) => fleet::agent(*args),
        Command::Fleet {
            command: FleetCommand::Status { etcd, format },
        } => fleet::status(&etcd, format),
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
        Command::Emit { target } => emit::run(target),
        Command::Debug {
            stage,
            paths,
            limits,
        } => {
            let c = compile(&paths, &limits.options());
            let mut out = std::io::stdout().lock();
            match stage {
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
                    writeln!(out, "{}", term::json(&serde_json::to_string_pretty(&v)?))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
