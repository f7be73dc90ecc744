//! Client addresses as logs write them: one address (IPv4 or IPv6,
//! perhaps in brackets), or a list of hops of which the client is the
//! first untrusted one from the right.

use std::net::IpAddr;

/// Whether `ip` is in the network `net`/`len` (never across families).
fn in_prefix(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len.min(32)))
            };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len.min(128)))
            };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

/// Parses an address written as text (IPv6 perhaps in brackets).
pub fn parse_ip(v: &[u8]) -> Option<IpAddr> {
    let v = v
        .strip_prefix(b"[")
        .and_then(|v| v.strip_suffix(b"]"))
        .unwrap_or(v);
    if v.is_empty() || v.len() > 45 {
        return None;
    }
    if let Some(a) = dotted_quad(v) {
        return Some(IpAddr::V4(a));
    }
    let ip: IpAddr = match hex_groups(v) {
        Some(a) => IpAddr::V6(a),
        None => std::str::from_utf8(v).ok()?.parse().ok()?,
    };
    // An IPv4-mapped address is the IPv4 client it carries.
    Some(match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

/// The common case of an address, read without the standard parser's
/// UTF-8 check and generality: four decimal octets of one to three
/// digits, no leading zero, each at most 255 (what the standard parser
/// accepts as IPv4). Anything else is `None`, and left to it.
fn dotted_quad(v: &[u8]) -> Option<std::net::Ipv4Addr> {
    // One pass: each octet one to three digits, no leading zero, at most
    // 255, three dots between four octets.
    if v.len() < 7 || v.len() > 15 {
        return None;
    }
    let mut octets = [0u8; 4];
    let (mut k, mut n, mut len) = (0usize, 0u32, 0u32);
    for &b in v {
        if b == b'.' {
            if len == 0 || k == 3 {
                return None;
            }
            octets[k] = n as u8;
            (k, n, len) = (k + 1, 0, 0);
        } else {
            let d = b.wrapping_sub(b'0');
            if d > 9 || (len == 1 && n == 0) {
                return None;
            }
            n = n * 10 + u32::from(d);
            len += 1;
            if n > 255 {
                return None;
            }
        }
    }
    if len == 0 || k != 3 {
        return None;
    }
    octets[3] = n as u8;
    Some(octets.into())
}

/// The common case of an IPv6 address, read without the standard
/// parser's UTF-8 check and generality: groups of one to four hex digits
/// split by colons, eight of them or fewer around one `::`. Anything
/// else (an embedded IPv4 address, a zone) is `None`, and left to it.
fn hex_groups(v: &[u8]) -> Option<std::net::Ipv6Addr> {
    let mut groups = [0u16; 8];
    let (mut n, mut gap, mut i) = (0, None, 0);
    if v.starts_with(b"::") {
        gap = Some(0);
        i = 2;
    }
    while i < v.len() {
        // A group: one to four hex digits.
        let (start, mut x) = (i, 0u32);
        while let Some(d) = v.get(i).and_then(|&b| (b as char).to_digit(16)) {
            if i - start == 4 {
                return None;
            }
            x = x << 4 | d;
            i += 1;
        }
        if i == start || n == 8 {
            return None;
        }
        groups[n] = x as u16;
        n += 1;
        if i == v.len() {
            break;
        }
        // Then `:` and another group, or `::` and the groups after the
        // gap (perhaps none).
        if v[i] != b':' || i + 1 == v.len() {
            return None;
        }
        i += 1;
        if v[i] == b':' {
            if gap.is_some() {
                return None;
            }
            gap = Some(n);
            i += 1;
        }
    }
    match gap {
        None if n == 8 => {}
        Some(g) if n <= 7 => {
            let tail = n - g;
            groups.copy_within(g..n, 8 - tail);
            groups[g..8 - tail].fill(0);
        }
        _ => return None,
    }
    Some(groups.into())
}

/// The client in a list of hops (`X-Forwarded-For: client, proxy1,
/// proxy2`): from the right, the first address that is not a trusted
/// proxy. Everything left of that hop was written by whoever sent the
/// request, so a hop that is not an address (garbage, `unknown`, an
/// obfuscated name) ends the walk with no client: skipping it would take
/// an address the client chose. A hop may carry a port (`1.2.3.4:5678`,
/// `[2001:db8::1]:443`), as some load balancers append it.
pub(crate) fn client_hop(list: &[u8], trusted: &[(IpAddr, u8)]) -> Option<IpAddr> {
    for hop in list.rsplit(|&b| b == b',') {
        let ip = hop_address(hop.trim_ascii())?;
        if !trusted.iter().any(|&p| in_prefix(ip, p)) {
            return Some(ip);
        }
    }
    None
}

/// One hop's address, with or without a port.
fn hop_address(hop: &[u8]) -> Option<IpAddr> {
    if let Some(ip) = parse_ip(hop) {
        return Some(ip);
    }
    let i = hop.iter().rposition(|&b| b == b':')?;
    let (host, port) = (&hop[..i], &hop[i + 1..]);
    parse_port(port)?;
    match host.first() {
        // `[v6]:port`, or `v4:port` (a bare v6 address has several colons
        // and parsed above).
        Some(b'[') => parse_ip(host),
        _ => dotted_quad(host).map(IpAddr::V4),
    }
}

/// A port: one to five decimal digits, at most 65535.
pub(crate) fn parse_port(v: &[u8]) -> Option<u16> {
    if v.is_empty() || v.len() > 5 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_hop_is_the_first_untrusted_address_from_the_right() {
        let trusted = [("10.0.0.0".parse().unwrap(), 8)];
        for (list, client) in [
            ("198.51.100.7, 10.1.2.3", Some("198.51.100.7")),
            ("203.0.113.9, 198.51.100.7", Some("198.51.100.7")),
            // A port on a hop is the hop's, not a reason to skip it:
            // skipping would take the address the client wrote on its left.
            (
                "91.198.174.200, 185.220.101.33:41234, 10.0.0.1",
                Some("185.220.101.33"),
            ),
            ("91.198.174.200, [2001:db8::1]:443", Some("2001:db8::1")),
            ("2001:db8::2", Some("2001:db8::2")),
            // A hop that is no address ends the walk: no client, not a
            // guess.
            ("91.198.174.200, unknown, 10.0.0.1", None),
            ("91.198.174.200, 1.2.3.4:99999", None),
            ("10.0.0.1, 10.0.0.2", None),
            ("", None),
        ] {
            let got = client_hop(list.as_bytes(), &trusted).map(|ip| ip.to_string());
            assert_eq!(got.as_deref(), client, "{list}");
        }
    }

    /// The fast path reads what the standard parser reads, and leaves it
    /// everything else: checked on tricky forms and on every value of
    /// one octet in every position, with and without leading zeros.
    #[test]
    fn dotted_quads_parse_as_the_standard_parser_does() {
        let std = |v: &[u8]| {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<std::net::Ipv4Addr>().ok())
        };
        let mut cases: Vec<Vec<u8>> = [
            "1.2.3.4",
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "01.2.3.4",
            "1..2.3",
            ".1.2.3",
            "1.2.3.",
            "1.2.3.4 ",
            "+1.2.3.4",
            "1.2.3.-4",
            "1.2.3.0004",
            "1.2.3.a",
            "",
            "::1",
            "1.2.3.4\0",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        for n in 0..1000 {
            for form in [format!("{n}"), format!("{n:02}"), format!("{n:03}")] {
                for at in 0..4 {
                    let mut o = ["9", "9", "9", "9"].map(String::from);
                    o[at] = form.clone();
                    cases.push(o.join(".").into_bytes());
                }
            }
        }
        for n in 0..=255u8 {
            let c = format!("{n}.1.{n}.0");
            assert_eq!(dotted_quad(c.as_bytes()), std(c.as_bytes()), "{c}");
            assert!(dotted_quad(c.as_bytes()).is_some());
        }
        for c in &cases {
            let fast = dotted_quad(c);
            assert!(
                fast.is_none() || fast == std(c),
                "{}",
                String::from_utf8_lossy(c)
            );
            assert_eq!(
                parse_ip(c),
                std(c).map(IpAddr::V4).or_else(|| parse_ip_std(c)),
                "{}",
                String::from_utf8_lossy(c)
            );
        }
    }

    /// IPv6 addresses and strings near them (every string of up to five
    /// bytes of their alphabet, random longer ones of six of those bytes,
    /// and random addresses written out): the hex-group reader agrees
    /// with the standard parser wherever it reads one, and reads every
    /// address without `.` or `%` that the standard parser reads.
    #[test]
    fn hex_groups_read_as_the_standard_parser_does() {
        let alphabet = b"0:1fF.9:g%";
        let mut cases: Vec<Vec<u8>> = [
            "::",
            "::1",
            "1::",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7:8::",
            "::1:2:3:4:5:6:7:8",
            "1::2::3",
            "2001:db8::7",
            "ffff:FFFF::",
            "12345::",
            "0001:0:0:0:0:0:0:1",
            "::ffff:c000:280",
            "::ffff:192.0.2.128",
            "1:2",
            ":1",
            "1:",
            ":::",
            "fe80::1%eth0",
            "1:2:3:4:5:6:7:8:9",
            "[::1]",
        ]
        .iter()
        .map(|c| c.as_bytes().to_vec())
        .collect();
        // Every string of up to five bytes of the alphabet.
        let mut level = vec![Vec::new()];
        for _ in 0..5 {
            level = level
                .iter()
                .flat_map(|p: &Vec<u8>| alphabet.iter().map(move |&b| [&p[..], &[b]].concat()))
                .collect();
            cases.extend(level.iter().cloned());
        }
        // Random longer ones, and random addresses written out.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..100_000 {
            let len = 6 + next() % 36;
            cases.push((0..len).map(|_| alphabet[(next() % 6) as usize]).collect());
            let a = std::net::Ipv6Addr::from(
                u128::from(next()) << 64 | u128::from(next() & 0xffff_0000_ffff),
            );
            cases.push(a.to_string().into_bytes());
        }
        let mut read = 0;
        for c in &cases {
            let std = std::str::from_utf8(c).ok().and_then(|s| s.parse().ok());
            if let Some(a) = hex_groups(c) {
                assert_eq!(Some(a), std, "{}", String::from_utf8_lossy(c));
                read += 1;
            } else {
                assert!(
                    std.is_none() || c.iter().any(|&b| b == b'.' || b == b'%'),
                    "{}",
                    String::from_utf8_lossy(c)
                );
            }
            assert_eq!(
                parse_ip(c),
                parse_ip_std(c),
                "{}",
                String::from_utf8_lossy(c)
            );
        }
        assert!(read > 100_000, "{read}");
    }

    /// What [`parse_ip`] gave before its fast path, for the test above.
    fn parse_ip_std(v: &[u8]) -> Option<IpAddr> {
        let v = v
            .strip_prefix(b"[")
            .and_then(|v| v.strip_suffix(b"]"))
            .unwrap_or(v);
        let ip: IpAddr = std::str::from_utf8(v).ok()?.parse().ok()?;
        Some(match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        })
    }
}
