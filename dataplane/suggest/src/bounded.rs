//! Counting per key in bounded memory: a table of at most `capacity`
//! keys, exact until it is full, then Space-Saving (Metwally et al.
//! 2005) with evictions in batches.
//!
//! When a new key finds the table full, the half of the keys with the
//! smallest counts is dropped at once (amortised O(1) a request) and the
//! largest dropped count becomes the table's *floor*: a key counted from
//! then on starts at the floor, which is also its error bound, because
//! it may have been counted and dropped before. So a count never
//! underestimates, and overestimates by at most its `error`: every key
//! with more than `total / (capacity / 2)` occurrences is kept, and a
//! decision taken on `count - error` is one the exact count would take
//! too. The value beside a count (a share that looked legitimate, the
//! addresses seen) is exact from the time the key took its place.
//!
//! Keys are 64-bit fingerprints, of a hash seeded per run as the dry
//! run's top-k is (by chance, two of a million keys share one with a
//! probability under 10^-7).

use rctl_dataplane::matcher::FastHash;
use rctl_dataplane::prefetch::prefetch;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

/// A hasher for keys that are fingerprints already: it keeps them.
#[derive(Default)]
pub struct Fingerprint(u64);

impl Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Maps keyed by a fingerprint.
pub type ByFingerprint<V> = HashMap<u64, V, BuildHasherDefault<Fingerprint>>;

/// Makes fingerprints, with a seed drawn for this run (the dry run's
/// fast hash, [`FastHash`]: a word at a time, nothing kept between
/// runs).
#[derive(Clone)]
pub struct Fingerprints(FastHash);

impl Default for Fingerprints {
    fn default() -> Self {
        Fingerprints(FastHash::random())
    }
}

impl Fingerprints {
    /// A hasher to feed a key's parts to.
    pub fn hasher(&self) -> impl Hasher {
        self.0.build_hasher()
    }

    /// The fingerprint of `parts`, each delimited.
    pub fn of(&self, parts: &[&[u8]]) -> u64 {
        let mut h = self.hasher();
        for p in parts {
            h.write(p);
            h.write_u8(0xff);
        }
        h.finish()
    }
}

/// One key's count.
#[derive(Debug, Clone)]
pub struct Counted<V> {
    /// Occurrences (never fewer than the true number).
    pub count: u64,
    /// How much `count` may overestimate.
    pub error: u64,
    /// What is kept beside the count.
    pub value: V,
}

impl<V> Counted<V> {
    /// The fewest occurrences the key can have had.
    pub fn lower(&self) -> u64 {
        self.count - self.error
    }
}

/// What [`Bounded::prefetch`] asks for.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    /// The index slot where a key's probe starts.
    Index,
    /// The key's entry (its index slot asked for before).
    Entry,
}

/// No entry (an empty index slot).
const EMPTY: u32 = u32::MAX;

/// A bounded table of counts: an open-addressing index of fingerprints
/// (linear probing, at most half full) over the entries, kept in a
/// vector. Lookups can be announced ([`Bounded::prefetch`]) so that the
/// several tables one request is counted in are fetched from memory at
/// once rather than one cache miss after another.
pub struct Bounded<V> {
    /// (fingerprint, entry); `EMPTY`: free.
    index: Vec<(u64, u32)>,
    entries: Vec<(u64, Counted<V>)>,
    capacity: usize,
    floor: u64,
    total: u64,
}

impl<V> Bounded<V> {
    /// A table of at most `capacity` keys (at least 2).
    pub fn new(capacity: usize) -> Self {
        Bounded {
            index: Vec::new(),
            entries: Vec::new(),
            capacity: capacity.clamp(2, EMPTY as usize - 1),
            floor: 0,
            total: 0,
        }
    }

    /// Where the probe for `key` starts.
    fn home(&self, key: u64) -> usize {
        key as usize & (self.index.len() - 1)
    }

    /// The index slot holding `key`, or the free slot where it would go.
    fn probe(&self, key: u64) -> (usize, bool) {
        let mask = self.index.len() - 1;
        let mut i = self.home(key);
        loop {
            let (k, e) = self.index[i];
            if e == EMPTY {
                return (i, false);
            }
            if k == key {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// Builds the index of the entries anew, of `slots` slots.
    fn reindex(&mut self, slots: usize) {
        if slots == self.index.len() {
            self.index.fill((0, EMPTY));
        } else {
            let mut index = Vec::with_capacity(slots);
            huge_pages(&index);
            index.resize(slots, (0, EMPTY));
            self.index = index;
        }
        for (n, (k, _)) in self.entries.iter().enumerate() {
            let mask = slots - 1;
            let mut i = *k as usize & mask;
            while self.index[i].1 != EMPTY {
                i = (i + 1) & mask;
            }
            self.index[i] = (*k, n as u32);
        }
    }

    /// Asks for the memory of `key`'s lookup ahead of [`Bounded::add`]
    /// (a hint: it changes nothing): its index slot, or, once that has
    /// been asked for, its entry if held.
    pub fn prefetch(&self, key: u64, stage: Stage) {
        if self.index.is_empty() {
            return;
        }
        match stage {
            Stage::Index => prefetch(&self.index[self.home(key)]),
            Stage::Entry => {
                if let (i, true) = self.probe(key) {
                    prefetch(&self.entries[self.index[i].1 as usize]);
                }
            }
        }
    }

    /// Counts one occurrence of `key` and returns its entry, made by
    /// `new` if the key is not held; the caller then updates its value.
    pub fn add(&mut self, key: u64, new: impl FnOnce() -> V) -> &mut Counted<V> {
        self.total += 1;
        if !self.index.is_empty() {
            if let (i, true) = self.probe(key) {
                let e = &mut self.entries[self.index[i].1 as usize].1;
                e.count += 1;
                return e;
            }
        }
        if self.entries.len() >= self.capacity {
            self.evict();
        }
        if (self.entries.len() + 1) * 2 > self.index.len() {
            self.reindex((self.index.len() * 2).max(16));
        }
        let (i, _) = self.probe(key);
        let n = self.entries.len();
        if n == self.entries.capacity() {
            // Doubling, at least 16, never past the capacity (n is under
            // it here).
            self.entries.reserve(n.max(16).min(self.capacity - n));
            huge_pages(&self.entries);
        }
        self.index[i] = (key, n as u32);
        self.entries.push((
            key,
            Counted {
                count: self.floor + 1,
                error: self.floor,
                value: new(),
            },
        ));
        &mut self.entries[n].1
    }

    /// Drops the half of the keys with the smallest counts.
    fn evict(&mut self) {
        let mut counts: Vec<u64> = self.entries.iter().map(|(_, c)| c.count).collect();
        // The lower half's largest, so that at least the heavier half
        // (less ties) stays.
        let mid = (counts.len() - 1) / 2;
        let (_, &mut cut, _) = counts.select_nth_unstable(mid);
        // Keep those above the median; with many ties at it, drop them
        // all rather than keep more than the capacity.
        let mut dropped = 0;
        self.entries.retain(|(_, c)| {
            let keep = c.count > cut;
            if !keep {
                dropped = dropped.max(c.count);
            }
            keep
        });
        self.floor = self.floor.max(dropped);
        self.reindex(self.index.len());
    }

    /// The entry of `key`, if held.
    pub fn get(&self, key: u64) -> Option<&Counted<V>> {
        if self.index.is_empty() {
            return None;
        }
        match self.probe(key) {
            (i, true) => Some(&self.entries[self.index[i].1 as usize].1),
            _ => None,
        }
    }

    /// The entries held.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &Counted<V>)> {
        self.entries.iter().map(|(k, c)| (k, c))
    }

    /// Occurrences counted, all keys.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether every count is exact: no key was ever dropped.
    pub fn exact(&self) -> bool {
        self.floor == 0
    }

    /// The most a key not held can have had, and the error of a key
    /// taken after the first eviction.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Asks the kernel to back `v`'s buffer with huge pages where it is
/// large enough (a hint, `madvise(MADV_HUGEPAGE)`): a lookup in a table of
/// hundreds of megabytes then costs a cache miss, not also a page walk.
fn huge_pages<T>(v: &Vec<T>) {
    const PAGE: usize = 4096;
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < 4 << 20 {
        return;
    }
    let start = (v.as_ptr() as usize).next_multiple_of(PAGE);
    let end = (v.as_ptr() as usize + bytes) & !(PAGE - 1);
    // SAFETY: the range lies within the vector's own allocation, and
    // MADV_HUGEPAGE changes how it is backed, not its contents; a failure
    // (no transparent huge pages) leaves it as it was.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a skewed stream with many more keys than the capacity, every
    /// key is held or under the floor, and each count held brackets the
    /// true one; under the capacity, every count is exact.
    #[test]
    fn counts_bracket_the_truth_past_the_capacity_and_are_exact_under_it() {
        let mut truth: HashMap<u64, u64> = HashMap::new();
        let mut t = Bounded::new(64);
        let mut tiny = Bounded::new(3);
        let mut exact = Bounded::new(100_000);
        let mut x: u64 = 7;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // A few heavy keys, a long tail of light ones.
            let key = if i % 3 == 0 { x % 5 } else { 100 + x % 20_000 };
            *truth.entry(key).or_default() += 1;
            t.add(key, || ());
            exact.add(key, || ());
            tiny.add(key, || ());
        }
        assert!(!t.exact() && t.len() <= 64);
        for (k, n) in &truth {
            match t.get(*k) {
                Some(c) => assert!(c.lower() <= *n && *n <= c.count, "{k}: {n} vs {c:?}"),
                None => assert!(*n <= t.floor(), "{k}: {n} dropped over {}", t.floor()),
            }
        }
        for k in 0..5 {
            assert!(t.get(k).is_some(), "heavy key {k} dropped");
        }
        assert!(exact.exact());
        for (k, n) in &truth {
            let c = exact.get(*k).unwrap();
            assert_eq!((c.count, c.error), (*n, 0));
        }
        assert_eq!(t.total(), 200_000);
        // The index finds every entry held, after the evictions too.
        for table in [&t, &exact] {
            for (k, c) in table.iter() {
                let found = table.get(*k).unwrap();
                assert_eq!((found.count, found.error), (c.count, c.error));
            }
            table.prefetch(u64::MAX, Stage::Index);
            table.prefetch(u64::MAX, Stage::Entry);
            assert!(table.get(u64::MAX).is_none());
        }
        assert_eq!(exact.iter().count(), truth.len());
        assert!(tiny.len() <= 3 && tiny.total() == 200_000);
    }

    #[test]
    fn fingerprints_delimit_their_parts() {
        let f = Fingerprints::default();
        assert_ne!(f.of(&[b"ab", b"c"]), f.of(&[b"a", b"bc"]));
        assert_eq!(f.of(&[b"ab", b"c"]), f.of(&[b"ab", b"c"]));
    }
}
