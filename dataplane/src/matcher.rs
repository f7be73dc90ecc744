//! The compiled predicate matcher: every field of a request is scanned once,
//! whatever the number of rules, and yields the set of atoms that hold.
//!
//! Per string field: exact values (`==`, `in`) in one hash map; a few
//! prefixes and suffixes compared directly; substrings, regexes (and
//! prefixes and suffixes when a field has many) in one multi-pattern
//! regex-automata automaton searched for all overlapping matches in a
//! single pass.
//! Addresses go through one [`PrefixTable`]. Ports and protocols are few
//! and tested directly.

use crate::core::IndexError;
use crate::error::EngineError;
use crate::iptable::PrefixTable;
use crate::request::{decode_component, Fields};
use rctl_compiler::ir::{Atom, Proto, Ruleset, StrField, StrOp};
use rctl_compiler::scan;
use regex_automata::meta::Regex;
use regex_automata::{hybrid, Input, PatternSet};
use std::collections::HashMap;
use std::net::IpAddr;

/// A set of atom indices: a bitset plus the list of set bits.
#[derive(Debug, Default, Clone)]
pub struct AtomSet {
    bits: Vec<u64>,
    on: Vec<u32>,
}

impl AtomSet {
    /// An empty set for `n` atoms.
    pub fn with_atoms(n: usize) -> Self {
        AtomSet {
            bits: vec![0; n.div_ceil(64)],
            on: Vec::new(),
        }
    }

    /// Adds an atom.
    pub fn insert(&mut self, a: u32) {
        let (w, b) = (a as usize / 64, a % 64);
        if let Some(word) = self.bits.get_mut(w) {
            if *word & (1 << b) == 0 {
                *word |= 1 << b;
                self.on.push(a);
            }
        }
    }

    /// Whether an atom holds.
    pub fn contains(&self, a: u32) -> bool {
        self.bits
            .get(a as usize / 64)
            .is_some_and(|w| w & (1 << (a % 64)) != 0)
    }

    /// The atoms that hold, in the order they were found.
    pub fn atoms(&self) -> &[u32] {
        &self.on
    }

    /// Empties the set in time proportional to its size.
    pub fn clear(&mut self) {
        for &a in &self.on {
            self.bits[a as usize / 64] = 0;
        }
        self.on.clear();
    }
}

/// A field's multi-pattern automaton: lazy DFAs searched for overlapping
/// matches (each match reports its pattern; no per-pattern bookkeeping),
/// one for the patterns anchored at the value's start and one for the
/// others (see [`scan::ScanPart`]), with the meta regex over all of them
/// as the fallback when a lazy DFA gives up (for example on a Unicode
/// word boundary in non-ASCII text).
struct Scan {
    re: Regex,
    /// The lazy DFAs, each with its cache's index in
    /// [`MatchScratch::caches`].
    parts: Vec<Part>,
    atoms: Vec<u32>,
}

/// One lazy DFA of a [`Scan`], with its cache's index.
struct Part {
    scan: scan::ScanPart,
    id: usize,
}

/// Per-thread working memory of a [`Matcher`].
pub struct MatchScratch {
    patterns: PatternSet,
    caches: Vec<Option<hybrid::dfa::Cache>>,
    /// The atoms one search found (kept from one search to the next).
    found: Vec<u32>,
}

/// A fast hash (FxHash's multiply-rotate) for the matcher's lookup-only
/// tables. Their keys are fixed when the ruleset loads, so request data
/// cannot grow a chain; it can only look one up.
///
/// [`FastHash::random`] seeds it per process, for tables whose keys come
/// from the traffic (flows, talkers), so that nobody can aim collisions.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHash {
    seed: u64,
}

impl FastHash {
    /// A hash seeded from the process's random state.
    pub fn random() -> Self {
        use std::hash::BuildHasher as _;
        FastHash {
            seed: std::hash::RandomState::new().hash_one(0x5eedu64) | 1,
        }
    }
}

/// The hasher of [`FastHash`].
#[derive(Debug, Default)]
pub struct FastHasher(u64);

impl std::hash::BuildHasher for FastHash {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.seed)
    }
}

impl FastHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // The multiply mixes upwards only; fold the high half down so
        // that the table's low index bits depend on every input bit.
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // The tail as a little-endian word, byte by byte (a copy of a
            // length unknown here would be a call to memmove).
            let w = rest.iter().rev().fold(0u64, |w, &b| w << 8 | u64::from(b));
            self.add(w ^ ((rest.len() as u64) << 59));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_u128(&mut self, n: u128) {
        self.add(n as u64);
        self.add((n >> 64) as u64);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// A hash map with [`FastHash`].
pub type FastMap<K, V> = HashMap<K, V, FastHash>;

struct FieldMatcher {
    exact: FastMap<Box<[u8]>, Vec<u32>>,
    /// The lengths of the exact values: bit `n` for a length `n` under
    /// 64, bit 63 also for every longer one. A value of no such length is
    /// not looked up (most are not: a path against a few exact paths, a
    /// User-Agent against the empty one), which saves hashing it whole.
    exact_lens: u64,
    /// `starts_with` and `ends_with` values tested directly, when a field
    /// has few of them (at most [`LITERALS_MAX`]): a comparison costs
    /// less than starting an automaton's search, which every value would
    /// otherwise take (every path starts with `/`, so no first-byte test
    /// spares a path the search for `/api/…` prefixes).
    literals: Vec<(Literal, u32)>,
    scan: Option<Scan>,
    present: Vec<u32>,
}

/// The most `starts_with` and `ends_with` values of one field tested
/// directly rather than in the field's automaton.
const LITERALS_MAX: usize = 8;

/// A value tested directly: a prefix or a suffix.
#[derive(Debug, Clone)]
enum Literal {
    Prefix(Box<[u8]>),
    Suffix(Box<[u8]>),
}

impl Literal {
    #[inline]
    fn holds(&self, value: &[u8]) -> bool {
        match self {
            Literal::Prefix(p) => value.starts_with(p),
            Literal::Suffix(s) => value.ends_with(s),
        }
    }
}

impl Scan {
    /// Adds the atoms `value` matches.
    fn run(&self, value: &[u8], set: &mut AtomSet, ms: &mut MatchScratch) {
        let MatchScratch {
            patterns,
            caches,
            found,
        } = ms;
        found.clear();
        self.search(value, found, caches, patterns);
        found.iter().for_each(|&a| set.insert(a));
    }

    /// The atoms of every pattern `value` matches, in the order found.
    fn search(
        &self,
        value: &[u8],
        found: &mut Vec<u32>,
        caches: &mut [Option<hybrid::dfa::Cache>],
        patterns: &mut PatternSet,
    ) {
        if self.lazy(value, found, caches) {
            return;
        }
        found.clear();
        patterns.clear();
        self.re
            .which_overlapping_matches(&Input::new(value), patterns);
        found.extend(patterns.iter().map(|p| self.atoms[p.as_usize()]));
    }

    /// Searches with the lazy DFAs; false if one gave up (`found` then
    /// holds a part of the answer, to be thrown away).
    fn lazy(
        &self,
        value: &[u8],
        found: &mut Vec<u32>,
        caches: &mut [Option<hybrid::dfa::Cache>],
    ) -> bool {
        if self.parts.is_empty() {
            return false;
        }
        for part in &self.parts {
            let Some(Some(cache)) = caches.get_mut(part.id) else {
                return false;
            };
            let atoms = &self.atoms;
            if part
                .scan
                .search(cache, value, |i| found.push(atoms[i]))
                .is_err()
            {
                return false;
            }
        }
        true
    }
}

impl FieldMatcher {
    fn run(&self, value: &[u8], set: &mut AtomSet, ms: &mut MatchScratch) {
        for &a in &self.present {
            set.insert(a);
        }
        // A value of a length no exact value has is not looked up.
        let exact = (self.exact_lens & length_bit(value.len()) != 0)
            .then(|| self.exact.get(value))
            .flatten();
        for &a in exact.into_iter().flatten() {
            set.insert(a);
        }
        for (l, a) in &self.literals {
            if l.holds(value) {
                set.insert(*a);
            }
        }
        if let Some(scan) = &self.scan {
            scan.run(value, set, ms);
        }
    }
}

/// A length's bit in [`FieldMatcher::exact_lens`].
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

/// The compiled matcher of one ruleset.
pub struct Matcher {
    method: Option<FieldMatcher>,
    host: Option<FieldMatcher>,
    path: Option<FieldMatcher>,
    query: Option<FieldMatcher>,
    url: Option<FieldMatcher>,
    params: FastMap<Vec<u8>, FieldMatcher>,
    headers: FastMap<Vec<u8>, FieldMatcher>,
    ips: PrefixTable,
    ip_atoms: Vec<Option<u32>>,
    /// `dst_ip` atoms by ip set (the same prefix table, looked up with the
    /// destination when any exist).
    dst_atoms: Vec<Option<u32>>,
    uses_dst: bool,
    /// Port atoms by single port (sorted by port: a rule set names few,
    /// and a binary search of them costs less than hashing the port),
    /// and those with ranges.
    port_atoms: Vec<(u16, Vec<u32>)>,
    port_ranges: Vec<(u32, Vec<(u16, u16)>)>,
    proto_atoms: Vec<(u32, Vec<Proto>)>,
    max_patterns: usize,
    atoms: usize,
    dfas: Vec<Option<hybrid::dfa::DFA>>,
    longest_header: usize,
    /// The lengths of the header names rules read ([`length_bit`]).
    header_lens: u64,
}

impl Matcher {
    /// Compiles the ruleset's atoms. An address predicate naming a missing
    /// ip set is an error here, not a test that never holds.
    pub fn new(rs: &Ruleset) -> Result<Matcher, EngineError> {
        type Parts = (
            FastMap<Box<[u8]>, Vec<u32>>,
            Vec<(String, u32)>,
            Vec<u32>,
            Vec<(StrOp, u32)>,
        );
        let mut by_field: HashMap<StrField, Parts> = HashMap::new();
        let mut ip_atoms = vec![None; rs.ipsets.len()];
        let mut dst_atoms = vec![None; rs.ipsets.len()];
        let mut port_atoms: HashMap<u16, Vec<u32>> = HashMap::new();
        let mut port_ranges = Vec::new();
        let mut proto_atoms = Vec::new();
        for (i, a) in rs.atoms.iter().enumerate() {
            let i = i as u32;
            match a {
                Atom::Str { field, op } => {
                    let parts = by_field.entry(field.clone()).or_default();
                    match op {
                        StrOp::Eq(v) => parts.0.entry(v.as_bytes().into()).or_default().push(i),
                        StrOp::In(vs) => vs
                            .iter()
                            .for_each(|v| parts.0.entry(v.as_bytes().into()).or_default().push(i)),
                        StrOp::Prefix(_) | StrOp::Suffix(_) => parts.3.push((op.clone(), i)),
                        StrOp::Contains(_) | StrOp::Regex { .. } => {
                            parts.1.extend(scan::pattern(op).map(|p| (p, i)));
                        }
                    }
                }
                Atom::Present(field) => by_field.entry(field.clone()).or_default().2.push(i),
                Atom::Ip(s) | Atom::DstIp(s) => {
                    let slots = if matches!(a, Atom::Ip(_)) {
                        &mut ip_atoms
                    } else {
                        &mut dst_atoms
                    };
                    let missing = IndexError::IpSet {
                        atom: i as usize,
                        set: *s,
                    };
                    *slots.get_mut(*s as usize).ok_or(missing)? = Some(i);
                }
                Atom::Port(r)
                    if r.iter()
                        .map(|&(a, b)| u64::from(b.saturating_sub(a)) + 1)
                        .sum::<u64>()
                        <= 64 =>
                {
                    for &(lo, hi) in r {
                        for p in lo..=hi {
                            port_atoms.entry(p).or_default().push(i);
                        }
                    }
                }
                Atom::Port(r) => port_ranges.push((i, r.clone())),
                Atom::Proto(p) => proto_atoms.push((i, p.clone())),
            }
        }
        let mut m = Matcher {
            method: None,
            host: None,
            path: None,
            query: None,
            url: None,
            params: FastMap::default(),
            headers: FastMap::default(),
            ips: PrefixTable::new(&rs.ipsets),
            ip_atoms,
            uses_dst: dst_atoms.iter().any(Option::is_some),
            dst_atoms,
            port_atoms: {
                let mut v: Vec<(u16, Vec<u32>)> = port_atoms.into_iter().collect();
                v.sort_unstable_by_key(|&(p, _)| p);
                v
            },
            port_ranges,
            proto_atoms,
            max_patterns: 0,
            atoms: rs.atoms.len(),
            dfas: Vec::new(),
            longest_header: 0,
            header_lens: 0,
        };
        for (field, (exact, mut scans, present, fixes)) in by_field {
            // Many prefixes and suffixes are searched together, by the
            // automaton, in one pass; a few are compared.
            let mut literals = Vec::new();
            if fixes.len() > LITERALS_MAX {
                scans.extend(
                    fixes
                        .iter()
                        .filter_map(|(op, a)| scan::pattern(op).map(|p| (p, *a))),
                );
                scans.sort_by_key(|&(_, a)| a);
            } else {
                for (op, a) in fixes {
                    match op {
                        StrOp::Prefix(v) => {
                            literals.push((Literal::Prefix(v.into_bytes().into()), a))
                        }
                        StrOp::Suffix(v) => {
                            literals.push((Literal::Suffix(v.into_bytes().into()), a))
                        }
                        _ => {}
                    }
                }
            }
            let scan = if scans.is_empty() {
                None
            } else {
                // The compiler builds the same automaton (`rctl check`), so
                // this fails only on an artifact it did not write.
                let pats: Vec<&str> = scans.iter().map(|(p, _)| p.as_str()).collect();
                let re = scan::build(&pats).map_err(|e| EngineError::Scan {
                    field: field.display(),
                    message: scan::explain(&e),
                })?;
                m.max_patterns = m.max_patterns.max(re.pattern_len());
                let atoms: Vec<u32> = scans.iter().map(|(_, a)| *a).collect();
                let parts = scan::lazy_parts(&pats)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| {
                        m.dfas.push(Some(p.dfa.clone()));
                        Part {
                            scan: p,
                            id: m.dfas.len() - 1,
                        }
                    })
                    .collect();
                Some(Scan { re, parts, atoms })
            };
            let fm = FieldMatcher {
                exact_lens: exact.keys().fold(0, |m, k| m | length_bit(k.len())),
                exact,
                literals,
                scan,
                present,
            };
            match field {
                StrField::Method => m.method = Some(fm),
                StrField::Host => m.host = Some(fm),
                StrField::Path => m.path = Some(fm),
                StrField::Query => m.query = Some(fm),
                StrField::Url => m.url = Some(fm),
                StrField::QueryParam(p) => {
                    m.params.insert(p.into_bytes(), fm);
                }
                StrField::Header(h) => {
                    m.longest_header = m.longest_header.max(h.len());
                    m.header_lens |= length_bit(h.len());
                    m.headers.insert(h.into_bytes(), fm);
                }
            }
        }
        Ok(m)
    }

    /// Working memory for one thread: lazy DFA caches and a pattern set.
    pub fn scratch(&self) -> MatchScratch {
        MatchScratch {
            patterns: PatternSet::new(self.max_patterns.max(1)),
            caches: self
                .dfas
                .iter()
                .map(|d| d.as_ref().map(hybrid::dfa::DFA::create_cache))
                .collect(),
            found: Vec::new(),
        }
    }

    /// An empty atom set for this matcher.
    pub fn atom_set(&self) -> AtomSet {
        AtomSet::with_atoms(self.atoms)
    }

    fn l4(&self, ip: IpAddr, dst: Option<IpAddr>, proto: Proto, port: u16, set: &mut AtomSet) {
        for &s in self.ips.lookup(ip) {
            if let Some(a) = self.ip_atoms[s as usize] {
                set.insert(a);
            }
        }
        if let Some(dst) = dst.filter(|_| self.uses_dst) {
            for &s in self.ips.lookup(dst) {
                if let Some(a) = self.dst_atoms[s as usize] {
                    set.insert(a);
                }
            }
        }
        if let Ok(i) = self.port_atoms.binary_search_by_key(&port, |&(p, _)| p) {
            for &a in &self.port_atoms[i].1 {
                set.insert(a);
            }
        }
        for (a, r) in &self.port_ranges {
            if r.iter().any(|&(lo, hi)| (lo..=hi).contains(&port)) {
                set.insert(*a);
            }
        }
        for (a, p) in &self.proto_atoms {
            if p.contains(&proto) {
                set.insert(*a);
            }
        }
    }

    /// Every atom that holds for a packet.
    pub fn packet_atoms(&self, p: &crate::request::Packet, set: &mut AtomSet) {
        self.l4(p.src, p.dst, p.proto, p.dst_port, set);
    }

    /// Every atom that holds for a request: each field scanned once.
    pub fn request_atoms(&self, f: &Fields<'_>, set: &mut AtomSet, pats: &mut MatchScratch) {
        let req = f.request();
        self.l4(req.ip, req.dst, Proto::Tcp, req.port, set);
        self.field_atoms(f, set, pats);
    }

    /// The atoms of a request's HTTP fields: [`Matcher::request_atoms`]
    /// without those of its addresses and port, for a set that already
    /// holds them (from [`Matcher::packet_atoms`] of the same request).
    pub fn field_atoms(&self, f: &Fields<'_>, set: &mut AtomSet, pats: &mut MatchScratch) {
        let req = f.request();
        if let Some(m) = &self.method {
            m.run(f.method, set, pats);
        }
        if let Some(m) = &self.host {
            m.run(&f.host, set, pats);
        }
        if let Some(m) = &self.path {
            m.run(&f.path, set, pats);
        }
        if let Some(m) = &self.query {
            m.run(f.query.unwrap_or(b""), set, pats);
        }
        if let Some(m) = &self.url {
            m.run(req.target, set, pats);
        }
        if !self.params.is_empty() {
            if let Some(q) = f.query {
                let mut seen: Vec<&[u8]> = Vec::new();
                for kv in q.split(|&b| b == b'&') {
                    let (k, v) = match kv.iter().position(|&b| b == b'=') {
                        Some(i) => (&kv[..i], &kv[i + 1..]),
                        None => (kv, &b""[..]),
                    };
                    let k = decode_component(k);
                    if let Some((name, m)) = self.params.get_key_value(k.as_ref()) {
                        if !seen.contains(&name.as_slice()) {
                            seen.push(name);
                            m.run(&decode_component(v), set, pats);
                        }
                    }
                }
            }
        }
        if !self.headers.is_empty() {
            // Only the first header of each name counts. Names longer than
            // any the rules mention cannot match and are skipped without
            // work, so thousands of long headers cost little.
            let mut seen: [&[u8]; 8] = [b""; 8];
            let mut seen_more: Vec<&[u8]> = Vec::new();
            let mut n_seen = 0;
            let mut buf = [0u8; 64];
            let mut long = Vec::new();
            for (n, v) in req.headers {
                // A name of a length no rule's header has is not looked up
                // (nor lower-cased).
                if n.len() > self.longest_header || self.header_lens & length_bit(n.len()) == 0 {
                    continue;
                }
                // Names a rule mentions may be longer than the buffer:
                // those (rare) are lower-cased on the heap.
                let lower: &[u8] = if let Some(lower) = buf.get_mut(..n.len()) {
                    for (d, s) in lower.iter_mut().zip(n.iter()) {
                        *d = s.to_ascii_lowercase();
                    }
                    lower
                } else {
                    long.clear();
                    long.extend(n.iter().map(u8::to_ascii_lowercase));
                    &long
                };
                if let Some((name, m)) = self.headers.get_key_value(lower) {
                    let name = name.as_slice();
                    if seen[..n_seen.min(8)].contains(&name) || seen_more.contains(&name) {
                        continue;
                    }
                    if n_seen < 8 {
                        seen[n_seen] = name;
                    } else {
                        seen_more.push(name);
                    }
                    n_seen += 1;
                    m.run(v, set, pats);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AtomSet;

    /// `starts_with` and `ends_with` hold alike whether a field has few
    /// of them (compared) or many (searched in the automaton), and beside
    /// the field's other patterns.
    #[test]
    fn prefixes_and_suffixes_hold_compared_or_searched() {
        use rctl_compiler::ir::{Atom, StrField, StrOp};
        let fixes = [
            ("/api/rest_v1/page/html/", true),
            ("/w/", true),
            ("/", true),
            ("", true),
            (".php", false),
            ("/", false),
            ("é", false),
            ("%AE", false),
            ("/wiki/Paris", true),
            ("x", false),
            ("/w/index.php", true),
            ("ml/", false),
        ];
        let paths: [&[u8]; 9] = [
            b"/api/rest_v1/page/html/Paris",
            b"/w/index.php",
            b"/wiki/Paris_(France)",
            b"/",
            b"",
            b"/caf\xc3\xa9",
            b"/wiki/%AE",
            b"/w",
            b"/api/rest_v1/page/html/",
        ];
        for n in [
            1,
            3,
            super::LITERALS_MAX,
            super::LITERALS_MAX + 1,
            fixes.len(),
        ] {
            let mut src = String::new();
            for (i, (v, prefix)) in fixes.iter().take(n).enumerate() {
                let op = if *prefix { "starts_with" } else { "ends_with" };
                src.push_str(&format!(
                    "rule r{i} {{\n  when path {op} \"{v}\"\n  deny 403\n}}\n"
                ));
            }
            // Another pattern in the same field's automaton.
            src.push_str("rule re {\n  when path ~ \"ndex\"\n  deny 403\n}\n");
            let rs = rctl_compiler::compile_str("t.rctl", &src, &Default::default())
                .ruleset
                .unwrap_or_else(|| panic!("{src}"));
            let m = super::Matcher::new(&rs).unwrap();
            let mut scratch = m.scratch();
            for path in paths {
                let path = crate::request::decode_component(path).into_owned();
                let req = crate::Request {
                    method: b"GET",
                    host: b"",
                    target: &path,
                    headers: &[],
                    ip: "192.0.2.1".parse().unwrap(),
                    dst: None,
                    port: 443,
                    time_ns: 0,
                };
                let f = crate::request::Fields::new(&req);
                let mut set = m.atom_set();
                m.field_atoms(&f, &mut set, &mut scratch);
                for (i, a) in rs.atoms.iter().enumerate() {
                    let Atom::Str {
                        field: StrField::Path,
                        op,
                    } = a
                    else {
                        continue;
                    };
                    let v: &[u8] = &f.path;
                    let want = match op {
                        StrOp::Prefix(p) => v.starts_with(p.as_bytes()),
                        StrOp::Suffix(p) => v.ends_with(p.as_bytes()),
                        StrOp::Regex { .. } => v.windows(4).any(|w| w == b"ndex"),
                        _ => continue,
                    };
                    assert_eq!(
                        set.contains(i as u32),
                        want,
                        "{n} literals, {op:?} on {:?}",
                        String::from_utf8_lossy(v)
                    );
                }
            }
        }
    }

    /// Tables keyed by traffic use a per-process seed: not a constant,
    /// and not the same for two tables.
    #[test]
    fn random_fast_hashes_are_seeded_apart() {
        let seeds: Vec<u64> = (0..8).map(|_| super::FastHash::random().seed).collect();
        assert!(seeds.iter().all(|s| s.count_ones() > 8), "{seeds:x?}");
        assert!(seeds.windows(2).all(|w| w[0] != w[1]), "{seeds:x?}");
    }

    /// Distinct inputs of one width hash apart, and the fold brings the
    /// high input bits down to the low bits a table indexes by. (Across
    /// widths the unseeded hash may collide: a leading zero word leaves
    /// its state at zero; its tables hold only the ruleset's keys.)
    #[test]
    fn fast_hashes_of_distinct_inputs_differ() {
        use std::collections::HashSet;
        use std::hash::{BuildHasher, Hasher};
        fn apart(what: &str, hs: impl IntoIterator<Item = u64>) {
            let mut seen = HashSet::new();
            for h in hs {
                assert!(seen.insert(h), "{what}: {h:x} twice");
            }
        }
        for b in [super::FastHash::default(), super::FastHash::random()] {
            apart("u8", (0..=255u8).map(|n| b.hash_one(n)));
            apart("u16", [0u16, 1, 256, 4_097, 65_535].map(|n| b.hash_one(n)));
            apart("u32", [0u32, 1, 65_536, 1 << 31].map(|n| b.hash_one(n)));
            apart("u64", (1..=255u64).map(|k| b.hash_one(k << 48)));
            apart(
                "low bits",
                (1..=255u64).map(|k| u64::from(b.hash_one(k << 48) as u32)),
            );
            apart(
                "u128",
                [1u128, 1 << 64, 1 << 100, (1 << 64) | 7].map(|n| b.hash_one(n)),
            );
            // A tail's length counts: zeros of every length differ (for
            // the unseeded hash, within one word: see above).
            let longest = if b.seed == 0 { 8 } else { 20 };
            apart(
                "bytes",
                (1..longest).map(|len| {
                    let mut h = b.build_hasher();
                    h.write(&vec![0; len]);
                    h.finish()
                }),
            );
        }
    }

    /// A set: an atom found twice (two fields, two patterns) is listed
    /// once, one past its words is ignored, and `clear` empties it for
    /// the next request.
    #[test]
    fn atom_sets_hold_each_atom_once() {
        let mut s = AtomSet::with_atoms(130);
        for a in [5, 64, 5, 129, 64, 0, 0, 200] {
            s.insert(a);
        }
        assert_eq!(s.atoms(), [5, 64, 129, 0]);
        assert!(s.contains(129) && s.contains(0) && !s.contains(1) && !s.contains(200));
        s.clear();
        assert!(s.atoms().is_empty() && !s.contains(5) && !s.contains(64));
        s.insert(64);
        assert_eq!(s.atoms(), [64]);
    }
}
