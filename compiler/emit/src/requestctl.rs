//! requestctl's objects (`rctl emit requestctl`): the YAML tree that
//! `requestctl sync` loads, one file per object, for the rules requestctl
//! can express, so that its VCL decides as rctl does.
//!
//! The tree is the inverse of `rctl import requestctl` where both are
//! defined (the importer's manual says what each field becomes):
//!
//! - `request-ipblocks/abuse/NAME.yaml`: every ip set a rule reads, in the
//!   `abuse` scope, which requestctl's VCL matches as an ACL on the
//!   client address (exactly rctl's test; the `cloud` and `known-clients`
//!   scopes go through netmapper, one block per address);
//! - `request-patterns/rctl/RULE-N.yaml`: one pattern per distinct test
//!   (method equal; a regex on the URL or a header; a header present;
//!   host and path rewritten for the raw values VCL sees, [`url`]);
//! - `request-actions/CLUSTER/RULE.yaml`: the rule's condition as an
//!   expression over them (`AND`, `OR`, `AND NOT`, `OR NOT`, parentheses),
//!   `deny` as `resp_status`/`resp_reason`, a throttle as `do_throttle`
//!   with vsthrottle's requests, interval and ban (`throttle_per_ip` for
//!   `by ip`, else one bucket per server), `shadow` and `log` as
//!   `log_matching` with `enabled: false` (requestctl's log-only stanza),
//!   `enabled`, `sites`, `priority`, the comment on one line, and
//!   `cache_miss_only: false` (rctl sees cache hits too).
//!
//! requestctl has no exemption: an `allow` is written into every later
//! rule's expression as `AND NOT (…)`, which needs each later rule to run
//! only where the allow does. requestctl's VCL runs, at a site, the rules
//! for every site and then the site's own, each sorted by name: a rule
//! that would then run in another order than rctl's against an earlier
//! enforcing rule is refused with the pair named.
//!
//! Refused, with the reason (or left out, with `skip_unsupported`): `drop`,
//! throttle keys other than `server` and `ip`, `shared` throttles,
//! intervals or bans that are no whole number of seconds, query and query
//! parameter tests, destination addresses, ports and protocols, and what
//! [`url`] cannot rewrite exactly. Packet and connection limits are the
//! XDP program's: left out with a note. A throttle must use requestctl's
//! bucket (`bucket vsthrottle`): rctl's default (GCRA) refills
//! continuously and would admit differently after its burst, so it is
//! refused rather than approximated.

pub mod url;

use crate::check;
use crate::pcre::{literal, to_pcre};
use rctl_compiler::ir::{Atom, Cond, IpSet, Ruleset, StrField, StrOp};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// The pattern every tree has when a rule needs "always" (`url ~ "^"`).
const ANY: &str = "pattern@rctl/any";

/// How to write the tree.
#[derive(Debug, Clone)]
pub struct Options {
    /// The cluster the actions are for (`request-actions/CLUSTER/`).
    pub cluster: String,
    /// Write without the rules requestctl cannot express (each is then in
    /// [`Tree::skipped`]) instead of refusing the ruleset.
    pub skip_unsupported: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cluster: "cache-text".into(),
            skip_unsupported: false,
        }
    }
}

/// The written tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// Each file's path below the tree's root, with its text.
    pub files: Vec<(String, String)>,
    /// What differs from rctl, or was left out as not requestctl's, one
    /// sentence each.
    pub notes: Vec<String>,
    /// Rules left out (name, reason): empty unless `skip_unsupported`.
    pub skipped: Vec<(String, String)>,
}

/// Why no tree was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// An option's value cannot be written (the flag, the reason).
    Option(&'static str, String),
    /// Rules requestctl cannot express (name, reason each).
    Unsupported(Vec<(String, String)>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Option(o, why) => write!(f, "{o}: {why}"),
            Error::Unsupported(v) => {
                write!(f, "{} rule(s) requestctl cannot express:", v.len())?;
                for (r, why) in v {
                    write!(f, " {r}: {why};")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {}

/// A requestctl pattern: one test.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Pattern {
    Method(String),
    Url(String),
    Header { name: String, value: Option<String> },
}

/// An expression before it is written.
#[derive(Debug, Clone)]
enum Ex {
    Item(String),
    Not(Box<Ex>),
    And(Vec<Ex>),
    Or(Vec<Ex>),
}

/// The tree being built: the objects the written rules use.
#[derive(Clone, Default)]
struct Objects {
    patterns: BTreeMap<Pattern, String>,
    ipblocks: BTreeMap<u32, String>,
    any: bool,
}

struct Writer<'a> {
    rs: &'a Ruleset,
    objects: Objects,
    /// The rule a pattern is first named after, and its count.
    rule: String,
    n: usize,
}

/// A name requestctl's expressions and VCL ACLs take: letters, digits,
/// `_` and `-`, beginning with a letter.
fn word(s: &str) -> String {
    let mut w: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !w.starts_with(|c: char| c.is_ascii_alphabetic()) {
        w.insert_str(0, "r_");
    }
    w
}

/// A string VCL holds in `"…"` as requestctl writes it.
fn vcl_safe(what: &str, s: &str) -> Result<(), String> {
    if s.contains('"') || s.chars().any(char::is_control) {
        Err(format!(
            "{what} {s:?}: requestctl writes it into a VCL string, which cannot hold `\"` or control characters"
        ))
    } else {
        Ok(())
    }
}

impl Writer<'_> {
    fn pattern(&mut self, p: Pattern) -> Ex {
        if let Some(name) = self.objects.patterns.get(&p) {
            return Ex::Item(format!("pattern@rctl/{name}"));
        }
        let name = loop {
            self.n += 1;
            let next = format!("{}-{}", word(&self.rule), self.n);
            if !self.objects.patterns.values().any(|v| *v == next) {
                break next;
            }
        };
        self.objects.patterns.insert(p, name.clone());
        Ex::Item(format!("pattern@rctl/{name}"))
    }

    fn any(&mut self) -> Ex {
        self.objects.any = true;
        Ex::Item(ANY.into())
    }

    fn header_name(h: &str) -> Result<(), String> {
        if !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            Ok(())
        } else {
            Err(format!(
                "header {h:?}: requestctl's VCL writes only letters, digits, - and _ in header names"
            ))
        }
    }

    /// A value test as a PCRE, and whether it can match `""`.
    fn regex(op: &StrOp) -> Result<(String, bool), String> {
        Ok(match op {
            StrOp::Eq(v) => (format!("\\A{}\\z", literal(v.as_bytes())), v.is_empty()),
            StrOp::Prefix(v) => (format!("\\A{}", literal(v.as_bytes())), v.is_empty()),
            StrOp::Suffix(v) => (format!("{}\\z", literal(v.as_bytes())), v.is_empty()),
            StrOp::Contains(v) => (literal(v.as_bytes()), v.is_empty()),
            StrOp::Regex { pattern, ci } => {
                let p = to_pcre(pattern, *ci).map_err(|e| format!("regex {pattern:?}: {}", e.0))?;
                let empty = regex_syntax::Parser::new()
                    .parse(pattern)
                    .map_or(true, |h| h.properties().minimum_len().unwrap_or(0) == 0);
                (p, empty)
            }
            StrOp::In(_) => unreachable!("In is split into Eq"),
        })
    }

    fn str_atom(&mut self, field: &StrField, op: &StrOp) -> Result<Ex, String> {
        if let StrOp::In(vs) = op {
            let mut v = Vec::new();
            for x in vs {
                v.push(self.str_atom(field, &StrOp::Eq(x.clone()))?);
            }
            return Ok(if v.is_empty() {
                let any = self.any();
                Ex::Not(Box::new(any))
            } else {
                Ex::Or(v)
            });
        }
        Ok(match field {
            StrField::Method => match op {
                StrOp::Eq(m) if !m.is_empty() && m.bytes().all(check::is_tchar) => {
                    self.pattern(Pattern::Method(m.clone()))
                }
                _ => return Err(format!("method {op:?}: requestctl compares the method equal to a token only")),
            },
            StrField::Url => self.pattern(Pattern::Url(Self::regex(op)?.0)),
            StrField::Path => {
                let re = match op {
                    StrOp::Eq(v) => url::path_literal(v, true)?,
                    StrOp::Prefix(v) => url::path_literal(v, false)?,
                    StrOp::Regex { pattern, ci } => url::path_regex(pattern, *ci)?,
                    _ => return Err("path ends_with/contains: requestctl's VCL sees the raw URL, where the match could begin inside an escape or in the query; use starts_with or a regex anchored with ^".into()),
                };
                self.pattern(Pattern::Url(re))
            }
            StrField::Host => match op {
                StrOp::Eq(v) => self.pattern(Pattern::Header {
                    name: "Host".into(),
                    value: Some(url::host_eq(v)?),
                }),
                _ => return Err("host: requestctl sees the raw Host header (port, case); only `host ==` and `host in` are rewritten for it".into()),
            },
            StrField::Header(h) => {
                Self::header_name(h)?;
                let (re, empty) = Self::regex(op)?;
                let test = self.pattern(Pattern::Header {
                    name: h.clone(),
                    value: Some(re),
                });
                if empty {
                    // VCL's regex sees an absent header as "": rctl's test
                    // is false there.
                    let present = self.pattern(Pattern::Header {
                        name: h.clone(),
                        value: None,
                    });
                    Ex::And(vec![present, test])
                } else {
                    test
                }
            }
            StrField::Query | StrField::QueryParam(_) => {
                return Err(format!(
                    "{}: requestctl matches the query only inside the raw URL (write `url ~ …`)",
                    field.display()
                ))
            }
        })
    }

    fn atom(&mut self, a: &Atom) -> Result<Ex, String> {
        match a {
            Atom::Str { field, op } => self.str_atom(field, op),
            Atom::Present(StrField::Header(h)) => {
                Self::header_name(h)?;
                Ok(self.pattern(Pattern::Header {
                    name: h.clone(),
                    value: None,
                }))
            }
            Atom::Present(f) => Err(format!(
                "`{} present`: requestctl has no query parameter tests",
                f.display()
            )),
            Atom::Ip(s) => {
                let set = self.rs.ipsets.get(*s as usize).ok_or("bad ip set index")?;
                let name = match self.objects.ipblocks.get(s) {
                    Some(n) => n.clone(),
                    None => {
                        let mut n = ipblock_name(set, *s);
                        if self.objects.ipblocks.values().any(|v| *v == n) {
                            n = format!("{n}_{s}");
                        }
                        self.objects.ipblocks.insert(*s, n.clone());
                        n
                    }
                };
                Ok(Ex::Item(format!("ipblock@abuse/{name}")))
            }
            Atom::DstIp(_) | Atom::Port(_) | Atom::Proto(_) => Err(
                "destination addresses, ports and protocols: requestctl matches only the client's address, the method, the URL and headers".into(),
            ),
        }
    }

    fn cond(&mut self, c: &Cond) -> Result<Ex, String> {
        Ok(match c {
            Cond::True => self.any(),
            Cond::False => Ex::Not(Box::new(self.any())),
            Cond::Atom(a) => {
                let atom = self.rs.atoms.get(*a as usize).ok_or("bad atom index")?;
                self.atom(atom)?
            }
            Cond::Not(x) => match self.cond(x)? {
                Ex::Not(y) => *y,
                y => Ex::Not(Box::new(y)),
            },
            Cond::And(v) | Cond::Or(v) => {
                let mut parts = Vec::new();
                for x in v {
                    parts.push(self.cond(x)?);
                }
                if parts.is_empty() {
                    let any = self.any();
                    return Ok(if matches!(c, Cond::And(_)) {
                        any
                    } else {
                        Ex::Not(Box::new(any))
                    });
                }
                if matches!(c, Cond::And(_)) {
                    Ex::And(parts)
                } else {
                    Ex::Or(parts)
                }
            }
        })
    }

    /// The expression's text: `NOT` only after `AND` or `OR`, as
    /// requestctl's grammar has it.
    fn text(&mut self, e: &Ex) -> String {
        match e {
            Ex::Item(s) => s.clone(),
            Ex::Not(_) => {
                let any = self.any();
                self.text(&Ex::And(vec![any, e.clone()]))
            }
            Ex::And(v) | Ex::Or(v) => {
                let op = if matches!(e, Ex::And(_)) { "AND" } else { "OR" };
                let mut v = v.clone();
                if let Some(i) = v.iter().position(|x| !matches!(x, Ex::Not(_))) {
                    let first = v.remove(i);
                    v.insert(0, first);
                }
                let mut s = String::new();
                for (i, x) in v.iter().enumerate() {
                    let (neg, x) = match x {
                        Ex::Not(y) => (true, &**y),
                        x => (false, x),
                    };
                    if i == 0 && neg {
                        // Every part is negated: the first is `any AND
                        // NOT` it, in parentheses (whatever `op` is).
                        let any = self.any();
                        let t = self.text(&Ex::And(vec![any, Ex::Not(Box::new(x.clone()))]));
                        let _ = write!(s, "({t})");
                        continue;
                    } else if i > 0 {
                        s.push_str(&format!(" {op}{} ", if neg { " NOT" } else { "" }));
                    }
                    let t = self.text(x);
                    if matches!(x, Ex::Item(_)) {
                        s.push_str(&t);
                    } else {
                        let _ = write!(s, "({t})");
                    }
                }
                s
            }
        }
    }
}

/// The ipblock's requestctl name: its rctl name as one word (`cloud/aws`
/// is `cloud_aws`, `abuse/x` is `x`, `-` as `_`), `inlineN` for an
/// `ip in { … }`.
fn ipblock_name(set: &IpSet, index: u32) -> String {
    match set.name.as_str() {
        "inline" => format!("inline{index}"),
        // An ACL's name in VCL: no `-`.
        n => word(n.strip_prefix("abuse/").unwrap_or(n)).replace('-', "_"),
    }
}

mod write;

/// Writes the tree for a ruleset.
pub fn emit(rs: &Ruleset, o: &Options) -> Result<Tree, Error> {
    if o.cluster.is_empty()
        || o.cluster == "."
        || o.cluster == ".."
        || !o
            .cluster
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(Error::Option(
            "--cluster",
            format!(
                "{:?} is not a cluster name: use letters, digits and -_. only",
                o.cluster
            ),
        ));
    }
    write::tree(rs, o)
}

#[cfg(test)]
mod tests;
