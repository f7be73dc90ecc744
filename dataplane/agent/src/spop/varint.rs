//! HAProxy's variable-length integers (the "peers" encoding SPOP uses for
//! stream ids, frame ids, integers and lengths).
//!
//! A value below 240 is one byte. Above, the first byte is `0xF0 | (v &
//! 0x0F)` and carries 4 bits; each following byte carries 7 bits and has
//! its high bit set while more follow:
//!
//! | value range | bytes |
//! |---|---|
//! | 0 ..= 239 | 1 |
//! | 240 ..= 2,287 | 2 |
//! | 2,288 ..= 264,431 | 3 |
//! | 264,432 ..= 33,818,863 | 4 |
//! | 33,818,864 ..= 4,328,786,159 | 5 |
//!
//! This is `encode_varint`/`decode_varint` of HAProxy's
//! `include/haproxy/intops.h`: the decoder adds each byte, high bit
//! included, shifted by 4, 11, 18, ... bits; the encoder subtracts what
//! each byte will add. Every value has exactly one encoding. A `u64`
//! needs at most [`MAX_LEN`] bytes; longer runs of continuation bytes, or
//! values past `u64::MAX`, are refused (HAProxy's C code would shift past
//! 64 bits there).

/// The longest encoding of a `u64` (`u64::MAX` takes 10 bytes).
pub const MAX_LEN: usize = 10;

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The buffer ends inside the varint.
    Truncated,
    /// The varint is longer than any `u64` needs or exceeds `u64::MAX`.
    Overflow,
}

/// Appends the encoding of `v` to `out`.
pub fn encode(mut v: u64, out: &mut Vec<u8>) {
    if v < 240 {
        out.push(v as u8);
        return;
    }
    out.push((v as u8) | 0xF0);
    v = (v - 240) >> 4;
    while v >= 128 {
        out.push((v as u8) | 0x80);
        v = (v - 128) >> 7;
    }
    out.push(v as u8);
}

/// The number of bytes [`encode`] writes for `v`.
pub fn encoded_len(v: u64) -> usize {
    if v < 240 {
        return 1;
    }
    let mut n = 2;
    let mut v = (v - 240) >> 4;
    while v >= 128 {
        v = (v - 128) >> 7;
        n += 1;
    }
    n
}

/// Reads one varint at the start of `buf`: the value and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<(u64, usize), VarintError> {
    let first = *buf.first().ok_or(VarintError::Truncated)?;
    if first < 240 {
        return Ok((u64::from(first), 1));
    }
    let mut value = u128::from(first);
    let mut shift = 4u32;
    let mut i = 1;
    loop {
        let b = *buf.get(i).ok_or(VarintError::Truncated)?;
        i += 1;
        value += u128::from(b) << shift;
        if value > u128::from(u64::MAX) {
            return Err(VarintError::Overflow);
        }
        if b < 128 {
            break;
        }
        if i >= MAX_LEN {
            return Err(VarintError::Overflow);
        }
        shift += 7;
    }
    Ok((value as u64, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode(v, &mut out);
        out
    }

    /// Worked by hand from the layout in doc/SPOE.txt §3.1 and the
    /// arithmetic of intops.h: 240 = F0 00; 256 = F0 01 (240 + 1<<4);
    /// 2287 = FF 7F (255 + 127<<4); 2288 = F0 80 00 (240 + 128<<4).
    #[test]
    fn encodings_match_the_documented_layout_at_every_boundary() {
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(239), [0xEF]);
        assert_eq!(enc(240), [0xF0, 0x00]);
        assert_eq!(enc(255), [0xFF, 0x00]);
        assert_eq!(enc(256), [0xF0, 0x01]);
        assert_eq!(enc(2287), [0xFF, 0x7F]);
        assert_eq!(enc(2288), [0xF0, 0x80, 0x00]);
        assert_eq!(enc(264_431), [0xFF, 0xFF, 0x7F]);
        assert_eq!(enc(264_432), [0xF0, 0x80, 0x80, 0x00]);
        assert_eq!(enc(33_818_863).len(), 4);
        assert_eq!(enc(33_818_864).len(), 5);
        assert_eq!(enc(4_328_786_159).len(), 5);
        assert_eq!(enc(4_328_786_160).len(), 6);
        // 16380, HAProxy's default max-frame-size (tune.bufsize - 4):
        // 16380 = 0xF0|0xC + ((16380-240)>>4 = 1008 -> 0x80|0xF0, (1008-128)>>7 = 6).
        assert_eq!(enc(16380), [0xFC, 0xF0, 0x06]);
        assert_eq!(enc(u64::MAX).len(), MAX_LEN);
    }

    #[test]
    fn decoding_inverts_encoding_and_reports_the_length() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut values = vec![0, 1, 239, 240, 2287, 2288, u64::MAX, u64::MAX - 1];
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            values.push(rng >> (rng % 64));
        }
        for v in values {
            let mut buf = enc(v);
            assert_eq!(buf.len(), encoded_len(v), "{v}");
            buf.push(0xAA); // trailing bytes are not read
            assert_eq!(decode(&buf), Ok((v, buf.len() - 1)), "{v}");
        }
    }

    #[test]
    fn truncated_and_overlong_varints_are_refused() {
        assert_eq!(decode(&[]), Err(VarintError::Truncated));
        assert_eq!(decode(&[0xF0]), Err(VarintError::Truncated));
        assert_eq!(decode(&[0xF0, 0x80]), Err(VarintError::Truncated));
        // Continuation bytes forever: refused at 10 bytes, not read on.
        assert_eq!(decode(&[0xFF; 64]), Err(VarintError::Overflow));
        // u64::MAX + 1: the same length as u64::MAX, one more.
        let mut max = enc(u64::MAX);
        assert_eq!(decode(&max), Ok((u64::MAX, MAX_LEN)));
        let last = max.len() - 1;
        assert!(max[last] < 0x7F);
        max[last] += 1;
        assert_eq!(decode(&max), Err(VarintError::Overflow));
    }
}
