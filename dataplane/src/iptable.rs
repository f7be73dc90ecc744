//! A compiled prefix table: which ip sets contain an address, for every set
//! at once, in one binary search.
//!
//! All sets' ranges are cut into elementary intervals; each interval maps to
//! an interned list of the sets that cover it. A lookup is a
//! `partition_point` over the interval starts: O(log n) in the number of
//! prefixes, independent of the number of sets, with no linear scan.

use rctl_compiler::ir::IpSet;
use std::collections::HashMap;
use std::net::IpAddr;

#[derive(Debug, Default)]
struct Family<T> {
    /// Interval starts, sorted; interval i is [starts[i], starts[i+1]).
    starts: Vec<T>,
    /// Membership list id of each interval.
    members: Vec<u32>,
}

/// IPv4 interval starts above which lookups go through the /16 index.
const INDEXED_FROM: usize = 2048;

/// The table.
#[derive(Debug, Default)]
pub struct PrefixTable {
    v4: Family<u32>,
    /// For each top 16 bits of an IPv4 address, the first interval that
    /// could hold it: the binary search then runs over one /16's intervals.
    v4_index: Vec<u32>,
    v6: Family<u128>,
    lists: Vec<Vec<u32>>,
}

fn build<T: Copy + Ord>(
    events: &mut [(u128, bool, u32)],
    sets: usize,
    lists: &mut Vec<Vec<u32>>,
    interned: &mut HashMap<Vec<u32>, u32>,
    conv: impl Fn(u128) -> T,
) -> Family<T> {
    // (position, is_end, set): a range [s, e] is +set at s and -set at e+1.
    events.sort_unstable();
    let mut count = vec![0u32; sets];
    let mut fam = Family {
        starts: Vec::new(),
        members: Vec::new(),
    };
    let mut i = 0;
    while i < events.len() {
        let pos = events[i].0;
        while i < events.len() && events[i].0 == pos {
            let (_, end, s) = events[i];
            if end {
                count[s as usize] -= 1;
            } else {
                count[s as usize] += 1;
            }
            i += 1;
        }
        let active: Vec<u32> = count
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(s, _)| s as u32)
            .collect();
        let id = *interned.entry(active.clone()).or_insert_with(|| {
            lists.push(active);
            (lists.len() - 1) as u32
        });
        if fam.members.last() != Some(&id) {
            fam.starts.push(conv(pos));
            fam.members.push(id);
        }
    }
    fam
}

impl PrefixTable {
    /// Builds the table over sets indexed as in the ruleset.
    pub fn new(sets: &[IpSet]) -> Self {
        let mut lists = vec![Vec::new()];
        let mut interned: HashMap<Vec<u32>, u32> = HashMap::from([(Vec::new(), 0)]);
        let mut e4 = Vec::new();
        let mut e6 = Vec::new();
        for (i, s) in sets.iter().enumerate() {
            let (r4, r6) = s.prefixes.ranges();
            for (a, b) in r4 {
                e4.push((a, false, i as u32));
                if b < u128::from(u32::MAX) {
                    e4.push((b + 1, true, i as u32));
                }
            }
            for (a, b) in r6 {
                e6.push((a, false, i as u32));
                if b < u128::MAX {
                    e6.push((b + 1, true, i as u32));
                }
            }
        }
        let v4 = build(&mut e4, sets.len(), &mut lists, &mut interned, |p| p as u32);
        let v6 = build(&mut e6, sets.len(), &mut lists, &mut interned, |p| p);
        // v4_index[h] = number of interval starts below h << 16 (h = 65536
        // stands for 2^32). Only for large tables: the index is 256 KiB,
        // and a lookup in it a cache miss, where a search of a few
        // thousand starts stays within a few cache lines.
        let v4_index = if v4.starts.len() > INDEXED_FROM {
            (0..=0x1_0000u64)
                .map(|h| v4.starts.partition_point(|&s| u64::from(s) < h << 16) as u32)
                .collect::<Vec<_>>()
        } else {
            Vec::new()
        };
        PrefixTable {
            v4,
            v6,
            lists,
            v4_index,
        }
    }

    /// The sets containing `ip` (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn lookup(&self, ip: IpAddr) -> &[u32] {
        fn find<T: Ord + Copy>(f: &Family<T>, a: T) -> u32 {
            let i = f.starts.partition_point(|&s| s <= a);
            if i == 0 {
                0
            } else {
                f.members[i - 1]
            }
        }
        let id = match ip {
            IpAddr::V4(a) => self.find_v4(u32::from(a)),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => self.find_v4(u32::from(v4)),
                None => find(&self.v6, u128::from(a)),
            },
        };
        &self.lists[id as usize]
    }

    fn find_v4(&self, a: u32) -> u32 {
        let hi = (a >> 16) as usize;
        let (lo, up) = match (self.v4_index.get(hi), self.v4_index.get(hi + 1)) {
            (Some(&l), Some(&u)) => (l as usize, u as usize),
            _ => (0, self.v4.starts.len()),
        };
        // Every start below this /16 is <= a and every start above it is
        // > a, so the count of starts <= a is lo plus a search of [lo, up).
        let i = lo
            + self
                .v4
                .starts
                .get(lo..up)
                .map_or(0, |w| w.partition_point(|&s| s <= a));
        if i == 0 {
            0
        } else {
            self.v4.members[i - 1]
        }
    }

    /// Every elementary interval with members: (is IPv4, first, last,
    /// member sets), IPv4 first.
    pub fn ranges(&self) -> Vec<(bool, u128, u128, &[u32])> {
        let mut out = Vec::new();
        for (i, &s) in self.v4.starts.iter().enumerate() {
            let end = self
                .v4
                .starts
                .get(i + 1)
                .map_or(u128::from(u32::MAX), |&n| u128::from(n) - 1);
            out.push((
                true,
                u128::from(s),
                end,
                self.lists[self.v4.members[i] as usize].as_slice(),
            ));
        }
        for (i, &s) in self.v6.starts.iter().enumerate() {
            let end = self.v6.starts.get(i + 1).map_or(u128::MAX, |&n| n - 1);
            out.push((
                false,
                s,
                end,
                self.lists[self.v6.members[i] as usize].as_slice(),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctl_compiler::cidr::{parse_cidr, PrefixSet};

    fn set(s: &[&str]) -> IpSet {
        IpSet {
            name: "t".into(),
            prefixes: PrefixSet::from_cidrs(s.iter().map(|c| parse_cidr(c).unwrap().0)),
        }
    }

    #[test]
    fn nested_and_overlapping_sets() {
        let t = PrefixTable::new(&[
            set(&["10.0.0.0/8", "2001:db8::/32"]),
            set(&["10.1.0.0/16", "0.0.0.0/0"]),
            set(&["255.255.255.255/32"]),
        ]);
        let l = |s: &str| t.lookup(s.parse().unwrap()).to_vec();
        assert_eq!(l("10.1.2.3"), vec![0, 1]);
        assert_eq!(l("10.2.0.0"), vec![0, 1]);
        assert_eq!(l("11.0.0.0"), vec![1]);
        assert_eq!(l("255.255.255.255"), vec![1, 2]);
        assert_eq!(l("2001:db8::1"), vec![0]);
        assert_eq!(l("2001:db9::1"), Vec::<u32>::new());
        assert_eq!(l("::ffff:10.1.0.1"), vec![0, 1]);
    }

    /// Small tables (searched whole) and large ones (through the /16
    /// index) against the sets themselves.
    #[test]
    fn agrees_with_the_sets_on_random_addresses() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (per_set, indexed) in [(40, false), (1_000, true)] {
            let sets: Vec<IpSet> = (0..5)
                .map(|_| {
                    let cidrs: Vec<String> = (0..per_set)
                        .map(|_| {
                            format!(
                                "{}/{}",
                                std::net::Ipv4Addr::from(rnd() as u32),
                                8 + rnd() % 25
                            )
                        })
                        .collect();
                    set(&cidrs.iter().map(String::as_str).collect::<Vec<_>>())
                })
                .collect();
            let t = PrefixTable::new(&sets);
            assert_eq!(!t.v4_index.is_empty(), indexed);
            for _ in 0..20_000 {
                let a = rnd() as u32;
                let want: Vec<u32> = (0..5)
                    .filter(|&i| sets[i as usize].prefixes.contains_v4(a))
                    .collect();
                assert_eq!(t.lookup(std::net::Ipv4Addr::from(a).into()), &want[..]);
            }
        }
    }
}
