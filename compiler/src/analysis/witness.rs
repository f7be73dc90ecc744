//! Witnesses: a concrete request (or packet) for which a conjunction of
//! literals holds, found field by field, exactly.
//!
//! Fields are independent once the engine has extracted them, so a
//! conjunction holds for some request exactly when each field's literals
//! hold for some value of that field:
//!
//! - **string fields**: the literals' languages are intersected
//!   ([`crate::strlang`]) within the field's domain, what the engine's
//!   normalisation can produce: a host has no upper-case ASCII and no port
//!   (`strip_port` leaves it as it is), a path has no `?`. A path value is
//!   sent escaped where the engine's percent-normalisation would change it
//!   (a `%` before two hex digits is sent as `%%3X…`), so it arrives as the
//!   value. A header or query parameter may be absent (every negated test
//!   then holds, and no positive one does);
//! - **addresses**: the positive sets are intersected and the negative
//!   ones subtracted, per family (IPv4-mapped IPv6 addresses are looked
//!   up as IPv4, so they add nothing); a destination with no positive
//!   test is left unknown. The engine takes a client and a destination of
//!   different families (a proxy may report them so), so such a pair
//!   counts, though a witness has one family where it can;
//! - **port and protocol**: finite sets. A request is TCP; a witness with
//!   no HTTP literal may be a UDP or ICMP packet (port 0).
//!
//! Two pairs of fields are not independent: `query` and `query("p")`
//! (the parameter is part of the query), and `host` and `header("host")`.
//! A conjunction that tests both of a pair is answered
//! [`Solution::Unknown`], and the caller keeps its conservative answer.
//!
//! Each string value is searched first among readable values (what a
//! `test` block can hold: printable ASCII, a path starting with `/`), then
//! among all byte strings; the decision is the second's.

use crate::addrs::{pick_addr, pick_port, within};
use crate::ir::{Atom, Cond, IpSet, Proto, StrField, StrOp};
use crate::strlang::{self, Dfa, Found, Langs};
use crate::value::query_param;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;

/// A literal: an atom index, possibly negated.
pub type Lit = (u32, bool);

/// A concrete request or packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witness {
    /// Method.
    pub method: Vec<u8>,
    /// Host, as sent.
    pub host: Vec<u8>,
    /// Path, as sent (it normalises to [`Witness::path_value`]).
    pub path: Vec<u8>,
    /// The path as the rules see it, percent-normalised.
    pub path_value: Vec<u8>,
    /// Query, as sent, without `?`.
    pub query: Option<Vec<u8>>,
    /// Headers the literals test (name in lower case, value).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Client address.
    pub ip: IpAddr,
    /// Destination address, when a literal needs one.
    pub dst: Option<IpAddr>,
    /// Destination port.
    pub port: u16,
    /// Protocol.
    pub proto: Proto,
    /// An HTTP request (else only a packet: no HTTP literal was tested).
    pub request: bool,
    /// Every string is printable ASCII (a `test` block can hold it).
    pub readable: bool,
}

/// The answer for a conjunction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Solution {
    /// It holds for this request.
    Sat(Box<Witness>),
    /// It holds for no request.
    Unsat,
    /// Not decided, and why.
    Unknown(String),
}

/// What one string field must be.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Absent,
    Is(Vec<u8>, bool),
    Unsat,
    Unknown(String),
}

/// Finds witnesses; remembers DFAs and per-field answers across calls.
pub struct Solver {
    langs: Langs,
    atom_dfas: HashMap<u32, Result<Rc<Dfa>, String>>,
    memo: HashMap<Vec<Lit>, Value>,
    /// Product states one string search may visit.
    pub max_states: usize,
    /// Whether a witness may be a packet that is no request (UDP, ICMP):
    /// for questions about the packet plane. Otherwise it is an HTTP
    /// request, so TCP.
    pub packets: bool,
}

/// Product states one search visits at most, by default.
pub const MAX_STATES: usize = 100_000;

impl Default for Solver {
    fn default() -> Self {
        Solver {
            langs: Langs::default(),
            atom_dfas: HashMap::new(),
            memo: HashMap::new(),
            max_states: MAX_STATES,
            packets: false,
        }
    }
}

/// The field's domain: what the engine's extraction can produce
/// (byte-level patterns, and whether each must hold).
fn domain(f: &StrField) -> &'static [(&'static str, bool)] {
    match f {
        StrField::Host => &[
            (r"(?s-u)\A[^A-Z]*\z", true),
            (r"(?s-u)\A(?:[^\[:][^:]*)?:[0-9]*\z", false),
            (r"(?s-u)\A\[[^\]]*\].+\z", false),
        ],
        StrField::Path => &[(r"(?s-u)\A[^?]*\z", true)],
        _ => &[],
    }
}

/// Readable values of the field.
fn readable(f: &StrField) -> &'static str {
    match f {
        StrField::Method => r"\A[A-Z]+\z",
        StrField::Host => r"\A[a-z0-9][a-z0-9.\-]*\z",
        StrField::Path => r"\A/[!-~&&[^?#]]*\z",
        StrField::Url => r"\A/[!-~&&[^#]]*\z",
        StrField::Query => r"\A[!-~&&[^#]]*\z",
        StrField::QueryParam(_) | StrField::Header(_) => r"\A(?:[!-~](?:[ -~]*[!-~])?)?\z",
    }
}

/// A test as a language: a finite set, or a pattern (by its atom).
enum Test<'a> {
    Set(&'a [String]),
    Pattern(u32),
}

fn test_of(a: u32, op: &StrOp) -> Test<'_> {
    match op {
        StrOp::Eq(v) => Test::Set(std::slice::from_ref(v)),
        StrOp::In(vs) => Test::Set(vs),
        _ => Test::Pattern(a),
    }
}

impl Solver {
    /// Whether the literals hold together for some request, and one.
    pub fn solve(&mut self, atoms: &[Atom], ipsets: &[IpSet], lits: &[Lit]) -> Solution {
        let mut by_field: HashMap<&StrField, Vec<Lit>> = HashMap::new();
        let (mut ip, mut dst, mut port, mut proto) = (vec![], vec![], vec![], vec![]);
        for &l in lits {
            match &atoms[l.0 as usize] {
                Atom::Str { field, .. } | Atom::Present(field) => {
                    by_field.entry(field).or_default().push(l)
                }
                Atom::Ip(s) => ip.push((&ipsets[*s as usize].prefixes, l.1)),
                Atom::DstIp(s) => dst.push((&ipsets[*s as usize].prefixes, l.1)),
                Atom::Port(r) => port.push((r, l.1)),
                Atom::Proto(p) => proto.push((p, l.1)),
            }
        }
        let tested = |f: &StrField| by_field.contains_key(f);
        if tested(&StrField::Query)
            && by_field
                .keys()
                .any(|f| matches!(f, StrField::QueryParam(_)))
        {
            return Solution::Unknown("`query` and `query(\"…\")` tested together".into());
        }
        if tested(&StrField::Host) && tested(&StrField::Header("host".into())) {
            return Solution::Unknown("`host` and `header(\"host\")` tested together".into());
        }
        if tested(&StrField::Url)
            && by_field.keys().any(|f| {
                matches!(
                    f,
                    StrField::Path | StrField::Query | StrField::QueryParam(_)
                )
            })
        {
            return Solution::Unknown(
                "`url` and `path`, `query` or `query(\"…\")` tested together".into(),
            );
        }
        let mut w = Witness {
            method: b"GET".to_vec(),
            host: b"example.org".to_vec(),
            path: b"/".to_vec(),
            path_value: b"/".to_vec(),
            query: None,
            headers: Vec::new(),
            ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            dst: None,
            port: 443,
            proto: Proto::Tcp,
            request: !self.packets || !by_field.is_empty(),
            readable: true,
        };
        let mut fields: Vec<(&StrField, Vec<Lit>)> = by_field.into_iter().collect();
        fields.sort();
        let mut params: Vec<(String, Vec<u8>)> = Vec::new();
        for (field, mut ls) in fields {
            ls.sort_unstable();
            let v = match self.memo.get(&ls) {
                Some(v) => v.clone(),
                None => {
                    let v = self.field(atoms, field, &ls);
                    self.memo.insert(ls, v.clone());
                    v
                }
            };
            let (v, nice) = match v {
                Value::Unsat => return Solution::Unsat,
                Value::Unknown(why) => return Solution::Unknown(why),
                Value::Absent => continue,
                Value::Is(v, nice) => (v, nice),
            };
            w.readable &= nice;
            match field {
                StrField::Method => w.method = v,
                StrField::Host => w.host = v,
                StrField::Path => {
                    w.path = raw_path(&v);
                    w.path_value = v;
                }
                StrField::Query => w.query = (!v.is_empty()).then_some(v),
                StrField::Url => {
                    let Ok(url) = std::str::from_utf8(&v) else {
                        return Solution::Unknown("a `url` that is not UTF-8".into());
                    };
                    let (path, query) = match url.split_once('?') {
                        Some((p, q)) => (p, Some(q.as_bytes().to_vec())),
                        None => (url, None),
                    };
                    w.path = path.as_bytes().to_vec();
                    w.path_value = crate::value::normalize_path(path).into_bytes();
                    w.query = query;
                }
                StrField::QueryParam(p) => params.push((p.clone(), v)),
                StrField::Header(h) => w.headers.push((h.clone(), v)),
            }
        }
        if !params.is_empty() {
            let parts: Vec<String> = params
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k.as_bytes()), encode(v)))
                .collect();
            w.query = Some(parts.join("&").into_bytes());
        }
        let mut protos = vec![Proto::Tcp, Proto::Udp, Proto::Icmp];
        protos.retain(|p| proto.iter().all(|(set, neg)| set.contains(p) != *neg));
        if w.request {
            protos.retain(|p| *p == Proto::Tcp);
        }
        let Some((p, port)) = protos.iter().find_map(|&p| Some((p, pick_port(p, &port)?))) else {
            return Solution::Unsat;
        };
        (w.proto, w.port) = (p, port);
        // A TCP witness is shown as a request, whatever it tests.
        w.request |= p == Proto::Tcp;
        let need_dst = dst.iter().any(|(_, neg)| !neg);
        // One family for both where possible, as on the wire; the engine
        // takes any pair (a proxy may report them), so mixed ones count.
        let pairs = [(false, false), (true, true), (false, true), (true, false)];
        let fams = pairs.into_iter().find_map(|(v6, dst6)| {
            let a = pick_addr(&ip, v6)?;
            let d = if need_dst {
                Some(pick_addr(&dst, dst6)?)
            } else {
                None
            };
            Some((a, d))
        });
        let Some((a, d)) = fams else {
            return Solution::Unsat;
        };
        (w.ip, w.dst) = (a, d);
        Solution::Sat(Box::new(w))
    }

    /// Solves one string field.
    fn field(&mut self, atoms: &[Atom], field: &StrField, lits: &[Lit]) -> Value {
        let mut tests: Vec<(Test, bool)> = Vec::new();
        let mut present = None;
        let mut positive = false;
        for &(a, neg) in lits {
            match &atoms[a as usize] {
                Atom::Present(_) => {
                    if present == Some(neg) {
                        return Value::Unsat;
                    }
                    present = Some(!neg);
                }
                Atom::Str { op, .. } => {
                    positive |= !neg;
                    tests.push((test_of(a, op), !neg));
                }
                _ => {}
            }
        }
        let optional = matches!(field, StrField::Header(_) | StrField::QueryParam(_));
        if optional && (present == Some(false) || (present.is_none() && !positive)) {
            return if positive {
                Value::Unsat
            } else {
                Value::Absent
            };
        }
        // Finite sets are never compiled: a finite positive set is tried
        // value by value, and the negated ones are excluded values.
        let finite = tests
            .iter()
            .filter_map(|(t, must)| match (t, must) {
                (Test::Set(vs), true) => Some(vs),
                _ => None,
            })
            .min_by_key(|vs| vs.len())
            .map(|vs| {
                // Shortest first: the likeliest to read well.
                let mut vs = vs.to_vec();
                vs.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
                vs
            });
        let mut excluded: HashSet<&str> = HashSet::new();
        let mut required: Vec<&[String]> = Vec::new();
        let mut dfas: Vec<(Rc<Dfa>, bool)> = Vec::new();
        for (t, must) in &tests {
            match (t, must) {
                (Test::Set(vs), true) => required.push(*vs),
                (Test::Set(vs), false) => excluded.extend(vs.iter().map(String::as_str)),
                (Test::Pattern(a), _) => match self.atom_dfa(atoms, *a) {
                    Ok(d) => dfas.push((d, *must)),
                    Err(why) => return Value::Unknown(why),
                },
            }
        }
        for &(p, must) in domain(field) {
            match self.langs.get(p, true) {
                Ok(d) => dfas.push((d, must)),
                Err(why) => return Value::Unknown(why),
            }
        }
        let nice = match self.langs.get(readable(field), false) {
            Ok(d) => d,
            Err(why) => return Value::Unknown(why),
        };
        let ok = |v: &str| {
            !excluded.contains(v)
                && required
                    .iter()
                    .all(|vs| vs.binary_search_by(|x| x.as_str().cmp(v)).is_ok())
                && strlang::check(&dfas, v.as_bytes()) == Some(true)
        };
        if let Some(values) = &finite {
            let mut fallback = None;
            for v in values.iter().filter(|v| ok(v)) {
                if strlang::accepts(&nice, v.as_bytes()) == Some(true) {
                    return Value::Is(v.as_bytes().to_vec(), true);
                }
                fallback.get_or_insert_with(|| v.as_bytes().to_vec());
            }
            return fallback.map_or(Value::Unsat, |v| Value::Is(v, false));
        }
        // The usual values first, where the tests allow them.
        let usual: &[&str] = match field {
            StrField::Method => &["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"],
            StrField::Host => &["example.org"],
            StrField::Path => &["/"],
            _ => &[],
        };
        if let Some(v) = usual.iter().find(|v| ok(v)) {
            return Value::Is(v.as_bytes().to_vec(), true);
        }
        let mut readable_dfas = dfas.clone();
        readable_dfas.push((nice, true));
        if let Found::Sat(v) = self.search_excluding(&mut readable_dfas, &excluded) {
            return Value::Is(v, true);
        }
        match self.search_excluding(&mut dfas, &excluded) {
            Found::Sat(v) => Value::Is(v, false),
            Found::Unsat => Value::Unsat,
            Found::Unknown(why) => Value::Unknown(why),
        }
    }

    /// The DFA of a string atom's pattern, built once.
    fn atom_dfa(&mut self, atoms: &[Atom], a: u32) -> Result<Rc<Dfa>, String> {
        if let Some(d) = self.atom_dfas.get(&a) {
            return d.clone();
        }
        let d = match &atoms[a as usize] {
            Atom::Str { op, .. } => match crate::scan::pattern(op) {
                Some(p) => self.langs.get(&p, false),
                None => Err("not a pattern".into()),
            },
            _ => Err("not a string test".into()),
        };
        self.atom_dfas.insert(a, d.clone());
        d
    }

    /// A value the DFAs agree on that is none of `excluded`: the shortest,
    /// or, if that one is excluded, one longer than every excluded value
    /// (when the DFAs allow only values that short, undecided).
    fn search_excluding(
        &mut self,
        dfas: &mut Vec<(Rc<Dfa>, bool)>,
        excluded: &HashSet<&str>,
    ) -> Found {
        let found = strlang::search(dfas, self.max_states);
        let Found::Sat(v) = &found else { return found };
        if !std::str::from_utf8(v).is_ok_and(|v| excluded.contains(v)) {
            return found;
        }
        let longest = excluded.iter().map(|v| v.len()).max().unwrap_or(0);
        match self
            .langs
            .get(&format!(r"(?s-u)\A.{{{}}}", longest + 1), true)
        {
            Ok(d) => dfas.push((d, true)),
            Err(why) => return Found::Unknown(why),
        }
        match strlang::search(dfas, self.max_states) {
            Found::Unsat => Found::Unknown(format!(
                "the values the tests allow are all at most {longest} bytes long, and {} are excluded",
                excluded.len()
            )),
            other => other,
        }
    }
}

impl Solver {
    /// Whether `c` holds for the witness, as the engine would decide it
    /// (`None`: a regex the analysis cannot run decided nothing).
    pub fn holds(
        &mut self,
        atoms: &[Atom],
        ipsets: &[IpSet],
        c: &Cond,
        w: &Witness,
    ) -> Option<bool> {
        Some(match c {
            Cond::True => true,
            Cond::False => false,
            Cond::Atom(a) => self.atom_holds(atoms, ipsets, *a, w)?,
            Cond::Not(x) => !self.holds(atoms, ipsets, x, w)?,
            Cond::And(v) | Cond::Or(v) => {
                // `and` stops at a false part, `or` at a true one.
                let stop = matches!(c, Cond::Or(_));
                let mut unknown = false;
                for x in v {
                    match self.holds(atoms, ipsets, x, w) {
                        Some(b) if b == stop => return Some(stop),
                        Some(_) => {}
                        None => unknown = true,
                    }
                }
                return (!unknown).then_some(!stop);
            }
        })
    }

    fn atom_holds(
        &mut self,
        atoms: &[Atom],
        ipsets: &[IpSet],
        a: u32,
        w: &Witness,
    ) -> Option<bool> {
        let contains = |s: &u32, ip: IpAddr| {
            let p = &ipsets[*s as usize].prefixes;
            match ip {
                IpAddr::V4(v) => within(&p.v4, u32::from(v), 32),
                IpAddr::V6(v) => match v.to_ipv4_mapped() {
                    Some(v4) => within(&p.v4, u32::from(v4), 32),
                    None => within(&p.v6, u128::from(v), 128),
                },
            }
        };
        Some(match &atoms[a as usize] {
            Atom::Ip(s) => contains(s, w.ip),
            Atom::DstIp(s) => w.dst.is_some_and(|d| contains(s, d)),
            Atom::Port(r) => r.iter().any(|&(x, y)| (x..=y).contains(&w.port)),
            Atom::Proto(p) => p.contains(&w.proto),
            Atom::Present(f) => w.request && w.value(f).is_some(),
            Atom::Str { field, op } => {
                let Some(v) = w.value(field).filter(|_| w.request) else {
                    return Some(false);
                };
                let has =
                    |x: &str| v.windows(x.len().max(1)).any(|s| s == x.as_bytes()) || x.is_empty();
                match op {
                    StrOp::Eq(x) => v.as_ref() == x.as_bytes(),
                    StrOp::In(xs) => xs.iter().any(|x| v.as_ref() == x.as_bytes()),
                    StrOp::Prefix(x) => v.starts_with(x.as_bytes()),
                    StrOp::Suffix(x) => v.ends_with(x.as_bytes()),
                    StrOp::Contains(x) => has(x),
                    StrOp::Regex { .. } => {
                        let d = self.atom_dfa(atoms, a).ok()?;
                        strlang::accepts(&d, &v)?
                    }
                }
            }
        })
    }
}

/// The path to send so that the engine's percent-normalisation gives `v`:
/// a `%` that would start an escape the normalisation changes (lower-case
/// hex, or an unreserved character) is kept by sending its first hex digit
/// escaped (`%4a` is sent as `%%34a`).
pub fn raw_path(v: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let changes = |h: u8, l: u8| match (hex(h), hex(l)) {
        (Some(x), Some(y)) => {
            let c = (x * 16 + y) as u8;
            h.is_ascii_lowercase() || l.is_ascii_lowercase() || unreserved(c)
        }
        _ => false,
    };
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        out.push(v[i]);
        if v[i] == b'%' && i + 2 < v.len() && changes(v[i + 1], v[i + 2]) {
            let _ = write!(Bytes(&mut out), "%{:02X}", v[i + 1]);
            i += 2;
            continue;
        }
        i += 1;
    }
    out
}

/// Writes formatted text into a byte buffer.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Unreserved in RFC 3986: never escaped, and decoded by the engine.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// Percent-encodes everything but unreserved characters.
fn encode(v: &[u8]) -> String {
    let mut out = String::with_capacity(v.len());
    for &b in v {
        if unreserved(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Bytes as text: printable ASCII as is, anything else as `\xNN`.
pub fn show(v: &[u8]) -> String {
    let mut out = String::with_capacity(v.len());
    for &b in v {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            b' '..=b'~' => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out
}

fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
        Proto::Icmp => "icmp",
    }
}

impl Witness {
    /// A string field's value as the rules see it; `None` when absent.
    pub fn value(&self, f: &StrField) -> Option<Cow<'_, [u8]>> {
        let query = self.query.as_deref();
        match f {
            StrField::Method => Some(Cow::Borrowed(&self.method)),
            StrField::Host => Some(Cow::Borrowed(&self.host)),
            StrField::Path => Some(Cow::Borrowed(&self.path_value)),
            StrField::Query => Some(Cow::Borrowed(query.unwrap_or(b""))),
            StrField::Url => Some(Cow::Owned(self.target())),
            StrField::QueryParam(p) => query_param(query?, p.as_bytes()).map(Cow::Owned),
            StrField::Header(h) => self
                .headers
                .iter()
                .find(|(n, _)| n == h)
                .map(|(_, v)| Cow::Borrowed(v.as_slice())),
        }
    }

    /// The request target as sent: the path and, if any, `?` and the query.
    pub fn target(&self) -> Vec<u8> {
        let mut t = self.path.clone();
        if let Some(q) = &self.query {
            t.push(b'?');
            t.extend_from_slice(q);
        }
        t
    }

    /// One line: `GET example.org/x?y from 192.0.2.1 to port 443;
    /// User-Agent: "curl/"`, or a packet's addresses and port.
    pub fn summary(&self) -> String {
        let to = match self.dst {
            Some(d) => format!("{d} port {}", self.port),
            None => format!("port {}", self.port),
        };
        if !self.request {
            return format!(
                "a {} packet from {} to {to}",
                proto_name(self.proto),
                self.ip
            );
        }
        let mut s = format!(
            "{} {}{} from {} to {to}",
            show(&self.method),
            show(&self.host),
            show(&self.target()),
            self.ip
        );
        for (n, v) in &self.headers {
            let _ = write!(s, "; {}: \"{}\"", crate::value::header_case(n), show(v));
        }
        s
    }

    /// The sample as a `test` block holds it: a `request` (or `packet`)
    /// labelled `label`, sent `repeat` times at once, indented two spaces.
    pub fn sample(&self, label: &str, repeat: u32) -> String {
        let mut s = String::new();
        let q = |v: &[u8]| format!("\"{}\"", show(v));
        if self.request {
            let _ = writeln!(s, "  request {label} {{");
            let _ = writeln!(s, "    method {}", q(&self.method));
            let _ = writeln!(s, "    host {}", q(&self.host));
            let _ = writeln!(s, "    path {}", q(&self.target()));
            for (n, v) in &self.headers {
                let _ = writeln!(
                    s,
                    "    header \"{}\" {}",
                    crate::value::header_case(n),
                    q(v)
                );
            }
        } else {
            let _ = writeln!(s, "  packet {label} {{");
            let _ = writeln!(s, "    proto {}", proto_name(self.proto));
            if self.proto == Proto::Tcp {
                let _ = writeln!(s, "    syn");
            }
        }
        let _ = writeln!(s, "    ip {}", self.ip);
        if let Some(d) = self.dst {
            let _ = writeln!(s, "    dst_ip {d}");
        }
        if self.proto != Proto::Icmp {
            let _ = writeln!(s, "    port {}", self.port);
        }
        if repeat > 1 {
            let _ = writeln!(s, "    repeat {repeat}");
        }
        s.push_str("  }\n");
        s
    }
}

#[cfg(test)]
#[path = "witness_tests.rs"]
mod tests;
