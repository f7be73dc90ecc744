//! Deciding live requests: the generation in force and its engine.
//!
//! A [`Judge`] holds the ruleset generation in force behind an atomic
//! pointer. Each request takes one snapshot ([`Judge::current`]) and is
//! decided by it alone, so a swap ([`Judge::install`]) never makes a
//! request see a mix of rulesets: requests already in flight finish on
//! the old generation, later ones start on the new.

use arc_swap::ArcSwap;
pub use rctl_dataplane::answer::{Action, Outcome};
use rctl_dataplane::{Decision, Engine, Request, Scratch};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// One loaded ruleset: the engine and what identifies it.
pub struct Generation {
    /// The compiled engine (its limiters hold the live buckets).
    pub engine: Engine,
    /// The artifact's content SHA-256 (hex), as `rctl compile` prints it.
    pub sha256: String,
    /// Counts loads since the agent started, from 1.
    pub number: u64,
    /// When it was installed, seconds since the epoch.
    pub installed_unix: u64,
}

/// The request fields a proxy sends. Every field is bytes, as received.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    /// Method.
    pub method: &'a [u8],
    /// Host header or authority.
    pub host: &'a [u8],
    /// Path with its `?query`, as sent.
    pub target: &'a [u8],
    /// The headers the ruleset reads (others may be present).
    pub headers: &'a [(&'a [u8], &'a [u8])],
    /// Client address.
    pub ip: IpAddr,
    /// The address the client reached, if the proxy sends it.
    pub dst: Option<IpAddr>,
    /// Destination port.
    pub port: u16,
}

impl<'a> Fields<'a> {
    /// The engine's request of these fields, at `time_ns` on the
    /// limiters' clock.
    pub fn request(&self, time_ns: u64) -> Request<'a> {
        Request {
            method: self.method,
            host: self.host,
            target: self.target,
            headers: self.headers,
            ip: self.ip,
            dst: self.dst,
            port: self.port,
            time_ns,
        }
    }
}

/// Sees every decision and every failure of the listeners: metrics and
/// the matched-request log implement it. Called on the request path, so
/// implementations must be cheap and must not block.
pub trait Observer: Send + Sync {
    /// A request was decided by `generation` in `elapsed`.
    fn decided(
        &self,
        generation: &Generation,
        fields: &Fields<'_>,
        outcome: &Outcome,
        decision: &Decision,
        elapsed: std::time::Duration,
    );
    /// A listener refused or lost a peer (`kind`: a short stable label
    /// such as `spop-frame` or `http-request`; `detail` for logs).
    fn failed(&self, kind: &'static str, detail: &str);
}

/// An observer that records nothing.
pub struct NoObserver;

impl Observer for NoObserver {
    fn decided(
        &self,
        _: &Generation,
        _: &Fields<'_>,
        _: &Outcome,
        _: &Decision,
        _: std::time::Duration,
    ) {
    }
    fn failed(&self, _: &'static str, _: &str) {}
}

/// The generation in force and how to judge with it.
pub struct Judge {
    current: ArcSwap<Generation>,
    /// Whole-ruleset shadow mode: decide, tag and count, never enforce.
    shadow: bool,
    /// The origin of the limiters' clock (monotonic, shared by every
    /// generation, so that carried buckets keep their meaning).
    epoch: Instant,
    /// What the proxies in front say their configuration covers.
    proxies: crate::proxies::Proxies,
}

impl Judge {
    /// A judge starting with `first`.
    pub fn new(first: Generation, shadow: bool) -> Judge {
        Judge {
            current: ArcSwap::from_pointee(first),
            shadow,
            epoch: Instant::now(),
            proxies: crate::proxies::Proxies::default(),
        }
    }

    /// The generation in force now. Decide a request with one snapshot.
    pub fn current(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// Makes `next` the generation in force; returns the one it replaced.
    pub fn install(&self, next: Generation) -> Arc<Generation> {
        self.current.swap(Arc::new(next))
    }

    /// What the proxies in front say their configuration covers.
    pub fn proxies(&self) -> &crate::proxies::Proxies {
        &self.proxies
    }

    /// Whether the whole ruleset runs in shadow mode.
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// Nanoseconds on the limiters' clock.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Decides one request with the generation in force.
    pub fn decide(&self, f: &Fields<'_>) -> (Outcome, Decision) {
        let generation = self.current();
        self.decide_with(&generation, f)
    }

    /// Decides one request with `generation` (a snapshot from
    /// [`Judge::current`]).
    pub fn decide_with(&self, generation: &Generation, f: &Fields<'_>) -> (Outcome, Decision) {
        self.decide_in(generation, f, &mut generation.engine.scratch())
    }

    /// [`Judge::decide_with`] reusing `scratch`, which must come from
    /// `generation.engine.scratch()`. A fresh scratch per request costs
    /// more than the decision (its lazy-DFA caches start cold): listeners
    /// keep one per connection and generation.
    pub fn decide_in(
        &self,
        generation: &Generation,
        f: &Fields<'_>,
        scratch: &mut Scratch,
    ) -> (Outcome, Decision) {
        let req = f.request(self.now_ns());
        let engine = &generation.engine;
        let decision = engine.decide_request_with(&req, scratch, None);
        let out = Outcome::of(&decision, engine, generation.number, self.shadow);
        (out, decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctl_dataplane::EngineConfig;

    fn judge(src: &str, shadow: bool) -> Judge {
        let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
        let rs = c.ruleset.expect("compiles");
        let engine = Engine::new(rs, &EngineConfig::default()).unwrap();
        Judge::new(
            Generation {
                engine,
                sha256: String::new(),
                number: 1,
                installed_unix: 0,
            },
            shadow,
        )
    }

    fn get<'a>(
        target: &'a str,
        ua: &'a str,
        hdrs: &'a mut Vec<(&'a [u8], &'a [u8])>,
    ) -> Fields<'a> {
        hdrs.push((b"User-Agent", ua.as_bytes()));
        Fields {
            method: b"GET",
            host: b"query.example.org",
            target: target.as_bytes(),
            headers: hdrs,
            ip: "192.0.2.7".parse().unwrap(),
            dst: None,
            port: 443,
        }
    }

    const RULES: &str = r#"
rule bots { when header("user-agent") starts_with "bot/" deny 403 "no bots" }
rule watch { when path == "/w" log }
rule slow { when path == "/s" throttle 1 requests per 1m burst 1 by ip }
"#;

    #[test]
    fn verdicts_become_actions_with_status_reason_and_tags() {
        let j = judge(RULES, false);
        let mut h = Vec::new();
        let (o, _) = j.decide(&get("/w", "bot/1", &mut h));
        assert_eq!(o.action, Action::Deny);
        assert_eq!((o.status, o.reason.as_str()), (403, "no bots"));
        assert_eq!(o.rule.as_deref(), Some("bots"));
        let mut h = Vec::new();
        let (o, _) = j.decide(&get("/w", "curl/8", &mut h));
        assert_eq!(
            (o.action, o.tags.clone()),
            (Action::Pass, vec!["watch".to_string()])
        );
        let mut h = Vec::new();
        assert_eq!(
            j.decide(&get("/s", "curl/8", &mut h)).0.action,
            Action::Pass
        );
        let mut h = Vec::new();
        let (o, _) = j.decide(&get("/s", "curl/8", &mut h));
        assert_eq!((o.action, o.status), (Action::Throttle, 429));
        assert!(o.retry_after_s >= 1);
    }

    #[test]
    fn whole_ruleset_shadow_never_blocks_but_says_what_it_would_do() {
        let j = judge(RULES, true);
        let mut h = Vec::new();
        let (o, _) = j.decide(&get("/", "bot/1", &mut h));
        assert_eq!(o.action, Action::Pass);
        assert_eq!(o.shadowed, Some(Action::Deny));
        assert_eq!(o.rule.as_deref(), Some("bots"));
    }
}
