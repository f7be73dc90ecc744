//! The fleet's errors: a kind to act on and a message that says what to
//! do.

use std::fmt;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// etcd did not answer, or has no leader (a majority is down): the
    /// operation may be retried.
    Unavailable,
    /// etcd refused the request (permissions, a bad TLS setup, a value
    /// over its size limit).
    Refused,
    /// What etcd holds is not what rctl wrote: a missing or corrupt chunk,
    /// unreadable metadata, a hash that does not match.
    Corrupt,
    /// An artifact of a format version this rctl does not read.
    FormatVersion,
    /// An artifact that does not decode, or a bad argument.
    Invalid,
    /// Another push changed the history at the same time, past the
    /// retries.
    Conflict,
    /// Local files: the state directory, an artifact, a certificate.
    Io,
}

/// An error of the fleet crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError {
    /// What kind.
    pub kind: ErrorKind,
    /// What happened, and what to do.
    pub message: String,
}

impl FleetError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> FleetError {
        FleetError {
            kind,
            message: message.into(),
        }
    }

    /// The same error, its message prefixed with `what`.
    pub fn context(self, what: impl fmt::Display) -> FleetError {
        FleetError {
            kind: self.kind,
            message: format!("{what}: {}", self.message),
        }
    }
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FleetError {}

impl From<etcd_client::Error> for FleetError {
    fn from(e: etcd_client::Error) -> FleetError {
        use etcd_client::Error as E;
        let kind = match &e {
            E::GRpcStatus(s) => match s.code() {
                tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled
                | tonic::Code::Unknown
                | tonic::Code::Aborted
                | tonic::Code::Internal => ErrorKind::Unavailable,
                _ => ErrorKind::Refused,
            },
            E::TransportError(_) | E::IoError(_) | E::WatchError(_) | E::LeaseKeepAliveError(_) => {
                ErrorKind::Unavailable
            }
            _ => ErrorKind::Refused,
        };
        let message = match &e {
            E::GRpcStatus(s) => format!("etcd: {} ({:?})", s.message(), s.code()),
            other => format!("etcd: {other}"),
        };
        FleetError { kind, message }
    }
}
