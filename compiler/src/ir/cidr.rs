//! IPv4/IPv6 prefix parsing and merging into minimal, sorted prefix sets:
//! ipnet's types, parsers and aggregation, kept as (network, length)
//! pairs, the form the IR, the artifact and the engine's prefix table
//! (`iptable`) use.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
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

/// Parses `a.b.c.d[/n]` or `x:y::z[/n]` with ipnet's parsers (a bare
/// address is a /32 or /128). Returns the network and whether host bits
/// were set (`10.0.0.1/8`), which is a warning, not an error.
pub fn parse_cidr(s: &str) -> Result<(Cidr, bool), CidrError> {
    let err = |r: &str| CidrError { reason: r.into() };
    let v6 = s.split('/').next().unwrap_or(s).contains(':');
    let net: IpNet = match s.split_once('/') {
        Some((addr, len)) => match s.parse::<IpNet>() {
            // ipnet takes a length with a sign; the language does not.
            Ok(n) if !len.starts_with('+') => n,
            _ if v6 && addr.parse::<Ipv6Addr>().is_err() => return Err(err("not an IPv6 address")),
            _ if !v6 && addr.parse::<Ipv4Addr>().is_err() => {
                return Err(err("not an IPv4 address"))
            }
            _ => {
                let max = if v6 { 128 } else { 32 };
                return Err(err(&format!("prefix length must be 0 to {max}")));
            }
        },
        None if v6 => IpNet::V6(Ipv6Net::from(
            s.parse::<Ipv6Addr>()
                .map_err(|_| err("not an IPv6 address"))?,
        )),
        None => IpNet::V4(Ipv4Net::from(
            s.parse::<Ipv4Addr>()
                .map_err(|_| err("not an IPv4 address"))?,
        )),
    };
    let host_bits = net.addr() != net.network();
    Ok((
        match net.trunc() {
            IpNet::V4(n) => Cidr::V4(u32::from(n.network()), n.prefix_len()),
            IpNet::V6(n) => Cidr::V6(u128::from(n.network()), n.prefix_len()),
        },
        host_bits,
    ))
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
    /// Merges any collection of prefixes (ipnet's aggregation: the fewest
    /// prefixes that cover exactly the same addresses, sorted).
    pub fn from_cidrs(cidrs: impl IntoIterator<Item = Cidr>) -> Self {
        let mut v4: Vec<Ipv4Net> = Vec::new();
        let mut v6: Vec<Ipv6Net> = Vec::new();
        for c in cidrs {
            // Networks and lengths are valid by construction (parse_cidr,
            // the artifact reader), so these never fail.
            match c {
                Cidr::V4(n, l) => v4.extend(Ipv4Net::new(Ipv4Addr::from(n), l)),
                Cidr::V6(n, l) => v6.extend(Ipv6Net::new(Ipv6Addr::from(n), l)),
            }
        }
        PrefixSet {
            v4: Ipv4Net::aggregate(&v4)
                .into_iter()
                .map(|n| (u32::from(n.network()), n.prefix_len()))
                .collect(),
            v6: Ipv6Net::aggregate(&v6)
                .into_iter()
                .map(|n| (u128::from(n.network()), n.prefix_len()))
                .collect(),
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

/// Splits inclusive ranges into the fewest aligned prefixes (`width` is
/// 32 or 128; ipnet's subnet iterators); each item is (network, prefix
/// length).
pub fn to_prefixes(ranges: Vec<(u128, u128)>, width: u32) -> Vec<(u128, u8)> {
    let mut out = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        if width == 32 {
            let (s, e) = (Ipv4Addr::from(s as u32), Ipv4Addr::from(e as u32));
            out.extend(
                ipnet::Ipv4Subnets::new(s, e, 0)
                    .map(|n| (u128::from(u32::from(n.network())), n.prefix_len())),
            );
        } else {
            let (s, e) = (Ipv6Addr::from(s), Ipv6Addr::from(e));
            out.extend(
                ipnet::Ipv6Subnets::new(s, e, 0).map(|n| (u128::from(n.network()), n.prefix_len())),
            );
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
        assert_eq!(
            parse_cidr("10.0.0.0/08").unwrap().0,
            Cidr::V4(0x0a00_0000, 8)
        );
        assert_eq!(
            parse_cidr("::ffff:1.2.3.4").unwrap(),
            (Cidr::V6(0xffff_0102_0304, 128), false)
        );
        for (bad, why) in [
            ("10.0.0.0/33", "prefix length must be 0 to 32"),
            ("::/129", "prefix length must be 0 to 128"),
            ("10.0.0/8", "not an IPv4 address"),
            ("2001:db8::g/32", "not an IPv6 address"),
            ("10.0.0.0/", "prefix length must be 0 to 32"),
        ] {
            assert_eq!(parse_cidr(bad).unwrap_err().reason, why, "{bad}");
        }
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
        assert_eq!(
            to_prefixes(vec![(0x0a00_0001, 0x0a00_0006)], 32),
            vec![
                (0x0a00_0001, 32),
                (0x0a00_0002, 31),
                (0x0a00_0004, 31),
                (0x0a00_0006, 32)
            ]
        );
        assert_eq!(to_prefixes(vec![(0, u128::MAX)], 128), vec![(0, 0)]);
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
