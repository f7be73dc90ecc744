//! The physical floor of a cold lookup on this machine: the XDP object's
//! `rctl_touch` (one load from a table of a given size, at a hash of the
//! packet's source) and `rctl_touch2` (two dependent loads), against
//! `rctl_pass` in the same object and run.

use aya::maps::Array;
use aya::programs::{TestRun, TestRunOptions, Xdp};
use rctl_common::dir::ENTRY_CHUNK;
use rctl_common::maps;

/// The object loaded with a probe table of `bytes`.
pub struct Probe {
    ebpf: aya::Ebpf,
}

impl Probe {
    /// Loads `obj` with its probe table sized to `bytes` (whole 4 KiB
    /// chunks) and filled with random words.
    pub fn load(obj: &[u8], bytes: usize) -> Probe {
        let chunks = (bytes / (ENTRY_CHUNK as usize * 8)).max(1) as u32;
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries(maps::TOUCH, chunks)
            .map_max_entries("RCTL_TOUCH_AOM", chunks.div_ceil(7))
            .load(obj)
            .expect("load the XDP object (needs root)");
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut random_chunk = || {
            let mut v = [0u64; ENTRY_CHUNK as usize];
            for w in &mut v {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *w = x;
            }
            v
        };
        {
            let mut t: Array<_, [u64; ENTRY_CHUNK as usize]> =
                Array::try_from(ebpf.map_mut(maps::TOUCH).unwrap()).unwrap();
            for c in 0..chunks {
                t.set(c, random_chunk(), 0).unwrap();
            }
        }
        // The same bytes as arrays of 7 chunks (kmalloc'd), in the array
        // of maps.
        let inner = chunks.div_ceil(7);
        {
            type Inner = Array<aya::maps::MapData, [u64; ENTRY_CHUNK as usize]>;
            let mut outer: aya::maps::ArrayOfMaps<_, Inner> =
                aya::maps::ArrayOfMaps::try_from(ebpf.map_mut("RCTL_TOUCH_AOM").unwrap()).unwrap();
            for i in 0..inner.min(outer.len()) {
                let mut a: Inner = Array::create(7, 0).unwrap();
                for c in 0..7 {
                    a.set(c, random_chunk(), 0).unwrap();
                }
                outer.set(i, &a, 0).unwrap();
            }
        }
        let mut config: Array<_, u32> =
            Array::try_from(ebpf.map_mut(maps::CONFIG).unwrap()).unwrap();
        config.set(2, chunks, 0).unwrap();
        for p in [
            "rctl_pass",
            "rctl_touch",
            "rctl_touch2",
            "rctl_touch_aom",
            "rctl_touch2_aom",
        ] {
            let prog: &mut Xdp = ebpf.program_mut(p).unwrap().try_into().unwrap();
            prog.load().unwrap();
        }
        Probe { ebpf }
    }

    /// Mean ns of one run of `program` per frame.
    pub fn cold(&mut self, program: &str, frames: &[Vec<u8>]) -> f64 {
        let prog: &mut Xdp = self.ebpf.program_mut(program).unwrap().try_into().unwrap();
        let total: f64 = frames
            .iter()
            .map(|f| {
                prog.test_run(TestRunOptions {
                    data_in: Some(f),
                    repeat: 1,
                    ..TestRunOptions::new()
                })
                .unwrap()
                .duration
                .as_nanos() as f64
            })
            .sum();
        total / frames.len() as f64
    }
}
