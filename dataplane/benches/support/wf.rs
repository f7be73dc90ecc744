//! The wirefilter baseline: each rule's condition translated into
//! wirefilter's syntax and compiled to one `Filter`; rules run in order, as
//! a VCL or HAProxy configuration would.
//!
//! Translation: fields map one to one, except headers other than
//! User-Agent and Referer, and query parameters other than `action`, which
//! the request mix never sends (they read as ""); `present` becomes `!= ""`;
//! prefixes and suffixes become anchored regexes (wirefilter 0.6 has no
//! starts_with).

use crate::Owned;
use rctl_compiler::ir::{Action, Atom, Cond, Ruleset, StrField, StrOp};
use wirefilter::{ExecutionContext, Filter, Scheme};

pub struct Wirefilter {
    scheme: &'static Scheme,
    filters: Vec<(Filter<'static>, bool)>,
}

fn lit(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
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
                    lit(&format!("^{}", regex_syntax::escape(v)))
                ),
                StrOp::Suffix(v) => format!(
                    "{f} matches {}",
                    lit(&format!("{}$", regex_syntax::escape(v)))
                ),
                StrOp::Contains(v) => format!("{f} contains {}", lit(v)),
                StrOp::Regex { pattern, ci } => format!(
                    "{f} matches {}",
                    lit(&format!("{}{pattern}", if *ci { "(?i)" } else { "" }))
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
    pub fn new(rs: &Ruleset) -> Self {
        let scheme: &'static Scheme = Box::leak(Box::new(Scheme! {
            http.method: Bytes, http.host: Bytes, http.path: Bytes, http.query: Bytes, http.url: Bytes,
            http.ua: Bytes, http.referer: Bytes, http.other: Bytes,
            q.action: Bytes, q.other: Bytes, ip.src: Ip, port: Int,
        }));
        let filters = rs
            .rules
            .iter()
            .filter(|r| r.enabled && !r.is_packet_limit())
            .map(|r| {
                let src = cond(rs, &r.cond);
                let ast = scheme.parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
                (
                    ast.compile(),
                    r.action.is_terminal() && !r.shadow && r.action != Action::Log,
                )
            })
            .collect();
        Wirefilter { scheme, filters }
    }

    /// The index of the first terminal rule that matches.
    pub fn decide(&self, r: &'static Owned) -> Option<usize> {
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
        ctx.set_field_value("http.method", r.method).ok()?;
        ctx.set_field_value("http.host", r.host).ok()?;
        ctx.set_field_value("http.path", path).ok()?;
        ctx.set_field_value("http.query", query).ok()?;
        ctx.set_field_value("http.url", r.target.as_str()).ok()?;
        ctx.set_field_value("http.ua", header("user-agent")).ok()?;
        ctx.set_field_value("http.referer", header("referer"))
            .ok()?;
        ctx.set_field_value("http.other", "").ok()?;
        ctx.set_field_value("q.action", action).ok()?;
        ctx.set_field_value("q.other", "").ok()?;
        ctx.set_field_value("ip.src", r.ip).ok()?;
        ctx.set_field_value("port", 443).ok()?;
        self.filters
            .iter()
            .position(|(f, terminal)| *terminal && f.execute(&ctx).unwrap_or(false))
    }
}
