//! A private network namespace for the calling thread: its own loopback
//! with any addresses a test wants (the shipped rules' real updater and
//! scraper addresses rather than 127.0.0.x, which they drop as bogons),
//! and ports no other test or program on the host can take.
//!
//! `unshare(CLONE_NEWNET)` moves only the calling thread; the processes
//! and threads it starts afterwards inherit the namespace, and it goes
//! away with the last of them. Needs CAP_SYS_ADMIN (root).

use std::process::Command;

/// Whether this process may create network namespaces (root); if not,
/// panics under `CI` (the tests must never be skipped there) and
/// otherwise says the test is skipped.
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    super::skip_unless(root, "root (a private network namespace)")
}

/// Moves the calling thread into a new network namespace whose `lo` is
/// up and holds `addrs` (IPv4 or IPv6, without a prefix length) besides
/// 127.0.0.1 and ::1.
pub fn enter(addrs: &[&str]) {
    // SAFETY: unshare(2) takes a flag word and touches no memory; it
    // changes only this thread's namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "unshare(CLONE_NEWNET): {}",
        std::io::Error::last_os_error()
    );
    ip(&["link", "set", "lo", "up"]);
    for a in addrs {
        let len = if a.contains(':') { "128" } else { "32" };
        ip(&["addr", "add", &format!("{a}/{len}"), "dev", "lo"]);
    }
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
