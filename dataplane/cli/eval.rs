//! `rctl eval`: decide one request given on the command line, with a trace
//! of every stage, like Cloudflare's Trace.

use crate::common::{load_ruleset, print, warn_site, Format, Limits};
use anyhow::{bail, Context, Result};
use rctl_compiler::cidr::{fmt_v4, fmt_v6};
use rctl_compiler::ir::{Atom, Ruleset, StrOp};
use rctl_dataplane::{Engine, EngineConfig, Request, Trace, Verdict};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Most copies of the request `--count` sends, checked before anything
/// is loaded (each copy is decided and traced; a million take a fraction
/// of a second).
const MAX_COUNT: u32 = 1_000_000;

/// `rctl eval`'s flags: the ruleset, and the request.
#[derive(clap::Args)]
pub struct Args {
    /// Sources, or one compiled .rctlc artifact.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// The URL: a path (`/sparql?query=…`) or `https://host/path`.
    #[arg(long, default_value = "/")]
    url: String,
    /// HTTP method.
    #[arg(long, short = 'X', default_value = "GET")]
    method: String,
    /// Host (default: the URL's, or the Host header).
    #[arg(long)]
    host: Option<String>,
    /// A header, `Name: value`; repeatable.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Client address.
    #[arg(long, default_value = "192.0.2.1")]
    ip: IpAddr,
    /// The edge address the client reached (`dst_ip` rules are false
    /// without it).
    #[arg(long)]
    dst_ip: Option<IpAddr>,
    /// Destination port (default: the URL's scheme's, else 443).
    #[arg(long)]
    port: Option<u16>,
    /// Evaluate this site's rules.
    #[arg(long)]
    site: Option<String>,
    /// Send the request this many times at once (to see limits act);
    /// at most 1,000,000.
    #[arg(long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_COUNT)))]
    count: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when the sources have errors.
pub fn run(a: Args) -> Result<ExitCode> {
    let Some(loaded) = load_ruleset(&a.paths, &a.limits.options())? else {
        return Ok(ExitCode::from(1));
    };
    warn_site(&loaded.ruleset, a.site.as_deref());
    let out = decide(loaded.ruleset, &a)?;
    print(&out, a.format)?;
    Ok(ExitCode::SUCCESS)
}

/// Describes an atom the way the language writes it.
fn describe_atom(rs: &Ruleset, a: &Atom) -> String {
    match a {
        Atom::Str { field, op } => {
            let f = field.display();
            match op {
                StrOp::Eq(v) => format!("{f} == {v:?}"),
                StrOp::Prefix(v) => format!("{f} starts_with {v:?}"),
                StrOp::Suffix(v) => format!("{f} ends_with {v:?}"),
                StrOp::Contains(v) => format!("{f} contains {v:?}"),
                StrOp::Regex { pattern, ci } => {
                    format!("{f} {} {pattern:?}", if *ci { "~*" } else { "~" })
                }
                StrOp::In(vs) => {
                    let shown: Vec<String> = vs.iter().take(5).map(|v| format!("{v:?}")).collect();
                    let more = if vs.len() > 5 {
                        format!(", … ({} in all)", vs.len())
                    } else {
                        String::new()
                    };
                    format!("{f} in {{ {}{more} }}", shown.join(", "))
                }
            }
        }
        Atom::Present(f) => format!("{} present", f.display()),
        Atom::Ip(s) | Atom::DstIp(s) => {
            let name = if matches!(a, Atom::DstIp(_)) {
                "dst_ip"
            } else {
                "ip"
            };
            let set = &rs.ipsets[*s as usize];
            if set.name == "inline" {
                let p = &set.prefixes;
                let mut items: Vec<String> =
                    p.v4.iter().take(3).map(|&(n, l)| fmt_v4(n, l)).collect();
                items.extend(p.v6.iter().take(3).map(|&(n, l)| fmt_v6(n, l)));
                format!("{name} in {{ {} }}", items.join(", "))
            } else {
                format!("{name} in ipblock@{}", set.name)
            }
        }
        Atom::Port(r) => {
            let items: Vec<String> = r
                .iter()
                .map(|&(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect();
            format!("port in {{ {} }}", items.join(", "))
        }
        Atom::Proto(p) => {
            let items: Vec<String> = p.iter().map(|p| format!("{p:?}").to_lowercase()).collect();
            format!("proto in {{ {} }}", items.join(", "))
        }
    }
}

fn verdict_text(rs: &Ruleset, v: &Verdict) -> String {
    let by = |i: usize| rs.rules[i].name.as_str();
    match v {
        Verdict::Pass => "pass (no rule decided)".into(),
        Verdict::Allow { rule } => format!("allow, by {}", by(*rule)),
        Verdict::Deny {
            rule,
            status,
            reason,
        } => format!("deny {status} {reason:?}, by {}", by(*rule)),
        Verdict::Throttle {
            rule,
            status,
            reason,
            retry_after_s,
        } => format!(
            "throttle {status} {reason:?}, Retry-After: {retry_after_s}, by {}",
            by(*rule)
        ),
        Verdict::Drop { rule } => format!("drop (close without a response), by {}", by(*rule)),
    }
}

fn split_url(url: &str) -> (Option<&str>, Option<u16>, &str) {
    for (scheme, port) in [("http://", 80), ("https://", 443)] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (authority, target) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            let explicit = authority.rsplit_once(':').and_then(|(_, p)| p.parse().ok());
            return (Some(authority), Some(explicit.unwrap_or(port)), target);
        }
    }
    (None, None, url)
}

/// Decides the request; returns the output text.
fn decide(rs: Ruleset, a: &Args) -> Result<String> {
    let (authority, url_port, target) = split_url(&a.url);
    if !target.starts_with('/') && target != "*" {
        bail!("the URL must be a path (/x?y) or http(s)://host/path");
    }
    let mut headers: Vec<(String, String)> = Vec::new();
    for h in &a.headers {
        let (n, v) = h
            .split_once(':')
            .with_context(|| format!("header {h:?} is not `Name: value`"))?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let host = a
        .host
        .clone()
        .or_else(|| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("host"))
                .map(|(_, v)| v.clone())
        })
        .or(authority.map(String::from))
        .unwrap_or_default();
    let port = a.port.or(url_port).unwrap_or(443);
    let engine = Engine::new(
        rs,
        &EngineConfig {
            site: a.site.clone(),
            ..Default::default()
        },
    )?;
    let hs: Vec<(&[u8], &[u8])> = headers
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    let req = Request {
        method: a.method.as_bytes(),
        host: host.as_bytes(),
        target: target.as_bytes(),
        headers: &hs,
        ip: a.ip,
        dst: a.dst_ip,
        port,
        time_ns: 1_000_000_000_000,
    };
    let mut scratch = engine.scratch();
    let mut tally: std::collections::BTreeMap<String, u32> = Default::default();
    let mut trace = Trace::default();
    let mut decision = None;
    for _ in 0..a.count.max(1) {
        trace = Trace::default();
        let d = engine.decide_request_with(&req, &mut scratch, Some(&mut trace));
        *tally
            .entry(verdict_text(engine.ruleset(), &d.verdict))
            .or_default() += 1;
        decision = Some(d);
    }
    let Some(d) = decision else {
        bail!("no request decided")
    };
    let rs = engine.ruleset();
    if a.format == Format::Json {
        let v = serde_json::json!({
            "request": { "method": a.method, "host": host, "target": target, "headers": headers, "ip": a.ip.to_string(), "dst_ip": a.dst_ip.map(|d| d.to_string()), "port": port },
            "predicates": trace.atoms.iter().map(|&i| serde_json::json!({"index": i, "test": describe_atom(rs, &rs.atoms[i as usize])})).collect::<Vec<_>>(),
            "evaluated": trace.evaluated.iter().map(|&i| rs.rules[i].name.clone()).collect::<Vec<_>>(),
            "matched": trace.steps.iter().map(|s| serde_json::json!({"rule": rs.rules[s.rule].name, "effect": s.effect.kind(), "shadow": s.shadow})).collect::<Vec<_>>(),
            "verdict": { "kind": d.verdict.kind(), "rule": d.verdict.rule().map(|i| rs.rules[i].name.clone()), "text": verdict_text(rs, &d.verdict) },
            "shadow": d.logged.iter().map(|(i, v)| serde_json::json!({"rule": rs.rules[*i].name, "would": v.kind()})).collect::<Vec<_>>(),
            "tally": tally,
            "count": a.count.max(1),
            "verdict_of": if a.count > 1 { "the last request" } else { "the request" },
        });
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "request:  {} {host}{target} from {} to {}port {port}{}",
        a.method,
        a.ip,
        a.dst_ip.map_or(String::new(), |d| format!("{d} ")),
        a.site
            .as_ref()
            .map_or(String::new(), |s| format!(" at site {s}"))
    );
    for (n, v) in &headers {
        let _ = writeln!(o, "          {n}: {v}");
    }
    let _ = writeln!(
        o,
        "\npredicates that hold ({} of {}):",
        trace.atoms.len(),
        rs.atoms.len()
    );
    for &i in &trace.atoms {
        let _ = writeln!(o, "  [{i:>3}] {}", describe_atom(rs, &rs.atoms[i as usize]));
    }
    let _ = writeln!(
        o,
        "\nrules evaluated, in order ({} of {}; the index skipped the rest):",
        trace.evaluated.len(),
        rs.rules.len()
    );
    for &i in &trace.evaluated {
        let r = &rs.rules[i];
        let step = trace.steps.iter().find(|s| s.rule == i);
        let what = match step {
            None => "no match".to_string(),
            Some(s) if s.shadow => format!("matched, shadow: would {}", s.effect.kind()),
            Some(s) if s.effect == Verdict::Pass => {
                "matched, under its limit: continue".to_string()
            }
            Some(s) => format!("matched: {}", s.effect.kind()),
        };
        let _ = writeln!(o, "  {:<28} priority {:<5} {what}", r.name, r.priority);
    }
    // The trace and verdict are the last copy's: say so when there are
    // several (the first ones may have been decided otherwise).
    if a.count > 1 {
        let _ = writeln!(
            o,
            "\nthe trace above and the verdict below are the last of {} requests'",
            a.count
        );
    }
    let label = if a.count > 1 {
        format!("verdict of request {}", a.count)
    } else {
        "verdict".to_string()
    };
    let _ = writeln!(o, "\n{label}:  {}", verdict_text(rs, &d.verdict));
    for (i, v) in &d.logged {
        let _ = writeln!(
            o,
            "shadow:   {} would {}",
            rs.rules[*i].name,
            verdict_text(rs, v)
        );
    }
    if a.count > 1 {
        let _ = writeln!(o, "\nall {} identical requests, at once:", a.count);
        for (k, n) in &tally {
            let what = if *n == 1 { "request" } else { "requests" };
            let _ = writeln!(o, "  {n:>6} {what:<8}  {k}");
        }
    }
    Ok(o)
}
