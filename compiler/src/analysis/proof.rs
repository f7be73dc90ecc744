//! Exact decisions for the checks, each with the request that shows it:
//! whether an exemption is really pre-empted by an earlier enforcing rule,
//! and whether a rule is really unreachable.
//!
//! Both questions ask for a request for which some conditions hold and
//! which no earlier *deciding* rule (an active allow, deny or drop on the
//! request path, at the site in question) takes first:
//!
//! - an allow `L` and an earlier enforcing rule `E` conflict when some
//!   request matches both and reaches `E`: an earlier allow that covers
//!   their common traffic settles it, and an earlier deny or drop that
//!   does is reported against `L` on its own;
//! - a rule is unreachable when no request it matches reaches it: it is
//!   covered by the union of the earlier deciding rules, not necessarily by
//!   one of them.
//!
//! The earlier rules are added lazily: a request is found for the
//! conditions alone ([`Analyzer::solve`]), the earlier rules it meets are
//! looked for (candidates from the summary index, each evaluated on the
//! request), and the first one that matches is added, negated, to the
//! conditions, until a request meets none (the answer, with its witness)
//! or none is left (the rules added are the ones that cover it). At most
//! [`MAX_ADDED`] rules are added, within one budget of
//! [`crate::Options::max_overlap_steps`] search steps per question; past
//! either the question is undecided and the caller keeps its conservative
//! answer.
//!
//! Sites: a question is asked at each site both rules apply to (a rule
//! without `sites` applies at every site, including ones no rule names);
//! at a site, only the rules that apply there can decide first.

use crate::analysis::{l7_fields, Analyzer, Budget, Exact};
use crate::ir::{Action, Cond, Rule};
use crate::summary::{Enforcers, Summary};
use crate::witness::Witness;
use crate::Options;

/// How many earlier rules one question may add before it gives up.
pub const MAX_ADDED: usize = 64;

/// Whether a rule decides every request it matches (and takes part).
pub(crate) fn decides(r: &Rule) -> bool {
    r.enabled && !r.shadow && r.action.is_terminal() && !r.is_packet_limit()
}

/// Whether a rule applies at a site (`None`: a site no rule names).
pub(crate) fn applies(r: &Rule, site: Option<&str>) -> bool {
    r.sites.is_empty() || site.is_some_and(|s| r.sites.iter().any(|x| x == s))
}

/// The sites at which both rules apply.
pub(crate) fn common_sites(a: &Rule, b: &Rule) -> Vec<Option<String>> {
    let named = |r: &Rule| r.sites.iter().cloned().map(Some).collect::<Vec<_>>();
    match (a.sites.is_empty(), b.sites.is_empty()) {
        (true, true) => vec![None],
        (false, true) => named(a),
        (true, false) => named(b),
        (false, false) => named(a)
            .into_iter()
            .filter(|s| s.as_ref().is_some_and(|s| b.sites.contains(s)))
            .collect(),
    }
}

/// The deciding rules, indexed by their summaries.
pub(crate) struct Deciders {
    index: Enforcers,
}

impl Deciders {
    /// Indexes the deciding rules of `rules`.
    pub(crate) fn new(an: &Analyzer<'_>, rules: &[&Rule]) -> Self {
        let mut index = Enforcers::new(rules.len());
        for (i, r) in rules.iter().enumerate() {
            if decides(r) {
                index.add(i, &Summary::of(an, &r.cond, false));
            }
        }
        Deciders { index }
    }

    /// Deciding rules before `below` that could meet `sum`.
    fn before(&self, an: &mut Analyzer<'_>, sum: &Summary, below: usize) -> Vec<usize> {
        self.index.candidates(an, sum, below).iter().collect()
    }
}

/// Searches for a request for which `goals` hold and none of the rules
/// `others` matches; returns the answer and the rules it had to exclude.
fn lazily<'c>(
    an: &mut Analyzer<'_>,
    rules: &[&'c Rule],
    goals: &[(&'c Cond, bool)],
    others: &[usize],
    budget: &mut Budget,
) -> (Exact, Vec<usize>) {
    let mut added: Vec<usize> = Vec::new();
    loop {
        let mut gs = goals.to_vec();
        gs.extend(added.iter().map(|&r| (&rules[r].cond, true)));
        let w = match an.solve(gs, budget) {
            Exact::Sat(w) => w,
            other => return (other, added),
        };
        let hit = others
            .iter()
            .copied()
            .find(|r| !added.contains(r) && an.witness_holds(&rules[*r].cond, &w) != Some(false));
        match hit {
            None => return (Exact::Sat(w), added),
            Some(_) if added.len() >= MAX_ADDED => {
                let why = format!("more than {MAX_ADDED} earlier rules meet it");
                return (Exact::Unknown(why), added);
            }
            Some(r) => added.push(r),
        }
    }
}

fn out_of_steps(opts: &Options) -> String {
    format!("not decided in {} steps", opts.max_overlap_steps)
}

/// An exemption pre-empted, with the request that shows it.
#[derive(Debug, Clone)]
pub(crate) struct Preempted {
    /// A request both rules match and that reaches the enforcing rule.
    pub witness: Box<Witness>,
    /// The site of the test that shows it (`None`: no `site` line).
    pub site: Option<String>,
    /// No earlier throttle matches the request either, so the enforcing
    /// rule is what decides it.
    pub by_enforcer: bool,
}

/// The answer about an allow and an earlier enforcing rule.
#[derive(Debug, Clone)]
pub(crate) enum Conflict {
    /// Real.
    Real(Preempted),
    /// No request reaches the enforcing rule that the allow matches.
    Unreal,
    /// Not decided, and why.
    Unknown(String),
}

/// Whether allow `j` is pre-empted by enforcing rule `i` (before it).
pub(crate) fn conflict(
    an: &mut Analyzer<'_>,
    rules: &[&Rule],
    deciders: &Deciders,
    (j, i): (usize, usize),
    opts: &Options,
) -> Conflict {
    let (l, e) = (rules[j], rules[i]);
    let goals = [(&l.cond, false), (&e.cond, false)];
    let mut budget = Budget(opts.max_overlap_steps);
    let sites = common_sites(l, e);
    let packets = |r: &Rule| l7_fields(&r.cond, an.atoms()).is_empty();
    if e.is_packet_limit() || (packets(l) && packets(e)) {
        // Packets meet XDP's own order (and rules on addresses, ports and
        // protocols alone are XDP's too): the claim is that both match.
        an.solver.packets = true;
        let answer = an.solve(goals.to_vec(), &mut budget);
        an.solver.packets = false;
        return match answer {
            Exact::Sat(witness) => Conflict::Real(Preempted {
                witness,
                site: sites.into_iter().next().flatten(),
                by_enforcer: false,
            }),
            Exact::Unsat => Conflict::Unreal,
            Exact::Unknown(why) => Conflict::Unknown(why),
            Exact::OutOfSteps => Conflict::Unknown(out_of_steps(opts)),
        };
    }
    let sum = Summary::of(an, &l.cond, false).meet(Summary::of(an, &e.cond, false));
    let cands = deciders.before(an, &sum, i);
    let mut unknown = None;
    for site in sites {
        let s = site.as_deref();
        let hard: Vec<usize> = cands
            .iter()
            .copied()
            .filter(|&r| applies(rules[r], s))
            .collect();
        match lazily(an, rules, &goals, &hard, &mut budget).0 {
            Exact::Sat(w) => {
                // Also keep clear of earlier throttles (which could
                // throttle the repeated request first) and, in a test
                // without a site, of rules for named sites, where that
                // is possible.
                let soft: Vec<usize> = (0..i)
                    .filter(|&r| {
                        let x = rules[r];
                        let throttle = x.enabled
                            && !x.shadow
                            && !x.is_packet_limit()
                            && matches!(x.action, Action::Throttle(_));
                        (throttle && applies(x, s)) || (s.is_none() && decides(x))
                    })
                    .collect();
                let clear = |an: &mut Analyzer<'_>, w: &Witness| {
                    soft.iter()
                        .all(|&r| an.witness_holds(&rules[r].cond, w) == Some(false))
                };
                let found = if clear(an, &w) {
                    Some(w.clone())
                } else {
                    let mut more = Budget(opts.max_overlap_steps);
                    match lazily(an, rules, &goals, &soft, &mut more).0 {
                        Exact::Sat(w2) => Some(w2),
                        _ => None,
                    }
                };
                return Conflict::Real(match found {
                    Some(witness) => Preempted {
                        witness,
                        site,
                        by_enforcer: true,
                    },
                    None => Preempted {
                        witness: w,
                        site,
                        by_enforcer: false,
                    },
                });
            }
            Exact::Unsat => {}
            Exact::Unknown(why) => unknown = Some(why),
            Exact::OutOfSteps => unknown = Some(out_of_steps(opts)),
        }
    }
    unknown.map_or(Conflict::Unreal, Conflict::Unknown)
}

/// Whether a rule is reached by some request.
#[derive(Debug, Clone)]
pub enum Reach {
    /// This request reaches it (at this site; `None`: at a site no rule
    /// names).
    Reached {
        /// The request.
        witness: Box<Witness>,
        /// The site.
        site: Option<String>,
    },
    /// Every request it matches is decided first by these rules (rule
    /// indices, in order).
    Covered(Vec<usize>),
    /// It matches no request at all.
    NeverMatches,
    /// Not decided, and why.
    Unknown(String),
}

/// Whether [`reach`] is asked about a rule.
pub(crate) fn asked(an: &Analyzer<'_>, r: &Rule) -> bool {
    r.enabled && !r.is_packet_limit() && !l7_fields(&r.cond, an.atoms()).is_empty()
}

/// Whether rule `j` is reached by some request (a rule on the request
/// path that tests some HTTP field; packet limits and rules on addresses,
/// ports and protocols alone, which XDP decides in its own order, are not
/// asked).
pub(crate) fn reach(
    an: &mut Analyzer<'_>,
    rules: &[&Rule],
    deciders: &Deciders,
    j: usize,
    opts: &Options,
) -> Reach {
    let l = rules[j];
    let sum = Summary::of(an, &l.cond, false);
    let cands = deciders.before(an, &sum, j);
    let sites: Vec<Option<String>> = if l.sites.is_empty() {
        vec![None]
    } else {
        l.sites.iter().cloned().map(Some).collect()
    };
    let mut budget = Budget(opts.max_overlap_steps);
    let mut covering = Vec::new();
    for site in sites {
        let hard: Vec<usize> = cands
            .iter()
            .copied()
            .filter(|&r| applies(rules[r], site.as_deref()))
            .collect();
        match lazily(an, rules, &[(&l.cond, false)], &hard, &mut budget) {
            (Exact::Sat(witness), _) => return Reach::Reached { witness, site },
            (Exact::Unsat, added) => covering.extend(added),
            (Exact::Unknown(why), _) => return Reach::Unknown(why),
            (Exact::OutOfSteps, _) => return Reach::Unknown(out_of_steps(opts)),
        }
    }
    covering.sort_unstable();
    covering.dedup();
    if covering.is_empty() {
        Reach::NeverMatches
    } else {
        Reach::Covered(covering)
    }
}

/// For each rule of a compiled ruleset, whether a request reaches it
/// (`None` for the rules [`reach`] is not asked about).
pub fn reaching(
    rules: &[Rule],
    atoms: &[crate::ir::Atom],
    ipsets: &[crate::ir::IpSet],
    opts: &Options,
) -> Vec<Option<Reach>> {
    let mut an = Analyzer::new(atoms, ipsets);
    let refs: Vec<&Rule> = rules.iter().collect();
    let deciders = Deciders::new(&an, &refs);
    (0..rules.len())
        .map(|j| {
            let r = &rules[j];
            asked(&an, r).then(|| reach(&mut an, &refs, &deciders, j, opts))
        })
        .collect()
}

/// The witness of a conflict in words, for the diagnostic's note.
pub(crate) fn describe(p: &Preempted) -> String {
    let at = p
        .site
        .as_ref()
        .map(|s| format!(" at site {s}"))
        .unwrap_or_default();
    format!("for example: {}{at}", p.witness.summary())
}

/// A `test` block that shows a conflict: the witness, sent often enough
/// for the enforcing rule to act, and what it then does. `None` when the
/// witness has bytes a test block cannot hold.
pub(crate) fn witness_test(l: &Rule, e: &Rule, p: &Preempted) -> Option<String> {
    use std::fmt::Write as _;
    let w = &p.witness;
    if !w.readable {
        return None;
    }
    let mut t = format!("test \"`{}` is pre-empted by `{}`\" {{\n", l.name, e.name);
    if let Some(s) = &p.site {
        let _ = writeln!(t, "  site {s}");
    }
    let by = if p.by_enforcer {
        format!(" by {}", e.name)
    } else {
        String::new()
    };
    match &e.action {
        Action::Throttle(th) if e.is_packet_limit() => {
            t.push_str(&w.sample("witness", 1));
            let mut packet = (**w).clone();
            packet.request = false;
            packet.headers.clear();
            t.push_str(&packet.sample("packets", th.burst.saturating_add(1)));
            let _ = writeln!(
                t,
                "  # both rules match; the packet plane decides packets in its own order"
            );
        }
        Action::Throttle(th) => {
            t.push_str(&w.sample("witness", th.burst.saturating_add(1)));
            let _ = writeln!(t, "  expect for witness last throttle{by}");
        }
        other => {
            t.push_str(&w.sample("witness", 1));
            let _ = writeln!(t, "  expect for witness all {}{by}", other.kind());
        }
    }
    t.push_str("}\n");
    Some(t)
}
