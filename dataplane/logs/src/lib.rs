//! Access logs as dry-run input. HAProxy's (`option httplog` and any
//! `log-format`), nginx's (`combined` and any `log_format`, `escape=json`
//! included), varnishncsa's (its default and any `-F`) and Wikimedia's
//! `webrequest` (JSON lines; Parquet behind the `parquet` feature) are
//! read into the requests the engine decides, with the set of fields each
//! format carries, so that a rule reading a field a log lacks is reported
//! as not judged instead of guessed.
//!
//! Reading is built for volume: big reads, newlines found with memchr,
//! fields parsed in place and lent from the read buffer, nothing
//! allocated per line, and every line's length bounded (see
//! [`lines`]). Plain, gzip and zstd files are read, whole directories,
//! and standard input; several inputs are merged in time order.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod address;
mod bytes;
mod combined;
pub mod detect;
pub mod follow;
pub mod format;
pub mod haproxy;
pub mod input;
pub mod lines;
pub mod nginx;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod record;
pub mod reorder;
pub mod run;
pub mod template;
pub mod time;
pub mod varnish;
pub mod webrequest;

pub use format::Format;
pub use run::{read_requests, replay, LogError, Options, Summary};
