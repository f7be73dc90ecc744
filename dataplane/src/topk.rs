//! Heavy hitters in bounded memory: the Space-Saving algorithm (Metwally,
//! Agrawal, El Abbadi 2005). With `capacity` counters, every item with more
//! than `total / capacity` occurrences is guaranteed to be kept, and each
//! reported count overestimates by at most the stated `error`. Every
//! request is counted: nothing is sampled.

use serde::Serialize;
use std::collections::HashMap;

/// A bounded top-k counter.
#[derive(Debug, Clone)]
pub struct TopK {
    capacity: usize,
    counts: HashMap<Vec<u8>, (u64, u64)>,
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
            counts: HashMap::new(),
            total: 0,
        }
    }

    /// Counts one occurrence.
    pub fn add(&mut self, key: &[u8]) {
        self.total += 1;
        if let Some(c) = self.counts.get_mut(key) {
            c.0 += 1;
            return;
        }
        if self.counts.len() < self.capacity {
            self.counts.insert(key.to_vec(), (1, 0));
            return;
        }
        // Replace the smallest counter; the newcomer inherits its count as
        // the error bound.
        let Some((k, &(min, _))) = self.counts.iter().min_by_key(|(_, c)| c.0) else {
            return;
        };
        let k = k.clone();
        self.counts.remove(&k);
        self.counts.insert(key.to_vec(), (min + 1, min));
    }

    /// Occurrences counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `n` largest, largest first (ties by key).
    pub fn top(&self, n: usize) -> Vec<Hitter> {
        let mut v: Vec<Hitter> = self
            .counts
            .iter()
            .map(|(k, &(c, e))| Hitter {
                key: String::from_utf8_lossy(k).into_owned(),
                count: c,
                error: e,
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
    }
}
