//! The loader's errors: a kind to act on, and a message that says what
//! happened and what to do.

use std::fmt;

/// Why the packet plane could not be loaded, applied, read or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderError {
    kind: ErrorKind,
    message: String,
}

/// The kinds of [`LoaderError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The process lacks root, or CAP_BPF and CAP_NET_ADMIN.
    Privileges,
    /// No bpffs is mounted where the pins go.
    Bpffs,
    /// No such interface, an invalid name, or nothing of rctl's on it.
    Interface,
    /// The object or a map in it is not what this rctl expects (another
    /// build of the XDP program), or the verifier refused it.
    Object,
    /// The ruleset's packet plane does not fit the program's tables.
    Tables,
    /// A state folder or file that someone else could change, or that
    /// could not be read or written.
    State,
    /// A bpf(2) call or another system call failed (the message has the
    /// errno).
    Kernel,
    /// The kernel's clock cannot be read.
    Clock,
}

impl LoaderError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> LoaderError {
        LoaderError {
            kind,
            message: message.into(),
        }
    }

    /// What kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What happened, and what to do.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for LoaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoaderError {}

impl From<rctl_os::fs::FsError> for LoaderError {
    fn from(e: rctl_os::fs::FsError) -> LoaderError {
        LoaderError::new(ErrorKind::State, e.message)
    }
}

impl From<rctl_dataplane::xdp::TablesError> for LoaderError {
    fn from(e: rctl_dataplane::xdp::TablesError) -> LoaderError {
        LoaderError::new(ErrorKind::Tables, e.to_string())
    }
}

/// A kernel (bpf, system call) error.
pub(crate) fn err(m: impl Into<String>) -> LoaderError {
    LoaderError::new(ErrorKind::Kernel, m)
}

/// An error of the object (a map or program missing, refused by the
/// verifier).
pub(crate) fn obj(m: impl Into<String>) -> LoaderError {
    LoaderError::new(ErrorKind::Object, m)
}
