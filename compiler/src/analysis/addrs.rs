//! Addresses and ports for witnesses: prefix ranges intersected and
//! subtracted, a port that port literals agree with.

use crate::cidr::PrefixSet;
use crate::ir::Proto;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A port for the protocol that every port literal agrees with (ICMP has
/// none: port 0).
pub(crate) fn pick_port(p: Proto, lits: &[(&Vec<(u16, u16)>, bool)]) -> Option<u16> {
    let ok = |x: u16| {
        lits.iter()
            .all(|(r, neg)| r.iter().any(|&(a, b)| (a..=b).contains(&x)) != *neg)
    };
    if p == Proto::Icmp {
        return ok(0).then_some(0);
    }
    // Candidates: the preferred ports, then every range's ends and the
    // ports just past them (the set's boundaries are all that can matter).
    let mut cands = vec![443u16, 80];
    for (r, _) in lits {
        for &(a, b) in r.iter() {
            cands.extend([a, b, a.wrapping_sub(1), b.wrapping_add(1)]);
        }
    }
    cands.push(1);
    cands.into_iter().find(|&x| ok(x))
}

/// Sorted, disjoint, inclusive ranges.
type Ranges = Vec<(u128, u128)>;

fn intersect(a: &Ranges, b: &Ranges) -> Ranges {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if s <= e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

fn subtract(a: &Ranges, b: &Ranges) -> Ranges {
    let mut out = Vec::new();
    for &(mut s, e) in a {
        let mut open = true;
        for &(bs, be) in b.iter().filter(|r| r.0 <= e) {
            if be < s {
                continue;
            }
            if bs > s {
                out.push((s, bs - 1));
            }
            if be >= e {
                open = false;
                break;
            }
            s = be + 1;
        }
        if open {
            out.push((s, e));
        }
    }
    out
}

/// An address of the family in every positive set and no negative one.
pub(crate) fn pick_addr(lits: &[(&PrefixSet, bool)], v6: bool) -> Option<IpAddr> {
    let max = if v6 { u128::MAX } else { u128::from(u32::MAX) };
    let mut r: Ranges = vec![(0, max)];
    if v6 {
        // ::ffff:0:0/96 is looked up as IPv4.
        r = subtract(&r, &vec![(0xffff_0000_0000, 0xffff_ffff_ffff)]);
    }
    for (set, neg) in lits {
        let (r4, r6) = set.ranges();
        let s = if v6 { r6 } else { r4 };
        r = if *neg {
            subtract(&r, &s)
        } else {
            intersect(&r, &s)
        };
    }
    let preferred: u128 = if v6 {
        u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))
    } else {
        u128::from(u32::from(Ipv4Addr::new(192, 0, 2, 1)))
    };
    let a = if r.iter().any(|&(s, e)| (s..=e).contains(&preferred)) {
        preferred
    } else {
        let &(s, e) = r.first()?;
        // Not the network's own address, where there is a choice.
        if s < e && s % 256 == 0 {
            s + 1
        } else {
            s
        }
    };
    Some(if v6 {
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        IpAddr::V4(Ipv4Addr::from(a as u32))
    })
}

/// Whether `a` is in a sorted list of disjoint prefixes (binary search).
pub(crate) fn within<T: Copy + Into<u128>>(prefixes: &[(T, u8)], a: T, width: u32) -> bool {
    let a: u128 = a.into();
    let i = prefixes.partition_point(|&(n, _)| n.into() <= a);
    i > 0 && {
        let (n, l) = prefixes[i - 1];
        let host = width - u32::from(l);
        let last = if host >= 128 {
            u128::MAX
        } else {
            n.into() | ((1u128 << host) - 1)
        };
        a <= last
    }
}
