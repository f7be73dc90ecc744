//! `rctl apply`: a new generation beside the running one, one switch,
//! then the bookkeeping (see the module docs for the order and why).

use super::observe::{has_state, open_map, resolve, staged_metas, Observed};
use super::paths::{generation_of, IfName, Paths};
use super::status::remove_pinned;
use super::sys::describe;
use super::{check_bpffs, check_iface, check_privileges, fault, now_unix, Applied, Attached, Mode};
use crate::error::{err, LoaderError};
use crate::XdpProgram;
use aya::maps::{Array, Map, PerCpuArray};
use aya::programs::links::FdLink;
use aya::programs::xdp::XdpLink;
use aya::programs::{Xdp, XdpMode};
use rctl_common::{
    maps, BucketSet, Counters, Limiter, BANNED, BUCKET_SETS, MAX_RULES, MAX_TERMS, SETS, WAYS,
};
use rctl_dataplane::xdp::{ClockMode, Tables};
use rctl_os::fs::{
    ensure_private_dir, remove_empty, remove_file, rename_durably, write_private, Lock,
};
use std::path::{Path, PathBuf};

/// The maps a generation pins: what `status` reads, what the next apply
/// carries over, and what a rebuild of lost metadata checks against.
const PINNED_MAPS: [&str; 7] = [
    maps::COUNTERS,
    maps::BUCKETS,
    maps::BANS,
    maps::LIMITERS,
    maps::CONFIG,
    maps::TERMS,
    maps::CLOCK,
];

/// Applies `artifact` (the bytes of a `.rctlc`) to `iface`; `object` is
/// the compiled XDP program.
///
/// Everything that can be checked is checked before any state changes; a
/// failure before the switch leaves the running generation as it was and
/// removes what this apply made. A failure after it is reported in
/// [`Applied::incomplete`]: the new generation is live.
pub fn apply(
    artifact: &[u8],
    object: &[u8],
    iface: &str,
    mode: Mode,
    clock: ClockMode,
    site: Option<&str>,
    paths: &Paths,
) -> Result<Applied, LoaderError> {
    let name = IfName::new(iface)?;
    let rs = rctl_compiler::artifact::decode(artifact).map_err(|e| err(e.to_string()))?;
    check_privileges()?;
    check_bpffs(&paths.bpffs)?;
    let ifindex = check_iface(iface)?;
    let tables = Tables::new(&rs, site)?;
    let mut warnings: Vec<String> = rs.site_warning(site).into_iter().collect();
    let mut created = Vec::new();
    let roots = [paths.run.clone(), paths.state.clone(), paths.pin_root()];
    for d in &roots {
        if let Err(e) = ensure_private_dir(d, &mut created) {
            remove_empty(&created);
            return Err(e.into());
        }
    }
    let lock = match Lock::acquire(&paths.lock(&name), true) {
        Ok(l) => l,
        Err(e) => {
            remove_empty(&created);
            return Err(e.into());
        }
    };
    fault("apply-locked");
    let obs = Observed::read(paths, &name);
    let generation = obs.next_generation();
    let mut job = Job {
        paths,
        name: &name,
        generation,
        created,
    };
    let staged = job.stage(
        artifact,
        object,
        &rs,
        &tables,
        mode,
        clock,
        site,
        ifindex,
        obs,
        &mut warnings,
    );
    let (attached, replaced, carried) = match staged {
        Ok(v) => v,
        Err(e) => {
            job.abandon(lock);
            return Err(e);
        }
    };
    fault("apply-switched");
    let incomplete = job.finish();
    drop(lock);
    Ok(Applied {
        attached,
        warnings,
        replaced,
        carried,
        artifact: paths.artifact(&name),
        incomplete,
    })
}

/// One apply's new generation and what it made.
struct Job<'a> {
    paths: &'a Paths,
    name: &'a IfName,
    generation: u64,
    /// Directories this apply created.
    created: Vec<PathBuf>,
}

impl Job<'_> {
    fn dir(&self) -> PathBuf {
        self.paths.generation(self.name, self.generation)
    }

    /// Everything up to and including the switch: returns the new
    /// metadata, whether a running program was replaced, and how many
    /// buckets were carried.
    #[expect(
        clippy::too_many_arguments,
        reason = "the apply's inputs, passed through once"
    )]
    fn stage(
        &mut self,
        artifact: &[u8],
        object: &[u8],
        rs: &rctl_compiler::ir::Ruleset,
        tables: &Tables,
        mode: Mode,
        clock: ClockMode,
        site: Option<&str>,
        ifindex: u32,
        obs: Observed,
        warnings: &mut Vec<String>,
    ) -> Result<(Attached, bool, usize), LoaderError> {
        let (paths, name) = (self.paths, self.name);
        for d in [paths.pins(name), paths.artifacts(name)] {
            ensure_private_dir(&d, &mut self.created)?;
        }
        let link = obs.link.as_ref().map(|(_, l)| l.clone());
        let source = obs.source(paths, name);
        let old = source.and_then(|g| {
            let r = resolve(paths, name, g, link.as_ref());
            warnings.extend(r.warnings);
            r.meta
        });
        // Replace the program in place when the pinned link still runs on
        // this interface; else attach afresh.
        let update = obs.link_attached();
        if update {
            if let (Some(m), Mode::Native | Mode::Skb) = (old.as_ref().and_then(|o| o.mode), mode) {
                if m != mode {
                    return Err(err(format!(
                        "{name} runs rctl in {} mode; an apply cannot change the mode in place \
                         (run `rctl detach --iface {name}` first)",
                        mode_name(m)
                    )));
                }
            }
        } else if let Some(why) = obs.link_pinned.then(|| obs.not_enforcing(name)).flatten() {
            warnings.push(format!("{why}: attaching afresh"));
        }
        let mut program = XdpProgram::load(object, tables, rs.rules.len(), false)?;
        program.set_clock_mode(clock)?;
        let limiters: Vec<String> = tables
            .limiter_rules
            .iter()
            .map(|&r| rs.rules[r].name.clone())
            .collect();
        let rules: Vec<String> = rs.rules.iter().map(|r| r.name.clone()).collect();
        let mut carried = 0;
        if let (Some(o), Some(g)) = (&old, source) {
            let dir = paths.generation(name, g);
            match carry_buckets(&dir, &o.limiters, &limiters, &mut program) {
                Ok(n) => carried = n,
                Err(e) => warnings.push(format!(
                    "rate-limit state not carried over (limits start afresh): {e}"
                )),
            }
            if let Err(e) = carry_counters(&dir, &o.rules, &rules, &mut program) {
                warnings.push(format!(
                    "counters not carried over (they restart at 0): {e}"
                ));
            }
        } else if source.is_some() {
            warnings.push(
                "rate-limit state and counters not carried over: the running generation's \
                 rule names are not known"
                    .into(),
            );
        }
        let dir = self.dir();
        ensure_private_dir(&dir, &mut self.created)?;
        fault("apply-pinning");
        program.pin(&dir, &PINNED_MAPS)?;
        fault("apply-pinned");
        write_private(&paths.staged_artifact(name, self.generation), artifact)?;
        let mut attached = Attached {
            iface: name.to_string(),
            mode: old.as_ref().and_then(|o| o.mode),
            clock,
            generation: self.generation,
            // The hash `rctl compile` prints.
            artifact_sha256: rctl_compiler::artifact::hex(
                &rctl_compiler::artifact::content_hash(artifact)
                    .unwrap_or_else(|| rctl_compiler::artifact::sha256(artifact)),
            ),
            site: site.map(str::to_string),
            rules,
            prefixes: (tables.v4.len(), tables.v6.len()),
            terms: tables.terms.len(),
            limiters,
            applied_unix: now_unix(),
            ifindex,
        };
        let stage_meta = |a: &Attached| -> Result<(), LoaderError> {
            let meta = serde_json::to_vec_pretty(a).map_err(|e| err(e.to_string()))?;
            Ok(write_private(
                &paths.staged_meta(name, a.generation),
                &meta,
            )?)
        };
        let prog = program.xdp_mut()?;
        let Observed { link, .. } = obs;
        match link {
            Some((fd, _)) if update => {
                stage_meta(&attached)?;
                fault("apply-staged");
                let link = XdpLink::try_from(fd).map_err(|e| {
                    err(format!(
                        "{}: not an XDP link: {}",
                        paths.link(name).display(),
                        describe(&e)
                    ))
                })?;
                // The commit point.
                let id = prog.attach_to_link(link).map_err(|e| {
                    err(format!("replacing the program on {name}: {}", describe(&e)))
                })?;
                // Closing our descriptor leaves the pinned link in place.
                drop(prog.take_link(id));
                Ok((attached, true, carried))
            }
            link => {
                let pin = paths.link(name);
                if std::fs::symlink_metadata(&pin).is_ok() {
                    // A link that no longer runs here (its interface was
                    // deleted): unpinned, it goes when `link` closes.
                    remove_file(&pin)?;
                    drop(link);
                    fault("apply-unlinked");
                }
                let (id, used) = attach_new(prog, name, mode, warnings)?;
                let link = prog.take_link(id).map_err(|e| err(describe(&e)))?;
                let fd = FdLink::try_from(link).map_err(|e| {
                    err(format!(
                        "the kernel attached {name} without a BPF link ({}); rctl needs BPF \
                         links (Linux 5.9 or later) to keep the program attached",
                        describe(&e)
                    ))
                })?;
                attached.mode = Some(used);
                stage_meta(&attached)?;
                fault("apply-staged");
                // The commit point: pinned, the link outlives this process.
                fd.pin(&pin)
                    .map_err(|e| err(format!("pinning {}: {}", pin.display(), describe(&e))))?;
                Ok((attached, false, carried))
            }
        }
    }

    /// After the switch: installs the artifact, records the metadata,
    /// retires the other generations. Returns what failed.
    fn finish(&self) -> Vec<String> {
        let (paths, name, g) = (self.paths, self.name, self.generation);
        let mut failed = Vec::new();
        let installed = paths.artifact(name);
        if let Err(e) = rename_durably(&paths.staged_artifact(name, g), &installed) {
            failed.push(format!(
                "installing the artifact at {}: {e}",
                installed.display()
            ));
        }
        fault("apply-installed");
        if let Err(e) = rename_durably(&paths.staged_meta(name, g), &paths.meta(name)) {
            failed.push(format!("recording the metadata: {e}"));
        }
        fault("apply-recorded");
        self.retire(Some(g));
        fault("apply-retired");
        failed
    }

    /// Removes every generation and staged file but `keep`'s.
    fn retire(&self, keep: Option<u64>) {
        let (paths, name) = (self.paths, self.name);
        if let Ok(d) = std::fs::read_dir(paths.pins(name)) {
            for e in d.flatten() {
                let g = e.file_name().to_str().and_then(generation_of);
                if g.is_some() && g != keep {
                    remove_pinned(&e.path());
                }
            }
        }
        for (g, p) in staged_metas(paths, name) {
            if Some(g) != keep {
                let _ = remove_file(&p);
            }
        }
        if let Ok(d) = std::fs::read_dir(paths.artifacts(name)) {
            for e in d.flatten() {
                let staged = e
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".rctlc"))
                    .and_then(generation_of);
                if staged.is_some() && staged != keep {
                    let _ = remove_file(&e.path());
                }
            }
        }
    }

    /// Undoes a failed apply before its switch: its generation, its staged
    /// files, and the folders and lock it made that nothing else uses.
    fn abandon(&self, lock: Lock) {
        let (paths, name, g) = (self.paths, self.name, self.generation);
        remove_pinned(&self.dir());
        let _ = remove_file(&paths.staged_meta(name, g));
        let _ = remove_file(&paths.staged_artifact(name, g));
        remove_empty(&[paths.pins(name), paths.artifacts(name)]);
        if has_state(paths, name) {
            drop(lock);
        } else {
            lock.remove();
        }
        remove_empty(&self.created);
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Auto => "auto",
        Mode::Native => "native",
        Mode::Skb => "skb",
    }
}

/// Copies the buckets of the generation pinned in `old_dir` into
/// `program`'s table, for the limiters of rules present in both (by
/// name). The new table takes the old one's seed, so that a limiter's
/// buckets (keyed by its rule's name) keep their set and tag, and sets
/// are copied as they are, with the arrival times saved for bans; the
/// limiters' overflow buckets follow their rules. (A bucket of a rule
/// that is gone stays until it has recovered: no key of the new rules
/// matches it.) Returns how many buckets were carried.
fn carry_buckets(
    old_dir: &Path,
    old: &[String],
    new: &[String],
    program: &mut XdpProgram,
) -> Result<usize, LoaderError> {
    let to: Vec<Option<u32>> = old
        .iter()
        .map(|name| new.iter().position(|n| n == name).map(|i| i as u32))
        .collect();
    if to.iter().all(Option::is_none) {
        return Ok(0);
    }
    let open =
        |name: &str| -> Result<Map, LoaderError> { Ok(Map::Array(open_map(&old_dir.join(name))?)) };
    let limiters =
        Array::<_, Limiter>::try_from(open(maps::LIMITERS)?).map_err(|e| err(describe(&e)))?;
    let seed = limiters.get(&0, 0).map_err(|e| err(describe(&e)))?.seed;
    let buckets =
        Array::<_, BucketSet>::try_from(open(maps::BUCKETS)?).map_err(|e| err(describe(&e)))?;
    let bans = Array::<_, u64>::try_from(open(maps::BANS)?).map_err(|e| err(describe(&e)))?;
    let (mut sets, mut saved, mut carried) = (Vec::new(), Vec::new(), 0);
    let mut overflow = vec![BucketSet::default(); (MAX_TERMS / WAYS) as usize];
    for set in 0..BUCKET_SETS {
        let Ok(b) = buckets.get(&set, 0) else {
            continue;
        };
        for (w, slot) in b.iter().enumerate().filter(|(_, s)| s.tat != 0) {
            let i = set * WAYS + w as u32;
            // A key's bucket stays in its place; limiter `l`'s overflow
            // bucket goes to its new index.
            let to = if set < SETS {
                Some(i)
            } else {
                let l = (i - SETS * WAYS) as usize;
                to.get(l).copied().flatten().map(|n| {
                    overflow[(n / WAYS) as usize][(n % WAYS) as usize] = *slot;
                    SETS * WAYS + n
                })
            };
            let Some(to) = to else { continue };
            carried += 1;
            if slot.tat & BANNED != 0 {
                saved.push((to, bans.get(&i, 0).unwrap_or(0)));
            }
        }
        if set < SETS && b.iter().any(|s| s.tat != 0) {
            sets.push((set, b));
        }
    }
    for (k, b) in overflow.into_iter().enumerate() {
        if b.iter().any(|s| s.tat != 0) {
            sets.push((SETS + k as u32, b));
        }
    }
    program.reseed(seed)?;
    program.write_buckets(&sets, &saved)?;
    Ok(carried)
}

/// Copies the per-rule, per-CPU counters of the generation pinned in
/// `old_dir` to the rules of the same name in `program`, so that `status`
/// counts since the first apply. Rules past the counter table
/// ([`MAX_RULES`]) have none. (Packets the old generation counts between
/// this copy and the switch are not carried.)
fn carry_counters(
    old_dir: &Path,
    old: &[String],
    new: &[String],
    program: &mut XdpProgram,
) -> Result<(), LoaderError> {
    let counters = PerCpuArray::<_, Counters>::try_from(Map::PerCpuArray(open_map(
        &old_dir.join(maps::COUNTERS),
    )?))
    .map_err(|e| err(describe(&e)))?;
    let mut out = Vec::new();
    for (i, name) in old.iter().enumerate().take(MAX_RULES as usize) {
        let Some(j) = new
            .iter()
            .position(|n| n == name)
            .filter(|&j| j < MAX_RULES as usize)
        else {
            continue;
        };
        let v = counters
            .get(&(i as u32), 0)
            .map_err(|e| err(format!("reading counters: {}", describe(&e))))?;
        if v.iter().any(|c| c.packets != 0) {
            out.push((j as u32, v.iter().copied().collect::<Vec<Counters>>()));
        }
    }
    program.write_counters(out)
}

fn attach_new(
    prog: &mut Xdp,
    name: &IfName,
    mode: Mode,
    warnings: &mut Vec<String>,
) -> Result<(aya::programs::xdp::XdpLinkId, Mode), LoaderError> {
    let iface = name.as_str();
    let taken = |e: &str| {
        if e.contains("EBUSY") || e.contains("EEXIST") {
            " (another XDP program is attached to it: by another tool, or by an rctl with \
             other --bpffs or state directories; see `ip link show dev IFACE`)"
                .replace("IFACE", iface)
        } else {
            String::new()
        }
    };
    let skb = |prog: &mut Xdp| {
        prog.attach(iface, XdpMode::Skb)
            .map(|id| (id, Mode::Skb))
            .map_err(|e| {
                let e = describe(&e);
                err(format!("{iface}: skb-mode attach failed: {e}{}", taken(&e)))
            })
    };
    if mode == Mode::Skb {
        return skb(prog);
    }
    match prog.attach(iface, XdpMode::Driver) {
        Ok(id) => Ok((id, Mode::Native)),
        Err(e) => {
            let e = describe(&e);
            if mode == Mode::Native {
                return Err(err(format!(
                    "{iface}: native XDP attach failed ({e}){}; the driver may not support XDP \
                     (use --mode skb, or the default --mode auto to fall back)",
                    taken(&e)
                )));
            }
            warnings.push(format!(
                "{iface}: native XDP attach failed ({e}); running in skb (generic) mode, \
                 which is slower"
            ));
            skb(prog)
        }
    }
}
