//! `rctl apply`, `rctl status`, `rctl log` and `rctl detach`.
//!
//! Output errors (a closed pipe) never panic, and never turn a change that
//! was made into a failure: apply and detach ignore them once the state
//! has changed.

use anyhow::{bail, Context, Result};
use rctl_dataplane::xdp::ClockMode;
use rctl_loader::host::{self, Mode, Paths, Status};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/xdp_object.rs"));
}

/// Where rctl keeps its pins, metadata and installed artifacts.
#[derive(clap::Args, Clone)]
pub struct HostPaths {
    /// The bpffs mount to pin under.
    #[arg(long, default_value = "/sys/fs/bpf")]
    bpffs: PathBuf,
    /// Directory of the per-interface metadata and locks.
    #[arg(long, default_value = "/run/rctl")]
    run_dir: PathBuf,
    /// Directory the applied artifacts are installed in (as IFACE/active.rctlc).
    #[arg(long, default_value = "/var/lib/rctl")]
    state_dir: PathBuf,
}

impl HostPaths {
    /// The roots as the library takes them.
    pub fn paths(&self) -> Paths {
        Paths {
            bpffs: self.bpffs.clone(),
            run: self.run_dir.clone(),
            state: self.state_dir.clone(),
        }
    }
}

/// The XDP object: `--object`, else RCTL_XDP_OBJECT, else the one built in.
pub fn object(flag: Option<PathBuf>) -> Result<Vec<u8>> {
    let path = flag.or_else(|| std::env::var_os("RCTL_XDP_OBJECT").map(PathBuf::from));
    match (path, embedded::OBJECT) {
        (Some(p), _) => {
            rctl_compiler::files::read_binary(&p, rctl_compiler::files::MAX_BINARY_BYTES)
                .with_context(|| format!("reading the XDP object {}", p.display()))
        }
        (None, Some(b)) => Ok(b.to_vec()),
        (None, None) => bail!(
            "this rctl was built without the XDP object: build it (see ebpf/README.md) and \
             pass --object ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp, or \
             rebuild rctl after building it"
        ),
    }
}

/// A warning on stderr; a closed stderr is ignored.
pub fn warn(msg: &str) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "rctl: warning: {}",
        crate::term::text(msg)
    );
}

/// The first 16 hex digits of a hash (all of it if shorter).
pub fn short(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

fn mode_name(m: Option<Mode>) -> &'static str {
    match m {
        Some(Mode::Skb) => "skb",
        Some(Mode::Native) => "native",
        Some(Mode::Auto) | None => "unknown",
    }
}

fn clock_name(c: ClockMode) -> &'static str {
    match c {
        ClockMode::Tick => "tick",
        ClockMode::Exact => "exact",
    }
}

/// XDP apply settings: how `rctl apply` loads the packet plane.
pub struct XdpArgs<'a> {
    /// The interface.
    pub iface: &'a str,
    /// XDP mode.
    pub mode: Mode,
    /// The limits' clock.
    pub clock: ClockMode,
    /// The XDP object (default: RCTL_XDP_OBJECT, else the one built in).
    pub object: Option<PathBuf>,
}

/// Applies the artifact's packet plane (`bytes`) with `x`; the change is
/// made when this returns `Ok`. Prints the warnings and what is attached.
pub fn apply_xdp(
    bytes: &[u8],
    x: &XdpArgs<'_>,
    site: Option<&str>,
    paths: &HostPaths,
) -> Result<host::Applied> {
    let object = object(x.object.clone())?;
    let t = std::time::Instant::now();
    let a = host::apply(
        bytes,
        &object,
        x.iface,
        x.mode,
        x.clock,
        site,
        &paths.paths(),
    )?;
    // The change is made: what follows only reports it.
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
        x.iface,
        mode_name(at.mode),
        clock_name(at.clock),
        at.generation,
        at.terms,
        at.prefixes.0,
        at.prefixes.1,
        a.carried,
        short(&at.artifact_sha256),
        a.artifact.display(),
        t.elapsed()
    );
    Ok(a)
}

/// Reports steps after the switch that failed (the new generation is
/// live); whether there were any.
pub fn report_incomplete(a: &host::Applied) -> bool {
    if a.incomplete.is_empty() {
        return false;
    }
    let at = &a.attached;
    let _ = writeln!(
        std::io::stderr().lock(),
        "rctl: error: generation {} is live on {} (artifact {}), but {}; the next apply \
         or detach finishes this",
        at.generation,
        at.iface,
        short(&at.artifact_sha256),
        a.incomplete.join("; ")
    );
    true
}

/// `rctl status`: exit 0 when rctl enforces on every interface shown
/// and the agent shown (if any) answers, 1 when not (the output says why).
pub fn status(
    iface: Option<&str>,
    agent: Option<crate::agent::Seen>,
    proxy: Option<crate::haproxy::Seen>,
    module: Option<crate::nginx::Seen>,
    json: bool,
    paths: &HostPaths,
) -> Result<ExitCode> {
    let all = match host::status(&paths.paths(), iface) {
        Ok(all) => all,
        // A host may run only the HTTP plane: the agent is still shown.
        Err(e) if (agent.is_some() || proxy.is_some() || module.is_some()) && iface.is_none() => {
            warn(&format!("packet plane: {e}"));
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    for s in &all {
        for p in &s.problems {
            warn(&format!("{}: {p}", s.iface));
        }
    }
    let mut out = std::io::stdout().lock();
    if json {
        let v = serde_json::json!({
            "interfaces": all,
            "agent": agent.as_ref().map(crate::agent::Seen::json),
            "haproxy": proxy.as_ref().map(crate::haproxy::Seen::json),
            "nginx": module.as_ref().map(crate::nginx::Seen::json),
        });
        writeln!(
            out,
            "{}",
            crate::term::json(&serde_json::to_string_pretty(&v)?)
        )?;
    } else {
        if all.is_empty() {
            writeln!(out, "rctl is not attached to any interface")?;
        }
        for s in &all {
            text(&mut out, s)?;
        }
        if let Some(a) = &agent {
            a.text(&mut out)?;
        }
        if let Some(p) = &proxy {
            p.text(&mut out)?;
        }
        if let Some(m) = &module {
            m.text(&mut out)?;
        }
    }
    let agent_ok = agent.as_ref().is_none_or(crate::agent::Seen::serving);
    let proxy_ok = proxy.as_ref().is_none_or(crate::haproxy::Seen::ok);
    let module_ok = module.as_ref().is_none_or(crate::nginx::Seen::ok);
    Ok(
        if all.iter().all(|s| s.enforcing) && agent_ok && proxy_ok && module_ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

fn text(out: &mut impl std::io::Write, s: &Status) -> std::io::Result<()> {
    let indent = if s.enforcing {
        write!(out, "{}: enforcing: ", s.iface)?;
        ""
    } else {
        let why = s
            .problems
            .first()
            .map_or("see the warnings", String::as_str);
        writeln!(out, "{}: NOT ENFORCING: {why}", s.iface)?;
        write!(out, "  what is pinned: ")?;
        "  "
    };
    let Some(a) = &s.attached else {
        return writeln!(out, "not known (no metadata or artifact matches it)");
    };
    writeln!(
        out,
        "{} mode, {} clock, generation {}, artifact {}, applied at {} (unix)",
        mode_name(a.mode),
        clock_name(a.clock),
        a.generation,
        a.artifact_sha256,
        a.applied_unix
    )?;
    writeln!(
        out,
        "{indent}  {} terms; {} IPv4 and {} IPv6 prefixes; rate-limit buckets: {} of {} \
         occupied, {} live, {} banned",
        a.terms,
        a.prefixes.0,
        a.prefixes.1,
        s.buckets_used,
        s.buckets_capacity,
        s.buckets_live,
        s.buckets_banned
    )?;
    for c in &s.counters {
        if let (Some(p), Some(b)) = (c.packets, c.bytes) {
            if p > 0 {
                writeln!(
                    out,
                    "{indent}  {p:>12} packets {b:>14} bytes  {}",
                    crate::term::text(&c.rule)
                )?;
            }
        }
    }
    let uncounted = s.counters.iter().filter(|c| c.packets.is_none()).count();
    if uncounted > 0 {
        writeln!(
            out,
            "{indent}  {uncounted} rules have no counter (the program counts the first {}; \
             the rest are HTTP rules)",
            s.counters.len() - uncounted
        )?;
    }
    Ok(())
}

/// `rctl detach`.
pub fn detach(iface: &str, paths: &HostPaths) -> Result<()> {
    let detached = host::detach(iface, &paths.paths())?;
    // Detached: a closed stdout does not make that a failure.
    let mut out = std::io::stdout().lock();
    let _ = match detached {
        Some(a) => writeln!(
            out,
            "detached from {iface} (generation {}, artifact {})",
            a.generation,
            short(&a.artifact_sha256)
        ),
        None => writeln!(
            out,
            "removed what an interrupted apply or detach left for {iface}"
        ),
    };
    Ok(())
}

/// `rctl log`: runs until `seconds` pass, or its output is closed.
pub fn log(iface: &str, seconds: Option<f64>, paths: &HostPaths) -> Result<()> {
    let until = match seconds {
        Some(s) => Some(
            std::time::Instant::now()
                + std::time::Duration::try_from_secs_f64(s)
                    .with_context(|| format!("--seconds {s}: not a number of seconds"))?,
        ),
        None => None,
    };
    let stop = || until.is_some_and(|u| std::time::Instant::now() >= u);
    let mut out = std::io::stdout().lock();
    host::follow_events(
        &paths.paths(),
        iface,
        |generation, line| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            writeln!(
                out,
                "{now:.3} {iface} gen-{generation} {}",
                crate::term::text(line)
            )
            .and_then(|()| out.flush())
            .is_ok()
        },
        stop,
    )?;
    Ok(())
}
