//! A suggestion's effect, measured by replaying the traffic through the
//! merged ruleset: the requests and clients it would limit, and of those
//! the ones that look legitimate or are trusted (its collateral).

use crate::obs::Obs;
use crate::Inputs;
use rctl_compiler::ir::Ruleset;
use rctl_dataplane::partial::{Judged, PartialTrace};
use rctl_dataplane::{Engine, EngineConfig, EngineError, Verdict};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// What one rule would do to the traffic.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Effect {
    /// Requests it would limit (throttle or deny).
    pub requests_limited: u64,
    /// Distinct addresses among them.
    pub clients_limited: u64,
    /// Requests limited that look legitimate or come from a trusted
    /// address.
    pub collateral_requests: u64,
    /// Distinct addresses among those.
    pub collateral_clients: u64,
}

/// Replays `traffic` (in time order) through `ruleset` and measures the
/// rules named in `rules`, enforced or in shadow (what they would do);
/// `inputs`: the fields each input carries (a request whose verdict a
/// missing field leaves unknown counts only the shadow rules decided
/// before it, as in `rctl dry-run`).
pub fn measure(
    ruleset: Ruleset,
    traffic: &[Obs],
    inputs: &Inputs,
    rules: &[String],
    trusted: &dyn Fn(IpAddr) -> bool,
) -> Result<BTreeMap<String, Effect>, EngineError> {
    let engine = Engine::new(ruleset, &EngineConfig::default())?;
    let blinds = crate::blinds(&engine, inputs);
    let mut trace = PartialTrace::default();
    let index: BTreeMap<usize, &String> = engine
        .ruleset()
        .rules
        .iter()
        .enumerate()
        .filter(|(_, r)| rules.contains(&r.name))
        .map(|(i, r)| (i, &r.name))
        .collect();
    let mut seen: BTreeMap<&String, (Effect, BTreeSet<IpAddr>, BTreeSet<IpAddr>)> = BTreeMap::new();
    let limits = |v: &Verdict| matches!(v, Verdict::Throttle { .. } | Verdict::Deny { .. });
    let mut scratch = engine.scratch();
    for r in traffic {
        let (logged, verdict) = match crate::judge(&engine, &blinds, r, &mut scratch, &mut trace) {
            Judged::Decided(d) => (d.logged, Some(d.verdict)),
            Judged::Unknown { logged, .. } => (logged, None),
            Judged::Stopped(_) => continue,
        };
        let mut hit: Vec<usize> = logged
            .iter()
            .filter(|(_, v)| limits(v))
            .map(|(i, _)| *i)
            .collect();
        if let Some(v) = verdict.filter(|v| limits(v)) {
            hit.extend(v.rule());
        }
        for i in hit {
            let Some(name) = index.get(&i) else { continue };
            let (e, clients, collateral) = seen.entry(name).or_default();
            e.requests_limited += 1;
            clients.insert(r.ip);
            if r.looks_legitimate() || trusted(r.ip) {
                e.collateral_requests += 1;
                collateral.insert(r.ip);
            }
        }
    }
    Ok(rules
        .iter()
        .map(|name| {
            let e = seen
                .remove(name)
                .map_or_else(Effect::default, |(mut e, c, k)| {
                    e.clients_limited = c.len() as u64;
                    e.collateral_clients = k.len() as u64;
                    e
                });
            (name.clone(), e)
        })
        .collect())
}
