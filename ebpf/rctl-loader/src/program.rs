//! The loaded program: its maps filled from [`Tables`], and packets run
//! through it with BPF_PROG_TEST_RUN (aya's `TestRun`).

use crate::error::{err, obj, ErrorKind, LoaderError};
use crate::{host, kernel_tick};
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, PerCpuArray};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use aya::Ebpf;
use rctl_common::{
    bucket_key, bucket_set, bucket_tag, maps, Bucket, BucketSet, Clock, Counters, Limiter,
    CONFIG_PREFETCH_SHIFT, CONFIG_SETS_ONLY, CONFIG_USES_DST, WAYS,
};
use rctl_dataplane::xdp::{ClockMode, Tables};

fn array<'a, V: aya::Pod>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> Result<Array<&'a mut aya::maps::MapData, V>, LoaderError> {
    Array::try_from(
        ebpf.map_mut(name)
            .ok_or_else(|| obj(format!("no map {name}")))?,
    )
    .map_err(|e| err(format!("{name}: {e}")))
}

/// The object's XDP program `name`.
fn xdp<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp, LoaderError> {
    ebpf.program_mut(name)
        .ok_or_else(|| obj(format!("no program `{name}`")))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| err(e.to_string()))
}

/// The XDP program `name`, loaded into the kernel if it is not yet.
fn loaded<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp, LoaderError> {
    let prog = xdp(ebpf, name)?;
    if prog.fd().is_err() {
        prog.load().map_err(|e| {
            obj(format!(
                "the kernel refused `{name}`: {}",
                host::describe(&e)
            ))
        })?;
    }
    Ok(prog)
}

/// Writes `items` into the array map `name` from index 0.
fn fill<V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &str,
    items: impl IntoIterator<Item = V>,
) -> Result<(), LoaderError> {
    let mut a = array::<V>(ebpf, name)?;
    for (i, v) in items.into_iter().enumerate() {
        a.set(i as u32, v, 0)
            .map_err(|e| err(format!("{name}[{i}]: {e}")))?;
    }
    Ok(())
}

/// The loaded program (not attached to any interface).
pub struct XdpProgram {
    ebpf: Ebpf,
    rules: usize,
    /// The bucket hash's seed.
    seed: u64,
    /// The limiters (without their keys) and their ids.
    limiters: Vec<Limiter>,
    limiter_ids: Vec<u64>,
    /// The program [`XdpProgram::test`] runs.
    selected: &'static str,
}

/// What the program did with one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// XDP_DROP (1) or XDP_PASS (2).
    pub action: u32,
    /// The rule whose counter moved, if any.
    pub rule: Option<usize>,
}

impl XdpProgram {
    /// Loads the object and fills its maps from `tables`; with `tries`,
    /// also the LPM tries that only the `rctl_lpm` baseline reads.
    pub fn load(
        object: &[u8],
        tables: &Tables,
        rules: usize,
        tries: bool,
    ) -> Result<XdpProgram, LoaderError> {
        let d = &tables.dir;
        let chunks = |n: usize, size: u32| {
            u32::try_from(n / size as usize)
                .map_err(|_| LoaderError::new(ErrorKind::Tables, "prefix tables too large"))
        };
        use rctl_common::dir::{CLASS_CHUNK, ENTRY_CHUNK, FILTER_CHUNK, NODE_CHUNK, RANGE_CHUNK};
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries(maps::FILTER, chunks(d.filter.len(), FILTER_CHUNK)?)
            .map_max_entries(maps::ENTRIES, chunks(d.entries.len(), ENTRY_CHUNK)?)
            .map_max_entries(maps::NODES, chunks(d.nodes.len(), NODE_CHUNK)?)
            .map_max_entries(maps::CLASSES, chunks(d.classes.len(), CLASS_CHUNK)?)
            .map_max_entries(maps::RANGES, chunks(d.ranges.len(), RANGE_CHUNK)?)
            .load(object)
            .map_err(|e| obj(format!("loading the XDP object: {e}")))?;
        let e = &mut ebpf;
        fill(e, maps::TERMS, tables.terms.iter().copied())?;
        fill(e, maps::FILTER, d.filter_chunks())?;
        fill(e, maps::ENTRIES, d.entry_chunks())?;
        fill(e, maps::NODES, d.node_chunks())?;
        fill(e, maps::CLASSES, d.class_chunks())?;
        fill(e, maps::RANGES, d.range_chunks())?;
        fill(e, maps::PROTOS, tables.protos.iter().copied())?;
        {
            let mut ports: Array<_, u64> = array(e, maps::PORTS)?;
            for (p, b) in &tables.ports {
                ports
                    .set(u32::from(*p), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        if tries {
            let mut v4: LpmTrie<_, [u8; 4], u64> =
                LpmTrie::try_from(e.map_mut(maps::V4).ok_or_else(|| obj("no v4 map"))?)
                    .map_err(|e| err(e.to_string()))?;
            for (a, l, b) in &tables.v4 {
                v4.insert(&Key::new(u32::from(*l), *a), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        if tries {
            let mut v6: LpmTrie<_, [u8; 16], u64> =
                LpmTrie::try_from(e.map_mut(maps::V6).ok_or_else(|| obj("no v6 map"))?)
                    .map_err(|e| err(e.to_string()))?;
            for (a, l, b) in &tables.v6 {
                v6.insert(&Key::new(u32::from(*l), *a), b, 0)
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        // The term count goes in last: until it is set the program sees no
        // terms.
        {
            let mut config = array::<u32>(e, maps::CONFIG)?;
            // The first rate limit that needs no ip set: most sources reach
            // it, so the program fetches its bucket set early.
            let prefetch = tables
                .terms
                .iter()
                .find(|t| t.kind == rctl_common::kind::THROTTLE && t.set_pos == 0)
                .map_or(0, |t| t.limiter + 1);
            let sets_only = !tables.terms.is_empty() && tables.terms.iter().all(|t| t.set_pos != 0);
            let uses_dst = tables.terms.iter().any(|t| t.dst_pos | t.dst_neg != 0);
            let head = tables.terms.len() as u32
                | prefetch << CONFIG_PREFETCH_SHIFT
                | if sets_only { CONFIG_SETS_ONLY } else { 0 }
                | if uses_dst { CONFIG_USES_DST } else { 0 };
            config
                .set(0, head, 0)
                .map_err(|e| err(format!("{}[0]: {e}", maps::CONFIG)))?;
        }
        loaded(&mut ebpf, "rctl")?;
        // The bucket hash's seed, random per table.
        let seed = {
            use std::hash::BuildHasher as _;
            std::hash::RandomState::new().hash_one(0x5eed_u64)
        };
        let mut program = XdpProgram {
            ebpf,
            rules,
            seed,
            limiters: tables.limiters.clone(),
            limiter_ids: tables.limiter_ids.clone(),
            selected: "rctl",
        };
        program.reseed(seed)?;
        // The tick clock where the kernel tick can be read (callers that
        // ask for it explicitly get the error), else the exact one.
        if program.set_clock_mode(ClockMode::Tick).is_err() {
            program.set_clock_mode(ClockMode::Exact)?;
        }
        Ok(program)
    }

    /// Keys the bucket hash with `seed` (a new table's is random; one that
    /// takes over another's buckets keeps its seed, see
    /// [`XdpProgram::seed`]). Only before the program sees traffic.
    pub fn reseed(&mut self, seed: u64) -> Result<(), LoaderError> {
        self.seed = seed;
        let limiters: Vec<Limiter> = self
            .limiters
            .iter()
            .zip(&self.limiter_ids)
            .map(|(l, &id)| Limiter {
                key4: bucket_key(seed, id, 4),
                key6: bucket_key(seed, id, 6),
                seed,
                ..*l
            })
            .collect();
        fill(&mut self.ebpf, maps::LIMITERS, limiters)
    }

    /// Pins the program (as `prog`) and the named maps into `dir`, which
    /// must be on a bpffs.
    pub fn pin(&mut self, dir: &std::path::Path, names: &[&str]) -> Result<(), LoaderError> {
        for name in names {
            let path = dir.join(name);
            self.ebpf
                .map(name)
                .ok_or_else(|| obj(format!("no map {name}")))?
                .pin(&path)
                .map_err(|e| {
                    err(format!(
                        "pinning {}: {}",
                        path.display(),
                        host::describe(&e)
                    ))
                })?;
        }
        let path = dir.join("prog");
        self.xdp_mut()?.pin(&path).map_err(|e| {
            err(format!(
                "pinning {}: {}",
                path.display(),
                host::describe(&e)
            ))
        })
    }

    /// The loaded `rctl` program.
    pub fn xdp_mut(&mut self) -> Result<&mut Xdp, LoaderError> {
        xdp(&mut self.ebpf, "rctl")
    }

    /// The object's program `name` (`rctl`, or the empty `rctl_pass`,
    /// which shares the maps), loaded if it is not yet: the benchmark
    /// attaches either to an interface.
    pub fn program_mut(&mut self, name: &str) -> Result<&mut Xdp, LoaderError> {
        loaded(&mut self.ebpf, name)
    }

    /// Packets each rule decided, summed over CPUs, by rule index.
    pub fn counts(&self) -> Result<Vec<u64>, LoaderError> {
        let c: PerCpuArray<_, Counters> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::COUNTERS)
                .ok_or_else(|| obj("no counters map"))?,
        )
        .map_err(|e| err(e.to_string()))?;
        (0..self.rules as u32)
            .map(|i| {
                c.get(&i, 0)
                    .map(|v| v.iter().map(|x| x.packets).sum())
                    .map_err(|e| err(e.to_string()))
            })
            .collect()
    }

    /// Makes [`XdpProgram::test`] run `name`: `rctl`, or `rctl_lpm` (the
    /// LPM-trie baseline, which needs the maps loaded with `tries`).
    pub fn select(&mut self, name: &'static str) -> Result<(), LoaderError> {
        loaded(&mut self.ebpf, name)?;
        self.selected = name;
        Ok(())
    }

    fn program(&self) -> Result<&Xdp, LoaderError> {
        self.ebpf
            .program(self.selected)
            .ok_or_else(|| obj("no program"))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(e.to_string()))
    }

    /// Runs one frame through the program at `time_ns` (the program's clock
    /// is set to it); `rule` is found from the counters, so this is for
    /// tests, not speed.
    pub fn test(&mut self, frame: &[u8], time_ns: u64) -> Result<Outcome, LoaderError> {
        self.set_clock(time_ns)?;
        let before = self.counts()?;
        let action = self.run(frame)?;
        let after = self.counts()?;
        let rule = before.iter().zip(&after).position(|(a, b)| a != b);
        Ok(Outcome { action, rule })
    }

    /// The seed of the bucket hash ([`rctl_common::bucket_key`]).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Where limiter `limiter` keeps the bucket of the (masked) source
    /// `(hi, lo)` of `family` (IPv4 in the top 32 bits of `hi`): its set
    /// and tag.
    pub fn bucket_of(&self, limiter: usize, family: u32, hi: u64, lo: u64) -> (u32, u64) {
        let id = self.limiter_ids.get(limiter).copied().unwrap_or(0);
        let tag = bucket_tag(bucket_key(self.seed, id, family), hi, lo);
        (bucket_set(tag), tag)
    }

    /// Bucket `slot` (set x [`WAYS`] + way).
    pub fn bucket(&self, slot: u32) -> Result<Bucket, LoaderError> {
        Ok(self.bucket_set(slot / WAYS)?[(slot % WAYS) as usize])
    }

    /// Bucket set `set`.
    pub fn bucket_set(&self, set: u32) -> Result<BucketSet, LoaderError> {
        let a: Array<_, BucketSet> = Array::try_from(
            self.ebpf
                .map(maps::BUCKETS)
                .ok_or_else(|| obj("no bucket map"))?,
        )
        .map_err(|e| err(e.to_string()))?;
        a.get(&set, 0)
            .map_err(|e| err(format!("{}[{set}]: {e}", maps::BUCKETS)))
    }

    /// Writes bucket sets, and the arrival times saved for banned
    /// buckets: (bucket, its time).
    pub fn write_buckets(
        &mut self,
        sets: &[(u32, BucketSet)],
        bans: &[(u32, u64)],
    ) -> Result<(), LoaderError> {
        let mut a = array::<BucketSet>(&mut self.ebpf, maps::BUCKETS)?;
        for (i, b) in sets {
            a.set(*i, b, 0)
                .map_err(|e| err(format!("{}[{i}]: {e}", maps::BUCKETS)))?;
        }
        let mut a = array::<u64>(&mut self.ebpf, maps::BANS)?;
        for (i, t) in bans {
            a.set(*i, t, 0)
                .map_err(|e| err(format!("{}[{i}]: {e}", maps::BANS)))?;
        }
        Ok(())
    }

    /// Sets rules' per-CPU counters: (rule, one value per possible CPU).
    pub fn write_counters(
        &mut self,
        entries: Vec<(u32, Vec<Counters>)>,
    ) -> Result<(), LoaderError> {
        let mut c: PerCpuArray<_, Counters> = PerCpuArray::try_from(
            self.ebpf
                .map_mut(maps::COUNTERS)
                .ok_or_else(|| obj("no counters map"))?,
        )
        .map_err(|e| err(e.to_string()))?;
        for (i, v) in entries {
            let v = aya::maps::PerCpuValues::try_from(v).map_err(|e| err(e.to_string()))?;
            c.set(i, v, 0)
                .map_err(|e| err(format!("{}[{i}]: {e}", maps::COUNTERS)))?;
        }
        Ok(())
    }

    /// Sets the program's clock to `time_ns` (instead of the kernel's).
    pub fn set_clock(&mut self, time_ns: u64) -> Result<(), LoaderError> {
        self.write_clock(Clock {
            fixed_ns: time_ns.max(1),
            ..Clock::default()
        })
    }

    /// Makes the program read the kernel's clock, as `mode` says (loading
    /// sets [`ClockMode::Tick`] where it can).
    pub fn set_clock_mode(&mut self, mode: ClockMode) -> Result<(), LoaderError> {
        let clock = match mode {
            ClockMode::Tick => {
                let (tick_ns, jiffies_base) = kernel_tick()?;
                Clock {
                    fixed_ns: 0,
                    tick_ns,
                    jiffies_base,
                }
            }
            ClockMode::Exact => Clock::default(),
        };
        self.write_clock(clock)
    }

    fn write_clock(&mut self, clock: Clock) -> Result<(), LoaderError> {
        array::<Clock>(&mut self.ebpf, maps::CLOCK)?
            .set(0, clock, 0)
            .map_err(|e| err(format!("{}: {e}", maps::CLOCK)))
    }

    /// Runs one frame through the selected program; returns its action.
    pub fn run(&mut self, frame: &[u8]) -> Result<u32, LoaderError> {
        self.program()?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat: 1,
                ..TestRunOptions::new()
            })
            .map(|r| r.return_value)
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))
    }

    /// Runs one frame `repeat` times through the selected program from
    /// the calling thread; returns the last run's action. Takes `&self`,
    /// so that several threads (on several CPUs) can run the same program
    /// and maps at once, as a multi-queue NIC does.
    pub fn run_repeat(&self, frame: &[u8], repeat: u32) -> Result<u32, LoaderError> {
        self.program()?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat,
                ..TestRunOptions::new()
            })
            .map(|r| r.return_value)
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))
    }

    /// Runs one frame `repeat` times through `program` (`rctl`, or the
    /// empty `rctl_pass`); returns the action and the kernel's mean ns per
    /// run.
    pub fn bench(
        &mut self,
        program: &str,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(u32, f64), LoaderError> {
        let r = loaded(&mut self.ebpf, program)?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat,
                ..TestRunOptions::new()
            })
            .map_err(|e| err(format!("BPF_PROG_TEST_RUN: {e}")))?;
        Ok((r.return_value, r.duration.as_nanos() as f64))
    }
}
