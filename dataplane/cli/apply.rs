//! `rctl apply`: both planes switched to one artifact, with the two
//! phases of `rctl_agent::apply` (the agent prepares, the packet plane
//! switches, the agent commits); this module finds the agent, puts the
//! XDP loader behind the packet-plane trait, and renders the outcome.
//!
//! Exit 0 when every plane runs the new generation; 1 when one does but
//! a step after its switch failed, or when whether the agent committed
//! is not known (the message says which plane runs what), or when the
//! ruleset was refused because the proxies' configuration is stale for
//! it (nothing changed; `--allow-stale-proxy`); 2 (an error) when
//! nothing changed otherwise.

use crate::agent_socket::{self, ANSWER_TIMEOUT};
use crate::common::{short, warn};
use crate::hostargs::{clock_name, mode_name, object, ClockArg, HostPaths, ModeArg};
use crate::term;
use anyhow::{bail, Context, Result};
use rctl_agent::apply::{AgentApplied, Apply, ApplyError, PacketPlane, Switched};
use rctl_agent::control::{Client, ControlErrorKind, DEFAULT_SOCKET};
use rctl_dataplane::xdp::ClockMode;
use rctl_loader::host::{self, Mode, Paths};
use rctl_loader::LoaderError;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `rctl apply`'s flags.
#[derive(clap::Args)]
pub struct Args {
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
    /// Apply even when the agent says a proxy's configuration lacks what
    /// the ruleset needs (a header it does not send, a status it has no
    /// line for); without it, such a ruleset is refused and nothing
    /// changes (exit 1).
    #[arg(long)]
    allow_stale_proxy: bool,
    #[command(flatten)]
    host: HostPaths,
}

/// The packet plane on one interface, over the XDP loader.
struct Xdp {
    iface: String,
    mode: Mode,
    clock: ClockMode,
    object: Vec<u8>,
    paths: Paths,
}

/// What a switch of [`Xdp`] reports: the loader's answer, and how long
/// the switch took.
type XdpReport = (host::Applied, Duration);

impl PacketPlane for Xdp {
    type Report = XdpReport;
    type Error = LoaderError;

    fn switch(
        &mut self,
        artifact: &[u8],
        site: Option<&str>,
    ) -> Result<Switched<XdpReport>, LoaderError> {
        let t = Instant::now();
        let a = host::apply(
            artifact,
            &self.object,
            &self.iface,
            self.mode,
            self.clock,
            site,
            &self.paths,
        )?;
        let incomplete = a.incomplete.clone();
        Ok(Switched {
            report: (a, t.elapsed()),
            incomplete,
        })
    }
}

/// The agent, if there is one to switch: (its socket, the connection).
type Agent = Option<(PathBuf, Client)>;

/// `rctl apply`.
pub fn run(a: Args) -> Result<ExitCode> {
    let bytes =
        rctl_compiler::files::read_binary(&a.artifact, rctl_compiler::files::MAX_BINARY_BYTES)
            .with_context(|| format!("reading {}", a.artifact.display()))?;
    let shown = a.artifact.display().to_string();
    let agent = connect(&a, &shown)?;
    // The object is read before anything changes: a missing one aborts
    // nothing.
    let xdp = match &a.iface {
        None => None,
        Some(iface) => Some(Xdp {
            iface: iface.clone(),
            mode: a.mode.into(),
            clock: a.clock.into(),
            object: object(a.object.clone()).with_context(|| format!("{shown}: not applied"))?,
            paths: a.host.paths(),
        }),
    };
    let iface = a.iface.as_deref().unwrap_or_default();
    let (sock, client) = match agent {
        Some((s, c)) => (Some(s), Some(c)),
        None => (None, None),
    };
    let mut apply = Apply::new(&bytes, a.site.as_deref(), client, xdp);
    if !a.allow_stale_proxy {
        apply = apply.refuse_stale_proxies();
    }
    match apply.run() {
        Ok(done) => {
            if let Some(s) = &done.packet {
                print_xdp(iface, &s.report);
            }
            let incomplete = done.packet.as_ref().is_some_and(report_incomplete);
            if let (Some(sock), Some(agent)) = (&sock, &done.agent) {
                print_agent(sock, agent);
            }
            Ok(crate::common::exit(incomplete))
        }
        Err(e) => {
            let at = sock.map_or_else(String::new, |s| s.display().to_string());
            failed(e, &shown, &at, iface)
        }
    }
}

/// Renders an apply that failed (`at`: the agent's socket): an error
/// when nothing changed, else exit 1 saying which plane runs what.
fn failed(
    e: ApplyError<LoaderError, XdpReport>,
    shown: &str,
    at: &str,
    iface: &str,
) -> Result<ExitCode> {
    let uncertain = e.commit_uncertain();
    match e {
        ApplyError::NoPlane => bail!("{shown}: nothing to apply it to"),
        ApplyError::Prepare(e) => {
            Err(anyhow::Error::new(e).context(format!("{shown}: not applied: the agent at {at}")))
        }
        ApplyError::StaleProxy {
            stale,
            abort_failed,
        } => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "rctl: error: {}: not applied: the proxies in front of the agent at {at} are not \
                 configured for it:",
                term::text(shown)
            );
            for s in &stale {
                let _ = writeln!(err, "  {}", term::text(s));
            }
            if let Some(e) = abort_failed {
                let _ = writeln!(
                    err,
                    "  (its prepare could not be aborted: {}; it is dropped when this \
                     connection closes)",
                    term::text(&e.message)
                );
            }
            let _ = writeln!(
                err,
                "  hint: write their configuration again with `rctl emit` and reload them, or \
                 apply anyway with --allow-stale-proxy"
            );
            Ok(ExitCode::from(1))
        }
        ApplyError::Packet { error, agent: None } => {
            Err(anyhow::Error::new(error).context(format!("{shown}: not applied")))
        }
        ApplyError::Packet {
            error,
            agent: Some(kept),
        } => {
            let kept = match kept.abort_failed {
                None => format!("the agent keeps generation {}", kept.generation),
                Some(a) => format!(
                    "the agent's prepare could not be aborted ({a}); it keeps its \
                     generation and drops the prepare when this connection closes"
                ),
            };
            Err(anyhow::Error::new(error).context(format!("{shown}: not applied ({kept})")))
        }
        ApplyError::Commit {
            error,
            switched: None,
            ..
        } if !uncertain => bail!("{shown}: not applied: the agent at {at}: {error}"),
        ApplyError::Commit {
            error,
            switched: None,
            ..
        } => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "rctl: error: {}: the agent at {at} may or may not have committed it ({}): \
                 `rctl status` shows what it runs",
                term::text(shown),
                term::text(&error.message)
            );
            Ok(ExitCode::from(1))
        }
        ApplyError::Commit {
            error,
            switched: Some(s),
            ..
        } => {
            print_xdp(iface, &s.report);
            report_incomplete(&s);
            let (what, keeps) = if uncertain {
                (
                    "may not have committed it",
                    "`rctl status` shows what it runs",
                )
            } else {
                ("did not commit it", "it keeps its generation")
            };
            let _ = writeln!(
                std::io::stderr().lock(),
                "rctl: error: the packet plane runs the new generation, but the agent at {at} \
                 {what} ({}): {keeps}; apply again",
                term::text(&error.message)
            );
            Ok(ExitCode::from(1))
        }
    }
}

/// The agent to switch: `--agent`, else the default socket when it
/// exists; `None` when there is none (and `--iface` is given: the packet
/// plane alone, as before there was an agent).
fn connect(a: &Args, shown: &str) -> Result<Agent> {
    let Some((sock, named)) = agent_socket::find(a.agent.clone()) else {
        if a.iface.is_none() {
            bail!(
                "{shown}: nothing to apply it to: give --iface IF to enforce its packet plane \
                 with XDP, and/or run `rctl serve` for its HTTP plane (no agent's control \
                 socket at {DEFAULT_SOCKET}; --agent PATH names another)"
            );
        }
        return Ok(None);
    };
    match Client::connect(&sock, ANSWER_TIMEOUT) {
        Ok(c) => Ok(Some((sock, c))),
        Err(e) if !named && e.kind == ControlErrorKind::NotRunning && a.iface.is_some() => {
            warn(&format!(
                "{e}; only the packet plane is switched (a stale socket file? remove it, or \
                 name the agent with --agent)"
            ));
            Ok(None)
        }
        Err(e) => bail!("{shown}: not applied: {e}"),
    }
}

/// Prints the switch's warnings and what is attached. A closed stdout
/// is ignored: the change is made.
fn print_xdp(iface: &str, (a, took): &XdpReport) {
    for w in &a.warnings {
        warn(w);
    }
    let at = &a.attached;
    let _ = writeln!(
        std::io::stdout().lock(),
        "{} {} ({} mode, {} clock): generation {}, {} terms, {} IPv4 and {} IPv6 prefixes, \
         {} rate-limit buckets carried over, artifact {} installed at {} in {:.2?}",
        if a.replaced {
            "replaced on"
        } else {
            "attached to"
        },
        iface,
        mode_name(at.mode),
        clock_name(at.clock),
        at.generation,
        at.terms,
        at.prefixes.0,
        at.prefixes.1,
        a.carried,
        short(&at.artifact_sha256),
        a.artifact.display(),
        took
    );
}

/// Reports steps after the switch that failed (the new generation is
/// live); whether there were any.
fn report_incomplete(s: &Switched<XdpReport>) -> bool {
    if s.incomplete.is_empty() {
        return false;
    }
    let at = &s.report.0.attached;
    let _ = writeln!(
        std::io::stderr().lock(),
        "rctl: error: generation {} is live on {} (artifact {}), but {}; the next apply \
         or detach finishes this",
        at.generation,
        at.iface,
        short(&at.artifact_sha256),
        s.incomplete.join("; ")
    );
    true
}

/// Prints what the agent switched to.
fn print_agent(sock: &Path, a: &AgentApplied) {
    let p = &a.prepared;
    let names = |v: Vec<String>| {
        if v.is_empty() {
            String::new()
        } else {
            format!(" ({})", v.join(", "))
        }
    };
    let carried = names(p.carried.carried.iter().map(|c| c.rule.clone()).collect());
    let fresh = names(
        p.carried
            .fresh
            .iter()
            .map(|f| format!("{}: {}", f.rule, f.why.describe()))
            .collect(),
    );
    for w in &p.warnings {
        warn(&format!("agent: {w}"));
    }
    for s in &p.stale_proxies {
        warn(&format!("applied with a stale proxy configuration: {s}"));
    }
    let line = format!(
        "agent at {}: generation {} replaced generation {}, artifact {}, {}; \
         rate-limit state carried for {}{carried}, fresh for {}{fresh}; prepared in {} ms, \
         switched in {:.2?}",
        sock.display(),
        p.generation,
        a.committed.replaced,
        short(&p.artifact_sha256),
        crate::common::count(p.rules, "rule"),
        crate::common::count(p.carried.carried.len(), "rule"),
        p.carried.fresh.len(),
        p.prepare_ms,
        a.took
    );
    let _ = writeln!(std::io::stdout().lock(), "{}", term::text(&line));
}
