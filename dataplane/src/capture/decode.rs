//! Packet decoding: link layers (Ethernet with up to two VLAN tags, Linux
//! cooked v1 and v2, raw IP, BSD loopback), IPv4 with options, IPv6 with
//! its common extension headers, and TCP/UDP ports and flags. All access is
//! bounds-checked; anything short or strange is a [`Skip`] reason, never a
//! panic.

use super::pcap::linktype;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A decoded L3/L4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number (6 TCP, 17 UDP, 1/58 ICMP).
    pub proto: u8,
    /// Source port (0 if none).
    pub sport: u16,
    /// Destination port (0 if none).
    pub dport: u16,
    /// TCP sequence number.
    pub seq: u32,
    /// TCP flags byte.
    pub flags: u8,
    /// TCP or UDP payload as captured.
    pub payload: &'a [u8],
    /// Whether the capture cut the packet short (payload incomplete).
    pub truncated: bool,
}

/// TCP flag bits.
pub mod tcp {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// Why a frame yields no packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not IP (ARP, LLDP, …).
    NotIp,
    /// An IP fragment (after the first, or the first of several).
    Fragment,
    /// Cut before the headers ended.
    Truncated,
    /// A link type this reader does not decode.
    UnsupportedLink(u32),
    /// Malformed headers.
    Malformed,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// Decodes one frame.
pub fn decode(link: u32, data: &[u8], orig_len: u32) -> Result<Decoded<'_>, Skip> {
    let cut = (data.len() as u64) < u64::from(orig_len);
    let (ethertype, rest) = match link {
        linktype::ETHERNET => {
            let mut et = be16(data, 12).ok_or(Skip::Truncated)?;
            let mut at = 14;
            for _ in 0..2 {
                if et == 0x8100 || et == 0x88a8 || et == 0x9100 {
                    et = be16(data, at + 2).ok_or(Skip::Truncated)?;
                    at += 4;
                }
            }
            (et, data.get(at..).ok_or(Skip::Truncated)?)
        }
        linktype::LINUX_SLL => (
            be16(data, 14).ok_or(Skip::Truncated)?,
            data.get(16..).ok_or(Skip::Truncated)?,
        ),
        linktype::LINUX_SLL2 => (
            be16(data, 0).ok_or(Skip::Truncated)?,
            data.get(20..).ok_or(Skip::Truncated)?,
        ),
        linktype::RAW | linktype::RAW_OLD | linktype::RAW_OLD2 => {
            match data.first().map(|b| b >> 4) {
                Some(4) => (0x0800, data),
                Some(6) => (0x86dd, data),
                Some(_) => return Err(Skip::NotIp),
                None => return Err(Skip::Truncated),
            }
        }
        linktype::IPV4 => (0x0800, data),
        linktype::IPV6 => (0x86dd, data),
        linktype::NULL => {
            let fam = data.get(..4).ok_or(Skip::Truncated)?;
            // Host byte order of the capturing machine: accept either.
            let f = u32::from_le_bytes([fam[0], fam[1], fam[2], fam[3]])
                .min(u32::from_be_bytes([fam[0], fam[1], fam[2], fam[3]]));
            let et = match f {
                2 => 0x0800,
                24 | 28 | 30 => 0x86dd,
                _ => return Err(Skip::NotIp),
            };
            (et, &data[4..])
        }
        other => return Err(Skip::UnsupportedLink(other)),
    };
    match ethertype {
        0x0800 => ipv4(rest, cut),
        0x86dd => ipv6(rest, cut),
        _ => Err(Skip::NotIp),
    }
}

fn ipv4(b: &[u8], cut: bool) -> Result<Decoded<'_>, Skip> {
    let vihl = *b.first().ok_or(Skip::Truncated)?;
    if vihl >> 4 != 4 {
        return Err(Skip::Malformed);
    }
    let ihl = usize::from(vihl & 0x0f) * 4;
    if ihl < 20 {
        return Err(Skip::Malformed);
    }
    let total = usize::from(be16(b, 2).ok_or(Skip::Truncated)?);
    let frag = be16(b, 6).ok_or(Skip::Truncated)?;
    let proto = *b.get(9).ok_or(Skip::Truncated)?;
    let src = Ipv4Addr::from(be32(b, 12).ok_or(Skip::Truncated)?);
    let dst = Ipv4Addr::from(be32(b, 16).ok_or(Skip::Truncated)?);
    if frag & 0x3fff != 0 {
        return Err(Skip::Fragment);
    }
    if b.len() < ihl {
        return Err(Skip::Truncated);
    }
    // Ethernet pads short frames: the IP total length says where IP ends.
    let end = if total >= ihl {
        total.min(b.len())
    } else {
        b.len()
    };
    let cut = cut || total > b.len();
    l4(IpAddr::V4(src), IpAddr::V4(dst), proto, &b[ihl..end], cut)
}

fn ipv6(b: &[u8], cut: bool) -> Result<Decoded<'_>, Skip> {
    if b.first().ok_or(Skip::Truncated)? >> 4 != 6 {
        return Err(Skip::Malformed);
    }
    let plen = usize::from(be16(b, 4).ok_or(Skip::Truncated)?);
    let mut next = *b.get(6).ok_or(Skip::Truncated)?;
    let src: [u8; 16] = b
        .get(8..24)
        .ok_or(Skip::Truncated)?
        .try_into()
        .map_err(|_| Skip::Truncated)?;
    let dst: [u8; 16] = b
        .get(24..40)
        .ok_or(Skip::Truncated)?
        .try_into()
        .map_err(|_| Skip::Truncated)?;
    let end = (40 + plen).min(b.len());
    let cut = cut || 40 + plen > b.len();
    let mut at = 40;
    for _ in 0..8 {
        match next {
            0 | 43 | 60 => {
                let n = *b.get(at).ok_or(Skip::Truncated)?;
                let len = (usize::from(*b.get(at + 1).ok_or(Skip::Truncated)?) + 1) * 8;
                next = n;
                at += len;
            }
            51 => {
                let n = *b.get(at).ok_or(Skip::Truncated)?;
                let len = (usize::from(*b.get(at + 1).ok_or(Skip::Truncated)?) + 2) * 4;
                next = n;
                at += len;
            }
            44 => {
                let n = *b.get(at).ok_or(Skip::Truncated)?;
                let off = be16(b, at + 2).ok_or(Skip::Truncated)?;
                if off & 0xfff9 != 0 {
                    // A fragment offset or the more-fragments bit.
                    return Err(Skip::Fragment);
                }
                next = n;
                at += 8;
            }
            _ => break,
        }
    }
    if at > end {
        return Err(Skip::Truncated);
    }
    l4(
        IpAddr::V6(Ipv6Addr::from(src)),
        IpAddr::V6(Ipv6Addr::from(dst)),
        next,
        &b[at..end],
        cut,
    )
}

fn l4(src: IpAddr, dst: IpAddr, proto: u8, b: &[u8], cut: bool) -> Result<Decoded<'_>, Skip> {
    let mut d = Decoded {
        src,
        dst,
        proto,
        sport: 0,
        dport: 0,
        seq: 0,
        flags: 0,
        payload: &[],
        truncated: cut,
    };
    match proto {
        6 => {
            d.sport = be16(b, 0).ok_or(Skip::Truncated)?;
            d.dport = be16(b, 2).ok_or(Skip::Truncated)?;
            d.seq = be32(b, 4).ok_or(Skip::Truncated)?;
            let off = usize::from(b.get(12).ok_or(Skip::Truncated)? >> 4) * 4;
            d.flags = *b.get(13).ok_or(Skip::Truncated)?;
            if off < 20 {
                return Err(Skip::Malformed);
            }
            d.payload = b.get(off..).ok_or(Skip::Truncated)?;
        }
        17 => {
            d.sport = be16(b, 0).ok_or(Skip::Truncated)?;
            d.dport = be16(b, 2).ok_or(Skip::Truncated)?;
            d.payload = b.get(8..).ok_or(Skip::Truncated)?;
        }
        _ => {}
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_v4(payload: &[u8], vlan: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        for _ in 0..vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = 24 + 20 + payload.len();
        f.extend_from_slice(&[
            0x46,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            6,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
            1,
            1,
            0,
            0,
        ]);
        f.extend_from_slice(&[
            0x9c, 0x40, 0x00, 0x50, 0, 0, 0, 7, 0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0,
        ]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn ethernet_vlans_and_ipv4_options() {
        for vlan in 0..=2 {
            let f = tcp_v4(b"GET / HTTP/1.1\r\n", vlan);
            let d = decode(linktype::ETHERNET, &f, f.len() as u32).unwrap();
            assert_eq!((d.sport, d.dport, d.seq, d.flags), (40000, 80, 7, 0x18));
            assert_eq!(d.payload, b"GET / HTTP/1.1\r\n");
            assert_eq!(d.src, "10.0.0.1".parse::<IpAddr>().unwrap());
        }
    }

    #[test]
    fn fragments_and_truncation_are_reported() {
        let mut f = tcp_v4(b"x", 0);
        f[14 + 6] = 0x20; // more fragments
        assert_eq!(
            decode(linktype::ETHERNET, &f, f.len() as u32),
            Err(Skip::Fragment)
        );
        let f = tcp_v4(b"hello", 0);
        assert_eq!(
            decode(linktype::ETHERNET, &f[..30], f.len() as u32),
            Err(Skip::Truncated)
        );
        let d = decode(linktype::ETHERNET, &f[..f.len() - 2], f.len() as u32).unwrap();
        assert!(d.truncated);
        assert_eq!(decode(linktype::ETHERNET, &[0; 14], 14), Err(Skip::NotIp));
        assert_eq!(decode(999, &f, 10), Err(Skip::UnsupportedLink(999)));
    }

    #[test]
    fn ipv6_with_extension_headers() {
        let mut p = vec![0x60, 0, 0, 0, 0, 28, 0, 64];
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        // Hop-by-hop (8 bytes) then UDP.
        p.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        p.extend_from_slice(&[
            0x30, 0x39, 0x00, 0x35, 0, 20, 0, 0, b'q', b'u', b'e', b'r', b'y', b'!', b'!', b'!',
            b'!', b'!', b'!', b'!',
        ]);
        let d = decode(linktype::RAW, &p, p.len() as u32).unwrap();
        assert_eq!((d.proto, d.sport, d.dport), (17, 12345, 53));
        assert_eq!(d.payload.len(), 12);
    }
}

#[cfg(test)]
mod link_tests {
    use super::*;

    fn ipv4_udp() -> Vec<u8> {
        vec![
            0x45, 0, 0, 30, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2, 0x30, 0x39, 0,
            53, 0, 10, 0, 0, b'h', b'i',
        ]
    }

    #[test]
    fn linux_cooked_v1_and_v2_and_bsd_loopback() {
        let ip = ipv4_udp();
        let mut sll = vec![0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&ip);
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        sll2.extend_from_slice(&ip);
        let mut null_le = vec![2, 0, 0, 0];
        null_le.extend_from_slice(&ip);
        let mut null_be = vec![0, 0, 0, 2];
        null_be.extend_from_slice(&ip);
        for (link, frame) in [
            (linktype::LINUX_SLL, sll),
            (linktype::LINUX_SLL2, sll2),
            (linktype::NULL, null_le),
            (linktype::NULL, null_be),
            (linktype::IPV4, ip.clone()),
        ] {
            let d = decode(link, &frame, frame.len() as u32)
                .unwrap_or_else(|e| panic!("{link}: {e:?}"));
            assert_eq!(
                (d.proto, d.sport, d.dport, d.payload),
                (17, 12345, 53, &b"hi"[..]),
                "{link}"
            );
        }
    }
}
