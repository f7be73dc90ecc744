//! `rctl top`: the running agent's recent traffic by key, like
//! varnishtop: the heaviest addresses, /24s and /48s, User-Agents and
//! their families, and path templates over the last seconds, each with
//! its verdicts, refreshed in the terminal (or printed once for scripts).
//! The agent counts ([`rctl_agent::top`]); this asks its control socket.

use crate::common::Format;
use anyhow::{Context, Result};
use rctl_agent::control::{Client, ControlRequest};
use rctl_top::{KeyKind, Top};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `rctl top`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The agent's control socket (default: /run/rctl/agent.sock).
    #[arg(long, value_name = "SOCKET")]
    agent: Option<PathBuf>,
    /// Seconds between refreshes, like 2s or 5.
    #[arg(long, value_name = "SECONDS", default_value = "2s", value_parser = seconds)]
    every: u64,
    /// Over the last this many seconds, like 60s (at most the agent's
    /// window, 60 s).
    #[arg(long, value_name = "SECONDS", default_value = "60s", value_parser = seconds)]
    window: u64,
    /// The heaviest this many keys of each kind.
    #[arg(short = 'n', long, default_value_t = 10)]
    keys: usize,
    /// Print once and exit (for scripts; with --format json).
    #[arg(long)]
    once: bool,
    /// The output's format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// `2s`, `1m` or `5`: whole seconds, 1 to 3600.
pub(crate) fn seconds(s: &str) -> Result<u64, String> {
    let (n, scale) = match s.strip_suffix('s') {
        Some(n) => (n, 1),
        None => match s.strip_suffix('m') {
            Some(n) => (n, 60),
            None => (s, 1),
        },
    };
    match n.trim().parse::<u64>().map(|v| v.checked_mul(scale)) {
        Ok(Some(v)) if (1..=3600).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a duration: write it like 2s, 60s or 1m"
        )),
    }
}

/// Exit 0; 1 when the agent cannot be asked.
pub fn run(a: Args) -> Result<ExitCode> {
    let (socket, _) = crate::agent_socket::find(a.agent.clone())
        .context("no agent control socket: name it with --agent")?;
    let ask = || -> Result<Top> {
        let mut c = Client::connect(&socket, Duration::from_secs(10))
            .with_context(|| format!("cannot reach the agent at {}", socket.display()))?;
        let v = c.call(&ControlRequest::Top {
            seconds: Some(a.window),
            n: Some(a.keys),
        })?;
        Ok(serde_json::from_value(v)?)
    };
    loop {
        let top = ask()?;
        let out = match a.format {
            Format::Json => serde_json::to_string_pretty(&top)? + "\n",
            Format::Text => screen(&top),
        };
        let mut o = std::io::stdout().lock();
        if a.once {
            o.write_all(out.as_bytes())?;
            return Ok(ExitCode::SUCCESS);
        }
        // Home, clear, the screen.
        write!(o, "\x1b[H\x1b[2J{out}")?;
        o.flush()?;
        drop(o);
        std::thread::sleep(Duration::from_secs(a.every));
    }
}

fn title(k: KeyKind) -> &'static str {
    match k {
        KeyKind::Ip => "address",
        KeyKind::Prefix => "/24 or /48",
        KeyKind::UserAgent => "User-Agent",
        KeyKind::UaFamily => "User-Agent family",
        KeyKind::PathTemplate => "path template",
    }
}

/// The text screen: per kind, its keys with their requests and verdicts.
fn screen(t: &Top) -> String {
    let mut o = format!(
        "rctl top: {} requests in the last {} s\n",
        t.requests, t.window_s
    );
    if t.dropped > 0 {
        let _ = writeln!(
            o,
            "({} requests not counted since the agent started: its counter fell behind)",
            t.dropped
        );
    }
    for k in KeyKind::ALL {
        let _ = writeln!(o, "\n{:>10}  {}", "requests", title(k));
        for e in t.keys.get(&k).into_iter().flatten() {
            let verdicts: Vec<String> =
                e.verdicts.iter().map(|(v, n)| format!("{v} {n}")).collect();
            let _ = writeln!(
                o,
                "{:>10}  {}  ({})",
                e.requests,
                crate::term::text(&e.key),
                verdicts.join(", ")
            );
        }
    }
    o
}
