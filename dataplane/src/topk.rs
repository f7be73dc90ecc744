//! Heavy hitters in bounded memory: the Space-Saving algorithm (Metwally,
//! Agrawal, El Abbadi 2005), with the admission filter of Filtered
//! Space-Saving (Homem, Carvalho 2010). With `capacity` counters, every
//! item with more than `total / capacity` occurrences is guaranteed to be
//! kept, and each reported count overestimates by at most the stated
//! `error`. Every request is counted: nothing is sampled.
//!
//! The filter matters on traffic where most items are seen once or twice
//! (clients, titles, User-Agents with ids in them): plain Space-Saving
//! gives each of them the smallest counter in turn, a removal and an
//! insertion with their cache misses, to be evicted again by the next.
//! Once the counters are full, an item not held is counted in one of a
//! few thousand hashed cells instead, and takes a counter only when its
//! cell's count reaches the smallest counter's. A cell bounds the count
//! of every item not held that hashes to it, so the bounds stay those of
//! Space-Saving, and an item that takes a counter gets its cell's count
//! as its error, usually far below the smallest counter.

use crate::matcher::FastHash;
use crate::prefetch::prefetch;
use serde::Serialize;

/// A bounded top-k counter in Space-Saving's Stream-Summary layout:
/// counters grouped in buckets of equal count, the buckets in a list in
/// ascending count, so that counting an item moves its counter to the
/// next bucket and replacing the smallest counter takes the first
/// bucket's first counter: O(1) either way, after one hash of the item.
/// Items are found by a 64-bit fingerprint (a per-process seeded hash): two
/// items would share a counter only on a fingerprint collision, about
/// capacity² / 2⁶⁵ likely.
#[derive(Debug, Clone)]
pub struct TopK {
    capacity: usize,
    /// Slot contents: (count, error, fingerprint, key).
    slots: Vec<Slot>,
    /// Per slot: its bucket, and its neighbours in that bucket's list.
    links: Vec<Link>,
    /// The buckets (some free, listed from `free`).
    buckets: Vec<Bucket>,
    /// The bucket of the smallest count (`NIL` while empty).
    min: u32,
    /// A free bucket, the head of the free list (`NIL`: none).
    free: u32,
    /// Fingerprint -> slot index.
    index: FpIndex,
    /// Per slot: the part of its count added as tagged
    /// ([`TopK::add_hashed_tagged`]), since the slot took its key.
    tags: Vec<u64>,
    hasher: FastHash,
    total: u64,
    /// The admission filter's cells, made when the counters are full:
    /// each bounds the occurrences of the items not held that hash to it.
    cells: Vec<u64>,
}

/// Cells of the admission filter per counter (a power of two).
const CELLS_PER_COUNTER: usize = 8;

/// A counter's slot: (count, error, fingerprint, key).
type Slot = (u64, u64, u64, Vec<u8>);

/// No slot or bucket.
const NIL: u32 = u32::MAX;

/// A slot's place: its bucket and its neighbours there.
#[derive(Debug, Clone, Copy)]
struct Link {
    bucket: u32,
    prev: u32,
    next: u32,
}

/// The counters of one count, and the buckets of the next smaller and
/// larger counts.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    count: u64,
    first: u32,
    prev: u32,
    next: u32,
}

/// Fingerprint -> slot, by linear probing in a table kept at most a
/// quarter full, deletions shifting later entries back (no tombstones:
/// the replacement of a counter on nearly every new item, a removal and
/// an insertion, leaves no trail that would lengthen later probes, which
/// a general-purpose map's tombstones do until it rehashes).
#[derive(Debug, Clone, Default)]
struct FpIndex {
    /// (fingerprint, slot); `slot == NIL`: empty.
    table: Vec<(u64, u32)>,
    len: usize,
}

impl FpIndex {
    fn mask(&self) -> usize {
        self.table.len() - 1
    }

    fn get(&self, fp: u64) -> Option<u32> {
        if self.table.is_empty() {
            return None;
        }
        let mut i = fp as usize & self.mask();
        loop {
            let (f, s) = self.table[i];
            if s == NIL {
                return None;
            }
            if f == fp {
                return Some(s);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Inserts a fingerprint not in the table.
    fn insert(&mut self, fp: u64, slot: u32) {
        if (self.len + 1) * 4 > self.table.len() {
            let old = std::mem::take(&mut self.table);
            self.table = vec![(0, NIL); (old.len() * 2).max(16)];
            self.len = 0;
            for (f, s) in old {
                if s != NIL {
                    self.insert(f, s);
                }
            }
        }
        let mut i = fp as usize & self.mask();
        while self.table[i].1 != NIL {
            i = (i + 1) & self.mask();
        }
        self.table[i] = (fp, slot);
        self.len += 1;
    }

    fn remove(&mut self, fp: u64) {
        if self.table.is_empty() {
            return;
        }
        let mask = self.mask();
        let mut i = fp as usize & mask;
        loop {
            let (f, s) = self.table[i];
            if s == NIL {
                return;
            }
            if f == fp {
                break;
            }
            i = (i + 1) & mask;
        }
        // Backward shift: move up each later entry of the run that may
        // take the hole (its home is not between the hole and it).
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let (f, s) = self.table[j];
            if s == NIL {
                break;
            }
            let home = f as usize & mask;
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.table[hole] = (f, s);
                hole = j;
            }
        }
        self.table[hole] = (0, NIL);
        self.len -= 1;
    }
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
            links: Vec::new(),
            buckets: Vec::new(),
            min: NIL,
            free: NIL,
            index: FpIndex::default(),
            tags: Vec::new(),
            hasher: FastHash::random(),
            total: 0,
            cells: Vec::new(),
        }
    }

    /// A bucket of `count` between `prev` and `next` (either may be NIL).
    fn new_bucket(&mut self, count: u64, prev: u32, next: u32) -> u32 {
        let b = Bucket {
            count,
            first: NIL,
            prev,
            next,
        };
        let id = if self.free != NIL {
            let id = self.free;
            self.free = self.buckets[id as usize].next;
            self.buckets[id as usize] = b;
            id
        } else {
            self.buckets.push(b);
            (self.buckets.len() - 1) as u32
        };
        match prev {
            NIL => self.min = id,
            p => self.buckets[p as usize].next = id,
        }
        if next != NIL {
            self.buckets[next as usize].prev = id;
        }
        id
    }

    /// Puts `slot` first in bucket `b`.
    fn attach(&mut self, slot: u32, b: u32) {
        let first = self.buckets[b as usize].first;
        self.links[slot as usize] = Link {
            bucket: b,
            prev: NIL,
            next: first,
        };
        if first != NIL {
            self.links[first as usize].prev = slot;
        }
        self.buckets[b as usize].first = slot;
    }

    /// Takes `slot` out of its bucket's list.
    fn detach(&mut self, slot: u32) {
        let l = self.links[slot as usize];
        match l.prev {
            NIL => self.buckets[l.bucket as usize].first = l.next,
            p => self.links[p as usize].next = l.next,
        }
        if l.next != NIL {
            self.links[l.next as usize].prev = l.prev;
        }
    }

    /// Takes the empty bucket `b` out of the list, onto the free list.
    fn release(&mut self, b: u32) {
        let Bucket { prev, next, .. } = self.buckets[b as usize];
        match prev {
            NIL => self.min = next,
            p => self.buckets[p as usize].next = next,
        }
        if next != NIL {
            self.buckets[next as usize].prev = prev;
        }
        self.buckets[b as usize].next = self.free;
        self.free = b;
    }

    /// Adds one to `slot`'s count (its slot's count field is the caller's
    /// to update): moves it to the bucket of the next count.
    fn bump(&mut self, slot: u32) {
        let b = self.links[slot as usize].bucket;
        let Bucket { count, next, .. } = self.buckets[b as usize];
        self.detach(slot);
        let alone = self.buckets[b as usize].first == NIL;
        if next != NIL && self.buckets[next as usize].count == count + 1 {
            self.attach(slot, next);
            if alone {
                self.release(b);
            }
        } else if alone {
            // Its own bucket becomes the next count's, in place.
            self.buckets[b as usize].count = count + 1;
            self.attach(slot, b);
        } else {
            let nb = self.new_bucket(count + 1, b, next);
            self.attach(slot, nb);
        }
    }

    /// Appends a new slot (not yet indexed) with `count`, which is at
    /// least every count held (or 1, for a counter that is not full).
    fn push_slot(&mut self, entry: Slot, tag: u64) -> u32 {
        let slot = self.slots.len() as u32;
        let count = entry.0;
        self.slots.push(entry);
        self.tags.push(tag);
        self.links.push(Link {
            bucket: NIL,
            prev: NIL,
            next: NIL,
        });
        let b = if self.min != NIL && self.buckets[self.min as usize].count == count {
            self.min
        } else if self.min == NIL || self.buckets[self.min as usize].count > count {
            self.new_bucket(count, NIL, self.min)
        } else {
            // Counts from a merge come in ascending order: the bucket of
            // the slot pushed before (the last one) is the one to join or
            // follow.
            let mut last = self.links[slot as usize - 1].bucket;
            while self.buckets[last as usize].next != NIL {
                last = self.buckets[last as usize].next;
            }
            if self.buckets[last as usize].count == count {
                last
            } else {
                self.new_bucket(count, last, NIL)
            }
        };
        self.attach(slot, b);
        slot
    }

    /// The smallest count held.
    fn min_count(&self) -> u64 {
        self.buckets.get(self.min as usize).map_or(0, |b| b.count)
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

    /// Asks for the memory where counting `fp` starts (its index slot,
    /// and its filter cell once the counters are full), ahead of
    /// [`TopK::add_hashed`]: asked for before the work that precedes the
    /// count, their cache misses overlap that work (a hint: it changes
    /// nothing).
    pub fn prefetch(&self, fp: u64) {
        if !self.index.table.is_empty() {
            prefetch(&self.index.table[fp as usize & self.index.mask()]);
        }
        if !self.cells.is_empty() {
            prefetch(&self.cells[(fp >> 32) as usize & (self.cells.len() - 1)]);
        }
    }

    /// The second step of [`TopK::prefetch`], once the index slot has
    /// arrived: asks for the counter `fp` holds, if any, and its place in
    /// the buckets. Called for several counters before counting in any of
    /// them, their cache misses overlap instead of coming one after the
    /// other (a hint: it changes nothing).
    pub fn prefetch_counter(&self, fp: u64) {
        if let Some(slot) = self.index.get(fp) {
            prefetch(&self.slots[slot as usize]);
            prefetch(&self.links[slot as usize]);
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
        if let Some(slot) = self.index.get(fp) {
            self.slots[slot as usize].0 += 1;
            // Untagged counts (every one, in most tables) leave the tags'
            // memory alone: one cache miss fewer per count.
            if tagged {
                self.tags[slot as usize] += 1;
            }
            self.bump(slot);
            return;
        }
        if self.slots.len() < self.capacity {
            let slot = self.push_slot((1, 0, fp, key.to_vec()), tag);
            self.index.insert(fp, slot);
            return;
        }
        // Full: the item is counted in its cell, and takes a smallest
        // counter only once the cell's count reaches that counter's.
        if self.cells.is_empty() {
            self.cells = vec![0; self.capacity.next_power_of_two() * CELLS_PER_COUNTER];
        }
        let cmask = self.cells.len() - 1;
        let cell = (fp >> 32) as usize & cmask;
        let Bucket {
            count: min,
            first: slot,
            ..
        } = self.buckets[self.min as usize];
        let seen = self.cells[cell];
        if seen + 1 < min {
            self.cells[cell] = seen + 1;
            return;
        }
        // The newcomer takes the smallest counter, with its cell's count
        // as the error bound; the evicted item's count goes to its own
        // cell, which then still bounds every item there not held. The
        // slot's key buffer is reused.
        let out = self.slots[slot as usize].2;
        let out_cell = &mut self.cells[(out >> 32) as usize & cmask];
        *out_cell = (*out_cell).max(min);
        self.index.remove(out);
        self.tags[slot as usize] = tag;
        let entry = &mut self.slots[slot as usize];
        (entry.0, entry.1, entry.2) = (seen + 1, seen, fp);
        entry.3.clear();
        entry.3.extend_from_slice(key);
        self.index.insert(fp, slot);
        // A cell never exceeds the smallest count (it grows only below
        // it, or to it on an eviction, and the smallest count never
        // falls), so the newcomer's count is that count or one more.
        debug_assert!(seen <= min);
        if seen == min {
            self.bump(slot);
        }
    }

    /// Adds `other`'s counts to these (the merge of mergeable summaries,
    /// Agarwal et al. 2012): a key that one full side lacks may have been
    /// counted there up to that side's smallest counter, so it gets that
    /// much more count and error. The largest `capacity` are kept.
    pub fn merge(&mut self, other: &TopK) {
        let floor = |t: &TopK| {
            if t.slots.len() >= t.capacity {
                t.min_count()
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
        // Smallest first: each joins or follows the last bucket.
        for (k, (c, e), t) in v.into_iter().rev() {
            let fp = self.fingerprint(&k);
            let slot = self.push_slot((c, e, fp, k), t);
            self.index.insert(fp, slot);
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

    /// Checks the Stream-Summary's lists against its slots: every slot in
    /// the bucket of its count, buckets in ascending count, none empty,
    /// and (unless merged, which adds bounds and cuts) the counts summing
    /// to the total (Space-Saving's invariant).
    fn check_structure(t: &TopK, merged: bool) {
        let (mut b, mut last, mut seen, mut sum) = (t.min, 0, 0, 0);
        while b != NIL {
            let bucket = t.buckets[b as usize];
            assert!(bucket.count > last, "buckets ascend");
            assert_ne!(bucket.first, NIL, "no empty bucket is listed");
            last = bucket.count;
            let mut s = bucket.first;
            while s != NIL {
                assert_eq!(t.slots[s as usize].0, bucket.count);
                assert_eq!(t.links[s as usize].bucket, b);
                seen += 1;
                sum += bucket.count;
                s = t.links[s as usize].next;
            }
            b = bucket.next;
        }
        assert_eq!(seen, t.slots.len());
        // Until the filter is made every occurrence is in a counter; then
        // some are in cells, each of which stays at or below the smallest
        // count.
        if !merged && t.cells.is_empty() {
            assert_eq!(sum, t.total());
        } else if !merged {
            assert!(sum <= t.total());
        }
        assert!(t.cells.iter().all(|&c| c <= t.min_count()));
    }

    /// Against the plain computation (a hash map of exact counts), on a
    /// skewed stream of many distinct keys, with eviction: while it holds
    /// every key the counts are exact; once it cannot, every reported
    /// count bounds the true one from above, by at most its error, and
    /// every key above total / capacity is kept.
    #[test]
    fn stream_summary_agrees_with_exact_counts() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for capacity in [1, 2, 7, 64, 500] {
            let mut t = TopK::new(capacity);
            let mut exact: std::collections::HashMap<Vec<u8>, u64> = Default::default();
            for i in 0..60_000u64 {
                // Heavy keys, a Zipf-like middle and a long tail.
                let r = next();
                let k = match r % 10 {
                    0..=2 => r >> 40 & 7,
                    3..=6 => 8 + (r >> 20) % ((r >> 44) % 2_000 + 1),
                    _ => 100_000 + (r >> 8) % 1_000_000,
                };
                let key = k.to_le_bytes().to_vec();
                t.add(&key);
                *exact.entry(key).or_default() += 1;
                if exact.len() <= capacity {
                    for h in t.top(capacity) {
                        assert_eq!(h.error, 0);
                    }
                    assert_eq!(t.slots.len(), exact.len());
                }
                if i % 5_000 == 0 {
                    check_structure(&t, false);
                }
            }
            check_structure(&t, false);
            let held: Vec<(Vec<u8>, u64, u64)> = t
                .slots
                .iter()
                .map(|(c, e, _, k)| (k.clone(), *c, *e))
                .collect();
            assert_eq!(held.len(), capacity.min(exact.len()));
            for (k, c, e) in &held {
                let truth = exact[k];
                assert!(*c >= truth && c - e <= truth, "{k:?}: {c} - {e} vs {truth}");
            }
            let floor = t.total() / capacity as u64;
            for (k, n) in &exact {
                if *n > floor {
                    assert!(held.iter().any(|(h, _, _)| h == k), "{k:?} ({n}) kept");
                }
            }
            // A merge rebuilds the lists from counts in ascending order.
            let mut u = t.sharing(capacity);
            for i in 0..1_000u64 {
                u.add(&(i % 13).to_le_bytes());
            }
            t.merge(&u);
            check_structure(&t, true);
            let mut v = t.sharing(capacity);
            v.merge(&t);
            check_structure(&v, true);
        }
    }

    /// The probing index against a hash map, under the churn of a full
    /// counter (a removal and an insertion per new item), with
    /// fingerprints that share their low bits (one probe run) and ones
    /// that wrap around the table's end.
    #[test]
    fn fingerprint_index_agrees_with_a_map() {
        let mut ix = FpIndex::default();
        let mut map: std::collections::HashMap<u64, u32> = Default::default();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut live: Vec<u64> = Vec::new();
        for i in 0..40_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let fp = match rng % 4 {
                0 => (rng >> 8) << 12,
                1 => ((rng >> 8) << 12) | 0xfff,
                _ => rng,
            };
            if map.contains_key(&fp) {
                continue;
            }
            if live.len() >= 300 {
                let out = live.swap_remove((rng >> 32) as usize % live.len());
                ix.remove(out);
                map.remove(&out);
                ix.remove(out);
            }
            ix.insert(fp, i);
            map.insert(fp, i);
            live.push(fp);
            if i % 97 == 0 {
                for (f, s) in &map {
                    assert_eq!(ix.get(*f), Some(*s));
                }
                assert_eq!(ix.get(fp ^ 0x5555), map.get(&(fp ^ 0x5555)).copied());
                assert_eq!(ix.len, map.len());
            }
        }
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

    /// Items seen once, once the counters are full, are counted in the
    /// filter's cells and leave the counters of repeated items alone
    /// (plain Space-Saving would give each the smallest counter in turn,
    /// with that counter's count as a large error).
    #[test]
    fn items_seen_once_do_not_evict_repeated_ones() {
        let mut t = TopK::new(2);
        for _ in 0..100 {
            t.add(b"heavy");
        }
        for _ in 0..50 {
            t.add(b"mid");
        }
        // 100 items in 16 cells: none reaches 50 (the seeded hash would
        // have to put half of them in one cell).
        for i in 0..100u32 {
            t.add(&i.to_le_bytes());
        }
        let top = t.top(2);
        assert_eq!(
            (top[0].key.as_str(), top[0].count, top[0].error),
            ("heavy", 100, 0)
        );
        assert_eq!(
            (top[1].key.as_str(), top[1].count, top[1].error),
            ("mid", 50, 0)
        );
        assert_eq!(t.total(), 250);
        check_structure(&t, false);
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
        add(&mut t, b"light", true);
        // "other" is counted in its cell (one, below light's two); its
        // second occurrence brings the cell to two, and it evicts "light":
        // it takes the cell's count, and none of light's tagged part.
        add(&mut t, b"other", false);
        assert_eq!(t.top(2)[1].key, "light");
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
