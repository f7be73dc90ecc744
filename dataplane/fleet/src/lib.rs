//! Fleet distribution for rctl: rulesets pushed once through etcd and
//! followed by every edge host (`rctl push`, `rctl agent`, `rctl fleet
//! status`), and site-wide limits counted in Redis (`throttle … shared`).
//!
//! - [`etcd`]: connection options (TLS, client certificates), the key
//!   layout and the records stored there.
//! - [`push`]: storing an artifact in chunks and switching a target's
//!   pointer in one transaction; rollbacks; collecting old artifacts.
//! - [`fetch`]: fetching and checking every byte before an apply.
//! - [`status`]: `rctl fleet status`: who runs what, who lags or failed.
//! - [`agent`]: `rctl agent`: `rctl serve`'s listeners plus the watcher
//!   that applies what etcd points at, and reports under a lease.
//! - [`shared`]: the Redis backend of shared limits.
//!
//! The engine (`rctl-dataplane`) stays free of network clients: shared
//! limiters expose deltas and take the site's state through a plain
//! Rust handle, which [`shared`] drives.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
mod backoff;
pub mod error;
pub mod etcd;
pub mod fetch;
pub mod metrics;
pub mod push;
pub mod shared;
pub mod status;

pub use error::{ErrorKind, FleetError};
