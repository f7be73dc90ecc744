//! IPv4/IPv6 prefix parsing and merging into minimal, sorted prefix sets.

use serde::Serialize;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A parsed CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cidr {
    /// IPv4 network (address with host bits cleared) and prefix length.
    V4(u32, u8),
    /// IPv6 network and prefix length.
    V6(u128, u8),
}

/// Why a CIDR did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError {
    /// What is wrong, for the diagnostic label.
    pub reason: String,
}

/// Parses `a.b.c.d[/n]` or `x:y::z[/n]`. Returns the network and whether
/// host bits were set (`10.0.0.1/8`), which is a warning, not an error.
pub fn parse_cidr(s: &str) -> Result<(Cidr, bool), CidrError> {
    let err = |r: &str| CidrError { reason: r.into() };
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let parse_len = |l: &str, max: u8| -> Result<u8, CidrError> {
        match l.parse::<u8>() {
            Ok(n) if n <= max && !l.starts_with('+') => Ok(n),
            _ => Err(err(&format!("prefix length must be 0 to {max}"))),
        }
    };
    if addr.contains(':') {
        let a: Ipv6Addr = addr.parse().map_err(|_| err("not an IPv6 address"))?;
        let len = len.map_or(Ok(128), |l| parse_len(l, 128))?;
        let bits = u128::from(a);
        let net = bits & mask128(len);
        Ok((Cidr::V6(net, len), net != bits))
    } else {
        let a: Ipv4Addr = addr.parse().map_err(|_| err("not an IPv4 address"))?;
        let len = len.map_or(Ok(32), |l| parse_len(l, 32))?;
        let bits = u32::from(a);
        let net = bits & (mask128(len + 96) as u32);
        Ok((Cidr::V4(net, len), net != bits))
    }
}

fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// Sorted, disjoint, inclusive address ranges.
pub type Ranges = Vec<(u128, u128)>;

/// A set of prefixes, merged: no prefix overlaps or is adjacent to another
/// that it could be combined with, and both lists are sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct PrefixSet {
    /// IPv4 (network, length), sorted by network.
    pub v4: Vec<(u32, u8)>,
    /// IPv6 (network, length), sorted by network.
    pub v6: Vec<(u128, u8)>,
}

impl PrefixSet {
    /// Merges any collection of prefixes.
    pub fn from_cidrs(cidrs: impl IntoIterator<Item = Cidr>) -> Self {
        let mut r4: Vec<(u128, u128)> = Vec::new();
        let mut r6: Vec<(u128, u128)> = Vec::new();
        for c in cidrs {
            match c {
                Cidr::V4(n, l) => r4.push(range(u128::from(n), l, 32)),
                Cidr::V6(n, l) => r6.push(range(n, l, 128)),
            }
        }
        PrefixSet {
            v4: to_prefixes(merge_ranges(r4), 32)
                .into_iter()
                .map(|(n, l)| (n as u32, l))
                .collect(),
            v6: to_prefixes(merge_ranges(r6), 128),
        }
    }

    /// Number of prefixes after merging.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Whether the set holds no address.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inclusive address ranges, IPv4 then IPv6, each sorted and disjoint.
    pub fn ranges(&self) -> (Ranges, Ranges) {
        (
            self.v4
                .iter()
                .map(|&(n, l)| range(u128::from(n), l, 32))
                .collect(),
            self.v6.iter().map(|&(n, l)| range(n, l, 128)).collect(),
        )
    }

    /// Whether every address of `self` is in `other`.
    pub fn is_subset_of(&self, other: &PrefixSet) -> bool {
        let (a4, a6) = self.ranges();
        let (b4, b6) = other.ranges();
        subset(&a4, &b4) && subset(&a6, &b6)
    }

    /// Whether `self` and `other` share an address.
    pub fn intersects(&self, other: &PrefixSet) -> bool {
        let (a4, a6) = self.ranges();
        let (b4, b6) = other.ranges();
        overlap(&a4, &b4) || overlap(&a6, &b6)
    }

    /// Whether an address is in the set (linear in the set; for analysis
    /// and tests, not the data plane).
    pub fn contains_v4(&self, a: u32) -> bool {
        self.v4.iter().any(|&(n, l)| {
            let (s, e) = range(u128::from(n), l, 32);
            (s..=e).contains(&u128::from(a))
        })
    }

    /// Whether an IPv6 address is in the set.
    pub fn contains_v6(&self, a: u128) -> bool {
        self.v6.iter().any(|&(n, l)| {
            let (s, e) = range(n, l, 128);
            (s..=e).contains(&a)
        })
    }
}

fn range(net: u128, len: u8, width: u32) -> (u128, u128) {
    let host = width - u32::from(len);
    let size_minus_one = if host >= 128 {
        u128::MAX
    } else {
        (1u128 << host) - 1
    };
    (net, net | size_minus_one)
}

fn merge_ranges(mut r: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    r.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(r.len());
    for (s, e) in r {
        if let Some(last) = out.last_mut() {
            if s <= last.1.saturating_add(1) {
                last.1 = last.1.max(e);
                continue;
            }
        }
        out.push((s, e));
    }
    out
}

/// Splits inclusive ranges into the fewest aligned prefixes (`width` is
/// 32 or 128); each item is (network, prefix length).
pub fn to_prefixes(ranges: Vec<(u128, u128)>, width: u32) -> Vec<(u128, u8)> {
    let mut out = Vec::with_capacity(ranges.len());
    for (mut s, e) in ranges {
        loop {
            // The largest block aligned at `s` that ends at or before `e`.
            let align = if s == 0 {
                width
            } else {
                s.trailing_zeros().min(width)
            };
            let mut host = align;
            while host > 0 {
                let last = if host >= 128 {
                    u128::MAX
                } else {
                    s | ((1u128 << host) - 1)
                };
                if last <= e {
                    break;
                }
                host -= 1;
            }
            out.push((s, (width - host) as u8));
            let last = if host >= 128 {
                u128::MAX
            } else {
                s | ((1u128 << host) - 1)
            };
            if last >= e {
                break;
            }
            s = last + 1;
        }
    }
    out
}

fn subset(a: &[(u128, u128)], b: &[(u128, u128)]) -> bool {
    let mut j = 0;
    for &(s, e) in a {
        while j < b.len() && b[j].1 < s {
            j += 1;
        }
        if j == b.len() || b[j].0 > s || b[j].1 < e {
            return false;
        }
    }
    true
}

fn overlap(a: &[(u128, u128)], b: &[(u128, u128)]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].1 < b[j].0 {
            i += 1;
        } else if b[j].1 < a[i].0 {
            j += 1;
        } else {
            return true;
        }
    }
    false
}

/// Formats an IPv4 prefix.
pub fn fmt_v4(n: u32, l: u8) -> String {
    format!("{}/{}", Ipv4Addr::from(n), l)
}

/// Formats an IPv6 prefix.
pub fn fmt_v6(n: u128, l: u8) -> String {
    format!("{}/{}", Ipv6Addr::from(n), l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> PrefixSet {
        PrefixSet::from_cidrs(items.iter().map(|s| parse_cidr(s).unwrap().0))
    }

    #[test]
    fn parses_and_flags_host_bits() {
        assert_eq!(
            parse_cidr("10.0.0.0/8").unwrap(),
            (Cidr::V4(0x0a00_0000, 8), false)
        );
        assert_eq!(
            parse_cidr("10.1.2.3/8").unwrap(),
            (Cidr::V4(0x0a00_0000, 8), true)
        );
        assert_eq!(
            parse_cidr("192.0.2.7").unwrap(),
            (Cidr::V4(0xc000_0207, 32), false)
        );
        assert!(matches!(
            parse_cidr("2001:db8::1/32").unwrap(),
            (Cidr::V6(_, 32), true)
        ));
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("10.0.0.300/8").is_err());
        assert!(parse_cidr("::/129").is_err());
        assert!(parse_cidr("10.0.0.0/+8").is_err());
        assert!(parse_cidr("bogus").is_err());
    }

    #[test]
    fn merges_overlapping_and_adjacent() {
        let s = set(&[
            "10.0.0.0/25",
            "10.0.0.128/25",
            "10.0.0.5/32",
            "10.0.1.0/24",
            "192.0.2.0/24",
        ]);
        assert_eq!(
            s.v4.iter().map(|&(n, l)| fmt_v4(n, l)).collect::<Vec<_>>(),
            vec!["10.0.0.0/23", "192.0.2.0/24"]
        );
        let s = set(&["2001:db8::/33", "2001:db8:8000::/33", "::/0"]);
        assert_eq!(s.v6, vec![(0, 0)]);
        let s = set(&["0.0.0.0/0", "255.255.255.255/32"]);
        assert_eq!(s.v4, vec![(0, 0)]);
    }

    #[test]
    fn unaligned_ranges_split_minimally() {
        // 10.0.0.1 - 10.0.0.6: .1/32 .2/31 .4/31 .6/32
        let s = set(&["10.0.0.1", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6"]);
        assert_eq!(s.v4.len(), 4);
        assert!(s.contains_v4(0x0a00_0006) && !s.contains_v4(0x0a00_0007));
    }

    #[test]
    fn subset_and_overlap() {
        let big = set(&["10.0.0.0/8", "2001:db8::/32"]);
        let small = set(&["10.1.0.0/16"]);
        let other = set(&["11.0.0.0/8"]);
        assert!(small.is_subset_of(&big));
        assert!(!big.is_subset_of(&small));
        assert!(small.intersects(&big));
        assert!(!other.intersects(&big));
    }
}
