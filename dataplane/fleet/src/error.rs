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
        // The TLS error that explains a "transport error" is a few
        // sources down (tonic, hyper, then rustls's alert or verdict).
        let message = match &e {
            E::GRpcStatus(s) => format!(
                "etcd: {} ({:?}){}",
                s.message(),
                s.code(),
                causes(s.message(), s)
            ),
            other => format!("etcd: {other}{}", causes(&other.to_string(), other)),
        };
        match tls_hint(&message) {
            // Not an outage: retrying will not help.
            Some(hint) => FleetError {
                kind: ErrorKind::Refused,
                message: format!("{hint} ({message})"),
            },
            None => FleetError { kind, message },
        }
    }
}

/// What a TLS failure in `message` (an error and its causes) means, and
/// what to do about it.
fn tls_hint(message: &str) -> Option<&'static str> {
    if message.contains("invalid peer certificate") {
        Some(
            "etcd's certificate is not trusted: give the CA that signed it with --etcd-ca, \
             and --etcd-server-name if the certificate does not name the endpoint's host",
        )
    } else if message.contains("received fatal alert") {
        Some(CLIENT_CERT_REFUSED)
    } else {
        None
    }
}

/// What to do when etcd refuses the client's certificate (or its absence).
pub(crate) const CLIENT_CERT_REFUSED: &str =
    "etcd refused the TLS handshake: it checks client certificates (--client-cert-auth), so give \
     --etcd-cert and --etcd-key with a certificate signed by a CA in its --trusted-ca-file";

/// The sources of `e` (whose own message is `said`), each as `: cause`,
/// skipping what was said already.
fn causes(said: &str, e: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut seen = vec![said.to_string()];
    let mut next = e.source();
    while let Some(c) = next {
        let m = c.to_string();
        if !seen.iter().any(|s| s.contains(&m)) {
            out.push_str(": ");
            out.push_str(&m);
            seen.push(m);
        }
        next = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a message and a source.
    #[derive(Debug)]
    struct Wrap(&'static str, Option<Box<Wrap>>);

    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|w| w as _)
        }
    }

    #[test]
    fn the_causes_are_followed_down_once_each() {
        let rustls = Wrap("received fatal alert: BadCertificate", None);
        let hyper = Wrap("connection error", Some(Box::new(rustls)));
        let tonic = Wrap("transport error", Some(Box::new(hyper)));
        let status = Wrap("status: transport error", Some(Box::new(tonic)));
        assert_eq!(
            causes("transport error", &status),
            ": connection error: received fatal alert: BadCertificate"
        );
    }

    #[test]
    fn tls_failures_say_which_flag_to_give() {
        let refused = tls_hint("etcd: transport error: received fatal alert: BadCertificate");
        assert!(refused.is_some_and(|h| h.contains("--etcd-cert") && h.contains("--etcd-key")));
        let untrusted = tls_hint("etcd: invalid peer certificate: UnknownIssuer");
        assert!(untrusted.is_some_and(|h| h.contains("--etcd-ca")));
        assert_eq!(tls_hint("etcd: connection refused (Unavailable)"), None);
    }
}
