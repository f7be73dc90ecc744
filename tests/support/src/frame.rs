//! Ethernet frames for the XDP program: IPv4 or IPv6, optionally behind
//! a VLAN tag, then TCP, UDP or ICMP, padded to the minimum frame size.

use rctl_compiler::ir::Proto;
use std::net::IpAddr;

/// The destination [`frame`] sends to: 198.51.100.10 or 2001:db8::a.
pub fn default_dst(src: IpAddr) -> IpAddr {
    match src {
        IpAddr::V4(_) => IpAddr::from([198, 51, 100, 10]),
        IpAddr::V6(_) => IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 10]),
    }
}

/// An Ethernet frame to [`default_dst`]: optional VLAN tag, IPv4 or IPv6,
/// then TCP, UDP or ICMP.
pub fn frame(src: IpAddr, proto: Proto, dport: u16, syn: bool, vlan: bool) -> Vec<u8> {
    frame_to(src, default_dst(src), proto, dport, syn, vlan)
}

/// As [`frame`], to `dst` (of the same family as `src`).
pub fn frame_to(
    src: IpAddr,
    dst: IpAddr,
    proto: Proto,
    dport: u16,
    syn: bool,
    vlan: bool,
) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    let l4: Vec<u8> = match proto {
        Proto::Tcp => {
            let mut t = vec![0x9c, 0x40];
            t.extend_from_slice(&dport.to_be_bytes());
            t.extend_from_slice(&[
                0,
                0,
                0,
                1,
                0,
                0,
                0,
                0,
                0x50,
                if syn { 0x02 } else { 0x10 },
                0xff,
                0xff,
                0,
                0,
                0,
                0,
            ]);
            t
        }
        Proto::Udp => {
            let mut u = vec![0x9c, 0x40];
            u.extend_from_slice(&dport.to_be_bytes());
            u.extend_from_slice(&[0, 8, 0, 0]);
            u
        }
        Proto::Icmp => vec![8, 0, 0, 0, 0, 1, 0, 1],
    };
    match src {
        IpAddr::V4(a) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let total = (20 + l4.len()) as u16;
            let p = match proto {
                Proto::Tcp => 6,
                Proto::Udp => 17,
                Proto::Icmp => 1,
            };
            f.extend_from_slice(&[
                0x45,
                0,
                (total >> 8) as u8,
                total as u8,
                0,
                0,
                0x40,
                0,
                64,
                p,
                0,
                0,
            ]);
            f.extend_from_slice(&a.octets());
            let IpAddr::V4(d) = dst else {
                panic!("an IPv4 frame to {dst}")
            };
            f.extend_from_slice(&d.octets());
        }
        IpAddr::V6(a) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let p = match proto {
                Proto::Tcp => 6,
                Proto::Udp => 17,
                Proto::Icmp => 58,
            };
            f.extend_from_slice(&[0x60, 0, 0, 0, 0, l4.len() as u8, p, 64]);
            f.extend_from_slice(&a.octets());
            let IpAddr::V6(d) = dst else {
                panic!("an IPv6 frame to {dst}")
            };
            f.extend_from_slice(&d.octets());
        }
    }
    f.extend_from_slice(&l4);
    while f.len() < 60 {
        f.push(0);
    }
    f
}
