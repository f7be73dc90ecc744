//! Where the agent listens: `unix:PATH` or `tcp:ADDR` endpoints, bound
//! before anything is served so that a taken address fails the start, and
//! every connection's peer (see [`crate::peers`]).
//!
//! A unix socket is made with its final mode and group before its path
//! exists ([`rctl_os::socket::bind`]): no local user can connect in the
//! moment between `bind` and `chmod`. It is removed when the listener
//! stops, if the path still names it.

use crate::peers::{Admission, Peer, PeerLimits, PeerPolicy, Refusal, Slot};
use rctl_os::socket::{Access, SocketFile};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// An address to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix socket path.
    Unix(PathBuf),
}

impl Endpoint {
    /// Parses `unix:PATH` or `tcp:ADDR` (a bare `ADDR:PORT` is TCP).
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(format!(
                    "{s:?}: `unix:` needs a path (unix:/run/rctl/spoe.sock)"
                ));
            }
            return Ok(Endpoint::Unix(p.into()));
        }
        let a = s.strip_prefix("tcp:").unwrap_or(s);
        a.parse().map(Endpoint::Tcp).map_err(|_| {
            format!(
                "{s:?}: not an endpoint (unix:PATH, or tcp:ADDR:PORT such as tcp:127.0.0.1:12345)"
            )
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// How a listener binds and whom it serves.
#[derive(Debug, Clone)]
pub struct Bind {
    /// A unix socket file's mode and group.
    pub access: Access,
    /// Whom it trusts besides root and the agent's user.
    pub peers: PeerPolicy,
    /// How many connections, by peer.
    pub limits: PeerLimits,
}

impl Default for Bind {
    /// Mode 0600, nobody else trusted, [`PeerLimits::default`].
    fn default() -> Self {
        Bind {
            access: Access::OWNER,
            peers: PeerPolicy::default(),
            limits: PeerLimits::default(),
        }
    }
}

impl Bind {
    /// Binding with this socket access: its group's members are trusted.
    pub fn with_access(mut self, access: Access) -> Bind {
        if let Some(g) = access.group {
            self.peers.groups.push(g);
        }
        self.access = access;
        self
    }
}

/// Why a listener could not be bound.
#[derive(Debug)]
pub struct ListenError {
    /// What was to be bound.
    pub endpoint: Endpoint,
    /// What went wrong, and what to do.
    pub message: String,
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ListenError {}

/// A bound socket, not yet serving.
#[derive(Debug)]
pub struct Listener {
    inner: Bound,
    peers: PeerPolicy,
    limits: PeerLimits,
}

#[derive(Debug)]
enum Bound {
    Unix {
        listener: std::os::unix::net::UnixListener,
        file: SocketFile,
    },
    Tcp(std::net::TcpListener),
}

impl Listener {
    /// Binds `endpoint` (TCP port 0 picks a free port). Works outside an
    /// async runtime.
    pub fn bind(endpoint: &Endpoint, bind: &Bind) -> Result<Listener, ListenError> {
        let fail = |message: String| ListenError {
            endpoint: endpoint.clone(),
            message,
        };
        let inner = match endpoint {
            Endpoint::Unix(p) => {
                let (listener, file) =
                    rctl_os::socket::bind(p, bind.access).map_err(|e| fail(e.to_string()))?;
                listener
                    .set_nonblocking(true)
                    .and_then(|()| rctl_os::socket::deepen_backlog(listener.as_fd()))
                    .map_err(|e| fail(format!("{}: {e}", p.display())))?;
                Bound::Unix { listener, file }
            }
            Endpoint::Tcp(a) => {
                let l = std::net::TcpListener::bind(a).map_err(|e| fail(format!("{a}: {e}")))?;
                l.set_nonblocking(true)
                    .and_then(|()| rctl_os::socket::deepen_backlog(l.as_fd()))
                    .map_err(|e| fail(format!("{a}: {e}")))?;
                Bound::Tcp(l)
            }
        };
        Ok(Listener {
            inner,
            peers: bind.peers.clone(),
            limits: bind.limits,
        })
    }

    /// What it is bound to, with the port chosen for `tcp:…:0`.
    pub fn endpoint(&self) -> Endpoint {
        match &self.inner {
            Bound::Unix { file, .. } => Endpoint::Unix(file.path().to_path_buf()),
            Bound::Tcp(l) => Endpoint::Tcp(
                l.local_addr()
                    .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
            ),
        }
    }

    /// The address in the form [`Endpoint::parse`] takes.
    pub fn address(&self) -> String {
        self.endpoint().to_string()
    }

    /// Registers the socket with the running tokio runtime.
    pub fn into_tokio(self) -> io::Result<Accepting> {
        let trusted_only = matches!(self.inner, Bound::Unix { .. });
        let admission = Admission::new(self.limits, trusted_only);
        let inner = match self.inner {
            Bound::Unix { listener, file } => Incoming::Unix {
                listener: tokio::net::UnixListener::from_std(listener)?,
                _file: file,
            },
            Bound::Tcp(l) => Incoming::Tcp(tokio::net::TcpListener::from_std(l)?),
        };
        Ok(Accepting {
            inner,
            peers: self.peers,
            admission,
        })
    }
}

enum Incoming {
    Unix {
        listener: tokio::net::UnixListener,
        _file: SocketFile,
    },
    Tcp(tokio::net::TcpListener),
}

/// A listener registered with the runtime.
pub struct Accepting {
    inner: Incoming,
    peers: PeerPolicy,
    admission: Arc<Admission>,
}

/// An accepted connection: its stream, its peer, and its slot or why it
/// has none (the caller answers a refusal as its protocol does, then
/// drops the stream).
pub struct Accepted {
    /// The connection.
    pub stream: Stream,
    /// Who is on the other end.
    pub peer: Peer,
    /// Its place among the listener's connections.
    pub slot: Result<Slot, Refusal>,
}

impl Accepting {
    /// The next connection.
    pub async fn accept(&self) -> io::Result<Accepted> {
        let (stream, peer) = match &self.inner {
            Incoming::Unix { listener, .. } => {
                let (s, _) = listener.accept().await?;
                let peer = match rctl_os::peer::peer_cred(s.as_fd()) {
                    Ok(cred) => self.peers.unix_peer(&cred),
                    // Without credentials nobody can say who it is.
                    Err(e) => Peer {
                        id: crate::peers::PeerId::Uid(u32::MAX),
                        trusted: false,
                        shown: format!("unix peer (credentials: {e})"),
                    },
                };
                (Stream::Unix(s), peer)
            }
            Incoming::Tcp(l) => {
                let (s, addr) = l.accept().await?;
                // ACKs and answers are small: without this, Nagle's
                // algorithm holds them back behind delayed ACKs.
                s.set_nodelay(true)?;
                let owner = s
                    .local_addr()
                    .ok()
                    .and_then(|local| rctl_os::peer::tcp_owner(addr, local).ok().flatten());
                (Stream::Tcp(s), self.peers.tcp_peer(addr, owner))
            }
        };
        let slot = self.admission.admit(&peer);
        Ok(Accepted { stream, peer, slot })
    }

    /// Connections held: in all, and by untrusted peers.
    pub fn held(&self) -> (usize, usize) {
        self.admission.held()
    }
}

/// An accepted connection's stream.
#[derive(Debug)]
pub enum Stream {
    /// Over a unix socket.
    Unix(UnixStream),
    /// Over TCP.
    Tcp(TcpStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Unix(s) => s.is_write_vectored(),
            Stream::Tcp(s) => s.is_write_vectored(),
        }
    }
}

impl Stream {
    /// Writes `bytes` if the socket takes them at once (a refusal's last
    /// words), without waiting.
    pub fn try_write_now(&self, bytes: &[u8]) {
        let _ = match self {
            Stream::Unix(s) => s.try_write(bytes),
            Stream::Tcp(s) => s.try_write(bytes),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_print() {
        assert_eq!(
            Endpoint::parse("unix:/run/x.sock").unwrap(),
            Endpoint::Unix("/run/x.sock".into())
        );
        let t = Endpoint::parse("tcp:127.0.0.1:9").unwrap();
        assert_eq!(t, Endpoint::parse("127.0.0.1:9").unwrap());
        assert_eq!(t.to_string(), "tcp:127.0.0.1:9");
        for bad in ["unix:", "tcp:localhost", "x", ""] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    /// A TCP listener on a free loopback port, and its address.
    fn loopback() -> (Listener, SocketAddr) {
        let t = Listener::bind(
            &Endpoint::Tcp("127.0.0.1:0".parse().unwrap()),
            &Bind::default(),
        )
        .unwrap();
        let Endpoint::Tcp(addr) = t.endpoint() else {
            panic!("a TCP listener has a TCP endpoint")
        };
        (t, addr)
    }

    #[tokio::test]
    async fn peers_are_who_the_kernel_says_and_untrusted_unix_peers_are_refused() {
        let d = std::env::temp_dir().join(format!("rctl-listen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let p = d.join("s.sock");
        let l = Listener::bind(&Endpoint::Unix(p.clone()), &Bind::default())
            .unwrap()
            .into_tokio()
            .unwrap();
        let _c = UnixStream::connect(&p).await.unwrap();
        let a = l.accept().await.unwrap();
        // This process is the agent's own user: trusted.
        assert_eq!(a.peer.id, crate::peers::PeerId::Uid(rctl_os::users::euid()));
        assert!(a.peer.trusted && a.slot.is_ok());
        assert_eq!(l.held(), (1, 0));
        drop(a);
        assert_eq!(l.held(), (0, 0));
        drop(l);
        assert!(!p.exists(), "the socket outlived its listener");
        let (t, addr) = loopback();
        let t = t.into_tokio().unwrap();
        let _c = TcpStream::connect(addr).await.unwrap();
        let a = t.accept().await.unwrap();
        assert_eq!(
            a.peer.id,
            crate::peers::PeerId::Uid(rctl_os::users::euid()),
            "a loopback client is its user, not 127.0.0.1"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A burst of connections nobody accepts yet all finish their
    /// handshake: the queue holds far more than the standard library's
    /// 128, so a reconnect loop cannot make the proxy's connection wait
    /// for a SYN retransmission.
    #[test]
    fn the_accept_queue_holds_a_burst_of_connections() {
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        let n = somaxconn.min(rctl_os::socket::BACKLOG as usize).min(600);
        let (_t, addr) = loopback();
        let held: Vec<std::net::TcpStream> = (0..n)
            .map(|i| {
                std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(500))
                    .unwrap_or_else(|e| panic!("connection {i} of {n} was not queued: {e}"))
            })
            .collect();
        assert_eq!(held.len(), n);
    }
}
