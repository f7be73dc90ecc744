//! The live HTTP enforcement agent of rctl (`rctl serve`): the same engine
//! and artifact as `rctl eval` and `rctl dry-run`, answering the edge
//! proxies an operator already runs.
//!
//! - [`judge`]: the generation in force and how a request is decided.
//! - [`spop`]: the HAProxy SPOE agent (SPOP 2.0).
//!
//! The engine library (`rctl-dataplane`) stays free of async runtimes and
//! network clients; everything that listens on a socket lives here.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod judge;
pub mod spop;
