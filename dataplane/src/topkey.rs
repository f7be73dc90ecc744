//! Top-talker keys: an address or its network as a few bytes, counted
//! as they are and shown as text only when a report is made, so that
//! nothing is formatted per request; a path as the target's bytes before
//! its query.

use std::net::IpAddr;

/// A request target's path as a top-talker key: the target up to its
/// `?` (the query left out).
pub fn path_key(target: &[u8]) -> &[u8] {
    memchr::memchr(b'?', target).map_or(target, |i| &target[..i])
}

/// An address as a top-talker key: 4 or 16 bytes, shown by [`show_ip`].
pub fn ip_key(ip: IpAddr) -> ([u8; 16], usize) {
    let mut k = [0u8; 16];
    match ip {
        IpAddr::V4(a) => {
            k[..4].copy_from_slice(&a.octets());
            (k, 4)
        }
        IpAddr::V6(a) => (a.octets(), 16),
    }
}

/// Shows a key made by [`ip_key`].
pub fn show_ip(k: &[u8]) -> String {
    if let Ok(a) = <[u8; 4]>::try_from(k) {
        std::net::Ipv4Addr::from(a).to_string()
    } else if let Ok(a) = <[u8; 16]>::try_from(k) {
        std::net::Ipv6Addr::from(a).to_string()
    } else {
        String::from_utf8_lossy(k).into_owned()
    }
}

/// An address's network as a top-talker key: the IPv4 /24 (3 bytes) or
/// the IPv6 /48 (6 bytes), shown by [`show_prefix`].
pub fn prefix_key(ip: IpAddr) -> ([u8; 6], usize) {
    let mut k = [0u8; 6];
    match ip {
        IpAddr::V4(a) => {
            k[..3].copy_from_slice(&a.octets()[..3]);
            (k, 3)
        }
        IpAddr::V6(a) => {
            k.copy_from_slice(&a.octets()[..6]);
            (k, 6)
        }
    }
}

/// Shows a key made by [`prefix_key`].
pub fn show_prefix(k: &[u8]) -> String {
    match k.len() {
        3 => format!("{}.{}.{}.0/24", k[0], k[1], k[2]),
        6 => {
            let mut a = [0u8; 16];
            a[..6].copy_from_slice(k);
            format!("{}/48", std::net::Ipv6Addr::from(a))
        }
        _ => String::from_utf8_lossy(k).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key reads back as the address or network it was made from,
    /// in the text the reports use.
    #[test]
    fn keys_show_as_their_addresses_and_networks() {
        for (ip, net) in [
            ("185.220.101.66", "185.220.101.0/24"),
            ("2001:db8:7:1::2", "2001:db8:7::/48"),
            ("2001:0:0:5::1", "2001::/48"),
        ] {
            let a: IpAddr = ip.parse().unwrap();
            let (k, n) = ip_key(a);
            assert_eq!(show_ip(&k[..n]), ip);
            let (k, n) = prefix_key(a);
            assert_eq!(show_prefix(&k[..n]), net);
        }
        assert_eq!(show_ip(b"x"), "x");
    }

    /// A path key is the target before its first `?`.
    #[test]
    fn path_keys_leave_the_query_out() {
        for (target, path) in [
            (&b"/w/index.php?title=X&a=?b"[..], &b"/w/index.php"[..]),
            (b"/wiki/X", b"/wiki/X"),
            (b"?q", b""),
            (b"", b""),
        ] {
            assert_eq!(path_key(target), path);
        }
    }
}
