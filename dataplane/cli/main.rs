//! `rctl`: compile, check, explain, test and format rule sets; enforce
//! them on a host (XDP and the agent) and across a fleet.
//!
//! This file holds the command line's shape and nothing else: the
//! [`Command`] enum, the dispatch to each subcommand's module (its flags,
//! `Args`, and its `run`), and the mapping of errors to exit codes (2 for
//! an error; a command returns 1 itself for "ran, and found a failure").
//!
//! - Rules: `check`, `compile`, `explain`, `eval`, `dryrun`, `suggest`,
//!   `test`, `format` (`rctl fmt`), `debug`, `import`, `emit`.
//! - A host: `apply`, `status`, `log`, `detach`, `serve`.
//! - A fleet: `push`, `agent`, `fleet`.
//! - Shared leaves (they use no command's module): `common` (flags
//!   every command takes, printing), `hostargs` (the packet plane's
//!   flags), `agent_socket`, `etcd`, `listen` (`serve`'s and
//!   `agent`'s listeners), `output` (writing files), `term`
//!   (escaping for a terminal).

mod agent;
mod agent_socket;
mod apply;
mod check;
mod common;
mod compile;
mod config;
mod debug;
mod detach;
mod dryrun;
mod emit;
mod etcd;
mod eval;
mod explain;
mod fleet;
mod format;
mod generate;
mod hostargs;
mod import;
mod listen;
mod log;
mod log_input;
mod nginx;
mod output;
mod push;
mod serve;
mod status;
mod suggest;
mod tap;
mod term;
mod test;
mod test_replay;
mod top;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rctl",
    version,
    about = "Rule compiler and edge-filter data plane for scraper blocking and rate limits",
    after_long_help = "Exit status:\n  \
        0  success\n  \
        1  the command ran and found a failure: a rule error (at its file:line:col), \
        a failing test, a refused apply\n  \
        2  a usage error, a path named on the command line that cannot be read, \
        or an error that stopped the command\n\
        rctl status and rctl fleet status exit as monitoring plugins do: \
        0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check rule files and directories; report every error and warning.
    Check(check::Args),
    /// Compile a ruleset into one versioned artifact.
    Compile(compile::Args),
    /// Print the plan: rules in evaluation order, their plane and keys.
    Explain(explain::Args),
    /// Decide one request and print a trace: predicates, rules, verdict.
    Eval(eval::Args),
    /// Replay captured traffic through the rules and report what each rule
    /// would do, to whom.
    DryRun(dryrun::Args),
    /// Find the heavy clients of a capture or an access log and propose rules for them,
    /// each with a test block, its effect and its collateral measured on
    /// the same traffic.
    Suggest(suggest::Args),
    /// Run the ruleset's `test` blocks through the engine: their written samples,
    /// or the access logs and captures they replay.
    Test(test::Args),
    /// Format rule files canonically.
    Fmt(format::Args),
    /// Enforce a compiled ruleset: its packet plane on an interface (XDP)
    /// and its HTTP plane in the running agent (`rctl serve`), each
    /// switched atomically; installs the artifact.
    Apply(apply::Args),
    /// Show what rctl enforces where: per interface and in the agent,
    /// ruleset hash, counters per rule, rate-limit table fill.
    Status(status::Args),
    /// Show the running agent's recent traffic by key (address, prefix,
    /// User-Agent and family, path template) with each key's verdicts,
    /// refreshed like varnishtop.
    Top(top::Args),
    /// Write every request the running agent decides in the next
    /// seconds as webrequest JSON lines (a log `--log-format webrequest`
    /// reads), with how many were lost.
    Tap(tap::Args),
    /// Follow the program's events (sources entering a ban), across
    /// applies.
    Log(log::Args),
    /// Remove rctl's program from an interface, with its pins.
    Detach(detach::Args),
    /// Serve live HTTP enforcement: HAProxy SPOE, an HTTP check endpoint
    /// for nginx and Envoy, metrics, the matched-request log; switched by
    /// `rctl apply` through its control socket.
    Serve(serve::Args),
    /// Import another tool's rules: `rctl import requestctl DIR|DUMP -o OUTDIR`.
    #[command(subcommand)]
    Import(import::ImportSource),
    /// Store an artifact in etcd and point every host (or a site's) at it,
    /// in one transaction; or roll back.
    Push(push::Args),
    /// `rctl serve` that follows etcd: applies what `rctl push` points at
    /// to both planes, reports under a lease, counts `shared` limits in
    /// Redis.
    Agent(Box<agent::Args>),
    /// The fleet: which host runs what, who lags or failed.
    Fleet(fleet::Args),
    /// Write an edge proxy's configuration for a ruleset: HAProxy SPOE or
    /// nginx auth_request asking `rctl serve`, or VCL and HAProxy ACLs that
    /// decide by themselves (requestctl's shape).
    Emit {
        #[command(subcommand)]
        target: emit::Target,
    },
    /// Show a compiler stage: the AST, the IR or the plan.
    Debug(debug::Args),
    /// Write man pages, shell completions or the command reference from
    /// rctl's own flag definitions.
    Generate(generate::Args),
}

/// `rctl --version`: the version, the commit it was built from, the
/// artifact format it reads and writes, and the XDP program built in.
fn long_version() -> String {
    format!(
        "{}\ncommit: {}\nartifact format: {}\nXDP program: {}",
        env!("CARGO_PKG_VERSION"),
        env!("RCTL_COMMIT"),
        rctl_compiler::artifact::FORMAT_VERSION,
        env!("RCTL_XDP_BUILD_ID"),
    )
}

/// The command line as parsed and documented: the long version, and the
/// host commands' flags readable from `RCTL_*` variables.
fn cli_command() -> clap::Command {
    use clap::CommandFactory as _;
    // Built once a process: clap keeps the text for the process's life.
    let version: &'static str = Box::leak(long_version().into_boxed_str());
    config::with_env(Cli::command().long_version(version))
}

fn main() -> ExitCode {
    use clap::FromArgMatches as _;
    // Before any thread: the file's settings go into the environment,
    // and then the command is built again, as clap reads the environment
    // when a flag is given its variable.
    if let Err(e) = config::load(&cli_command()) {
        let _ = writeln!(
            std::io::stderr().lock(),
            "rctl: error: {}",
            term::text(&format!("{e:#}"))
        );
        return ExitCode::from(2);
    }
    let matches = cli_command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            // Said already (diagnostics): only the code is left.
            if let Some(common::Failed(code)) = e.downcast_ref::<common::Failed>() {
                return ExitCode::from(*code);
            }
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

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Check(a) => check::run(a),
        Command::Compile(a) => compile::run(a),
        Command::Explain(a) => explain::run(a),
        Command::Eval(a) => eval::run(a),
        Command::DryRun(a) => dryrun::run(a),
        Command::Suggest(a) => suggest::run(a),
        Command::Top(a) => top::run(a),
        Command::Tap(a) => tap::run(a),
        Command::Test(a) => test::run(a),
        Command::Fmt(a) => format::run(a),
        Command::Apply(a) => apply::run(a),
        Command::Status(a) => status::run(a),
        Command::Log(a) => log::run(a),
        Command::Detach(a) => detach::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Import(src) => import::run(src),
        Command::Push(a) => push::run(a),
        Command::Agent(a) => agent::run(*a),
        Command::Fleet(a) => fleet::run(a),
        Command::Emit { target } => emit::run(target),
        Command::Debug(a) => debug::run(a),
        Command::Generate(a) => generate::run(a),
    }
}
