//! The `--against` section: what changes between the old ruleset and
//! the new one, as a picture per rule and the clients newly limited first.

use crate::fmt::{esc, fig};
use crate::{hitters, Out};
use rctl_dataplane::dryrun::{Change, Report};
use std::fmt::Write as _;

/// Whether a decision (`throttle by x`, `pass`) stops the request.
fn stops(decision: &str) -> bool {
    ["deny ", "throttle ", "drop "]
        .iter()
        .any(|k| decision.starts_with(k))
}

/// The rule a decision names (`throttle by x` is `x`).
fn rule_of(decision: &str) -> Option<&str> {
    decision.split_once(" by ").map(|(_, r)| r)
}

/// One change's figures, with their units.
fn amounts(j: usize, c: &Change) -> String {
    let mut parts = Vec::new();
    if c.requests > 0 || c.packets == 0 {
        parts.push(format!(
            "<span class=fig>{} requests</span>",
            fig(&format!("/changes/{j}/requests"), c.requests, "requests")
        ));
    }
    if c.packets > 0 {
        parts.push(format!(
            "<span class=fig>{} packets</span>",
            fig(&format!("/changes/{j}/packets"), c.packets, "packets")
        ));
    }
    parts.join(" and ")
}

/// A change's clients: addresses in requests, addresses in packets, with
/// each list's unit, and the User-Agents.
fn clients(j: usize, c: &Change) -> String {
    let mut o = String::from("<div class=tops>");
    if c.requests > 0 {
        o += &hitters(
            "addresses",
            "requests",
            &format!("/changes/{j}/request_top_ips"),
            &c.request_top_ips,
        );
        o += &hitters(
            "User-Agents",
            "requests",
            &format!("/changes/{j}/top_user_agents"),
            &c.top_user_agents,
        );
        o += &hitters(
            "paths",
            "requests",
            &format!("/changes/{j}/top_paths"),
            &c.top_paths,
        );
    }
    if c.packets > 0 {
        o += &hitters(
            "addresses",
            "packets",
            &format!("/changes/{j}/packet_top_ips"),
            &c.packet_top_ips,
        );
    }
    o + "</div>"
}

/// The section, if the run was `--against` an old ruleset.
pub fn section(o: &mut Out, r: &Report) {
    let Some(changes) = &r.changes else { return };
    let old = r
        .against
        .as_ref()
        .map_or("the old ruleset".to_string(), |a| {
            format!("{} ({})", a.name, &a.hash[..a.hash.len().min(12)])
        });
    let _ = write!(
        o,
        "<section id=against><h2>What changes against {}</h2>",
        esc(&old)
    );
    if changes.is_empty() {
        o.push_str("<p>No decision changes: both rulesets decide every request and packet alike.</p></section>");
        return;
    }
    // Per rule: what comes to it (right) and what leaves it (left), on
    // one scale for the whole section.
    let mut rules: Vec<&str> = Vec::new();
    for c in changes {
        for d in [&c.from, &c.to] {
            if let Some(n) = rule_of(d) {
                if !rules.contains(&n) {
                    rules.push(n);
                }
            }
        }
    }
    let max = changes
        .iter()
        .map(|c| c.requests + c.packets)
        .max()
        .unwrap_or(1)
        .max(1);
    o.push_str(
        "<h3>Per rule</h3><p class=note>Right of the line: traffic the new ruleset sends to the rule; \
         left: traffic that no longer goes to it. Bars share one scale.</p><div class=flows>",
    );
    for name in &rules {
        let _ = write!(o, "<div class=flowrule><h4>{}</h4>", esc(name));
        for (j, c) in changes.iter().enumerate() {
            let into = rule_of(&c.to) == Some(name);
            let out = rule_of(&c.from) == Some(name);
            if !into && !out {
                continue;
            }
            let pct = (c.requests + c.packets) as f64 / max as f64 * 100.0;
            let bar = format!(
                "<i class=\"flowbar {}\" style=\"width:{pct:.1}%\"></i>",
                if stops(&c.to) { "stop" } else { "let" }
            );
            let (left, right) = if into {
                (String::new(), bar)
            } else {
                (bar, String::new())
            };
            let _ = write!(
                o,
                "<div class=flow><div class=out>{left}</div><div class=in>{right}</div>\
                 <div class=what>{} → {}: {}</div></div>",
                esc(&c.from),
                esc(&c.to),
                amounts(j, c)
            );
        }
        o.push_str("</div>");
    }
    o.push_str("</div>");
    // Newly stopped first, then newly let through, then the rest.
    let rank = |c: &Change| match (stops(&c.from), stops(&c.to)) {
        (false, true) => 0,
        (true, false) => 1,
        _ => 2,
    };
    let mut order: Vec<usize> = (0..changes.len()).collect();
    order.sort_by_key(|&j| rank(&changes[j]));
    o.push_str("<h3>Who is affected</h3>");
    let mut heading = None;
    for j in order {
        let c = &changes[j];
        let h = match rank(c) {
            0 => "Newly limited: the new ruleset stops these clients",
            1 => "No longer limited: the new ruleset lets these through",
            _ => "Stopped by another rule, or another way",
        };
        if heading != Some(h) {
            let _ = write!(o, "<h4 class=\"rank{}\">{h}</h4>", rank(c));
            heading = Some(h);
        }
        let _ = write!(
            o,
            "<div class=change><p><b>{}</b> → <b>{}</b>: {}</p>{}</div>",
            esc(&c.from),
            esc(&c.to),
            amounts(j, c),
            clients(j, c)
        );
    }
    o.push_str("</section>");
}
