//! Putting the packet plane on an interface: `rctl apply`, `status`,
//! `log` and `detach`, and the state they keep, which must neither lie
//! nor be open to tampering: the unattended agents run `apply` on it.
//!
//! # Layout
//!
//! Every root can be moved ([`Paths`]); with the defaults, for an
//! interface `IF`:
//!
//! | path | what |
//! |---|---|
//! | `/sys/fs/bpf/rctl/IF/link` | the pinned XDP link: while it is pinned, the program stays attached after rctl exits |
//! | `/sys/fs/bpf/rctl/IF/gen-N/` | generation N: its program (`prog`) and the maps `status` reads and the next apply carries over (counters, buckets, config, terms, clock) |
//! | `/run/rctl/IF.lock` | the interface's lock |
//! | `/run/rctl/IF.json` | what is attached ([`Attached`]) |
//! | `/run/rctl/IF.json.gen-N` | generation N's metadata, staged before the switch |
//! | `/var/lib/rctl/IF/active.rctlc` | the artifact in force on IF, for user-space consumers |
//! | `/var/lib/rctl/IF/gen-N.rctlc` | generation N's artifact, staged before the switch |
//!
//! # Permissions
//!
//! Directories are created 0700 and files 0600, set explicitly whatever
//! the umask (the kernel makes pins 0600 less the umask). rctl refuses to
//! work in a state directory (the run and state directories, `rctl/` in
//! the bpffs and the interface's folders) that is not owned by the user
//! running it, or that its group or others may write to, or under a
//! directory someone else could replace (writable by others without the
//! sticky bit, or owned by neither root nor that user); the error says
//! which `chmod` or `chown` fixes it. Anyone who could write there could
//! unpin the link (switching enforcement off) or plant what rctl trusts.
//! Files are written to a temporary file with an unpredictable name
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`), synced, renamed over the target,
//! and the directory synced: a planted symbolic link is never followed.
//! Interface names are checked ([`IfName`]) before they become paths.
//!
//! # One writer per interface
//!
//! `apply` and `detach` hold an exclusive `flock` on `IF.lock` for their
//! whole run; `status` holds it shared while it reads, so it sees the
//! state between two writers, never in the middle of one. Two applies on
//! one interface take turns: the second starts from what the first left.
//!
//! # Crash consistency
//!
//! The truth is what the kernel runs: the pinned link, the program it
//! points to (its id, matched against the `prog` pinned in each
//! `gen-N`), and the interface it is attached to (from the link's fdinfo;
//! 0 once the interface is deleted). The JSON only describes it, and is
//! checked against it. An apply runs these steps, each a point it can be
//! killed at (`RCTL_FAULT`, below):
//!
//! 1. `apply-locked`: lock taken. Nothing changed.
//! 2. `apply-pinning`: `gen-N/` created; 3. `apply-pinned`: the new
//!    generation's program and maps pinned, buckets and counters carried
//!    from the live one; 4. `apply-staged`: `gen-N.rctlc` and
//!    `IF.json.gen-N` written. A crash in 2–4 leaves a generation no link
//!    points to: `status` reports it as left over, and the next apply or
//!    detach removes it. (A first attach creates its link between 3 and
//!    4, unpinned: the kernel detaches it when the process dies.)
//! 5. **The commit point**: `BPF_LINK_UPDATE` of the pinned link to the
//!    new program (or, on a first attach, pinning the new link): from
//!    here the new generation is live. `apply-switched`.
//! 6. `apply-installed`: `gen-N.rctlc` renamed over `active.rctlc`;
//!    7. `apply-recorded`: `IF.json.gen-N` renamed over `IF.json`;
//!    8. `apply-retired`: the other generations and staged files removed.
//!    A crash in 5–8 leaves the new generation live and described by its
//!    staged files: `status` reads them (the link says which generation is
//!    live), and the next apply carries from it and finishes the renames.
//!
//! On an interface that was deleted (and perhaps recreated) the pinned
//! link is dead: the apply unpins it just before it attaches afresh
//! (`apply-unlinked`: no link, and as before nothing enforced).
//!
//! A detach unpins the link (`detach-unlinked`: enforcement is off), then
//! removes the generations (`detach-unpinned`), then the metadata, the
//! artifacts and the lock; a crash leaves state without a link, which
//! `status` reports as not enforcing and the next detach removes.
//!
//! Metadata that cannot be read, does not parse, or does not match what
//! is pinned (another generation, a malformed hash, limiters that are not
//! rules, another term count or artifact) is rebuilt from the pinned
//! generation: the artifact staged for it or installed, checked against
//! the program's pinned terms, with a warning; the next apply writes it
//! afresh. If the interface was deleted (and perhaps recreated), the link
//! is detached: `status` says so, and the next apply attaches afresh and
//! carries the buckets.
//!
//! `RCTL_FAULT=STEP` makes the process `kill -9` itself at that step, in
//! builds with the `fault-injection` feature (the tests'; release builds
//! leave it out).

mod apply;
mod observe;
mod paths;
mod status;
mod sys;

pub use apply::apply;
pub use observe::{LinkState, MetaSource};
pub use paths::{IfName, Paths, IFNAME_MAX};
pub use status::{detach, follow_events, status, RuleCounters, Status};
pub(crate) use sys::describe;

use crate::error::{ErrorKind, LoaderError};
use rctl_dataplane::xdp::ClockMode;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How to attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Native (driver) mode, falling back to skb mode with a warning.
    Auto,
    /// Native mode or fail.
    Native,
    /// Generic (skb) mode.
    Skb,
}

/// What is attached to an interface (the metadata file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attached {
    /// Interface name.
    pub iface: String,
    /// The mode in force, `native` or `skb`; `null` when not known
    /// (metadata rebuilt from the pins, which do not record it).
    #[serde(default)]
    pub mode: Option<Mode>,
    /// The clock the rate limits read.
    #[serde(default)]
    pub clock: ClockMode,
    /// Generation number (the `gen-N` it is pinned as).
    pub generation: u64,
    /// The artifact's content SHA-256 (hex), as `rctl compile` prints it.
    pub artifact_sha256: String,
    /// Site selected, if any.
    #[serde(default)]
    pub site: Option<String>,
    /// Rule names, by rule index (the counters' order).
    pub rules: Vec<String>,
    /// IPv4 and IPv6 prefixes loaded.
    pub prefixes: (usize, usize),
    /// XDP terms loaded.
    pub terms: usize,
    /// The rule name of each rate limiter, by limiter index (buckets are
    /// carried to the next generation's limiter of the same rule).
    #[serde(default)]
    pub limiters: Vec<String>,
    /// When it was applied, seconds since the epoch.
    pub applied_unix: u64,
    /// The interface's index when it was attached.
    #[serde(default)]
    pub ifindex: u32,
}

/// The outcome of an apply.
#[derive(Debug, Clone)]
pub struct Applied {
    /// What is now attached.
    pub attached: Attached,
    /// Things the operator should know (a mode fallback, metadata rebuilt,
    /// state not carried, a site no rule names).
    pub warnings: Vec<String>,
    /// Whether the program running on the interface was replaced (rather
    /// than attached afresh).
    pub replaced: bool,
    /// Rate-limit buckets carried over from the replaced generation.
    pub carried: usize,
    /// Where the artifact is installed.
    pub artifact: PathBuf,
    /// Steps after the switch that failed: the new generation is live,
    /// but these did not happen (the next apply or detach finishes them).
    pub incomplete: Vec<String>,
}

fn capabilities() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

fn has(caps: u64, bit: u32) -> bool {
    caps & (1u64 << bit) != 0
}

/// Checks the process may load and attach XDP programs, from the
/// effective capability set.
pub fn check_privileges() -> Result<(), LoaderError> {
    let caps = capabilities();
    if !has(caps, CAP_NET_ADMIN) || !(has(caps, CAP_BPF) || has(caps, CAP_SYS_ADMIN)) {
        return Err(LoaderError::new(
            ErrorKind::Privileges,
            "loading and attaching XDP programs needs root, or CAP_BPF and CAP_NET_ADMIN \
             (run with sudo, or grant them: setcap cap_bpf,cap_net_admin+ep $(command -v rctl))",
        ));
    }
    Ok(())
}

/// Checks the process may read rctl's pinned programs and maps (for
/// `verb`): root, or CAP_BPF.
pub fn check_read_privileges(verb: &str) -> Result<(), LoaderError> {
    let caps = capabilities();
    if !(has(caps, CAP_BPF) || has(caps, CAP_SYS_ADMIN)) {
        return Err(LoaderError::new(
            ErrorKind::Privileges,
            format!(
                "`rctl {verb}` reads the pinned XDP program and its maps, which needs root, or \
             CAP_BPF (run it with sudo)"
            ),
        ));
    }
    Ok(())
}

/// Checks that `dir` is a mounted bpffs.
pub fn check_bpffs(dir: &Path) -> Result<(), LoaderError> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let want = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounted = mounts.lines().any(|l| {
        let mut f = l.split_whitespace();
        let (_, at, fstype) = (f.next(), f.next(), f.next());
        fstype == Some("bpf") && at.map(Path::new) == Some(want.as_path())
    });
    if !mounted {
        return Err(LoaderError::new(
            ErrorKind::Bpffs,
            format!(
                "no bpffs is mounted at {} (rctl pins the program there so that it outlives \
             this process): mount one with `mount -t bpf bpf {}`, or add \
             `bpffs {} bpf defaults 0 0` to /etc/fstab",
                dir.display(),
                dir.display(),
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The index of the interface `name` now, if it exists (in this network
/// namespace).
fn ifindex(name: &IfName) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// The interface's index, or a clear error (an invalid name included).
pub fn check_iface(iface: &str) -> Result<u32, LoaderError> {
    let name = IfName::new(iface)?;
    ifindex(&name).ok_or_else(|| {
        LoaderError::new(
            ErrorKind::Interface,
            format!("no interface `{name}` in this network namespace (see `ip link`)"),
        )
    })
}

/// Test-only fault injection: when `RCTL_FAULT` is `step`, the process
/// kills itself with SIGKILL there, as a crash or `kill -9` would. See
/// the module docs for the steps (the fleet agent adds its own). Built
/// only with the `fault-injection` feature (the tests'); otherwise it
/// does nothing.
pub fn fault(step: &str) {
    if cfg!(feature = "fault-injection")
        && std::env::var_os("RCTL_FAULT").is_some_and(|v| v == step)
    {
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        std::process::abort();
    }
}

/// From /proc/timer_list (readable by root): CLOCK_MONOTONIC in ns (`now
/// at`, near the top) and, when found, the jiffies value (`jiffies:`, in
/// the first CPU's section). The file runs to megabytes on big hosts; the
/// read stops at the first `jiffies:`.
pub(crate) fn timer_list() -> Option<(u64, Option<u64>)> {
    use std::io::BufRead as _;
    let f = std::fs::File::open("/proc/timer_list").ok()?;
    let mut now = None;
    for line in std::io::BufReader::new(f).lines().take(4000) {
        let line = line.ok()?;
        let num = |rest: &str| rest.split_whitespace().next()?.parse::<u64>().ok();
        if let Some(rest) = line.strip_prefix("now at ") {
            now = num(rest);
        } else if let Some(rest) = line.strip_prefix("jiffies:") {
            return Some((now?, num(rest)));
        }
    }
    now.map(|n| (n, None))
}

/// CLOCK_MONOTONIC in ns, which the program's clock follows (to within a
/// tick): from /proc/timer_list, else /proc/uptime (boot time: ahead of
/// it by any time spent suspended).
fn monotonic_ns() -> u64 {
    timer_list().map(|(now, _)| now).unwrap_or_else(|| {
        let up = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
        up.split_whitespace()
            .next()
            .and_then(|s| s.parse::<f64>().ok())
            .map_or(0, |s| (s * 1e9) as u64)
    })
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
