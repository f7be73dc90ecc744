//! rctl's nginx module (`ngx_http_rctl_module.so`): the engine of
//! `rctl serve`, inside nginx's workers, deciding each request in the
//! preaccess phase, with every throttle counted in one shared memory zone
//! so that a key's limit holds across all workers.
//!
//! - [`generation`]: a worker's ruleset, loaded from the artifact file,
//!   and how a change of the file is noticed;
//! - [`counters`]: what the workers count in the zone, and the status
//!   page;
//! - [`reply`]: what an outcome makes the module do, and its variables;
//! - `ffi` (feature `module`): the nginx side, against an nginx build
//!   tree (see README.md).
//!
//! The engine and the buckets' logic are `rctl-dataplane`'s (the zone's
//! lock-free GCRA is `rctl_dataplane::limiter::zone`); this crate only
//! maps them onto nginx.

#![warn(missing_docs)]
#![cfg_attr(not(feature = "module"), forbid(unsafe_code))]

pub mod counters;
pub mod generation;
pub mod reply;

#[cfg(feature = "module")]
mod ffi;
