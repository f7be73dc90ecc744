//! Lowered `test` blocks: synthetic traffic and the verdicts expected of it.
//! The compiler checks them; a data plane runs them (`rctl test`).

use crate::source::Span;
use std::net::IpAddr;

/// One `test "name" { … }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestCase {
    /// The name.
    pub name: String,
    /// The site whose rules apply; `None`: every rule.
    pub site: Option<String>,
    /// Traffic, in declaration order; a runner interleaves it by time.
    pub samples: Vec<Sample>,
    /// Traffic read from files instead (a test has samples or replays,
    /// not both).
    pub replays: Vec<Replay>,
    /// What must hold.
    pub expects: Vec<Expect>,
    /// The test's span, for failure reports.
    pub span: Span,
}

/// `replay [label] "file" [format "F"] [captured "H[:LEN],…"] [ip CIDR]`:
/// the requests of a real log or capture, judged in time order as `rctl
/// dry-run` judges them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// Label for `expect for label …`.
    pub label: Option<String>,
    /// The file, relative to the source file's folder made whole.
    pub path: std::path::PathBuf,
    /// The log's format, as `--log-format` takes it (detected if `None`;
    /// a capture needs none).
    pub format: Option<String>,
    /// The request headers an HAProxy log captured, in its slots' order
    /// (lower-case; empty for a slot that holds no header), each with the
    /// length HAProxy cuts values at, if known: `captured
    /// "User-Agent:64,Host"`, as `--capture-request-header` takes them.
    pub captured: Vec<(String, Option<usize>)>,
    /// Only the requests of clients in this network.
    pub net: Option<(IpAddr, u8)>,
    /// The replay line.
    pub span: Span,
}

impl Replay {
    /// Whether a request from `ip` is one of this replay's.
    pub fn selects(&self, ip: IpAddr) -> bool {
        let Some((net, len)) = self.net else {
            return true;
        };
        match (ip, net) {
            (IpAddr::V4(a), IpAddr::V4(n)) => {
                let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(a) & m == u32::from(n) & m
            }
            (IpAddr::V6(a), IpAddr::V6(n)) => {
                let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(a) & m == u128::from(n) & m
            }
            _ => false,
        }
    }
}

/// What a sample sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SampleKind {
    /// HTTP requests, evaluated on the request path.
    Request {
        /// Method.
        method: String,
        /// Host.
        host: String,
        /// Path, with an optional `?query`.
        target: String,
        /// Headers in order.
        headers: Vec<(String, String)>,
    },
    /// Packets, evaluated on the packet path (what XDP decides).
    Packet {
        /// IP protocol.
        proto: crate::ir::Proto,
        /// TCP SYN without ACK (a new connection).
        syn: bool,
    },
}

/// `request {…}` or `packet {…}`: `count` copies spread evenly over
/// `over_ms`, starting at `start_ms` into the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Label for `expect for label …`.
    pub label: Option<String>,
    /// Request or packet.
    pub kind: SampleKind,
    /// Client address.
    pub ip: IpAddr,
    /// Destination address (`dst_ip`), if the test gives one.
    pub dst: Option<IpAddr>,
    /// Destination port.
    pub port: u16,
    /// How many.
    pub count: u32,
    /// Offset of the first, in ms.
    pub start_ms: u64,
    /// Span of all copies, in ms (0: all at once).
    pub over_ms: u64,
}

impl Sample {
    /// Time of copy `i`, in ms from the test's start.
    pub fn time_of(&self, i: u32) -> u64 {
        if self.count == 0 {
            return self.start_ms;
        }
        self.start_ms + self.over_ms * u64::from(i) / u64::from(self.count)
    }
}

/// How many of the selected samples must have the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// Every one.
    All,
    /// Not one.
    None,
    /// The first one.
    First,
    /// The last one.
    Last,
    /// Exactly this many.
    Count(u32),
}

/// The verdict kinds a test can expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No rule decided.
    Pass,
    /// An allow rule decided.
    Allow,
    /// A deny rule decided.
    Deny,
    /// A throttle rule decided.
    Throttle,
    /// A drop rule decided.
    Drop,
    /// A shadow or `log` rule matched (whatever decided).
    Logged,
}

impl Outcome {
    /// As written.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::Throttle => "throttle",
            Outcome::Drop => "drop",
            Outcome::Logged => "logged",
        }
    }
}

/// `expect [for label] quantity verdict [by rule]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// Which samples; `None`: all.
    pub label: Option<String>,
    /// How many.
    pub quantity: Quantity,
    /// Which verdict.
    pub outcome: Outcome,
    /// Which rule decided (or, for `logged`, which rule logged).
    pub rule: Option<String>,
    /// The expect line.
    pub span: Span,
}

/// One HAProxy capture slot as `captured` and `--capture-request-header`
/// take it, `NAME` or `NAME:LEN`: the header name lower-cased (empty for
/// a slot that holds no header) and the length HAProxy cuts its values
/// at, if given.
pub fn capture_slot(item: &str) -> Result<(String, Option<usize>), String> {
    let (name, len) = match item.rsplit_once(':') {
        Some((n, l)) => match l.trim().parse::<usize>() {
            Ok(l) if l > 0 => (n.trim(), Some(l)),
            _ => {
                return Err(format!(
                    "{item:?}: the length after the colon is a positive number"
                ))
            }
        },
        None => (item.trim(), None),
    };
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if !name.bytes().all(token) {
        return Err(format!("{name:?} is not a header name"));
    }
    Ok((name.to_ascii_lowercase(), len))
}
