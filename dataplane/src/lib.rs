//! The user-space data plane of rctl: a compiled decision engine for
//! rulesets, the reference evaluator it is checked against, keyed rate
//! limiters, and the runner for `test` blocks.

// Two exceptions: `xdp::kernel_tick` (a clock_getres call) and the flock
// call of `xdp::host`'s lock.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod capture;
pub mod carry;
mod core;
pub mod dryrun;
pub mod engine;
pub mod iptable;
pub mod limiter;
pub mod matcher;
pub mod naive;
pub mod request;
pub mod testing;
pub mod topk;
pub mod xdp;

pub use crate::core::{Decision, EngineConfig, IndexError, Step, Verdict};
pub use engine::{Engine, EngineError, Scratch, Trace};
pub use naive::NaiveEngine;
pub use request::{Packet, Request};
