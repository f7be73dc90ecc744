//! What rctl asks of the operating system, in one place, so that the
//! engine and the agent stay free of `unsafe`:
//!
//! - [`socket`]: unix sockets that are never reachable with the wrong
//!   owner or mode (bound in a private folder, then renamed into place);
//! - [`peer`]: who is on the other end of a connection: `SO_PEERCRED` and
//!   `SO_PEERGROUPS` for unix sockets, the owner of a loopback TCP
//!   client's socket through the kernel's socket diagnostics;
//! - [`users`]: user and group names to ids, and the effective user.
//!
//! Every `unsafe` block here carries a SAFETY comment.

#![warn(missing_docs)]

pub mod peer;
pub mod socket;
pub mod users;
