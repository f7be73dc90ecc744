//! Semantic checks over the ordered ruleset (unreachable rules, exemption
//! conflicts) and the plan: which plane enforces each rule.

use crate::analysis::{dnf, l7_fields, project_l4, Analyzer, Term};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::ir::{Action, Atom, IpSet, Rule, RulePlan, XdpKind, XdpRule};
use crate::source::Span;
use crate::Options;

/// A rule with the spans of its name and condition.
pub type SpannedRule = (Rule, Span, Span);

fn sites_cover(outer: &Rule, inner: &Rule) -> bool {
    outer.sites.is_empty()
        || (!inner.sites.is_empty() && inner.sites.iter().all(|s| outer.sites.contains(s)))
}

fn sites_meet(a: &Rule, b: &Rule) -> bool {
    a.sites.is_empty() || b.sites.is_empty() || a.sites.iter().any(|s| b.sites.contains(s))
}

/// A cheap over-approximation of the fields a term reads, as a bitmask:
/// term `t` can only imply term `u` if `mask(u) ⊆ mask(t)`.
fn field_mask(t: &Term, atoms: &[Atom]) -> u64 {
    t.iter().fold(0u64, |m, &(a, _)| {
        let key = match &atoms[a as usize] {
            Atom::Str { field, .. } | Atom::Present(field) => {
                let s = format!("{field:?}");
                s.bytes()
                    .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            }
            Atom::Ip(_) => 1,
            Atom::DstIp(_) => 4,
            Atom::Port(_) => 2,
            Atom::Proto(_) => 3,
        };
        m | (1u64 << (key % 64))
    })
}

/// Reports unreachable rules (warnings) and exemption conflicts (errors).
pub fn check_rules(
    rules: &[SpannedRule],
    atoms: &[Atom],
    ipsets: &[IpSet],
    opts: &Options,
    diags: &mut Diagnostics,
) {
    let mut an = Analyzer::new(atoms, ipsets);
    let forms: Vec<Option<Vec<Term>>> = rules
        .iter()
        .map(|(r, _, _)| dnf(&r.cond, opts.max_dnf_terms))
        .collect();
    let masks: Vec<Vec<u64>> = forms
        .iter()
        .map(|f| {
            f.as_ref().map_or(Vec::new(), |f| {
                f.iter().map(|t| field_mask(t, atoms)).collect()
            })
        })
        .collect();
    let active = |r: &Rule| r.enabled && !r.shadow;
    for j in 0..rules.len() {
        let (later, lspan, lwhen) = &rules[j];
        if !later.enabled {
            continue;
        }
        let Some(lform) = &forms[j] else { continue };
        // Unreachable: an earlier terminal rule on the same path matches
        // everything this one does.
        for i in 0..j {
            let (earlier, espan, _) = &rules[i];
            if !active(earlier) || !earlier.action.is_terminal() || !sites_cover(earlier, later) {
                continue;
            }
            if later.is_packet_limit() && !matches!(earlier.action, Action::Allow | Action::Drop) {
                continue;
            }
            let Some(eform) = &forms[i] else { continue };
            let quick = lform
                .iter()
                .zip(&masks[j])
                .all(|(_, lm)| masks[i].iter().any(|em| em & !lm == 0));
            if !quick && !lform.is_empty() {
                continue;
            }
            if an.implies(lform, eform) {
                diags.push(
                    Diagnostic::warning(code::UNREACHABLE, format!("rule `{}` is unreachable", later.name))
                        .primary(*lspan, "never decides anything")
                        .secondary(*espan, format!("`{}` ({}) matches all of its traffic first", earlier.name, earlier.action.kind()))
                        .hint("give it a lower priority number than the earlier rule, or narrow the earlier rule"),
                );
                break;
            }
        }
        // Exemption conflicts: an allow that comes after an enforcing rule
        // that can match the same traffic does not win over it.
        if later.action == Action::Allow && !later.shadow {
            for i in 0..j {
                let (earlier, _, ewhen) = &rules[i];
                if !active(earlier)
                    || matches!(earlier.action, Action::Allow | Action::Log)
                    || !sites_meet(earlier, later)
                {
                    continue;
                }
                let Some(eform) = &forms[i] else { continue };
                if an.may_overlap(lform, eform) {
                    diags.push(
                        Diagnostic::error(code::EXEMPTION_CONFLICT, format!("exemption `{}` does not win over `{}`", later.name, earlier.name))
                            .primary(*lwhen, format!("`{}` allows this traffic", later.name))
                            .secondary(*ewhen, format!("but `{}` ({}, priority {}) is evaluated first and can match it", earlier.name, earlier.action.kind(), earlier.priority))
                            .secondary(*lspan, format!("priority {}", later.priority))
                            .hint(format!("give `{}` a lower priority number than {}, or exclude its traffic from `{}`", later.name, earlier.priority, earlier.name)),
                    );
                }
            }
        }
    }
}

/// Decides the plane of every rule. The packet plane takes a rule only when
/// it can enforce it exactly; allows with HTTP parts exempt their address
/// projection there, so traffic they might allow reaches user space.
pub fn plan(
    rules: &[Rule],
    atoms: &[Atom],
    opts: &Options,
    diags: &mut Diagnostics,
    spans: &[Span],
) -> Vec<RulePlan> {
    let mut plans: Vec<RulePlan> = Vec::with_capacity(rules.len());
    // An earlier allow with no address part exempts every packet.
    let mut blanket_exempt: Option<usize> = None;
    for (idx, r) in rules.iter().enumerate() {
        let l4_only = {
            let mut ok = true;
            r.cond.visit_atoms(&mut |a| ok &= atoms[a as usize].is_l4());
            ok
        };
        let fields = l7_fields(&r.cond, atoms).join(", ");
        let user = |note: String| RulePlan { xdp: None, note };
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
                    Some(terms) => {
                        let proj = project_l4(&terms, atoms);
                        if proj.iter().any(Vec::is_empty) {
                            blanket_exempt.get_or_insert(idx);
                        }
                        RulePlan {
                            xdp: Some(XdpRule { kind: XdpKind::Exempt, dnf: proj }),
                            note: format!("reads HTTP fields ({fields}); XDP passes its address projection to user space"),
                        }
                    }
                    None => {
                        blanket_exempt.get_or_insert(idx);
                        RulePlan { xdp: Some(XdpRule { kind: XdpKind::Exempt, dnf: vec![Vec::new()] }), note: "condition too complex to project; XDP passes all traffic to user space".into() }
                    }
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
                        None => user(format!(
                            "condition has more than {} DNF terms",
                            opts.max_dnf_terms
                        )),
                    }
                }
            }
        };
        if let (Some(x), Some(b)) = (&p.xdp, blanket_exempt) {
            if b != idx && x.kind != XdpKind::Exempt && x.kind != XdpKind::Allow {
                diags.push(
                    Diagnostic::warning(code::UNREACHABLE, format!("rule `{}` never acts in XDP", r.name))
                        .primary(spans[idx], "offloaded, but every packet is exempted first")
                        .secondary(spans[b], format!("allow `{}` has no address condition", rules[b].name))
                        .hint("add an `ip in …` part to the allow, so XDP can exempt just those addresses"),
                );
            }
        }
        plans.push(p);
    }
    plans
}
