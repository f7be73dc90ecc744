//! `rctl tap`: every request the running agent decides in the next
//! seconds, as webrequest JSON lines (`--log FILE --log-format
//! webrequest` reads them), through its control socket (the agent's
//! `tap` op, [`rctl_agent::tap`]); and the spool that `--agent SOCKET
//! --for DUR` of `rctl dry-run` and `rctl suggest` read
//! ([`crate::log_input`]).

use anyhow::{Context, Result};
use rctl_agent::control::{ControlError, ControlErrorKind, TapEvent, TapSummary};
use rctl_dataplane::partial::KnownHeaders;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `rctl tap`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The agent's control socket (default: /run/rctl/agent.sock).
    #[arg(long, value_name = "SOCKET")]
    agent: Option<PathBuf>,
    /// For how long, like 60s or 5m (at most 1h): every request the
    /// agent decides in that time is written.
    #[arg(long = "for", value_name = "DURATION", value_parser = crate::top::seconds)]
    tap_for: u64,
    /// Write the lines here (a new file, or one to replace); default:
    /// standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// What went wrong reaching the agent, with what to do about it.
fn unreachable(socket: &Path, e: ControlError) -> anyhow::Error {
    let hint = match e.kind {
        ControlErrorKind::NotRunning => format!(
            "start the agent (`rctl serve --control {0}`, or `systemctl start rctl-serve`), or name its socket with --agent",
            socket.display()
        ),
        ControlErrorKind::Refused => "the agent refused the tap".to_string(),
        _ if e.message.contains("ermission denied") => format!(
            "{} is the agent's, root's and its control group's: run as one of them (sudo)",
            socket.display()
        ),
        _ => format!("is the agent at {} running?", socket.display()),
    };
    anyhow::anyhow!(
        "cannot tap the agent at {}: {} ({hint})",
        socket.display(),
        e.message
    )
}

/// Taps the agent at `socket` for `seconds`, writing each request's line
/// to `out` (saying on stderr when the tap is open); the summary.
pub fn tap_into(socket: &Path, seconds: u64, out: &mut dyn std::io::Write) -> Result<TapSummary> {
    let summary = rctl_agent::control::tap(socket, seconds, |ev| match ev {
        TapEvent::Opened(_) => {
            eprintln!(
                "rctl: tapping the agent at {} for {seconds} s",
                socket.display()
            );
            Ok(())
        }
        TapEvent::Request(l) => {
            out.write_all(l)?;
            out.write_all(b"\n")
        }
    })
    .map_err(|e| unreachable(socket, e))?;
    out.flush()?;
    Ok(summary)
}

/// The webrequest format narrowed to what a tap says the agent
/// received: its headers (and Host); the other webrequest headers are
/// unknown, so a rule reading them is not judged on the tap.
pub fn format_of(summary: &TapSummary) -> rctl_logs::Format {
    let mut f = rctl_logs::webrequest::format();
    let mut names: Vec<String> = summary
        .headers
        .iter()
        .filter(|h| f.header_names.contains(h))
        .cloned()
        .collect();
    names.push("host".into());
    f.header_names = names.clone();
    f.known.headers = KnownHeaders::Only(names);
    // Lost requests leave throttles unjudgeable, as a sample does.
    f.known.complete = summary.lost == 0;
    f
}

/// The summary on stderr: requests, lost and why, the headers received.
pub fn report(socket: &Path, s: &TapSummary) {
    let lacks: Vec<&str> = rctl_logs::webrequest::HEADERS
        .iter()
        .map(|(_, h)| *h)
        .filter(|h| !s.headers.iter().any(|x| x == h))
        .collect();
    eprintln!(
        "rctl: tapped {}: {} requests in {:.1} s, {} lost{}{}",
        socket.display(),
        s.requests,
        s.seconds,
        s.lost,
        s.why
            .as_deref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default(),
        if s.cut > 0 {
            format!(", {} with a field cut at 64 KiB", s.cut)
        } else {
            String::new()
        },
    );
    if !lacks.is_empty() {
        eprintln!(
            "rctl: the proxy in front does not send the agent {}: a rule reading them is not judged on this tap",
            lacks.join(", ")
        );
    }
}

/// Exit 0; 1 when the agent cannot be reached or refuses, or the output
/// cannot be written.
pub fn run(a: Args) -> Result<ExitCode> {
    let (socket, _) = crate::agent_socket::find(a.agent.clone()).context(
        "no agent control socket at /run/rctl/agent.sock: start the agent, or name its socket with --agent",
    )?;
    let summary = match &a.output {
        Some(p) => {
            let file = std::fs::File::create(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
            let mut w = std::io::BufWriter::new(file);
            tap_into(&socket, a.tap_for, &mut w)?
        }
        None => {
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            tap_into(&socket, a.tap_for, &mut w)?
        }
    };
    report(&socket, &summary);
    Ok(ExitCode::SUCCESS)
}

/// A tap's lines in a private temporary directory, removed when this is
/// dropped.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    /// The spool file.
    pub path: PathBuf,
    /// Its format: webrequest, narrowed to what the agent received.
    pub format: rctl_logs::Format,
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new directory only this user may read, under the temporary folder.
fn private_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let base = std::env::temp_dir();
    let mut last = None;
    for i in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("rctl-tap-{}-{nanos}-{i}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(|| anyhow::anyhow!("no name"), anyhow::Error::from))
        .with_context(|| format!("cannot make a private directory in {}", base.display()))
}

/// Taps the agent at `socket` for `seconds` into a spool; reports the
/// summary on stderr.
pub fn spool(socket: &Path, seconds: u64) -> Result<Spool> {
    let dir = private_dir()?;
    let path = dir.join("tap.jsonl");
    // Made before the tap, so that an error removes the directory.
    let mut spool = Spool {
        dir,
        path,
        format: rctl_logs::webrequest::format(),
    };
    let file = std::fs::File::create_new(&spool.path)
        .with_context(|| format!("cannot write {}", spool.path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    let summary = tap_into(socket, seconds, &mut w)?;
    report(socket, &summary);
    spool.format = format_of(&summary);
    Ok(spool)
}
