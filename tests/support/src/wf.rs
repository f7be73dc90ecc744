//! The wirefilter baseline: each rule's condition translated into
//! wirefilter's syntax and compiled to one `Filter`; rules run in order, as
//! a VCL or HAProxy configuration would.
//!
//! Translation: fields map one to one, except headers other than
//! User-Agent and Referer, and query parameters other than `action`, which
//! the request mix never sends (they read as ""); `present` becomes `!= ""`;
//! prefixes and suffixes become anchored regexes (wirefilter 0.6 has no
//! starts_with).
//!
//! What it leaves out, so what its figures do not pay for:
//! - only the rules that decide on their own are compiled: allow, deny and
//!   drop. Throttles (which need a limiter), log rules and shadow rules are
//!   skipped ([`Wirefilter::skipped`] counts them); the engine evaluates
//!   them all.
//! - it reads the path as sent: no percent-decoding or dot-segment
//!   normalisation, which the engine does before matching. The request
//!   mix's paths are already normal, so the two agree on it
//!   ([`agreement`]), not on every request.
//! - the execution context (the request's fields) is built by
//!   [`Wirefilter::context`], outside the timed loop, as an embedding
//!   server builds it while parsing the request; the engine's figure
//!   includes its own field extraction.

use crate::mix::Owned;
use rctl_compiler::ir::{Action, Atom, Cond, Ruleset, StrField, StrOp};
use wirefilter::{ExecutionContext, Filter, Scheme};

/// A ruleset's deciding rules as wirefilter filters.
pub struct Wirefilter {
    scheme: &'static Scheme,
    /// The deciding rules' filters, in order, with their rule indexes.
    filters: Vec<(Filter<'static>, usize)>,
    /// Rules not compiled: throttles, log and shadow rules.
    pub skipped: usize,
}

/// A string literal: wirefilter unescapes `\\` and `\"`.
fn lit(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A regex literal: wirefilter passes backslashes through to the regex
/// as written (only `\"` loses its backslash), so they are not doubled.
fn re(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\\\""))
}

fn field(f: &StrField) -> &'static str {
    match f {
        StrField::Method => "http.method",
        StrField::Host => "http.host",
        StrField::Path => "http.path",
        StrField::Query => "http.query",
        StrField::Url => "http.url",
        StrField::Header(h) if h == "user-agent" => "http.ua",
        StrField::Header(h) if h == "referer" => "http.referer",
        StrField::Header(_) => "http.other",
        StrField::QueryParam(p) if p == "action" => "q.action",
        StrField::QueryParam(_) => "q.other",
    }
}

fn atom(rs: &Ruleset, a: &Atom) -> String {
    match a {
        Atom::Str { field: f, op } => {
            let f = field(f);
            match op {
                StrOp::Eq(v) => format!("{f} == {}", lit(v)),
                StrOp::In(vs) => format!(
                    "{f} in {{{}}}",
                    vs.iter().map(|v| lit(v)).collect::<Vec<_>>().join(" ")
                ),
                StrOp::Prefix(v) => format!(
                    "{f} matches {}",
                    re(&format!("^{}", regex_syntax::escape(v)))
                ),
                StrOp::Suffix(v) => format!(
                    "{f} matches {}",
                    re(&format!("{}$", regex_syntax::escape(v)))
                ),
                StrOp::Contains(v) => format!("{f} contains {}", lit(v)),
                StrOp::Regex { pattern, ci } => format!(
                    "{f} matches {}",
                    re(&format!("{}{pattern}", if *ci { "(?i)" } else { "" }))
                ),
            }
        }
        Atom::Present(f) => format!("{} != \"\"", field(f)),
        Atom::Ip(s) | Atom::DstIp(s) => {
            let side = if matches!(a, Atom::DstIp(_)) {
                "dst"
            } else {
                "src"
            };
            let p = &rs.ipsets[*s as usize].prefixes;
            let mut items: Vec<String> =
                p.v4.iter()
                    .map(|&(n, l)| rctl_compiler::cidr::fmt_v4(n, l))
                    .collect();
            items.extend(p.v6.iter().map(|&(n, l)| rctl_compiler::cidr::fmt_v6(n, l)));
            format!("ip.{side} in {{{}}}", items.join(" "))
        }
        Atom::Port(r) => format!(
            "port in {{{}}}",
            r.iter()
                .map(|&(a, b)| if a == b {
                    a.to_string()
                } else {
                    format!("{a}..{b}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Atom::Proto(_) => "port >= 0".into(),
    }
}

fn cond(rs: &Ruleset, c: &Cond) -> String {
    match c {
        Cond::True => "port >= 0".into(),
        Cond::False => "port < 0".into(),
        Cond::Atom(a) => atom(rs, &rs.atoms[*a as usize]),
        Cond::Not(x) => format!("not ({})", cond(rs, x)),
        Cond::And(v) => format!(
            "({})",
            v.iter()
                .map(|x| cond(rs, x))
                .collect::<Vec<_>>()
                .join(" && ")
        ),
        Cond::Or(v) => format!(
            "({})",
            v.iter()
                .map(|x| cond(rs, x))
                .collect::<Vec<_>>()
                .join(" || ")
        ),
    }
}

impl Wirefilter {
    /// Translates and compiles the deciding rules of `rs`.
    pub fn new(rs: &Ruleset) -> Self {
        let scheme: &'static Scheme = Box::leak(Box::new(Scheme! {
            http.method: Bytes, http.host: Bytes, http.path: Bytes, http.query: Bytes, http.url: Bytes,
            http.ua: Bytes, http.referer: Bytes, http.other: Bytes,
            q.action: Bytes, q.other: Bytes, ip.src: Ip, port: Int,
        }));
        let deciding = |r: &rctl_compiler::ir::Rule| {
            r.enabled
                && !r.is_packet_limit()
                && r.action.is_terminal()
                && !r.shadow
                && r.action != Action::Log
        };
        let filters: Vec<_> = rs
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| deciding(r))
            .map(|(i, r)| {
                let src = cond(rs, &r.cond);
                let ast = scheme.parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
                (ast.compile(), i)
            })
            .collect();
        let skipped = rs.rules.iter().filter(|r| r.enabled).count() - filters.len();
        Wirefilter {
            scheme,
            filters,
            skipped,
        }
    }

    /// The request's fields, as an embedding server sets them.
    pub fn context(&self, r: &'static Owned) -> ExecutionContext<'static> {
        let mut ctx = ExecutionContext::new(self.scheme);
        let (path, query) = r.target.split_once('?').unwrap_or((&r.target, ""));
        let header = |n: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map_or("", |(_, v)| v.as_str())
        };
        let action = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("action="))
            .unwrap_or("");
        let fields = [
            ("http.method", r.method),
            ("http.host", r.host),
            ("http.path", path),
            ("http.query", query),
            ("http.url", r.target.as_str()),
            ("http.ua", header("user-agent")),
            ("http.referer", header("referer")),
            ("http.other", ""),
            ("q.action", action),
            ("q.other", ""),
        ];
        for (f, v) in fields {
            ctx.set_field_value(f, v).expect("a bytes field");
        }
        ctx.set_field_value("ip.src", r.ip)
            .expect("an address field");
        ctx.set_field_value("port", 443).expect("an integer field");
        ctx
    }

    /// The index (in the ruleset) of the first deciding rule that matches.
    pub fn decide(&self, ctx: &ExecutionContext<'static>) -> Option<usize> {
        self.filters
            .iter()
            .find(|(f, _)| f.execute(ctx).unwrap_or(false))
            .map(|&(_, i)| i)
    }
}

/// How the engine and wirefilter decided the same requests.
#[derive(Debug, Default)]
pub struct Agreement {
    /// Requests both decided by the same rule, or both left alone.
    pub same: usize,
    /// Requests the engine throttled (wirefilter has no limiter).
    pub throttled: usize,
    /// Requests decided differently: (request, engine's rule, wirefilter's).
    pub differ: Vec<(usize, Option<usize>, Option<usize>)>,
}

/// Decides every request with a fresh engine (time moving forward by
/// `step_ns` a request) and with `wf`, and compares the deciding rules.
pub fn agreement(rs: &Ruleset, wf: &Wirefilter, reqs: &'static [Owned], step_ns: u64) -> Agreement {
    use rctl_dataplane::{Engine, EngineConfig, Request, Verdict};
    let engine = Engine::new(rs.clone(), &EngineConfig::default()).expect("engine");
    let mut scratch = engine.scratch();
    let mut out = Agreement::default();
    for (i, r) in reqs.iter().enumerate() {
        let headers: Vec<(&[u8], &[u8])> = r
            .headers
            .iter()
            .map(|(a, b)| (a.as_bytes(), b.as_bytes()))
            .collect();
        let req = Request {
            method: r.method.as_bytes(),
            host: r.host.as_bytes(),
            target: r.target.as_bytes(),
            headers: &headers,
            ip: r.ip,
            dst: None,
            port: 443,
            time_ns: (i as u64 + 1) * step_ns,
        };
        let d = engine.decide_request_with(&req, &mut scratch, None);
        let mine = match d.verdict {
            Verdict::Throttle { .. } => {
                out.throttled += 1;
                continue;
            }
            v => v.rule(),
        };
        let theirs = wf.decide(&wf.context(r));
        if mine == theirs {
            out.same += 1;
        } else {
            out.differ.push((i, mine, theirs));
        }
    }
    out
}
