//! Searches for a byte or two in a log line. Most fields of a line (an
//! address, a time, a status, a JSON key) end within a few dozen bytes,
//! where a call to memchr costs more than the search: the first
//! [`SHORT`] bytes are tested eight at a time in a word (the zero-byte
//! test of Mycroft's `haszero`), and only a longer search goes to memchr.

/// Bytes tested a word at a time before memchr takes over.
const SHORT: usize = 32;

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The high bit of each zero byte of `x`, and perhaps of bytes above the
/// first zero byte (a borrow sets bits only above a zero byte, never
/// below one): the lowest bit set is at the first zero byte.
#[inline]
fn zeros(x: u64) -> u64 {
    x.wrapping_sub(LO) & !x & HI
}

/// The first place in `hay` that `hit` finds in a word (eight bytes), over
/// the first [`SHORT`] bytes; `far` searches the rest, and `near` tests
/// the bytes of a shorter `hay` left over after its last whole word.
#[inline]
fn find_with(
    hay: &[u8],
    hit: impl Fn(u64) -> u64,
    near: impl Fn(u8) -> bool,
    far: impl FnOnce(&[u8]) -> Option<usize>,
) -> Option<usize> {
    let mut at = 0;
    while let Some(w) = hay.get(at..at + 8) {
        let mut word = [0; 8];
        word.copy_from_slice(w);
        let z = hit(u64::from_le_bytes(word));
        if z != 0 {
            return Some(at + (z.trailing_zeros() / 8) as usize);
        }
        at += 8;
        if at == SHORT {
            return far(&hay[at..]).map(|i| at + i);
        }
    }
    hay[at..].iter().position(|&c| near(c)).map(|i| at + i)
}

/// The first `b` in `hay`.
#[inline]
pub fn find_byte(hay: &[u8], b: u8) -> Option<usize> {
    let pattern = LO * u64::from(b);
    find_with(
        hay,
        |w| zeros(w ^ pattern),
        |c| c == b,
        |rest| memchr::memchr(b, rest),
    )
}

/// The first `a` or `b` in `hay`.
#[inline]
pub fn find_either(hay: &[u8], a: u8, b: u8) -> Option<usize> {
    let (pa, pb) = (LO * u64::from(a), LO * u64::from(b));
    // The lowest bit of either mask is exact for its byte, so the lowest
    // of both is the first of either byte.
    find_with(
        hay,
        |w| zeros(w ^ pa) | zeros(w ^ pb),
        |c| c == a || c == b,
        |rest| memchr::memchr2(a, b, rest),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time search finds what a byte loop finds, at every
    /// length and place, for bytes whose neighbours borrow (0x00, 0x01,
    /// 0x80, 0xff), and past the words it tests.
    #[test]
    fn find_byte_agrees_with_a_byte_loop() {
        for b in [0u8, 1, b' ', b'"', 0x7f, 0x80, 0x81, 0xff] {
            for len in 0..80 {
                for filler in [0u8, 1, b.wrapping_add(1), b.wrapping_sub(1), 0xff] {
                    if filler == b {
                        continue;
                    }
                    let mut hay = vec![filler; len];
                    assert_eq!(find_byte(&hay, b), None, "{b} {len} {filler}");
                    for at in 0..len {
                        hay.fill(filler);
                        hay[at] = b;
                        if at + 3 < len {
                            hay[at + 3] = b;
                        }
                        assert_eq!(find_byte(&hay, b), Some(at), "{b} {len} {filler} {at}");
                    }
                }
            }
        }
    }

    /// Either of two bytes: the first of them, wherever each falls.
    #[test]
    fn find_either_agrees_with_a_byte_loop() {
        for len in 0..80 {
            for i in 0..=len {
                for j in 0..=len {
                    let mut hay = vec![b'a'; len];
                    if i < len {
                        hay[i] = b'"';
                    }
                    if j < len {
                        hay[j] = b'\\';
                    }
                    let want = hay.iter().position(|&c| c == b'"' || c == b'\\');
                    assert_eq!(find_either(&hay, b'"', b'\\'), want, "{len} {i} {j}");
                }
            }
        }
    }
}
