//! Who is on the other end of a connection.
//!
//! - A unix socket's peer: `SO_PEERCRED` (its user, group and process at
//!   `connect()`) and `SO_PEERGROUPS` (its supplementary groups then), both
//!   recorded by the kernel when the peer connected, so nothing the peer
//!   does later changes them.
//! - A loopback TCP client: every local user connects from 127.0.0.1, so
//!   the address tells nobody apart. The kernel knows which user owns
//!   the client's socket; [`tcp_owner`] asks it through the socket
//!   diagnostics netlink interface (`NETLINK_SOCK_DIAG`, as `ss -e`
//!   does), with the connection's two ends as the key.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A unix socket peer's credentials, as the kernel recorded them at
/// `connect()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCred {
    /// Its process (at connect time).
    pub pid: i32,
    /// Its effective user.
    pub uid: u32,
    /// Its effective group.
    pub gid: u32,
    /// Its supplementary groups (empty where the kernel does not say).
    pub groups: Vec<u32>,
}

impl PeerCred {
    /// Whether the peer is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// `SO_PEERGROUPS` (Linux 4.13; the same number on every architecture
/// rctl builds for, but not exported by the libc crate everywhere).
const SO_PEERGROUPS: libc::c_int = 59;

/// The credentials of a connected unix stream socket's peer.
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    // SAFETY: ucred is plain old data; zeroed is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is valid for `len` bytes, and `len` is its size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: `groups` is valid for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let e = io::Error::last_os_error();
        if rc == 0 {
            groups.truncate(len as usize / 4);
            break;
        }
        match e.raw_os_error() {
            // Too small: `len` now says how much is needed.
            Some(libc::ERANGE) if (len as usize / 4) > groups.len() && groups.len() < 1 << 16 => {
                groups.resize(len as usize / 4, 0);
            }
            // An older kernel: no supplementary groups known.
            Some(libc::ENOPROTOOPT) => {
                groups.clear();
                break;
            }
            _ => return Err(e),
        }
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        groups,
    })
}

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `INET_DIAG_NOCOOKIE`: look the socket up by its addresses only.
const NO_COOKIE: u32 = !0;

/// `struct inet_diag_sockid` (linux/inet_diag.h); ports and addresses in
/// network byte order.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    iface: u32,
    cookie: [u32; 2],
}

/// `struct nlmsghdr` then `struct inet_diag_req_v2`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Request {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

const _: () = assert!(std::mem::size_of::<SockId>() == 48);
const _: () = assert!(std::mem::size_of::<Request>() == 16 + 8 + 48);

/// Offset of `idiag_uid` in a reply: the 16-byte `nlmsghdr`, then in
/// `struct inet_diag_msg` 4 bytes, the 48-byte id, then expires, rqueue
/// and wqueue (4 bytes each).
const UID_AT: usize = 16 + 4 + 48 + 12;

fn sockid(local: SocketAddr, remote: SocketAddr) -> Option<(u8, SockId)> {
    let mut id = SockId {
        sport: local.port().to_be_bytes(),
        dport: remote.port().to_be_bytes(),
        cookie: [NO_COOKIE, NO_COOKIE],
        ..SockId::default()
    };
    // A dual-stack listener sees IPv4 clients as mapped addresses; the
    // client's own socket is IPv4.
    let family = match (local.ip().to_canonical(), remote.ip().to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            id.src[..4].copy_from_slice(&a.octets());
            id.dst[..4].copy_from_slice(&b.octets());
            libc::AF_INET
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            id.src = a.octets();
            id.dst = b.octets();
            libc::AF_INET6
        }
        _ => return None,
    };
    Some((family as u8, id))
}

/// The user that owns the TCP socket whose local end is `client` and
/// whose remote end is `server`: for a connection this process accepted
/// from a client on this host, `client` is the accepted socket's peer
/// address and `server` its local address. `Ok(None)` when the kernel
/// knows no such socket (the client is on another host, or already gone).
pub fn tcp_owner(client: SocketAddr, server: SocketAddr) -> io::Result<Option<u32>> {
    let Some((family, id)) = sockid(client, server) else {
        return Ok(None);
    };
    // SAFETY: socket() has no memory preconditions; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a socket this function just opened and owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let req = Request {
        len: std::mem::size_of::<Request>() as u32,
        kind: SOCK_DIAG_BY_FAMILY,
        flags: libc::NLM_F_REQUEST as u16,
        seq: 1,
        pid: 0,
        family,
        protocol: libc::IPPROTO_TCP as u8,
        ext: 0,
        pad: 0,
        states: !0,
        id,
    };
    // SAFETY: sockaddr_nl is plain old data; zeroed is a valid value.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `req` is valid for its size, `kernel` for its size.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            (&raw const req).cast(),
            std::mem::size_of::<Request>(),
            0,
            (&raw const kernel).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 1024];
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    parse_reply(&buf[..n as usize])
}

/// Reads the uid out of a reply, or the error it carries.
fn parse_reply(b: &[u8]) -> io::Result<Option<u32>> {
    let u16_at = |i: usize| b.get(i..i + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]));
    let u32_at = |i: usize| {
        b.get(i..i + 4)
            .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
    };
    let short = || io::Error::new(io::ErrorKind::InvalidData, "short socket diagnostics reply");
    match u16_at(4).ok_or_else(short)? {
        NLMSG_ERROR => {
            // struct nlmsgerr: a negative errno after the header.
            let errno = u32_at(16).ok_or_else(short)? as i32;
            match -errno {
                0 | libc::ENOENT => Ok(None),
                e => Err(io::Error::from_raw_os_error(e)),
            }
        }
        SOCK_DIAG_BY_FAMILY => Ok(Some(u32_at(UID_AT).ok_or_else(short)?)),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("socket diagnostics answered message type {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd as _;

    #[test]
    fn a_unix_peer_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(a.as_fd()).unwrap();
        assert_eq!(c.uid, crate::users::euid());
        assert_eq!(c.gid, crate::users::egid());
        assert_eq!(c.pid, std::process::id() as i32);
    }

    #[test]
    fn a_loopback_client_is_owned_by_the_user_that_made_it() {
        for host in ["127.0.0.1", "[::1]"] {
            let Ok(l) = std::net::TcpListener::bind(format!("{host}:0")) else {
                continue; // no IPv6 on this host
            };
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, peer) = l.accept().unwrap();
            let owner = tcp_owner(peer, s.local_addr().unwrap()).unwrap();
            assert_eq!(owner, Some(crate::users::euid()), "{host}");
            // The server's own end is not the client's.
            let gone = SocketAddr::new(peer.ip(), 1);
            assert_eq!(tcp_owner(gone, s.local_addr().unwrap()).unwrap(), None);
            drop(c);
        }
    }

    #[test]
    fn replies_that_are_short_or_odd_are_errors_not_panics() {
        assert!(parse_reply(&[]).is_err());
        assert!(parse_reply(&[0; 6]).is_err());
        let mut err = vec![0u8; 20];
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(parse_reply(&err).unwrap(), None);
        err[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert!(parse_reply(&err).is_err());
        let mut ok = vec![0u8; UID_AT + 4];
        ok[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        ok[UID_AT..].copy_from_slice(&33u32.to_ne_bytes());
        assert_eq!(parse_reply(&ok).unwrap(), Some(33));
        assert!(parse_reply(&ok[..UID_AT]).is_err());
    }

    #[test]
    fn families_that_differ_find_nothing() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "[::1]:2".parse().unwrap();
        assert_eq!(tcp_owner(a, b).unwrap(), None);
    }
}
