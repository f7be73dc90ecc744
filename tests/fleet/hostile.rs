//! A hostile Redis or etcd writer, and a Redis that is down: a forged ban
//! holds no longer than the rule's own (and not at all where the rule has
//! none); bans made while Redis is away reach the other hosts when it is
//! back; a password and TLS are used as given, and a Redis that asks for
//! neither is warned about; etcd keys that are not rctl's are reported by
//! `rctl fleet status` instead of hiding a host or failing the whole
//! status.

use super::*;
use rctl_testkit::servers::pki::Ca;
use rctl_testkit::servers::redis::Redis;

const RULES: &str = r#"
rule login {
  when path == "/login"
  throttle 2 requests per 1s burst 1 by ip ban 1m shared
}
rule api {
  when path starts_with "/api/"
  throttle 20 requests per 1s burst 5 by ip shared
}
"#;

/// Two agents of site eqiad sharing `redis`, both online.
fn pair(dir: &Path, redis: &Redis, extra: &[&str]) -> (Cluster, [Agent; 2]) {
    let c = Cluster::start(&dir.join("etcd"), 1);
    let etcd = c.urls();
    let (art, sha) = compile(dir, "shared", RULES);
    assert!(push(&etcd, &[&art.display().to_string()]).status.success());
    let url = redis.url();
    let mut flags = vec!["--redis", url.as_str(), "--sync-ms", "100"];
    flags.extend_from_slice(extra);
    let agents = [0, 1].map(|i| Agent::start(dir, &format!("cp{i}"), "eqiad", &etcd, &flags));
    eventually(
        Duration::from_secs(20),
        || {
            agents.iter().all(|a| {
                let s = a.status();
                let sh = &s["fleet"]["shared"];
                // The generation in force's limiters too (they go online
                // at the sync after it is installed).
                a.serving() == sha
                    && sh["online"] == true
                    && sh["limiters"]
                        .as_array()
                        .is_some_and(|l| l.len() == 2 && l.iter().all(|l| l["online"] == true))
            })
        },
        || {
            format!(
                "{:?}",
                agents
                    .iter()
                    .map(|a| a.status()["fleet"]["shared"].clone())
                    .collect::<Vec<_>>()
            )
        },
    );
    (c, agents)
}

/// The Retry-After of a check, if it was refused.
fn retry_after(r: &crate::agent::Resp) -> Option<u64> {
    (r.status == 429).then(|| {
        r.header("retry-after")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

#[test]
fn a_forged_ban_in_redis_lasts_no_longer_than_the_rules_and_not_at_all_without_one() {
    if !servers() {
        return;
    }
    let dir = tempdir("fleet-forged-ban");
    let redis = Redis::start(&dir.join("redis"));
    let (_c, agents) = pair(&dir, &redis, &[]);
    let victim = "203.0.113.77";
    // cp0 sees the victim once per rule, so that its buckets (and their
    // labels) are in Redis.
    assert_eq!(agents[0].check("/login", victim).status, 200);
    assert_eq!(agents[0].check("/api/x", victim).status, 200);
    let scan = || -> Vec<String> {
        redis
            .cli(&["--scan", "--pattern", "rctl:eqiad:l:*"])
            .lines()
            .map(|k| k.trim_start_matches("rctl:eqiad:l:").to_string())
            .collect()
    };
    eventually(
        Duration::from_secs(5),
        || scan().len() == 2,
        || format!("{:?} {}", scan(), agents[0].status()),
    );
    let labels = scan();
    // Anyone who can write to Redis: a ban of ten years on both keys.
    let now_us: u64 = {
        let t = redis.cli(&["TIME"]);
        let mut it = t.lines().map(|l| l.trim().parse::<u64>().unwrap());
        it.next().unwrap() * 1_000_000 + it.next().unwrap()
    };
    let until = (now_us + 10 * 365 * 86_400 * 1_000_000).to_string();
    for l in &labels {
        redis.cli(&[
            "XADD",
            "rctl:eqiad:bans",
            "*",
            "k",
            l,
            "u",
            &until,
            "h",
            "evil",
        ]);
    }
    // cp1 has not seen the victim: the bans wait for its first request.
    std::thread::sleep(Duration::from_millis(500));
    let login = agents[1].check("/login", victim);
    let after = retry_after(&login).unwrap_or_else(|| panic!("the login ban holds: {login:?}"));
    assert!(
        after <= 60,
        "a forged ban outlives the rule's 1m: Retry-After {after}"
    );
    let api = agents[1].check("/api/x", victim);
    assert_eq!(api.status, 200, "a rule without a ban was banned: {api:?}");
}

#[test]
fn bans_made_while_redis_is_down_reach_the_other_hosts_when_it_is_back() {
    if !servers() {
        return;
    }
    let dir = tempdir("fleet-offline-ban");
    let mut redis = Redis::start(&dir.join("redis"));
    let (_c, agents) = pair(&dir, &redis, &[]);
    redis.stop();
    eventually(
        Duration::from_secs(5),
        || {
            agents
                .iter()
                .all(|a| a.status()["fleet"]["shared"]["online"] == false)
        },
        String::new,
    );
    let ip = "203.0.113.50";
    // Over 2/s with a burst of 1 on cp0, alone: banned there.
    assert_eq!(agents[0].check("/login", ip).status, 200);
    assert_eq!(agents[0].check("/login", ip).status, 429);
    assert_eq!(
        agents[1].check("/login", ip).status,
        200,
        "cp1 counts alone"
    );
    redis.restart();
    eventually(
        Duration::from_secs(15),
        || {
            agents
                .iter()
                .all(|a| a.status()["fleet"]["shared"]["online"] == true)
        },
        String::new,
    );
    // The ban reaches cp1 (asked without a request: a request of its own
    // could make cp1 ban the key by itself).
    eventually(
        Duration::from_secs(3),
        || remote_bans(&agents[1], "login") >= 1,
        || format!("{}", agents[1].status()["fleet"]["shared"]),
    );
    // cp1 holds the key (it saw it offline): the ban takes hold at its
    // next drain, so at most one request a sync interval slips through.
    // Requests 600 ms apart stay under cp1's own 2/s: a refusal with a
    // Retry-After past a second is the ban.
    let mut seen = Vec::new();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(600));
        let r = agents[1].check("/login", ip);
        seen.push(r.status);
        if retry_after(&r).is_some_and(|s| s > 1) {
            return;
        }
    }
    panic!("the ban made offline never refused cp1's requests: {seen:?}");
}

/// The remote bans `rule`'s limiter took in on `a`.
fn remote_bans(a: &Agent, rule: &str) -> u64 {
    a.status()["fleet"]["shared"]["limiters"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["rule"] == rule))
        .and_then(|l| l["remote_bans"].as_u64())
        .unwrap_or(0)
}

#[test]
fn a_password_and_tls_are_used_and_an_open_redis_is_warned_about() {
    if !servers() {
        return;
    }
    let dir = tempdir("fleet-redis-auth");
    let ca = Ca::new(&dir.join("pki"), "redis");
    let server = ca.loopback_server("redis-server");
    let redis = Redis::start_with(
        &dir.join("redis"),
        Some("s3cret-rctl"),
        Some((ca.cert.clone(), server.cert.clone(), server.key.clone())),
    );
    assert!(redis.url().starts_with("rediss://:s3cret-rctl@"));
    let ca_flag = ca.cert.display().to_string();
    let (_c, agents) = pair(&dir, &redis, &["--redis-ca", &ca_flag]);
    let s = &agents[0].status()["fleet"]["shared"];
    assert_eq!(s["warning"], serde_json::Value::Null, "{s}");
    assert!(
        !s["redis"].as_str().unwrap().contains("s3cret"),
        "the password shows: {s}"
    );
    // Limits are shared over TLS: cp1 sees cp0's ban.
    let ip = "203.0.113.60";
    assert_eq!(agents[0].check("/login", ip).status, 200);
    assert_eq!(agents[0].check("/login", ip).status, 429);
    eventually(
        Duration::from_secs(3),
        || remote_bans(&agents[1], "login") >= 1,
        String::new,
    );
    drop(agents);
    // A Redis that takes anyone: the agent says so.
    let open = Redis::start(&dir.join("open"));
    let dir2 = dir.join("second");
    std::fs::create_dir_all(&dir2).unwrap();
    let (_c2, agents) = pair(&dir2, &open, &[]);
    let w = agents[0].status()["fleet"]["shared"]["warning"].clone();
    assert!(
        w.as_str().is_some_and(|w| w.contains("without a password")),
        "{w}"
    );
    assert!(agents[0].proc.stderr().contains("without a password"));
}

#[test]
fn keys_that_are_not_rctls_are_reported_and_the_rest_of_the_status_goes_on() {
    if !servers() {
        return;
    }
    let (dir, c) = cluster("fleet-unreadable");
    let etcd = c.urls();
    let a = denying(&dir, "a", "/a");
    assert!(push(&etcd, &[a.0.to_str().unwrap()]).status.success());
    let agents = vec![Agent::start(&dir, "cp0", "eqiad", &etcd, &[])];
    converged(&etcd, &agents, &a.1, "/a");
    c.put("/rctl/seen/bogus", b"not rctl's");
    c.put("/rctl/sites/esams/current", b"{\"garbage\": true}");
    let (ok, v) = fleet_status(&etcd);
    assert!(!ok, "converged with unreadable keys: {v}");
    let unreadable: Vec<&str> = v["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        unreadable,
        ["/rctl/sites/esams/current", "/rctl/seen/bogus"],
        "{v}"
    );
    let hosts: Vec<(&str, &str)> = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["host"].as_str().unwrap(), h["state"].as_str().unwrap()))
        .collect();
    assert_eq!(hosts, [("bogus", "unreadable"), ("cp0", "ok")], "{v}");
    let text = rctl(&["fleet", "status", "--etcd", &etcd]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("UNREADABLE /rctl/seen/bogus"), "{out}");
    assert!(!text.status.success());
}
