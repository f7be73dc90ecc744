//! The user-space data plane of rctl: a compiled decision engine for
//! rulesets, the reference evaluator it is checked against, keyed rate
//! limiters, the runner for `test` blocks, dry runs of captured traffic,
//! and the XDP program's tables (what its maps hold for a ruleset).
//!
//! It runs nothing of the kernel's and holds no state on the host:
//! loading the XDP program is `rctl-loader`'s, files and sockets are
//! `rctl-os`'s.

// Unsafe code is denied, and allowed in one place: the prefetch hint
// (`prefetch.rs`), whose intrinsic is unsafe to call only by its form.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod answer;
pub mod capture;
pub mod carry;
mod core;
mod cut;
#[cfg(test)]
mod cut_tests;
pub mod dryrun;
pub mod engine;
mod error;
pub mod iptable;
pub mod limiter;
pub mod matcher;
pub mod naive;
pub mod partial;
#[cfg(test)]
mod partial_tests;
pub mod prefetch;
#[cfg(test)]
mod replay_tests;
pub mod request;
pub mod snapshot;
pub mod testing;
pub mod topk;
pub mod topkey;
pub mod xdp;

pub use crate::core::{Decision, EngineConfig, IndexError, Replay, Step, Verdict};
pub use engine::{Engine, EngineError, Scratch, Trace};
pub use naive::NaiveEngine;
pub use request::{Packet, Request};
