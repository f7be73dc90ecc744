use super::*;
use crate::limiter::Limiter;

/// Zeroed memory for a zone of `n` slots, kept for the test's life.
fn memory(n: usize) -> (&'static ZoneHeader, &'static [ZoneSlot]) {
    let header = Box::leak(Box::default());
    let slots: Vec<ZoneSlot> = (0..n).map(|_| ZoneSlot::default()).collect();
    (header, Box::leak(slots.into_boxed_slice()))
}

fn zone(n: usize) -> Zone {
    let (h, s) = memory(n);
    Zone::attach(h, s).unwrap()
}

const MS: u64 = 1_000_000;

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn decides_every_hit_as_the_in_process_limiter_does() {
    // rate, period, burst, ban
    for (limit, period, burst, ban) in
        [(10, 60_000, 10, 600_000), (5, 1_000, 1, 0), (3, 100, 4, 50)]
    {
        let g = Gcra::new(limit, period, burst, ban);
        let z = zone(4096);
        let l = Limiter::new(limit, period, burst, ban, 1 << 16);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut now = 1_000 * MS;
        for i in 0..20_000 {
            now += rng.next() % (30 * MS);
            let key = format!("key-{}", rng.next() % 7);
            let a = z.hit(42, key.as_bytes(), &g, now);
            let b = l.hit(key.as_bytes(), now);
            assert_eq!(
                a, b,
                "hit {i} of {key} at {now} ({limit}/{period}ms burst {burst} ban {ban})"
            );
        }
    }
}

#[test]
fn one_keys_hits_from_many_threads_get_exactly_the_burst() {
    let z = zone(1024);
    let g = Gcra::new(10, 60_000, 10, 600_000);
    let now = 5_000 * MS;
    let allowed: u32 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(move || {
                    (0..2_000)
                        .filter(|_| z.hit(7, b"203.0.113.9", &g, now) == Outcome::Allowed)
                        .count() as u32
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(allowed, 10);
    assert_eq!(z.stats(now).banned, 1);
}

#[test]
fn a_second_view_of_the_same_memory_shares_buckets_and_key() {
    let (h, s) = memory(256);
    let a = Zone::attach(h, s).unwrap();
    let g = Gcra::new(1, 60_000, 2, 0);
    assert_eq!(a.hit(1, b"k", &g, MS), Outcome::Allowed);
    // A reloaded configuration attaches again: nothing is reset.
    let b = Zone::attach(h, s).unwrap();
    assert_eq!(b.hit(1, b"k", &g, MS), Outcome::Allowed);
    assert!(matches!(b.hit(1, b"k", &g, MS), Outcome::Limited { .. }));
    // Another limiter identity (a renamed rule, other keys): its own
    // bucket.
    assert_eq!(b.hit(2, b"k", &g, MS), Outcome::Allowed);
}

#[test]
fn memory_that_is_no_zone_is_refused() {
    let (h, s) = memory(PROBE - 1);
    assert_eq!(
        Zone::attach(h, s).unwrap_err(),
        ZoneError::TooSmall(PROBE - 1)
    );
    let (h, s) = memory(64);
    Zone::attach(h, s).unwrap();
    let (_, other) = memory(65);
    assert!(matches!(
        Zone::attach(h, other).unwrap_err(),
        ZoneError::Mismatch {
            header: 64,
            slots: 65
        }
    ));
}

#[test]
fn a_full_zone_never_lifts_a_ban_and_counts_what_it_could_not_hold() {
    let z = zone(PROBE);
    let g = Gcra::new(1, 60_000, 1, 600_000);
    let now = 10 * MS;
    // Ban PROBE keys: every slot is banned.
    for i in 0..PROBE {
        let k = format!("banned-{i}");
        assert_eq!(z.hit(1, k.as_bytes(), &g, now), Outcome::Allowed);
        assert!(matches!(
            z.hit(1, k.as_bytes(), &g, now),
            Outcome::Limited { .. }
        ));
    }
    assert_eq!(z.stats(now).banned, PROBE as u64);
    // New keys are served, uncounted, and counted as such.
    for i in 0..100 {
        let k = format!("new-{i}");
        assert_eq!(z.hit(1, k.as_bytes(), &g, now), Outcome::Allowed);
    }
    let st = z.stats(now);
    assert_eq!((st.banned, st.full), (PROBE as u64, 100));
    // The bans still hold.
    for i in 0..PROBE {
        let k = format!("banned-{i}");
        assert!(matches!(
            z.hit(1, k.as_bytes(), &g, now + MS),
            Outcome::Limited { .. }
        ));
    }
}

#[test]
fn refilled_buckets_make_room_first_then_the_closest_to_full() {
    let z = zone(PROBE);
    let g = Gcra::new(1, 1_000, 5, 0);
    let mut now = 10 * MS;
    for i in 0..PROBE {
        z.hit(1, format!("old-{i}").as_bytes(), &g, now);
    }
    // A second later every bucket has refilled: new keys take their
    // slots without evicting anything that mattered.
    now += 1_000 * MS;
    for i in 0..PROBE {
        assert_eq!(
            z.hit(1, format!("new-{i}").as_bytes(), &g, now),
            Outcome::Allowed
        );
    }
    assert_eq!(z.stats(now).evicted, 0);
    // Now every bucket holds a hit: the next key evicts one.
    assert_eq!(z.hit(1, b"newest", &g, now), Outcome::Allowed);
    let st = z.stats(now);
    assert_eq!((st.evicted, st.full), (1, 0));
}
