//! The plan: which plane enforces each rule, and the packet plane's limits.
//!
//! The XDP program has fixed tables ([`rctl_common`]): at most
//! [`MAX_TERMS`] DNF terms over all its rules, counters for the first
//! [`MAX_RULES`] rules, and one bit per distinct address set, port
//! predicate and protocol predicate. A ruleset that needs more is rejected
//! here, naming the rule that crosses the limit, rather than at `apply`.

use crate::analysis::{dnf, l7_fields, project_l4, Analyzer, Term};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::ir::{Action, Atom, IpSet, Rule, RulePlan, XdpKind, XdpRule};
use crate::source::Span;
use crate::Options;
use rctl_common::{MAX_RULES, MAX_TERMS};
use std::collections::BTreeSet;

/// A lowered rule with what the checks need beyond the IR.
#[derive(Debug, Clone)]
pub struct SpannedRule {
    /// The rule.
    pub rule: Rule,
    /// The span of its name.
    pub name: Span,
    /// The span of its `when` condition.
    pub when: Span,
    /// `allow_undecided`: an exemption the analysis cannot decide is a
    /// warning, not an error.
    pub allow_undecided: bool,
}

/// Distinct address sets the XDP program can tell apart (`Term::set_pos`
/// is a `u64`; the source and the destination share the bits).
pub const XDP_SET_BITS: usize = 64;
/// Distinct port predicates (`Term::port_pos` is a `u64`).
pub const XDP_PORT_BITS: usize = 64;
/// Distinct protocol predicates (`Term::proto_pos` is a `u32`).
pub const XDP_PROTO_BITS: usize = 32;
// The widths above are those of the program's term; this stops compiling
// if they change.
const _: fn(&rctl_common::Term) -> (u64, u64, u64, u32) =
    |t| (t.set_pos, t.dst_pos, t.port_pos, t.proto_pos);

/// Decides the plane of every rule. The packet plane takes a rule only when
/// it can enforce it exactly; allows with HTTP parts exempt their address
/// projection there, so traffic they might allow reaches user space.
///
/// A term that an earlier allow, exemption or drop term of the packet plane
/// always decides first is left out (it could never act, and its counter
/// would never move), and the packet plane's limits are checked.
pub fn plan(
    rules: &[Rule],
    atoms: &[Atom],
    ipsets: &[IpSet],
    opts: &Options,
    diags: &mut Diagnostics,
    spans: &[Span],
) -> Vec<RulePlan> {
    let mut plans: Vec<RulePlan> = Vec::with_capacity(rules.len());
    for (idx, r) in rules.iter().enumerate() {
        let l4_only = {
            let mut ok = true;
            r.cond.visit_atoms(&mut |a| ok &= atoms[a as usize].is_l4());
            ok
        };
        let fields = l7_fields(&r.cond, atoms).join(", ");
        let user = |note: String| RulePlan { xdp: None, note };
        let blanket = |note: &str| RulePlan {
            xdp: Some(XdpRule {
                kind: XdpKind::Exempt,
                dnf: vec![Vec::new()],
            }),
            note: note.into(),
        };
        let p = if !r.enabled {
            user("disabled".into())
        } else if r.shadow {
            user("shadow mode is evaluated in user space".into())
        } else {
            match (&r.action, l4_only) {
                (Action::Log, _) => user("log rules are evaluated in user space".into()),
                (Action::Deny { .. }, _) => user("deny answers with an HTTP response".into()),
                (Action::Throttle(t), _) if t.unit == crate::ir::Unit::Requests => {
                    user("request limits need HTTP parsing".into())
                }
                (Action::Drop | Action::Throttle(_), false) => {
                    user(format!("condition reads HTTP fields ({fields})"))
                }
                (Action::Allow, false) => match dnf(&r.cond, opts.max_dnf_terms) {
                    Some(terms) => RulePlan {
                        xdp: Some(XdpRule { kind: XdpKind::Exempt, dnf: project_l4(&terms, atoms) }),
                        note: format!("reads HTTP fields ({fields}); XDP passes its address projection to user space"),
                    },
                    None => blanket("condition too complex to project; XDP passes all traffic to user space"),
                },
                (Action::Allow | Action::Drop | Action::Throttle(_), true) => {
                    match dnf(&r.cond, opts.max_dnf_terms) {
                        Some(terms) => {
                            let kind = match r.action {
                                Action::Allow => XdpKind::Allow,
                                Action::Drop => XdpKind::Drop,
                                _ => XdpKind::Throttle,
                            };
                            RulePlan {
                                xdp: Some(XdpRule { kind, dnf: terms }),
                                note: String::new(),
                            }
                        }
                        // Passing everything to user space keeps the
                        // allow's promise exactly.
                        None if r.action == Action::Allow => blanket("condition too complex for XDP; XDP passes all traffic to user space"),
                        None => {
                            diags.push(
                                Diagnostic::error(code::LIMIT, format!("rule `{}` needs more than {} XDP terms", r.name, opts.max_dnf_terms))
                                    .primary(spans[idx], "its condition, in disjunctive normal form, is too large for the packet plane")
                                    .hint(format!("{} are enforced in XDP alone; split the rule into simpler ones, or group addresses into one ipblock", if r.action == Action::Drop { "drops on addresses, ports and protocols" } else { "packet and connection limits" })),
                            );
                            user(format!("condition has more than {} DNF terms", opts.max_dnf_terms))
                        }
                    }
                }
            }
        };
        plans.push(p);
    }
    leave_out_decided_terms(rules, atoms, ipsets, diags, spans, &mut plans);
    check_xdp_limits(rules, atoms, diags, spans, &plans);
    plans
}

fn sites_cover(outer: &Rule, inner: &Rule) -> bool {
    outer.sites.is_empty()
        || (!inner.sites.is_empty() && inner.sites.iter().all(|s| outer.sites.contains(s)))
}

/// Removes every XDP term that cannot change what the program does: a
/// term that an earlier allow, exemption or drop term always decides
/// first (the program takes the first matching term that ends
/// evaluation), and the exemptions that no later drop or packet limit
/// could pre-empt (their packets pass XDP anyway).
fn leave_out_decided_terms(
    rules: &[Rule],
    atoms: &[Atom],
    ipsets: &[IpSet],
    diags: &mut Diagnostics,
    spans: &[Span],
    plans: &mut [RulePlan],
) {
    let mut an = Analyzer::new(atoms, ipsets);
    // Earlier terms that end evaluation: (rule, term).
    let mut deciding: Vec<(usize, Term)> = Vec::new();
    for (idx, r) in rules.iter().enumerate() {
        let Some(x) = plans[idx].xdp.take() else {
            continue;
        };
        let mut by: Option<usize> = None;
        let mut kept = Vec::new();
        for t in x.dnf {
            let first = deciding
                .iter()
                .find(|(e, u)| sites_cover(&rules[*e], r) && an.term_implies(&t, u));
            match first {
                Some(&(e, _)) => {
                    by.get_or_insert(e);
                }
                None if an.term_unsat(&t) => {}
                None => kept.push(t),
            }
        }
        if matches!(x.kind, XdpKind::Allow | XdpKind::Exempt | XdpKind::Drop) {
            deciding.extend(kept.iter().map(|t| (idx, t.clone())));
        }
        if !kept.is_empty() {
            plans[idx].xdp = Some(XdpRule {
                kind: x.kind,
                dnf: kept,
            });
            continue;
        }
        let Some(e) = by else {
            plans[idx].note = "its condition never holds; nothing to do in XDP".into();
            continue;
        };
        let earlier = &rules[e];
        plans[idx].note = format!(
            "every packet it matches is decided first in XDP by `{}`",
            earlier.name
        );
        if matches!(x.kind, XdpKind::Drop | XdpKind::Throttle) {
            let blanket = plans[e]
                .xdp
                .as_ref()
                .is_some_and(|p| p.kind == XdpKind::Exempt && p.dnf.iter().any(Vec::is_empty));
            let (label, hint) = if blanket {
                (
                    format!("allow `{}` has no address condition", earlier.name),
                    "add an `ip in …` part to the allow, so XDP can exempt just those addresses",
                )
            } else {
                (format!("`{}` ({}) decides all of its packets first", earlier.name, earlier.action.kind()), "give it a lower priority number than the earlier rule, or narrow the earlier rule")
            };
            diags.push(
                Diagnostic::warning(
                    code::UNREACHABLE,
                    format!("rule `{}` never acts in XDP", r.name),
                )
                .primary(
                    spans[idx],
                    if blanket {
                        "offloaded, but every packet is exempted first"
                    } else {
                        "offloaded, but every packet is decided first"
                    },
                )
                .secondary(spans[e], label)
                .hint(hint),
            );
        }
    }
    let last_enforcing = plans.iter().rposition(|p| {
        p.xdp
            .as_ref()
            .is_some_and(|x| matches!(x.kind, XdpKind::Drop | XdpKind::Throttle))
    });
    for p in plans.iter_mut().skip(last_enforcing.map_or(0, |i| i + 1)) {
        if p.xdp.as_ref().is_some_and(|x| x.kind == XdpKind::Exempt) {
            p.xdp = None;
            p.note += "; no later XDP rule can drop or limit its packets, so XDP needs no exemption for it";
        }
    }
}

/// Reports the first rule that takes the packet plane past one of the XDP
/// program's fixed limits.
fn check_xdp_limits(
    rules: &[Rule],
    atoms: &[Atom],
    diags: &mut Diagnostics,
    spans: &[Span],
    plans: &[RulePlan],
) {
    let mut terms = 0usize;
    let (mut sets, mut ports, mut protos) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut reported = [false; 5];
    let mut report =
        |diags: &mut Diagnostics, which: usize, idx: usize, msg: String, hint: &str| {
            if !std::mem::replace(&mut reported[which], true) {
                diags.push(
                    Diagnostic::error(code::LIMIT, msg)
                        .primary(spans[idx], "this rule crosses the limit of the XDP program")
                        .hint(hint.to_string()),
                );
            }
        };
    let group = "put the addresses in one ipblock, merge rules, or leave rarely hit ones out of the packet plane";
    for (idx, p) in plans.iter().enumerate() {
        let Some(x) = &p.xdp else { continue };
        let name = &rules[idx].name;
        if idx >= MAX_RULES as usize {
            report(diags, 0, idx, format!("rule `{name}` is packet-plane rule number {} in evaluation order; the XDP program keeps counters for the first {MAX_RULES} rules only", idx + 1), "give address drops, packet and connection limits and allows lower priority numbers, so that they come first");
        }
        terms += x.dnf.len();
        if terms > MAX_TERMS as usize {
            report(diags, 1, idx, format!("with rule `{name}` the packet plane needs {terms} terms; the XDP program holds at most {MAX_TERMS}"), group);
        }
        for &(a, _) in x.dnf.iter().flatten() {
            match &atoms[a as usize] {
                Atom::Ip(s) | Atom::DstIp(s) => {
                    sets.insert(*s);
                }
                Atom::Port(_) => {
                    ports.insert(a);
                }
                Atom::Proto(_) => {
                    protos.insert(a);
                }
                Atom::Str { .. } | Atom::Present(_) => {}
            }
        }
        if sets.len() > XDP_SET_BITS {
            report(diags, 2, idx, format!("with rule `{name}` the packet plane tests {} address sets; the XDP program tells at most {XDP_SET_BITS} apart", sets.len()), group);
        }
        if ports.len() > XDP_PORT_BITS {
            report(diags, 3, idx, format!("with rule `{name}` the packet plane tests {} different port conditions; the XDP program tells at most {XDP_PORT_BITS} apart", ports.len()), "use the same `port in { … }` set in several rules");
        }
        if protos.len() > XDP_PROTO_BITS {
            report(diags, 4, idx, format!("with rule `{name}` the packet plane tests {} different protocol conditions; the XDP program tells at most {XDP_PROTO_BITS} apart", protos.len()), "use the same `proto in { … }` set in several rules");
        }
    }
}
