//! The limiter's unit tests (GCRA, local).

use super::*;

const S: u64 = 1_000_000_000;

#[test]
fn burst_then_steady_rate() {
    let l = Limiter::new(10, 1_000, 10, 0, 100);
    for _ in 0..10 {
        assert_eq!(l.hit(b"k", 0), Outcome::Allowed);
    }
    let Outcome::Limited { retry_after_ns } = l.hit(b"k", 0) else {
        panic!()
    };
    assert_eq!(retry_after_ns, S / 10);
    assert_eq!(l.hit(b"k", S / 10), Outcome::Allowed);
    assert!(matches!(l.hit(b"k", S / 10), Outcome::Limited { .. }));
    assert_eq!(l.hit(b"other", 0), Outcome::Allowed);
}

#[test]
fn ban_holds_for_its_duration() {
    let l = Limiter::new(1, 1_000, 1, 60_000, 100);
    assert_eq!(l.hit(b"k", 0), Outcome::Allowed);
    assert_eq!(
        l.hit(b"k", 1),
        Outcome::Limited {
            retry_after_ns: 60 * S
        }
    );
    assert!(matches!(l.hit(b"k", 30 * S), Outcome::Limited { .. }));
    assert_eq!(l.hit(b"k", 60 * S + 2), Outcome::Allowed);
}

/// A hit timed before a concurrent one set the ban (its clock was read
/// first, the lock taken second) is told no more than the ban's length,
/// in each kind of table that bans.
#[test]
fn a_hit_timed_before_the_ban_is_told_at_most_its_length() {
    let l = Limiter::new(1, 1_000, 1, 600_000, 100);
    assert_eq!(l.hit(b"k", 10 * S), Outcome::Allowed);
    assert_eq!(
        l.hit(b"k", 10 * S + 1),
        Outcome::Limited {
            retry_after_ns: 600 * S
        }
    );
    assert_eq!(
        l.hit(b"k", 10 * S - S / 2),
        Outcome::Limited {
            retry_after_ns: 600 * S
        }
    );
    let v = Limiter::vsthrottle(1, 1_000, 600_000, 100);
    assert_eq!(v.hit(b"k", 10 * S), Outcome::Allowed);
    assert!(matches!(v.hit(b"k", 10 * S + 1), Outcome::Limited { .. }));
    assert_eq!(
        v.hit(b"k", 10 * S - S / 2),
        Outcome::Limited {
            retry_after_ns: 600 * S
        }
    );
}

#[test]
fn a_million_spoofed_sources_neither_grow_memory_nor_lift_bans() {
    let l = Limiter::new(1, 60_000, 1, 600_000, 4_096);
    // 100 abusers get banned.
    for i in 0..100u32 {
        let k = format!("bad{i}");
        l.hit(k.as_bytes(), 0);
        assert!(matches!(l.hit(k.as_bytes(), 1), Outcome::Limited { .. }));
    }
    let mut peak_bytes = 0;
    for i in 0..1_000_000u32 {
        l.hit(&i.to_le_bytes(), 2 + u64::from(i) * 100);
        if i % 65_536 == 0 {
            peak_bytes = peak_bytes.max(l.table_bytes());
        }
    }
    assert!(l.len() <= l.capacity(), "{} > {}", l.len(), l.capacity());
    // 24 bytes of state a key; under churn the tables settle at about 3.5x
    // their fill (tombstones force one doubling), and never grow past it.
    assert!(peak_bytes <= 4_096 * 90, "table grew to {peak_bytes} bytes");
    for i in 0..100u32 {
        let k = format!("bad{i}");
        assert!(
            matches!(l.hit(k.as_bytes(), 200_000_000), Outcome::Limited { .. }),
            "ban of bad{i} was lifted"
        );
    }
}

#[test]
fn shared_state_keeps_bans_and_hits_and_takes_new_parameters() {
    let old = Limiter::new(1, 1_000, 1, 60_000, 100);
    assert_eq!(old.hit(b"banned", 0), Outcome::Allowed);
    assert!(matches!(old.hit(b"banned", 1), Outcome::Limited { .. }));
    // A faster rate, no ban, a bigger burst.
    let mut new = Limiter::new(100, 1_000, 5, 0, 100);
    assert_eq!(new.hit(b"banned", 2), Outcome::Allowed, "fresh before");
    new.share_state(&old);
    assert!(new.shares_state_with(&old) && !old.shares_state_with(&Limiter::new(1, 1, 1, 0, 1)));
    assert!(
        matches!(new.hit(b"banned", 30 * S), Outcome::Limited { .. }),
        "the ban carries to its end"
    );
    // A hit the old limiter takes after the swap is seen by the new one.
    assert_eq!(old.hit(b"late", 0), Outcome::Allowed);
    assert_eq!(new.fill(S).keys, 2);
    // Its standing carries: the old limiter's hit put it a second
    // ahead, which the new rate still counts.
    assert!(matches!(new.hit(b"late", S / 2), Outcome::Limited { .. }));
    // Once that has passed, the new burst (5, where the old one had 1)
    // applies to the carried key.
    for _ in 0..5 {
        assert_eq!(new.hit(b"late", 2 * S), Outcome::Allowed);
    }
    assert!(matches!(new.hit(b"late", 2 * S), Outcome::Limited { .. }));
    let f = new.fill(S);
    assert_eq!((f.keys, f.banned, f.capacity), (2, 1, 112));
}

/// `fill` counts a key as banned exactly while `hit` refuses it for
/// its ban, and never a key that was not banned; `is_empty` follows
/// the keys.
#[test]
fn fill_counts_bans_as_hit_enforces_them() {
    let l = Limiter::new(1, 1_000, 1, 60_000, 100);
    assert!(l.is_empty());
    assert_eq!(
        l.fill(0),
        Fill {
            keys: 0,
            banned: 0,
            capacity: 112
        }
    );
    assert_eq!(l.hit(b"calm", 0), Outcome::Allowed);
    assert!(!l.is_empty());
    assert_eq!(l.fill(0).banned, 0, "a key that was never banned");
    assert_eq!(l.hit(b"bad", 0), Outcome::Allowed);
    assert!(matches!(l.hit(b"bad", 1), Outcome::Limited { .. }));
    // Banned from 1 ns to 1 ns + 60 s.
    let end = 1 + 60 * S;
    assert_eq!(
        l.fill(end - 1),
        Fill {
            keys: 2,
            banned: 1,
            capacity: 112
        }
    );
    assert_eq!(l.fill(end).banned, 0, "the ban is over at its end");
    // While banned, the wait is what is left of the ban.
    assert_eq!(
        l.hit(b"bad", 30 * S),
        Outcome::Limited {
            retry_after_ns: 30 * S + 1
        }
    );
    assert_eq!(
        l.hit(b"bad", end - 1),
        Outcome::Limited { retry_after_ns: 1 }
    );
    assert_eq!(l.hit(b"bad", end), Outcome::Allowed);
}

/// A full shard forgets a key whose bucket has refilled (it would be
/// allowed anyway) before a key still in debt: churn through new keys
/// does not hand a limited client a fresh burst.
#[test]
fn eviction_keeps_keys_in_debt_over_refilled_ones() {
    // 32 keys: two per shard.
    let l = Limiter::new(1, 1_000, 2, 0, 32);
    assert!(matches!(l.table.shards, Shards::Local(_)));
    let shard = |k: &[u8]| shard_of(l.table.hasher.hash(k));
    // Three keys of one shard.
    let keys: Vec<[u8; 4]> = (0u32..)
        .map(u32::to_le_bytes)
        .filter(|k| shard(k) == 0)
        .take(3)
        .collect();
    let (idle, debtor, newcomer) = (&keys[0], &keys[1], &keys[2]);
    // `idle` hits once at 0 and has refilled by 10 s; `debtor` spends
    // its burst of 2 at 10 s and is limited.
    assert_eq!(l.hit(idle, 0), Outcome::Allowed);
    let t = 10 * S;
    assert_eq!(l.hit(debtor, t), Outcome::Allowed);
    assert_eq!(l.hit(debtor, t), Outcome::Allowed);
    assert!(matches!(l.hit(debtor, t), Outcome::Limited { .. }));
    // The newcomer fills the shard: `idle` goes, `debtor` stays limited.
    assert_eq!(l.hit(newcomer, t), Outcome::Allowed);
    assert!(matches!(l.hit(debtor, t), Outcome::Limited { .. }));
    assert_eq!(l.len(), 2);
}

/// The table's memory: nothing before the first key, then at least a
/// (key, state) entry and a control byte per key held, and not more
/// than the table's growth can explain (4x).
#[test]
fn table_bytes_follow_the_keys_held() {
    let l = Limiter::new(1, 1_000, 1, 0, 1 << 16);
    assert_eq!(l.table_bytes(), 0);
    for i in 0..10_000u32 {
        l.hit(&i.to_le_bytes(), 0);
    }
    let per_key = std::mem::size_of::<(u64, State)>() + 1;
    let bytes = l.table_bytes();
    assert_eq!(l.len(), 10_000);
    assert!(bytes >= 10_000 * per_key, "{bytes}");
    assert!(bytes <= 4 * 10_000 * per_key, "{bytes}");
}

#[test]
fn shared_across_threads() {
    let l = std::sync::Arc::new(Limiter::new(1_000, 1_000, 1_000, 0, 1 << 16));
    let hs: Vec<_> = (0..4)
        .map(|t| {
            let l = l.clone();
            std::thread::spawn(move || {
                (0..1_000)
                    .filter(|i| l.hit(b"shared", t * 10 + i % 3) == Outcome::Allowed)
                    .count()
            })
        })
        .collect();
    let allowed: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(
        allowed, 1_000,
        "exactly the burst is allowed, whatever the interleaving"
    );
}

/// Local GCRA, vsthrottle and shared limiters keep different tables: a
/// new limiter takes over an old one's only when both are of one kind,
/// and only a shared GCRA limiter has a backend handle.
#[test]
fn only_limiters_of_one_kind_of_table_share_state() {
    let kinds = || {
        [
            Limiter::new(1, 1_000, 1, 0, 100),
            Limiter::vsthrottle(1, 1_000, 0, 100),
            Limiter::new_shared(1, 1_000, 1, 0, 100),
        ]
    };
    for (i, old) in kinds().iter().enumerate() {
        for (j, mut new) in kinds().into_iter().enumerate() {
            assert_eq!(new.share_state(old), i == j, "{i} <- {j}");
            assert_eq!(new.shares_state_with(old), i == j, "{i} <- {j}");
        }
    }
    let [local, vs, shared] = kinds();
    assert!(vs.is_vsthrottle() && !local.is_vsthrottle() && !shared.is_vsthrottle());
    assert!(local.shared().is_none() && vs.shared().is_none());
    assert_eq!(
        shared.shared().map(|s| s.gcra()),
        Some(Gcra::new(1, 1_000, 1, 0))
    );
}
