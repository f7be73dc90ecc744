//! What rctl asks of the operating system, in one place, so that the
//! engine and the agent stay free of `unsafe`:
//!
//! - [`socket`]: unix sockets that are never reachable with the wrong
//!   owner or mode (bound in a private folder, then renamed into place);
//! - [`peer`]: who is on the other end of a connection: `SO_PEERCRED` and
//!   `SO_PEERGROUPS` for unix sockets, the owner of a loopback TCP
//!   client's socket through the kernel's socket diagnostics;
//! - [`users`]: user and group names to ids, and the effective user;
//! - [`fs`]: state folders only their owner may change, files written
//!   whole or not at all, locks;
//! - [`errno`]: errors that keep the errno they carry;
//! - [`notify`]: readiness for systemd (`sd_notify`);
//! - [`clock`]: the wall clock, said for people.
//!
//! Every `unsafe` block here carries a SAFETY comment.

#![warn(missing_docs)]

pub mod clock;
pub mod errno;
pub mod fs;
pub mod notify;
pub mod peer;
pub mod socket;
pub mod users;

/// 128 bits no other process can predict: from the standard library's
/// randomly keyed SipHash (seeded from the OS's random source), over the
/// time and a counter.
pub(crate) fn unpredictable() -> u128 {
    use std::hash::BuildHasher as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let a = std::hash::RandomState::new().hash_one((n, t, std::process::id()));
    let b = std::hash::RandomState::new().hash_one((t, n, a));
    (u128::from(a) << 64) | u128::from(b)
}
