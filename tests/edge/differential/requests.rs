//! The requests of the differential test, built from a ruleset: its
//! `test` blocks' requests, a witness per rule (a request that reaches it,
//! from the compiler's own analysis), and for every string predicate and
//! address set of a rule, its values on that rule's witness: hits and near
//! misses (case changed, a character more or less, empty, absent).

use rctl_compiler::ir::{Atom, Ruleset, StrField, StrOp};
use rctl_compiler::proof::{reaching, Reach};
use rctl_compiler::spec::{SampleKind, TestCase};
use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// One request as it goes on the wire and to `rctl eval`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Req {
    /// Method.
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// Headers in order, `Host` among them.
    pub headers: Vec<(String, String)>,
    /// The client's address (sent in `X-Client-IP`).
    pub ip: IpAddr,
}

impl Req {
    fn base() -> Req {
        Req {
            method: "GET".into(),
            target: "/".into(),
            headers: vec![("Host".into(), "example.org".into())],
            ip: "192.0.2.1".parse().unwrap(),
        }
    }

    /// One line for failure messages.
    pub fn show(&self) -> String {
        let hs: Vec<String> = self
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v:?}"))
            .collect();
        format!(
            "{} {} from {} [{}]",
            self.method,
            self.target,
            self.ip,
            hs.join("; ")
        )
    }

    fn set_header(&mut self, name: &str, value: Option<&str>) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(v) = value {
            self.headers.push((name.to_string(), v.to_string()));
        }
    }

    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("/")
    }

    fn query(&self) -> Option<&str> {
        self.target.split_once('?').map(|(_, q)| q)
    }

    /// Whether HTTP/1.1 can carry it as it is: a token method, a target
    /// of visible ASCII without `#` (a fragment is not part of a request),
    /// token header names and values without control characters.
    pub fn sendable(&self) -> bool {
        let token = |s: &str| !s.is_empty() && s.bytes().all(rctl_emit::is_tchar);
        token(&self.method)
            && self.target.starts_with('/')
            && self
                .target
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'#')
            && self
                .headers
                .iter()
                .all(|(n, v)| token(n) && !v.chars().any(char::is_control))
    }

    /// The request's bytes, with `extra` headers, `X-Client-IP` and
    /// `Connection: close` last.
    pub fn wire(&self, extra: &[(String, String)]) -> Vec<u8> {
        let mut s = format!("{} {} HTTP/1.1\r\n", self.method, self.target);
        for (n, v) in self.headers.iter().chain(extra) {
            s.push_str(&format!("{n}: {v}\r\n"));
        }
        s.push_str(&format!(
            "X-Client-IP: {}\r\nConnection: close\r\n\r\n",
            self.ip
        ));
        s.into_bytes()
    }
}

/// Sends one request on a connection of its own; its status, or
/// `closed` when the connection ends (or stays silent for `wait`)
/// without an answer.
pub fn send(addr: SocketAddr, wire: &[u8], wait: Duration) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return "refused".into();
    };
    s.set_read_timeout(Some(wait)).unwrap();
    if s.write_all(wire).is_err() {
        return "closed".into();
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // The status line is enough.
    while !buf.windows(2).any(|w| w == b"\r\n") {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&buf);
    match text.split_whitespace().nth(1) {
        Some(code) if text.starts_with("HTTP/") => code.to_string(),
        _ => "closed".into(),
    }
}

/// Every request for `rs`, deduplicated, in a stable order: the test
/// blocks', the witnesses', then the values' (at most `cap` of those).
pub fn requests(rs: &Ruleset, tests: &[TestCase], cap: usize) -> Vec<Req> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut push = |r: Req, out: &mut Vec<Req>| {
        if seen.insert(r.clone()) {
            out.push(r);
        }
    };
    for r in test_blocks(tests) {
        push(r, &mut out);
    }
    let witnesses = witnesses(rs);
    for r in witnesses.iter().flatten() {
        push(r.clone(), &mut out);
    }
    let fixed = out.len();
    for r in values(rs, &witnesses) {
        if out.len() >= fixed + cap {
            break;
        }
        push(r, &mut out);
    }
    out
}

/// The test blocks' requests (each sample once: a burst covers repeats).
fn test_blocks(tests: &[TestCase]) -> Vec<Req> {
    let mut out = Vec::new();
    for t in tests {
        for s in &t.samples {
            let SampleKind::Request {
                method,
                host,
                target,
                headers,
            } = &s.kind
            else {
                continue;
            };
            let mut headers = headers.clone();
            if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
                headers.insert(0, ("Host".into(), host.clone()));
            }
            out.push(Req {
                method: method.clone(),
                target: target.clone(),
                headers,
                ip: s.ip,
            });
        }
    }
    out
}

/// Per rule, the compiler's witness as a request, if it has one.
fn witnesses(rs: &Ruleset) -> Vec<Option<Req>> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
    reaching(&rs.rules, &rs.atoms, &rs.ipsets, &Default::default())
        .into_iter()
        .map(|reach| {
            let Some(Reach::Reached { witness: w, .. }) = reach else {
                return None;
            };
            if !w.request {
                return None;
            }
            let mut target = text(&w.path)?;
            if let Some(q) = &w.query {
                target.push('?');
                target.push_str(&text(q)?);
            }
            let mut headers = vec![("Host".to_string(), text(&w.host)?)];
            for (n, v) in &w.headers {
                headers.push((n.clone(), text(v)?));
            }
            Some(Req {
                method: text(&w.method)?,
                target,
                headers,
                ip: w.ip,
            })
        })
        .collect()
}

/// Near misses of a value: itself, its case changed, a character more
/// before and after, one less at each end, empty.
fn variants(v: &str) -> Vec<String> {
    let mut out = vec![
        v.to_string(),
        v.to_uppercase(),
        v.to_lowercase(),
        format!("{v}x"),
        format!("X{v}"),
        String::new(),
    ];
    let mut cs = v.chars();
    cs.next_back();
    out.push(cs.as_str().to_string());
    let mut cs = v.chars();
    cs.next();
    out.push(cs.as_str().to_string());
    let mut seen = BTreeSet::new();
    out.retain(|x| seen.insert(x.clone()));
    out
}

/// The literal values an operator compares with (regexes: none; their
/// witnesses probe them).
fn literals(op: &StrOp) -> Vec<String> {
    match op {
        StrOp::Eq(v) => vec![v.clone()],
        StrOp::In(vs) => vs.iter().take(8).cloned().collect(),
        StrOp::Prefix(v) => vec![v.clone(), format!("{v}/tail")],
        StrOp::Suffix(v) => vec![v.clone(), format!("head.{v}")],
        StrOp::Contains(v) => vec![v.clone(), format!("a{v}b")],
        StrOp::Regex { .. } => vec![],
    }
}

/// Percent-encodes the bytes of `s` outside `keep` and unreserved ones.
fn encode(s: &str, keep: &[u8]) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

const PATH_KEEP: &[u8] = b"!$&'()*+,;=:@/%";
const QUERY_KEEP: &[u8] = b"!$&'()*+,;=:@/%?";

/// `base` with `field` set to `v` (`None`: absent), if a request can say it.
fn with_field(base: &Req, field: &StrField, v: Option<&str>) -> Option<Req> {
    let mut r = base.clone();
    match field {
        StrField::Header(h) => r.set_header(h, v),
        StrField::Host => r.set_header("Host", Some(v?)),
        StrField::Method => r.method = v?.to_string(),
        StrField::Path => {
            let v = v?;
            if !v.starts_with('/') {
                return None;
            }
            let q = r.query().map(|q| format!("?{q}")).unwrap_or_default();
            r.target = format!("{}{q}", encode(v, PATH_KEEP));
        }
        StrField::Query => {
            r.target = match v {
                Some(v) => format!("{}?{}", r.path(), encode(v, QUERY_KEEP)),
                None => r.path().to_string(),
            }
        }
        StrField::Url => {
            let v = v?;
            if !v.starts_with('/') {
                return None;
            }
            r.target = encode(v, QUERY_KEEP);
        }
        StrField::QueryParam(p) => {
            r.target = match v {
                Some(v) => format!("{}?{}={}", r.path(), encode(p, &[]), encode(v, &[])),
                None => r.path().to_string(),
            }
        }
    }
    Some(r)
}

/// The value a request gives `field`, as sent.
fn field_of(r: &Req, field: &StrField) -> Option<String> {
    Some(match field {
        StrField::Header(h) => r
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(h))?
            .1
            .clone(),
        StrField::Host => field_of(r, &StrField::Header("host".into()))?,
        StrField::Method => r.method.clone(),
        StrField::Path => r.path().to_string(),
        StrField::Query => r.query()?.to_string(),
        StrField::Url => r.target.clone(),
        StrField::QueryParam(_) => return None,
    })
}

/// The first and last addresses of a prefix and their neighbours outside.
fn v4_probes(n: u32, l: u8) -> [IpAddr; 4] {
    let size = if l == 0 {
        u32::MAX
    } else {
        (1u32 << (32 - u32::from(l))) - 1
    };
    let last = n | size;
    [n, last, n.wrapping_sub(1), last.wrapping_add(1)].map(|a| IpAddr::V4(Ipv4Addr::from(a)))
}

fn v6_probes(n: u128, l: u8) -> [IpAddr; 4] {
    let size = if l == 0 {
        u128::MAX
    } else {
        (1u128 << (128 - u32::from(l))) - 1
    };
    let last = n | size;
    [n, last, n.wrapping_sub(1), last.wrapping_add(1)].map(|a| IpAddr::V6(Ipv6Addr::from(a)))
}

/// For each rule, each of its predicates' values set on its witness (or
/// on a plain request for a rule without one).
fn values(rs: &Ruleset, witnesses: &[Option<Req>]) -> Vec<Req> {
    let mut out = Vec::new();
    for (i, rule) in rs.rules.iter().enumerate() {
        let base = witnesses
            .get(i)
            .cloned()
            .flatten()
            .unwrap_or_else(Req::base);
        let mut atoms = Vec::new();
        rule.cond.visit_atoms(&mut |a| atoms.push(a));
        for a in atoms {
            let Some(atom) = rs.atoms.get(a as usize) else {
                continue;
            };
            match atom {
                Atom::Str { field, op } => {
                    let mut vals = literals(op);
                    // The witness's own value: what a regex matched.
                    vals.extend(field_of(&base, field));
                    for v in vals {
                        for x in variants(&v) {
                            out.extend(with_field(&base, field, Some(&x)));
                        }
                    }
                    out.extend(with_field(&base, field, None));
                }
                Atom::Present(field) => {
                    out.extend(with_field(&base, field, None));
                    out.extend(with_field(&base, field, Some("")));
                    out.extend(with_field(&base, field, Some("1")));
                }
                Atom::Ip(set) => {
                    let Some(s) = rs.ipsets.get(*set as usize) else {
                        continue;
                    };
                    let v4 = s
                        .prefixes
                        .v4
                        .iter()
                        .take(3)
                        .flat_map(|&(n, l)| v4_probes(n, l));
                    let v6 = s
                        .prefixes
                        .v6
                        .iter()
                        .take(3)
                        .flat_map(|&(n, l)| v6_probes(n, l));
                    for ip in v4.chain(v6) {
                        out.push(Req { ip, ..base.clone() });
                    }
                }
                // The destination and its port are the proxy's own.
                Atom::DstIp(_) | Atom::Port(_) | Atom::Proto(_) => {}
            }
        }
    }
    out
}
