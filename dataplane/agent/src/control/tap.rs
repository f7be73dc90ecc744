//! The tap op on both sides of the control socket: the connection that
//! streams a tap's lines ([`stream`]), and the blocking client that reads
//! them ([`tap`]).

use super::{Client, ControlError, ControlErrorKind, ControlRequest, TapSummary};
use crate::shutdown::Shutdown;
use crate::tap::{Taps, DRAIN_EVERY, MAX_SECONDS, PENDING_MAX};
use serde_json::json;
use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Streams a tap of `seconds` to `write`: the opening line, the request
/// lines as they come, the summary; `headers` says which webrequest
/// headers the agent receives. A refusal is one line. Ends early when
/// `shutdown` fires or the reader goes away (`read` ends: what it sends
/// meanwhile is ignored).
pub(super) async fn stream<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    taps: &Arc<Taps>,
    seconds: u64,
    headers: impl Fn() -> Vec<String>,
    (read, write): (&mut R, &mut W),
    shutdown: &mut Shutdown,
) {
    let refuse = |e: String| format!("{}\n", json!({"ok": false, "error": e}));
    if !(1..=MAX_SECONDS).contains(&seconds) {
        let e = crate::tap::TapError::Seconds(seconds).to_string();
        let _ = write.write_all(refuse(e).as_bytes()).await;
        return;
    }
    let tap = match taps.open() {
        Ok(t) => t,
        Err(e) => {
            let _ = write.write_all(refuse(e.to_string()).as_bytes()).await;
            return;
        }
    };
    let started = Instant::now();
    let first = json!({"ok": true, "tap": {"seconds": seconds, "headers": headers()}});
    if write
        .write_all(format!("{first}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let (mut spare, mut out) = (Vec::new(), Vec::new());
    let (mut requests, mut cut) = (0u64, 0u64);
    let mut why = None;
    let mut ignored = [0u8; 512];
    loop {
        let wake = (tokio::time::Instant::now() + DRAIN_EVERY).min(end);
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = shutdown.fired() => {
                why = Some("the agent is shutting down".to_string());
                break;
            }
            n = read.read(&mut ignored) => {
                if matches!(n, Ok(0) | Err(_)) {
                    // Nobody to send the rest to.
                    return;
                }
            }
        }
        if tokio::time::Instant::now() >= end {
            break;
        }
        let (w, _) = tap.take(&mut spare, &mut out);
        requests += w.requests;
        cut += w.cut;
        if !out.is_empty() {
            if write.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
    let (w, lost) = tap.close(&mut out);
    requests += w.requests;
    cut += w.cut;
    if lost > 0 && why.is_none() {
        why = Some(format!(
            "the tap's buffer ({} MiB) was full: the reader did not keep up with the traffic",
            PENDING_MAX >> 20
        ));
    }
    let summary = TapSummary {
        requests,
        lost,
        cut,
        seconds: started.elapsed().as_secs_f64(),
        headers: headers(),
        why,
    };
    out.extend_from_slice(format!("{}\n", json!({"ok": true, "summary": summary})).as_bytes());
    let _ = write.write_all(&out).await;
    let _ = write.flush().await;
}

/// What a tap's opening line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TapEvent<'a> {
    /// The tap is open; the webrequest headers the agent receives.
    Opened(Vec<String>),
    /// One request's webrequest line (without its newline).
    Request(&'a [u8]),
}

/// Taps the agent at `socket` for `seconds`: `each` sees the opening and
/// every request line; the summary at the end. `each` failing (a full
/// disk) stops the tap with its error.
pub fn tap(
    socket: &Path,
    seconds: u64,
    mut each: impl FnMut(TapEvent<'_>) -> std::io::Result<()>,
) -> Result<TapSummary, ControlError> {
    // Lines may not come for the whole tap when there is no traffic.
    let timeout = Duration::from_secs(seconds.saturating_add(30));
    let mut c = Client::connect(socket, timeout)?;
    let at = socket.display().to_string();
    let fail = |kind, message: String| ControlError { kind, message };
    let io = |e: std::io::Error| fail(ControlErrorKind::Io, format!("the agent at {at}: {e}"));
    let mut req = serde_json::to_vec(&ControlRequest::Tap { seconds })
        .map_err(|e| fail(ControlErrorKind::Protocol, e.to_string()))?;
    req.push(b'\n');
    c.reader.get_mut().write_all(&req).map_err(io)?;
    let mut line = Vec::new();
    let mut opened = false;
    loop {
        line.clear();
        if c.reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            return Err(fail(
                ControlErrorKind::Io,
                format!("the agent at {at} closed the tap before its summary (did it stop?)"),
            ));
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        if opened && l.starts_with(b"{\"dt\":") {
            each(TapEvent::Request(l)).map_err(|e| fail(ControlErrorKind::Io, e.to_string()))?;
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(l).map_err(|e| {
            fail(
                ControlErrorKind::Protocol,
                format!("the agent at {at} sent a line that is not JSON: {e}"),
            )
        })?;
        if v["ok"] != true {
            let why = v["error"].as_str().unwrap_or("refused").to_string();
            return Err(fail(ControlErrorKind::Refused, why));
        }
        if let Some(s) = v.get("summary") {
            return serde_json::from_value(s.clone()).map_err(|e| {
                fail(
                    ControlErrorKind::Protocol,
                    format!("a tap summary rctl does not understand: {e}"),
                )
            });
        }
        let headers = v["tap"]["headers"].as_array().ok_or_else(|| {
            fail(
                ControlErrorKind::Protocol,
                format!("the agent at {at} does not know the tap op (is it older than this rctl?)"),
            )
        })?;
        let headers = headers
            .iter()
            .filter_map(|h| h.as_str().map(str::to_string))
            .collect();
        opened = true;
        each(TapEvent::Opened(headers)).map_err(|e| fail(ControlErrorKind::Io, e.to_string()))?;
    }
}
