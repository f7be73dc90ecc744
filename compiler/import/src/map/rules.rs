//! Actions as rules, in requestctl's order (see the parent module).

use super::{comment_lines, common, one_line, quote, Ctx, Flavor};
use crate::expr;
use crate::model::{Action, Body, Common, HaproxyAction, Object, Val};
use rctl_compiler::diag::{code, Diagnostic};
use std::collections::BTreeMap;

/// requestctl's evaluation order of a cluster's actions (see the parent
/// module): Varnish by (hit before miss, global before sited, name),
/// HAProxy by name.
fn requestctl_order<'a>(actions: &[&'a Object], flavor: Flavor) -> Vec<&'a Object> {
    let mut v = actions.to_vec();
    v.sort_by_key(|o| match &o.body {
        Body::Action(a) => (
            a.cache_miss_only.v,
            !a.common.sites.is_empty(),
            o.name.clone(),
        ),
        _ => (false, false, o.name.clone()),
    });
    if flavor == Flavor::Haproxy {
        v.sort_by_key(|o| o.name.clone());
    }
    v
}

impl Ctx<'_> {
    /// The cluster's rules file.
    pub(super) fn rules(
        &mut self,
        actions: &[&Object],
        flavor: Flavor,
        ipblocks: &BTreeMap<String, &Object>,
    ) -> String {
        self.overlaps(actions, ipblocks, flavor);
        let order = requestctl_order(actions, flavor);
        // rctl's order: by priority, ties in file order.
        let mut by_priority: Vec<(usize, &Object)> = order.iter().copied().enumerate().collect();
        by_priority.sort_by_key(|(i, o)| (common(o).priority.v, *i));
        for (k, (i, o)) in by_priority.iter().enumerate() {
            if let Some((_, first)) = by_priority[k + 1..].iter().find(|(j, _)| j < i) {
                let kind = if flavor == Flavor::Varnish {
                    "VCL"
                } else {
                    "HAProxy configuration"
                };
                self.diags.push(
                    Diagnostic::warning(
                        code::IMPORT_CHANGED,
                        format!(
                            "rctl evaluates {} (priority {}) before {} (priority {}); requestctl's generated {kind} orders them by name, the other way round",
                            o.name,
                            common(o).priority.v,
                            first.name,
                            common(first).priority.v
                        ),
                    )
                    .primary(common(o).priority.span, "priority decides in rctl")
                    .hint("give both the same priority to keep requestctl's order"),
                );
            }
        }
        let mut text = String::new();
        for o in order {
            if let Some(rule) = self.rule(o) {
                text.push_str(&rule);
                text.push('\n');
            }
        }
        text
    }

    fn rule(&mut self, o: &Object) -> Option<String> {
        let c = common(o);
        // Its errors were reported with its references.
        let cond = expr::to_rctl(&expr::parse(&c.expression.v).ok()?);
        let mut notes: Vec<String> = Vec::new();
        let action = match &o.body {
            Body::Action(a) => self.vcl_action(a, &mut notes)?,
            Body::HaproxyAction(h) => self.haproxy_action(h, &mut notes)?,
            _ => return None,
        };
        if let Body::Action(a) = &o.body {
            // A disabled action that does not log is in no VCL.
            if a.cache_miss_only.v && (c.enabled.v || c.log_matching.v) {
                let note = "cache_miss_only: requestctl applied this to cache misses only; rctl sees every request, hits too";
                self.diags.push(
                    Diagnostic::warning(code::IMPORT_CHANGED, note)
                        .primary(a.cache_miss_only.span, if a.cache_miss_only.given { "true here" } else { "true by default" })
                        .hint("rctl runs in front of the cache; set cache_miss_only: false in requestctl to match"),
                );
                notes.push(note.into());
            }
        }
        let status_ok = (400..=599).contains(&c.resp_status.v);
        if !status_ok && !action.starts_with("drop") && !action.starts_with("log") {
            self.diags.push(
                Diagnostic::error(
                    code::IMPORT_UNSUPPORTED,
                    format!(
                        "resp_status {} has no rctl equivalent: rctl answers 400 to 599",
                        c.resp_status.v
                    ),
                )
                .primary(c.resp_status.span, "out of range")
                .hint("use a 4xx or 5xx status"),
            );
            return None;
        }
        if let Some(ch) = rctl_compiler::validate::unprintable(&c.resp_reason.v) {
            self.diags.push(
                Diagnostic::error(
                    code::IMPORT_SHAPE,
                    format!("resp_reason has the control or bidi character {:?}", ch),
                )
                .primary(c.resp_reason.span, "in this reason")
                .hint("reasons are sent in HTTP responses: write them without control or bidi characters"),
            );
            return None;
        }
        if c.priority.v.unsigned_abs() > 1_000_000 {
            self.diags.push(
                Diagnostic::error(
                    code::IMPORT_SHAPE,
                    format!("priority {} is out of rctl's range", c.priority.v),
                )
                .primary(c.priority.span, "out of range")
                .hint("rctl's priorities run from -1000000 to 1000000; only their order matters"),
            );
            return None;
        }
        let mut sites = Vec::new();
        for s in &c.sites {
            if !super::super::valid_name(&s.v) {
                self.diags.push(
                    Diagnostic::error(code::IMPORT_SHAPE, format!("`{}` is not a site name", s.v))
                        .primary(s.span, "not a site name")
                        .hint("sites are datacenter names: letters, digits, `_`, `-`, `.`"),
                );
                return None;
            }
            sites.push(s.v.clone());
        }
        let mut r = comment_lines(&c.comment.v);
        let (enabled, log) = (c.enabled.v, c.log_matching.v);
        if enabled && log {
            // requestctl tags every match in X-Requestctl; a log rule
            // before the action records them in rctl's reports too.
            r.push_str(&format!(
                "rule {}.log {{\n  comment {}\n  when {cond}\n{}  log\n}}\n\n",
                o.name,
                quote(&format!("log_matching of {}", o.name)),
                props(c, &sites)
            ));
        }
        r.push_str(&format!("rule {} {{\n", o.name));
        let mut comment = one_line(&c.comment.v);
        for n in &notes {
            if !comment.is_empty() {
                comment.push_str(" | ");
            }
            comment.push_str(n);
        }
        if !comment.is_empty() {
            r.push_str(&format!("  comment {}\n", quote(&comment)));
        }
        r.push_str(&format!("  when {cond}\n"));
        r.push_str(&props(c, &sites));
        match (enabled, log) {
            (true, _) => {}
            (false, true) => r.push_str("  shadow\n"),
            (false, false) => r.push_str("  enabled false\n"),
        }
        r.push_str(&format!("  {action}\n}}\n"));
        Some(r)
    }

    fn positive(&mut self, v: &Val<i64>, field: &str, zero_ok: bool) -> Option<u64> {
        if v.v > 0 || (zero_ok && v.v == 0) {
            return Some(v.v as u64);
        }
        self.diags.push(
            Diagnostic::error(
                code::IMPORT_SHAPE,
                format!("`{field}` must be above 0, not {}", v.v),
            )
            .primary(v.span, "here")
            .hint("vsthrottle divides by the interval and counts whole requests"),
        );
        None
    }

    fn vcl_action(&mut self, a: &Action, notes: &mut Vec<String>) -> Option<String> {
        let c = &a.common;
        let reason = if c.resp_reason.v.is_empty() {
            String::new()
        } else {
            format!(" {}", quote(&c.resp_reason.v))
        };
        if !a.do_throttle.v {
            return Some(format!("deny {}{reason}", c.resp_status.v));
        }
        let interval = self.positive(&a.throttle_interval, "throttle_interval", false)?;
        let duration = self.positive(&a.throttle_duration, "throttle_duration", true)?;
        if a.throttle_requests.v == 0 {
            let note = "throttle_requests: 0 gives vsthrottle an empty bucket, so every match is denied: imported as deny";
            self.diags.push(
                Diagnostic::warning(code::IMPORT_CHANGED, note)
                    .primary(a.throttle_requests.span, "zero"),
            );
            notes.push(note.into());
            return Some(format!("deny {}{reason}", c.resp_status.v));
        }
        let limit = self.positive(&a.throttle_requests, "throttle_requests", false)?;
        if limit > u64::from(u32::MAX) || interval > 366 * 86_400 || duration > 366 * 86_400 {
            self.diags.push(
                Diagnostic::error(
                    code::IMPORT_UNSUPPORTED,
                    "throttle beyond rctl's limits (2^32 requests, 366 days)",
                )
                .primary(a.throttle_requests.span, "this throttle"),
            );
            return None;
        }
        let key = if a.throttle_per_ip.v { "ip" } else { "server" };
        let ban = if duration > 0 {
            format!(" ban {duration}s")
        } else {
            String::new()
        };
        let reason = if c.resp_reason.v.is_empty() {
            String::new()
        } else {
            format!(" reason {}", quote(&c.resp_reason.v))
        };
        Some(format!(
            "throttle {limit} requests per {interval}s by {key}{ban} status {}{reason} bucket vsthrottle",
            c.resp_status.v
        ))
    }

    fn haproxy_action(&mut self, h: &HaproxyAction, notes: &mut Vec<String>) -> Option<String> {
        let c = &h.common;
        for (flag, what) in [
            (
                &h.bw_throttle,
                "bw_throttle (HAProxy's bandwidth limit on the response)",
            ),
            (
                &h.per_ip_concurrency,
                "per_ip_concurrency (HAProxy's concurrent requests per address)",
            ),
        ] {
            if !flag.v {
                continue;
            }
            if self.opts.lossy {
                let note = format!(
                    "{what} has no rctl equivalent: imported as log, which enforces nothing"
                );
                self.diags.push(
                    Diagnostic::warning(code::IMPORT_CHANGED, note.clone())
                        .primary(flag.span, "not enforced"),
                );
                notes.push(note);
                return Some("log".into());
            }
            self.diags.push(
                Diagnostic::error(code::IMPORT_UNSUPPORTED, format!("{what} has no rctl equivalent"))
                    .primary(flag.span, "not imported")
                    .hint("rctl limits request rates (throttle), not bandwidth or concurrency; run with --lossy to import the action as log"),
            );
            return None;
        }
        if h.silent_drop.v {
            return Some("drop".into());
        }
        let reason = if c.resp_reason.v.is_empty() {
            String::new()
        } else {
            format!(" {}", quote(&c.resp_reason.v))
        };
        Some(format!("deny {}{reason}", c.resp_status.v))
    }
}

/// `priority` (when given) and `sites`.
fn props(c: &Common, sites: &[String]) -> String {
    let mut r = String::new();
    if c.priority.given {
        r.push_str(&format!("  priority {}\n", c.priority.v));
    }
    if !sites.is_empty() {
        r.push_str(&format!("  sites {{ {} }}\n", sites.join(", ")));
    }
    r
}
