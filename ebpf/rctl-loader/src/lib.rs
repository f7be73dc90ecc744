//! The XDP program's user-space side (`rctl apply --iface`, `status`,
//! `log`, `detach`): loading the program and its tables
//! ([`XdpProgram`], which also runs packets through it with
//! BPF_PROG_TEST_RUN), and putting it on an interface with state that
//! neither lies nor is open to tampering ([`host`]).
//!
//! What the program's maps hold for a ruleset is
//! `rctl_dataplane::xdp::Tables`, computed without any of this; the
//! kernel/user-space types are `rctl-common`'s.

#![warn(missing_docs)]

mod error;
pub mod host;
mod program;
mod tick;

pub use error::{ErrorKind, LoaderError};
pub use program::{Outcome, XdpProgram};
pub use tick::kernel_tick;
