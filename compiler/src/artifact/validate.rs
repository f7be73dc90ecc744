//! The invariants of a compiled ruleset: what the compiler guarantees of
//! every [`Ruleset`] it produces, and what the engine, the reference
//! evaluator and the XDP lowering rely on. [`check`] tests all of them. The
//! artifact decoder runs it on everything it reads (a checksum proves only
//! that the bytes were not damaged, not that they came from the compiler),
//! and the compiler runs it on what it is about to return, so that every
//! compiled ruleset can be stored and read back.
//!
//! Limits are those of an [`Options`]; the artifact does not record the
//! options it was compiled with, so [`crate::artifact::decode`] uses the
//! defaults and [`crate::artifact::decode_with`] takes others. Of the
//! options, `max_depth` bounds parentheses in a source (a condition's tree
//! is bounded by [`MAX_COND_DEPTH`] instead), `max_cond_nodes` bounds each
//! inlined pattern rather than a rule's whole condition, and
//! `max_file_bytes` and `max_test_samples` bound sources and tests, which
//! the artifact does not hold; the rest are checked.
//!
//! **Ip sets**
//! - Named `inline` (a literal set) or `scope/name` (an ipblock); ipblock
//!   names are unique.
//! - Prefix lengths are within the address width, and no prefix has bits
//!   set past its length.
//! - Each family's prefixes are the merged form the compiler builds:
//!   sorted, disjoint, and as few as cover the same addresses.
//! - The ipblocks hold at most `max_prefixes` prefixes in all.
//!
//! **Predicates**
//! - No predicate is in the table twice.
//! - Header names are non-empty visible ASCII without `:`, in lower case
//!   (the engine looks headers up by their lower-case name).
//! - `host` values have no upper case, and `host` regexes are
//!   case-insensitive (requests' hosts are lower-cased before the tests).
//! - `in { … }` sets are sorted and deduplicated.
//! - (`path` values are normalised by the compiler, but path normalisation
//!   is not idempotent — `%%34%31` becomes `%41`, which becomes `A` — so a
//!   normalised value cannot be told from another by looking at it; none
//!   is checked, and a value no normalised path equals simply never
//!   matches.)
//! - `present` applies only to `header(…)` and `query(…)`.
//! - Each regex compiles with the compiler's settings: nesting at most 64,
//!   at most `max_regex_bytes` compiled; there are at most `max_regexes`.
//! - Each field's prefix, suffix, substring and regex tests compile into
//!   the one automaton the engine scans the field with
//!   ([`crate::scan::build`]).
//! - Address predicates name an existing ip set.
//! - Port ranges are ordered (start ≤ end), sorted, and merged (neither
//!   overlapping nor adjacent); protocols are sorted and deduplicated.
//!
//! **Rules**
//! - At most `max_rules`.
//! - Names follow the grammar (`name` or `scope/name`, of ASCII letters,
//!   digits, `_`, `-` and `.`: no spaces, control characters or escape
//!   sequences) and are unique.
//! - Priorities are within ±1,000,000; rules are in evaluation order
//!   (ascending priority, then file order), and the file-order positions
//!   are 0 to n−1, each once.
//! - Site names are identifiers, sorted and deduplicated.
//! - Conditions nest at most [`MAX_COND_DEPTH`] deep and name existing
//!   predicates.
//! - Deny and throttle statuses are 400 to 599; reasons (sent in HTTP
//!   responses, shown on terminals) hold no control or bidi character.
//! - Throttles: limit and burst above 0, period from 1 ms to 366 days, ban
//!   at most 366 days (0: none); at least one key, none twice, `global`
//!   alone, `prefix(…)` lengths within the address widths, `header(…)` keys
//!   in lower case. Packet and connection limits are keyed by the address
//!   only (`ip` or `prefix(…)`) and their conditions read only L3/L4
//!   predicates (`ip`, `dst_ip`, `port`, `proto`).
//! - Origins name one of the sources, at a line and column from 1.
//!
//! **Plans**
//! - One per rule.
//! - An XDP plan only for an enabled, non-shadow rule, of the kind its
//!   action and condition give: `allow` for an allow reading only L3/L4
//!   predicates, `exempt` for an allow that reads HTTP fields, `drop` for
//!   a drop reading only L3/L4 predicates, `throttle` for a packet or
//!   connection limit. Log, deny and request-limit rules have none.
//! - Its terms name only L3/L4 predicates that its rule's condition reads,
//!   and there are at most `max_dnf_terms` of them.
//!
//! What the XDP program can hold (rule and term counts, predicate bits,
//! IPv6 intervals) is not an invariant of the ruleset: a ruleset over it is
//! still whole for the user-space engine, and the packet plane's lowering
//! reports it as such.

use crate::cidr::{Cidr, PrefixSet};
use crate::diag::{code, Diagnostic};
use crate::ir::{Action, Atom, Cond, Key, Rule, Ruleset, StrField, StrOp, Unit, XdpKind};
use crate::source::Span;
use crate::value::MAX_DURATION_MS;
use crate::wire::Invalid;
use crate::wire::MAX_COND_DEPTH;
use crate::Options;
use regex_automata::meta;
use std::collections::{HashMap, HashSet};

/// Where in a ruleset an invariant is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// An ip set, by index.
    IpSet(usize),
    /// A predicate, by index.
    Atom(usize),
    /// A rule, by index.
    Rule(usize),
    /// A plan entry, by index.
    Plan(usize),
}

/// A broken invariant, and where.
pub type Violation = (Item, Invalid);

/// Checks every invariant listed in the module documentation.
pub fn check(rs: &Ruleset, opts: &Options) -> Result<(), Violation> {
    check_all(rs, opts, true)
}

/// [`check`] for the compiler's own output: each regex was compiled, with
/// [`build_regex`], as it was lowered, so it is not compiled again.
pub(crate) fn check_compiled(rs: &Ruleset, opts: &Options) -> Result<(), Violation> {
    check_all(rs, opts, false)
}

fn check_all(rs: &Ruleset, opts: &Options, regexes: bool) -> Result<(), Violation> {
    check_ipsets(rs, opts)?;
    check_atoms(rs, opts, regexes)?;
    check_rules(rs, opts)?;
    check_plans(rs, opts)
}

/// Whether `s` is an identifier of the grammar (`ident`).
pub fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn is_object_name(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(a, b)| is_ident(a) && is_ident(b))
}

/// Whether `s` is a rule name of the grammar (`name` or `scope/name`).
pub fn is_rule_name(s: &str) -> bool {
    is_ident(s) || is_object_name(s)
}

/// The first control or bidi character of `s`: what a reason phrase must
/// not hold (it is sent in HTTP responses and shown on terminals).
pub fn unprintable(s: &str) -> Option<char> {
    s.chars().find(|&c| {
        c.is_control()
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// Compiles one regex predicate with the compiler's settings (the size
/// limit is `max_bytes` of compiled NFA).
pub fn build_regex(
    pattern: &str,
    ci: bool,
    max_bytes: usize,
) -> Result<meta::Regex, Box<meta::BuildError>> {
    meta::Regex::builder()
        .syntax(crate::scan::syntax(ci).nest_limit(64))
        .configure(
            meta::Config::new()
                .nfa_size_limit(Some(max_bytes))
                .onepass(false)
                .hybrid(false)
                .backtrack(false),
        )
        .build(pattern)
        .map_err(Box::new)
}

fn check_prefixes(p: &PrefixSet) -> Result<(), Invalid> {
    for &(n, l) in &p.v4 {
        if l > 32 {
            return Err(Invalid::PrefixLength(l));
        }
        if l < 32 && n & (u32::MAX >> l) != 0 {
            return Err(Invalid::HostBits);
        }
    }
    for &(n, l) in &p.v6 {
        if l > 128 {
            return Err(Invalid::PrefixLength(l));
        }
        if l < 128 && n & (u128::MAX >> l) != 0 {
            return Err(Invalid::HostBits);
        }
    }
    let cidrs = p.v4.iter().map(|&(n, l)| Cidr::V4(n, l));
    let merged = PrefixSet::from_cidrs(cidrs.chain(p.v6.iter().map(|&(n, l)| Cidr::V6(n, l))));
    if merged != *p {
        return Err(Invalid::PrefixesNotMerged);
    }
    Ok(())
}

fn check_ipsets(rs: &Ruleset, opts: &Options) -> Result<(), Violation> {
    let mut names = HashSet::new();
    let mut total = 0usize;
    for (i, s) in rs.ipsets.iter().enumerate() {
        let at = |e| (Item::IpSet(i), e);
        if s.name != "inline" {
            if !is_object_name(&s.name) {
                return Err(at(Invalid::IpSetName(s.name.clone())));
            }
            if !names.insert(s.name.as_str()) {
                return Err(at(Invalid::DuplicateIpSet(s.name.clone())));
            }
            total += s.prefixes.len();
            if total > opts.max_prefixes {
                return Err(at(Invalid::TooManyPrefixes(total)));
            }
        }
        check_prefixes(&s.prefixes).map_err(at)?;
    }
    Ok(())
}

fn check_field(f: &StrField) -> Result<(), Invalid> {
    match f {
        StrField::Header(h)
            if h.is_empty()
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b':' && !b.is_ascii_uppercase()) =>
        {
            Err(Invalid::HeaderName(h.clone()))
        }
        _ => Ok(()),
    }
}

fn check_str_op(field: &StrField, op: &StrOp) -> Result<(), Invalid> {
    let values: &[String] = match op {
        StrOp::Eq(v) | StrOp::Prefix(v) | StrOp::Suffix(v) | StrOp::Contains(v) => {
            std::slice::from_ref(v)
        }
        StrOp::In(vs) => {
            if vs.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Invalid::StrSetOrder);
            }
            vs
        }
        StrOp::Regex { ci, .. } => {
            if *field == StrField::Host && !ci {
                return Err(Invalid::HostCase);
            }
            &[]
        }
    };
    for v in values {
        if *field == StrField::Host && v.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(Invalid::HostCase);
        }
    }
    Ok(())
}

fn check_atom(a: &Atom, nsets: usize) -> Result<(), Invalid> {
    match a {
        Atom::Str { field, op } => {
            check_field(field)?;
            check_str_op(field, op)
        }
        Atom::Present(field) => {
            if !matches!(field, StrField::Header(_) | StrField::QueryParam(_)) {
                return Err(Invalid::PresentField);
            }
            check_field(field)
        }
        Atom::Ip(s) | Atom::DstIp(s) if *s as usize >= nsets => Err(Invalid::MissingIpSet(*s)),
        Atom::Ip(_) | Atom::DstIp(_) => Ok(()),
        Atom::Port(r) => {
            if r.iter().any(|(lo, hi)| lo > hi) {
                return Err(Invalid::PortRange);
            }
            if r.windows(2)
                .any(|w| u32::from(w[1].0) <= u32::from(w[0].1) + 1)
            {
                return Err(Invalid::PortsNotMerged);
            }
            Ok(())
        }
        Atom::Proto(p) if p.windows(2).any(|w| w[0] >= w[1]) => Err(Invalid::ProtosNotSorted),
        Atom::Proto(_) => Ok(()),
    }
}

fn check_atoms(rs: &Ruleset, opts: &Options, compile_regexes: bool) -> Result<(), Violation> {
    let mut seen = HashSet::with_capacity(rs.atoms.len());
    let mut regexes = 0usize;
    // Per field, in atom order as the engine adds them: the scan patterns,
    // and the last atom that added one (for the error's location).
    let mut scans: HashMap<&StrField, (Vec<String>, usize)> = HashMap::new();
    for (i, a) in rs.atoms.iter().enumerate() {
        let at = |e| (Item::Atom(i), e);
        if !seen.insert(a) {
            return Err(at(Invalid::DuplicateAtom));
        }
        check_atom(a, rs.ipsets.len()).map_err(at)?;
        let Atom::Str { field, op } = a else { continue };
        if let StrOp::Regex { pattern, ci } = op {
            regexes += 1;
            if regexes > opts.max_regexes {
                return Err(at(Invalid::TooManyRegexes(regexes)));
            }
            if compile_regexes {
                build_regex(pattern, *ci, opts.max_regex_bytes)
                    .map_err(|e| at(Invalid::Regex(e.to_string())))?;
            }
        }
        if let Some(p) = crate::scan::pattern(op) {
            let entry = scans.entry(field).or_default();
            entry.0.push(p);
            entry.1 = i;
        }
    }
    for (field, (patterns, last)) in scans {
        let list: Vec<&str> = patterns.iter().map(String::as_str).collect();
        if crate::scan::build(&list).is_err() {
            return Err((Item::Atom(last), Invalid::FieldScan(field.display())));
        }
    }
    Ok(())
}

/// Whether every predicate `c` reads is L3/L4 (its atoms must exist).
fn reads_only_l4(c: &Cond, atoms: &[Atom]) -> bool {
    let mut ok = true;
    c.visit_atoms(&mut |a| ok &= atoms[a as usize].is_l4());
    ok
}

fn check_reason(status: u16, reason: &str) -> Result<(), Invalid> {
    if !(400..=599).contains(&status) {
        return Err(Invalid::Status(status));
    }
    match unprintable(reason) {
        Some(c) => Err(Invalid::Reason(c)),
        None => Ok(()),
    }
}

fn check_action(r: &Rule, atoms: &[Atom]) -> Result<(), Invalid> {
    let t = match &r.action {
        Action::Allow | Action::Log | Action::Drop => return Ok(()),
        Action::Deny { status, reason } => return check_reason(*status, reason),
        Action::Throttle(t) => t,
    };
    if t.limit == 0 || t.burst == 0 {
        return Err(Invalid::ThrottleZero);
    }
    if !(1..=MAX_DURATION_MS).contains(&t.period_ms) {
        return Err(Invalid::Period(t.period_ms));
    }
    if t.ban_ms > MAX_DURATION_MS {
        return Err(Invalid::Ban(t.ban_ms));
    }
    check_reason(t.status, &t.reason)?;
    if t.bucket == crate::ir::Bucket::Vsthrottle && (t.unit != Unit::Requests || t.burst != t.limit)
    {
        return Err(Invalid::VsthrottleShape);
    }
    if t.keys.is_empty() {
        return Err(Invalid::NoKeys);
    }
    if t.shared && t.unit != Unit::Requests {
        return Err(Invalid::SharedPackets);
    }
    for (i, k) in t.keys.iter().enumerate() {
        if t.keys[..i].contains(k) {
            return Err(Invalid::DuplicateKey);
        }
        match k {
            Key::Global | Key::Server if t.keys.len() > 1 => return Err(Invalid::GlobalNotAlone),
            Key::Prefix { v4, v6 } if *v4 > 32 || *v6 > 128 => {
                return Err(Invalid::PrefixKeyLength)
            }
            Key::Header(h) if h.bytes().any(|b| b.is_ascii_uppercase()) => {
                return Err(Invalid::KeyHeaderCase)
            }
            _ => {}
        }
        if t.unit != Unit::Requests && !matches!(k, Key::Ip | Key::Prefix { .. }) {
            return Err(Invalid::PacketKey);
        }
    }
    if t.unit != Unit::Requests && !reads_only_l4(&r.cond, atoms) {
        return Err(Invalid::PacketLimitReadsHttp);
    }
    Ok(())
}

fn check_cond(c: &Cond, natoms: usize) -> Result<(), Invalid> {
    if c.depth() > MAX_COND_DEPTH {
        return Err(Invalid::CondDepth);
    }
    let mut missing = None;
    c.visit_atoms(&mut |a| {
        if a as usize >= natoms {
            missing.get_or_insert(a);
        }
    });
    missing.map_or(Ok(()), |a| Err(Invalid::MissingAtom(a)))
}

fn check_rule(r: &Rule, prev: Option<&Rule>, atoms: &[Atom]) -> Result<(), Invalid> {
    if !is_rule_name(&r.name) {
        return Err(Invalid::RuleName(r.name.clone()));
    }
    if !(-1_000_000..=1_000_000).contains(&r.priority) {
        return Err(Invalid::Priority(r.priority));
    }
    if prev.is_some_and(|p| (p.priority, p.seq) >= (r.priority, r.seq)) {
        return Err(Invalid::Order);
    }
    if let Some(s) = r.sites.iter().find(|s| !is_ident(s)) {
        return Err(Invalid::SiteName(s.clone()));
    }
    if r.sites.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Invalid::Sites);
    }
    check_cond(&r.cond, atoms.len())?;
    check_action(r, atoms)?;
    if r.origin.line == 0 || r.origin.col == 0 {
        return Err(Invalid::OriginPosition);
    }
    Ok(())
}

fn check_rules(rs: &Ruleset, opts: &Options) -> Result<(), Violation> {
    let n = rs.rules.len();
    if n > opts.max_rules {
        return Err((Item::Rule(opts.max_rules), Invalid::TooManyRules(n)));
    }
    let sources: HashSet<&str> = rs.sources.iter().map(|s| s.path.as_str()).collect();
    let mut names = HashSet::with_capacity(n);
    let mut seqs = vec![false; n];
    for (i, r) in rs.rules.iter().enumerate() {
        let at = |e| (Item::Rule(i), e);
        check_rule(r, i.checked_sub(1).map(|p| &rs.rules[p]), &rs.atoms).map_err(at)?;
        if !names.insert(r.name.as_str()) {
            return Err(at(Invalid::DuplicateRule(r.name.clone())));
        }
        match seqs.get_mut(r.seq as usize) {
            Some(seen @ false) => *seen = true,
            _ => return Err(at(Invalid::Seq(r.seq))),
        }
        if !sources.contains(r.origin.file.as_str()) {
            return Err(at(Invalid::OriginFile(r.origin.file.clone())));
        }
    }
    Ok(())
}

fn check_plans(rs: &Ruleset, opts: &Options) -> Result<(), Violation> {
    let (plans, rules) = (rs.plan.len(), rs.rules.len());
    if plans != rules {
        return Err((
            Item::Plan(plans.min(rules)),
            Invalid::PlanCount { plans, rules },
        ));
    }
    for (i, (p, r)) in rs.plan.iter().zip(&rs.rules).enumerate() {
        let at = |e| (Item::Plan(i), e);
        let Some(x) = &p.xdp else { continue };
        if x.dnf.len() > opts.max_dnf_terms {
            return Err(at(Invalid::PlanTerms(x.dnf.len())));
        }
        let mut reads = HashSet::new();
        r.cond.visit_atoms(&mut |a| {
            reads.insert(a);
        });
        for &(a, _) in x.dnf.iter().flatten() {
            if rs.atoms.get(a as usize).is_none_or(|atom| !atom.is_l4()) {
                return Err(at(Invalid::PlanAtom(a)));
            }
            if !reads.contains(&a) {
                return Err(at(Invalid::PlanForeignAtom(a)));
            }
        }
        let l4 = reads_only_l4(&r.cond, &rs.atoms);
        let fits = r.enabled
            && !r.shadow
            && match (x.kind, &r.action) {
                (XdpKind::Allow, Action::Allow) | (XdpKind::Drop, Action::Drop) => l4,
                (XdpKind::Exempt, Action::Allow) => !l4,
                (XdpKind::Throttle, Action::Throttle(t)) => t.unit != Unit::Requests,
                _ => false,
            };
        if !fits {
            return Err(at(Invalid::PlanKind));
        }
    }
    Ok(())
}

/// The compiler's report of a [`Violation`] in a ruleset it produced,
/// pointing at the rule concerned (by its name, or by its `when` for what
/// its condition reads), given each rule's name and `when` spans.
pub(crate) fn diagnostic(
    rs: &Ruleset,
    (item, what): &Violation,
    spans: &[(Span, Span)],
) -> Diagnostic {
    let reads = |r: &Rule, f: &dyn Fn(u32) -> bool| {
        let mut hit = false;
        r.cond.visit_atoms(&mut |a| hit |= f(a));
        hit
    };
    let rule = match *item {
        Item::Rule(i) | Item::Plan(i) => Some(i),
        Item::Atom(a) => rs.rules.iter().position(|r| reads(r, &|x| x as usize == a)),
        Item::IpSet(s) => rs.rules.iter().position(|r| {
            reads(r, &|x| {
                matches!(rs.atoms.get(x as usize), Some(Atom::Ip(i) | Atom::DstIp(i)) if *i as usize == s)
            })
        }),
    };
    let (c, hint) = match what {
        Invalid::TooManyRules(_) | Invalid::TooManyRegexes(_) | Invalid::TooManyPrefixes(_) => {
            (code::LIMIT, "raise the limit if the data plane is sized for it")
        }
        Invalid::FieldScan(_) => (
            code::LIMIT,
            "the engine scans each field with one automaton of all its tests: use fewer or smaller regexes on this field, or `==` and `in { … }` where a literal will do",
        ),
        Invalid::CondDepth => (code::TOO_DEEP, "flatten the nesting of patterns and parentheses"),
        Invalid::Regex(_) => (code::BAD_REGEX, "regexes use regex-automata syntax"),
        Invalid::Reason(_) => (
            code::BAD_VALUE,
            "reasons are sent in HTTP responses and shown on terminals: write them without control or bidi characters",
        ),
        _ => (
            code::BAD_VALUE,
            "the compiled ruleset could not be stored as an artifact; this is a bug in rctl, please report it",
        ),
    };
    let name = rule
        .and_then(|i| rs.rules.get(i))
        .map_or("", |r| r.name.as_str());
    let mut d = Diagnostic::error(c, format!("rule `{name}`: {what}")).hint(hint);
    if rule.is_none() {
        d.message = what.to_string();
    }
    let on_when = matches!(item, Item::Atom(_) | Item::IpSet(_))
        || matches!(what, Invalid::CondDepth | Invalid::PacketLimitReadsHttp);
    if let Some(&(name_span, when)) = rule.and_then(|i| spans.get(i)) {
        d = d.primary(if on_when { when } else { name_span }, "in this rule");
    }
    d
}
