use super::*;
use std::collections::HashMap;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

#[test]
fn key_ids_are_siphash_2_4_with_the_reference_keys() {
    // The test vectors of the SipHash paper (Aumasson & Bernstein,
    // appendix A): key 00 01 … 0f, messages 00, 00 01, …; the empty
    // message and the 15-byte one.
    assert_eq!(key_id(b""), 0x726f_db47_dd0e_0e31);
    let m: Vec<u8> = (0..15).collect();
    assert_eq!(key_id(&m), 0xa129_ca61_49be_45e5);
}

/// A site's bucket as the backend keeps it (the algorithm of
/// `dataplane/fleet/README.md`, in the test's own words): T moves one
/// interval per admission from max(T, now); totals add up; a ban's end is
/// the latest one published.
#[derive(Default)]
struct Site {
    keys: HashMap<u64, (u64, u64, u64, u64)>,
    bans: Vec<(u64, u64)>,
}

impl Site {
    fn sync(&mut self, l: &Limiter, now: u64, host: usize, seen_bans: &mut usize) {
        let sh = l.shared().unwrap();
        let mut d = Vec::new();
        sh.drain(now, &mut d);
        let interval = sh.gcra().interval_ns;
        let updates: Vec<SharedUpdate> = d
            .iter()
            .map(|d| {
                let k = self.keys.entry(d.id).or_default();
                k.0 = k.0.max(now) + u64::from(d.admitted) * interval;
                k.1 += u64::from(d.admitted);
                k.2 += u64::from(d.hits);
                if d.ban_ns > 0 {
                    k.3 = k.3.max(now + d.ban_ns);
                    self.bans.push((d.id, now + d.ban_ns));
                }
                SharedUpdate {
                    id: d.id,
                    ahead_ns: k.0.saturating_sub(now),
                    admitted_total: k.1,
                    hits_total: k.2,
                    ban_ns: k.3.saturating_sub(now),
                }
            })
            .collect();
        sh.apply(now, &updates);
        for &(id, until) in &self.bans[*seen_bans..] {
            if until > now {
                sh.remote_ban(id, until - now, now);
            }
        }
        *seen_bans = self.bans.len();
        let _ = host;
    }
}

/// `hosts` limiters of `limit`/s (burst `burst`) sharing one key through
/// a site synced every `sync_ms` (each host at its own phase), with
/// `10 × limit` requests a second spread round-robin over the hosts for
/// `secs` seconds. Returns the admitted total.
fn run_site(hosts: usize, limit: u32, burst: u32, sync_ms: u64, secs: u64) -> u64 {
    let ls: Vec<Limiter> = (0..hosts)
        .map(|_| Limiter::new_shared(limit, 1_000, burst, 0, 1 << 10))
        .collect();
    let mut site = Site::default();
    let mut seen = vec![0; hosts];
    for l in &ls {
        l.shared().unwrap().set_online(true);
        l.shared().unwrap().set_new_key_weight(hosts as u32);
    }
    let rate = u64::from(limit) * 10;
    let gap = S / rate;
    let start = 1_000 * S;
    let mut next_sync: Vec<u64> = (0..hosts)
        .map(|h| start + h as u64 * sync_ms * MS / hosts as u64)
        .collect();
    let mut admitted = 0;
    for i in 0..rate * secs {
        let now = start + i * gap;
        for (h, l) in ls.iter().enumerate() {
            while next_sync[h] <= now {
                site.sync(l, next_sync[h], h, &mut seen[h]);
                next_sync[h] += sync_ms * MS;
            }
        }
        let host = (i as usize) % hosts;
        if ls[host].hit(b"the key", now) == Outcome::Allowed {
            admitted += 1;
        }
    }
    admitted
}

#[test]
fn four_hosts_admit_the_limit_within_the_documented_bound() {
    let (n, b, secs) = (200u64, 200u64, 20u64);
    for sync_ms in [50, 100, 500] {
        let admitted = run_site(4, n as u32, b as u32, sync_ms, secs);
        let ideal = b + n * secs;
        eprintln!("sync {sync_ms} ms: admitted {admitted} of {ideal}");
        // B + N·T + (H − 1)·(N·2s + B)
        let bound = ideal + 3 * (n * 2 * sync_ms / 1000 + b);
        assert!(
            admitted >= ideal * 95 / 100 && admitted <= bound,
            "sync {sync_ms} ms: admitted {admitted}, ideal {ideal}, bound {bound}"
        );
        if sync_ms == 100 {
            // The weights make it far better than the bound.
            let err = admitted.abs_diff(ideal) as f64 / ideal as f64;
            assert!(err < 0.05, "sync 100 ms: {admitted} vs {ideal} ({err:.3})");
        }
    }
}

#[test]
fn without_sharing_each_host_admits_the_whole_limit() {
    // What the shared limit prevents: four per-host limiters admit four
    // times the limit.
    let (n, secs) = (200u64, 10u64);
    let ls: Vec<Limiter> = (0..4)
        .map(|_| Limiter::new_shared(n as u32, 1_000, n as u32, 0, 1 << 10))
        .collect();
    let gap = S / (n * 10);
    let admitted = (0..n * 10 * secs)
        .filter(|&i| ls[i as usize % 4].hit(b"k", 1_000 * S + i * gap) == Outcome::Allowed)
        .count() as u64;
    // Each host: its burst, then the rate (to within the last request).
    let per_host = 4 * (n + n * secs);
    assert!(admitted.abs_diff(per_host) <= 4, "{admitted} vs {per_host}");
    let st = ls[0].shared().unwrap().stats();
    assert!(!st.online);
    assert_eq!(st.offline_hits, n * 10 * secs / 4);
}

#[test]
fn offline_it_is_exactly_a_local_limiter() {
    let shared = Limiter::new_shared(10, 1_000, 5, 60_000, 100);
    let local = Limiter::new(10, 1_000, 5, 60_000, 100);
    for i in 0..200u64 {
        let t = i * 20 * MS;
        let key = [i as u8 % 3];
        assert_eq!(shared.hit(&key, t), local.hit(&key, t), "hit {i}");
    }
}

#[test]
fn a_drain_hands_over_counts_and_an_apply_sets_the_mirror() {
    let l = Limiter::new_shared(10, 1_000, 10, 0, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    for _ in 0..3 {
        assert_eq!(l.hit(b"a", S), Outcome::Allowed);
    }
    let mut d = Vec::new();
    sh.drain(S, &mut d);
    assert_eq!(
        d,
        [SharedDelta {
            id: key_id(b"a"),
            admitted: 3,
            hits: 3,
            ban_ns: 0
        }]
    );
    // Nothing new: nothing to drain.
    let mut again = Vec::new();
    sh.drain(S, &mut again);
    assert!(again.is_empty());
    // One more admission while the sync is in flight; the site says its
    // bucket runs 950 ms ahead (other hosts admitted too).
    assert_eq!(l.hit(b"a", S), Outcome::Allowed);
    sh.apply(
        S,
        &[SharedUpdate {
            id: key_id(b"a"),
            ahead_ns: 950 * MS,
            admitted_total: 10,
            hits_total: 40,
            ban_ns: 0,
        }],
    );
    // Mirror: now + 950 ms + 1 pending × 100 ms = 1.05 s ahead, over the
    // tolerance of 900 ms: limited for 150 ms.
    assert_eq!(
        l.hit(b"a", S),
        Outcome::Limited {
            retry_after_ns: 150 * MS
        }
    );
    assert_eq!(l.hit(b"a", S + 150 * MS), Outcome::Allowed);
}

#[test]
fn weights_follow_the_share_of_traffic_this_host_sees() {
    let l = Limiter::new_shared(100, 1_000, 100, 0, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    sh.set_new_key_weight(3);
    let id = key_id(b"k");
    l.hit(b"k", S);
    assert_eq!(sh.weight(b"k"), Some(3.0), "a fresh key: the host count");
    let mut total = (0, 0);
    for round in 1..=12u64 {
        let now = S + round * 100 * MS;
        for _ in 0..10 {
            l.hit(b"k", now);
        }
        let mut d = Vec::new();
        sh.drain(now, &mut d);
        // The site saw this host's hits and three times as many elsewhere.
        total.0 += u64::from(d[0].admitted);
        total.1 += 4 * u64::from(d[0].hits);
        sh.apply(
            now,
            &[SharedUpdate {
                id,
                ahead_ns: 0,
                admitted_total: total.0,
                hits_total: total.1,
                ban_ns: 0,
            }],
        );
    }
    let w = sh.weight(b"k").unwrap();
    assert!((w - 4.0).abs() < 0.01, "weight {w}");
}

#[test]
fn bans_are_handed_over_at_once_and_applied_from_other_hosts() {
    let woke = Arc::new(AtomicU64::new(0));
    let a = Limiter::new_shared(1, 60_000, 1, 600_000, 100);
    let b = Limiter::new_shared(1, 60_000, 1, 600_000, 100);
    let sa = a.shared().unwrap();
    sa.set_online(true);
    b.shared().unwrap().set_online(true);
    let w = Arc::clone(&woke);
    sa.set_waker(Arc::new(move || {
        w.fetch_add(1, Relaxed);
    }));
    assert_eq!(a.hit(b"bad", S), Outcome::Allowed);
    assert!(matches!(a.hit(b"bad", S), Outcome::Limited { .. }));
    assert_eq!(woke.load(Relaxed), 1, "the backend is woken by the ban");
    let mut d = Vec::new();
    sa.drain(S + MS, &mut d);
    assert_eq!(d[0].ban_ns, 600 * S - MS);
    // Host b never saw the key; the ban reaches it.
    b.shared().unwrap().remote_ban(d[0].id, d[0].ban_ns, 2 * S);
    assert!(matches!(
        b.hit(b"bad", 3 * S),
        Outcome::Limited { retry_after_ns } if retry_after_ns == 600 * S - MS - S
    ));
    assert_eq!(b.shared().unwrap().stats().remote_bans, 1);
    assert_eq!(b.hit(b"good", 3 * S), Outcome::Allowed);
}

#[test]
fn going_offline_forgets_deltas_and_weights() {
    let l = Limiter::new_shared(10, 1_000, 10, 0, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    sh.set_new_key_weight(4);
    l.hit(b"k", S);
    sh.set_online(false);
    assert_eq!(sh.weight(b"k"), Some(1.0));
    sh.set_online(true);
    let mut d = Vec::new();
    sh.drain(S, &mut d);
    assert!(d.is_empty(), "{d:?}");
    // Its standing stays: one admission, charged 4 intervals.
    for _ in 0..6 {
        assert_eq!(l.hit(b"k", S), Outcome::Allowed);
    }
}

#[test]
fn a_backend_that_lost_its_state_does_not_reset_the_mirror() {
    let l = Limiter::new_shared(10, 1_000, 10, 0, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    let id = key_id(b"k");
    let upd = |admitted_total, ahead_ns| SharedUpdate {
        id,
        ahead_ns,
        admitted_total,
        hits_total: admitted_total,
        ban_ns: 0,
    };
    l.hit(b"k", S);
    let mut d = Vec::new();
    sh.drain(S, &mut d);
    // The site's bucket is drained (900 ms ahead: the tolerance).
    sh.apply(S, &[upd(1_000, 900 * MS)]);
    assert_eq!(l.hit(b"k", S), Outcome::Allowed);
    sh.drain(S, &mut d);
    // The backend restarted: it knows of this one admission only.
    sh.apply(S, &[upd(1, 100 * MS)]);
    // The bucket is still drained here, whatever the backend forgot.
    assert!(matches!(l.hit(b"k", S), Outcome::Limited { .. }));
}

#[test]
fn hits_past_the_log_compaction_are_summed_not_lost() {
    // A burst of 1,000 at 1,000,000/s, all hits at one instant: most
    // are limited, so admitted and hit counts differ.
    let l = Limiter::new_shared(1_000_000, 1_000, 1_000, 0, 1 << 10);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    // Below the threshold every hit is one tally, in the order made.
    for _ in 0..LOG_COMPACT - 1 {
        l.hit(b"a", S);
    }
    assert_eq!(l_tallies(&l), LOG_COMPACT - 1, "compacted early");
    let mut d = Vec::new();
    sh.drain(S, &mut d);
    let n = 3 * LOG_COMPACT as u32 + 7;
    let mut admitted = 0u32;
    for i in 0..n {
        // Two keys, and limited hits among them once the burst is gone.
        if l.hit(if i % 3 == 0 { b"a" } else { b"b" }, S) == Outcome::Allowed {
            admitted += 1;
        }
    }
    let held: usize = l_tallies(&l);
    assert!(held < 2 * LOG_COMPACT, "the log holds {held} tallies");
    d.clear();
    sh.drain(S, &mut d);
    d.sort_by_key(|d| d.id);
    let mut want = vec![
        (key_id(b"a"), n.div_ceil(3)),
        (key_id(b"b"), n - n.div_ceil(3)),
    ];
    want.sort();
    let got: Vec<(u64, u32)> = d.iter().map(|d| (d.id, d.hits)).collect();
    assert_eq!(got, want);
    assert_eq!(d.iter().map(|d| d.admitted).sum::<u32>(), admitted);
    assert!(admitted < n / 2, "{admitted} of {n} admitted");
    assert_eq!(l_tallies(&l), 0, "a drain empties the log");
}

fn l_tallies(l: &Limiter) -> usize {
    match &l.table.shards {
        super::super::Shards::Shared(t) => t.shards.iter().map(|s| lock(s).log.tallies.len()).sum(),
        _ => unreachable!("a shared limiter"),
    }
}

fn cold_keys(l: &Limiter) -> usize {
    match &l.table.shards {
        super::super::Shards::Shared(t) => lock(&t.sync).cold.len(),
        _ => unreachable!("a shared limiter"),
    }
}

/// The site's answer to `d` for keys seen once, site-wide, whose buckets
/// are full again.
fn full_buckets(d: &[SharedDelta]) -> Vec<SharedUpdate> {
    d.iter()
        .map(|d| SharedUpdate {
            id: d.id,
            ahead_ns: 0,
            admitted_total: 1,
            hits_total: 1,
            ban_ns: 0,
        })
        .collect()
}

#[test]
fn the_sync_forgets_keys_idle_for_many_drains() {
    let l = Limiter::new_shared(10, 1_000, 10, 0, 1 << 10);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    let mut d = Vec::new();
    for k in 0..100u32 {
        l.hit(&k.to_le_bytes(), S);
    }
    sh.drain(S, &mut d);
    sh.apply(S, &full_buckets(&d));
    assert_eq!(cold_keys(&l), 100);
    // One key stays busy; the others go quiet.
    for _ in 0..2 * COLD_DRAINS {
        l.hit(b"busy", S);
        d.clear();
        sh.drain(S, &mut d);
    }
    assert_eq!(cold_keys(&l), 1, "only the busy key is remembered");
}

#[test]
fn a_ban_for_a_key_seen_here_but_not_yet_drained_takes_hold_at_the_drain() {
    let l = Limiter::new_shared(10, 1_000, 10, 600_000, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    assert_eq!(l.hit(b"k", S), Outcome::Allowed);
    // Another host's ban arrives before this host drained the key.
    sh.remote_ban(key_id(b"k"), 60 * S, S);
    assert_eq!(sh.stats().remote_bans, 1);
    let mut d = Vec::new();
    sh.drain(S + MS, &mut d);
    assert_eq!(
        l.hit(b"k", 2 * S),
        Outcome::Limited {
            retry_after_ns: 60 * S - S
        }
    );
    // A ban the site answers for a key never drained here waits for it.
    sh.apply(
        2 * S,
        &[SharedUpdate {
            id: key_id(b"new"),
            ahead_ns: 0,
            admitted_total: 5,
            hits_total: 9,
            ban_ns: 10 * S,
        }],
    );
    assert!(matches!(l.hit(b"new", 3 * S), Outcome::Limited { .. }));
    assert_eq!(l.hit(b"new", 13 * S), Outcome::Allowed, "the ban ended");
}

#[test]
fn a_new_generation_charges_its_own_interval_times_the_weight() {
    // The old generation: 10/s; the new one shares its table at 1/s,
    // burst 5 (4 s of tolerance). The key's weight (4) carries; the
    // interval it multiplies is the new limiter's.
    let old = Limiter::new_shared(10, 1_000, 1, 0, 100);
    old.shared().unwrap().set_online(true);
    old.shared().unwrap().set_new_key_weight(4);
    assert_eq!(old.hit(b"k", S), Outcome::Allowed); // 400 ms charged
    let mut new = Limiter::new_shared(1, 1_000, 5, 0, 100);
    assert!(new.share_state(&old));
    // 0.4 s ahead: one admission of 4 s, then over the 4 s tolerance.
    assert_eq!(new.hit(b"k", S), Outcome::Allowed);
    assert_eq!(
        new.hit(b"k", S),
        Outcome::Limited {
            retry_after_ns: 400 * MS
        }
    );
}

/// A shared limiter's table is bounded as a local one's is: a full shard
/// evicts a refilled key before one in debt, and never a banned one while
/// others are not banned.
#[test]
fn a_full_shared_table_evicts_refilled_keys_and_keeps_bans() {
    // 32 keys: two per shard.
    let l = Limiter::new_shared(1, 1_000, 2, 60_000, 32);
    let shard = |k: &[u8]| shard_of(l.table.hasher.hash(k));
    let keys: Vec<[u8; 4]> = (0u32..)
        .map(u32::to_le_bytes)
        .filter(|k| shard(k) == 0)
        .take(4)
        .collect();
    let (idle, debtor, newcomer, banned) = (&keys[0], &keys[1], &keys[2], &keys[3]);
    assert_eq!(l.hit(idle, 0), Outcome::Allowed);
    let t = 10 * S;
    assert_eq!(l.hit(debtor, t), Outcome::Allowed);
    assert_eq!(l.hit(debtor, t), Outcome::Allowed);
    // The newcomer fills the shard: `idle` (refilled) goes, `debtor`
    // keeps its debt.
    assert_eq!(l.hit(newcomer, t), Outcome::Allowed);
    assert!(
        matches!(l.hit(debtor, t), Outcome::Limited { .. }),
        "debtor banned now"
    );
    assert_eq!(l.len(), 2);
    // `debtor` is banned (its excess above); a new key evicts the
    // newcomer, not the ban.
    assert_eq!(l.hit(banned, t + MS), Outcome::Allowed);
    assert!(
        matches!(l.hit(debtor, t + 30 * S), Outcome::Limited { .. }),
        "ban lifted"
    );
    // Spoofed keys by the thousand, once its bucket has refilled (only
    // the ban holds it), do not lift it either.
    for i in 0..10_000u32 {
        l.hit(&(i + 1_000_000).to_le_bytes(), t + 35 * S);
    }
    assert!(
        matches!(l.hit(debtor, t + 40 * S), Outcome::Limited { .. }),
        "ban lifted"
    );
    assert!(l.len() <= l.capacity());
}

/// The site's answer replaces the mirror when the site's count moved by
/// at least what this host sent (exactly as much counts: nothing was
/// lost), on the first apply and on later ones.
#[test]
fn a_site_count_that_moved_by_exactly_what_was_sent_is_taken_as_is() {
    // Exactly what was sent, then more (other hosts admitted too).
    for others in [0, 4] {
        site_count_taken_as_is(others);
    }
}

fn site_count_taken_as_is(others: u64) {
    let l = Limiter::new_shared(1, 1_000, 3, 0, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    let id = key_id(b"k");
    let upd = |admitted_total| SharedUpdate {
        id,
        ahead_ns: 0,
        admitted_total,
        hits_total: admitted_total,
        ban_ns: 0,
    };
    let mut d = Vec::new();
    let mut total = 0;
    for round in 1..=2u64 {
        let now = round * 100 * S;
        total += 3 + others;
        for _ in 0..3 {
            assert_eq!(l.hit(b"k", now), Outcome::Allowed, "round {round}");
        }
        assert!(matches!(l.hit(b"k", now), Outcome::Limited { .. }));
        d.clear();
        sh.drain(now, &mut d);
        // The site admitted exactly these three and its bucket is full
        // again (ahead 0): the host's bucket is full again too.
        sh.apply(now, &[upd(total)]);
        assert_eq!(
            l.hit(b"k", now),
            Outcome::Allowed,
            "round {round}: mirror not taken"
        );
        d.clear();
        sh.drain(now, &mut d);
        total += 1;
        sh.apply(now, &[upd(total)]);
    }
}

#[test]
fn online_shows_in_the_stats_and_remote_bans_count_once_per_later_end() {
    let l = Limiter::new_shared(1, 1_000, 1, 600_000, 100);
    let sh = l.shared().unwrap();
    assert!(!sh.stats().online);
    sh.set_online(true);
    assert!(sh.stats().online);
    let id = key_id(b"never seen");
    sh.remote_ban(id, 10 * S, S);
    sh.remote_ban(id, 10 * S, S);
    sh.remote_ban(id, 5 * S, S);
    assert_eq!(sh.stats().remote_bans, 1, "the same ban, or a shorter one");
    sh.remote_ban(id, 20 * S, S);
    assert_eq!(sh.stats().remote_bans, 2, "a later end");
}

/// What the sync remembers of a key: forgotten at the first sweep after
/// 64 idle drains, but never while it is in flight (drained, not yet
/// answered).
#[test]
fn the_sync_keeps_in_flight_keys_and_forgets_idle_ones_on_time() {
    let l = Limiter::new_shared(10, 1_000, 10, 0, 1 << 10);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    let mut d = Vec::new();
    let drain = |d: &mut Vec<SharedDelta>| {
        d.clear();
        sh.drain(S, d);
    };
    // Drain 1: `answered` and `waiting` handed over; only `answered` is
    // answered.
    l.hit(b"answered", S);
    l.hit(b"waiting", S);
    drain(&mut d);
    sh.apply(
        S,
        &[SharedUpdate {
            id: key_id(b"answered"),
            ahead_ns: 0,
            admitted_total: 1,
            hits_total: 1,
            ban_ns: 0,
        }],
    );
    // Drains 2..=63: idle. The sweep at drain 64 keeps `answered` (63
    // drains idle).
    for _ in 2..=64 {
        drain(&mut d);
    }
    assert_eq!(cold_keys(&l), 2);
    // The sweep at drain 128 forgets it; `waiting` stays in flight.
    for _ in 65..=128 {
        drain(&mut d);
    }
    assert_eq!(cold_keys(&l), 1);
    let c = match &l.table.shards {
        super::super::Shards::Shared(t) => lock(&t.sync).cold.contains_key(&key_id(b"waiting")),
        _ => unreachable!(),
    };
    assert!(c, "the key in flight was forgotten");
}

/// The site's answer carries a ban made elsewhere: in force here; and
/// it re-creates an entry this host evicted when the site's bucket runs
/// ahead, but not for a key whose bucket is full and unbanned.
#[test]
fn an_answer_bans_and_brings_back_evicted_keys_only_with_state() {
    let l = Limiter::new_shared(1, 1_000, 5, 600_000, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    let mut d = Vec::new();
    for k in [b"a", b"b", b"c"] {
        l.hit(k, S);
    }
    sh.drain(S, &mut d);
    let upd = |k: &[u8], ahead_ns, ban_ns| SharedUpdate {
        id: key_id(k),
        ahead_ns,
        admitted_total: 1,
        hits_total: 1,
        ban_ns,
    };
    // Forget the three keys here, as eviction would.
    if let super::super::Shards::Shared(t) = &l.table.shards {
        for s in &t.shards {
            lock(s).keys.clear();
        }
    }
    sh.apply(
        S,
        &[upd(b"a", 0, 30 * S), upd(b"b", 4 * S, 0), upd(b"c", 0, 0)],
    );
    assert_eq!(l.len(), 2, "a (banned) and b (ahead) are back, c is not");
    assert_eq!(
        l.hit(b"a", 2 * S),
        Outcome::Limited {
            retry_after_ns: 29 * S
        }
    );
    // b: its mirror at 5 s (1 s + 4 s ahead); at 2 s, with 4 s of
    // tolerance, two more fit (3 s, then 4 s ahead), not a third.
    assert_eq!(l.hit(b"b", 2 * S), Outcome::Allowed);
    assert_eq!(l.hit(b"b", 2 * S), Outcome::Allowed);
    assert!(matches!(l.hit(b"b", 2 * S), Outcome::Limited { .. }));
    assert_eq!(l.hit(b"c", 2 * S), Outcome::Allowed);
}

/// A ban from another host on a key this host has drained: in force at
/// once, counted once per later end.
#[test]
fn a_remote_ban_on_a_key_drained_here_takes_hold_at_once() {
    let l = Limiter::new_shared(10, 1_000, 10, 600_000, 100);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    assert_eq!(l.hit(b"k", S), Outcome::Allowed);
    let mut d = Vec::new();
    sh.drain(S, &mut d);
    let id = key_id(b"k");
    sh.remote_ban(id, 10 * S, S);
    assert_eq!(
        l.hit(b"k", 2 * S),
        Outcome::Limited {
            retry_after_ns: 9 * S
        }
    );
    assert_eq!(sh.stats().remote_bans, 1);
    sh.remote_ban(id, 10 * S, S);
    sh.remote_ban(id, 3 * S, 2 * S);
    assert_eq!(sh.stats().remote_bans, 1, "not later: not counted");
    sh.remote_ban(id, 20 * S, 2 * S);
    assert_eq!(sh.stats().remote_bans, 2);
    assert_eq!(
        l.hit(b"k", 3 * S),
        Outcome::Limited {
            retry_after_ns: 19 * S
        }
    );
}

fn pending_bans(l: &Limiter) -> usize {
    match &l.table.shards {
        super::super::Shards::Shared(t) => lock(&t.pending_bans).bans.len(),
        _ => unreachable!("a shared limiter"),
    }
}

/// What the sync keeps is bounded like the table: past the table's
/// capacity only keys in flight stay, and pending bans past it are
/// halved, the soonest-ending first.
#[test]
fn the_sync_state_is_bounded_by_the_tables_capacity() {
    let l = Limiter::new_shared(10, 1_000, 10, 600_000, 32);
    let sh = l.shared().unwrap();
    sh.set_online(true);
    let mut d = Vec::new();
    for k in 0..1_000u32 {
        l.hit(&k.to_le_bytes(), S);
    }
    sh.drain(S, &mut d);
    sh.apply(S, &full_buckets(&d));
    for k in 0..5u32 {
        l.hit(&k.to_le_bytes(), S);
    }
    d.clear();
    sh.drain(S, &mut d);
    assert_eq!(cold_keys(&l), 5, "only the keys in flight");
    // 1,000 bans for keys never seen here, ending 1..=1,000 s from now.
    for i in 1..=1_000u64 {
        sh.remote_ban(i, i * S, S);
    }
    assert_eq!(pending_bans(&l), 1_000);
    d.clear();
    sh.drain(S, &mut d);
    let left = pending_bans(&l);
    assert!(left <= 500, "{left} pending");
    // The latest-ending ban is kept: key id 1,000 is banned when seen.
    match &l.table.shards {
        super::super::Shards::Shared(t) => {
            assert!(lock(&t.pending_bans).bans.contains_key(&1_000));
            assert!(!lock(&t.pending_bans).bans.contains_key(&1));
        }
        _ => unreachable!(),
    }
}

#[test]
fn what_the_backend_says_is_capped_at_what_the_rule_allows() {
    // A rule with a 10 min ban: a remote ban of ten years lasts 10 min.
    let banning = Limiter::new_shared(1, 60_000, 1, 600_000, 100);
    let s = banning.shared().unwrap();
    s.set_online(true);
    let ten_years = 10 * 365 * 86_400 * S;
    s.remote_ban(key_id(b"victim"), ten_years, S);
    assert!(matches!(
        banning.hit(b"victim", 2 * S),
        Outcome::Limited { retry_after_ns } if retry_after_ns == 600 * S - S
    ));
    // A rule without a ban: no remote ban holds at all.
    let plain = Limiter::new_shared(10, 1_000, 10, 0, 100);
    let p = plain.shared().unwrap();
    p.set_online(true);
    p.remote_ban(key_id(b"victim"), ten_years, S);
    assert_eq!(plain.hit(b"victim", 2 * S), Outcome::Allowed);
    assert_eq!(p.stats().remote_bans, 0);
    // An answer with a bucket ten years ahead and a ban is taken at most
    // 64 bursts ahead, and without the ban.
    assert_eq!(plain.hit(b"k", 3 * S), Outcome::Allowed);
    let mut d = Vec::new();
    p.drain(3 * S, &mut d);
    assert!(d.iter().any(|d| d.id == key_id(b"k")));
    p.apply(
        3 * S,
        &[SharedUpdate {
            id: key_id(b"k"),
            ahead_ns: ten_years,
            admitted_total: 1,
            hits_total: 1,
            ban_ns: ten_years,
        }],
    );
    let g = p.gcra();
    let limit = 64 * (g.tolerance_ns + g.interval_ns);
    let Outcome::Limited { retry_after_ns } = plain.hit(b"k", 3 * S) else {
        panic!("the bucket is ahead: limited")
    };
    assert!(retry_after_ns <= limit, "{retry_after_ns} > {limit}");
    assert!(
        matches!(plain.hit(b"k", 3 * S + limit + S), Outcome::Allowed),
        "the forged bucket ran out within its cap"
    );
}

#[test]
fn bans_made_while_offline_are_published_at_the_next_drain() {
    let l = Limiter::new_shared(1, 60_000, 1, 600_000, 100);
    let s = l.shared().unwrap();
    assert!(!s.is_online());
    assert_eq!(l.hit(b"bad", S), Outcome::Allowed);
    assert!(matches!(l.hit(b"bad", S), Outcome::Limited { .. }));
    // Back online: the first drain carries the ban made offline.
    s.set_online(true);
    let mut d = Vec::new();
    s.drain(2 * S, &mut d);
    let ban: Vec<&SharedDelta> = d.iter().filter(|d| d.ban_ns > 0).collect();
    assert_eq!(ban.len(), 1, "{d:?}");
    assert_eq!(ban[0].id, key_id(b"bad"));
    assert_eq!(ban[0].ban_ns, 600 * S - S);
    // Published once.
    d.clear();
    s.drain(3 * S, &mut d);
    assert!(d.iter().all(|d| d.ban_ns == 0), "{d:?}");
}

#[test]
fn offline_bans_are_bounded_by_the_tables_capacity() {
    let l = Limiter::new_shared(1, 60_000, 1, 600_000, 8);
    let s = l.shared().unwrap();
    for i in 0..100u64 {
        let k = i.to_le_bytes();
        let now = S + i * MS;
        let _ = l.hit(&k, now);
        let _ = l.hit(&k, now);
    }
    s.set_online(true);
    let mut d = Vec::new();
    s.drain(2 * S, &mut d);
    let bans = d.iter().filter(|d| d.ban_ns > 0).count();
    assert!(
        bans <= l.capacity(),
        "{bans} bans kept for {} keys",
        l.capacity()
    );
    // The latest bans are the ones kept.
    assert!(d.iter().any(|d| d.id == key_id(&99u64.to_le_bytes())));
}
