//! Who may connect to a listener, and how many connections each peer may
//! hold, so that a local user can neither talk to a socket meant for the
//! proxy nor take every connection slot from it.
//!
//! **Peers.** A unix socket's peer is its user, as the kernel recorded it
//! at `connect()` (`SO_PEERCRED`, `SO_PEERGROUPS`). A TCP peer on this
//! host is the user that owns the client's socket (asked of the kernel,
//! see [`rctl_os::peer::tcp_owner`]); a TCP peer elsewhere is its address.
//!
//! **Trusted peers** are root, the user the agent runs as, and whoever
//! the listener's [`PeerPolicy`] names (users, groups, addresses): the
//! proxy. On a unix socket only trusted peers are served; anyone else is
//! refused at once (the socket file's mode should already keep them
//! out). On TCP anyone may connect, but each untrusted peer holds at most
//! [`PeerLimits::per_peer`] connections, and untrusted peers together
//! leave [`PeerLimits::reserved`] slots free for trusted ones: a flood of
//! idle connections from one user or address cannot make the proxy's
//! requests go unchecked.
//!
//! A TCP listener on a shared host is reachable by every local user;
//! prefer a unix socket, whose file mode and group say who may connect.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Who a connection comes from, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerId {
    /// A local user.
    Uid(u32),
    /// A remote address.
    Addr(IpAddr),
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerId::Uid(u) => match rctl_os::users::user_name(*u) {
                Some(n) => write!(f, "uid {u} ({n})"),
                None => write!(f, "uid {u}"),
            },
            PeerId::Addr(a) => write!(f, "{a}"),
        }
    }
}

/// One connection's peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Whom it is counted as.
    pub id: PeerId,
    /// Whether the policy trusts it.
    pub trusted: bool,
    /// Its address or socket, for messages.
    pub shown: String,
}

/// Whom a listener trusts besides root and the agent's own user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerPolicy {
    /// Trusted users.
    pub users: Vec<u32>,
    /// Trusted groups (primary or supplementary).
    pub groups: Vec<u32>,
    /// Trusted remote addresses (TCP peers on other hosts).
    pub addrs: Vec<IpAddr>,
}

impl PeerPolicy {
    /// Whether a local user with these groups is trusted.
    pub fn trusts_user(&self, uid: u32, gid: u32, groups: &[u32]) -> bool {
        uid == 0
            || uid == rctl_os::users::euid()
            || self.users.contains(&uid)
            || self.groups.iter().any(|g| *g == gid || groups.contains(g))
    }

    /// Parses a `--trust-peer` value: `USER`, `@GROUP` or an IP address.
    pub fn add(&mut self, spec: &str) -> Result<(), String> {
        if let Some(g) = spec.strip_prefix('@') {
            self.groups
                .push(rctl_os::users::group_id(g).map_err(|e| e.to_string())?);
        } else if let Ok(a) = spec.parse::<IpAddr>() {
            self.addrs.push(a);
        } else {
            self.users
                .push(rctl_os::users::user_id(spec).map_err(|e| e.to_string())?);
        }
        Ok(())
    }

    /// Whether a local user is trusted, from its id alone (a TCP peer:
    /// its supplementary groups come from the user database).
    fn trusts_uid(&self, uid: u32) -> bool {
        if self.trusts_user(uid, u32::MAX, &[]) {
            return true;
        }
        !self.groups.is_empty()
            && rctl_os::users::groups_of(uid)
                .is_some_and(|gs| self.groups.iter().any(|g| gs.contains(g)))
    }

    /// The peer of a unix socket connection.
    pub fn unix_peer(&self, cred: &rctl_os::peer::PeerCred) -> Peer {
        Peer {
            id: PeerId::Uid(cred.uid),
            trusted: self.trusts_user(cred.uid, cred.gid, &cred.groups),
            shown: format!("unix peer pid {}", cred.pid),
        }
    }

    /// The peer of a TCP connection: `owner` is the local user that owns
    /// the client's socket, if the client is on this host.
    pub fn tcp_peer(&self, addr: std::net::SocketAddr, owner: Option<u32>) -> Peer {
        match owner {
            Some(uid) => Peer {
                id: PeerId::Uid(uid),
                trusted: self.trusts_uid(uid),
                shown: addr.to_string(),
            },
            None => Peer {
                id: PeerId::Addr(addr.ip()),
                trusted: self.addrs.contains(&addr.ip().to_canonical()),
                shown: addr.to_string(),
            },
        }
    }
}

/// How many connections a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// Connections served at once, in all.
    pub total: usize,
    /// Connections one untrusted peer may hold.
    pub per_peer: usize,
    /// Slots only trusted peers may take.
    pub reserved: usize,
}

impl Default for PeerLimits {
    /// 1,024 in all, 256 per untrusted peer, 256 kept for trusted ones.
    fn default() -> Self {
        PeerLimits {
            total: 1024,
            per_peer: 256,
            reserved: 256,
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Only trusted peers may use this socket.
    NotTrusted(PeerId),
    /// The peer holds its share already.
    PeerFull(PeerId, usize),
    /// Every slot an untrusted peer may take is taken.
    UntrustedFull(usize),
    /// Every slot is taken.
    Full(usize),
}

impl Refusal {
    /// The metric label of the refusal.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::NotTrusted(_) => "peer-not-trusted",
            Refusal::PeerFull(..) | Refusal::UntrustedFull(_) => "peer-limit",
            Refusal::Full(_) => "connection-limit",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotTrusted(p) => write!(
                f,
                "{p} may not use this socket (root, the agent's user and the peers its options trust only)"
            ),
            Refusal::PeerFull(p, n) => write!(f, "{p} already holds {n} connections, its most"),
            Refusal::UntrustedFull(n) => write!(
                f,
                "untrusted peers hold {n} connections, the most they may (the rest is kept for the proxy)"
            ),
            Refusal::Full(n) => write!(f, "more than {n} connections"),
        }
    }
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    untrusted: usize,
    per: HashMap<PeerId, usize>,
}

/// One listener's connection count, by peer.
#[derive(Debug)]
pub struct Admission {
    limits: PeerLimits,
    /// Unix sockets serve trusted peers only.
    trusted_only: bool,
    held: Mutex<Held>,
}

/// A connection's place; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    peer: PeerId,
    trusted: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut h = self.admission.lock();
        h.total = h.total.saturating_sub(1);
        if !self.trusted {
            h.untrusted = h.untrusted.saturating_sub(1);
            if let Some(n) = h.per.get_mut(&self.peer) {
                *n -= 1;
                if *n == 0 {
                    h.per.remove(&self.peer);
                }
            }
        }
    }
}

impl Admission {
    /// Counts with `limits`; with `trusted_only`, untrusted peers are
    /// refused outright.
    pub fn new(limits: PeerLimits, trusted_only: bool) -> Arc<Admission> {
        Arc::new(Admission {
            limits: PeerLimits {
                total: limits.total.max(1),
                per_peer: limits.per_peer.max(1),
                reserved: limits.reserved.min(limits.total.saturating_sub(1)),
            },
            trusted_only,
            held: Mutex::new(Held::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for `peer`, or why not.
    pub fn admit(self: &Arc<Self>, peer: &Peer) -> Result<Slot, Refusal> {
        let l = self.limits;
        if !peer.trusted && self.trusted_only {
            return Err(Refusal::NotTrusted(peer.id));
        }
        let mut h = self.lock();
        if h.total >= l.total {
            return Err(Refusal::Full(l.total));
        }
        if !peer.trusted {
            if h.untrusted >= l.total - l.reserved {
                return Err(Refusal::UntrustedFull(h.untrusted));
            }
            let n = h.per.entry(peer.id).or_insert(0);
            if *n >= l.per_peer {
                return Err(Refusal::PeerFull(peer.id, *n));
            }
            *n += 1;
            h.untrusted += 1;
        }
        h.total += 1;
        Ok(Slot {
            admission: Arc::clone(self),
            peer: peer.id,
            trusted: peer.trusted,
        })
    }

    /// Connections held: in all, and by untrusted peers.
    pub fn held(&self) -> (usize, usize) {
        let h = self.lock();
        (h.total, h.untrusted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: PeerId, trusted: bool) -> Peer {
        Peer {
            id,
            trusted,
            shown: String::new(),
        }
    }

    #[test]
    fn an_untrusted_peer_gets_its_share_and_leaves_the_reserve_to_trusted_ones() {
        let a = Admission::new(
            PeerLimits {
                total: 10,
                per_peer: 4,
                reserved: 3,
            },
            false,
        );
        let nobody = peer(PeerId::Uid(65534), false);
        let other = peer(PeerId::Addr("192.0.2.1".parse().unwrap()), false);
        let proxy = peer(PeerId::Uid(33), true);
        let mut held: Vec<Slot> = (0..4).map(|_| a.admit(&nobody).unwrap()).collect();
        assert_eq!(
            a.admit(&nobody).unwrap_err(),
            Refusal::PeerFull(nobody.id, 4)
        );
        held.extend((0..3).map(|_| a.admit(&other).unwrap()));
        // 7 untrusted: the other 3 slots are the proxy's.
        let third = peer(PeerId::Uid(1000), false);
        assert_eq!(a.admit(&third).unwrap_err(), Refusal::UntrustedFull(7));
        let proxies: Vec<Slot> = (0..3).map(|_| a.admit(&proxy).unwrap()).collect();
        assert_eq!(a.admit(&proxy).unwrap_err(), Refusal::Full(10));
        assert_eq!(a.held(), (10, 7));
        drop(held);
        assert_eq!(a.held(), (3, 0));
        // Given back: the peer may come again.
        assert!(a.admit(&nobody).is_ok());
        drop(proxies);
        assert_eq!(a.held(), (0, 0));
    }

    #[test]
    fn a_trusted_only_listener_refuses_everyone_else() {
        let a = Admission::new(PeerLimits::default(), true);
        let e = a.admit(&peer(PeerId::Uid(65534), false)).unwrap_err();
        assert_eq!(e.label(), "peer-not-trusted");
        assert!(e.to_string().contains("uid 65534"), "{e}");
        assert!(a.admit(&peer(PeerId::Uid(0), true)).is_ok());
    }

    #[test]
    fn root_the_agent_and_named_users_groups_and_addresses_are_trusted() {
        let mut p = PeerPolicy::default();
        assert!(p.trusts_user(0, 0, &[]));
        assert!(p.trusts_user(rctl_os::users::euid(), 5, &[]));
        assert!(!p.trusts_user(4242, 4242, &[]));
        p.add("4242").unwrap();
        p.add("@4343").unwrap();
        p.add("192.0.2.7").unwrap();
        assert!(p.add("no-such-user-rctl").is_err());
        assert!(p.trusts_user(4242, 1, &[]));
        assert!(p.trusts_user(5000, 4343, &[]));
        assert!(p.trusts_user(5000, 1, &[7, 4343]));
        assert!(!p.trusts_user(5000, 1, &[7]));
        let remote = "192.0.2.7:5555".parse().unwrap();
        assert!(p.tcp_peer(remote, None).trusted);
        assert_eq!(
            p.tcp_peer(remote, None).id,
            PeerId::Addr("192.0.2.7".parse().unwrap())
        );
        assert!(!p.tcp_peer("192.0.2.8:1".parse().unwrap(), None).trusted);
        // A local client is its user, whatever its address.
        assert_eq!(p.tcp_peer(remote, Some(4242)).id, PeerId::Uid(4242));
        assert!(!p.tcp_peer(remote, Some(5001)).trusted);
    }
}
