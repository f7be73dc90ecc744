//! SPOP typed data and key/value lists (doc/SPOE.txt §3.1).
//!
//! ```text
//! TYPED-DATA : <TYPE:4 bits><FLAGS:4 bits><DATA>
//! ```
//!
//! The type is the byte's low nibble and the flags its high nibble
//! (`SPOE_DATA_T_MASK` 0x0F and `SPOE_DATA_FL_MASK` 0xF0 in HAProxy's
//! `spoe-t.h`), so `true` is `0x11` and `false` `0x01`. Integers are
//! varints of their 64-bit two's complement (`-1` takes 10 bytes); strings
//! and binaries a varint length and the bytes. Names (KV keys, message
//! names, variable names) are a bare length and bytes, without type byte.

use super::error::{ErrorKind, SpopError};
use super::varint::{self, VarintError};
use std::net::{Ipv4Addr, Ipv6Addr};

/// A typed value, borrowing strings from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Type 0: no value (HAProxy sends it for a sample that could not be
    /// fetched, such as an absent header).
    Null,
    /// Type 1, the value in the flags.
    Bool(bool),
    /// Type 2.
    Int32(i32),
    /// Type 3.
    Uint32(u32),
    /// Type 4 (HAProxy sends every integer sample as INT64).
    Int64(i64),
    /// Type 5.
    Uint64(u64),
    /// Type 6: 4 bytes, network order.
    Ipv4(Ipv4Addr),
    /// Type 7: 16 bytes, network order.
    Ipv6(Ipv6Addr),
    /// Type 8: bytes, not necessarily UTF-8.
    String(&'a [u8]),
    /// Type 9.
    Binary(&'a [u8]),
}

/// Type ids on the wire.
mod ty {
    pub const NULL: u8 = 0;
    pub const BOOL: u8 = 1;
    pub const INT32: u8 = 2;
    pub const UINT32: u8 = 3;
    pub const INT64: u8 = 4;
    pub const UINT64: u8 = 5;
    pub const IPV4: u8 = 6;
    pub const IPV6: u8 = 7;
    pub const STRING: u8 = 8;
    pub const BINARY: u8 = 9;
    pub const FLAG_TRUE: u8 = 0x10;
}

impl<'a> Value<'a> {
    /// Appends the value's encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Value::Null => out.push(ty::NULL),
            Value::Bool(b) => out.push(ty::BOOL | if b { ty::FLAG_TRUE } else { 0 }),
            Value::Int32(i) => {
                out.push(ty::INT32);
                varint::encode(i64::from(i) as u64, out);
            }
            Value::Uint32(u) => {
                out.push(ty::UINT32);
                varint::encode(u64::from(u), out);
            }
            Value::Int64(i) => {
                out.push(ty::INT64);
                varint::encode(i as u64, out);
            }
            Value::Uint64(u) => {
                out.push(ty::UINT64);
                varint::encode(u, out);
            }
            Value::Ipv4(a) => {
                out.push(ty::IPV4);
                out.extend_from_slice(&a.octets());
            }
            Value::Ipv6(a) => {
                out.push(ty::IPV6);
                out.extend_from_slice(&a.octets());
            }
            Value::String(s) => {
                out.push(ty::STRING);
                encode_bytes(s, out);
            }
            Value::Binary(s) => {
                out.push(ty::BINARY);
                encode_bytes(s, out);
            }
        }
    }

    /// The bytes of a string or binary.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::String(s) | Value::Binary(s) => Some(s),
            _ => None,
        }
    }

    /// Any integer type as an unsigned value (negative values: `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Int32(i) => u64::try_from(i).ok(),
            Value::Int64(i) => u64::try_from(i).ok(),
            Value::Uint32(u) => Some(u64::from(u)),
            Value::Uint64(u) => Some(u),
            _ => None,
        }
    }
}

/// Appends a name or a string body: varint length, then the bytes.
pub fn encode_bytes(s: &[u8], out: &mut Vec<u8>) {
    varint::encode(s.len() as u64, out);
    out.extend_from_slice(s);
}

/// A bounds-checked reader over the bytes of one frame. Every error names
/// the offset in the frame where the bad item starts.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    max_string: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `frame` (from its type byte on) starting at `pos`;
    /// strings longer than `max_string` are refused.
    pub fn new(frame: &'a [u8], pos: usize, max_string: usize) -> Reader<'a> {
        Reader {
            buf: frame,
            pos,
            max_string,
        }
    }

    /// The offset of the next byte in the frame.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Whether every byte of the frame was read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, SpopError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| SpopError::at(ErrorKind::Truncated { what }, self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    /// `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], SpopError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| SpopError::at(ErrorKind::Truncated { what }, self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// A varint.
    pub fn varint(&mut self, what: &'static str) -> Result<u64, SpopError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        match varint::decode(rest) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(VarintError::Truncated) => {
                Err(SpopError::at(ErrorKind::Truncated { what }, self.pos))
            }
            Err(VarintError::Overflow) => Err(SpopError::at(ErrorKind::BadVarint, self.pos)),
        }
    }

    /// A length-prefixed byte string (a name, or a string's body).
    pub fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], SpopError> {
        let start = self.pos;
        let len = self.varint(what)?;
        if len > self.max_string as u64 {
            return Err(SpopError::at(
                ErrorKind::StringTooLong {
                    len,
                    max: self.max_string,
                },
                start,
            ));
        }
        // Fits in usize: it is at most max_string.
        self.take(len as usize, what)
            .map_err(|_| SpopError::at(ErrorKind::Truncated { what }, start))
    }

    /// A typed value.
    pub fn value(&mut self) -> Result<Value<'a>, SpopError> {
        let start = self.pos;
        let b = self.u8("typed data")?;
        let range = |_| {
            SpopError::at(
                ErrorKind::IntRange {
                    data_type: b & 0x0F,
                },
                start,
            )
        };
        Ok(match b & 0x0F {
            ty::NULL => Value::Null,
            ty::BOOL => Value::Bool(b & 0xF0 == ty::FLAG_TRUE),
            ty::INT32 => Value::Int32(i32::try_from(self.varint("INT32")? as i64).map_err(range)?),
            ty::UINT32 => Value::Uint32(u32::try_from(self.varint("UINT32")?).map_err(range)?),
            ty::INT64 => Value::Int64(self.varint("INT64")? as i64),
            ty::UINT64 => Value::Uint64(self.varint("UINT64")?),
            ty::IPV4 => {
                let mut a = [0u8; 4];
                a.copy_from_slice(self.take(4, "IPV4")?);
                Value::Ipv4(Ipv4Addr::from(a))
            }
            ty::IPV6 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(self.take(16, "IPV6")?);
                Value::Ipv6(Ipv6Addr::from(a))
            }
            ty::STRING => Value::String(self.bytes("STRING")?),
            ty::BINARY => Value::Binary(self.bytes("BINARY")?),
            t => return Err(SpopError::at(ErrorKind::UnknownDataType(t), start)),
        })
    }
}

/// A key/value list (the payload of HELLO and DISCONNECT frames, and a
/// message's arguments), checked when the frame was parsed.
#[derive(Debug, Clone)]
pub struct KvList<'a> {
    reader: Reader<'a>,
    end: usize,
    len: usize,
}

impl<'a> KvList<'a> {
    /// Checks `count` items (or, with `None`, items up to `end`) starting
    /// at `r`'s position, and advances `r` past them.
    pub(crate) fn parse(r: &mut Reader<'a>, count: Option<usize>) -> Result<KvList<'a>, SpopError> {
        let start = r.clone();
        let mut len = 0;
        while count.map_or(!r.is_empty(), |c| len < c) {
            r.bytes("item name")?;
            r.value()?;
            len += 1;
        }
        Ok(KvList {
            reader: start,
            end: r.pos(),
            len,
        })
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items in order: name and value.
    pub fn iter(&self) -> KvIter<'a> {
        KvIter {
            reader: self.reader.clone(),
            end: self.end,
        }
    }

    /// The value of the first item named `key`.
    pub fn get(&self, key: &[u8]) -> Option<Value<'a>> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// Iterates a checked [`KvList`].
#[derive(Debug, Clone)]
pub struct KvIter<'a> {
    reader: Reader<'a>,
    end: usize,
}

impl<'a> Iterator for KvIter<'a> {
    type Item = (&'a [u8], Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.reader.pos() >= self.end {
            return None;
        }
        // The list was checked when parsed: these cannot fail. Should they,
        // the iteration ends rather than panics.
        let name = self.reader.bytes("item name").ok()?;
        let value = self.reader.value().ok()?;
        Some((name, value))
    }
}

/// Appends one key/value item.
pub fn encode_kv(key: &[u8], value: &Value<'_>, out: &mut Vec<u8>) {
    encode_bytes(key, out);
    value.encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: Value<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        v.encode(&mut out);
        out
    }

    fn dec(b: &[u8]) -> Result<Value<'_>, SpopError> {
        let mut r = Reader::new(b, 0, 1 << 20);
        let v = r.value()?;
        assert!(r.is_empty(), "left over bytes in {b:?}");
        Ok(v)
    }

    /// Byte vectors from doc/SPOE.txt §3.1 and spoe.h, written by hand.
    #[test]
    fn each_type_has_the_documented_bytes() {
        let cases: Vec<(Value<'_>, Vec<u8>)> = vec![
            (Value::Null, vec![0x00]),
            (Value::Bool(false), vec![0x01]),
            (Value::Bool(true), vec![0x11]),
            (Value::Int32(5), vec![0x02, 0x05]),
            // -1 is 2^64-1: FF (0xF0 | 15); then (2^64-1-240)>>4 = 0x0FFF..FFF0
            // gives F0 (0x80 | 0x70); each later step (v-128)>>7 gives FE;
            // the last, 14, has no high bit.
            (
                Value::Int32(-1),
                vec![
                    0x02, 0xFF, 0xF0, 0xFE, 0xFE, 0xFE, 0xFE, 0xFE, 0xFE, 0xFE, 0x0E,
                ],
            ),
            (Value::Uint32(16380), vec![0x03, 0xFC, 0xF0, 0x06]),
            (Value::Int64(443), vec![0x04, 0xFB, 0x0C]),
            (Value::Uint64(0), vec![0x05, 0x00]),
            (
                Value::Ipv4(Ipv4Addr::new(192, 0, 2, 7)),
                vec![0x06, 192, 0, 2, 7],
            ),
            (
                Value::Ipv6("2001:db8::1".parse().unwrap()),
                vec![
                    0x07, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                ],
            ),
            (Value::String(b"GET"), vec![0x08, 0x03, b'G', b'E', b'T']),
            (Value::String(b""), vec![0x08, 0x00]),
            (Value::Binary(&[0xFF, 0x00]), vec![0x09, 0x02, 0xFF, 0x00]),
        ];
        for (v, bytes) in cases {
            assert_eq!(enc(v), bytes, "{v:?}");
            assert_eq!(dec(&bytes).unwrap(), v, "{bytes:?}");
        }
        // 443 by hand: 0xF0 | (443 & 15 = 11) = 0xFB, then (443 - 240) >> 4
        // = 12; decoding adds 0xFB + (12 << 4) = 251 + 192 = 443.
    }

    #[test]
    fn flags_on_other_types_are_ignored_as_haproxy_does() {
        // HAProxy switches on `type & 0x0F`; only BOOL reads the flags.
        assert_eq!(dec(&[0x88, 0x01, b'x']).unwrap(), Value::String(b"x"));
        assert_eq!(dec(&[0x21]).unwrap(), Value::Bool(false));
    }

    #[test]
    fn bad_values_name_their_offset() {
        let err = |b: &[u8]| {
            let mut r = Reader::new(b, 1, 8);
            let e = r.value().unwrap_err();
            (e.offset(), format!("{:?}", e.kind()))
        };
        // Offsets count from the start of the frame; the value starts at 1.
        assert_eq!(err(&[0xAA, 0x0A]), (Some(1), "UnknownDataType(10)".into()));
        assert_eq!(
            err(&[0xAA, 0x08, 0x05, b'a']),
            (Some(2), "Truncated { what: \"STRING\" }".into())
        );
        assert_eq!(
            err(&[0xAA, 0x08, 0x09]).1,
            "StringTooLong { len: 9, max: 8 }"
        );
        assert_eq!(err(&[0xAA, 0x06, 1, 2, 3]).0, Some(2));
        assert_eq!(
            err(&[0xAA, 0x04, 0xFF, 0xFF]).1,
            "Truncated { what: \"INT64\" }"
        );
        assert_eq!(
            err(&[0xAA, 0x04, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]).1,
            "BadVarint"
        );
        // UINT32 above 2^32-1.
        let mut b = vec![0xAA, 0x03];
        varint::encode(1 << 32, &mut b);
        assert_eq!(err(&b).1, "IntRange { data_type: 3 }");
        assert_eq!(err(&[0xAA]).1, "Truncated { what: \"typed data\" }");
    }

    #[test]
    fn kv_lists_are_checked_once_then_iterated() {
        let mut b = vec![0xAA];
        encode_kv(b"status-code", &Value::Uint32(3), &mut b);
        encode_kv(b"message", &Value::String(b"frame is too big"), &mut b);
        let mut r = Reader::new(&b, 1, 1024);
        let kv = KvList::parse(&mut r, None).unwrap();
        assert!(r.is_empty());
        assert_eq!(kv.len(), 2);
        assert_eq!(kv.get(b"status-code"), Some(Value::Uint32(3)));
        assert_eq!(
            kv.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec![&b"status-code"[..], b"message"]
        );
        // Cut the last byte: the list is refused where its last item starts
        // its string body.
        let mut r = Reader::new(&b[..b.len() - 1], 1, 1024);
        let e = KvList::parse(&mut r, None).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Truncated { what: "STRING" }));
        assert_eq!(e.offset(), Some(1 + 12 + 2 + 8 + 1));
    }

    #[test]
    fn random_values_round_trip() {
        let mut s = 0x1234_5678_9ABC_DEF1u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let blob: Vec<u8> = (0..600).map(|i| (i * 7) as u8).collect();
        for _ in 0..5_000 {
            let r = next();
            let len = (next() % 600) as usize;
            let v = match r % 10 {
                0 => Value::Null,
                1 => Value::Bool(r & 16 != 0),
                2 => Value::Int32((next() >> 32) as i32),
                3 => Value::Uint32((next() >> 32) as u32),
                4 => Value::Int64(next() as i64 >> (r % 64)),
                5 => Value::Uint64(next() >> (r % 64)),
                6 => Value::Ipv4(Ipv4Addr::from((next() >> 32) as u32)),
                7 => Value::Ipv6(Ipv6Addr::from(
                    u128::from(next()) << 64 | u128::from(next()),
                )),
                8 => Value::String(&blob[..len]),
                _ => Value::Binary(&blob[..len]),
            };
            let b = enc(v);
            assert_eq!(dec(&b).unwrap(), v);
            // Every strict prefix is refused as truncated, never misread.
            for cut in 0..b.len() {
                let mut r = Reader::new(&b[..cut], 0, 1 << 20);
                assert!(r.value().is_err(), "{v:?} cut at {cut}");
            }
        }
    }
}
