//! Varnish (7.1, with varnish-modules' vsthrottle): the rules themselves
//! in VCL, in requestctl's shape: one `if` per rule in evaluation order.
//!
//! Two files:
//! - [`RULES_FILE`], to `include` at the top level of the operator's VCL:
//!   the ipblocks as ACLs, `sub rctl_recv` (call it first in `vcl_recv`)
//!   and `sub rctl_synth` (call it first in `vcl_synth`: it sets
//!   `Retry-After` on throttled answers and `X-Requestctl`);
//! - [`MAIN_FILE`], a complete VCL doing exactly that, in front of one
//!   backend (what the tests run, and an example).
//!
//! Each rule becomes `if (CONDITION) { … }`: `allow` returns from
//! `rctl_recv` (nothing later can deny the updater), `deny` is
//! `return (synth(STATUS, "REASON"))`, a throttle is
//! `vsthrottle.is_denied(KEY, LIMIT, PERIOD, BAN)` then `synth`, and
//! `log` and `shadow` rules add their name to `X-Requestctl`.
//!
//! Fields are computed once at the top, as rctl computes them: the host in
//! lower case without its port, the path percent-normalised (escapes of
//! unreserved characters decoded, other escapes in upper case), the query.
//! A test on an absent header is false (Varnish would give the regex
//! `""`), regexes are written for PCRE on bytes ([`crate::pcre`]).
//!
//! Refused, with the reason: `drop` (Varnish always answers), query
//! parameters (VCL cannot decode them), throttle keys VCL cannot compute
//! (`path`, `prefix(…)`, `query(…)`), packet and connection limits (XDP's;
//! left out with a note). The default bucket (GCRA) is written as the
//! vsthrottle bucket of the same burst and rate: both admit `burst` at once
//! and ban alike; their refills differ (a note says so); `bucket
//! vsthrottle` is exact.

use crate::check;
use crate::pcre::{literal, to_pcre};
use rctl_compiler::ir::{
    Action, Atom, Bucket, Cond, Key, Proto, Rule, Ruleset, StrField, StrOp, Unit,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The file to include.
pub const RULES_FILE: &str = "rctl-rules.vcl";
/// The complete VCL around it.
pub const MAIN_FILE: &str = "rctl-main.vcl";

/// Where the client's address comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientIp {
    /// A header set by the TLS terminator in front (requestctl's
    /// `X-Client-IP`); the connection's address when it is missing or
    /// not an address.
    Header(String),
    /// The connection's address (`client.ip`).
    Connection,
}

/// How to write the VCL.
#[derive(Debug, Clone)]
pub struct Options {
    /// The client address.
    pub client_ip: ClientIp,
    /// Only rules for this site (`None`: every rule).
    pub site: Option<String>,
    /// The backend of [`MAIN_FILE`] (`host:port`).
    pub backend: (String, u16),
    /// Emit without the rules VCL cannot express (each is a warning),
    /// instead of refusing the ruleset.
    pub skip_unsupported: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            client_ip: ClientIp::Header("X-Client-IP".into()),
            site: None,
            backend: ("127.0.0.1".into(), 8080),
            skip_unsupported: false,
        }
    }
}

/// The emitted files, the notes, and the rules left out (name, reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vcl {
    /// [`RULES_FILE`] and [`MAIN_FILE`], with their text.
    pub files: Vec<(String, String)>,
    /// What differs from rctl, one sentence each.
    pub notes: Vec<String>,
    /// Rules left out, with why (empty unless `skip_unsupported`).
    pub skipped: Vec<(String, String)>,
}

/// A VCL string literal (`"…"`, or `{"…"}` when it holds a quote).
fn string(s: &str) -> Result<String, String> {
    if s.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{s:?} has a control character, which VCL strings cannot hold"
        ));
    }
    if !s.contains('"') {
        Ok(format!("\"{s}\""))
    } else if !s.contains("\"}") {
        Ok(format!("{{\"{s}\"}}"))
    } else {
        Err(format!("{s:?} holds `\"}}`, which no VCL string can"))
    }
}

/// The VCL name of a header, if VCL can write it (`req.http.NAME`).
fn header(h: &str) -> Result<String, String> {
    if !h.is_empty()
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(format!("req.http.{h}"))
    } else {
        Err(format!(
            "header {h:?}: VCL writes only letters, digits, - and _ in header names"
        ))
    }
}

struct Writer<'a> {
    rs: &'a Ruleset,
    o: &'a Options,
    uses_host: bool,
    uses_path: bool,
    uses_query: bool,
    acls: BTreeMap<u32, String>,
}

impl Writer<'_> {
    fn field(&mut self, f: &StrField) -> Result<String, String> {
        Ok(match f {
            StrField::Method => "req.method".into(),
            StrField::Host => {
                self.uses_host = true;
                "req.http.X-Rctl-Host".into()
            }
            StrField::Path => {
                self.uses_path = true;
                "req.http.X-Rctl-Path".into()
            }
            StrField::Query => {
                self.uses_query = true;
                "req.http.X-Rctl-Query".into()
            }
            StrField::Url => "req.url".into(),
            StrField::Header(h) => header(h)?,
            StrField::QueryParam(p) => {
                return Err(format!(
                    "query({p:?}): VCL cannot percent-decode a query parameter as rctl does"
                ))
            }
        })
    }

    fn client(&self) -> String {
        match &self.o.client_ip {
            ClientIp::Header(h) => format!("std.ip(req.http.{h}, client.ip)"),
            ClientIp::Connection => "client.ip".into(),
        }
    }

    fn acl(&mut self, set: u32) -> String {
        let name = format!("rctl_set{set}");
        self.acls.entry(set).or_insert_with(|| name.clone());
        name
    }

    fn atom(&mut self, a: &Atom) -> Result<String, String> {
        Ok(match a {
            Atom::Str { field, op } => {
                let f = self.field(field)?;
                // rctl: a test on an absent field is false. Method, url and
                // the computed fields are never absent.
                let guard = matches!(field, StrField::Header(_)).then(|| format!("{f} && "));
                let test = match op {
                    StrOp::Eq(v) => format!("{f} == {}", string(v)?),
                    StrOp::In(vs) => {
                        let mut parts = Vec::new();
                        for v in vs {
                            parts.push(format!("{f} == {}", string(v)?));
                        }
                        if parts.is_empty() {
                            "false".into()
                        } else {
                            format!("({})", parts.join(" || "))
                        }
                    }
                    StrOp::Prefix(v) => format!("{f} ~ \"\\A{}\"", literal(v.as_bytes())),
                    StrOp::Suffix(v) => format!("{f} ~ \"{}\\z\"", literal(v.as_bytes())),
                    StrOp::Contains(v) => format!("{f} ~ \"{}\"", literal(v.as_bytes())),
                    StrOp::Regex { pattern, ci } => {
                        let p = to_pcre(pattern, *ci)
                            .map_err(|e| format!("regex {pattern:?}: {}", e.0))?;
                        format!("{f} ~ \"{p}\"")
                    }
                };
                match guard {
                    Some(g) => format!("({g}{test})"),
                    None => test,
                }
            }
            Atom::Present(StrField::Header(h)) => header(h)?,
            Atom::Present(f) => {
                return Err(format!(
                    "`{} present`: VCL cannot decode query parameters",
                    f.display()
                ))
            }
            Atom::Ip(s) => format!("{} ~ {}", self.client(), self.acl(*s)),
            Atom::DstIp(s) => format!("server.ip ~ {}", self.acl(*s)),
            Atom::Port(r) => {
                let parts: Vec<String> = r
                    .iter()
                    .map(|&(a, b)| {
                        if a == b {
                            format!("std.port(server.ip) == {a}")
                        } else {
                            format!("(std.port(server.ip) >= {a} && std.port(server.ip) <= {b})")
                        }
                    })
                    .collect();
                format!("({})", parts.join(" || "))
            }
            // Requests come over TCP.
            Atom::Proto(p) => (if p.contains(&Proto::Tcp) {
                "true"
            } else {
                "false"
            })
            .into(),
        })
    }

    fn cond(&mut self, c: &Cond) -> Result<String, String> {
        Ok(match c {
            Cond::True => "true".into(),
            Cond::False => "false".into(),
            Cond::Atom(a) => {
                let atom = self.rs.atoms.get(*a as usize).ok_or("bad atom index")?;
                self.atom(atom)?
            }
            Cond::Not(x) => format!("!({})", self.cond(x)?),
            Cond::And(v) | Cond::Or(v) => {
                let sep = if matches!(c, Cond::And(_)) {
                    " && "
                } else {
                    " || "
                };
                let mut parts = Vec::new();
                for x in v {
                    parts.push(self.cond(x)?);
                }
                format!("({})", parts.join(sep))
            }
        })
    }

    /// vsthrottle's key for a throttle: the rule's name, then each key part.
    fn key(&mut self, r: &Rule, keys: &[Key]) -> Result<String, String> {
        let mut k = string(&format!("rctl:{}", r.name))?;
        let mut headers = 0;
        for key in keys {
            let part = match key {
                Key::Server => continue,
                Key::Ip => self.client(),
                Key::Global | Key::Host => self.field(&StrField::Host)?,
                Key::Method => "req.method".into(),
                Key::Header(h) => {
                    headers += 1;
                    if headers > 1 {
                        return Err("two header keys: VCL joins key parts as strings, and header values could run into each other".into());
                    }
                    header(h)?
                }
                Key::Path => {
                    return Err("`by path`: VCL keys the raw URL, rctl the normalised path".into())
                }
                Key::Prefix { .. } => {
                    return Err("`by prefix(…)`: VCL cannot mask an address into a key".into())
                }
                Key::Query(q) => {
                    return Err(format!(
                        "`by query({q:?})`: VCL cannot decode a query parameter"
                    ))
                }
            };
            let _ = write!(k, " + \" \" + {part}");
        }
        Ok(k)
    }

    fn rule(&mut self, r: &Rule, out: &mut String, notes: &mut Vec<String>) -> Result<(), String> {
        let cond = self.cond(&r.cond)?;
        let tag = format!(
            "set req.http.X-Requestctl = req.http.X-Requestctl + \",{}\";",
            r.name
        );
        let _ = writeln!(out, "    # rule {} (priority {})", r.name, r.priority);
        let body = match (&r.action, r.shadow) {
            (Action::Log, _) | (_, true) => tag,
            (Action::Allow, false) => "return;".into(),
            (Action::Drop, false) => {
                return Err(
                    "drop: Varnish answers every request it reads; it cannot close without one"
                        .into(),
                )
            }
            (Action::Deny { status, reason }, false) => {
                format!("return (synth({status}, {}));", string(reason)?)
            }
            (Action::Throttle(t), false) => {
                let key = self.key(r, &t.keys)?;
                let (limit, period_ms) = match t.bucket {
                    Bucket::Vsthrottle => (t.limit, t.period_ms),
                    Bucket::Gcra => {
                        notes.push(format!(
                            "{}: rctl's default bucket (GCRA) is written as vsthrottle's with the same burst ({}) and rate; both admit the burst at once and ban alike, but vsthrottle refills by whole tokens from the last take (use `bucket vsthrottle` for exactly Varnish's admission)",
                            r.name, t.burst
                        ));
                        let p = u128::from(t.period_ms) * u128::from(t.burst)
                            / u128::from(t.limit.max(1));
                        (t.burst, p.max(1).min(u128::from(u64::MAX)) as u64)
                    }
                };
                let retry = if t.ban_ms > 0 {
                    t.ban_ms.div_ceil(1000)
                } else {
                    period_ms.div_ceil(1000 * u64::from(limit.max(1))).max(1)
                };
                format!(
                    "{tag}\n        if (vsthrottle.is_denied({key}, {limit}, {period_ms}ms, {}ms)) {{\n            set req.http.X-Rctl-Retry-After = \"{retry}\";\n            return (synth({}, {}));\n        }}",
                    t.ban_ms,
                    t.status,
                    string(&t.reason)?
                )
            }
        };
        let _ = writeln!(out, "    if ({cond}) {{\n        {body}\n    }}");
        Ok(())
    }
}

/// The ACL of an ip set.
fn acl_text(name: &str, set: &rctl_compiler::ir::IpSet) -> String {
    let mut s = format!("acl {name} {{\n    # {}\n", set.name);
    for &(n, l) in &set.prefixes.v4 {
        let _ = writeln!(s, "    \"{}\"/{l};", std::net::Ipv4Addr::from(n));
    }
    for &(n, l) in &set.prefixes.v6 {
        let _ = writeln!(s, "    \"{}\"/{l};", std::net::Ipv6Addr::from(n));
    }
    if set.prefixes.v4.is_empty() && set.prefixes.v6.is_empty() {
        // An empty ACL: a network no client can have.
        s.push_str("    ! \"0.0.0.0\"/0;\n    ! \"::\"/0;\n");
    }
    s.push_str("}\n\n");
    s
}

/// The percent-normalisation of the path, as rctl's: each escape of an
/// unreserved character decoded, then every other escape's hex in upper
/// case.
fn normalise_path() -> String {
    let mut s =
        String::from("        set req.http.X-Rctl-Path = regsub(req.url, \"\\?.*\\z\", \"\");\n");
    let unreserved = (b'0'..=b'9')
        .chain(b'A'..=b'Z')
        .chain(b'a'..=b'z')
        .chain(*b"-._~");
    s.push_str("        if (req.http.X-Rctl-Path ~ \"%\") {\n");
    for c in unreserved {
        let _ = writeln!(
            s,
            "            set req.http.X-Rctl-Path = regsuball(req.http.X-Rctl-Path, \"(?i)%{:02x}\", \"{}\");",
            c,
            c as char
        );
    }
    for d in b'a'..=b'f' {
        let up = d.to_ascii_uppercase() as char;
        let d = d as char;
        let _ = writeln!(
            s,
            "            set req.http.X-Rctl-Path = regsuball(req.http.X-Rctl-Path, \"%{d}([0-9A-Fa-f])\", \"%{up}\\1\");"
        );
        let _ = writeln!(
            s,
            "            set req.http.X-Rctl-Path = regsuball(req.http.X-Rctl-Path, \"(%[0-9A-F]){d}\", \"\\1{up}\");"
        );
    }
    s.push_str("        }\n");
    s
}

/// Writes the VCL for a ruleset.
pub fn emit(rs: &Ruleset, o: &Options) -> Result<Vcl, Vec<(String, String)>> {
    let opt = |e: crate::Error| vec![(e.option().to_string(), e.kind().to_string())];
    if let ClientIp::Header(h) = &o.client_ip {
        check::header("--client-ip-header", h).map_err(opt)?;
        header(h).map_err(|e| vec![("--client-ip-header".to_string(), e)])?;
    }
    if let Some(site) = &o.site {
        check::site("--site", site).map_err(opt)?;
    }
    check::host("--backend", &o.backend.0).map_err(opt)?;
    let mut w = Writer {
        rs,
        o,
        uses_host: false,
        uses_path: false,
        uses_query: false,
        acls: BTreeMap::new(),
    };
    let mut rules = String::new();
    let mut notes = Vec::new();
    let mut refused = Vec::new();
    for r in &rs.rules {
        if !r.enabled || !r.applies_to(o.site.as_deref()) {
            continue;
        }
        if let Action::Throttle(t) = &r.action {
            if t.unit != Unit::Requests {
                notes.push(format!(
                    "{}: packet and connection limits are the XDP program's; not in VCL",
                    r.name
                ));
                continue;
            }
        }
        let mut one = String::new();
        let mut n = Vec::new();
        // VCL refuses an unused ACL: a refused rule's sets are dropped.
        let acls = w.acls.clone();
        match w.rule(r, &mut one, &mut n) {
            Ok(()) => {
                rules.push_str(&one);
                notes.extend(n);
            }
            Err(why) => {
                w.acls = acls;
                refused.push((r.name.clone(), why));
            }
        }
    }
    if !refused.is_empty() && !o.skip_unsupported {
        return Err(refused);
    }
    let mut text = String::from(
        "vcl 4.1;\n\n# Written by `rctl emit vcl`: include at the top level, call rctl_recv\n# first in vcl_recv and rctl_synth first in vcl_synth.\n\nimport std;\nimport vsthrottle;\n\n",
    );
    for (set, name) in &w.acls {
        if let Some(s) = rs.ipsets.get(*set as usize) {
            text.push_str(&acl_text(name, s));
        }
    }
    text.push_str("sub rctl_recv {\n    unset req.http.X-Rctl-Retry-After;\n    if (!req.http.X-Requestctl) {\n        set req.http.X-Requestctl = \"\";\n    }\n");
    if w.uses_host {
        text.push_str("    set req.http.X-Rctl-Host = \"\";\n    if (req.http.host) {\n        set req.http.X-Rctl-Host = std.tolower(regsub(req.http.host, \"\\A(\\[[^\\]]*\\]|[^:\\[]*):[0-9]*\\z\", \"\\1\"));\n    }\n");
    }
    if w.uses_path {
        text.push_str("    if (true) {\n");
        text.push_str(&normalise_path());
        text.push_str("    }\n");
    }
    if w.uses_query {
        text.push_str("    set req.http.X-Rctl-Query = \"\";\n    if (req.url ~ \"\\?\") {\n        set req.http.X-Rctl-Query = regsub(req.url, \"\\A[^?]*\\?\", \"\");\n    }\n");
    }
    text.push_str(&rules);
    text.push_str("}\n\nsub rctl_synth {\n    if (req.http.X-Rctl-Retry-After) {\n        set resp.http.Retry-After = req.http.X-Rctl-Retry-After;\n    }\n    set resp.http.X-Requestctl = regsub(req.http.X-Requestctl, \"\\A,\", \"\");\n}\n");
    let main = format!(
        "vcl 4.1;\n\n# Written by `rctl emit vcl`: the rules in front of one backend.\n\ninclude \"./{RULES_FILE}\";\n\nbackend default {{\n    .host = {};\n    .port = \"{}\";\n}}\n\nsub vcl_recv {{\n    call rctl_recv;\n    return (pass);\n}}\n\nsub vcl_synth {{\n    call rctl_synth;\n}}\n\nsub vcl_deliver {{\n    set resp.http.X-Requestctl = regsub(req.http.X-Requestctl, \"\\A,\", \"\");\n}}\n",
        string(&o.backend.0).map_err(|e| vec![("--backend".to_string(), e)])?,
        o.backend.1
    );
    Ok(Vcl {
        files: vec![(RULES_FILE.into(), text), (MAIN_FILE.into(), main)],
        notes,
        skipped: refused,
    })
}
