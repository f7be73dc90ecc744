//! Site-wide limits in Redis: the backend of `throttle … shared`.
//!
//! Each host counts on its own mirror of the site's buckets (see
//! `rctl_dataplane::limiter::Shared` for the algorithm and its error
//! bound) and syncs every `--sync-ms` (100 ms by default): it drains what
//! each touched key admitted and saw, and sends it all in **one pipelined
//! round trip** of the Lua script `sync.lua` (one call per 500 keys),
//! which moves the site's buckets, records the host as live, publishes
//! new bans and returns the buckets' state and the bans other hosts
//! published since the last sync. Never a Redis round trip per request.
//!
//! A ban made here wakes the sync at once, so that it reaches the other
//! hosts within their next sync.
//!
//! **Trust.** Whoever can write to the site's Redis can make hosts limit
//! keys: run it with a password or ACL user (`redis://USER:PASS@HOST`)
//! and TLS (`rediss://`, with `--redis-ca` for a private CA). The agent
//! warns when Redis accepted it without a password. What Redis says is
//! taken within what the rule allows: a ban no longer than the rule's
//! own, none for a rule without a ban, a bucket at most a few bursts
//! ahead (see `rctl_dataplane::limiter::Shared::apply`).
//!
//! **Nothing drained is lost.** A sync that fails after it drained keeps
//! what it drained (admissions, hits, bans) and sends it with the next
//! sync that succeeds; bans made while Redis was down are published then
//! too. What is kept is bounded by each limiter's table.
//!
//! **Failing open.** When Redis does not answer within the sync timeout,
//! or answers an error, every shared limiter goes offline: each host
//! counts its own traffic against the full limit (per-host limits, as
//! without `shared`), and counts the requests it decided that way
//! (`rctl_shared_offline_hits_total`, `rctl status`). Requests never wait
//! for Redis. The sync reconnects with backoff; once Redis answers,
//! sharing resumes from then on.
//!
//! Keys in Redis: `PREFIX:SITE:hosts`, `PREFIX:SITE:bans`, and one hash a
//! bucket, `PREFIX:SITE:l:RULE:KEYS:ID`, where `KEYS` is a digest of the
//! rule's unit and keys (a rule whose keys change starts afresh, as its
//! local state does) and `ID` the key's id in hex. One Redis per site
//! (not Redis Cluster: the script touches keys of many slots).

use crate::backoff::{sleep_or_stop, Backoff};
use crate::error::{ErrorKind, FleetError};
use rctl_agent::control::{SharedLimiter, SharedStatus};
use rctl_agent::judge::Judge;
use rctl_compiler::ir::{Action, Rule};
use rctl_dataplane::limiter::{Limiter, SharedDelta, SharedUpdate};
use sha2::{Digest as _, Sha256};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch::Receiver;

/// The script each sync runs.
const SCRIPT: &str = include_str!("sync.lua");

/// Buckets per script call.
const PER_CALL: usize = 500;

/// How to reach the site's Redis.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// `redis://host:port[/db]` (or `rediss://` for TLS, `unix:///path`).
    pub url: String,
    /// How often to sync.
    pub sync: Duration,
    /// How long a sync may take before the limits fail open.
    pub timeout: Duration,
    /// Key prefix.
    pub prefix: String,
    /// TLS settings for `rediss://` (PEM files).
    pub tls: RedisTls,
}

/// Certificates for a Redis reached over TLS.
#[derive(Debug, Clone, Default)]
pub struct RedisTls {
    /// The CA that signed the server's certificate (default: the system's).
    pub ca: Option<std::path::PathBuf>,
    /// A client certificate and its key, if the server asks for one.
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl RedisConfig {
    /// `url`, synced every `sync`; the timeout is the larger of the sync
    /// interval and 250 ms.
    pub fn new(url: &str, sync: Duration) -> RedisConfig {
        RedisConfig {
            url: url.to_string(),
            sync,
            timeout: sync.max(Duration::from_millis(250)),
            prefix: "rctl".into(),
            tls: RedisTls::default(),
        }
    }
}

/// The sync's state and counters.
pub struct Sync {
    config: RedisConfig,
    host: String,
    site: String,
    online: AtomicBool,
    hosts: AtomicU32,
    syncs_ok: AtomicU64,
    syncs_failed: AtomicU64,
    keys_synced: AtomicU64,
    bans_published: AtomicU64,
    last_sync_us: AtomicU64,
    last_error: Mutex<Option<String>>,
    warning: Mutex<Option<String>>,
    wake: Arc<tokio::sync::Notify>,
}

/// A limiter's namespace: `RULE:KEYS` (the digest of its unit and keys).
pub fn namespace(rule: &Rule) -> Option<String> {
    let Action::Throttle(t) = &rule.action else {
        return None;
    };
    let digest = Sha256::digest(format!("{:?}/{:?}", t.unit, t.keys).as_bytes());
    Some(format!(
        "{}:{}",
        rule.name,
        rctl_compiler::artifact::hex(&digest[..4])
    ))
}

/// Bytes as text, for Redis keys.
fn hex64(id: u64) -> String {
    format!("{id:016x}")
}

type Reply = (
    String,
    i64,
    Vec<(String, String, String, String)>,
    Vec<(String, String, String)>,
);

impl Sync {
    /// The sync of `host`'s shared limiters with `site`'s Redis.
    pub fn new(config: RedisConfig, host: &str, site: Option<&str>) -> Sync {
        Sync {
            config,
            host: host.to_string(),
            site: site.unwrap_or("all").to_string(),
            online: AtomicBool::new(false),
            hosts: AtomicU32::new(0),
            syncs_ok: AtomicU64::new(0),
            syncs_failed: AtomicU64::new(0),
            keys_synced: AtomicU64::new(0),
            bans_published: AtomicU64::new(0),
            last_sync_us: AtomicU64::new(0),
            last_error: Mutex::new(None),
            warning: Mutex::new(None),
            wake: Arc::new(tokio::sync::Notify::new()),
        }
    }

    fn key(&self, what: &str) -> String {
        format!("{}:{}:{what}", self.config.prefix, self.site)
    }

    /// Whether Redis answers.
    pub fn is_online(&self) -> bool {
        self.online.load(Relaxed)
    }

    /// What `rctl status` shows.
    pub fn status(&self, judge: &Judge) -> SharedStatus {
        let g = judge.current();
        let limiters = shared_limiters(&g.engine)
            .map(|(rule, l)| {
                let s = l.shared().map(|s| s.stats()).unwrap_or_default();
                SharedLimiter {
                    rule: rule.name.clone(),
                    online: s.online,
                    offline_hits: s.offline_hits,
                    remote_bans: s.remote_bans,
                }
            })
            .collect();
        SharedStatus {
            redis: redact(&self.config.url),
            site: self.site.clone(),
            online: self.is_online(),
            hosts: self.hosts.load(Relaxed),
            sync_ms: self.config.sync.as_millis() as u64,
            syncs_ok: self.syncs_ok.load(Relaxed),
            syncs_failed: self.syncs_failed.load(Relaxed),
            keys_synced: self.keys_synced.load(Relaxed),
            bans_published: self.bans_published.load(Relaxed),
            last_sync_us: self.last_sync_us.load(Relaxed),
            last_error: self
                .last_error
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default(),
            warning: self.warning.lock().map(|e| e.clone()).unwrap_or_default(),
            limiters,
        }
    }

    /// Counters for metrics: (online, syncs ok, syncs failed, offline
    /// hits per rule).
    pub fn counters(&self, judge: &Judge) -> (bool, u64, u64, Vec<(String, u64)>) {
        let g = judge.current();
        let offline = shared_limiters(&g.engine)
            .map(|(r, l)| {
                let s = l.shared().map(|s| s.stats()).unwrap_or_default();
                (r.name.clone(), s.offline_hits)
            })
            .collect();
        (
            self.is_online(),
            self.syncs_ok.load(Relaxed),
            self.syncs_failed.load(Relaxed),
            offline,
        )
    }

    /// A call of the script for `n` buckets (their arguments follow),
    /// reading the bans after `last_ban` if `bans`.
    fn call(&self, script: &redis::Script, last_ban: &str, bans: bool, n: usize) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(2)
            .arg(self.key("hosts"))
            .arg(self.key("bans"))
            .arg(&self.host)
            .arg(last_ban)
            .arg(self.config.sync.as_millis() as u64 * 5 + 1_000)
            .arg(u8::from(bans))
            .arg(n);
        cmd
    }

    /// Says once, where the agent's messages go, that Redis took us
    /// without a password; and keeps it for status.
    fn warn_unauthenticated(&self) {
        let Ok(mut w) = self.warning.lock() else {
            return;
        };
        if w.is_none() {
            let msg = format!(
                "Redis at {} accepted this agent without a password: any process that can reach \
                 it can limit or ban keys on every host of site {}; give it a password or ACL \
                 user (redis://USER:PASS@HOST) and TLS (rediss://)",
                redact(&self.config.url),
                self.site
            );
            eprintln!("rctl agent: warning: {msg}");
            *w = Some(msg);
        }
    }

    fn set_error(&self, e: Option<String>) {
        if let Ok(mut l) = self.last_error.lock() {
            *l = e;
        }
    }
}

/// The URL without a password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_string(),
    }
}

/// The shared limiters of an engine, with their rules.
fn shared_limiters(
    engine: &rctl_dataplane::Engine,
) -> impl Iterator<Item = (&Rule, &Limiter)> + '_ {
    engine
        .ruleset()
        .rules
        .iter()
        .enumerate()
        .filter_map(move |(i, r)| engine.limiter(i).filter(|l| l.is_shared()).map(|l| (r, l)))
}

fn set_online(judge: &Judge, online: bool) {
    let g = judge.current();
    for (_, l) in shared_limiters(&g.engine) {
        if let Some(s) = l.shared() {
            s.set_online(online);
        }
    }
}

/// The sync task: runs until `stop` fires.
pub async fn run(sync: Arc<Sync>, judge: Arc<Judge>, mut stop: Receiver<bool>) {
    let mut wait = Backoff::new();
    let mut last_ban = "0".to_string();
    let mut unsent = Unsent::default();
    loop {
        if *stop.borrow() {
            return;
        }
        let result = session(
            &sync,
            &judge,
            &mut last_ban,
            &mut unsent,
            &mut stop,
            &mut wait,
        )
        .await;
        let was_online = sync.online.swap(false, Relaxed);
        set_online(&judge, false);
        match result {
            Ok(()) => return,
            Err(e) => {
                if was_online {
                    // One line an event, where the agent's messages go.
                    eprintln!(
                        "rctl agent: redis down: {}; shared limits count on each host alone until it answers",
                        e.message
                    );
                }
                sync.syncs_failed.fetch_add(1, Relaxed);
                sync.set_error(Some(e.message));
            }
        }
        if sleep_or_stop(wait.next(), &mut stop).await {
            return;
        }
    }
}

fn redis_error(e: redis::RedisError) -> FleetError {
    FleetError::new(ErrorKind::Unavailable, format!("redis: {e}"))
}

/// What a failed sync drained and did not get to Redis, per limiter
/// namespace: sent with the next sync that succeeds.
type Unsent = std::collections::HashMap<String, Vec<SharedDelta>>;

/// `new` and what was left from before, one delta a key (counts added,
/// the longer ban kept), at most `cap` keys: bans first, then the keys
/// that admitted most.
fn merge(mut new: Vec<SharedDelta>, old: Vec<SharedDelta>, cap: usize) -> Vec<SharedDelta> {
    if old.is_empty() {
        return new;
    }
    new.extend(old);
    SharedDelta::merge(&mut new);
    if new.len() > cap {
        new.sort_unstable_by_key(|d| {
            (
                std::cmp::Reverse(d.ban_ns > 0),
                std::cmp::Reverse(d.admitted),
            )
        });
        new.truncate(cap);
    }
    new
}

/// A client for the configured URL, with the TLS files read.
fn client(config: &RedisConfig) -> Result<redis::Client, FleetError> {
    let t = &config.tls;
    if t.ca.is_none() && t.client.is_none() {
        return redis::Client::open(config.url.as_str()).map_err(redis_error);
    }
    let read = |p: &std::path::Path| {
        std::fs::read(p)
            .map_err(|e| FleetError::new(ErrorKind::Invalid, format!("{}: {e}", p.display())))
    };
    let certs = redis::TlsCertificates {
        client_tls: match &t.client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            None => None,
        },
        root_cert: t.ca.as_deref().map(read).transpose()?,
    };
    redis::Client::build_with_tls(config.url.as_str(), certs).map_err(redis_error)
}

/// Whether the URL names a password (`redis://[USER]:PASS@…`).
fn has_password(url: &str) -> bool {
    let Some(rest) = url.split_once("://").map(|(_, r)| r) else {
        return false;
    };
    let auth = rest.split(['/', '?']).next().unwrap_or("");
    auth.rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.split_once(':').is_some_and(|(_, p)| !p.is_empty()))
}

async fn session(
    sync: &Arc<Sync>,
    judge: &Arc<Judge>,
    last_ban: &mut String,
    unsent: &mut Unsent,
    stop: &mut Receiver<bool>,
    wait: &mut Backoff,
) -> Result<(), FleetError> {
    let client = client(&sync.config)?;
    let cfg = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(sync.config.timeout))
        .set_response_timeout(Some(sync.config.timeout));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .map_err(redis_error)?;
    let script = redis::Script::new(SCRIPT);
    script.load_async(&mut conn).await.map_err(redis_error)?;
    if !has_password(&sync.config.url) {
        // It answered a command, and we gave it no password.
        sync.warn_unauthenticated();
    }
    let mut tick = tokio::time::interval(sync.config.sync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut deltas: Vec<SharedDelta> = Vec::new();
    let wake = Arc::clone(&sync.wake);
    loop {
        let g = judge.current();
        let limiters: Vec<(String, &Limiter)> = shared_limiters(&g.engine)
            .filter_map(|(r, l)| namespace(r).map(|n| (n, l)))
            .collect();
        // What was kept for limiters that are gone (a new ruleset) goes.
        unsent.retain(|ns, _| limiters.iter().any(|(n, _)| n == ns));
        let now_ns = judge.now_ns();
        let mut pipe = redis::pipe();
        let mut spans = Vec::new();
        let (mut calls, mut published) = (0, 0);
        for (li, (ns, l)) in limiters.iter().enumerate() {
            let s = l
                .shared()
                .ok_or_else(|| FleetError::new(ErrorKind::Invalid, "not shared"))?;
            let w = Arc::clone(&wake);
            s.set_waker(Arc::new(move || w.notify_one()));
            if !s.is_online() {
                s.set_online(true);
            }
            deltas.clear();
            s.drain(now_ns, &mut deltas);
            let deltas = merge(
                std::mem::take(&mut deltas),
                unsent.remove(ns).unwrap_or_default(),
                l.capacity(),
            );
            let gcra = s.gcra();
            for part in deltas.chunks(PER_CALL) {
                let mut cmd = sync.call(&script, last_ban, calls == 0, part.len());
                for d in part {
                    published += u64::from(d.ban_ns > 0);
                    cmd.arg(sync.key(&format!("l:{ns}:{}", hex64(d.id))))
                        .arg(gcra.interval_ns as f64 / 1_000.0)
                        .arg(d.admitted)
                        .arg(d.hits)
                        .arg(d.ban_ns / 1_000)
                        .arg(10_000)
                        .arg(format!("{ns}:{}", hex64(d.id)));
                }
                pipe.add_command(cmd);
                spans.push((li, part.to_vec()));
                calls += 1;
            }
        }
        if calls == 0 {
            // Nothing touched: still read the bans and say this host lives.
            pipe.add_command(sync.call(&script, last_ban, true, 0));
        }
        let t = Instant::now();
        let answered: Result<Vec<Reply>, FleetError> =
            match tokio::time::timeout(sync.config.timeout, pipe.query_async(&mut conn)).await {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e))
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    // Redis restarted and lost the script: load it again.
                    match script.load_async(&mut conn).await {
                        Ok(_) => pipe.query_async(&mut conn).await.map_err(redis_error),
                        Err(e) => Err(redis_error(e)),
                    }
                }
                Ok(Err(e)) => Err(redis_error(e)),
                Err(_) => Err(FleetError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "redis did not answer a sync within {} ms",
                        sync.config.timeout.as_millis()
                    ),
                )),
            };
        let replies = match answered {
            Ok(r) => r,
            Err(e) => {
                // Kept for the next sync that succeeds. (A sync that timed
                // out may have reached Redis: sent again, its counts then
                // count twice, which errs on the strict side; a ban is the
                // same ban.)
                for (li, part) in spans {
                    unsent
                        .entry(limiters[li].0.clone())
                        .or_default()
                        .extend(part);
                }
                return Err(e);
            }
        };
        let now_ns = judge.now_ns();
        for ((li, part), reply) in spans.iter().zip(&replies) {
            let updates: Vec<SharedUpdate> = part
                .iter()
                .zip(&reply.2)
                .map(|(d, (ahead, n, h, ban))| SharedUpdate {
                    id: d.id,
                    ahead_ns: ahead.parse::<u64>().unwrap_or(0).saturating_mul(1_000),
                    admitted_total: n.parse().unwrap_or(0),
                    hits_total: h.parse().unwrap_or(0),
                    ban_ns: ban.parse::<u64>().unwrap_or(0).saturating_mul(1_000),
                })
                .collect();
            if let Some(s) = limiters[*li].1.shared() {
                s.apply(now_ns, &updates);
            }
        }
        if let Some(first) = replies.first() {
            sync.hosts
                .store(u32::try_from(first.1).unwrap_or(1), Relaxed);
            for (id, label, left) in &first.3 {
                *last_ban = id.clone();
                let left_us: i64 = left.parse().unwrap_or(0);
                let Some((ns, key)) = label.rsplit_once(':') else {
                    continue;
                };
                let Ok(key) = u64::from_str_radix(key, 16) else {
                    continue;
                };
                if left_us <= 0 {
                    continue;
                }
                for (n, l) in &limiters {
                    if n == ns {
                        if let Some(s) = l.shared() {
                            s.remote_ban(key, (left_us as u64).saturating_mul(1_000), now_ns);
                        }
                    }
                }
            }
        }
        for (_, l) in &limiters {
            if let Some(s) = l.shared() {
                s.set_new_key_weight(sync.hosts.load(Relaxed));
            }
        }
        if !sync.online.swap(true, Relaxed) {
            eprintln!(
                "rctl agent: redis up at {}: shared limits counted site-wide ({} hosts)",
                redact(&sync.config.url),
                sync.hosts.load(Relaxed)
            );
        }
        sync.set_error(None);
        sync.syncs_ok.fetch_add(1, Relaxed);
        sync.bans_published.fetch_add(published, Relaxed);
        sync.keys_synced
            .fetch_add(spans.iter().map(|s| s.1.len() as u64).sum(), Relaxed);
        sync.last_sync_us.store(
            u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
            Relaxed,
        );
        wait.reset();
        drop(limiters);
        drop(g);
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            _ = tick.tick() => {}
            () = wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(id: u64, admitted: u32, ban_ns: u64) -> SharedDelta {
        SharedDelta {
            id,
            admitted,
            hits: admitted,
            ban_ns,
        }
    }

    #[test]
    fn what_a_failed_sync_kept_is_sent_with_the_next_once_per_key_bans_first() {
        let merged = merge(
            vec![d(1, 2, 0), d(2, 1, 0)],
            vec![d(1, 3, 5), d(3, 9, 0)],
            10,
        );
        assert_eq!(merged, vec![d(1, 5, 5), d(2, 1, 0), d(3, 9, 0)]);
        // Over the cap: the ban stays, then the keys that admitted most.
        let capped = merge(vec![d(1, 1, 7), d(2, 5, 0)], vec![d(3, 9, 0)], 2);
        assert_eq!(capped, vec![d(1, 1, 7), d(3, 9, 0)]);
        assert_eq!(merge(vec![d(4, 1, 0)], Vec::new(), 0), vec![d(4, 1, 0)]);
    }

    #[test]
    fn a_password_is_seen_in_the_url() {
        assert!(has_password("redis://:secret@127.0.0.1:6379"));
        assert!(has_password("rediss://rctl:s3@redis.example:6380/2"));
        assert!(!has_password("redis://127.0.0.1:6379"));
        assert!(!has_password("redis://rctl@127.0.0.1:6379"));
        assert!(!has_password("redis://:@127.0.0.1"));
        assert!(!has_password("unix:///run/redis.sock"));
        assert_eq!(
            redact("redis://rctl:s3@redis.example:6380/2"),
            "redis://***@redis.example:6380/2"
        );
    }
}
