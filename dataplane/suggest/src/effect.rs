//! A suggestion's effect, measured by replaying the traffic through the
//! merged ruleset (the existing rules and the suggestions, in shadow):
//! the requests and clients it would limit, and of those the ones that
//! look legitimate or are trusted (its collateral). The same pass counts
//! each offender's requests exactly and keeps, for the test blocks, its
//! first request and a normal client's.

use crate::bounded::{ByFingerprint, Fingerprints};
use crate::count::Counts;
use crate::find::{Finding, Members};
use crate::keys::{network, template_into};
use crate::obs::{header, looks_legitimate, path, Obs};
use crate::Judge;
use crate::Origin;
use rctl_compiler::ir::Ruleset;
use rctl_dataplane::dryrun::Distinct;
use rctl_dataplane::partial::Judged;
use rctl_dataplane::{EngineError, Request, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;

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
    /// Requests it matched whose effect the input cannot tell (a
    /// throttle keyed by a header the log may have cut): counted neither
    /// as limited nor as passed.
    pub requests_unknown: u64,
}

/// A finding, measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The rule's name.
    pub name: String,
    /// The finding, with its requests counted and its samples.
    pub finding: Finding,
    /// Its effect.
    pub effect: Effect,
}

struct Tally {
    effect: Effect,
    clients: Distinct,
    collateral: Distinct,
}

/// The measuring pass.
pub struct Measure {
    judge: Judge,
    fp: Fingerprints,
    keep: Vec<String>,
    /// Rule index in the merged ruleset -> finding.
    rules: BTreeMap<usize, usize>,
    names: Vec<String>,
    findings: Vec<Finding>,
    tallies: Vec<Tally>,
    by_path: ByFingerprint<usize>,
    by_parent: ByFingerprint<Vec<usize>>,
    by_endpoint: ByFingerprint<Vec<usize>>,
    /// The parents whose last segments are titles ([`Counts::titled`]).
    titled: ByFingerprint<()>,
    host: Vec<u8>,
    title: Vec<u8>,
    template: Vec<u8>,
    shape: Vec<u8>,
}

impl Measure {
    /// Measures `findings`, called `names`, on `merged` (the existing
    /// rules and the suggestions); `counts`: what found them; samples
    /// keep the headers `keep` names (see [`crate::headers_read`]).
    pub fn new(
        merged: Ruleset,
        findings: Vec<Finding>,
        mut names: Vec<String>,
        counts: &Counts,
        keep: Vec<String>,
    ) -> Result<Measure, EngineError> {
        // One name a finding (a missing one names no rule).
        names.resize(findings.len(), String::new());
        let judge = Judge::new(merged)?;
        let rules = judge
            .engine()
            .ruleset()
            .rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| names.iter().position(|n| *n == r.name).map(|f| (i, f)))
            .collect();
        let mut m = Measure {
            judge,
            fp: counts.fp.clone(),
            keep,
            rules,
            tallies: (0..findings.len())
                .map(|_| Tally {
                    effect: Effect::default(),
                    clients: Distinct::default(),
                    collateral: Distinct::default(),
                })
                .collect(),
            names,
            findings: Vec::new(),
            by_path: ByFingerprint::default(),
            by_parent: ByFingerprint::default(),
            by_endpoint: ByFingerprint::default(),
            titled: counts.titled_parents(),
            host: Vec::new(),
            title: Vec::new(),
            template: Vec::new(),
            shape: Vec::new(),
        };
        for (i, f) in findings.iter().enumerate() {
            match &f.members {
                Members::Loop { path, parent } => {
                    m.by_path.insert(*path, i);
                    m.by_parent.entry(*parent).or_default().push(i);
                }
                Members::Ips(ep, _) | Members::Prefixes(ep, _) | Members::Agent(ep, _) => {
                    m.by_endpoint.entry(*ep).or_default().push(i);
                }
            }
        }
        m.findings = findings
            .into_iter()
            .map(|f| Finding {
                requests: 0,
                offender: None,
                normal: None,
                ..f
            })
            .collect();
        Ok(m)
    }

    /// Replays `r` (from `o`), `trusted` if its address is in a
    /// `--trusted` block.
    pub fn request(&mut self, o: Origin<'_>, r: &Request<'_>, trusted: bool) {
        let judged = self.judge.judge(o, r);
        for i in self.judge.unknown() {
            if let Some(&f) = self.rules.get(i) {
                self.tallies[f].effect.requests_unknown += 1;
            }
        }
        let (logged, verdict) = match judged {
            Judged::Decided(d) => (d.logged, Some(d.verdict)),
            Judged::Unknown { logged, .. } => (logged, None),
            Judged::Stopped(_) => return,
        };
        let limits = |v: &Verdict| matches!(v, Verdict::Throttle { .. } | Verdict::Deny { .. });
        let mut hit: Vec<usize> = logged
            .iter()
            .filter(|(_, v)| limits(v))
            .map(|(i, _)| *i)
            .collect();
        if let Some(v) = verdict.as_ref().filter(|v| limits(v)) {
            hit.extend(v.rule());
        }
        let mut legit = None;
        let ip = match r.ip {
            std::net::IpAddr::V4(a) => self.fp.of(&[&a.octets()]),
            std::net::IpAddr::V6(a) => self.fp.of(&[&a.octets()]),
        };
        for i in hit {
            let Some(&f) = self.rules.get(&i) else {
                continue;
            };
            let t = &mut self.tallies[f];
            t.effect.requests_limited += 1;
            t.clients.add(ip);
            if *legit.get_or_insert_with(|| looks_legitimate(r) || trusted) {
                t.effect.collateral_requests += 1;
                t.collateral.add(ip);
            }
        }
        if matches!(verdict, Some(Verdict::Pass)) && !trusted && r.target.starts_with(b"/") {
            self.member(o, r);
        }
    }

    /// Counts `r` (which a new rule may limit) to the finding it is an
    /// offender's request of, and keeps the samples.
    fn member(&mut self, o: Origin<'_>, r: &Request<'_>) {
        self.host.clear();
        self.host.extend(r.host.iter().map(u8::to_ascii_lowercase));
        let p = path(r);
        if !r.host.is_empty() {
            let key = self.fp.of(&[&self.host, p]);
            if let Some(&i) = self.by_path.get(&key) {
                let f = &mut self.findings[i];
                f.requests += 1;
                if f.offender.is_none() {
                    f.offender = Some(Obs::from_request(o, r, Some(&self.keep)));
                }
                return;
            }
            if let Some(cut) = p.iter().rposition(|&b| b == b'/') {
                let parent = self.fp.of(&[&self.host, &p[..=cut]]);
                if let Some(loops) = self.by_parent.get(&parent) {
                    for &i in loops {
                        let f = &mut self.findings[i];
                        if f.normal.is_none() {
                            f.normal = Some(Obs::from_request(o, r, Some(&self.keep)));
                        }
                    }
                }
            }
        }
        self.template.clear();
        template_into(p, &mut self.template);
        let title = crate::count::title_fp(&self.fp, &self.host, p, &mut self.title);
        let mut collapsed = false;
        if title != 0 && self.titled.contains_key(&title) {
            if let Some(c) = self.template.iter().rposition(|&b| b == b'/') {
                self.template.truncate(c + 1);
                self.template.push(b'*');
                collapsed = true;
            }
        }
        let ep = crate::count::endpoint_fp(&self.fp, &self.host, &self.template, collapsed);
        let query = r.target.get(p.len() + 1..).unwrap_or_default();
        // The endpoint of the path template and the query's shape (of
        // the template not collapsed, as counted).
        let shaped = (!collapsed && crate::keys::shape_into(query, &mut self.shape))
            .then(|| crate::count::shape_fp(&self.fp, &self.host, &self.template, &self.shape));
        for ep in std::iter::once(ep).chain(shaped) {
            if let Some(list) = self.by_endpoint.get(&ep) {
                on_endpoint(&mut self.findings, &self.keep, o, r, list);
            }
        }
    }

    /// Each finding, measured, in the order given.
    pub fn finish(self) -> Vec<Measured> {
        self.findings
            .into_iter()
            .zip(self.tallies)
            .zip(self.names)
            .map(|((finding, t), name)| Measured {
                name,
                finding,
                effect: Effect {
                    clients_limited: t.clients.len(),
                    collateral_clients: t.collateral.len(),
                    ..t.effect
                },
            })
            .collect()
    }
}

/// Counts `r` to the first of the findings `list` (on one endpoint) it
/// is an offender's request of, and keeps the samples (with the headers
/// `keep` names).
fn on_endpoint(
    findings: &mut [Finding],
    keep: &[String],
    o: Origin<'_>,
    r: &Request<'_>,
    list: &[usize],
) {
    let ua = header(r, "user-agent").unwrap_or_default();
    let net = network(r.ip);
    let mut counted = false;
    for &i in list {
        let f = &mut findings[i];
        let mine = match &f.members {
            Members::Ips(_, ips) => ips.contains(&r.ip),
            Members::Prefixes(_, nets) => nets.contains(&net),
            Members::Agent(_, a) => crate::keys::family_prefix(ua) == a.as_slice(),
            Members::Loop { .. } => false,
        };
        if mine && !counted {
            counted = true;
            f.requests += 1;
            if f.offender.is_none() {
                f.offender = Some(Obs::from_request(o, r, Some(keep)));
            }
        }
        let normal = match (&f.members, f.normal_key) {
            (Members::Prefixes(..), Some(k)) => net == k,
            (_, Some(k)) => r.ip == k,
            (_, None) => false,
        };
        if normal && f.normal.is_none() {
            f.normal = Some(Obs::from_request(o, r, Some(keep)));
        }
    }
}
