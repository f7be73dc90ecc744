//! Site-wide limits in Redis: four agents share a `shared` throttle while
//! clients spread over them send ten times its rate; admissions are
//! counted by the clients. Redis stopped: per-host limits, no stall;
//! started again: sharing resumes. A ban made on one host is in force on
//! the others within one sync interval.

use super::*;
use rctl_testkit::servers::redis::Redis;

/// Requests per second the shared throttle allows, and its burst.
const N: u64 = 20;
const B: u64 = 5;
/// Seconds each phase sends for.
const T: u64 = 3;
const SYNC_MS: u64 = 100;

const RULES: &str = r#"
rule api {
  when path starts_with "/api/"
  throttle 20 requests per 1s burst 5 by path shared
}
rule login {
  when path == "/login"
  throttle 2 requests per 1s burst 1 by ip ban 1m shared
}
"#;

/// The documented bound (dataplane/src/limiter/shared.rs) over `T`
/// seconds for a key first seen in that period on `h` hosts:
/// `B + N·T + (H − 1)·(N·2s + B)`.
fn bound(h: u64) -> f64 {
    let s = SYNC_MS as f64 / 1000.0;
    (B + N * T) as f64 + (h - 1) as f64 * (N as f64 * 2.0 * s + B as f64)
}

/// Each agent gets `10·N/H` requests a second for `path` for `T`
/// seconds, on its own connection: (admitted, refused, slowest answer).
fn load(agents: &[Agent], path: &str) -> (u64, u64, Duration) {
    let per_host = 10 * N / agents.len() as u64;
    let gap = Duration::from_micros(1_000_000 / per_host);
    let threads: Vec<_> = agents
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let (http, path) = (a.http, path.to_string());
            std::thread::spawn(move || {
                let mut c = Conn::open(http);
                let (mut ok, mut no, mut slowest) = (0, 0, Duration::ZERO);
                let start = Instant::now();
                for k in 0..per_host * T {
                    let at = start + gap * k as u32;
                    if let Some(d) = at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                    let sent = Instant::now();
                    let ip = format!("198.51.100.{}", 1 + (k as usize + i) % 200);
                    let r = c
                        .send(
                            "GET",
                            &format!("/check{path}"),
                            &[("X-Real-Ip", ip.as_bytes())],
                        )
                        .expect("answer");
                    slowest = slowest.max(sent.elapsed());
                    match r.status {
                        200 => ok += 1,
                        429 => no += 1,
                        s => panic!("status {s}: {r:?}"),
                    }
                }
                (ok, no, slowest)
            })
        })
        .collect();
    threads.into_iter().fold((0, 0, Duration::ZERO), |acc, t| {
        let (ok, no, slow) = t.join().unwrap();
        (acc.0 + ok, acc.1 + no, acc.2.max(slow))
    })
}

fn shared(a: &Agent) -> serde_json::Value {
    a.status()["fleet"]["shared"].clone()
}

/// Four agents of one site on one etcd member and one Redis.
fn site(tag: &str, sync_ms: u64) -> (TempDir, Cluster, Redis, Vec<Agent>) {
    let dir = tempdir(tag);
    let c = Cluster::start(&dir.join("etcd"), 1);
    let redis = Redis::start(&dir.join("redis"));
    let etcd = c.urls();
    let (art, sha) = compile(&dir, "shared", RULES);
    assert!(push(&etcd, &[&art.display().to_string()]).status.success());
    let (url, sync) = (redis.url(), sync_ms.to_string());
    let agents: Vec<Agent> = (0..4)
        .map(|i| {
            Agent::start(
                &dir,
                &format!("cp{i}"),
                "eqiad",
                &etcd,
                &["--redis", &url, "--sync-ms", &sync],
            )
        })
        .collect();
    eventually(
        Duration::from_secs(20),
        || {
            agents.iter().all(|a| {
                let s = a.status();
                a.serving() == sha
                    && s["fleet"]["shared"]["online"] == true
                    && s["fleet"]["shared"]["hosts"] == 4
            })
        },
        || format!("{:?}", agents.iter().map(shared).collect::<Vec<_>>()),
    );
    (dir, c, redis, agents)
}

#[test]
fn four_hosts_share_a_limit_fall_back_per_host_and_share_again() {
    if !servers() {
        return;
    }
    let (_dir, _c, mut redis, agents) = site("fleet-redis", SYNC_MS);
    let h = agents.len() as u64;

    let (ok, no, slowest) = load(&agents, "/api/one");
    eprintln!(
        "shared: {ok} admitted, {no} refused, slowest {slowest:?}; bound {}",
        bound(h)
    );
    assert!(
        ok as f64 <= bound(h),
        "{ok} admitted over the bound {}",
        bound(h)
    );
    assert!(ok >= N * T * 8 / 10, "only {ok} admitted of {}", N * T);

    // Redis away: every host counts alone, nothing waits for it.
    redis.stop();
    eventually(
        Duration::from_secs(5),
        || agents.iter().all(|a| shared(a)["online"] == false),
        || format!("{:?}", agents.iter().map(shared).collect::<Vec<_>>()),
    );
    let (ok, no, slowest) = load(&agents, "/api/two");
    eprintln!("per host: {ok} admitted, {no} refused, slowest {slowest:?}");
    assert!(slowest < Duration::from_millis(500), "stalled {slowest:?}");
    let per_host = (B + N * T) as f64;
    assert!(
        ok as f64 > bound(h) && ok as f64 <= h as f64 * (per_host + N as f64),
        "{ok} admitted: not per-host limits ({} each)",
        per_host
    );
    for a in &agents {
        let s = shared(a);
        let offline: u64 = s["limiters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["offline_hits"].as_u64().unwrap())
            .sum();
        assert!(offline > 0, "{}: offline hits not counted: {s}", a.host);
    }

    // Redis back (empty): sharing resumes.
    redis.restart();
    eventually(
        Duration::from_secs(10),
        || {
            agents
                .iter()
                .all(|a| shared(a)["online"] == true && shared(a)["hosts"] == 4)
        },
        || format!("{:?}", agents.iter().map(shared).collect::<Vec<_>>()),
    );
    let (ok, no, _) = load(&agents, "/api/three");
    eprintln!("shared again: {ok} admitted, {no} refused");
    assert!(
        ok as f64 <= bound(h),
        "{ok} admitted over the bound {}",
        bound(h)
    );
    assert!(ok >= N * T * 8 / 10, "only {ok} admitted of {}", N * T);
}

#[test]
fn a_ban_on_one_host_is_in_force_on_all_within_one_sync_interval() {
    if !servers() {
        return;
    }
    // A long interval, so that the time status takes to read is small
    // beside it.
    let sync = Duration::from_millis(1000);
    let (_dir, _c, _redis, agents) = site("fleet-ban", sync.as_millis() as u64);
    let ip = "203.0.113.9";
    // Over 2/s with a burst of 1 on cp0: banned there.
    let banned_at = loop {
        let r = agents[0].check("/login", ip);
        if r.status == 429 {
            break Instant::now();
        }
        assert_eq!(r.status, 200);
    };
    for a in &agents[1..] {
        eventually(
            sync * 2,
            || {
                shared(a)["limiters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|l| l["rule"] == "login" && l["remote_bans"].as_u64().unwrap_or(0) >= 1)
            },
            || format!("{}: {}", a.host, shared(a)),
        );
    }
    let took = banned_at.elapsed();
    eprintln!("ban seen on every host {took:?} after it was made (sync {sync:?})");
    // The host that made it does not read it back as another's.
    let own = shared(&agents[0]);
    let login = own["limiters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rule"] == "login")
        .cloned()
        .unwrap_or_default();
    assert_eq!(login["remote_bans"], 0, "{}: {own}", agents[0].host);
    assert!(took <= sync + Duration::from_millis(400), "{took:?}");
    // Refilled long ago, but banned: refused everywhere; others pass.
    std::thread::sleep(Duration::from_millis(1200));
    for a in &agents[1..] {
        assert_eq!(a.check("/login", ip).status, 429, "{}", a.host);
        assert_eq!(a.check("/login", "203.0.113.10").status, 200, "{}", a.host);
    }
}
