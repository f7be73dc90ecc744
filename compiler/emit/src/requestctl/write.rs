//! The rules in order: allows folded into later rules, the order checked
//! against requestctl's, each object written as its YAML file.

use super::{vcl_safe, Error, Ex, Objects, Options, Pattern, Tree, Writer, ANY};
use rctl_compiler::ir::{Action, Bucket, Cond, Key, Rule, Ruleset, Throttle, Unit};
use std::fmt::Write as _;

/// A YAML scalar: single-quoted, or double-quoted with escapes when it
/// holds a control character.
fn ys(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return format!("'{}'", s.replace('\'', "''"));
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether two rules run at some site in common.
fn shares(a: &Rule, b: &Rule) -> bool {
    a.sites.is_empty() || b.sites.is_empty() || a.sites.iter().any(|s| b.sites.contains(s))
}

/// Whether `r` runs only where `a` does.
fn within(r: &Rule, a: &Rule) -> bool {
    a.sites.is_empty() || (!r.sites.is_empty() && r.sites.iter().all(|s| a.sites.contains(s)))
}

fn enforces(r: &Rule) -> bool {
    r.enabled && !r.shadow && matches!(r.action, Action::Deny { .. } | Action::Throttle(_))
}

/// Why requestctl's VCL would run `r` before the earlier `k`, if it would:
/// at a site it runs the rules for every site first, then the site's,
/// each group sorted by name.
fn out_of_order(k: &Rule, r: &Rule) -> Option<String> {
    let key = |x: &Rule| (!x.sites.is_empty(), x.name.clone());
    (shares(k, r) && key(k) > key(r)).then(|| {
        format!(
            "requestctl's VCL would run it before {} (at a site it runs the rules for every site, then the site's own, each sorted by name), but rctl runs {} first: rename one of them",
            k.name, k.name
        )
    })
}

fn status(s: u16) -> Result<u16, String> {
    if (400..=599).contains(&s) {
        Ok(s)
    } else {
        Err(format!(
            "status {s}: requestctl's actions answer 400 to 599 (rctl import refuses others)"
        ))
    }
}

/// Whole seconds of `ms`, or why not.
fn seconds(what: &str, ms: u64) -> Result<u64, String> {
    if ms.is_multiple_of(1000) {
        Ok(ms / 1000)
    } else {
        Err(format!(
            "{what} of {ms} ms: requestctl's throttles count whole seconds"
        ))
    }
}

/// The throttle's fields.
fn throttle(t: &Throttle) -> Result<String, String> {
    if t.shared {
        return Err("a shared throttle: requestctl counts in each CDN server's vsthrottle".into());
    }
    let per_ip = match t.keys.as_slice() {
        [] | [Key::Server] => false,
        [Key::Ip] => true,
        keys => {
            return Err(format!(
                "`by {}`: requestctl's buckets are one per server or one per client address (throttle_per_ip): write `by server` or `by ip`",
                Key::list(keys)
            ))
        }
    };
    if t.bucket != Bucket::Vsthrottle {
        return Err(format!(
            "rctl's default bucket (GCRA) refills continuously, requestctl's (vmod_vsthrottle) by whole tokens, so they admit differently after the first {}: write `bucket vsthrottle` for requestctl's",
            t.burst
        ));
    }
    let (limit, period_ms) = (t.limit, t.period_ms);
    let interval = seconds("an interval", period_ms)?;
    if interval == 0 {
        return Err(
            "an interval under a second: requestctl's throttles count whole seconds".into(),
        );
    }
    let ban = seconds("a ban", t.ban_ms)?;
    vcl_safe("reason", &t.reason)?;
    Ok(format!(
        "do_throttle: true\nresp_reason: {}\nresp_status: {}\nthrottle_duration: {ban}\nthrottle_interval: {interval}\nthrottle_per_ip: {per_ip}\nthrottle_requests: {limit}\n",
        ys(&t.reason),
        status(t.status)?
    ))
}

/// The action's file for `r` with the expression `expr`.
fn action(r: &Rule, expr: &str) -> Result<String, String> {
    let what = match &r.action {
        Action::Deny { status: s, reason } => {
            vcl_safe("reason", reason)?;
            format!(
                "do_throttle: false\nresp_reason: {}\nresp_status: {}\n",
                ys(reason),
                status(*s)?
            )
        }
        Action::Throttle(t) => throttle(t)?,
        Action::Log => "do_throttle: false\n".into(),
        Action::Drop => {
            return Err("drop: requestctl's VCL answers every request it reads; silent_drop is its HAProxy actions'".into())
        }
        Action::Allow => return Err("allow: requestctl has no exemptions".into()),
    };
    let log_only = r.shadow || matches!(r.action, Action::Log);
    let comment: String = r
        .comment
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut s = format!(
        "cache_miss_only: false\ncomment: {}\nenabled: {}\nexpression: {}\nlog_matching: {}\npriority: {}\n",
        ys(comment.trim()),
        r.enabled && !log_only,
        ys(expr),
        r.enabled && log_only,
        r.priority
    );
    s.push_str(&what);
    if r.sites.is_empty() {
        s.push_str("sites: []\n");
    } else {
        s.push_str("sites:\n");
        for site in &r.sites {
            let _ = writeln!(s, "- {}", ys(site));
        }
    }
    Ok(s)
}

fn pattern_file(p: &Pattern) -> String {
    match p {
        Pattern::Method(m) => format!("method: {}\n", ys(m)),
        Pattern::Url(u) => format!("url_path: {}\n", ys(u)),
        Pattern::Header { name, value } => {
            let mut s = format!("header: {}\nheader_is_set: true\n", ys(name));
            if let Some(v) = value {
                let _ = writeln!(s, "header_value: {}", ys(v));
            }
            s
        }
    }
}

fn ipblock_file(set: &rctl_compiler::ir::IpSet) -> String {
    let mut s = format!("comment: {}\n", ys(&format!("rctl ip set {}", set.name)));
    if set.prefixes.v4.is_empty() && set.prefixes.v6.is_empty() {
        s.push_str("cidrs: []\n");
        return s;
    }
    s.push_str("cidrs:\n");
    for &(n, l) in &set.prefixes.v4 {
        let _ = writeln!(s, "- {}/{l}", std::net::Ipv4Addr::from(n));
    }
    for &(n, l) in &set.prefixes.v6 {
        let _ = writeln!(s, "- '{}/{l}'", std::net::Ipv6Addr::from(n));
    }
    s
}

/// The allows that are written into later rules (their indices), and the
/// ones refused.
fn folds(w: &mut Writer<'_>, refused: &mut Vec<(String, String)>) -> Vec<usize> {
    let rules = &w.rs.rules;
    let mut out = Vec::new();
    for (i, a) in rules.iter().enumerate() {
        if !(a.enabled && !a.shadow && matches!(a.action, Action::Allow)) {
            continue;
        }
        let saved = w.objects.clone();
        let ok = w.cond(&a.cond);
        w.objects = saved;
        if let Err(why) = ok {
            refused.push((a.name.clone(), why));
            continue;
        }
        let later = rules[i + 1..]
            .iter()
            .filter(|r| !matches!(r.action, Action::Allow))
            .find(|r| shares(a, r) && !within(r, a));
        if let Some(r) = later {
            refused.push((
                a.name.clone(),
                format!(
                    "requestctl has no exemptions: an allow is written into the later rules' expressions as AND NOT, but {} also runs at sites this allow does not",
                    r.name
                ),
            ));
            continue;
        }
        out.push(i);
    }
    out
}

pub(super) fn tree(rs: &Ruleset, o: &Options) -> Result<Tree, Error> {
    let mut w = Writer {
        rs,
        objects: Objects::default(),
        rule: String::new(),
        n: 0,
    };
    let mut notes = Vec::new();
    let mut refused = Vec::new();
    let folded = folds(&mut w, &mut refused);
    let mut actions = Vec::new();
    let mut kept: Vec<&Rule> = Vec::new();
    for (i, r) in rs.rules.iter().enumerate() {
        if matches!(r.action, Action::Allow) {
            if folded.contains(&i) {
                notes.push(format!("{}: requestctl has no exemptions; its condition is in every later rule's expression as AND NOT", r.name));
            } else if !r.enabled || r.shadow {
                notes.push(format!("{}: a disabled or shadow allow is left out (requestctl has no exemptions, and enabling its action would deny)", r.name));
            }
            continue;
        }
        if let Action::Throttle(t) = &r.action {
            if t.unit != Unit::Requests {
                notes.push(format!(
                    "{}: packet and connection limits are the XDP program's; not in requestctl",
                    r.name
                ));
                continue;
            }
        }
        let mut cond = vec![r.cond.clone()];
        for &a in folded.iter().filter(|&&a| a < i) {
            if shares(&rs.rules[a], r) {
                cond.push(Cond::Not(Box::new(rs.rules[a].cond.clone())));
            }
        }
        let cond = if cond.len() == 1 {
            cond.remove(0)
        } else {
            Cond::And(cond)
        };
        let saved = w.objects.clone();
        w.rule = r.name.clone();
        w.n = 0;
        let written = w.cond(&cond).and_then(|e: Ex| {
            let text = w.text(&e);
            action(r, &text)
        });
        let written = match written {
            Ok(x) if enforces(r) => match kept.iter().find_map(|k| out_of_order(k, r)) {
                Some(why) => Err(why),
                None => Ok(x),
            },
            x => x,
        };
        match written {
            Ok(text) => {
                if enforces(r) {
                    kept.push(r);
                }
                actions.push((
                    format!("request-actions/{}/{}.yaml", o.cluster, r.name),
                    text,
                ));
            }
            Err(why) => {
                w.objects = saved;
                if r.enabled {
                    refused.push((r.name.clone(), why));
                } else {
                    notes.push(format!("{} (disabled) left out: {why}", r.name));
                }
            }
        }
    }
    if !refused.is_empty() && !o.skip_unsupported {
        return Err(Error::Unsupported(refused));
    }
    let mut files = Vec::new();
    for (set, name) in &w.objects.ipblocks {
        if let Some(s) = rs.ipsets.get(*set as usize) {
            files.push((
                format!("request-ipblocks/abuse/{name}.yaml"),
                ipblock_file(s),
            ));
        }
    }
    if w.objects.any {
        let name = ANY.trim_start_matches("pattern@");
        files.push((
            format!("request-patterns/{name}.yaml"),
            "url_path: '^'\n".into(),
        ));
    }
    let mut patterns: Vec<_> = w.objects.patterns.iter().collect();
    patterns.sort_by(|a, b| a.1.cmp(b.1));
    for (p, name) in patterns {
        files.push((
            format!("request-patterns/rctl/{name}.yaml"),
            pattern_file(p),
        ));
    }
    files.extend(actions);
    Ok(Tree {
        files,
        notes,
        skipped: refused,
    })
}
