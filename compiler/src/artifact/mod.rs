//! The compiled artifact (`.rctlc`): a self-describing, versioned,
//! checksummed encoding of a [`Ruleset`]. Encoding is deterministic: the
//! same ruleset always gives the same bytes. Decoding never panics; it
//! rejects what does not encode a ruleset with the byte offset of the
//! problem, and a ruleset that breaks any invariant the compiler
//! guarantees (listed in [`crate::validate`]) with the offset of the item.
//!
//! Layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `RCTLC\0\r\n` |
//! | 2 | format version |
//! | 2 | reserved, 0 |
//! | 4 | endianness marker `0x01020304` |
//! | 8 | payload length |
//! | 32 | SHA-256 of the payload (the content hash) |
//! | … | payload: sources, ipsets, atoms, rules, plan |
//!
//! The payload is five lists. A list is a u32 count then its items; a
//! string is a u32 byte length then UTF-8; a flag is a byte, 0 or 1.
//!
//! - **sources**: path (string), SHA-256 of the file (32 bytes).
//! - **ipsets**: name (string), IPv4 list of (network u32, length u8),
//!   IPv6 list of (network u128, length u8).
//! - **atoms**: a tag byte, then by tag: 0 string test: field, operator
//!   (0 equals, 1 starts with, 2 ends with, 3 contains: a string; 4 regex:
//!   pattern, case-insensitive flag; 5 in: list of strings); 1 present:
//!   field; 2 source / 5 destination address: ipset index u32; 3 port:
//!   list of (first u16, last u16); 4 protocol: list of IP protocol
//!   numbers (u8). A field is a byte: 0 method, 1 host, 2 path, 3 query,
//!   4 query parameter (then its name), 5 header (then its name).
//! - **rules**, in evaluation order: name, priority i32, sequence u32,
//!   sites (list of strings), enabled flag, shadow flag, comment, the
//!   condition's node count u32 then its nodes in postfix order (0 true,
//!   1 false, 2 atom: index u32, 3 not, 4 and / 5 or: operand count u32,
//!   operands before), the action (0 allow, 1 log, 2 drop, 3 deny: status
//!   u16, reason; 4 throttle: limit u32, unit u8 (0 requests, 1 packets,
//!   2 connections), period ms u64, burst u32, ban ms u64, status u16,
//!   reason, keys: list of a tag byte (0 global, 1 ip, 2 prefix: v4 u8,
//!   v6 u8, 3 host, 4 path, 5 method, 6 header: name, 7 query: name);
//!   5 the same throttle with vsthrottle's bucket, 6 the same throttle
//!   `shared` site-wide; key tag 8 is `server`), the
//!   origin: file (string), line u32, column u32.
//! - **plan**, one per rule: note (string), then 0 (not in XDP) or 1 +
//!   kind (0 allow, 1 exempt, 2 drop, 3 throttle) and the XDP condition as
//!   a list of terms, each a list of (atom index u32, negated flag).

pub mod validate;
pub(crate) mod wire;

use crate::cidr::PrefixSet;
use crate::ir::*;
use crate::wire::{ArtifactError, ArtifactErrorKind, Invalid, Reader, TagOf, Writer};
use crate::Options;
use sha2::{Digest, Sha256};
use validate::Item;

/// The magic number.
pub const MAGIC: [u8; 8] = *b"RCTLC\0\r\n";
pub use wire::{FORMAT_VERSION, MAX_COND_DEPTH};

const ENDIAN: u32 = 0x0102_0304;
const HEADER: usize = 56;

/// SHA-256 of some bytes.
pub fn sha256(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Encodes a ruleset.
pub fn encode(rs: &Ruleset) -> Vec<u8> {
    let mut w = Writer::default();
    w.len(rs.sources.len());
    for s in &rs.sources {
        w.str(&s.path);
        w.bytes(&s.sha256);
    }
    w.len(rs.ipsets.len());
    for s in &rs.ipsets {
        w.str(&s.name);
        w.len(s.prefixes.v4.len());
        for &(n, l) in &s.prefixes.v4 {
            w.u32(n);
            w.u8(l);
        }
        w.len(s.prefixes.v6.len());
        for &(n, l) in &s.prefixes.v6 {
            w.u128(n);
            w.u8(l);
        }
    }
    w.len(rs.atoms.len());
    for a in &rs.atoms {
        encode_atom(&mut w, a);
    }
    w.len(rs.rules.len());
    for r in &rs.rules {
        encode_rule(&mut w, r);
    }
    w.len(rs.plan.len());
    for p in &rs.plan {
        w.str(&p.note);
        match &p.xdp {
            None => w.u8(0),
            Some(x) => {
                w.u8(1 + x.kind as u8);
                w.len(x.dnf.len());
                for t in &x.dnf {
                    w.len(t.len());
                    for &(a, n) in t {
                        w.u32(a);
                        w.u8(u8::from(n));
                    }
                }
            }
        }
    }
    let payload = w.buf;
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&ENDIAN.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&sha256(&payload));
    out.extend_from_slice(&payload);
    out
}

fn encode_field(w: &mut Writer, f: &StrField) {
    match f {
        StrField::Method => w.u8(0),
        StrField::Host => w.u8(1),
        StrField::Path => w.u8(2),
        StrField::Query => w.u8(3),
        StrField::Url => w.u8(6),
        StrField::QueryParam(p) => {
            w.u8(4);
            w.str(p);
        }
        StrField::Header(h) => {
            w.u8(5);
            w.str(h);
        }
    }
}

fn encode_atom(w: &mut Writer, a: &Atom) {
    match a {
        Atom::Str { field, op } => {
            w.u8(0);
            encode_field(w, field);
            match op {
                StrOp::Eq(s) => (w.u8(0), w.str(s)).0,
                StrOp::Prefix(s) => (w.u8(1), w.str(s)).0,
                StrOp::Suffix(s) => (w.u8(2), w.str(s)).0,
                StrOp::Contains(s) => (w.u8(3), w.str(s)).0,
                StrOp::Regex { pattern, ci } => {
                    w.u8(4);
                    w.str(pattern);
                    w.u8(u8::from(*ci));
                }
                StrOp::In(v) => {
                    w.u8(5);
                    w.len(v.len());
                    v.iter().for_each(|s| w.str(s));
                }
            }
        }
        Atom::Present(f) => {
            w.u8(1);
            encode_field(w, f);
        }
        Atom::Ip(i) => {
            w.u8(2);
            w.u32(*i);
        }
        Atom::DstIp(i) => {
            w.u8(5);
            w.u32(*i);
        }
        Atom::Port(r) => {
            w.u8(3);
            w.len(r.len());
            for &(a, b) in r {
                w.u16(a);
                w.u16(b);
            }
        }
        Atom::Proto(p) => {
            w.u8(4);
            w.len(p.len());
            p.iter().for_each(|p| w.u8(*p as u8));
        }
    }
}

fn encode_cond(w: &mut Writer, c: &Cond, nodes: &mut u32) {
    *nodes += 1;
    match c {
        Cond::True => w.u8(0),
        Cond::False => w.u8(1),
        Cond::Atom(a) => {
            w.u8(2);
            w.u32(*a);
        }
        Cond::Not(x) => {
            encode_cond(w, x, nodes);
            w.u8(3);
        }
        Cond::And(v) | Cond::Or(v) => {
            v.iter().for_each(|x| encode_cond(w, x, nodes));
            w.u8(if matches!(c, Cond::And(_)) { 4 } else { 5 });
            w.len(v.len());
        }
    }
}

fn encode_rule(w: &mut Writer, r: &Rule) {
    w.str(&r.name);
    w.i32(r.priority);
    w.u32(r.seq);
    w.len(r.sites.len());
    r.sites.iter().for_each(|s| w.str(s));
    w.u8(u8::from(r.enabled));
    w.u8(u8::from(r.shadow));
    w.str(&r.comment);
    let mut body = Writer::default();
    let mut nodes = 0;
    encode_cond(&mut body, &r.cond, &mut nodes);
    w.u32(nodes);
    w.bytes(&body.buf);
    match &r.action {
        Action::Allow => w.u8(0),
        Action::Log => w.u8(1),
        Action::Drop => w.u8(2),
        Action::Deny { status, reason } => {
            w.u8(3);
            w.u16(*status);
            w.str(reason);
        }
        Action::Throttle(t) => {
            // Tag 4 is the default bucket, as format 1 always wrote it;
            // tag 5 the same layout with vsthrottle's bucket; tag 6 a
            // `shared` throttle (default bucket), so that every artifact
            // without them stays byte for byte what it was, and a reader
            // that predates them refuses the tag rather than count per host.
            w.u8(match (t.bucket, t.shared) {
                (Bucket::Gcra, false) => 4,
                (Bucket::Vsthrottle, _) => 5,
                (Bucket::Gcra, true) => 6,
            });
            w.u32(t.limit);
            w.u8(t.unit as u8);
            w.u64(t.period_ms);
            w.u32(t.burst);
            w.u64(t.ban_ms);
            w.u16(t.status);
            w.str(&t.reason);
            w.len(t.keys.len());
            for k in &t.keys {
                match k {
                    Key::Global => w.u8(0),
                    Key::Ip => w.u8(1),
                    Key::Prefix { v4, v6 } => {
                        w.u8(2);
                        w.u8(*v4);
                        w.u8(*v6);
                    }
                    Key::Host => w.u8(3),
                    Key::Path => w.u8(4),
                    Key::Method => w.u8(5),
                    Key::Header(h) => (w.u8(6), w.str(h)).0,
                    Key::Query(q) => (w.u8(7), w.str(q)).0,
                    Key::Server => w.u8(8),
                }
            }
        }
    }
    w.str(&r.origin.file);
    w.u32(r.origin.line);
    w.u32(r.origin.col);
}

/// The content hash stored in an artifact's header, without decoding it.
pub fn content_hash(bytes: &[u8]) -> Option<[u8; 32]> {
    bytes.get(24..56).and_then(|h| h.try_into().ok())
}

/// Decodes an artifact and checks every invariant of [`crate::validate`]
/// with the default limits.
pub fn decode(bytes: &[u8]) -> Result<Ruleset, ArtifactError> {
    decode_with(bytes, &Options::default())
}

/// Decodes an artifact and checks every invariant of [`crate::validate`]
/// with the limits of `opts` (those it was compiled with, if raised).
pub fn decode_with(bytes: &[u8], opts: &Options) -> Result<Ruleset, ArtifactError> {
    let mut h = Reader::new(bytes, 0);
    let magic = h.take(8).map_err(|_| ArtifactError {
        kind: ArtifactErrorKind::BadMagic,
        offset: 0,
    })?;
    if magic != MAGIC {
        return Err(ArtifactError {
            kind: ArtifactErrorKind::BadMagic,
            offset: 0,
        });
    }
    let version = h.u16()?;
    if version != FORMAT_VERSION {
        return Err(ArtifactError {
            kind: ArtifactErrorKind::UnsupportedVersion(version),
            offset: 8,
        });
    }
    if h.u16()? != 0 {
        return h.err(Invalid::ReservedHeader);
    }
    if h.u32()? != ENDIAN {
        return h.err(Invalid::Endianness);
    }
    let len = h.u64()?;
    let hash = h.sha()?;
    if len != h.remaining() as u64 {
        if len > h.remaining() as u64 {
            return Err(ArtifactError {
                kind: ArtifactErrorKind::Truncated,
                offset: bytes.len(),
            });
        }
        return Err(ArtifactError {
            kind: ArtifactErrorKind::Invalid(Invalid::TrailingBytes(h.remaining() as u64 - len)),
            offset: HEADER + len as usize,
        });
    }
    let payload = &bytes[HEADER..];
    if sha256(payload) != hash {
        return Err(ArtifactError {
            kind: ArtifactErrorKind::ChecksumMismatch,
            offset: 24,
        });
    }
    let (rs, at) = decode_payload(Reader::new(payload, HEADER))?;
    validate::check(&rs, opts).map_err(|(item, what)| ArtifactError {
        kind: ArtifactErrorKind::Invalid(what),
        offset: at.of(item),
    })?;
    Ok(rs)
}

/// Where each item starts, for the offsets of validation errors.
#[derive(Default)]
struct Offsets {
    ipsets: Vec<usize>,
    atoms: Vec<usize>,
    rules: Vec<usize>,
    plans: Vec<usize>,
    end: usize,
}

impl Offsets {
    fn of(&self, item: Item) -> usize {
        let (list, i) = match item {
            Item::IpSet(i) => (&self.ipsets, i),
            Item::Atom(i) => (&self.atoms, i),
            Item::Rule(i) => (&self.rules, i),
            Item::Plan(i) => (&self.plans, i),
        };
        list.get(i).copied().unwrap_or(self.end)
    }
}

fn decode_payload(mut r: Reader<'_>) -> Result<(Ruleset, Offsets), ArtifactError> {
    let mut at = Offsets::default();
    let mut sources = Vec::new();
    for _ in 0..r.count(36)? {
        let path = r.str()?;
        sources.push(SourceHash {
            path,
            sha256: r.sha()?,
        });
    }
    let mut ipsets = Vec::new();
    for _ in 0..r.count(12)? {
        at.ipsets.push(r.offset());
        let name = r.str()?;
        let mut p = PrefixSet::default();
        for _ in 0..r.count(5)? {
            p.v4.push((r.u32()?, r.u8()?));
        }
        for _ in 0..r.count(17)? {
            p.v6.push((r.u128()?, r.u8()?));
        }
        ipsets.push(IpSet { name, prefixes: p });
    }
    let mut atoms = Vec::new();
    for _ in 0..r.count(2)? {
        at.atoms.push(r.offset());
        atoms.push(decode_atom(&mut r)?);
    }
    let mut rules = Vec::new();
    for _ in 0..r.count(32)? {
        at.rules.push(r.offset());
        rules.push(decode_rule(&mut r)?);
    }
    let mut plan = Vec::new();
    for _ in 0..r.count(5)? {
        at.plans.push(r.offset());
        let note = r.str()?;
        let tag = r.u8()?;
        let xdp = match tag {
            0 => None,
            1..=4 => {
                let kind = [
                    XdpKind::Allow,
                    XdpKind::Exempt,
                    XdpKind::Drop,
                    XdpKind::Throttle,
                ][tag as usize - 1];
                let mut dnf = Vec::new();
                for _ in 0..r.count(4)? {
                    let mut t = Vec::new();
                    for _ in 0..r.count(5)? {
                        t.push((r.u32()?, r.bool()?));
                    }
                    dnf.push(t);
                }
                Some(XdpRule { kind, dnf })
            }
            t => return r.err(Invalid::Tag(TagOf::Plan, t)),
        };
        plan.push(RulePlan { xdp, note });
    }
    if r.remaining() != 0 {
        return r.err(Invalid::TrailingBytes(r.remaining() as u64));
    }
    at.end = r.offset();
    let rs = Ruleset {
        sources,
        ipsets,
        atoms,
        rules,
        plan,
    };
    Ok((rs, at))
}

fn decode_field(r: &mut Reader<'_>) -> Result<StrField, ArtifactError> {
    Ok(match r.u8()? {
        0 => StrField::Method,
        1 => StrField::Host,
        2 => StrField::Path,
        3 => StrField::Query,
        4 => StrField::QueryParam(r.str()?),
        5 => StrField::Header(r.str()?),
        6 => StrField::Url,
        t => return r.err(Invalid::Tag(TagOf::Field, t)),
    })
}

fn decode_atom(r: &mut Reader<'_>) -> Result<Atom, ArtifactError> {
    Ok(match r.u8()? {
        0 => {
            let field = decode_field(r)?;
            let op = match r.u8()? {
                0 => StrOp::Eq(r.str()?),
                1 => StrOp::Prefix(r.str()?),
                2 => StrOp::Suffix(r.str()?),
                3 => StrOp::Contains(r.str()?),
                4 => StrOp::Regex {
                    pattern: r.str()?,
                    ci: r.bool()?,
                },
                5 => {
                    let mut v = Vec::new();
                    for _ in 0..r.count(4)? {
                        v.push(r.str()?);
                    }
                    StrOp::In(v)
                }
                t => return r.err(Invalid::Tag(TagOf::Operator, t)),
            };
            Atom::Str { field, op }
        }
        1 => Atom::Present(decode_field(r)?),
        2 => Atom::Ip(r.u32()?),
        5 => Atom::DstIp(r.u32()?),
        3 => {
            let mut v = Vec::new();
            for _ in 0..r.count(4)? {
                v.push((r.u16()?, r.u16()?));
            }
            Atom::Port(v)
        }
        4 => {
            let mut v = Vec::new();
            for _ in 0..r.count(1)? {
                v.push(match r.u8()? {
                    6 => Proto::Tcp,
                    17 => Proto::Udp,
                    1 => Proto::Icmp,
                    p => return r.err(Invalid::Tag(TagOf::Protocol, p)),
                });
            }
            Atom::Proto(v)
        }
        t => return r.err(Invalid::Tag(TagOf::Atom, t)),
    })
}

/// Reads a condition in postfix order. The depth is bounded while reading,
/// so that no later recursion over the tree (or its drop) can overflow the
/// stack.
fn decode_cond(r: &mut Reader<'_>) -> Result<Cond, ArtifactError> {
    let nodes = r.count(1)?;
    let mut stack: Vec<(Cond, usize)> = Vec::new();
    for _ in 0..nodes {
        let item = match r.u8()? {
            0 => (Cond::True, 1),
            1 => (Cond::False, 1),
            2 => (Cond::Atom(r.u32()?), 1),
            3 => match stack.pop() {
                Some((c, d)) => (Cond::Not(Box::new(c)), d + 1),
                None => return r.err(Invalid::CondShape),
            },
            t @ (4 | 5) => {
                let n = r.u32()? as usize;
                if n > stack.len() {
                    return r.err(Invalid::CondShape);
                }
                let parts = stack.split_off(stack.len() - n);
                let d = parts.iter().map(|p| p.1).max().unwrap_or(0) + 1;
                let v = parts.into_iter().map(|p| p.0).collect();
                (if t == 4 { Cond::And(v) } else { Cond::Or(v) }, d)
            }
            t => return r.err(Invalid::Tag(TagOf::Condition, t)),
        };
        if item.1 > MAX_COND_DEPTH {
            return r.err(Invalid::CondDepth);
        }
        stack.push(item);
    }
    match (stack.pop(), stack.is_empty()) {
        (Some((c, _)), true) => Ok(c),
        _ => r.err(Invalid::CondShape),
    }
}

fn decode_key(r: &mut Reader<'_>) -> Result<Key, ArtifactError> {
    Ok(match r.u8()? {
        0 => Key::Global,
        1 => Key::Ip,
        2 => Key::Prefix {
            v4: r.u8()?,
            v6: r.u8()?,
        },
        3 => Key::Host,
        4 => Key::Path,
        5 => Key::Method,
        6 => Key::Header(r.str()?),
        7 => Key::Query(r.str()?),
        8 => Key::Server,
        k => return r.err(Invalid::Tag(TagOf::Key, k)),
    })
}

fn decode_action(r: &mut Reader<'_>) -> Result<Action, ArtifactError> {
    Ok(match r.u8()? {
        0 => Action::Allow,
        1 => Action::Log,
        2 => Action::Drop,
        3 => Action::Deny {
            status: r.u16()?,
            reason: r.str()?,
        },
        tag @ (4..=6) => {
            let bucket = if tag == 5 {
                Bucket::Vsthrottle
            } else {
                Bucket::Gcra
            };
            let limit = r.u32()?;
            let unit = match r.u8()? {
                0 => Unit::Requests,
                1 => Unit::Packets,
                2 => Unit::Connections,
                u => return r.err(Invalid::Tag(TagOf::Unit, u)),
            };
            let (period_ms, burst, ban_ms) = (r.u64()?, r.u32()?, r.u64()?);
            let (status, reason) = (r.u16()?, r.str()?);
            let mut keys = Vec::new();
            for _ in 0..r.count(1)? {
                keys.push(decode_key(r)?);
            }
            Action::Throttle(Throttle {
                limit,
                unit,
                period_ms,
                burst,
                keys,
                ban_ms,
                status,
                reason,
                bucket,
                shared: tag == 6,
            })
        }
        t => return r.err(Invalid::Tag(TagOf::Action, t)),
    })
}

fn decode_rule(r: &mut Reader<'_>) -> Result<Rule, ArtifactError> {
    let name = r.str()?;
    let priority = r.i32()?;
    let seq = r.u32()?;
    let mut sites = Vec::new();
    for _ in 0..r.count(4)? {
        sites.push(r.str()?);
    }
    let enabled = r.bool()?;
    let shadow = r.bool()?;
    let comment = r.str()?;
    let cond = decode_cond(r)?;
    let action = decode_action(r)?;
    let file = r.str()?;
    let (line, col) = (r.u32()?, r.u32()?);
    Ok(Rule {
        name,
        priority,
        seq,
        sites,
        enabled,
        shadow,
        comment,
        cond,
        action,
        origin: Origin { file, line, col },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text operators compare: `rctl compile` prints it, `rctl fleet
    /// status` and the agent's status show it.
    #[test]
    fn hashes_print_as_lower_case_hex_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// The agent compares the header's content hash with what etcd's
    /// pointer names before it decodes anything.
    #[test]
    fn the_content_hash_is_read_from_the_header_as_the_payload_hash() {
        let c = crate::compile_str(
            "t.rctl",
            "rule r { when path == \"/x\" deny 403 }",
            &crate::Options::default(),
        );
        let bytes = encode(&c.ruleset.expect("it compiles"));
        assert_eq!(content_hash(&bytes), Some(sha256(&bytes[HEADER..])));
        assert_eq!(content_hash(&bytes[..HEADER - 1]), None, "a short header");
    }
}
