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
    slots: Vec<(u64, u64, u64, Vec<u8>)>,
    /// Min-heap on count, of slot indices.
    heap: Vec<u32>,
    /// Slot index -> position in `heap`.
    at: Vec<u32>,
    /// Fingerprint -> slot index.
    index: FastMap<u64, u32>,
    hasher: FastHash,
    total: u64,
}

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
        use std::hash::BuildHasher as _;
        self.total += 1;
        let fp = self.hasher.hash_one(key);
        if let Some(&slot) = self.index.get(&fp) {
            self.slots[slot as usize].0 += 1;
            self.sift_down(self.at[slot as usize] as usize);
            return;
        }
        if self.slots.len() < self.capacity {
            let slot = self.slots.len() as u32;
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
        let entry = &mut self.slots[slot];
        (entry.0, entry.1, entry.2) = (min + 1, min, fp);
        entry.3.clear();
        entry.3.extend_from_slice(key);
        self.index.insert(fp, slot as u32);
        self.sift_down(0);
    }

    /// Occurrences counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `n` largest, largest first (ties by key).
    pub fn top(&self, n: usize) -> Vec<Hitter> {
        let mut v: Vec<Hitter> = self
            .slots
            .iter()
            .map(|(c, e, _, k)| Hitter {
                key: String::from_utf8_lossy(k).into_owned(),
                count: *c,
                error: *e,
            })
            .collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        v.truncate(n);
        v
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
}
