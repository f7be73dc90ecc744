//! The hash a limiter stores its keys as: SipHash-1-3 (what the standard
//! library's `RandomState` computes) under a random 128-bit key of the
//! limiter's own, which, unlike `RandomState`'s, can be saved with the
//! buckets and given back after a restart, so that a key finds its bucket
//! again. Clients cannot aim collisions at each other without the key.

/// A keyed SipHash-1-3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl KeyHasher {
    /// A fresh random key (from the standard library's random source).
    pub(crate) fn random() -> KeyHasher {
        use std::hash::BuildHasher as _;
        let s = std::hash::RandomState::new();
        let k0 = s.hash_one(0x5f3759df_u64);
        let k1 = std::hash::RandomState::new().hash_one(k0);
        KeyHasher { k0, k1 }
    }

    /// The hasher under key (`k0`, `k1`).
    pub(crate) fn with_keys(k0: u64, k1: u64) -> KeyHasher {
        KeyHasher { k0, k1 }
    }

    /// Its key.
    pub(crate) fn keys(&self) -> (u64, u64) {
        (self.k0, self.k1)
    }

    /// The hash of `bytes`.
    #[inline]
    pub(crate) fn hash(&self, bytes: &[u8]) -> u64 {
        sip13(self.k0, self.k1, bytes)
    }
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash-1-3 (one compression round, three finalisation rounds) of
/// `m` under (`k0`, `k1`).
fn sip13(k0: u64, k1: u64, m: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = m.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        v[3] ^= w;
        round(&mut v);
        v[0] ^= w;
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    let last = u64::from_le_bytes(tail) | ((m.len() as u64 & 0xff) << 56);
    v[3] ^= last;
    round(&mut v);
    v[0] ^= last;
    v[2] ^= 0xff;
    round(&mut v);
    round(&mut v);
    round(&mut v);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_the_standard_librarys_siphash_1_3() {
        // DefaultHasher::new() is SipHash-1-3 under the key (0, 0); its
        // `write` of raw bytes is the message as it is.
        use std::hash::Hasher as _;
        for len in 0..40usize {
            let m: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            h.write(&m);
            assert_eq!(sip13(0, 0, &m), h.finish(), "length {len}");
        }
    }

    #[test]
    fn keys_change_the_hash_and_are_kept() {
        let a = KeyHasher::with_keys(1, 2);
        let b = KeyHasher::with_keys(2, 1);
        assert_ne!(a.hash(b"203.0.113.7"), b.hash(b"203.0.113.7"));
        assert_eq!(KeyHasher::with_keys(1, 2).hash(b"x"), a.hash(b"x"));
        let r = KeyHasher::random();
        let (k0, k1) = r.keys();
        assert_eq!(KeyHasher::with_keys(k0, k1), r);
        assert_ne!(KeyHasher::random(), r, "two random keys");
    }
}
