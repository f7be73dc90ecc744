//! The IR: a checked, resolved ruleset. Patterns are inlined, values parsed,
//! predicates interned into one table, rules sorted into evaluation order.
//! This is what the artifact stores and what every data plane executes.

pub mod cidr;
pub(crate) mod lower;
pub mod plan;
pub mod scan;
pub mod spec;
pub mod value;

use crate::cidr::PrefixSet;
use serde::Serialize;

/// A string-valued request field.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum StrField {
    /// The request method, case-sensitive.
    Method,
    /// The Host header, lowercased, port removed.
    Host,
    /// The path without the query, percent-normalised (see [`normalize_path`]).
    Path,
    /// The raw query string without `?`.
    Query,
    /// The request target as sent (path and `?query`), not normalised:
    /// VCL's `req.url`.
    Url,
    /// The value of the first query parameter with this name.
    QueryParam(String),
    /// The value of the first header with this (lowercased) name.
    Header(String),
}

impl StrField {
    /// The field as written in the language.
    pub fn display(&self) -> String {
        match self {
            StrField::Method => "method".into(),
            StrField::Host => "host".into(),
            StrField::Path => "path".into(),
            StrField::Query => "query".into(),
            StrField::Url => "url".into(),
            StrField::QueryParam(p) => format!("query({p:?})"),
            StrField::Header(h) => format!("header({h:?})"),
        }
    }
}

/// A test on a string field.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum StrOp {
    /// Equal.
    Eq(String),
    /// Starts with.
    Prefix(String),
    /// Ends with.
    Suffix(String),
    /// Contains.
    Contains(String),
    /// Regex search (unanchored, regex-automata syntax).
    Regex {
        /// The pattern.
        pattern: String,
        /// Case-insensitive.
        ci: bool,
    },
    /// One of (sorted, deduplicated).
    In(Vec<String>),
}

/// Transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Proto {
    /// TCP.
    Tcp = 6,
    /// UDP.
    Udp = 17,
    /// ICMP or ICMPv6.
    Icmp = 1,
}

/// An atomic predicate. Every condition is a boolean tree over these.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Atom {
    /// A string field test. False when the field is absent.
    Str {
        /// The field.
        field: StrField,
        /// The test.
        op: StrOp,
    },
    /// The header or query parameter is present.
    Present(StrField),
    /// The client address is in the ip set with this index.
    Ip(u32),
    /// The destination address (the edge's own address the client
    /// reached) is in the ip set with this index. False for a request
    /// whose destination is unknown.
    DstIp(u32),
    /// The destination port is in this inclusive range list (sorted, merged).
    Port(Vec<(u16, u16)>),
    /// The protocol is one of these (sorted).
    Proto(Vec<Proto>),
}

impl Atom {
    /// Whether the packet plane (XDP) can evaluate this atom.
    pub fn is_l4(&self) -> bool {
        matches!(
            self,
            Atom::Ip(_) | Atom::DstIp(_) | Atom::Port(_) | Atom::Proto(_)
        )
    }
}

/// A boolean condition over atoms (indices into [`Ruleset::atoms`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Cond {
    /// Always.
    True,
    /// Never.
    False,
    /// An atom.
    Atom(u32),
    /// Negation.
    Not(Box<Cond>),
    /// All of.
    And(Vec<Cond>),
    /// Any of.
    Or(Vec<Cond>),
}

impl Cond {
    /// Calls `f` on every atom index.
    pub fn visit_atoms(&self, f: &mut impl FnMut(u32)) {
        match self {
            Cond::True | Cond::False => {}
            Cond::Atom(a) => f(*a),
            Cond::Not(c) => c.visit_atoms(f),
            Cond::And(v) | Cond::Or(v) => v.iter().for_each(|c| c.visit_atoms(f)),
        }
    }

    /// Nesting depth (for limits and the artifact reader).
    pub fn depth(&self) -> usize {
        match self {
            Cond::True | Cond::False | Cond::Atom(_) => 1,
            Cond::Not(c) => 1 + c.depth(),
            Cond::And(v) | Cond::Or(v) => 1 + v.iter().map(Cond::depth).max().unwrap_or(0),
        }
    }
}

/// A named or inline set of prefixes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpSet {
    /// `scope/name` for ipblocks; `inline` for `ip in { … }` literals.
    pub name: String,
    /// The merged prefixes.
    pub prefixes: PrefixSet,
}

/// What a throttle counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Unit {
    /// HTTP requests (user-space engine).
    Requests,
    /// Packets (XDP).
    Packets,
    /// TCP connections, counted as SYNs without ACK (XDP).
    Connections,
}

/// What a throttle's buckets are keyed by. A tuple of keys is one bucket per
/// distinct combination.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Key {
    /// One bucket per Host (requestctl's default scope).
    Global,
    /// The client address.
    Ip,
    /// The client address masked to `v4` or `v6` bits.
    Prefix {
        /// IPv4 prefix length.
        v4: u8,
        /// IPv6 prefix length.
        v6: u8,
    },
    /// The Host.
    Host,
    /// The normalised path.
    Path,
    /// The method.
    Method,
    /// A header's value (lowercased name).
    Header(String),
    /// A query parameter's value.
    Query(String),
    /// One bucket for the whole server: every request the rule matches
    /// counts against it (requestctl's `"requestctl:NAME"` vsthrottle key,
    /// one bucket per CDN server).
    Server,
}

impl Key {
    /// The key as the language writes it (`ip`, `prefix(24, 64)`,
    /// `header("x-client")`).
    pub fn source(&self) -> String {
        match self {
            Key::Global => "global".to_string(),
            Key::Ip => "ip".to_string(),
            Key::Prefix { v4, v6 } => format!("prefix({v4}, {v6})"),
            Key::Host => "host".to_string(),
            Key::Path => "path".to_string(),
            Key::Method => "method".to_string(),
            Key::Header(h) => format!("header({h:?})"),
            Key::Query(q) => format!("query({q:?})"),
            Key::Server => "server".to_string(),
        }
    }

    /// Keys as the language writes them after `by`: `host, path`.
    pub fn list(keys: &[Key]) -> String {
        keys.iter().map(Key::source).collect::<Vec<_>>().join(", ")
    }
}

/// How a throttle's bucket admits and refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Bucket {
    /// GCRA: continuous refill, refused hits cost nothing (the default).
    Gcra,
    /// vmod_vsthrottle's token bucket, as requestctl's VCL uses it: the
    /// bucket starts full with `limit` tokens and refills by whole tokens
    /// computed from the time since a token was last taken (fractions are
    /// lost when one is taken); a hit that finds it empty starts the ban;
    /// hits during a ban are refused but still take tokens.
    Vsthrottle,
}

/// A rate limit: `limit` per `period_ms`, bursting to `burst`, then
/// optionally banning the key for `ban_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Throttle {
    /// Sustained allowance per period.
    pub limit: u32,
    /// What is counted.
    pub unit: Unit,
    /// Period in milliseconds.
    pub period_ms: u64,
    /// Bucket capacity (defaults to `limit`).
    pub burst: u32,
    /// Bucket keys.
    pub keys: Vec<Key>,
    /// Ban length once exceeded; 0 for none.
    pub ban_ms: u64,
    /// HTTP status for the excess.
    pub status: u16,
    /// Reason phrase for the excess.
    pub reason: String,
    /// The bucket's algorithm.
    pub bucket: Bucket,
    /// Counted site-wide: every host of a site shares the buckets (in
    /// Redis, through `rctl agent --redis`); a host without them counts
    /// alone. Requests only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// A rule's action.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Action {
    /// Exempt: later rules never deny, drop or throttle this traffic.
    Allow,
    /// Count and report only.
    Log,
    /// Close without a response (XDP_DROP on the packet plane).
    Drop,
    /// Respond with this status and reason.
    Deny {
        /// HTTP status.
        status: u16,
        /// Reason.
        reason: String,
    },
    /// Rate limit.
    Throttle(Throttle),
}

impl Action {
    /// A short name: allow, log, drop, deny, throttle.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Log => "log",
            Action::Drop => "drop",
            Action::Deny { .. } => "deny",
            Action::Throttle(_) => "throttle",
        }
    }

    /// Whether a match ends evaluation unconditionally.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Action::Allow | Action::Drop | Action::Deny { .. })
    }
}

/// Where a rule came from, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Origin {
    /// Source path.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
}

/// A rule in evaluation order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Unique name.
    pub name: String,
    /// Lower runs first.
    pub priority: i32,
    /// Position in file order (files sorted by path), for ties.
    pub seq: u32,
    /// Sites the rule applies to; empty means all.
    pub sites: Vec<String>,
    /// Disabled rules are kept for reports but never evaluated.
    pub enabled: bool,
    /// Shadow mode: evaluate and report, never enforce.
    pub shadow: bool,
    /// Free text.
    pub comment: String,
    /// The condition.
    pub cond: Cond,
    /// The action.
    pub action: Action,
    /// Source location.
    pub origin: Origin,
}

impl Rule {
    /// Whether the rule applies at `site` (`None`: all sites).
    pub fn applies_to(&self, site: Option<&str>) -> bool {
        match site {
            None => true,
            Some(s) => self.sites.is_empty() || self.sites.iter().any(|x| x == s),
        }
    }

    /// Whether this rule is evaluated on the packet path (a packet or
    /// connection limit) rather than per request.
    pub fn is_packet_limit(&self) -> bool {
        matches!(&self.action, Action::Throttle(t) if t.unit != Unit::Requests)
    }
}

/// The hash of one input file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceHash {
    /// Path as given.
    pub path: String,
    /// SHA-256 of the bytes.
    pub sha256: [u8; 32],
}

/// Which plane enforces a rule, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RulePlan {
    /// The XDP lowering, if the packet plane takes part.
    pub xdp: Option<XdpRule>,
    /// Why the rule is (or is only partly) not offloaded; empty if it is.
    pub note: String,
}

/// How the packet plane treats a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum XdpKind {
    /// An L3/L4-only allow: pass, skip later rules.
    Allow,
    /// The address projection of an allow with L7 parts: pass to the stack
    /// so user space can see the whole condition; skip later XDP rules.
    Exempt,
    /// Drop.
    Drop,
    /// Packet or connection rate limit.
    Throttle,
}

/// A rule lowered for the packet plane: a DNF over L3/L4 atoms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct XdpRule {
    /// What to do on a match.
    pub kind: XdpKind,
    /// OR of ANDs of (atom index, negated). An empty term matches all.
    pub dnf: Vec<Vec<(u32, bool)>>,
}

/// A compiled ruleset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ruleset {
    /// Every input file with its hash, in load order.
    pub sources: Vec<SourceHash>,
    /// Prefix sets referenced by [`Atom::Ip`].
    pub ipsets: Vec<IpSet>,
    /// The predicate table.
    pub atoms: Vec<Atom>,
    /// Rules in evaluation order.
    pub rules: Vec<Rule>,
    /// One plan per rule, same order.
    pub plan: Vec<RulePlan>,
}

impl Ruleset {
    /// A warning when `site` is given but no rule of `rs` names it: then only
    /// the rules without `sites` apply, which is rarely what was meant (a
    /// misspelt `--site eqaid` enforced nothing site-specific).
    pub fn site_warning(&self, site: Option<&str>) -> Option<String> {
        let site = site?;
        let mut named: Vec<&str> = self
            .rules
            .iter()
            .flat_map(|r| r.sites.iter().map(String::as_str))
            .collect();
        named.sort_unstable();
        named.dedup();
        if named.contains(&site) {
            return None;
        }
        Some(if named.is_empty() {
            format!(
                "--site {site:?}: no rule names a site, so every rule applies as without --site"
            )
        } else {
            format!(
                "--site {site:?}: no rule names this site (the rules name {}), so only the rules \
                 without `sites` apply; check the spelling",
                named.join(", ")
            )
        })
    }
}
