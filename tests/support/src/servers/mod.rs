//! Real servers for end-to-end tests and benchmarks: the Debian binaries
//! (HAProxy, nginx, Varnish, etcd, Redis) and `rctl serve`, each a
//! [`Proc`](crate::proc::Proc) on loopback with its own configuration,
//! data and logs in a directory of the test's.
//!
//! Each module starts one kind of server and gives access to what it
//! logs. A new server is one more module of the same shape: write its
//! configuration into the directory, [`Proc::spawn`](crate::proc::Proc::spawn)
//! it, [`Proc::wait_ready`](crate::proc::Proc::wait_ready) on its port or
//! a log line, read its logs. Whether a program is installed:
//! [`require`](crate::skip::require) (a failure under CI).

pub mod etcd;
pub mod haproxy;
pub mod nginx;
pub mod pki;
pub mod redis;
pub mod serve;
pub mod varnish;
