use super::*;
use crate::cidr::PrefixSet;

/// The engine's path normalisation (`value::normalize_path`), on bytes.
fn normalize(p: &[u8]) -> Vec<u8> {
    crate::value::normalize_path(std::str::from_utf8(p).unwrap()).into_bytes()
}

#[test]
fn paths_are_sent_so_that_they_normalise_to_the_value() {
    for v in [
        "/sparql",
        "/%4a",
        "/%%41",
        "/%ea%9d%ae",
        "/page/html/%EA%9D%AE",
        "/%2f%2F",
        "/a%",
        "/a%4",
        "/%41%",
    ] {
        let raw = raw_path(v.as_bytes());
        assert_eq!(normalize(&raw), v.as_bytes(), "{v} sent as {}", show(&raw));
    }
    // What the normalisation keeps is sent as it is.
    assert_eq!(raw_path(b"/page/html/%EA%9D%AE"), b"/page/html/%EA%9D%AE");
}

#[test]
fn addresses_avoid_negative_sets_and_mapped_ipv6() {
    let set =
        |s: &[&str]| PrefixSet::from_cidrs(s.iter().map(|c| crate::cidr::parse_cidr(c).unwrap().0));
    let test_net = set(&["192.0.2.0/24"]);
    let ten = set(&["10.0.0.0/8"]);
    let all4 = set(&["0.0.0.0/0"]);
    assert_eq!(
        pick_addr(&[(&ten, false)], false),
        Some("10.0.0.1".parse().unwrap())
    );
    assert_eq!(
        pick_addr(&[(&all4, false), (&test_net, true)], false),
        Some("0.0.0.1".parse().unwrap())
    );
    assert_eq!(pick_addr(&[(&ten, false), (&ten, true)], false), None);
    // No IPv6 address is in an IPv4 set, and mapped ones are never picked.
    assert_eq!(pick_addr(&[(&ten, false)], true), None);
    let v6all = set(&["::/0"]);
    let low = set(&["::/80"]);
    let a = pick_addr(&[(&v6all, false), (&low, true)], true).unwrap();
    let IpAddr::V6(a) = a else { panic!() };
    assert!(a.to_ipv4_mapped().is_none());
}

#[test]
fn ports_are_found_between_ranges() {
    let r = vec![(0u16, 79u16), (81, 65535)];
    assert_eq!(pick_port(Proto::Tcp, &[(&r, true)]), Some(80));
    let web = vec![(80u16, 80u16), (443, 443)];
    assert_eq!(pick_port(Proto::Tcp, &[(&web, true)]), Some(79));
    assert_eq!(pick_port(Proto::Icmp, &[(&web, false)]), None);
    assert_eq!(pick_port(Proto::Icmp, &[(&web, true)]), Some(0));
}
