//! Putting the packet plane on an interface: `rctl apply`, `status` and
//! `detach`.
//!
//! Layout (the defaults; every root can be moved, for tests):
//! - `/sys/fs/bpf/rctl/IF/link`: the pinned XDP link, which keeps the
//!   program attached after rctl exits;
//! - `/sys/fs/bpf/rctl/IF/gen-N/`: generation N's program and maps;
//! - `/run/rctl/IF.json`: what is attached (generation, mode, artifact
//!   hash, rule names), written by write-then-rename;
//! - `/var/lib/rctl/active.rctlc`: the applied artifact, for user-space
//!   consumers, written by write-then-rename.
//!
//! An apply loads a complete new generation (program and filled maps)
//! beside the running one, then swaps the link to it with one
//! `BPF_LINK_UPDATE`. Every packet is judged by one generation or the
//! other, never a mix; if anything fails before the swap, the running
//! generation is untouched and the new one is removed.

use super::{err, ClockMode, Tables, XdpError, XdpProgram};
use aya::maps::{Array, Map, MapData, PerCpuArray};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::xdp::XdpLink;
use aya::programs::{Xdp, XdpMode};
use rctl_common::{maps, Bucket, Counters, BUCKET_ENTRIES, MAX_BUCKETS, WAYS};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where rctl keeps its state.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The bpffs mount (default `/sys/fs/bpf`).
    pub bpffs: PathBuf,
    /// Runtime metadata (default `/run/rctl`).
    pub run: PathBuf,
    /// The installed artifact's directory (default `/var/lib/rctl`).
    pub state: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            bpffs: "/sys/fs/bpf".into(),
            run: "/run/rctl".into(),
            state: "/var/lib/rctl".into(),
        }
    }
}

impl Paths {
    fn iface_pins(&self, iface: &str) -> PathBuf {
        self.bpffs.join("rctl").join(iface)
    }
    fn meta(&self, iface: &str) -> PathBuf {
        self.run.join(format!("{iface}.json"))
    }
    /// Where the applied artifact is installed.
    pub fn artifact(&self) -> PathBuf {
        self.state.join("active.rctlc")
    }
}

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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attached {
    /// Interface name.
    pub iface: String,
    /// The mode in force: `native` or `skb`.
    pub mode: Mode,
    /// The clock the rate limits read.
    #[serde(default)]
    pub clock: ClockMode,
    /// Generation number, counting applies since the first attach.
    pub generation: u64,
    /// The artifact's content SHA-256 (hex), as `rctl compile` prints it.
    pub artifact_sha256: String,
    /// Site selected, if any.
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
}

/// The outcome of an apply.
#[derive(Debug, Clone)]
pub struct Applied {
    /// What is now attached.
    pub attached: Attached,
    /// Things the operator should know (a mode fallback).
    pub warnings: Vec<String>,
    /// Whether a running generation was replaced (rather than a first
    /// attach).
    pub replaced: bool,
    /// Rate-limit buckets carried over from the replaced generation.
    pub carried: usize,
}

/// Checks the process may load and attach XDP programs, from the
/// effective capability set.
pub fn check_privileges() -> Result<(), XdpError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    const NET_ADMIN: u32 = 12;
    const SYS_ADMIN: u32 = 21;
    const BPF: u32 = 39;
    if !has(NET_ADMIN) || !(has(BPF) || has(SYS_ADMIN)) {
        return Err(err(
            "loading and attaching XDP programs needs root, or CAP_BPF and CAP_NET_ADMIN \
             (run with sudo, or grant them: setcap cap_bpf,cap_net_admin+ep $(command -v rctl))",
        ));
    }
    Ok(())
}

/// Checks that `dir` is a mounted bpffs.
pub fn check_bpffs(dir: &Path) -> Result<(), XdpError> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let want = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounted = mounts.lines().any(|l| {
        let mut f = l.split_whitespace();
        let (_, at, fstype) = (f.next(), f.next(), f.next());
        fstype == Some("bpf") && at.map(Path::new) == Some(want.as_path())
    });
    if !mounted {
        return Err(err(format!(
            "no bpffs is mounted at {} (rctl pins the program there so that it outlives \
             this process): mount one with `mount -t bpf bpf {}`, or add \
             `bpffs {} bpf defaults 0 0` to /etc/fstab",
            dir.display(),
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// The interface's index, or a clear error.
pub fn check_iface(iface: &str) -> Result<u32, XdpError> {
    let bad = iface.is_empty() || iface.contains('/') || iface == "." || iface == "..";
    let idx = (!bad)
        .then(|| std::fs::read_to_string(format!("/sys/class/net/{iface}/ifindex")).ok())
        .flatten()
        .and_then(|s| s.trim().parse().ok());
    idx.ok_or_else(|| {
        err(format!(
            "no interface `{iface}` in this network namespace (see `ip link`)"
        ))
    })
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

/// Writes `bytes` to `path` by writing a temporary file beside it and
/// renaming it over: readers see the old file or the new, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), XdpError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| err(format!("creating {}: {e}", dir.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("rctl"),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(format!("writing {}: {e}", path.display()))
    })
}

/// What is attached to `iface`, if rctl attached anything.
pub fn attached(paths: &Paths, iface: &str) -> Result<Option<Attached>, XdpError> {
    let p = paths.meta(iface);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| err(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(format!("{}: {e}", p.display()))),
    }
}

fn remove_generation(dir: &Path) {
    // Unpinning drops the pins' references; the kernel frees the objects
    // once nothing (no link, no process) holds them.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The maps a generation pins for `status`.
const PINNED_MAPS: [&str; 3] = [maps::COUNTERS, maps::BUCKETS, maps::CONFIG];

/// Applies `artifact` (the bytes of a `.rctlc`) to `iface`; `object` is
/// the compiled XDP program.
pub fn apply(
    artifact: &[u8],
    object: &[u8],
    iface: &str,
    mode: Mode,
    clock: ClockMode,
    site: Option<&str>,
    paths: &Paths,
) -> Result<Applied, XdpError> {
    let rs = rctl_compiler::artifact::decode(artifact).map_err(|e| err(e.to_string()))?;
    check_privileges()?;
    check_bpffs(&paths.bpffs)?;
    check_iface(iface)?;
    let old = attached(paths, iface)?;
    let link_pin = paths.iface_pins(iface).join("link");
    let old = old.filter(|_| link_pin.exists());
    if let (Some(o), Mode::Native | Mode::Skb) = (&old, mode) {
        if o.mode != mode {
            return Err(err(format!(
                "{iface} runs rctl in {} mode; an apply cannot change the mode in place \
                 (run `rctl detach --iface {iface}` first)",
                serde_json::to_string(&o.mode)
                    .unwrap_or_default()
                    .trim_matches('"')
            )));
        }
    }
    let tables = Tables::new(&rs, site)?;
    let mut program = XdpProgram::load(object, &tables, rs.rules.len(), false)?;
    program.set_clock_mode(clock)?;
    let generation = old.as_ref().map_or(1, |o| o.generation + 1);
    let gen_dir = paths.iface_pins(iface).join(format!("gen-{generation}"));
    // A half-made generation from an earlier failed apply is stale.
    remove_generation(&gen_dir);
    std::fs::create_dir_all(&gen_dir)
        .map_err(|e| err(format!("creating {}: {e}", gen_dir.display())))?;
    let limiters: Vec<String> = tables
        .limiter_rules
        .iter()
        .map(|&r| rs.rules[r].name.clone())
        .collect();
    let mut carried = 0;
    let staged = (|| -> Result<(Mode, Vec<String>), XdpError> {
        let mut warnings = Vec::new();
        if let Some(o) = &old {
            let dir = paths
                .iface_pins(iface)
                .join(format!("gen-{}", o.generation));
            match carry_buckets(&dir, &o.limiters, &limiters, &mut program) {
                Ok(n) => carried = n,
                Err(e) => warnings.push(format!(
                    "rate-limit state not carried over (limits start afresh): {e}"
                )),
            }
            let rules: Vec<String> = rs.rules.iter().map(|r| r.name.clone()).collect();
            if let Err(e) = carry_counters(&dir, &o.rules, &rules, &mut program) {
                warnings.push(format!(
                    "counters not carried over (they restart at 0): {e}"
                ));
            }
        }
        program.pin(&gen_dir, &PINNED_MAPS)?;
        let prog = program.xdp_mut()?;
        let used = match &old {
            Some(o) => {
                let pinned = PinnedLink::from_pin(&link_pin)
                    .map_err(|e| err(format!("opening {}: {e}", link_pin.display())))?;
                let link = XdpLink::try_from(FdLink::from(pinned))
                    .map_err(|e| err(format!("{}: not an XDP link: {e}", link_pin.display())))?;
                let id = prog
                    .attach_to_link(link)
                    .map_err(|e| err(format!("replacing the program on {iface}: {e}")))?;
                // Closing our descriptor leaves the pinned link in place.
                drop(prog.take_link(id));
                o.mode
            }
            None => {
                let (id, used) = attach_new(prog, iface, mode, &mut warnings)?;
                let link = prog.take_link(id).map_err(|e| err(e.to_string()))?;
                let fd = FdLink::try_from(link).map_err(|e| {
                    err(format!(
                        "the kernel attached {iface} without a BPF link ({e}); rctl needs \
                         BPF links (Linux 5.9 or later) to keep the program attached"
                    ))
                })?;
                fd.pin(&link_pin)
                    .map_err(|e| err(format!("pinning {}: {e}", link_pin.display())))?;
                used
            }
        };
        Ok((used, warnings))
    })();
    let (used, warnings) = match staged {
        Ok(v) => v,
        Err(e) => {
            remove_generation(&gen_dir);
            return Err(e);
        }
    };
    // The new generation is live: retire the old one's pins.
    if let Some(o) = &old {
        remove_generation(
            &paths
                .iface_pins(iface)
                .join(format!("gen-{}", o.generation)),
        );
    }
    let attached = Attached {
        iface: iface.to_string(),
        mode: used,
        clock,
        generation,
        // The hash `rctl compile` prints.
        artifact_sha256: rctl_compiler::artifact::hex(
            &rctl_compiler::artifact::content_hash(artifact)
                .unwrap_or_else(|| rctl_compiler::artifact::sha256(artifact)),
        ),
        site: site.map(str::to_string),
        rules: rs.rules.iter().map(|r| r.name.clone()).collect(),
        prefixes: (tables.v4.len(), tables.v6.len()),
        terms: tables.terms.len(),
        limiters,
        applied_unix: now_unix(),
    };
    let meta = serde_json::to_vec_pretty(&attached).map_err(|e| err(e.to_string()))?;
    write_atomic(&paths.meta(iface), &meta)?;
    write_atomic(&paths.artifact(), artifact)?;
    Ok(Applied {
        attached,
        warnings,
        replaced: old.is_some(),
        carried,
    })
}

/// Copies the buckets of the generation pinned in `old_dir` into
/// `program`'s table, for the limiters of rules present in both (by
/// name), rehashed with the new seed; banned and busiest first, so that
/// if a set overflows what is dropped is what matters least. Returns how
/// many were carried.
fn carry_buckets(
    old_dir: &Path,
    old: &[String],
    new: &[String],
    program: &mut XdpProgram,
) -> Result<usize, XdpError> {
    let to: Vec<Option<u32>> = old
        .iter()
        .map(|name| new.iter().position(|n| n == name).map(|i| i as u32))
        .collect();
    if to.iter().all(Option::is_none) {
        return Ok(0);
    }
    let buckets = Array::<_, Bucket>::try_from(Map::Array(open_map(&old_dir.join(maps::BUCKETS))?))
        .map_err(|e| err(e.to_string()))?;
    let mut live: Vec<(u32, Bucket)> = (0..BUCKET_ENTRIES)
        .filter_map(|i| buckets.get(&i, 0).ok().map(|b| (i, b)))
        .filter(|(_, b)| b.tat != 0 || b.banned_until != 0)
        .collect();
    live.sort_by_key(|(_, b)| std::cmp::Reverse((b.banned_until, b.tat)));
    let seed = program.seed();
    let mut ways: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (i, mut b) in live {
        if i >= MAX_BUCKETS {
            // A limiter's overflow bucket.
            if let Some(Some(l)) = to.get((i - MAX_BUCKETS) as usize) {
                out.push((MAX_BUCKETS + l, b));
            }
            continue;
        }
        let Some(Some(l)) = to.get(b.limiter as usize) else {
            continue;
        };
        let set = rctl_common::bucket_set(seed, *l, b.family, b.addr_hi, b.addr_lo);
        let w = ways.entry(set).or_insert(0);
        if *w < WAYS {
            b.limiter = *l;
            out.push((set * WAYS + *w, b));
            *w += 1;
        }
    }
    program.write_buckets(&out)?;
    Ok(out.len())
}

/// Copies the per-rule, per-CPU counters of the generation pinned in
/// `old_dir` to the rules of the same name in `program`, so that `status`
/// counts since the first apply. (Packets the old generation counts
/// between this copy and the switch are not carried.)
fn carry_counters(
    old_dir: &Path,
    old: &[String],
    new: &[String],
    program: &mut XdpProgram,
) -> Result<(), XdpError> {
    let counters = PerCpuArray::<_, Counters>::try_from(Map::PerCpuArray(open_map(
        &old_dir.join(maps::COUNTERS),
    )?))
    .map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    for (i, name) in old.iter().enumerate() {
        let Some(j) = new.iter().position(|n| n == name) else {
            continue;
        };
        let v = counters
            .get(&(i as u32), 0)
            .map_err(|e| err(format!("reading counters: {e}")))?;
        if v.iter().any(|c| c.packets != 0) {
            out.push((j as u32, v.iter().copied().collect::<Vec<Counters>>()));
        }
    }
    program.write_counters(out)
}

fn attach_new(
    prog: &mut Xdp,
    iface: &str,
    mode: Mode,
    warnings: &mut Vec<String>,
) -> Result<(aya::programs::xdp::XdpLinkId, Mode), XdpError> {
    let skb = |prog: &mut Xdp| {
        prog.attach(iface, XdpMode::Skb)
            .map(|id| (id, Mode::Skb))
            .map_err(|e| err(format!("{iface}: skb-mode attach failed: {e}")))
    };
    if mode == Mode::Skb {
        return skb(prog);
    }
    match prog.attach(iface, XdpMode::Driver) {
        Ok(id) => Ok((id, Mode::Native)),
        Err(e) if mode == Mode::Native => Err(err(format!(
            "{iface}: native XDP attach failed ({e}); the driver may not support XDP \
             (use --mode skb, or the default --mode auto to fall back)"
        ))),
        Err(e) => {
            warnings.push(format!(
                "{iface}: native XDP attach failed ({e}); running in skb (generic) mode, \
                 which is slower"
            ));
            skb(prog)
        }
    }
}

/// Collects aya-log records as lines.
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl log::Log for Lines {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// Follows the events (sources entering a ban) of the program rctl runs
/// on `iface`, across applies, calling `emit(generation, line)` for each,
/// until `stop()` returns true. Events are produced whether or not anyone
/// follows them; unread ones are dropped when the ring buffer is full.
pub fn follow_events(
    paths: &Paths,
    iface: &str,
    mut emit: impl FnMut(u64, &str),
    stop: impl Fn() -> bool,
) -> Result<(), XdpError> {
    let mut current: Option<(u64, aya_log::EbpfLogger<Lines>)> = None;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    while !stop() {
        let Some(a) = attached(paths, iface)? else {
            return Err(err(format!("rctl has nothing attached to {iface}")));
        };
        if current.as_ref().map(|c| c.0) != Some(a.generation) {
            let prog = paths
                .iface_pins(iface)
                .join(format!("gen-{}", a.generation))
                .join("prog");
            let id = aya::programs::ProgramInfo::from_pin(&prog)
                .map_err(|e| err(format!("opening {}: {e}", prog.display())))?
                .id();
            let logger = aya_log::EbpfLogger::init_from_id_with_logger(id, Lines(lines.clone()))
                .map_err(|e| err(format!("reading the events of program {id}: {e}")))?;
            current = Some((a.generation, logger));
        }
        if let Some((generation, logger)) = current.as_mut() {
            logger.flush();
            let drained: Vec<String> = lines
                .lock()
                .map(|mut v| std::mem::take(&mut *v))
                .unwrap_or_default();
            for l in drained {
                emit(*generation, &l);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(())
}

/// One rule's counters, summed over CPUs.
#[derive(Debug, Clone, Serialize)]
pub struct RuleCounters {
    /// Rule name.
    pub rule: String,
    /// Packets it decided in the program.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What `rctl status` shows for one interface.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The metadata of the attached generation.
    pub attached: Attached,
    /// Whether the pinned link is present (the program is attached).
    pub link_pinned: bool,
    /// Counters per rule (rules that decided no packet included).
    pub counters: Vec<RuleCounters>,
    /// Occupied rate-limit buckets.
    pub buckets_used: usize,
    /// Of those, live ones (banned, or ahead of the clock, read from
    /// /proc/timer_list).
    pub buckets_live: usize,
    /// Of those, banned sources.
    pub buckets_banned: usize,
    /// The bucket table's capacity.
    pub buckets_capacity: u32,
    /// The installed artifact's path.
    pub artifact: PathBuf,
}

fn open_map(path: &Path) -> Result<MapData, XdpError> {
    MapData::from_pin(path).map_err(|e| err(format!("opening {}: {e}", path.display())))
}

/// The status of every interface rctl has attached to (or of `iface`).
pub fn status(paths: &Paths, iface: Option<&str>) -> Result<Vec<Status>, XdpError> {
    let names: Vec<String> = match iface {
        Some(i) => vec![i.to_string()],
        None => {
            let mut v: Vec<String> = std::fs::read_dir(&paths.run)
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| {
                            let n = e.file_name().into_string().ok()?;
                            n.strip_suffix(".json").map(str::to_string)
                        })
                        .filter(|n| !n.starts_with('.'))
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        }
    };
    let mut out = Vec::new();
    for name in names {
        let Some(a) = attached(paths, &name)? else {
            return Err(err(format!("rctl has nothing attached to {name}")));
        };
        let dir = paths.iface_pins(&name);
        let gen = dir.join(format!("gen-{}", a.generation));
        let counters = PerCpuArray::<_, Counters>::try_from(Map::PerCpuArray(open_map(
            &gen.join(maps::COUNTERS),
        )?))
        .map_err(|e| err(e.to_string()))?;
        let mut per_rule = Vec::new();
        for (i, rule) in a.rules.iter().enumerate() {
            let v = counters
                .get(&(i as u32), 0)
                .map_err(|e| err(format!("reading counters: {e}")))?;
            per_rule.push(RuleCounters {
                rule: rule.clone(),
                packets: v.iter().map(|c| c.packets).sum(),
                bytes: v.iter().map(|c| c.bytes).sum(),
            });
        }
        // Live buckets: banned, or running ahead of the clock (a bucket
        // that has fully recovered is as good as none).
        let buckets = Array::<_, Bucket>::try_from(Map::Array(open_map(&gen.join(maps::BUCKETS))?))
            .map_err(|e| err(e.to_string()))?;
        let now = monotonic_ns();
        let (mut used, mut live, mut banned) = (0, 0, 0);
        for b in (0..MAX_BUCKETS).filter_map(|i| buckets.get(&i, 0).ok()) {
            if b.family == 0 {
                continue;
            }
            used += 1;
            live += usize::from(b.tat > now || b.banned_until > now);
            banned += usize::from(b.banned_until > now);
        }
        out.push(Status {
            link_pinned: dir.join("link").exists(),
            attached: a,
            counters: per_rule,
            buckets_used: used,
            buckets_live: live,
            buckets_banned: banned,
            buckets_capacity: MAX_BUCKETS,
            artifact: paths.artifact(),
        });
    }
    Ok(out)
}

/// Detaches rctl from `iface` and removes its pins and metadata; returns
/// what was attached (`None` if only a pinned link was left). The
/// installed artifact stays (other interfaces may use it).
pub fn detach(iface: &str, paths: &Paths) -> Result<Option<Attached>, XdpError> {
    check_privileges()?;
    check_bpffs(&paths.bpffs)?;
    let a = attached(paths, iface)?;
    let dir = paths.iface_pins(iface);
    let link = dir.join("link");
    if a.is_none() && !link.exists() {
        return Err(err(format!("rctl has nothing attached to {iface}")));
    }
    if link.exists() {
        let pinned = PinnedLink::from_pin(&link)
            .map_err(|e| err(format!("opening {}: {e}", link.display())))?;
        // Unpinning drops the last reference: the kernel detaches the
        // program when our descriptor closes.
        let fd = pinned
            .unpin()
            .map_err(|e| err(format!("unpinning {}: {e}", link.display())))?;
        drop(fd);
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            remove_generation(&e.path());
        }
    }
    let _ = std::fs::remove_dir(&dir);
    let _ = std::fs::remove_file(paths.meta(iface));
    Ok(a)
}
