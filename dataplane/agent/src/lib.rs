//! The live HTTP enforcement agent of rctl (`rctl serve`): the same engine
//! and artifact as `rctl eval` and `rctl dry-run`, answering the edge
//! proxies an operator already runs.
//!
//! - [`judge`]: the generation in force and how a request is decided.
//! - [`http`]: the HTTP check endpoint (nginx `auth_request`, Envoy
//!   ext_authz).
//! - [`control`]: the control socket `rctl apply` and `rctl status` use.
//! - [`apply`]: one apply of both planes (prepare the agent, switch the
//!   packet plane, commit the agent), for `rctl apply` and the fleet
//!   agent; the packet plane is a trait, so this crate stays free of XDP.
//! - [`metrics`], [`reqlog`]: Prometheus counters and the matched-request
//!   log, both [`judge::Observer`]s.
//! - [`top`], [`tap`]: the recent traffic by key (`rctl top`), and every
//!   decided request streamed to a reader (`rctl tap`), both off the
//!   request path.
//! - [`serve`]: `rctl serve`: every listener, and the graceful drain.
//! - [`listen`], [`peers`], [`shutdown`]: endpoints, who may connect and
//!   how often, and the shutdown signal the listeners share.
//! - [`spop`]: the HAProxy SPOE agent (SPOP 2.0).
//! - [`haproxy_stats`]: HAProxy's stats socket, for the requests it let
//!   through unchecked (`rctl status --haproxy-socket`).
//!
//! The engine library (`rctl-dataplane`) stays free of async runtimes and
//! network clients; everything that listens on a socket lives here.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apply;
mod byrule;
pub mod control;
pub mod event;
pub mod haproxy_stats;
pub mod health;
pub mod http;
pub mod judge;
pub mod listen;
pub mod metrics;
pub mod peers;
pub mod persist;
pub mod proxies;
pub mod proxy_stats;
mod records;
pub mod reqlog;
pub mod serve;
pub mod shutdown;
pub mod spop;
pub mod tap;
pub mod top;

/// Seconds since the epoch.
pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
