//! What the agent counts, for Prometheus (`--metrics ADDR`, `/metrics`)
//! and `rctl status`.
//!
//! Every count on the request path is a relaxed atomic add: no lock, no
//! allocation (prometheus-client's own histogram and families take locks,
//! so the counts live here and are encoded with its text encoder at
//! scrape time). Metric names (Prometheus text format 0.0.4):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `rctl_requests_total` | `action` | requests answered, by the action returned: `pass`, `allow`, `deny`, `throttle`, `drop` |
//! | `rctl_shadowed_total` | `action` | in whole-ruleset shadow mode (`--shadow`), what would have been enforced |
//! | `rctl_rule_matches_total` | `rule` | times the rule decided a request or was recorded as a `log`/`shadow` match (a throttle under its limit decides nothing and is not counted) |
//! | `rctl_rule_verdicts_total` | `rule`, `verdict` | the same matches by what the rule did: `allow`, `deny`, `throttle`, `drop`; `log`; `shadow_pass`, `shadow_allow`, `shadow_deny`, `shadow_throttle`, `shadow_drop` for what a shadow rule (or `--shadow`) would have done |
//! | `rctl_decision_seconds` | | histogram of the time to decide a request (from the request's fields to the verdict) |
//! | `rctl_limiter_keys` | `rule` | keys each throttle rule of the generation in force tracks |
//! | `rctl_limiter_banned` | `rule` | of those, the keys banned now |
//! | `rctl_reloads_total` | `result` | generations loaded through the control socket: `ok`, `failed` |
//! | `rctl_listener_errors_total` | `kind` | requests or frames refused and peers lost, by kind (`http-request`, `http-parse`, …) |
//! | `rctl_generation` | | the generation in force |
//! | `rctl_generation_installed_seconds` | | when it was installed (unix time) |
//! | `rctl_start_time_seconds` | | when the agent started (unix time) |
//!
//! Rule series appear once a rule has counted something, and stay while
//! the rule (by name) is in the ruleset in force.

use crate::byrule::ByRule;
use crate::judge::{Action, Fields, Generation, Judge, Observer, Outcome};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use rctl_compiler::ir::Action as RuleAction;
use rctl_dataplane::{Decision, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The five actions, in this order everywhere.
pub const ACTIONS: [Action; 5] = [
    Action::Pass,
    Action::Allow,
    Action::Deny,
    Action::Throttle,
    Action::Drop,
];

/// What a rule did in a match, as `rctl_rule_verdicts_total` labels it.
pub const VERDICTS: [&str; 10] = [
    "allow",
    "deny",
    "throttle",
    "drop",
    "log",
    "shadow_pass",
    "shadow_allow",
    "shadow_deny",
    "shadow_throttle",
    "shadow_drop",
];

/// Upper bounds of the decision-time histogram's buckets, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 1e-1,
];

fn action_index(a: Action) -> usize {
    match a {
        Action::Pass => 0,
        Action::Allow => 1,
        Action::Deny => 2,
        Action::Throttle => 3,
        Action::Drop => 4,
    }
}

/// Index in [`VERDICTS`] of a verdict, enforced or (shadow) not.
fn verdict_index(v: &Verdict, shadow: bool) -> usize {
    let k = match v {
        Verdict::Pass => return 5,
        Verdict::Allow { .. } => 0,
        Verdict::Deny { .. } => 1,
        Verdict::Throttle { .. } => 2,
        Verdict::Drop { .. } => 3,
    };
    if shadow {
        k + 6
    } else {
        k
    }
}

/// One rule's counters.
#[derive(Debug, Default)]
pub(crate) struct RuleCounters {
    matches: AtomicU64,
    verdicts: [AtomicU64; VERDICTS.len()],
}

/// A histogram of atomics.
#[derive(Debug, Default)]
struct Latency {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl Latency {
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_ns
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }
}

/// Everything the agent counts. Implements [`Observer`].
pub struct Metrics {
    judge: Arc<Judge>,
    requests: [AtomicU64; 5],
    shadowed: [AtomicU64; 5],
    rules: ByRule<RuleCounters>,
    latency: Latency,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    started_unix: u64,
    planes: Mutex<Vec<(String, PlaneProbe)>>,
}

/// Says whether a plane enforces now (asked at each scrape).
pub type PlaneProbe = Arc<dyn Fn() -> bool + Send + Sync>;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("generation", &self.judge.current().number)
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

/// One rule's counts, for `rctl status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleCount {
    /// Rule name.
    pub rule: String,
    /// Matches (see `rctl_rule_matches_total`).
    pub matches: u64,
    /// Non-zero counts by verdict label.
    pub verdicts: BTreeMap<String, u64>,
}

/// One throttle rule's limiter, for `rctl status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimiterFill {
    /// Rule name.
    pub rule: String,
    /// Keys tracked.
    pub keys: usize,
    /// Keys banned now.
    pub banned: usize,
    /// The most keys it holds.
    pub capacity: usize,
}

/// The counters, read at once (for `rctl status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Requests by action returned.
    pub requests: BTreeMap<String, u64>,
    /// In shadow mode: what would have been enforced.
    pub shadowed: BTreeMap<String, u64>,
    /// Rules that counted something, by name.
    pub rules: Vec<RuleCount>,
    /// Throttle rules of the generation in force.
    pub limiters: Vec<LimiterFill>,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
    /// Successful reloads.
    pub reloads_ok: u64,
    /// Failed reloads (prepare or load refused).
    pub reloads_failed: u64,
}

impl Metrics {
    /// Counters for the agent deciding with `judge`.
    pub fn new(judge: Arc<Judge>) -> Metrics {
        Metrics {
            judge,
            requests: Default::default(),
            shadowed: Default::default(),
            rules: ByRule::default(),
            latency: Latency::default(),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            errors: Mutex::new(BTreeMap::new()),
            started_unix: crate::now_unix(),
            planes: Mutex::new(Vec::new()),
        }
    }

    /// Adds a plane to `rctl_up` (the HTTP plane is always there: it is
    /// this agent), asked by `probe` at each scrape.
    pub fn add_plane(&self, name: &str, probe: PlaneProbe) {
        self.planes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_string(), probe));
    }

    /// Counts a reload through the control socket.
    pub fn reloaded(&self, ok: bool) {
        if ok {
            &self.reloads_ok
        } else {
            &self.reloads_failed
        }
        .fetch_add(1, Relaxed);
    }

    /// When the agent started (unix seconds).
    pub fn started_unix(&self) -> u64 {
        self.started_unix
    }

    fn limiters(&self) -> Vec<LimiterFill> {
        let g = self.judge.current();
        let now = self.judge.now_ns();
        (0..g.engine.ruleset().rules.len())
            // Packet and connection limits are the XDP program's.
            .filter(|&i| !g.engine.rule(i).is_packet_limit())
            .filter_map(|i| {
                let f = g.engine.limiter(i)?.fill(now);
                Some(LimiterFill {
                    rule: g.engine.rule(i).name.clone(),
                    keys: f.keys,
                    banned: f.banned,
                    capacity: f.capacity,
                })
            })
            .collect()
    }

    /// Reads every counter.
    pub fn counts(&self) -> Counts {
        let by_action = |a: &[AtomicU64; 5]| {
            ACTIONS
                .iter()
                .zip(a)
                .map(|(k, v)| (k.as_str().to_string(), v.load(Relaxed)))
                .collect()
        };
        let rules = self
            .rules
            .all()
            .into_iter()
            .filter(|(_, c)| c.matches.load(Relaxed) > 0)
            .map(|(rule, c)| RuleCount {
                rule,
                matches: c.matches.load(Relaxed),
                verdicts: VERDICTS
                    .iter()
                    .zip(&c.verdicts)
                    .map(|(k, v)| (k.to_string(), v.load(Relaxed)))
                    .filter(|(_, v)| *v > 0)
                    .collect(),
            })
            .collect();
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        Counts {
            requests: by_action(&self.requests),
            shadowed: by_action(&self.shadowed),
            rules,
            limiters: self.limiters(),
            errors: errors.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            reloads_ok: self.reloads_ok.load(Relaxed),
            reloads_failed: self.reloads_failed.load(Relaxed),
        }
    }

    /// The Prometheus text exposition (format 0.0.4) of these counters
    /// and of `extra` collectors (the request log's).
    pub fn render(self: &Arc<Self>, extra: &[Arc<dyn Collector>]) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Arc::clone(self)));
        for c in extra {
            registry.register_collector(Box::new(Shared(Arc::clone(c))));
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
        out
    }
}

/// A shared collector, registered by reference.
#[derive(Debug)]
struct Shared(Arc<dyn Collector>);

impl Collector for Shared {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

/// Writes a counter family of `(label value, count)` under one label.
pub fn counter_family<'a>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (v, n) in values {
        let labels = [(label, v)];
        ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes a gauge without labels.
pub fn gauge(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: i64,
) -> Result<(), std::fmt::Error> {
    let m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

impl Collector for Metrics {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = self.counts();
        counter_family(
            &mut e,
            "rctl_requests",
            "Requests answered, by the action returned",
            "action",
            c.requests.iter().map(|(k, v)| (k.as_str(), *v)),
        )?;
        counter_family(
            &mut e,
            "rctl_shadowed",
            "In whole-ruleset shadow mode, what would have been enforced",
            "action",
            c.shadowed.iter().map(|(k, v)| (k.as_str(), *v)),
        )?;
        counter_family(
            &mut e,
            "rctl_rule_matches",
            "Times the rule decided a request or was recorded as a log or shadow match",
            "rule",
            c.rules.iter().map(|r| (r.rule.as_str(), r.matches)),
        )?;
        {
            let mut m = e.encode_descriptor(
                "rctl_rule_verdicts",
                "Rule matches by what the rule did (shadow_X: what it would have done)",
                None,
                MetricType::Counter,
            )?;
            for r in &c.rules {
                for (v, n) in &r.verdicts {
                    let labels = [("rule", r.rule.as_str()), ("verdict", v.as_str())];
                    ConstCounter::new(*n).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        // Per-bucket counts: the encoder makes them cumulative.
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(&self.latency.buckets)
            .map(|(b, n)| (b, n.load(Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        e.encode_descriptor(
            "rctl_decision_seconds",
            "Time to decide a request",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.latency.sum_ns.load(Relaxed) as f64 / 1e9,
            count,
            &buckets,
            None,
        )?;
        for (name, help, get) in [
            (
                "rctl_limiter_keys",
                "Keys each throttle rule of the generation in force tracks",
                (|l: &LimiterFill| l.keys) as fn(&LimiterFill) -> usize,
            ),
            (
                "rctl_limiter_banned",
                "Keys each throttle rule bans now",
                |l: &LimiterFill| l.banned,
            ),
        ] {
            let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for l in &c.limiters {
                let labels = [("rule", l.rule.as_str())];
                ConstGauge::new(get(l) as i64).encode(m.encode_family(&labels)?)?;
            }
        }
        counter_family(
            &mut e,
            "rctl_reloads",
            "Generations loaded through the control socket",
            "result",
            [("ok", c.reloads_ok), ("failed", c.reloads_failed)],
        )?;
        counter_family(
            &mut e,
            "rctl_listener_errors",
            "Requests or frames refused and peers lost, by kind",
            "kind",
            c.errors.iter().map(|(k, v)| (k.as_str(), *v)),
        )?;
        let g = self.judge.current();
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        gauge(
            &mut e,
            "rctl_generation",
            "The generation in force",
            as_i64(g.number),
        )?;
        gauge(
            &mut e,
            "rctl_generation_installed_seconds",
            "When the generation in force was installed (unix time)",
            as_i64(g.installed_unix),
        )?;
        gauge(
            &mut e,
            "rctl_start_time_seconds",
            "When the agent started (unix time)",
            as_i64(self.started_unix),
        )?;
        {
            let mut m = e.encode_descriptor(
                "rctl_up",
                "1 while the plane enforces (http: this agent answers; xdp: the program is attached)",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(1).encode(m.encode_family(&[("plane", "http")])?)?;
            let planes = self
                .planes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            for (name, probe) in planes {
                let up = i64::from(probe());
                ConstGauge::new(up).encode(m.encode_family(&[("plane", name.as_str())])?)?;
            }
        }
        let mut m = e.encode_descriptor(
            "rctl_proxy_config_stale",
            "1 while a proxy's configuration lacks a header or status the ruleset in force needs (emit it again)",
            None,
            MetricType::Gauge,
        )?;
        for p in self.judge.proxies().against(g.engine.ruleset()) {
            let labels = [("proxy", p.proxy.as_str())];
            ConstGauge::new(i64::from(!p.stale.is_empty())).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

impl Observer for Metrics {
    fn decided(
        &self,
        g: &Generation,
        _: &Fields<'_>,
        outcome: &Outcome,
        decision: &Decision,
        elapsed: Duration,
    ) {
        self.requests[action_index(outcome.action)].fetch_add(1, Relaxed);
        if let Some(a) = outcome.shadowed {
            self.shadowed[action_index(a)].fetch_add(1, Relaxed);
        }
        self.latency.observe(elapsed);
        if decision.verdict.rule().is_none() && decision.logged.is_empty() {
            return;
        }
        let rules = self.rules.of(g);
        if let Some(i) = decision.verdict.rule() {
            if let Some(c) = rules.get(i) {
                c.matches.fetch_add(1, Relaxed);
                c.verdicts[verdict_index(&decision.verdict, outcome.shadowed.is_some())]
                    .fetch_add(1, Relaxed);
            }
        }
        for (i, v) in &decision.logged {
            let Some(c) = rules.get(*i) else { continue };
            c.matches.fetch_add(1, Relaxed);
            let k = if g.engine.rule(*i).action == RuleAction::Log {
                4
            } else {
                verdict_index(v, true)
            };
            c.verdicts[k].fetch_add(1, Relaxed);
        }
    }

    fn failed(&self, kind: &'static str, _detail: &str) {
        let mut e = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        *e.entry(kind).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::byrule::tests::generation;

    const RULES: &str = r#"
rule watch { when path == "/w" log }
rule try { when path == "/w" shadow deny 403 "would" }
rule bots { when header("user-agent") starts_with "bot/" deny 403 "no bots" }
rule slow { when path == "/s" throttle 1 requests per 1m burst 1 by ip }
"#;

    fn get<'a>(target: &'a str, ua: &'a [u8], h: &'a mut Vec<(&'a [u8], &'a [u8])>) -> Fields<'a> {
        h.push((b"user-agent", ua));
        Fields {
            method: b"GET",
            host: b"example.org",
            target: target.as_bytes(),
            headers: h,
            ip: "192.0.2.1".parse().unwrap(),
            dst: None,
            port: 443,
        }
    }

    #[test]
    fn counts_by_action_rule_and_verdict_and_renders_them() {
        let judge = Arc::new(Judge::new(generation(RULES, 7), false));
        let m = Arc::new(Metrics::new(Arc::clone(&judge)));
        let send = |target: &str, ua: &[u8]| {
            let mut h = Vec::new();
            let f = get(target, ua, &mut h);
            let g = judge.current();
            let (o, d) = judge.decide_with(&g, &f);
            m.decided(&g, &f, &o, &d, Duration::from_micros(3));
        };
        send("/w", b"curl/8");
        send("/w", b"bot/1");
        send("/s", b"curl/8");
        send("/s", b"curl/8");
        send("/", b"curl/8");
        m.failed("http-request", "no client address");
        m.reloaded(false);
        let c = m.counts();
        assert_eq!(c.requests["pass"], 3);
        assert_eq!(c.requests["deny"], 1);
        assert_eq!(c.requests["throttle"], 1);
        let rule = |n: &str| c.rules.iter().find(|r| r.rule == n).cloned();
        assert_eq!(rule("watch").unwrap().verdicts["log"], 2);
        assert_eq!(rule("try").unwrap().verdicts["shadow_deny"], 2);
        assert_eq!(rule("bots").unwrap().verdicts["deny"], 1);
        let slow = rule("slow").unwrap();
        assert_eq!((slow.matches, slow.verdicts["throttle"]), (1, 1));
        assert_eq!(c.limiters[0].keys, 1);
        let text = m.render(&[]);
        for line in [
            "rctl_requests_total{action=\"pass\"} 3",
            "rctl_rule_verdicts_total{rule=\"try\",verdict=\"shadow_deny\"} 2",
            "rctl_limiter_keys{rule=\"slow\"} 1",
            "rctl_listener_errors_total{kind=\"http-request\"} 1",
            "rctl_reloads_total{result=\"failed\"} 1",
            "rctl_generation 7",
            "rctl_decision_seconds_bucket{le=\"2e-06\"} 0",
            "rctl_decision_seconds_bucket{le=\"5e-06\"} 5",
            "rctl_decision_seconds_bucket{le=\"+Inf\"} 5",
            "rctl_decision_seconds_count 5",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }

    #[test]
    fn whole_ruleset_shadow_counts_what_would_have_been_enforced() {
        let judge = Arc::new(Judge::new(generation(RULES, 1), true));
        let m = Metrics::new(Arc::clone(&judge));
        let mut h = Vec::new();
        let f = get("/", b"bot/2", &mut h);
        let g = judge.current();
        let (o, d) = judge.decide_with(&g, &f);
        m.decided(&g, &f, &o, &d, Duration::ZERO);
        let c = m.counts();
        assert_eq!((c.requests["pass"], c.shadowed["deny"]), (1, 1));
        assert_eq!(c.rules[0].verdicts["shadow_deny"], 1);
    }
}
