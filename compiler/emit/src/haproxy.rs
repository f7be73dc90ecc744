//! HAProxy (2.6): the rules themselves as ACLs and `http-request` rules.
//!
//! Files:
//! - [`FRONTEND_FILE`], lines for the frontend that rctl protects: one
//!   named ACL per predicate, then one `http-request` rule per rule and DNF
//!   term, in evaluation order (HAProxy conditions have no parentheses, so
//!   each condition is flattened to an OR of ANDs; a rule whose DNF is too
//!   large is refused): `allow` is `http-request allow` (the rules after it
//!   do not run, so the updater stays exempt), `deny` is `http-request
//!   return status S … string "REASON"`, `drop` is `http-request
//!   silent-drop`, `log` and `shadow` rules tag `X-Requestctl`;
//! - [`SECTIONS_FILE`], whole sections for one more `-f` given *before*
//!   the frontend's file: a `global` section with
//!   `expose-experimental-directives` (`normalize-uri` is experimental in
//!   HAProxy 2.6) and a backend per throttle holding its stick table;
//! - one map file per address set (`rctl-setN.map`, `CIDR 1` lines),
//!   matched with `src,map_ip(FILE) -m found`. IPv4 prefixes are written
//!   as IPv4-mapped IPv6 ones (`::ffff:192.0.2.0/120`): HAProxy matches an
//!   IPv4 pattern with IPv6 clients in `::/96` and `2002::/16` too, where
//!   rctl keeps the families apart.
//!
//! Values: every pattern list starts with `--`, so that no value is read
//! as a flag (`-f FILE` would load a file, `-m found` match anything, `-i`
//! ignore case); the empty string, which no argument can hold (HAProxy
//! ends a line's arguments at an empty word), is matched by a second ACL
//! line of the same name, `-m len 0`; arguments are single-quoted, or
//! double-quoted with `"`, `\` and `$` escaped when they hold a `'`; an
//! empty reason is an empty body. Header names are any HTTP token: those
//! beyond letters, digits and `-_.` are written in double quotes, `$` and
//! `'` escaped for HAProxy's two parsers. Options go through
//! [`crate::check`].
//!
//! Fields as rctl computes them: the first occurrence of a header, whole
//! (`req.fhdr(h,1)`); the host lower-cased without its port, `""` without
//! a Host header; the query, `""` without a `?` (HAProxy's `query` finds
//! nothing there); the path percent-normalised by HAProxy's own
//! `normalize-uri percent-decode-unreserved` and `percent-to-uppercase`,
//! read, and the URL put back as it came.
//!
//! Throttles: `track-sc` in a stick table storing `http_req_rate(PERIOD)`,
//! and the request is refused when the rate over the period is above the
//! burst: a burst is admitted as rctl admits it; afterwards HAProxy's
//! sliding window and rctl's bucket refill differently (a note says so).
//! A header key is `""` for a request without the header, as rctl counts
//! it (HAProxy would not track the request). Refused with the reason:
//! bans (a stick table cannot hold a ban for a fixed time from the first
//! excess), query parameters and keys HAProxy cannot compute as rctl does,
//! more throttles than HAProxy's three tracking counters, header names
//! that are not HTTP tokens (HAProxy refuses requests carrying them).

use crate::check;
use crate::pcre::{literal, to_pcre};
use rctl_compiler::ir::{Action, Atom, Cond, Key, Proto, Rule, Ruleset, StrField, StrOp, Unit};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The frontend lines.
pub const FRONTEND_FILE: &str = "rctl-frontend.cfg";
/// The sections (stick tables).
pub const SECTIONS_FILE: &str = "rctl-sections.cfg";
/// Most DNF terms one rule may have.
pub const MAX_TERMS: usize = 64;
/// HAProxy 2.6's tracking counters (`sc0` to `sc2`).
pub const MAX_TRACKED: usize = 3;

/// How to write the HAProxy configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// Take the client address from this header (`http-request set-src`),
    /// as a TLS terminator in front would set it; `None`: the connection's.
    pub client_ip_header: Option<String>,
    /// Only rules for this site.
    pub site: Option<String>,
    /// The directory the map files will be in on the HAProxy host.
    pub config_dir: String,
    /// Emit without the rules HAProxy cannot express (warnings).
    pub skip_unsupported: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            client_ip_header: None,
            site: None,
            config_dir: "/etc/haproxy/rctl".into(),
            skip_unsupported: false,
        }
    }
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Haproxy {
    /// File name and text: [`FRONTEND_FILE`], [`SECTIONS_FILE`], maps.
    pub files: Vec<(String, String)>,
    /// What differs from rctl.
    pub notes: Vec<String>,
    /// Rules left out, with why.
    pub skipped: Vec<(String, String)>,
}

/// A literal (atom, negated).
type Lit = (u32, bool);

/// The condition as an OR of ANDs of literals, at most `cap` terms.
fn dnf(c: &Cond, cap: usize) -> Option<Vec<Vec<Lit>>> {
    fn go(c: &Cond, neg: bool, cap: usize) -> Option<Vec<Vec<Lit>>> {
        Some(match (c, neg) {
            (Cond::True, false) | (Cond::False, true) => vec![vec![]],
            (Cond::False, false) | (Cond::True, true) => vec![],
            (Cond::Atom(a), n) => vec![vec![(*a, n)]],
            (Cond::Not(x), n) => go(x, !n, cap)?,
            (Cond::Or(v), false) | (Cond::And(v), true) => {
                let mut out = Vec::new();
                for x in v {
                    out.extend(go(x, neg, cap)?);
                    if out.len() > cap {
                        return None;
                    }
                }
                out
            }
            (Cond::And(v), false) | (Cond::Or(v), true) => {
                let mut out: Vec<Vec<Lit>> = vec![vec![]];
                for x in v {
                    let d = go(x, neg, cap)?;
                    let mut next = Vec::new();
                    for a in &out {
                        for b in &d {
                            let mut t = a.clone();
                            t.extend_from_slice(b);
                            next.push(t);
                            if next.len() > cap {
                                return None;
                            }
                        }
                    }
                    out = next;
                }
                out
            }
        })
    }
    let mut terms = go(c, false, cap)?;
    for t in &mut terms {
        t.sort_unstable();
        t.dedup();
    }
    // A term with an atom and its negation never holds.
    terms.retain(|t| !t.windows(2).any(|w| w[0].0 == w[1].0));
    Some(terms)
}

/// A quoted HAProxy argument: single quotes keep backslashes as they are.
/// The empty string cannot be one (HAProxy ends a line's arguments at an
/// empty word): callers write it another way.
fn arg(s: &str) -> Result<String, String> {
    if s.bytes().any(|b| b.is_ascii_control()) {
        return Err(format!("{s:?} has a control character"));
    }
    if s.is_empty() {
        return Err("an empty argument ends HAProxy's argument list".into());
    }
    if !s.contains('\'') {
        Ok(format!("'{s}'"))
    } else {
        let mut o = String::from("\"");
        for c in s.chars() {
            match c {
                '"' | '\\' | '$' => {
                    o.push('\\');
                    o.push(c);
                }
                _ => o.push(c),
            }
        }
        o.push('"');
        Ok(o)
    }
}

/// The patterns of an ACL matching any of `values` exactly, after `--`
/// (so that none is read as a flag: `-f FILE` would load a file, `-m
/// found` match anything, `-i` change case): one line, and for the empty
/// string, which no argument can hold, a second line matching length 0
/// (an ACL's lines with one name are ORed).
fn exact(fetch: &str, values: &[&String]) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    let words: Vec<String> = values
        .iter()
        .filter(|v| !v.is_empty())
        .map(|v| arg(v))
        .collect::<Result<_, _>>()?;
    if !words.is_empty() {
        lines.push(format!("{fetch} -m str -- {}", words.join(" ")));
    }
    if values.iter().any(|v| v.is_empty()) {
        lines.push(format!("{fetch} -m len 0"));
    }
    if lines.is_empty() {
        lines.push("always_false".into());
    }
    Ok(lines)
}

/// An ACL matching the PCRE `pattern` (the empty one as `(?:)`).
fn regex(fetch: &str, pattern: &str) -> Result<Vec<String>, String> {
    let p = if pattern.is_empty() { "(?:)" } else { pattern };
    Ok(vec![format!("{fetch} -m reg -- {}", arg(p)?)])
}

/// `FETCH(NAME,1)` for a header, as one word of HAProxy's configuration:
/// plain when the name is letters, digits and `-_.`, else in double quotes
/// (where `$` must be escaped for the line parser) with `'` escaped for the
/// sample-argument parser. Names that are not HTTP tokens are refused:
/// HAProxy refuses requests carrying them.
fn header_fetch(fetch: &str, h: &str) -> Result<String, String> {
    if h.is_empty() || !h.bytes().all(crate::is_tchar) {
        return Err(format!(
            "header {h:?}: HAProxy refuses requests whose header names are not HTTP tokens"
        ));
    }
    if h.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Ok(format!("{fetch}({h},1)"));
    }
    let name = h.replace('$', "\\$").replace('\'', "\\\\'");
    Ok(format!("\"{fetch}({name},1)\""))
}

/// ` content-type text/plain string 'REASON'`, or nothing for an empty
/// reason (an empty body).
fn body(reason: &str) -> Result<String, String> {
    if reason.is_empty() {
        return Ok(String::new());
    }
    Ok(format!(" content-type text/plain string {}", arg(reason)?))
}

struct Writer<'a> {
    rs: &'a Ruleset,
    o: &'a Options,
    acls: BTreeMap<u32, String>,
    maps: BTreeMap<u32, String>,
    uses_host: bool,
    uses_path: bool,
    uses_query: bool,
}

impl Writer<'_> {
    fn fetch(&mut self, f: &StrField) -> Result<String, String> {
        Ok(match f {
            StrField::Method => "method".into(),
            StrField::Host => {
                self.uses_host = true;
                "var(txn.rctl_host)".into()
            }
            StrField::Path => {
                self.uses_path = true;
                "var(txn.rctl_path)".into()
            }
            StrField::Query => {
                // rctl's query is "" without a `?`, where HAProxy's
                // `query` finds nothing.
                self.uses_query = true;
                "var(txn.rctl_query)".into()
            }
            StrField::Url => "url".into(),
            StrField::Header(h) => header_fetch("req.fhdr", h)?,
            StrField::QueryParam(p) => {
                return Err(format!(
                    "query({p:?}): HAProxy matches parameter names as sent, rctl decodes them"
                ))
            }
        })
    }

    fn map(&mut self, set: u32) -> String {
        let file = format!("rctl-set{set}.map");
        self.maps.entry(set).or_insert_with(|| file.clone());
        format!("{}/{file}", self.o.config_dir.trim_end_matches('/'))
    }

    /// The ACL lines' criteria for an atom (several lines of one name
    /// are ORed).
    fn criteria(&mut self, a: &Atom) -> Result<Vec<String>, String> {
        Ok(match a {
            Atom::Str { field, op } => {
                let f = self.fetch(field)?;
                match op {
                    StrOp::Eq(v) => exact(&f, &[v])?,
                    StrOp::In(vs) => exact(&f, &vs.iter().collect::<Vec<_>>())?,
                    StrOp::Prefix(v) => regex(&f, &format!("\\A{}", literal(v.as_bytes())))?,
                    StrOp::Suffix(v) => regex(&f, &format!("{}\\z", literal(v.as_bytes())))?,
                    StrOp::Contains(v) => regex(&f, &literal(v.as_bytes()))?,
                    StrOp::Regex { pattern, ci } => {
                        let p = to_pcre(pattern, *ci)
                            .map_err(|e| format!("regex {pattern:?}: {}", e.0))?;
                        regex(&f, &p)?
                    }
                }
            }
            Atom::Present(StrField::Header(h)) => {
                vec![format!("{} -m found", header_fetch("req.fhdr", h)?)]
            }
            Atom::Present(f) => {
                return Err(format!(
                    "`{} present`: HAProxy does not decode parameter names",
                    f.display()
                ))
            }
            Atom::Ip(s) => vec![format!("src,map_ip({}) -m found", self.map(*s))],
            Atom::DstIp(s) => vec![format!("dst,map_ip({}) -m found", self.map(*s))],
            Atom::Port(r) => {
                let mut s = String::from("dst_port");
                for &(a, b) in r {
                    if a == b {
                        let _ = write!(s, " {a}");
                    } else {
                        let _ = write!(s, " {a}:{b}");
                    }
                }
                vec![s]
            }
            Atom::Proto(p) => vec![(if p.contains(&Proto::Tcp) {
                "always_true"
            } else {
                "always_false"
            })
            .into()],
        })
    }

    fn acl(&mut self, a: u32) -> Result<String, String> {
        let name = format!("rctl_a{a}");
        if self.acls.contains_key(&a) {
            return Ok(name);
        }
        let atom = self.rs.atoms.get(a as usize).ok_or("bad atom index")?;
        let lines: Vec<String> = self
            .criteria(atom)?
            .into_iter()
            .map(|c| format!("acl {name} {c}"))
            .collect();
        self.acls.insert(a, lines.join("\n"));
        Ok(name)
    }

    /// One `if …` per DNF term (an empty term is `if TRUE`).
    fn conditions(&mut self, r: &Rule) -> Result<Vec<String>, String> {
        let terms = dnf(&r.cond, MAX_TERMS).ok_or_else(|| {
            format!("its condition has more than {MAX_TERMS} terms once flattened (HAProxy conditions have no parentheses)")
        })?;
        let mut out = Vec::new();
        for t in terms {
            let mut parts = Vec::new();
            for (a, neg) in t {
                let n = self.acl(a)?;
                parts.push(if neg { format!("!{n}") } else { n });
            }
            out.push(if parts.is_empty() {
                "TRUE".into()
            } else {
                parts.join(" ")
            });
        }
        Ok(out)
    }

    /// The stick table key of throttle `sc`, and lines that must run
    /// before it is tracked.
    fn key(&mut self, keys: &[Key], sc: usize) -> Result<(String, String), String> {
        let [k] = keys else {
            return Err("a throttle keyed by several parts: a stick table has one key".into());
        };
        let key = match k {
            Key::Ip => "src".into(),
            Key::Server => "str(server)".into(),
            Key::Global | Key::Host => {
                self.uses_host = true;
                "var(txn.rctl_host)".into()
            }
            Key::Method => "method".into(),
            Key::Header(h) => {
                // rctl counts a request without the header under the empty
                // value; HAProxy would not track it at all.
                let f = header_fetch("req.fhdr", h)?;
                let var = format!("txn.rctl_k{sc}");
                let pre = format!(
                    "http-request set-var({var}) str('')\nhttp-request set-var({var}) {f} if {{ {f} -m found }}\n"
                );
                return Ok((format!("var({var})"), pre));
            }
            Key::Path => {
                self.uses_path = true;
                "var(txn.rctl_path)".into()
            }
            Key::Prefix { v4, v6 } => format!("src,ipmask({v4},{v6})"),
            Key::Query(q) => {
                return Err(format!(
                    "`by query({q:?})`: HAProxy does not decode query parameters"
                ))
            }
        };
        Ok((key, String::new()))
    }
}

/// `::ffff:0:0/96`, where HAProxy's address patterns also match IPv4
/// sources (as mapped addresses).
const MAPPED: (u128, u8) = (0xffff_0000_0000, 96);

/// An IPv6 prefix without the IPv4-mapped range: HAProxy would match every
/// IPv4 client against `::ffff:0.0.0.0/96`, where rctl keeps the families
/// apart. A prefix inside the range goes; one around it is split into the
/// prefixes that cover the rest.
fn without_mapped(n: u128, l: u8) -> Vec<(u128, u8)> {
    let mask = |len: u8| {
        if len == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(len))
        }
    };
    let (mn, ml) = MAPPED;
    if l >= ml {
        // Inside the range, or disjoint from it.
        return if n & mask(ml) == mn {
            vec![]
        } else {
            vec![(n, l)]
        };
    }
    if mn & mask(l) != n {
        return vec![(n, l)];
    }
    // n/l contains the range: one sibling prefix per bit from l+1 to 96.
    (l + 1..=ml)
        .map(|len| {
            let bit = 1u128 << (128 - u32::from(len));
            ((mn & mask(len)) ^ bit, len)
        })
        .collect()
}

/// Writes the HAProxy configuration for a ruleset.
pub fn emit(rs: &Ruleset, o: &Options) -> Result<Haproxy, Vec<(String, String)>> {
    let opt = |e: crate::Error| vec![(e.option().to_string(), e.kind().to_string())];
    check::path("--config-dir", o.config_dir.trim_end_matches('/')).map_err(opt)?;
    if let Some(site) = &o.site {
        check::site("--site", site).map_err(opt)?;
    }
    let mut w = Writer {
        rs,
        o,
        acls: BTreeMap::new(),
        maps: BTreeMap::new(),
        uses_host: false,
        uses_path: false,
        uses_query: false,
    };
    let (mut lines, mut sections, mut notes, mut refused) =
        (String::new(), String::new(), Vec::new(), Vec::new());
    let mut tracked = 0usize;
    for r in &rs.rules {
        if !r.enabled || !r.applies_to(o.site.as_deref()) {
            continue;
        }
        let one = (|| -> Result<String, String> {
            let conds = w.conditions(r)?;
            let mut s = format!("# rule {} (priority {})\n", r.name, r.priority);
            let tag = format!(
                "http-request set-header X-Requestctl \"%[req.fhdr(X-Requestctl),add_item(',',,'{}')]\"",
                r.name
            );
            let verb = match (&r.action, r.shadow) {
                (Action::Throttle(t), _) if t.unit != Unit::Requests => {
                    notes.push(format!(
                        "{}: packet and connection limits are the XDP program's; not in HAProxy",
                        r.name
                    ));
                    return Ok(String::new());
                }
                (Action::Log, _) | (_, true) => tag.clone(),
                (Action::Allow, false) => "http-request allow".into(),
                (Action::Drop, false) => "http-request silent-drop".into(),
                (Action::Deny { status, reason }, false) => {
                    format!("http-request return status {status}{}", body(reason)?)
                }
                (Action::Throttle(t), false) => {
                    if t.ban_ms > 0 {
                        return Err("a ban: HAProxy's stick tables cannot refuse a key for a fixed time from its first excess".into());
                    }
                    if tracked == MAX_TRACKED {
                        return Err(format!("more than {MAX_TRACKED} throttles: HAProxy 2.6 tracks three counters per request"));
                    }
                    let sc = tracked;
                    let (key, pre) = w.key(&t.keys, sc)?;
                    s.push_str(&pre);
                    tracked += 1;
                    let table = format!("rctl_t_{}", sc);
                    let _ = writeln!(
                        sections,
                        "# rule {}\nbackend {table}\n    stick-table type string len 256 size 1m expire {p}ms store http_req_rate({p}ms)\n",
                        r.name,
                        p = t.period_ms
                    );
                    notes.push(format!(
                        "{}: admitted while HAProxy's request rate over {} ms is at most {} (rctl's burst); the rate is a sliding window, so after a burst HAProxy and rctl's bucket let different requests through",
                        r.name, t.period_ms, t.burst
                    ));
                    for c in &conds {
                        let _ = writeln!(s, "http-request track-sc{sc} {key} table {table} if {c}");
                    }
                    let retry = t
                        .period_ms
                        .div_ceil(1000 * u64::from(t.limit.max(1)))
                        .max(1);
                    format!(
                        "http-request return status {}{} hdr Retry-After {retry} if {{ sc{sc}_http_req_rate({table}) gt {} }}",
                        t.status,
                        body(&t.reason)?,
                        t.burst
                    )
                }
            };
            if matches!(&r.action, Action::Throttle(_)) && !r.shadow {
                // One check, after tracking.
                let _ = writeln!(s, "{verb}");
            } else {
                for c in &conds {
                    let _ = writeln!(s, "{verb} if {c}");
                }
            }
            Ok(s)
        })();
        match one {
            Ok(s) => lines.push_str(&s),
            Err(why) => refused.push((r.name.clone(), why)),
        }
    }
    if !refused.is_empty() && !o.skip_unsupported {
        return Err(refused);
    }
    let mut front =
        String::from("# Written by `rctl emit haproxy`: lines for the frontend rctl protects.\n");
    if let Some(h) = &o.client_ip_header {
        let h = check::header("--client-ip-header", h).map_err(opt)?;
        let ip =
            header_fetch("req.hdr_ip", &h).map_err(|e| vec![("--client-ip-header".into(), e)])?;
        let _ = writeln!(front, "http-request set-src {ip} if {{ {ip} -m found }}");
    }
    if w.uses_host {
        // "" without a Host header, as rctl reads it; else lower case,
        // then the port off a name (no other colon) or anything after an
        // IPv6 literal's `]`.
        front.push_str("http-request set-var(txn.rctl_host) str('')\n");
        front.push_str("http-request set-var(txn.rctl_host) \"req.fhdr(host,1),lower,regsub('\\\\A([^:]*):[0-9]*\\\\z','\\\\1'),regsub('\\\\A(\\\\[[^]]*\\\\]).*\\\\z','\\\\1')\"\n");
    }
    if w.uses_query {
        // What follows the first `?`; "" without one.
        front.push_str(
            "http-request set-var(txn.rctl_query) \"url,regsub('\\\\A[^?]*\\\\??','')\"\n",
        );
    }
    if w.uses_path {
        front.push_str("http-request set-var(txn.rctl_url) url\nhttp-request normalize-uri percent-decode-unreserved\nhttp-request normalize-uri percent-to-uppercase\nhttp-request set-var(txn.rctl_path) path\nhttp-request set-uri %[var(txn.rctl_url)]\n");
    }
    for acl in w.acls.values() {
        front.push_str(acl);
        front.push('\n');
    }
    front.push_str(&lines);
    let mut files = vec![
        (FRONTEND_FILE.to_string(), front),
        (
            SECTIONS_FILE.to_string(),
            format!(
                "# Written by `rctl emit haproxy`: the throttles' stick tables.\n\n{}{sections}",
                if w.uses_path {
                    // normalize-uri (to read the path as rctl normalises it) is
                    // experimental in HAProxy 2.6.
                    "global\n    expose-experimental-directives\n\n"
                } else {
                    ""
                }
            ),
        ),
    ];
    for (set, file) in &w.maps {
        let mut m = String::new();
        if let Some(s) = rs.ipsets.get(*set as usize) {
            let _ = writeln!(m, "# {}", s.name);
            // IPv4 prefixes as IPv4-mapped IPv6 ones: HAProxy matches an
            // IPv4 pattern with IPv6 clients in ::/96 and 2002::/16 too,
            // an IPv6 pattern with an IPv4 client as ::ffff:IPV4 only.
            for &(n, l) in &s.prefixes.v4 {
                let mapped = std::net::Ipv4Addr::from(n).to_ipv6_mapped();
                let _ = writeln!(m, "{mapped}/{} 1", u32::from(l) + 96);
            }
            for &(n, l) in &s.prefixes.v6 {
                for (n, l) in without_mapped(n, l) {
                    let _ = writeln!(m, "{}/{l} 1", std::net::Ipv6Addr::from(n));
                }
            }
        }
        files.push((file.clone(), m));
    }
    Ok(Haproxy {
        files,
        notes,
        skipped: refused,
    })
}

#[cfg(test)]
mod tests;
