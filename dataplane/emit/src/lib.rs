//! Configuration for the edge proxies in front of `rctl serve`, written
//! from a compiled ruleset (`rctl emit`).
//!
//! One module per target:
//! - [`haproxy_spoe`]: HAProxy 2.6+ asks the agent over SPOE and acts on
//!   the variables it sets;
//! - [`nginx`]: nginx 1.22+ asks the agent's HTTP check endpoint through
//!   `auth_request`.
//!
//! and one per target that decides by itself, in requestctl's shape
//! (`rctl emit vcl|haproxy`, no agent involved):
//! - [`vcl`]: Varnish 7.1+ VCL, throttles with vmod_vsthrottle;
//! - [`haproxy`]: HAProxy 2.6+ ACLs, map files and stick tables.
//!
//! [`pcre`] writes rctl's regexes for both (PCRE2 without UTF).
//!
//! [`reads`] finds what a ruleset needs from the proxy (the headers its
//! rules read) and what the proxy must answer (the statuses of its
//! blocks). Every output is deterministic: the same ruleset and options
//! give the same bytes. Everything fails open: a dead, slow or failing
//! agent lets requests through, and the proxy counts or logs them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod haproxy;
pub mod haproxy_spoe;
pub mod nginx;
pub mod pcre;
pub mod reads;
pub mod vcl;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// One file of an emitted configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// The file name (no directory).
    pub name: String,
    /// What it is and where it goes, one line.
    pub role: &'static str,
    /// The contents.
    pub text: String,
}

/// An emitted configuration: its files and what the operator should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    /// The files, in the order an operator reads them.
    pub files: Vec<File>,
    /// Things that will not work as the rules say (for example a header
    /// the proxy never forwards), one sentence each.
    pub warnings: Vec<String>,
}

/// Where the agent listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agent {
    /// A unix stream socket.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl Agent {
    /// Parses `unix:PATH`, `tcp:ADDR:PORT` or `ADDR:PORT`.
    pub fn parse(s: &str) -> Result<Agent, Error> {
        let bad = || Error::new(ErrorKind::Agent(s.to_string()));
        if let Some(p) = s.strip_prefix("unix:") {
            if !p.starts_with('/') || p.bytes().any(|b| b.is_ascii_control() || b == b'"') {
                return Err(bad());
            }
            return Ok(Agent::Unix(PathBuf::from(p)));
        }
        let a = s.strip_prefix("tcp:").unwrap_or(s);
        a.parse().map(Agent::Tcp).map_err(|_| bad())
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Agent::Unix(p) => write!(f, "unix:{}", p.display()),
            Agent::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// Why a configuration could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
}

/// The kinds of [`Error`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An agent address that is not `unix:/ABSOLUTE/PATH`, `tcp:ADDR:PORT`
    /// or `ADDR:PORT` (an IP address and a port).
    Agent(String),
    /// The target cannot reach the agent this way (nginx talks HTTP over
    /// TCP to `rctl serve --http`).
    AgentKind(String),
    /// A name for the proxy's configuration (backend, file path) with
    /// characters the proxy's configuration cannot hold.
    Name(String),
    /// A header name that is not an HTTP token (`--header`).
    HeaderName(String),
    /// A header name too long for one line of HAProxy's configuration.
    HeaderTooLong(String),
    /// A timeout of zero or more than a minute.
    Timeout(u64),
}

impl Error {
    fn new(kind: ErrorKind) -> Error {
        Error { kind }
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Agent(s) => write!(
                f,
                "agent address {s:?}: expected unix:/ABSOLUTE/PATH, tcp:ADDR:PORT or ADDR:PORT (ADDR an IP address)"
            ),
            ErrorKind::AgentKind(s) => write!(f, "{s}"),
            ErrorKind::Name(s) => write!(
                f,
                "{s:?} cannot be used in the proxy's configuration: use letters, digits and -_./: only"
            ),
            ErrorKind::HeaderName(s) => write!(
                f,
                "{s:?} is not a header name: use letters, digits and !#$%&'*+-.^_`|~"
            ),
            ErrorKind::HeaderTooLong(s) => write!(
                f,
                "the header name {:?}… is {} bytes: HAProxy's configuration lines hold at most {} bytes of it",
                &s[..s.len().min(40)],
                s.len(),
                haproxy_spoe::MAX_HEADER_NAME
            ),
            ErrorKind::Timeout(ms) => write!(
                f,
                "a timeout of {ms} ms: use 1 to 60000 ms"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Whether `b` may appear in an HTTP header name (RFC 9110 `tchar`).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks extra header names (`--header`) and lowercases them.
pub fn header_names(names: &[String]) -> Result<Vec<String>, Error> {
    names
        .iter()
        .map(|n| {
            if n.is_empty() || !n.bytes().all(is_tchar) {
                Err(Error::new(ErrorKind::HeaderName(n.clone())))
            } else {
                Ok(n.to_ascii_lowercase())
            }
        })
        .collect()
}

/// Checks a timeout in milliseconds.
fn timeout(ms: u64) -> Result<u64, Error> {
    if (1..=60_000).contains(&ms) {
        Ok(ms)
    } else {
        Err(Error::new(ErrorKind::Timeout(ms)))
    }
}

/// Checks a name that goes into a proxy's configuration unquoted.
fn plain_name(s: &str) -> Result<&str, Error> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:".contains(&b))
    {
        Ok(s)
    } else {
        Err(Error::new(ErrorKind::Name(s.to_string())))
    }
}

/// Compiles rule source for the unit tests.
#[cfg(test)]
fn test_ruleset(src: &str) -> rctl_compiler::ir::Ruleset {
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    c.ruleset.expect("compiles")
}

/// The header of every emitted file: what it is, what it was made from.
fn banner(comment: &str, title: &str, source: &str, lines: &[&str]) -> String {
    let mut s = format!("{comment} {title}\n{comment} Written by `rctl emit` for {source}.\n");
    for l in lines {
        if l.is_empty() {
            s.push_str(comment);
            s.push('\n');
        } else {
            s.push_str(&format!("{comment} {l}\n"));
        }
    }
    s.push('\n');
    s
}
