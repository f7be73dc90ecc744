//! `rctl apply`, `rctl status` and `rctl detach`.

use anyhow::{bail, Context, Result};
use rctl_dataplane::xdp::host::{self, Mode, Paths};
use rctl_dataplane::xdp::ClockMode;
use std::path::PathBuf;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/xdp_object.rs"));
}

/// Where rctl keeps its pins, metadata and installed artifact.
#[derive(clap::Args, Clone)]
pub struct HostPaths {
    /// The bpffs mount to pin under.
    #[arg(long, default_value = "/sys/fs/bpf")]
    bpffs: PathBuf,
    /// Directory of the per-interface metadata.
    #[arg(long, default_value = "/run/rctl")]
    run_dir: PathBuf,
    /// Directory the applied artifact is installed in (as active.rctlc).
    #[arg(long, default_value = "/var/lib/rctl")]
    state_dir: PathBuf,
}

impl HostPaths {
    fn paths(&self) -> Paths {
        Paths {
            bpffs: self.bpffs.clone(),
            run: self.run_dir.clone(),
            state: self.state_dir.clone(),
        }
    }
}

/// The XDP object: `--object`, else RCTL_XDP_OBJECT, else the one built in.
fn object(flag: Option<PathBuf>) -> Result<Vec<u8>> {
    let path = flag.or_else(|| std::env::var_os("RCTL_XDP_OBJECT").map(PathBuf::from));
    match (path, embedded::OBJECT) {
        (Some(p), _) => {
            std::fs::read(&p).with_context(|| format!("reading the XDP object {}", p.display()))
        }
        (None, Some(b)) => Ok(b.to_vec()),
        (None, None) => bail!(
            "this rctl was built without the XDP object: build it (see ebpf/README.md) and \
             pass --object ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp, or \
             rebuild rctl after building it"
        ),
    }
}

/// `rctl apply`.
pub fn apply(
    artifact: PathBuf,
    iface: &str,
    mode: Mode,
    clock: ClockMode,
    site: Option<&str>,
    obj: Option<PathBuf>,
    paths: &HostPaths,
) -> Result<()> {
    let bytes =
        std::fs::read(&artifact).with_context(|| format!("reading {}", artifact.display()))?;
    let object = object(obj)?;
    let t = std::time::Instant::now();
    let a = host::apply(&bytes, &object, iface, mode, clock, site, &paths.paths())
        .with_context(|| format!("{}: not applied", artifact.display()))?;
    for w in &a.warnings {
        eprintln!("rctl: warning: {w}");
    }
    let at = &a.attached;
    println!(
        "{} {iface} ({} mode, {} clock): generation {}, {} terms, {} IPv4 and {} IPv6 prefixes, \
         {} rate-limit buckets carried over, artifact {} installed at {} in {:.2?}",
        if a.replaced {
            "replaced on"
        } else {
            "attached to"
        },
        if at.mode == Mode::Skb {
            "skb"
        } else {
            "native"
        },
        clock_name(at.clock),
        at.generation,
        at.terms,
        at.prefixes.0,
        at.prefixes.1,
        a.carried,
        &at.artifact_sha256[..16],
        paths.paths().artifact().display(),
        t.elapsed()
    );
    Ok(())
}

fn clock_name(c: ClockMode) -> &'static str {
    match c {
        ClockMode::Tick => "tick",
        ClockMode::Exact => "exact",
    }
}

/// `rctl status`.
pub fn status(iface: Option<&str>, json: bool, paths: &HostPaths) -> Result<()> {
    let all = host::status(&paths.paths(), iface)?;
    if json {
        println!(
            "{}",
            crate::term::json(&serde_json::to_string_pretty(&all)?)
        );
        return Ok(());
    }
    if all.is_empty() {
        println!("rctl is not attached to any interface");
    }
    for s in &all {
        let a = &s.attached;
        println!(
            "{}: {} mode, {} clock, generation {}{}, artifact {}, applied at {} (unix)",
            crate::term::text(&a.iface),
            if a.mode == Mode::Skb { "skb" } else { "native" },
            clock_name(a.clock),
            a.generation,
            if s.link_pinned {
                ""
            } else {
                " (LINK MISSING: not enforcing)"
            },
            a.artifact_sha256,
            a.applied_unix
        );
        println!(
            "  {} terms; {} IPv4 and {} IPv6 prefixes; rate-limit buckets: {} of {} occupied, \
             {} live, {} banned",
            a.terms,
            a.prefixes.0,
            a.prefixes.1,
            s.buckets_used,
            s.buckets_capacity,
            s.buckets_live,
            s.buckets_banned
        );
        for c in s.counters.iter().filter(|c| c.packets > 0) {
            println!(
                "  {:>12} packets {:>14} bytes  {}",
                c.packets,
                c.bytes,
                crate::term::text(&c.rule)
            );
        }
    }
    Ok(())
}

/// `rctl detach`.
pub fn detach(iface: &str, paths: &HostPaths) -> Result<()> {
    match host::detach(iface, &paths.paths())? {
        Some(a) => println!(
            "detached from {iface} (generation {}, artifact {})",
            a.generation,
            &a.artifact_sha256[..16]
        ),
        None => println!("detached a leftover link from {iface}"),
    }
    Ok(())
}

/// `rctl log`.
pub fn log(iface: &str, seconds: Option<f64>, paths: &HostPaths) -> Result<()> {
    let until = seconds.map(|s| std::time::Instant::now() + std::time::Duration::from_secs_f64(s));
    let stop = || until.is_some_and(|u| std::time::Instant::now() >= u);
    let mut out = std::io::stdout().lock();
    host::follow_events(
        &paths.paths(),
        iface,
        |generation, line| {
            use std::io::Write as _;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let line = crate::term::text(line);
            let _ = writeln!(out, "{now:.3} {iface} gen-{generation} {line}");
            let _ = out.flush();
        },
        stop,
    )?;
    Ok(())
}
