//! The HAProxy SPOE agent: SPOP 2.0 as HAProxy 2.6 speaks it.
//!
//! - [`varint`], [`data`], [`frame`]: a pure codec (parse from a buffer,
//!   "incomplete" instead of blocking; exact encoding).
//! - [`conn`]: buffered frame I/O on a socket, with timeouts.
//! - [`server`]: the listener, the handshake, NOTIFY -> decision -> ACK,
//!   limits and graceful shutdown.

pub mod conn;
pub mod data;
pub mod error;
pub mod frame;
pub mod server;
pub mod varint;

pub use error::{ErrorKind, SpopError, Status};
pub use frame::Limits;
pub use server::{serve, serve_connection, serve_with, Config, Listener};
