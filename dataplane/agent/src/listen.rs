//! Where the agent listens: `unix:PATH` or `tcp:ADDR` endpoints, and the
//! control socket, bound before anything is served so that a taken
//! address fails the start.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;

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

/// Removes a unix socket's path when dropped (when the agent stops).
#[derive(Debug)]
pub struct UnixPath(pub PathBuf);

impl Drop for UnixPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Binds a unix socket at `path` with mode `mode`. A socket file left by
/// an agent that is gone is replaced; one another process answers on is
/// an error, and so is any other kind of file at the path.
pub async fn bind_unix(path: &Path, mode: u32) -> io::Result<UnixListener> {
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket (move it away)",
                    path.display()
                ),
            ));
        }
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{}: another process is listening there (another rctl serve?)",
                    path.display()
                ),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(l)
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

    #[tokio::test]
    async fn a_stale_socket_is_replaced_a_live_one_and_other_files_are_not() {
        let d = std::env::temp_dir().join(format!("rctl-listen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("s.sock");
        let live = bind_unix(&p, 0o600).await.unwrap();
        let e = bind_unix(&p, 0o600).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        drop(live);
        // The file stays behind, with nobody listening: replaced.
        let again = bind_unix(&p, 0o640).await.unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        drop(again);
        let f = d.join("file");
        std::fs::write(&f, "keep").unwrap();
        assert!(bind_unix(&f, 0o600).await.is_err());
        assert_eq!(std::fs::read(&f).unwrap(), b"keep");
        let _ = std::fs::remove_dir_all(&d);
    }
}
