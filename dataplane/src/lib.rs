//! The user-space data plane of rctl: a decision engine for compiled
//! rulesets, keyed rate limiters, and the runner for `test` blocks.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod engine;
pub mod limiter;
pub mod request;
pub mod testing;

pub use engine::{Decision, Engine, EngineConfig, EngineError, Verdict};
pub use request::{Packet, Request};
