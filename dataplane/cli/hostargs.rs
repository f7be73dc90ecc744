//! The packet plane's flags, shared by `rctl apply`, `status`, `log`,
//! `detach` and `agent`: where rctl keeps its state on the host, the XDP
//! mode and clock, and the XDP object. A leaf: it uses no command's
//! module.

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use rctl_dataplane::xdp::ClockMode;
use rctl_loader::host::{Mode, Paths};
use std::path::PathBuf;

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

/// `--mode`: how XDP attaches.
#[derive(Copy, Clone, ValueEnum)]
pub enum ModeArg {
    /// Native (driver) XDP, else skb mode with a warning.
    Auto,
    /// Native XDP or fail.
    Native,
    /// Generic (skb) XDP.
    Skb,
}

/// `--clock`: the clock rate limits read.
#[derive(Copy, Clone, ValueEnum)]
pub enum ClockArg {
    /// The kernel tick (1/HZ): one load per packet; the average rate is
    /// exact, a burst may run over by one tick's worth of packets.
    Tick,
    /// The exact clock: a helper call per limited packet (tens of ns).
    Exact,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Auto => Self::Auto,
            ModeArg::Native => Self::Native,
            ModeArg::Skb => Self::Skb,
        }
    }
}

impl From<ClockArg> for ClockMode {
    fn from(c: ClockArg) -> Self {
        match c {
            ClockArg::Tick => Self::Tick,
            ClockArg::Exact => Self::Exact,
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

/// A mode as status and apply print it.
pub fn mode_name(m: Option<Mode>) -> &'static str {
    match m {
        Some(Mode::Skb) => "skb",
        Some(Mode::Native) => "native",
        Some(Mode::Auto) | None => "unknown",
    }
}

/// A clock as status and apply print it.
pub fn clock_name(c: ClockMode) -> &'static str {
    match c {
        ClockMode::Tick => "tick",
        ClockMode::Exact => "exact",
    }
}
