//! Where the SPOE agent listens: `unix:PATH` or `tcp:HOST:PORT`, bound by
//! [`crate::listen`] (a unix socket has its mode and group before its
//! path exists; its folder must not be writable by group or others).
//!
//! HAProxy connects to the socket as the user it runs as (Debian's:
//! `haproxy`): give the socket that group (`rctl serve --spoe-group
//! haproxy`, mode 0660), or run the agent as that user. A TCP listener
//! on a shared host is reachable by every local user.

use crate::listen::{self, Bind, Endpoint};
use crate::spop::error::{ErrorKind, SpopError};
use crate::spop::frame::FrameType;

/// A bound socket, not yet serving (see [`super::serve`]).
#[derive(Debug)]
pub struct Listener {
    inner: listen::Listener,
}

impl Listener {
    /// Binds `unix:PATH` or `tcp:HOST:PORT` (port 0 picks a free one)
    /// with [`Bind::default`]. Works outside an async runtime.
    pub fn bind(addr: &str) -> Result<Listener, SpopError> {
        let ep = Endpoint::parse(addr)
            .ok()
            .filter(|_| addr.starts_with("unix:") || addr.starts_with("tcp:"))
            .ok_or_else(|| SpopError::new(ErrorKind::BadAddress(addr.to_string())))?;
        Listener::bind_with(&ep, &Bind::default())
    }

    /// Binds `endpoint` with `bind`'s access and peer limits.
    pub fn bind_with(endpoint: &Endpoint, bind: &Bind) -> Result<Listener, SpopError> {
        listen::Listener::bind(endpoint, bind)
            .map(|inner| Listener { inner })
            .map_err(|e| SpopError::new(ErrorKind::UnsafePath(e.message)))
    }

    /// The address in the form [`Listener::bind`] takes, with the port
    /// chosen for `tcp:…:0`.
    pub fn address(&self) -> String {
        self.inner.address()
    }

    /// The listener underneath.
    pub(super) fn into_inner(self) -> listen::Listener {
        self.inner
    }
}

/// Answers AGENT-DISCONNECT with `err`'s status without waiting (the
/// frame is small and the socket's buffer empty); the caller then drops
/// the stream, which closes it.
pub(super) fn refuse(stream: &listen::Stream, err: &SpopError) {
    let mut frame = Vec::new();
    let msg = err.to_string();
    crate::spop::frame::encode_disconnect(
        &mut frame,
        FrameType::AgentDisconnect,
        err.status(),
        &msg,
    );
    stream.try_write_now(&frame);
}
