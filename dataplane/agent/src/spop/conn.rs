//! Buffered frame I/O on a socket: [`FrameReader`] reads whole frames
//! with an idle timeout (nothing arrives) and a frame timeout (a frame
//! started but did not finish: a stalled or trickling peer);
//! [`FrameWriter`] batches encoded frames and writes them with a timeout.
//!
//! Memory per connection is bounded by the frame size in force: a frame
//! whose length prefix exceeds it is refused from its first 4 bytes.

use super::error::{ErrorKind, SpopError};
use super::frame::{self, Frame, Limits, Parsed};
use bytes::{Buf, BytesMut};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout_at, Instant};

/// Reads frames from `R`.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    buf: BytesMut,
    /// Bytes of the frame last returned, dropped at the next read.
    consumed: usize,
    /// When the first byte of the frame being received arrived.
    started: Option<Instant>,
    eof: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader with an empty buffer.
    pub fn new(io: R) -> Self {
        FrameReader {
            io,
            buf: BytesMut::with_capacity(8 * 1024),
            consumed: 0,
            started: None,
            eof: false,
        }
    }

    /// The next frame. `Ok(None)` is a clean end of stream between frames.
    /// Waits at most `idle` for a frame to start and `stall` for a started
    /// frame to finish. Cancel-safe: bytes read stay buffered.
    pub async fn read_frame(
        &mut self,
        limits: &Limits,
        idle: Duration,
        stall: Duration,
    ) -> Result<Option<Frame<'_>>, SpopError> {
        self.drop_consumed();
        loop {
            match frame::frame_len(&self.buf, limits)? {
                Some(len) if self.buf.len() >= 4 + len as usize => break,
                Some(len) => self.buf.reserve(4 + len as usize - self.buf.len()),
                None => self.buf.reserve(4096),
            }
            if self.eof {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(SpopError::new(ErrorKind::ClosedMidFrame))
                };
            }
            let now = Instant::now();
            let (deadline, what) = match self.started {
                Some(t) => (t + stall, "frame"),
                None => (now + idle, "idle"),
            };
            let n = match timeout_at(deadline, self.io.read_buf(&mut self.buf)).await {
                Ok(r) => r?,
                Err(_) => return Err(SpopError::new(ErrorKind::Timeout { what })),
            };
            if n == 0 {
                self.eof = true;
            } else if self.started.is_none() {
                self.started = Some(now);
            }
        }
        match frame::parse(&self.buf, limits)? {
            Parsed::Frame(f, used) => {
                self.consumed = used;
                Ok(Some(f))
            }
            // frame_len said the frame is all there.
            Parsed::Incomplete { .. } => Err(SpopError::new(ErrorKind::ClosedMidFrame)),
        }
    }

    fn drop_consumed(&mut self) {
        if self.consumed > 0 {
            self.buf.advance(self.consumed);
            self.consumed = 0;
            // The next frame started when its first byte arrived, which
            // was no later than now: count it from now.
            self.started = (!self.buf.is_empty()).then(Instant::now);
        }
    }

    /// Whether another whole frame is already buffered after the one last
    /// returned (so that replies can wait and go out in one write).
    pub fn has_buffered_frame(&self, limits: &Limits) -> bool {
        let rest = self.buf.get(self.consumed..).unwrap_or_default();
        matches!(frame::frame_len(rest, limits), Ok(Some(len)) if rest.len() >= 4 + len as usize)
    }

    /// Reads and discards what the peer still sends, until it closes, for
    /// at most `wait` and `max` bytes: closing a socket with unread data
    /// makes the kernel send a reset, which can destroy the DISCONNECT
    /// frame just written before the peer reads it.
    pub async fn drain(&mut self, wait: Duration, max: usize) {
        let deadline = Instant::now() + wait;
        let mut seen = 0;
        let mut scratch = [0u8; 4096];
        while !self.eof && seen < max {
            match timeout_at(deadline, self.io.read(&mut scratch)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => seen += n,
            }
        }
    }
}

/// Writes frames to `W`.
#[derive(Debug)]
pub struct FrameWriter<W> {
    io: W,
    buf: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// A writer with an empty buffer.
    pub fn new(io: W) -> Self {
        FrameWriter {
            io,
            buf: Vec::with_capacity(8 * 1024),
        }
    }

    /// The buffer to encode frames into (see [`frame::Encoder`]).
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes waiting to be written.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Writes everything buffered, within `wait`.
    pub async fn flush(&mut self, wait: Duration) -> Result<(), SpopError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        match tokio::time::timeout(wait, self.io.write_all(&self.buf)).await {
            Ok(r) => r?,
            Err(_) => return Err(SpopError::new(ErrorKind::Timeout { what: "write" })),
        }
        self.buf.clear();
        Ok(())
    }

    /// Flushes, then closes the write side (the peer reads end of stream).
    pub async fn close(&mut self, wait: Duration) -> Result<(), SpopError> {
        self.flush(wait).await?;
        match tokio::time::timeout(wait, self.io.shutdown()).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(SpopError::new(ErrorKind::Timeout { what: "write" })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spop::frame::{encode_agent_hello, FrameType};

    #[tokio::test]
    async fn frames_split_across_reads_are_reassembled_and_batched() {
        let mut bytes = Vec::new();
        encode_agent_hello(&mut bytes, "2.0", 300, "a");
        encode_agent_hello(&mut bytes, "2.0", 301, "b");
        let (client, server) = tokio::io::duplex(64);
        let send = bytes.clone();
        let writer = tokio::spawn(async move {
            let mut w = client;
            // One byte at a time: every frame boundary falls mid-read.
            for b in send {
                w.write_all(&[b]).await.unwrap();
                tokio::task::yield_now().await;
            }
            w
        });
        let mut r = FrameReader::new(server);
        let l = Limits::default();
        let d = Duration::from_secs(5);
        let f = r.read_frame(&l, d, d).await.unwrap().unwrap();
        assert_eq!(f.frame_type, FrameType::AgentHello);
        let size = f.kv().unwrap().get(b"max-frame-size");
        assert_eq!(size.and_then(|v| v.as_u64()), Some(300));
        let f = r.read_frame(&l, d, d).await.unwrap().unwrap();
        assert_eq!(
            f.kv()
                .unwrap()
                .get(b"max-frame-size")
                .and_then(|v| v.as_u64()),
            Some(301)
        );
        drop(writer.await.unwrap());
        assert!(r.read_frame(&l, d, d).await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_inside_a_frame_times_out_but_idle_waits_longer() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut r = FrameReader::new(server);
        let l = Limits::default();
        // Half a length prefix, then nothing: the frame timeout (1 s)
        // applies, not the idle one (60 s).
        client.write_all(&[0, 0]).await.unwrap();
        let e = r
            .read_frame(&l, Duration::from_secs(60), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Timeout { what: "frame" }));
        let (_client, server) = tokio::io::duplex(64);
        let mut r = FrameReader::new(server);
        let t0 = Instant::now();
        let e = r
            .read_frame(&l, Duration::from_secs(60), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Timeout { what: "idle" }));
        assert!(t0.elapsed() >= Duration::from_secs(60));
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_its_body_arrives() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut r = FrameReader::new(server);
        let l = Limits::default();
        client.write_all(&1_000_000u32.to_be_bytes()).await.unwrap();
        let d = Duration::from_secs(5);
        let e = r.read_frame(&l, d, d).await.unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::FrameTooBig { len: 1_000_000, .. }
        ));
    }
}
