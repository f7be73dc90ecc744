//! SPOP 2.0 frames: a pure codec. [`parse`] reads one frame from the
//! start of a buffer and answers a checked [`Frame`] borrowing the buffer,
//! [`Parsed::Incomplete`] when more bytes are needed, or an error naming
//! the offset; it never panics and allocates nothing. [`Encoder`] writes
//! frames exactly.
//!
//! ```text
//! <FRAME-LENGTH:4 bytes, big-endian> <FRAME>
//! FRAME    : <FRAME-TYPE:1 byte> <FLAGS:4 bytes, big-endian> <STREAM-ID:varint> <FRAME-ID:varint> <PAYLOAD>
//! PAYLOAD  : <LIST-OF-MESSAGES> (NOTIFY) | <LIST-OF-ACTIONS> (ACK) | <KV-LIST> (HELLO, DISCONNECT)
//! LIST-OF-MESSAGES : [ <MESSAGE-NAME> <NB-ARGS:1 byte> <KV-LIST of NB-ARGS items> ... ]
//! LIST-OF-ACTIONS  : [ <ACTION-TYPE:1 byte> <NB-ARGS:1 byte> <ACTION-ARGS> ... ]
//! ```
//!
//! Offsets in errors count from the frame type byte (the first byte after
//! the length). The length counts the frame without its own 4 bytes, and
//! is what `max-frame-size` bounds (HAProxy's `spoe_recv_frame`).

use super::data::{encode_bytes, encode_kv, KvList, Reader, Value};
use super::error::{ErrorKind, SpopError, Status};

/// The FIN flag: the last (or only) fragment of a payload.
pub const FLAG_FIN: u32 = 0x0000_0001;
/// The ABORT flag: cancel a fragmented payload.
pub const FLAG_ABORT: u32 = 0x0000_0002;
/// SPOP's minimum for max-frame-size.
pub const MIN_FRAME_SIZE: u32 = 256;
/// Type, flags and two one-byte ids: the shortest frame.
pub const MIN_FRAME_LEN: u32 = 7;

/// Frame types (doc/SPOE.txt §3.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// 1: HAProxy opens a connection (or checks health).
    HaproxyHello = 1,
    /// 2: HAProxy closes, or answers an AGENT-DISCONNECT.
    HaproxyDisconnect = 2,
    /// 3: request information for the agent.
    Notify = 3,
    /// 101: the agent's answer to HAPROXY-HELLO.
    AgentHello = 101,
    /// 102: the agent closes.
    AgentDisconnect = 102,
    /// 103: the agent's answer to a NOTIFY.
    Ack = 103,
}

impl FrameType {
    /// The type for a byte, if SPOP defines it (0, UNSET, is a
    /// continuation fragment and has no frame of its own).
    pub fn from_u8(b: u8) -> Option<FrameType> {
        Some(match b {
            1 => FrameType::HaproxyHello,
            2 => FrameType::HaproxyDisconnect,
            3 => FrameType::Notify,
            101 => FrameType::AgentHello,
            102 => FrameType::AgentDisconnect,
            103 => FrameType::Ack,
            _ => return None,
        })
    }

    /// Whether the payload is a KV-LIST with both ids 0.
    fn is_hello_or_disconnect(self) -> bool {
        !matches!(self, FrameType::Notify | FrameType::Ack)
    }
}

/// Bounds on what one frame may hold. Going over one is an error, never an
/// allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame accepted (without the 4-byte length). Before the
    /// HELLO, the agent's own maximum; after, the negotiated one.
    pub max_frame_size: u32,
    /// Messages in one NOTIFY.
    pub max_messages: usize,
    /// Arguments over all messages of one NOTIFY (one message has at most
    /// 255: NB-ARGS is a byte).
    pub max_args: usize,
    /// Bytes in one string, binary or name.
    pub max_string: usize,
}

impl Default for Limits {
    /// 65,532-byte frames, 64 messages, 1,024 arguments, strings up to a
    /// frame. HAProxy offers `tune.bufsize` - 4 (16,380 by default); the
    /// agent answers the smaller of both, so up to `tune.bufsize` 64 KiB it
    /// echoes HAProxy's offer. Lowering it would fail the first request of
    /// each new connection: HAProxy encodes that NOTIFY before the
    /// handshake ends, against its own size (error 259 in HAProxy's log).
    fn default() -> Limits {
        Limits {
            max_frame_size: 65_532,
            max_messages: 64,
            max_args: 1_024,
            max_string: 65_532,
        }
    }
}

/// Variable scopes of set-var and unset-var.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Scope {
    /// 0: `proc`.
    Process = 0,
    /// 1: `sess`.
    Session = 1,
    /// 2: `txn`.
    Transaction = 2,
    /// 3: `req`.
    Request = 3,
    /// 4: `res`.
    Response = 4,
}

impl Scope {
    fn from_u8(b: u8) -> Option<Scope> {
        Some(match b {
            0 => Scope::Process,
            1 => Scope::Session,
            2 => Scope::Transaction,
            3 => Scope::Request,
            4 => Scope::Response,
            _ => return None,
        })
    }
}

/// One action of an ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    /// Type 1, three arguments.
    SetVar {
        /// Scope.
        scope: Scope,
        /// Name (HAProxy prefixes it: `txn.<var-prefix>.<name>`).
        name: &'a [u8],
        /// Value.
        value: Value<'a>,
    },
    /// Type 2, two arguments.
    UnsetVar {
        /// Scope.
        scope: Scope,
        /// Name.
        name: &'a [u8],
    },
}

const SET_VAR: u8 = 1;
const UNSET_VAR: u8 = 2;

/// One message of a NOTIFY: its name and arguments.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    /// The `spoe-message` section's name.
    pub name: &'a [u8],
    /// The arguments, by name (HAProxy may send an empty name).
    pub args: KvList<'a>,
}

/// A checked payload.
#[derive(Debug, Clone)]
pub enum Body<'a> {
    /// HELLO and DISCONNECT frames.
    Kv(KvList<'a>),
    /// NOTIFY frames.
    Messages(Messages<'a>),
    /// ACK frames.
    Actions(Actions<'a>),
}

/// One checked frame, borrowing the buffer it was parsed from.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// Its type.
    pub frame_type: FrameType,
    /// Flags (FIN is always set: fragments are refused).
    pub flags: u32,
    /// Stream id (0 for HELLO and DISCONNECT).
    pub stream_id: u64,
    /// Frame id (0 for HELLO and DISCONNECT).
    pub frame_id: u64,
    /// The payload.
    pub body: Body<'a>,
}

impl<'a> Frame<'a> {
    /// The KV list of a HELLO or DISCONNECT frame.
    pub fn kv(&self) -> Option<&KvList<'a>> {
        match &self.body {
            Body::Kv(kv) => Some(kv),
            _ => None,
        }
    }
}

/// What [`parse`] found at the start of a buffer.
#[derive(Debug, Clone)]
pub enum Parsed<'a> {
    /// A whole frame, and the bytes it took with its length.
    Frame(Frame<'a>, usize),
    /// The frame is not all there: at least `needed` more bytes.
    Incomplete {
        /// Bytes missing (at least).
        needed: usize,
    },
}

/// The length a frame announces, once its 4 bytes are there: checked
/// against the limits, so that a reader knows early that a frame will be
/// refused without waiting for its body.
pub fn frame_len(buf: &[u8], limits: &Limits) -> Result<Option<u32>, SpopError> {
    let Some(prefix) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*prefix);
    if len > limits.max_frame_size {
        return Err(SpopError::new(ErrorKind::FrameTooBig {
            len,
            max: limits.max_frame_size,
        }));
    }
    if len < MIN_FRAME_LEN {
        return Err(SpopError::new(ErrorKind::FrameTooShort { len }));
    }
    Ok(Some(len))
}

/// Parses one frame at the start of `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Result<Parsed<'a>, SpopError> {
    let Some(len) = frame_len(buf, limits)? else {
        return Ok(Parsed::Incomplete {
            needed: 4 - buf.len(),
        });
    };
    let total = 4 + len as usize;
    let Some(frame) = buf.get(4..total) else {
        return Ok(Parsed::Incomplete {
            needed: total - buf.len(),
        });
    };
    Ok(Parsed::Frame(parse_frame(frame, limits)?, total))
}

/// Parses the bytes of one frame (without its length).
pub fn parse_frame<'a>(frame: &'a [u8], limits: &Limits) -> Result<Frame<'a>, SpopError> {
    let mut r = Reader::new(frame, 0, limits.max_string);
    let t = r.u8("frame type")?;
    let flags = u32::from_be_bytes([
        r.u8("flags")?,
        r.u8("flags")?,
        r.u8("flags")?,
        r.u8("flags")?,
    ]);
    if t == 0 || flags & FLAG_FIN == 0 {
        return Err(SpopError::at(ErrorKind::Fragmented, 0));
    }
    let frame_type =
        FrameType::from_u8(t).ok_or(SpopError::at(ErrorKind::UnknownFrameType(t), 0))?;
    let ids_at = r.pos();
    let stream_id = r.varint("stream-id")?;
    let frame_id = r.varint("frame-id")?;
    if frame_type.is_hello_or_disconnect() && (stream_id, frame_id) != (0, 0) {
        return Err(SpopError::at(ErrorKind::NonZeroIds, ids_at));
    }
    let body = match frame_type {
        FrameType::Notify => Body::Messages(Messages::parse(&mut r, limits)?),
        FrameType::Ack => Body::Actions(Actions::parse(&mut r)?),
        _ => Body::Kv(KvList::parse(&mut r, None)?),
    };
    Ok(Frame {
        frame_type,
        flags,
        stream_id,
        frame_id,
        body,
    })
}

/// The messages of a NOTIFY, checked when the frame was parsed.
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    reader: Reader<'a>,
    len: usize,
}

impl<'a> Messages<'a> {
    fn parse(r: &mut Reader<'a>, limits: &Limits) -> Result<Messages<'a>, SpopError> {
        let start = r.clone();
        let (mut len, mut args) = (0usize, 0usize);
        while !r.is_empty() {
            if len == limits.max_messages {
                let max = limits.max_messages;
                return Err(SpopError::at(ErrorKind::TooManyMessages { max }, r.pos()));
            }
            r.bytes("message name")?;
            let at = r.pos();
            let n = usize::from(r.u8("NB-ARGS")?);
            args += n;
            if args > limits.max_args {
                let max = limits.max_args;
                return Err(SpopError::at(ErrorKind::TooManyArgs { max }, at));
            }
            KvList::parse(r, Some(n))?;
            len += 1;
        }
        Ok(Messages { reader: start, len })
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The messages in order.
    pub fn iter(&self) -> impl Iterator<Item = Message<'a>> + 'a {
        let mut r = self.reader.clone();
        (0..self.len).map_while(move |_| {
            // Checked when parsed; a failure would end the iteration.
            let name = r.bytes("message name").ok()?;
            let n = usize::from(r.u8("NB-ARGS").ok()?);
            let args = KvList::parse(&mut r, Some(n)).ok()?;
            Some(Message { name, args })
        })
    }
}

/// The actions of an ACK, checked when the frame was parsed.
#[derive(Debug, Clone)]
pub struct Actions<'a> {
    reader: Reader<'a>,
    len: usize,
}

impl<'a> Actions<'a> {
    fn parse(r: &mut Reader<'a>) -> Result<Actions<'a>, SpopError> {
        let start = r.clone();
        let mut len = 0;
        while !r.is_empty() {
            read_action(r)?;
            len += 1;
        }
        Ok(Actions { reader: start, len })
    }

    /// The number of actions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The actions in order.
    pub fn iter(&self) -> impl Iterator<Item = Action<'a>> + 'a {
        let mut r = self.reader.clone();
        (0..self.len).map_while(move |_| read_action(&mut r).ok())
    }
}

fn read_action<'a>(r: &mut Reader<'a>) -> Result<Action<'a>, SpopError> {
    let at = r.pos();
    let action = r.u8("action type")?;
    let nb_args = r.u8("NB-ARGS")?;
    let want = match action {
        SET_VAR => 3,
        UNSET_VAR => 2,
        t => return Err(SpopError::at(ErrorKind::UnknownAction(t), at)),
    };
    if nb_args != want {
        return Err(SpopError::at(
            ErrorKind::BadActionArgs { action, nb_args },
            at + 1,
        ));
    }
    let scope_at = r.pos();
    let s = r.u8("variable scope")?;
    let scope = Scope::from_u8(s).ok_or(SpopError::at(ErrorKind::UnknownScope(s), scope_at))?;
    let name = r.bytes("variable name")?;
    Ok(if action == SET_VAR {
        Action::SetVar {
            scope,
            name,
            value: r.value()?,
        }
    } else {
        Action::UnsetVar { scope, name }
    })
}

/// Writes one frame into a buffer: the header first, then the payload
/// items, then [`Encoder::finish`] fills in the length. Several frames may
/// be written one after the other into the same buffer.
#[derive(Debug)]
pub struct Encoder<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
}

impl<'o> Encoder<'o> {
    /// Begins an unfragmented frame (FIN set) at the end of `out`.
    pub fn new(out: &'o mut Vec<u8>, frame_type: FrameType, stream_id: u64, frame_id: u64) -> Self {
        Encoder::with_flags(out, frame_type as u8, FLAG_FIN, stream_id, frame_id)
    }

    /// Begins a frame with any type byte and flags (tests use it to build
    /// what this agent refuses).
    pub fn with_flags(
        out: &'o mut Vec<u8>,
        frame_type: u8,
        flags: u32,
        stream_id: u64,
        frame_id: u64,
    ) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        out.push(frame_type);
        out.extend_from_slice(&flags.to_be_bytes());
        super::varint::encode(stream_id, out);
        super::varint::encode(frame_id, out);
        Encoder { out, start }
    }

    /// Appends a key/value item (HELLO, DISCONNECT).
    pub fn kv(&mut self, key: &[u8], value: Value<'_>) -> &mut Self {
        encode_kv(key, &value, self.out);
        self
    }

    /// Appends a message with its arguments (NOTIFY). At most 255
    /// arguments are written (NB-ARGS is one byte).
    pub fn message(&mut self, name: &[u8], args: &[(&[u8], Value<'_>)]) -> &mut Self {
        let args = &args[..args.len().min(255)];
        encode_bytes(name, self.out);
        self.out.push(args.len() as u8);
        for (k, v) in args {
            encode_kv(k, v, self.out);
        }
        self
    }

    /// Appends an action (ACK).
    pub fn action(&mut self, action: &Action<'_>) -> &mut Self {
        match action {
            Action::SetVar { scope, name, value } => {
                self.out.extend_from_slice(&[SET_VAR, 3, *scope as u8]);
                encode_bytes(name, self.out);
                value.encode(self.out);
            }
            Action::UnsetVar { scope, name } => {
                self.out.extend_from_slice(&[UNSET_VAR, 2, *scope as u8]);
                encode_bytes(name, self.out);
            }
        }
        self
    }

    /// Appends raw bytes to the payload.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.out.extend_from_slice(bytes);
        self
    }

    /// The frame's length so far, without its 4-byte prefix.
    pub fn len(&self) -> usize {
        self.out.len() - self.start - 4
    }

    /// Whether nothing but the prefix was written (never: the header is
    /// written on creation).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the payload written after `len` bytes of frame.
    pub fn truncate(&mut self, len: usize) {
        self.out.truncate(self.start + 4 + len);
    }

    /// Fills in the length; returns the frame's size without the prefix.
    pub fn finish(self) -> usize {
        let len = self.len();
        let prefix = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
        self.out[self.start..self.start + 4].copy_from_slice(&prefix);
        len
    }
}

/// Writes an AGENT-HELLO.
pub fn encode_agent_hello(
    out: &mut Vec<u8>,
    version: &str,
    max_frame_size: u32,
    capabilities: &str,
) {
    let mut e = Encoder::new(out, FrameType::AgentHello, 0, 0);
    e.kv(b"version", Value::String(version.as_bytes()))
        .kv(b"max-frame-size", Value::Uint32(max_frame_size))
        .kv(b"capabilities", Value::String(capabilities.as_bytes()));
    e.finish();
}

/// Writes an AGENT-DISCONNECT (or, with `frame_type`
/// [`FrameType::HaproxyDisconnect`], HAProxy's). The message is cut to
/// 255 bytes at a character boundary: HAProxy refuses longer ones.
pub fn encode_disconnect(out: &mut Vec<u8>, frame_type: FrameType, status: Status, message: &str) {
    let mut cut = message.len().min(255);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut e = Encoder::new(out, frame_type, 0, 0);
    e.kv(b"status-code", Value::Uint32(status.code()))
        .kv(b"message", Value::String(&message.as_bytes()[..cut]));
    e.finish();
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
