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
//! and [`requestctl`], the objects requestctl itself keeps (its YAML
//! tree), from which requestctl writes its own VCL.
//!
//! [`pcre`] writes rctl's regexes for both (PCRE2 without UTF).
//!
//! [`check`] checks every value an operator gives (agent addresses,
//! paths, backend names, header names, hosts, sites, timeouts) before it
//! goes into a configuration, the same way for every target, and refuses
//! it with an [`Error`] naming the option.
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
pub mod nginx_module;
pub mod pcre;
pub mod reads;
pub mod requestctl;
pub mod vcl;

pub mod check;
pub mod coverage;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

pub use check::is_tchar;

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
    /// Parses `unix:PATH`, `tcp:ADDR:PORT` or `ADDR:PORT` (`--agent`): the
    /// path as [`check::path`] takes it, no longer than a socket address
    /// holds; ADDR an IP address.
    pub fn parse(s: &str) -> Result<Agent, Error> {
        let a = if let Some(p) = s.strip_prefix("unix:") {
            Agent::Unix(PathBuf::from(p))
        } else {
            let a = s.strip_prefix("tcp:").unwrap_or(s);
            Agent::Tcp(
                a.parse()
                    .map_err(|_| Error::new(check::AGENT, ErrorKind::Agent(s.to_string())))?,
            )
        };
        check::agent(check::AGENT, &a)?;
        Ok(a)
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

/// Why a configuration could not be written: a value for one of the
/// options that the target's configuration cannot hold as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    option: &'static str,
    kind: ErrorKind,
}

/// The kinds of [`Error`], each with the value refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An agent address that is not `unix:/ABSOLUTE/PATH`, `tcp:ADDR:PORT`
    /// or `ADDR:PORT` (an IP address and a port), or whose path
    /// [`check::path`] refuses or is too long for a unix socket.
    Agent(String),
    /// A path or directory with characters the configuration cannot hold
    /// unquoted (see [`check::path`]).
    Path(String),
    /// A name for a section of the proxy's configuration (a backend) that
    /// is not letters, digits and `-_.:`.
    Name(String),
    /// A header name that is not an HTTP token.
    HeaderName(String),
    /// A header name too long for one line of HAProxy's configuration.
    HeaderTooLong(String),
    /// A host that is neither an IP address nor a DNS name.
    Host(String),
    /// A site name that is not a name of the rule language (letters,
    /// digits, `-_.`).
    Site(String),
    /// Text for the files' comments holding a control character.
    Text(String),
    /// A timeout of zero or more than a minute.
    Timeout(u64),
}

impl Error {
    fn new(option: &'static str, kind: ErrorKind) -> Error {
        Error { option, kind }
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The option whose value was refused, as `rctl emit` spells its flag
    /// (`--agent`, `--config-dir`, …), or the field name for options that
    /// are no flag (`source`).
    pub fn option(&self) -> &'static str {
        self.option
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.option, self.kind)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Agent(s) => write!(
                f,
                "agent address {s:?}: expected unix:/ABSOLUTE/PATH (at most {} bytes of letters, digits and {}), tcp:ADDR:PORT or ADDR:PORT (ADDR an IP address)",
                check::MAX_SOCKET_PATH,
                check::PATH_PUNCTUATION
            ),
            ErrorKind::Path(s) => write!(
                f,
                "{s:?} cannot be written in the proxy's configuration: use letters, digits and {} only",
                check::PATH_PUNCTUATION
            ),
            ErrorKind::Name(s) => write!(
                f,
                "{s:?} cannot name a section of the proxy's configuration: use letters, digits and -_.: only"
            ),
            ErrorKind::HeaderName(s) => write!(
                f,
                "header {s:?} is not an HTTP token: use letters, digits and !#$%&'*+-.^_`|~"
            ),
            ErrorKind::HeaderTooLong(s) => write!(
                f,
                "the header name {:?}… is {} bytes: HAProxy's configuration lines hold at most {} bytes of it",
                s.chars().take(40).collect::<String>(),
                s.len(),
                haproxy_spoe::MAX_HEADER_NAME
            ),
            ErrorKind::Host(s) => write!(
                f,
                "{s:?} is neither an IP address nor a host name (letters, digits, - and . only)"
            ),
            ErrorKind::Site(s) => write!(
                f,
                "{s:?} is not a site name: use letters, digits and -_. only"
            ),
            ErrorKind::Text(s) => write!(f, "{s:?} holds a control character"),
            ErrorKind::Timeout(ms) => write!(f, "a timeout of {ms} ms: use 1 to 60000 ms"),
        }
    }
}

impl std::error::Error for Error {}

/// Checks extra header names (`--header`) and lowercases them.
pub fn header_names(names: &[String]) -> Result<Vec<String>, Error> {
    names.iter().map(|n| check::header("--header", n)).collect()
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
