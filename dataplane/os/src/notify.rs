//! Readiness for systemd (`Type=notify`): `sd_notify(3)`'s protocol, one
//! datagram to the unix socket `$NOTIFY_SOCKET` names (a path, or an
//! abstract name after `@`). Without the variable (not started by
//! systemd) every call does nothing.

use std::io;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=…`, one per line) to
/// the service manager; `Ok(false)` when there is none to tell.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt as _;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), path)?;
    }
    Ok(true)
}

/// Tells the service manager the service is ready, with a status line.
pub fn ready(status: &str) -> io::Result<bool> {
    notify(&format!("READY=1\nSTATUS={}", one_line(status)))
}

/// Tells the service manager the service is stopping.
pub fn stopping() -> io::Result<bool> {
    notify("STOPPING=1")
}

/// A status line without newlines (which would start another field).
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reaches_the_socket_systemd_names() {
        let d = std::env::temp_dir().join(format!("rctl-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        // The variable is read at each call; this test alone sets it.
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(ready("generation 1, 3 rules\nlistening").unwrap());
        let mut buf = [0u8; 256];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(
            std::str::from_utf8(&buf[..n]).unwrap(),
            "READY=1\nSTATUS=generation 1, 3 rules listening"
        );
        std::env::set_var("NOTIFY_SOCKET", "@rctl-test-notify-none");
        // Nobody listens on that abstract name: an error, not a panic.
        assert!(notify("STOPPING=1").is_err());
        std::env::remove_var("NOTIFY_SOCKET");
        assert!(!stopping().unwrap());
        let _ = std::fs::remove_dir_all(&d);
    }
}
