//! `rctl explain`: the plan in evaluation order, as text or JSON, and
//! with `--witness` a request that reaches each rule.

use crate::common::{load_ruleset, print, warn_site, Format, Limits};
use anyhow::Result;
use rctl_compiler::ir::{Action, Bucket, Key, Rule, RulePlan, Ruleset, Unit, XdpKind};
use rctl_compiler::value::fmt_duration;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl explain`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// Sources, or one compiled .rctlc artifact.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Show only rules for this site.
    #[arg(long)]
    site: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also print, per rule, a request that reaches it (or the rules
    /// that decide all of its traffic first), as text.
    #[arg(long)]
    witness: bool,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when the sources have errors.
pub fn run(a: Args) -> Result<ExitCode> {
    let opts = a.limits.options();
    let Some(loaded) = load_ruleset(&a.paths, &opts)? else {
        return Ok(ExitCode::from(1));
    };
    let (rs, sizes) = (loaded.ruleset, loaded.ipblock_sizes);
    let site = a.site.as_deref();
    warn_site(&rs, site);
    let out = match a.format {
        Format::Text => text(&rs, &sizes, site),
        Format::Json => json(&rs, &sizes, site)?,
    };
    print(&out, a.format)?;
    if a.witness {
        print(&reaching(&rs, &opts), Format::Text)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn action(a: &Action) -> String {
    match a {
        Action::Allow => "allow".into(),
        Action::Log => "log".into(),
        Action::Drop => "drop".into(),
        Action::Deny { status, reason } => format!("deny {status} {reason:?}"),
        Action::Throttle(t) => {
            let unit = match t.unit {
                Unit::Requests => "requests",
                Unit::Packets => "packets",
                Unit::Connections => "connections",
            };
            let ban = if t.ban_ms > 0 {
                format!(", ban {}", fmt_duration(t.ban_ms))
            } else {
                String::new()
            };
            let excess = if t.unit == Unit::Requests {
                format!("excess gets {} {:?} with Retry-After", t.status, t.reason)
            } else {
                "excess is dropped".to_string()
            };
            let bucket = match t.bucket {
                Bucket::Gcra => "",
                Bucket::Vsthrottle => ", vsthrottle's bucket",
            };
            let counted = if t.shared {
                "counted site-wide (shared: Redis through `rctl agent --redis`; per host \
                 without it)"
            } else {
                "counted per host"
            };
            format!(
                "throttle {} {unit} per {}, burst {}, by {}{ban}{bucket}, {counted}, {excess}",
                t.limit,
                fmt_duration(t.period_ms),
                t.burst,
                Key::list(&t.keys)
            )
        }
    }
}

fn plane(p: &RulePlan) -> &'static str {
    match p.xdp.as_ref().map(|x| x.kind) {
        None => "user space",
        Some(XdpKind::Exempt) => "user space, and XDP exempts its address projection",
        Some(XdpKind::Allow) => "XDP (and user space)",
        Some(XdpKind::Drop) => "XDP (and user space)",
        Some(XdpKind::Throttle) => "XDP",
    }
}

fn selected<'a>(
    rs: &'a Ruleset,
    site: Option<&'a str>,
) -> impl Iterator<Item = (usize, &'a Rule, &'a RulePlan)> {
    rs.rules
        .iter()
        .zip(&rs.plan)
        .enumerate()
        .filter(move |(_, (r, _))| r.applies_to(site))
        .map(|(i, (r, p))| (i, r, p))
}

/// The plan as text.
fn text(rs: &Ruleset, sizes: &[(String, usize, usize)], site: Option<&str>) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ruleset: {}, {}, {}",
        crate::common::count(rs.rules.len(), "rule"),
        crate::common::count(rs.atoms.len(), "predicate"),
        crate::common::count(rs.sources.len(), "source")
    );
    if !sizes.is_empty() {
        let _ = writeln!(o, "\nipblocks (prefixes after merging):");
        let w = sizes.iter().map(|s| s.0.len()).max().unwrap_or(0);
        for (name, v4, v6) in sizes {
            let _ = writeln!(o, "  {name:<w$}  {v4:>8} IPv4  {v6:>8} IPv6");
        }
    }
    let _ = writeln!(
        o,
        "\nrules in evaluation order (ascending priority, then file order){}:",
        site.map_or(String::new(), |s| format!(" for site {s}"))
    );
    for (n, (_, r, p)) in selected(rs, site).enumerate() {
        let mut flags = Vec::new();
        if !r.enabled {
            flags.push("disabled");
        }
        if r.shadow {
            flags.push("shadow");
        }
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", flags.join(", "))
        };
        let sites = if r.sites.is_empty() {
            "all sites".to_string()
        } else {
            format!("sites {}", r.sites.join(", "))
        };
        let _ = writeln!(
            o,
            "{:>3}. {}{flags}  priority {}, {sites}  ({}:{}:{})",
            n + 1,
            r.name,
            r.priority,
            r.origin.file,
            r.origin.line,
            r.origin.col
        );
        let _ = writeln!(o, "     action: {}", action(&r.action));
        let _ = writeln!(o, "     plane:  {}", plane(p));
        if let Some(x) = &p.xdp {
            let _ = writeln!(
                o,
                "     xdp:    {} term{} over ip/dst_ip/port/proto",
                x.dnf.len(),
                if x.dnf.len() == 1 { "" } else { "s" }
            );
        }
        if !p.note.is_empty() {
            let _ = writeln!(o, "     why:    {}", p.note);
        }
    }
    let xdp = rs.plan.iter().filter(|p| p.xdp.is_some()).count();
    let _ = writeln!(o, "\n{xdp} of {} rules take part in XDP; every rule is enforced in user space except packet and connection limits, which are XDP's alone.", rs.rules.len());
    o
}

/// The plan as JSON.
fn json(
    rs: &Ruleset,
    sizes: &[(String, usize, usize)],
    site: Option<&str>,
) -> anyhow::Result<String> {
    let rules: Vec<serde_json::Value> = selected(rs, site)
        .map(|(i, r, p)| {
            serde_json::json!({
                "index": i,
                "name": r.name,
                "priority": r.priority,
                "sites": r.sites,
                "enabled": r.enabled,
                "shadow": r.shadow,
                "action": r.action.kind(),
                "detail": action(&r.action),
                "keys": match &r.action { Action::Throttle(t) => Key::list(&t.keys), _ => String::new() },
                "shared": matches!(&r.action, Action::Throttle(t) if t.shared),
                "plane": plane(p),
                "xdp": p.xdp.as_ref().map(|x| format!("{:?}", x.kind).to_lowercase()),
                "not_offloaded_because": p.note,
                "origin": r.origin,
            })
        })
        .collect();
    let ipblocks: Vec<serde_json::Value> = sizes
        .iter()
        .map(|(n, a, b)| serde_json::json!({"name": n, "v4": a, "v6": b}))
        .collect();
    Ok(
        serde_json::to_string_pretty(&serde_json::json!({"rules": rules, "ipblocks": ipblocks}))?
            + "\n",
    )
}

/// Per rule, a request that reaches it, or why none does
/// (`rctl explain --witness`).
fn reaching(rs: &Ruleset, opts: &rctl_compiler::Options) -> String {
    use rctl_compiler::proof::{reaching, Reach};
    let mut out = String::from("\nrequests that reach each rule:\n");
    let answers = reaching(&rs.rules, &rs.atoms, &rs.ipsets, opts);
    for (r, answer) in rs.rules.iter().zip(answers) {
        let line = match answer {
            None => "not asked: it tests only addresses, ports and protocols (XDP decides those packets in its own order), or is disabled".to_string(),
            Some(Reach::Reached { witness, site }) => {
                let at = site.map(|s| format!(" (at site {s})")).unwrap_or_default();
                format!("reached by {}{at}", witness.summary())
            }
            Some(Reach::Covered(by)) => {
                let names: Vec<&str> = by.iter().map(|&i| rs.rules[i].name.as_str()).collect();
                format!("unreachable: {} decide all of its traffic first", names.join(", "))
            }
            Some(Reach::NeverMatches) => "unreachable: its condition holds for no request".into(),
            Some(Reach::Unknown(why)) => format!("not decided: {why}"),
        };
        let _ = writeln!(out, "  {:<28} {line}", r.name);
    }
    out
}
