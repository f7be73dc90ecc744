//! Carrying rate-limit state from one loaded ruleset to the next, as
//! `rctl apply` does for the live agent.
//!
//! When a new [`Engine`](crate::Engine) replaces an old one, each throttle
//! rule present in both **by name**, counting the same unit with the
//! **same keys**, takes over the old limiter's keys and buckets
//! ([`Limiter::share_state`](crate::limiter::Limiter::share_state)):
//! shared, not copied, so bans and standing carry, and hits the old engine
//! still takes while requests in flight finish on it are not lost. The new
//! rule's rate, burst and ban apply from then on. A rule whose keys (or
//! unit) changed starts afresh: its old buckets would be keyed by
//! something else. A renamed rule is a new rule.

use crate::limiter::Limiter;
use rctl_compiler::ir::{Action, Rule, Throttle};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Why a throttle rule of the new ruleset starts with empty buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FreshReason {
    /// No throttle rule of that name in the old ruleset (a new or renamed
    /// rule, or one that did not throttle before).
    New,
    /// The old rule of that name keys its buckets by something else.
    KeysChanged,
    /// The old rule of that name counts another unit (requests, packets
    /// or connections).
    UnitChanged,
    /// The kind of bucket changed (`bucket gcra` and `bucket vsthrottle`
    /// keep different state).
    BucketChanged,
    /// The old rule of that name was counted per host and the new one
    /// site-wide (`shared`), or the other way round.
    SharingChanged,
}

impl FreshReason {
    /// A short phrase for reports: `new rule`, `keys changed`, `unit
    /// changed`, `sharing changed`.
    pub fn describe(self) -> &'static str {
        match self {
            FreshReason::New => "new rule",
            FreshReason::KeysChanged => "keys changed",
            FreshReason::UnitChanged => "unit changed",
            FreshReason::BucketChanged => "bucket changed",
            FreshReason::SharingChanged => "sharing changed",
        }
    }
}

/// A throttle rule whose state carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carried {
    /// The rule's name.
    pub rule: String,
    /// Keys its limiter held when the state was linked.
    pub keys: usize,
}

/// A throttle rule that starts afresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fresh {
    /// The rule's name.
    pub rule: String,
    /// Why.
    pub why: FreshReason,
}

/// What carried from the old engine to the new, by rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carry {
    /// Throttle rules that share the old limiter's state, in rule order.
    pub carried: Vec<Carried>,
    /// Throttle rules that start afresh, in rule order.
    pub fresh: Vec<Fresh>,
}

fn throttle(r: &Rule) -> Option<&Throttle> {
    match &r.action {
        Action::Throttle(t) => Some(t),
        _ => None,
    }
}

/// Links each limiter in `new` (by rule index of `new_rules`) to the
/// limiter of the same rule in `old`, where the keys and unit agree.
pub(crate) fn link(
    new_rules: &[Rule],
    new: &mut [Option<Limiter>],
    old_rules: &[Rule],
    old: &[Option<Limiter>],
) -> Carry {
    let mut by_name: HashMap<&str, (&Throttle, &Limiter)> = HashMap::new();
    for (r, l) in old_rules.iter().zip(old) {
        if let (Some(t), Some(l)) = (throttle(r), l) {
            by_name.entry(r.name.as_str()).or_insert((t, l));
        }
    }
    let mut out = Carry::default();
    for (r, l) in new_rules.iter().zip(new.iter_mut()) {
        let (Some(t), Some(l)) = (throttle(r), l.as_mut()) else {
            continue;
        };
        let why = match by_name.get(r.name.as_str()) {
            None => Some(FreshReason::New),
            Some((o, _)) if o.unit != t.unit => Some(FreshReason::UnitChanged),
            Some((o, _)) if o.keys != t.keys => Some(FreshReason::KeysChanged),
            Some((o, _)) if o.bucket != t.bucket => Some(FreshReason::BucketChanged),
            Some((o, _)) if o.shared != t.shared => Some(FreshReason::SharingChanged),
            Some((_, ol)) => {
                l.share_state(ol);
                out.carried.push(Carried {
                    rule: r.name.clone(),
                    keys: ol.len(),
                });
                None
            }
        };
        if let Some(why) = why {
            out.fresh.push(Fresh {
                rule: r.name.clone(),
                why,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineConfig, Request, Verdict};

    fn engine(src: &str) -> Engine {
        let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
        let rs = c.ruleset.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
        Engine::new(rs, &EngineConfig::default()).unwrap()
    }

    const S: u64 = 1_000_000_000;

    /// The verdict kind for a GET of `path` from `ip` at `t` seconds.
    fn hit(e: &Engine, path: &str, ip: &str, t: u64) -> &'static str {
        let req = Request::get(path, ip, 1_000 * S + t * S);
        match e.decide_request(&req).verdict {
            Verdict::Throttle { .. } => "throttle",
            v => v.kind(),
        }
    }

    const OLD: &str = r#"
rule slow { when path == "/s" throttle 1 requests per 1m burst 1 by ip ban 10m }
rule other { when path == "/o" throttle 1 requests per 1m burst 1 by ip }
"#;

    #[test]
    fn a_ban_carries_and_hits_during_the_swap_are_not_lost() {
        let old = engine(OLD);
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "pass");
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "throttle");
        let mut new = engine(OLD);
        let c = new.carry_limiters(&old);
        assert_eq!(
            c.carried
                .iter()
                .map(|c| (c.rule.as_str(), c.keys))
                .collect::<Vec<_>>(),
            [("slow", 1), ("other", 0)]
        );
        assert!(c.fresh.is_empty());
        // Banned for 10 minutes: still banned in the new engine at 5.
        assert_eq!(hit(&new, "/s", "192.0.2.1", 300), "throttle");
        // A hit the old engine takes after the link counts in the new one.
        assert_eq!(hit(&old, "/o", "192.0.2.2", 300), "pass");
        assert_eq!(hit(&new, "/o", "192.0.2.2", 300), "throttle");
        // Without carrying, the new engine would have let both through.
        let fresh = engine(OLD);
        assert_eq!(hit(&fresh, "/s", "192.0.2.1", 300), "pass");
    }

    #[test]
    fn a_changed_rate_applies_from_the_swap() {
        let old = engine(OLD);
        assert_eq!(hit(&old, "/o", "192.0.2.1", 0), "pass");
        assert_eq!(hit(&old, "/o", "192.0.2.1", 1), "throttle");
        let mut new =
            engine(r#"rule other { when path == "/o" throttle 60 requests per 1m burst 3 by ip }"#);
        assert_eq!(new.carry_limiters(&old).carried.len(), 1);
        // The old rate (1 a minute) would throttle until 60 s; the new one
        // (1 a second, burst 3) lets the key through once its standing
        // (one old interval, 60 s, less the new tolerance, 2 s) has passed.
        assert_eq!(hit(&new, "/o", "192.0.2.1", 57), "throttle");
        assert_eq!(hit(&new, "/o", "192.0.2.1", 58), "pass");
        assert_eq!(hit(&new, "/o", "192.0.2.1", 100), "pass");
        assert_eq!(hit(&new, "/o", "192.0.2.1", 100), "pass");
        assert_eq!(hit(&new, "/o", "192.0.2.1", 100), "pass");
        assert_eq!(hit(&new, "/o", "192.0.2.1", 100), "throttle");
    }

    #[test]
    fn changed_keys_start_fresh() {
        let old = engine(OLD);
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "pass");
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "throttle");
        let mut new = engine(
            r#"rule slow { when path == "/s" throttle 1 requests per 1m burst 1 by prefix(24, 64) ban 10m }
rule other { when path == "/o" throttle 1 requests per 1m burst 1 by ip }"#,
        );
        let c = new.carry_limiters(&old);
        assert_eq!(
            c.fresh,
            [super::Fresh {
                rule: "slow".into(),
                why: super::FreshReason::KeysChanged
            }]
        );
        assert_eq!(c.carried.len(), 1);
        assert_eq!(hit(&new, "/s", "192.0.2.1", 1), "pass", "no ban carried");
    }

    #[test]
    fn a_renamed_rule_starts_fresh() {
        let old = engine(OLD);
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "pass");
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "throttle");
        let mut new = engine(
            r#"rule slower { when path == "/s" throttle 1 requests per 1m burst 1 by ip ban 10m }"#,
        );
        let c = new.carry_limiters(&old);
        assert!(c.carried.is_empty());
        assert_eq!(
            c.fresh,
            [super::Fresh {
                rule: "slower".into(),
                why: super::FreshReason::New
            }]
        );
        assert_eq!(hit(&new, "/s", "192.0.2.1", 1), "pass");
    }

    #[test]
    fn a_limit_made_shared_starts_fresh_and_a_shared_one_carries() {
        let old = engine(OLD);
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "pass");
        let shared = OLD.replace("ban 10m }", "ban 10m shared }");
        let mut new = engine(&shared);
        let c = new.carry_limiters(&old);
        assert_eq!(c.fresh[0].why, super::FreshReason::SharingChanged);
        assert!(new.limiter(0).unwrap().is_shared());
        assert_eq!(hit(&new, "/s", "192.0.2.1", 1), "pass", "nothing carried");
        assert_eq!(hit(&new, "/s", "192.0.2.1", 1), "throttle");
        let mut newer = engine(&shared);
        let c = newer.carry_limiters(&new);
        assert_eq!(c.carried[0].rule, "slow");
        assert!(newer
            .limiter(0)
            .unwrap()
            .shares_state_with(new.limiter(0).unwrap()));
        assert_eq!(
            hit(&newer, "/s", "192.0.2.1", 2),
            "throttle",
            "the ban carried"
        );
    }

    #[test]
    fn a_changed_unit_starts_fresh() {
        let old = engine(OLD);
        let mut new =
            engine(r#"rule slow { when port == 443 throttle 1 connections per 1m burst 1 by ip }"#);
        let c = new.carry_limiters(&old);
        assert_eq!(c.fresh[0].why, super::FreshReason::UnitChanged);
    }

    #[test]
    fn a_changed_bucket_starts_fresh() {
        let old = engine(OLD);
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "pass");
        assert_eq!(hit(&old, "/s", "192.0.2.1", 0), "throttle");
        let mut new = engine(
            r#"rule slow { when path == "/s" throttle 1 requests per 1m by ip ban 10m bucket vsthrottle }"#,
        );
        let c = new.carry_limiters(&old);
        assert_eq!(c.fresh[0].why, super::FreshReason::BucketChanged);
        assert_eq!(hit(&new, "/s", "192.0.2.1", 1), "pass", "nothing carried");
    }
}
