//! Where the agent listens: `unix:PATH` or `tcp:HOST:PORT`.
//!
//! A unix socket is created with mode 0600 in a folder that only its owner
//! may write: a missing folder is created with mode 0700, an existing one
//! writable by group or others (such as `/tmp`) is refused, since another
//! user could replace the socket there. A socket file left by an agent
//! that died is removed; a live agent's socket, or any other kind of file
//! at the path, is an error. The socket file is removed when the listener
//! stops, if it is still the one this listener made.
//!
//! HAProxy connects to the socket as the user it runs as: run the agent as
//! that user (or put HAProxy's user in charge of the agent's folder), or
//! listen on `tcp:127.0.0.1:PORT`.

use crate::spop::error::{ErrorKind, SpopError};
use crate::spop::frame::FrameType;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::{TcpStream, UnixStream};

/// A bound socket, not yet serving (see [`super::serve`]).
#[derive(Debug)]
pub struct Listener {
    inner: Bound,
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
    /// Binds `unix:PATH` or `tcp:HOST:PORT` (port 0 picks a free one). Works
    /// outside an async runtime.
    pub fn bind(addr: &str) -> Result<Listener, SpopError> {
        let inner = if let Some(path) = addr.strip_prefix("unix:") {
            bind_unix(Path::new(path))?
        } else if let Some(a) = addr.strip_prefix("tcp:") {
            let l = std::net::TcpListener::bind(a)?;
            l.set_nonblocking(true)?;
            Bound::Tcp(l)
        } else {
            return Err(SpopError::new(ErrorKind::BadAddress(addr.to_string())));
        };
        Ok(Listener { inner })
    }

    /// The address in the form [`Listener::bind`] takes, with the port
    /// chosen for `tcp:…:0`.
    pub fn address(&self) -> String {
        match &self.inner {
            Bound::Unix { file, .. } => format!("unix:{}", file.path.display()),
            Bound::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("tcp:{a}"),
                Err(_) => "tcp:?".to_string(),
            },
        }
    }

    /// Registers the socket with the running tokio runtime.
    pub(super) fn into_tokio(self) -> Result<Accepting, SpopError> {
        Ok(match self.inner {
            Bound::Unix { listener, file } => Accepting::Unix {
                listener: tokio::net::UnixListener::from_std(listener)?,
                _file: file,
            },
            Bound::Tcp(l) => Accepting::Tcp(tokio::net::TcpListener::from_std(l)?),
        })
    }
}

fn bind_unix(path: &Path) -> Result<Bound, SpopError> {
    let unsafe_path = |why: String| SpopError::new(ErrorKind::UnsafePath(why));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?,
        Err(e) => return Err(e.into()),
        Ok(m) if !m.is_dir() => {
            return Err(unsafe_path(format!("{} is not a folder", dir.display())))
        }
        Ok(m) if m.mode() & 0o022 != 0 => {
            return Err(unsafe_path(format!(
                "folder {} is writable by group or others (mode {:o}): put the socket in a folder only its owner may write, such as /run/rctl",
                dir.display(),
                m.mode() & 0o7777
            )))
        }
        Ok(_) => {}
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
        Ok(m) if !m.file_type().is_socket() => {
            return Err(unsafe_path(format!(
                "{} exists and is not a socket: remove it or choose another path",
                path.display()
            )))
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(unsafe_path(format!(
                    "an agent already listens on {}",
                    path.display()
                )))
            }
            // Nobody listens: a stale socket from an agent that died.
            Err(_) => std::fs::remove_file(path)?,
        },
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    let m = std::fs::symlink_metadata(path)?;
    Ok(Bound::Unix {
        listener,
        file: SocketFile {
            path: path.to_path_buf(),
            id: (m.dev(), m.ino()),
        },
    })
}

/// The socket file this listener made; removed on drop if still the same.
#[derive(Debug)]
pub(super) struct SocketFile {
    path: PathBuf,
    id: (u64, u64),
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.id {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A listener registered with the runtime.
pub(super) enum Accepting {
    Unix {
        listener: tokio::net::UnixListener,
        _file: SocketFile,
    },
    Tcp(tokio::net::TcpListener),
}

impl Accepting {
    /// The next connection and a description of its peer.
    pub(super) async fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Accepting::Unix { listener, .. } => {
                let (s, _) = listener.accept().await?;
                Ok((Stream::Unix(s), "unix peer".to_string()))
            }
            Accepting::Tcp(l) => {
                let (s, a) = l.accept().await?;
                // ACKs are small: without this, Nagle's algorithm holds
                // them back behind the peer's delayed ACKs.
                s.set_nodelay(true)?;
                Ok((Stream::Tcp(s), a.to_string()))
            }
        }
    }
}

/// An accepted connection.
pub(super) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    /// Answers AGENT-DISCONNECT with `err`'s status without waiting (the
    /// frame is small and the socket's buffer empty), then closes.
    pub(super) fn refuse(self, err: &SpopError) {
        let mut frame = Vec::new();
        let msg = err.to_string();
        crate::spop::frame::encode_disconnect(
            &mut frame,
            FrameType::AgentDisconnect,
            err.status(),
            &msg,
        );
        let _ = match &self {
            Stream::Unix(s) => s.try_write(&frame),
            Stream::Tcp(s) => s.try_write(&frame),
        };
    }
}
