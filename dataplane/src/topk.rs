//! Heavy hitters in bounded memory: the Space-Saving algorithm (Metwally,
//! Agrawal, El Abbadi 2005). With `capacity` counters, every item with more
//! than `total / capacity` occurrences is guaranteed to be kept, and each
//! reported count overestimates by at most the stated `error`. Every
//! request is counted: nothing is sampled.

use crate::matcher::{FastHash, FastMap};
use serde::Serialize;

/// A bounded top-k counter: an indexed min-heap over fixed slots, so that
/// counting an item, or replacing the smallest counter with a new item,
/// costs one hash of the item and O(log capacity) swaps of small integers.
/// Items are found by a 64-bit fingerprint (a per-process seeded hash): two
/// items would share a counter only on a fingerprint collision, about
/// capacity² / 2⁶⁵ likely.
#[derive(Debug, Clone)]
pub struct TopK {
    capacity: usize,
    /// Slot contents: (count, error, fingerprint, key).
    slots: Vec<Slot>,
    /// Min-heap on count, of slot indices.
    heap: Vec<u32>,
    /// Slot index -> position in `heap`.
    at: Vec<u32>,
    /// Fingerprint -> slot index.
    index: FastMap<u64, u32>,
    /// Per slot: the part of its count added as tagged
    /// ([`TopK::add_hashed_tagged`]), since the slot took its key.
    tags: Vec<u64>,
    hasher: FastHash,
    total: u64,
}

/// A counter's slot: (count, error, fingerprint, key).
type Slot = (u64, u64, u64, Vec<u8>);

/// One reported item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hitter {
    /// The item (lossy UTF-8).
    pub key: String,
    /// Its count (exact when `error` is 0).
    pub count: u64,
    /// How much `count` may overestimate.
    pub error: u64,
}

impl TopK {
    /// A counter keeping `capacity` candidates.
    pub fn new(capacity: usize) -> Self {
        TopK {
            capacity: capacity.max(1),
            slots: Vec::new(),
            heap: Vec::new(),
            at: Vec::new(),
            index: FastMap::default(),
            tags: Vec::new(),
            hasher: FastHash::random(),
            total: 0,
        }
    }

    fn count_at(&self, heap_pos: usize) -> u64 {
        self.slots[self.heap[heap_pos] as usize].0
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.at[self.heap[a] as usize] = a as u32;
        self.at[self.heap[b] as usize] = b as u32;
    }

    /// Restores the heap below `i` after its count grew.
    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < self.heap.len() && self.count_at(l) < self.count_at(m) {
                m = l;
            }
            if r < self.heap.len() && self.count_at(r) < self.count_at(m) {
                m = r;
            }
            if m == i {
                return;
            }
            self.swap(i, m);
            i = m;
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if self.count_at(p) <= self.count_at(i) {
                return;
            }
            self.swap(i, p);
            i = p;
        }
    }

    /// Counts one occurrence.
    pub fn add(&mut self, key: &[u8]) {
        self.add_hashed(self.fingerprint(key), key);
    }

    /// This counter's fingerprint of `key`: what [`TopK::add_hashed`]
    /// takes. Counters made by [`TopK::sharing`] agree on it, so a key
    /// counted in several of them is hashed once.
    pub fn fingerprint(&self, key: &[u8]) -> u64 {
        use std::hash::BuildHasher as _;
        self.hasher.hash_one(key)
    }

    /// A counter with `capacity` candidates whose fingerprints are
    /// `self`'s.
    pub fn sharing(&self, capacity: usize) -> Self {
        TopK {
            hasher: self.hasher,
            ..TopK::new(capacity)
        }
    }

    /// Counts one occurrence of `key`, whose [`TopK::fingerprint`] is `fp`.
    pub fn add_hashed(&mut self, fp: u64, key: &[u8]) {
        self.add_hashed_tagged(fp, key, false);
    }

    /// Like [`TopK::add_hashed`]; a `tagged` occurrence is also counted in
    /// the key's tagged part (a throttle's limited requests among all it
    /// counted), which [`TopK::top_tagged`] reports. The tagged part is
    /// exact from the time the key took its counter: it never counts what
    /// the key's error bound may hold.
    pub fn add_hashed_tagged(&mut self, fp: u64, key: &[u8], tagged: bool) {
        self.total += 1;
        let tag = u64::from(tagged);
        if let Some(&slot) = self.index.get(&fp) {
            self.slots[slot as usize].0 += 1;
            self.tags[slot as usize] += tag;
            self.sift_down(self.at[slot as usize] as usize);
            return;
        }
        if self.slots.len() < self.capacity {
            let slot = self.slots.len() as u32;
            self.tags.push(tag);
            self.slots.push((1, 0, fp, key.to_vec()));
            self.heap.push(slot);
            self.at.push((self.heap.len() - 1) as u32);
            self.index.insert(fp, slot);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        // Replace the smallest counter; the newcomer inherits its count as
        // the error bound. The slot's key buffer is reused.
        let slot = self.heap[0] as usize;
        let min = self.slots[slot].0;
        self.index.remove(&self.slots[slot].2);
        self.tags[slot] = tag;
        let entry = &mut self.slots[slot];
        (entry.0, entry.1, entry.2) = (min + 1, min, fp);
        entry.3.clear();
        entry.3.extend_from_slice(key);
        self.index.insert(fp, slot as u32);
        self.sift_down(0);
    }

    /// Adds `other`'s counts to these (the merge of mergeable summaries,
    /// Agarwal et al. 2012): a key that one full side lacks may have been
    /// counted there up to that side's smallest counter, so it gets that
    /// much more count and error. The largest `capacity` are kept.
    pub fn merge(&mut self, other: &TopK) {
        let floor = |t: &TopK| {
            if t.slots.len() >= t.capacity {
                t.heap.first().map_or(0, |&s| t.slots[s as usize].0)
            } else {
                0
            }
        };
        let (min_a, min_b) = (floor(self), floor(other));
        // key -> (count, error, held by self, held by other, tagged)
        type Merged = (u64, u64, bool, bool, u64);
        let tags = std::mem::take(&mut self.tags);
        let mut all: std::collections::HashMap<Vec<u8>, Merged> = self
            .slots
            .drain(..)
            .zip(tags)
            .map(|((c, e, _, k), t)| (k, (c, e, true, false, t)))
            .collect();
        for ((c, e, _, k), t) in other.slots.iter().zip(&other.tags) {
            let v = all.entry(k.clone()).or_insert((0, 0, false, false, 0));
            (v.0, v.1, v.3, v.4) = (v.0 + c, v.1 + e, true, v.4 + t);
        }
        let mut v: Vec<(Vec<u8>, (u64, u64), u64)> = all
            .into_iter()
            .map(|(k, (c, e, a, b, t))| {
                let missing = if a { 0 } else { min_a } + if b { 0 } else { min_b };
                (k, (c + missing, e + missing), t)
            })
            .collect();
        v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
        v.truncate(self.capacity);
        let total = self.total + other.total;
        *self = TopK {
            hasher: self.hasher,
            ..TopK::new(self.capacity)
        };
        for (k, (c, e), t) in v {
            let fp = self.fingerprint(&k);
            let slot = self.slots.len() as u32;
            self.tags.push(t);
            self.slots.push((c, e, fp, k));
            self.heap.push(slot);
            self.at.push(slot);
            self.index.insert(fp, slot);
            self.sift_up(self.heap.len() - 1);
        }
        self.total = total;
    }

    /// Occurrences counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `n` largest, largest first (ties by key), keys as lossy UTF-8.
    pub fn top(&self, n: usize) -> Vec<Hitter> {
        self.top_with(n, |k| String::from_utf8_lossy(k).into_owned())
    }

    /// The `n` largest, largest first (ties by the key's bytes), with keys
    /// shown by `show`.
    pub fn top_with(&self, n: usize, show: impl Fn(&[u8]) -> String) -> Vec<Hitter> {
        self.top_tagged(n, show)
            .into_iter()
            .map(|(h, _)| h)
            .collect()
    }

    /// Like [`TopK::top_with`], each with its tagged part (see
    /// [`TopK::add_hashed_tagged`]).
    pub fn top_tagged(&self, n: usize, show: impl Fn(&[u8]) -> String) -> Vec<(Hitter, u64)> {
        let mut v: Vec<(&Slot, u64)> = self.slots.iter().zip(self.tags.iter().copied()).collect();
        v.sort_by(|(a, _), (b, _)| b.0.cmp(&a.0).then_with(|| a.3.cmp(&b.3)));
        v.into_iter()
            .take(n)
            .map(|((c, e, _, k), t)| {
                (
                    Hitter {
                        key: show(k),
                        count: *c,
                        error: *e,
                    },
                    t,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_when_it_fits_and_keeps_heavy_hitters_when_not() {
        let mut t = TopK::new(4);
        for (k, n) in [("a", 5), ("b", 3), ("c", 1)] {
            for _ in 0..n {
                t.add(k.as_bytes());
            }
        }
        assert_eq!(
            t.top(2),
            vec![
                Hitter {
                    key: "a".into(),
                    count: 5,
                    error: 0
                },
                Hitter {
                    key: "b".into(),
                    count: 3,
                    error: 0
                }
            ]
        );
        let mut t = TopK::new(10);
        for i in 0..10_000u32 {
            t.add(b"scraper");
            t.add(&i.to_le_bytes());
        }
        let top = t.top(1);
        assert_eq!(top[0].key, "scraper");
        assert!(top[0].count - top[0].error <= 10_000 && top[0].count >= 10_000);
        assert_eq!(t.total(), 20_000);
    }

    #[test]
    fn merged_summaries_keep_bounds() {
        // Two halves of one stream, merged, against exact counts.
        let mut a = TopK::new(20);
        let mut b = TopK::new(20);
        let mut exact = std::collections::HashMap::new();
        for i in 0..20_000u32 {
            let key = if i % 3 == 0 { i % 7 } else { 100 + i % 997 };
            *exact.entry(key).or_insert(0u64) += 1;
            let t = if i % 2 == 0 { &mut a } else { &mut b };
            t.add(&key.to_le_bytes());
        }
        a.merge(&b);
        assert_eq!(a.total(), 20_000);
        let top = a.top(7);
        for h in &top {
            let k = u32::from_le_bytes(h.key.as_bytes().try_into().unwrap());
            let truth = exact[&k];
            assert!(
                h.count >= truth && h.count - h.error <= truth,
                "{h:?} {truth}"
            );
            assert!(k < 7, "{k} is not a heavy key");
        }
        assert_eq!(top.len(), 7);
    }

    #[test]
    fn keeps_every_item_above_the_guarantee() {
        // 10 heavy items, 5,000 each, interleaved with 100,000 distinct
        // items: N = 150,000, N / capacity = 1,500 < 5,000, so all heavy
        // items must be kept with bounds that hold their true count.
        let mut t = TopK::new(100);
        for r in 0..100_000u32 {
            t.add(format!("noise{r}").as_bytes());
            if r % 2 == 0 {
                t.add(format!("heavy{}", r / 2 % 10).as_bytes());
            }
        }
        let top = t.top(10);
        let mut keys: Vec<String> = top.iter().map(|h| h.key.clone()).collect();
        keys.sort();
        assert_eq!(
            keys,
            (0..10).map(|i| format!("heavy{i}")).collect::<Vec<_>>()
        );
        for h in &top {
            assert!(h.count >= 5_000 && h.count - h.error <= 5_000, "{h:?}");
        }
    }

    #[test]
    fn tagged_parts_are_exact_while_a_key_holds_its_counter() {
        let mut t = TopK::new(2);
        let add = |t: &mut TopK, k: &[u8], tagged: bool| {
            let fp = t.fingerprint(k);
            t.add_hashed_tagged(fp, k, tagged);
        };
        for i in 0..10 {
            add(&mut t, b"heavy", i % 3 == 0);
        }
        add(&mut t, b"light", true);
        // "other" evicts "light" (count 1): it inherits the count as its
        // error, and none of light's tagged part.
        add(&mut t, b"other", false);
        let top = t.top_tagged(2, |k| String::from_utf8_lossy(k).into_owned());
        assert_eq!(top[0].0.key, "heavy");
        assert_eq!((top[0].0.count, top[0].1), (10, 4));
        assert_eq!(top[1].0.key, "other");
        assert_eq!((top[1].0.count, top[1].0.error, top[1].1), (2, 1, 0));
        let mut u = t.sharing(2);
        add(&mut u, b"heavy", true);
        t.merge(&u);
        assert_eq!(t.top_tagged(1, |_| String::new())[0].1, 5);
    }
}
