//! Errors of the SPOP codec, connections and listener, and the status
//! codes a DISCONNECT frame carries.

use std::fmt;

/// The status codes of DISCONNECT frames (doc/SPOE.txt §3.5). The reasons
/// are HAProxy's own strings (`spoe_frm_err_reasons` in `flt_spoe.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Status {
    /// 0: normal (no error occurred): a clean close.
    Normal = 0,
    /// 1: I/O error.
    Io = 1,
    /// 2: a timeout occurred.
    Timeout = 2,
    /// 3: frame is too big.
    TooBig = 3,
    /// 4: invalid frame received.
    Invalid = 4,
    /// 5: version value not found.
    NoVersion = 5,
    /// 6: max-frame-size value not found.
    NoFrameSize = 6,
    /// 7: capabilities value not found.
    NoCapabilities = 7,
    /// 8: unsupported version.
    BadVersion = 8,
    /// 9: max-frame-size too big or too small.
    BadFrameSize = 9,
    /// 10: payload fragmentation is not supported.
    FragmentationNotSupported = 10,
    /// 11: invalid interlaced frames.
    Interlaced = 11,
    /// 12: frame-id not found.
    FrameIdNotFound = 12,
    /// 13: resource allocation error (a limit of this agent).
    Resource = 13,
    /// 99: an unknown error occurred.
    Unknown = 99,
}

impl Status {
    /// The code on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The status for a code read from a peer (unknown codes are kept
    /// only as [`Status::Unknown`]).
    pub fn from_code(code: u64) -> Status {
        use Status::*;
        match code {
            0 => Normal,
            1 => Io,
            2 => Timeout,
            3 => TooBig,
            4 => Invalid,
            5 => NoVersion,
            6 => NoFrameSize,
            7 => NoCapabilities,
            8 => BadVersion,
            9 => BadFrameSize,
            10 => FragmentationNotSupported,
            11 => Interlaced,
            12 => FrameIdNotFound,
            13 => Resource,
            _ => Unknown,
        }
    }

    /// HAProxy's reason phrase for the code.
    pub fn reason(self) -> &'static str {
        use Status::*;
        match self {
            Normal => "normal",
            Io => "I/O error",
            Timeout => "a timeout occurred",
            TooBig => "frame is too big",
            Invalid => "invalid frame received",
            NoVersion => "version value not found",
            NoFrameSize => "max-frame-size value not found",
            NoCapabilities => "capabilities value not found",
            BadVersion => "unsupported version",
            BadFrameSize => "max-frame-size too big or too small",
            FragmentationNotSupported => "fragmentation not supported",
            Interlaced => "invalid interlaced frames",
            FrameIdNotFound => "frame-id not found",
            Resource => "resource allocation error",
            Unknown => "an unknown error occurred",
        }
    }
}

/// What went wrong. Codec kinds come with the byte offset in the frame
/// (counted from the first byte after the 4-byte length) in
/// [`SpopError::offset`].
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Data inside a complete frame claims more bytes than the frame has.
    Truncated {
        /// What was being read.
        what: &'static str,
    },
    /// A varint runs past 10 bytes or past `u64::MAX`.
    BadVarint,
    /// A typed-data type outside 0..=9.
    UnknownDataType(u8),
    /// An INT32 or UINT32 whose varint is outside the type's range.
    IntRange {
        /// The data type (2 or 3).
        data_type: u8,
    },
    /// The length prefix exceeds the frame size in force.
    FrameTooBig {
        /// Announced length.
        len: u32,
        /// The maximum in force (ours before HELLO, negotiated after).
        max: u32,
    },
    /// A frame shorter than its fixed header (type, flags, two ids).
    FrameTooShort {
        /// Announced length.
        len: u32,
    },
    /// A frame type SPOP 2.0 does not define.
    UnknownFrameType(u8),
    /// A fragment (FIN clear, or a frame of type UNSET): this agent does
    /// not announce `fragmentation`.
    Fragmented,
    /// HELLO and DISCONNECT frames must carry stream-id and frame-id 0.
    NonZeroIds,
    /// More messages in one NOTIFY than [`crate::spop::Limits::max_messages`].
    TooManyMessages {
        /// The limit.
        max: usize,
    },
    /// More arguments in one NOTIFY than [`crate::spop::Limits::max_args`].
    TooManyArgs {
        /// The limit.
        max: usize,
    },
    /// A string longer than [`crate::spop::Limits::max_string`].
    StringTooLong {
        /// Its length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// An action type other than set-var (1) and unset-var (2).
    UnknownAction(u8),
    /// An action with the wrong number of arguments.
    BadActionArgs {
        /// The action type.
        action: u8,
        /// Its NB-ARGS.
        nb_args: u8,
    },
    /// A variable scope outside 0..=4.
    UnknownScope(u8),
    /// A HELLO or DISCONNECT item with a value of the wrong type.
    BadItem {
        /// The item's key.
        key: &'static str,
    },
    /// The HAPROXY-HELLO has no `supported-versions`.
    NoVersion,
    /// The HAPROXY-HELLO has no `max-frame-size`.
    NoMaxFrameSize,
    /// The HAPROXY-HELLO has no `capabilities`.
    NoCapabilities,
    /// HAProxy supports no SPOP 2.x.
    UnsupportedVersion,
    /// HAProxy's max-frame-size is below SPOP's minimum of 256 bytes.
    BadMaxFrameSize {
        /// What HAProxy announced.
        value: u64,
    },
    /// A frame that is valid but not in this state (a NOTIFY before the
    /// HELLO, a second HELLO, an agent's frame type sent to the agent).
    UnexpectedFrame {
        /// The frame type.
        frame_type: u8,
        /// The state it arrived in.
        state: &'static str,
    },
    /// The peer sent nothing for the idle timeout, or stalled inside a
    /// frame for the frame timeout.
    Timeout {
        /// `hello`, `idle` or `frame`.
        what: &'static str,
    },
    /// The peer closed the connection inside a frame.
    ClosedMidFrame,
    /// More connections than the agent serves at once.
    TooManyConnections {
        /// The limit.
        max: usize,
    },
    /// A peer this listener does not serve, or one over its share of
    /// connections (see [`crate::peers`]).
    Refused(String),
    /// Reading or writing the socket failed.
    Io(std::io::Error),
    /// `Listener::bind` got an address that is neither `unix:PATH` nor
    /// `tcp:ADDR`.
    BadAddress(String),
    /// The unix socket's path is unusable: a non-socket file is in the way,
    /// a live agent listens there, or the folder is writable by others.
    UnsafePath(String),
}

impl ErrorKind {
    /// The DISCONNECT status this error is reported with.
    pub fn status(&self) -> Status {
        use ErrorKind::*;
        match self {
            Truncated { .. }
            | BadVarint
            | UnknownDataType(_)
            | IntRange { .. }
            | FrameTooShort { .. }
            | UnknownFrameType(_)
            | NonZeroIds
            | UnknownAction(_)
            | BadActionArgs { .. }
            | UnknownScope(_)
            | BadItem { .. }
            | UnexpectedFrame { .. } => Status::Invalid,
            FrameTooBig { .. } => Status::TooBig,
            Fragmented => Status::FragmentationNotSupported,
            TooManyMessages { .. }
            | TooManyArgs { .. }
            | StringTooLong { .. }
            | TooManyConnections { .. }
            | Refused(_) => Status::Resource,
            NoVersion => Status::NoVersion,
            NoMaxFrameSize => Status::NoFrameSize,
            NoCapabilities => Status::NoCapabilities,
            UnsupportedVersion => Status::BadVersion,
            BadMaxFrameSize { .. } => Status::BadFrameSize,
            Timeout { .. } => Status::Timeout,
            ClosedMidFrame | Io(_) => Status::Io,
            BadAddress(_) | UnsafePath(_) => Status::Unknown,
        }
    }

    /// A short stable label for the [`crate::judge::Observer`]:
    /// `spop-frame` (a frame this agent refuses), `spop-handshake`,
    /// `spop-timeout`, `spop-io`, `spop-limit`, `spop-peer` or
    /// `spop-listener`.
    pub fn label(&self) -> &'static str {
        use ErrorKind::*;
        match self {
            NoVersion
            | NoMaxFrameSize
            | NoCapabilities
            | UnsupportedVersion
            | BadMaxFrameSize { .. } => "spop-handshake",
            Timeout { .. } => "spop-timeout",
            ClosedMidFrame | Io(_) => "spop-io",
            TooManyMessages { .. }
            | TooManyArgs { .. }
            | StringTooLong { .. }
            | TooManyConnections { .. } => "spop-limit",
            Refused(_) => "spop-peer",
            BadAddress(_) | UnsafePath(_) => "spop-listener",
            _ => "spop-frame",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match self {
            Truncated { what } => write!(f, "{what} runs past the end of the frame"),
            BadVarint => write!(f, "varint longer than 10 bytes or above 2^64-1"),
            UnknownDataType(t) => write!(f, "unknown data type {t} (SPOP defines 0 to 9)"),
            IntRange { data_type } => write!(f, "integer out of range for data type {data_type}"),
            FrameTooBig { len, max } => {
                write!(f, "frame of {len} bytes exceeds max-frame-size {max}")
            }
            FrameTooShort { len } => {
                write!(f, "frame of {len} bytes is shorter than a frame header (7)")
            }
            UnknownFrameType(t) => write!(
                f,
                "frame type {t} is not one HAProxy sends (1 hello, 2 disconnect, 3 notify)"
            ),
            Fragmented => write!(
                f,
                "fragmented frame, but this agent does not announce fragmentation"
            ),
            NonZeroIds => write!(
                f,
                "HELLO and DISCONNECT frames must have stream-id and frame-id 0"
            ),
            TooManyMessages { max } => write!(f, "more than {max} messages in one NOTIFY"),
            TooManyArgs { max } => write!(f, "more than {max} arguments in one NOTIFY"),
            StringTooLong { len, max } => {
                write!(f, "string of {len} bytes exceeds the limit of {max}")
            }
            UnknownAction(t) => write!(f, "unknown action type {t} (1 set-var, 2 unset-var)"),
            BadActionArgs { action, nb_args } => {
                write!(
                    f,
                    "action {action} with {nb_args} arguments (set-var takes 3, unset-var 2)"
                )
            }
            UnknownScope(s) => write!(f, "unknown variable scope {s} (0 to 4)"),
            BadItem { key } => write!(f, "item \"{key}\" has a value of the wrong type"),
            NoVersion => write!(f, "HAPROXY-HELLO without \"supported-versions\""),
            NoMaxFrameSize => write!(f, "HAPROXY-HELLO without \"max-frame-size\""),
            NoCapabilities => write!(f, "HAPROXY-HELLO without \"capabilities\""),
            UnsupportedVersion => write!(f, "the peer supports no SPOP 2.x version"),
            BadMaxFrameSize { value } => {
                write!(f, "max-frame-size {value} is below the minimum of 256")
            }
            UnexpectedFrame { frame_type, state } => {
                write!(f, "frame type {frame_type} not expected {state}")
            }
            Timeout { what } => write!(f, "{what} timeout"),
            ClosedMidFrame => write!(f, "the peer closed the connection inside a frame"),
            TooManyConnections { max } => write!(f, "more than {max} connections"),
            Refused(why) => write!(f, "{why}"),
            Io(e) => write!(f, "{e}"),
            BadAddress(a) => write!(
                f,
                "listen address {a:?} is neither unix:PATH nor tcp:HOST:PORT"
            ),
            UnsafePath(why) => write!(f, "{why}"),
        }
    }
}

/// An error of the SPOP codec, a connection or the listener.
#[derive(Debug)]
pub struct SpopError {
    kind: ErrorKind,
    offset: Option<usize>,
}

impl SpopError {
    /// An error with no position.
    pub fn new(kind: ErrorKind) -> SpopError {
        SpopError { kind, offset: None }
    }

    /// An error at byte `offset` of a frame.
    pub fn at(kind: ErrorKind, offset: usize) -> SpopError {
        SpopError {
            kind,
            offset: Some(offset),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The byte offset in the frame (from the frame type byte, after the
    /// 4-byte length), for codec errors.
    pub fn offset(&self) -> Option<usize> {
        self.offset
    }

    /// The DISCONNECT status that reports this error to the peer.
    pub fn status(&self) -> Status {
        self.kind.status()
    }
}

impl fmt::Display for SpopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(o) => write!(f, "at byte {o} of the frame: {}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl std::error::Error for SpopError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for SpopError {
    fn from(e: std::io::Error) -> SpopError {
        SpopError::new(ErrorKind::Io(e))
    }
}
