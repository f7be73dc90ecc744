//! The SPOE agent's listener and connections.
//!
//! Per connection: HAPROXY-HELLO -> AGENT-HELLO (version 2.0, the smaller
//! of both frame sizes, `pipelining` when HAProxy offers it; `async` only
//! with [`Config::announce_async`]; never `fragmentation`), then NOTIFY ->
//! one decision per `rctl-req`
//! message -> ACK with `set-var` actions, until HAPROXY-DISCONNECT (answered
//! with AGENT-DISCONNECT) or an error (answered with AGENT-DISCONNECT and
//! the status of the error, then closed). A health-check HELLO gets its
//! AGENT-HELLO and the connection is closed.
//!
//! ACKs go out in the order the NOTIFYs arrived, on the connection they
//! arrived on: every order HAProxy allows with or without `pipelining` and
//! `async`.
//!
//! Why not `async` by default: with it, HAProxy 2.6 keeps the frames
//! awaiting an ACK in one queue per thread, and when a connection closes
//! it fails none of them (another connection might still answer), so
//! each waits for the spoe-agent's `timeout processing`. Without it they
//! fail at once (error 257) and the requests go on unchecked right away:
//! after an agent restart, a lost connection costs nothing instead of the
//! processing timeout per request in flight. This agent never answers on
//! another connection, so `async` would gain nothing (and HAProxy 3.1
//! removed it). Tested against HAProxy in `tests/spop_haproxy.rs`. Frames already buffered are decided back to back and their
//! ACKs written together, at most [`Config::max_in_flight`] at a time; a
//! peer that does not read its ACKs stops being read (backpressure) and
//! is dropped after [`Config::frame_timeout`].
//!
//! Fragmented payloads: this agent does not announce `fragmentation`, so
//! HAProxy never fragments toward it (HAProxy 2.6 refuses a NOTIFY that
//! does not fit in one frame on its own side). A peer that sends a
//! fragment anyway (FIN clear, or a frame of type 0) gets AGENT-DISCONNECT
//! status 10, "fragmentation not supported". Frame types SPOP does not
//! define are refused with status 4: the spec allows skipping them, but
//! HAProxy 2.6 sends only types 1 to 3, so a peer sending others is not
//! HAProxy.

use super::conn::{FrameReader, FrameWriter};
use super::data::Value;
use super::error::{ErrorKind, SpopError, Status};
use super::frame::{
    encode_agent_hello, encode_disconnect, Body, Frame, FrameType, Limits, MIN_FRAME_SIZE,
};
use crate::judge::{Judge, Observer};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

mod listener;
mod notify;

use crate::listen::Stream;
pub use listener::Listener;
pub use notify::MESSAGE;

/// How the agent serves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Frame limits; `max_frame_size` is the agent's own maximum, offered
    /// in the handshake (HAProxy's, if smaller, wins).
    pub limits: Limits,
    /// NOTIFY frames decided before their ACKs are written.
    pub max_in_flight: usize,
    /// Wait for the HAPROXY-HELLO.
    pub hello_timeout: Duration,
    /// Wait for a frame between frames: longer than HAProxy's `timeout
    /// idle` of the spoe-agent (30 s in what `rctl emit haproxy-spoe`
    /// writes), so that HAProxy closes an idle connection first, and short
    /// enough that idle connections do not pile up.
    pub idle_timeout: Duration,
    /// Wait for the rest of a frame once it started, and for a write.
    pub frame_timeout: Duration,
    /// On shutdown, wait for connections to finish.
    pub drain_timeout: Duration,
    /// Announce `async` when HAProxy offers it (see the module's docs for
    /// why the default is not to).
    pub announce_async: bool,
}

impl Default for Config {
    /// [`Limits::default`], 256 frames in flight, 10 s for the hello,
    /// 60 s idle, 10 s per frame, 5 s drain, no `async`. How many
    /// connections, and from whom, is the listener's (see
    /// [`crate::listen::Bind`]).
    fn default() -> Config {
        Config {
            limits: Limits::default(),
            max_in_flight: 256,
            hello_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            frame_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(5),
            announce_async: false,
        }
    }
}

/// Serves SPOP on `listener` with [`Config::default`] until `shutdown`
/// completes: then it stops accepting, lets every connection finish the
/// frames it has received, sends each AGENT-DISCONNECT (status 0) and
/// returns once they are closed (or after [`Config::drain_timeout`]).
pub async fn serve(
    listener: Listener,
    judge: Arc<Judge>,
    observer: Arc<dyn Observer>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SpopError> {
    serve_with(listener, judge, observer, Config::default(), shutdown).await
}

/// [`serve`] with a configuration.
pub async fn serve_with(
    listener: Listener,
    judge: Arc<Judge>,
    observer: Arc<dyn Observer>,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SpopError> {
    let accept = listener.into_inner().into_tokio()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        judge,
        observer,
        config,
    });
    let mut tasks = crate::shutdown::Tasks::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = accept.accept() => a,
        };
        let a = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and the like: report, back off, keep serving.
                ctx.observer.failed("spop-io", &format!("accept: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (stream, peer) = (a.stream, a.peer);
        let slot = match a.slot {
            Ok(slot) => slot,
            Err(refusal) => {
                let err = match refusal {
                    crate::peers::Refusal::Full(max) => {
                        SpopError::new(ErrorKind::TooManyConnections { max })
                    }
                    r => SpopError::new(ErrorKind::Refused(r.to_string())),
                };
                ctx.observer
                    .failed(err.kind().label(), &format!("{}: {err}", peer.shown));
                listener::refuse(&stream, &err);
                continue;
            }
        };
        let ctx = ctx.clone();
        let stop = stop_rx.clone();
        let shown = peer.shown;
        tasks.spawn(async move {
            match stream {
                Stream::Unix(s) => {
                    let (r, w) = s.into_split();
                    connection(r, w, &shown, &ctx, stop).await;
                }
                Stream::Tcp(s) => {
                    let (r, w) = s.into_split();
                    connection(r, w, &shown, &ctx, stop).await;
                }
            }
            drop(slot);
        });
    }
    drop(accept); // stop accepting; removes the socket file
    let _ = stop_tx.send(true);
    tasks.drain(ctx.config.drain_timeout).await;
    Ok(())
}

/// Serves one connection already accepted (its two halves) as [`serve`]
/// serves each of its own, to its end: for embedding the agent behind
/// another listener, and for fuzzing the whole exchange in memory.
pub async fn serve_connection<R, W>(
    r: R,
    w: W,
    peer: &str,
    judge: Arc<Judge>,
    observer: Arc<dyn Observer>,
    config: Config,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let ctx = Ctx {
        judge,
        observer,
        config,
    };
    let (_never, stop) = watch::channel(false);
    connection(r, w, peer, &ctx, stop).await;
}

/// What every connection shares.
pub(crate) struct Ctx {
    pub(crate) judge: Arc<Judge>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) config: Config,
}

/// What the handshake settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Handshake {
    max_frame_size: u32,
    pipelining: bool,
    async_: bool,
    healthcheck: bool,
}

/// Serves one connection to its end; reports a failure to the observer.
async fn connection<R, W>(r: R, w: W, peer: &str, ctx: &Ctx, stop: watch::Receiver<bool>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = FrameReader::new(r);
    let mut writer = FrameWriter::new(w);
    let result = exchange(&mut reader, &mut writer, ctx, stop).await;
    let t = ctx.config.frame_timeout;
    match result {
        Ok(Close::Quiet) => {}
        Ok(Close::Disconnect(status, why)) => {
            encode_disconnect(writer.buffer(), FrameType::AgentDisconnect, status, why);
            let _ = writer.close(t).await;
            reader.drain(Duration::from_millis(200), 1 << 20).await;
        }
        Err(err) => {
            ctx.observer
                .failed(err.kind().label(), &format!("{peer}: {err}"));
            // A socket that failed or stopped taking our writes gets no
            // DISCONNECT: writing it would only wait again.
            let writable = !matches!(
                err.kind(),
                ErrorKind::Io(_) | ErrorKind::Timeout { what: "write" }
            );
            if writable {
                let msg = err.to_string();
                encode_disconnect(
                    writer.buffer(),
                    FrameType::AgentDisconnect,
                    err.status(),
                    &msg,
                );
                let _ = writer.close(t).await;
                reader.drain(Duration::from_millis(200), 1 << 20).await;
            }
        }
    }
}

/// How a connection ends without an error.
enum Close {
    /// The peer closed, or a health check is done: nothing to send.
    Quiet,
    /// Send AGENT-DISCONNECT with this status and message.
    Disconnect(Status, &'static str),
}

/// The handshake and the frames after it.
async fn exchange<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
    ctx: &Ctx,
    mut stop: watch::Receiver<bool>,
) -> Result<Close, SpopError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let cfg = &ctx.config;
    let mut limits = cfg.limits.clone();
    let hello = tokio::select! {
        f = reader.read_frame(&limits, cfg.hello_timeout, cfg.frame_timeout) => match f? {
            None => return Ok(Close::Quiet),
            Some(f) => handshake(&f, &limits)?,
        },
        _ = stop.wait_for(|s| *s) => return Ok(Close::Disconnect(Status::Normal, "agent shutting down")),
    };
    let hello = match hello {
        Hello::Ok(h) => h,
        Hello::Disconnect => return Ok(Close::Disconnect(Status::Normal, "normal")),
    };
    let mut caps = Vec::new();
    if hello.pipelining {
        caps.push("pipelining");
    }
    if hello.async_ && cfg.announce_async {
        caps.push("async");
    }
    encode_agent_hello(
        writer.buffer(),
        "2.0",
        hello.max_frame_size,
        &caps.join(","),
    );
    writer.flush(cfg.frame_timeout).await?;
    if hello.healthcheck {
        let _ = writer.close(cfg.frame_timeout).await;
        return Ok(Close::Quiet);
    }
    limits.max_frame_size = hello.max_frame_size;
    let mut decider = notify::Decider::new(ctx, hello.max_frame_size);
    let mut batch = 0usize;
    loop {
        let stopping = *stop.borrow();
        // While stopping, only frames already received are decided.
        if stopping && !reader.has_buffered_frame(&limits) {
            writer.flush(cfg.frame_timeout).await?;
            return Ok(Close::Disconnect(Status::Normal, "agent shutting down"));
        }
        let frame = tokio::select! {
            biased;
            f = reader.read_frame(&limits, cfg.idle_timeout, cfg.frame_timeout) => f,
            _ = stop.wait_for(|s| *s), if !stopping => continue,
        };
        let Some(frame) = frame? else {
            writer.flush(cfg.frame_timeout).await?;
            return Ok(Close::Quiet);
        };
        match (&frame.frame_type, &frame.body) {
            (FrameType::Notify, Body::Messages(m)) => {
                decider.ack(frame.stream_id, frame.frame_id, m, writer.buffer());
            }
            (FrameType::HaproxyDisconnect, _) => {
                writer.flush(cfg.frame_timeout).await?;
                return Ok(Close::Disconnect(Status::Normal, "normal"));
            }
            (t, _) => {
                return Err(SpopError::at(
                    ErrorKind::UnexpectedFrame {
                        frame_type: *t as u8,
                        state: "after the handshake",
                    },
                    0,
                ))
            }
        }
        batch += 1;
        if batch >= cfg.max_in_flight || !reader.has_buffered_frame(&limits) {
            writer.flush(cfg.frame_timeout).await?;
            batch = 0;
        }
    }
}

/// The first frame's meaning.
enum Hello {
    Ok(Handshake),
    /// HAProxy disconnected before the handshake.
    Disconnect,
}

/// Reads a HAPROXY-HELLO (doc/SPOE.txt §3.2.4).
fn handshake(f: &Frame<'_>, ours: &Limits) -> Result<Hello, SpopError> {
    let kv = match (f.frame_type, f.kv()) {
        (FrameType::HaproxyHello, Some(kv)) => kv,
        (FrameType::HaproxyDisconnect, _) => return Ok(Hello::Disconnect),
        (t, _) => {
            return Err(SpopError::at(
                ErrorKind::UnexpectedFrame {
                    frame_type: t as u8,
                    state: "before HAPROXY-HELLO",
                },
                0,
            ))
        }
    };
    let string = |key: &'static str| -> Result<Option<&[u8]>, SpopError> {
        match kv.get(key.as_bytes()) {
            None => Ok(None),
            Some(v) => v
                .as_bytes()
                .map(Some)
                .ok_or(SpopError::new(ErrorKind::BadItem { key })),
        }
    };
    let versions = string("supported-versions")?.ok_or(SpopError::new(ErrorKind::NoVersion))?;
    let theirs = match kv.get(b"max-frame-size") {
        None => return Err(SpopError::new(ErrorKind::NoMaxFrameSize)),
        Some(v) => v.as_u64().ok_or(SpopError::new(ErrorKind::BadItem {
            key: "max-frame-size",
        }))?,
    };
    let caps = string("capabilities")?.ok_or(SpopError::new(ErrorKind::NoCapabilities))?;
    if !list(versions).any(is_v2) {
        return Err(SpopError::new(ErrorKind::UnsupportedVersion));
    }
    if theirs < u64::from(MIN_FRAME_SIZE) {
        return Err(SpopError::new(ErrorKind::BadMaxFrameSize { value: theirs }));
    }
    let has = |c: &[u8]| list(caps).any(|x| x == c);
    Ok(Hello::Ok(Handshake {
        max_frame_size: ours
            .max_frame_size
            .min(u32::try_from(theirs).unwrap_or(u32::MAX)),
        pipelining: has(b"pipelining"),
        async_: has(b"async"),
        healthcheck: kv.get(b"healthcheck") == Some(Value::Bool(true)),
    }))
}

/// The items of a comma-separated list, spaces trimmed.
fn list(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&b| b == b',').map(|x| x.trim_ascii())
}

/// Whether a "Major.Minor" version is 2.x (this agent speaks 2.0, which
/// every 2.x peer supports).
fn is_v2(v: &[u8]) -> bool {
    match v.split(|&b| b == b'.').collect::<Vec<_>>().as_slice() {
        [major, minor] => {
            let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
            digits(major) && digits(minor) && major.iter().skip_while(|&&d| d == b'0').eq(b"2")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_major_2_are_accepted_others_not() {
        for ok in ["2.0", "2.1", " 2.0 ", "02.0"] {
            assert!(list(ok.as_bytes()).any(is_v2), "{ok}");
        }
        for bad in ["1.0", "3.0", "2", "2.x", "", "2.0.1", ".0"] {
            assert!(!list(bad.as_bytes()).any(is_v2), "{bad}");
        }
        assert!(list(b"1.0, 2.0").any(is_v2));
    }

    #[test]
    fn capabilities_are_matched_as_whole_items() {
        let caps = b" pipelining , asyncx,fragmentation";
        assert!(list(caps).any(|c| c == b"pipelining"));
        assert!(!list(caps).any(|c| c == b"async"));
    }
}
