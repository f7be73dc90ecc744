//! Every request the agent decides, streamed to whoever asks for the next
//! seconds of them (`{"op":"tap","seconds":N}` on the control socket,
//! `rctl tap`, `rctl dry-run --agent`, `rctl suggest --agent`), as lines
//! in the webrequest JSON-lines schema that `rctl-logs` reads.
//!
//! **Nothing when nobody taps.** The request path's whole share, with no
//! tap open, is one relaxed atomic load ([`Taps::record`]). With taps
//! open, a decided request appends one compact record (its millisecond,
//! address, method, host, target and the webrequest headers it has, each
//! cut at [`FIELD_MAX`] bytes) to each tap's pending buffer under a short
//! lock; the tap's connection handler takes the buffer every
//! [`DRAIN_EVERY`], writes the lines and sends them. Each buffer holds at
//! most [`PENDING_MAX`] bytes: past it, requests are not kept but counted
//! as lost, and the summary says how many, so memory stays bounded and
//! the request path never waits for a slow reader. At most [`MAX_TAPS`]
//! taps are open at once; one more is refused, saying so.
//!
//! **The lines** carry `dt` (UTC, milliseconds), `ip` (the client as the
//! agent judged it), `http_method`, `uri_host`, `uri_path`, `uri_query`
//! (with its `?`, or empty), and of the headers webrequest has
//! ([`HEADERS`]) those the request had. Which headers the agent receives
//! at all depends on the proxy's configuration: the tap says which it
//! does ([`Taps::received`]), and a reader must treat the others as
//! unknown, not as absent. Text is written as the matched-request log
//! writes it: bytes that are not UTF-8 become U+FFFD, controls and
//! bidirectional overrides `\uXXXX` escapes.

use crate::judge::{Fields, Generation, Observer, Outcome};
use rctl_dataplane::Decision;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often a tap's handler takes what is pending.
pub const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// The most bytes of records pending per tap (about 20,000 requests with
/// long User-Agents and paths).
pub const PENDING_MAX: usize = 8 << 20;

/// Taps open at once, at most.
pub const MAX_TAPS: usize = 4;

/// The longest tap, in seconds.
pub const MAX_SECONDS: u64 = 3600;

/// The most bytes of one field a record keeps.
pub const FIELD_MAX: usize = u16::MAX as usize;

/// The headers the webrequest schema has: its column, and the header.
pub use rctl_dataplane::partial::WEBREQUEST_HEADERS as HEADERS;

/// Why a tap cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TapError {
    /// [`MAX_TAPS`] taps are open already.
    Busy,
    /// The seconds asked for are not 1 to [`MAX_SECONDS`].
    Seconds(u64),
}

impl std::fmt::Display for TapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TapError::Busy => write!(
                f,
                "{MAX_TAPS} taps are open already (the most at once): try again when one ends"
            ),
            TapError::Seconds(s) => write!(f, "tap for {s} s: ask for 1 to {MAX_SECONDS} seconds"),
        }
    }
}

impl std::error::Error for TapError {}

/// One open tap's records not sent yet, and how many were not kept.
struct Slot {
    id: u64,
    records: Vec<u8>,
    lost: u64,
}

/// The open taps, shared by every listener (as an observer) and the
/// control socket (which opens them).
pub struct Taps {
    /// Open taps: the request path reads only this when it is 0.
    active: AtomicUsize,
    slots: Mutex<Vec<Slot>>,
    next: AtomicU64,
    max_pending: usize,
}

impl Default for Taps {
    fn default() -> Self {
        Taps::with_bound(PENDING_MAX)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn push_field(out: &mut Vec<u8>, b: &[u8]) -> bool {
    crate::records::push_field(out, b, FIELD_MAX)
}

/// One record: millisecond, address, a flag byte (1: a field was cut),
/// method, host, target, then the count of headers and each as its
/// [`HEADERS`] index and value.
fn encode(out: &mut Vec<u8>, time_ms: u64, f: &Fields<'_>) {
    out.extend_from_slice(&time_ms.to_le_bytes());
    crate::records::push_ip(out, f.ip);
    let flags = out.len();
    out.push(0);
    let mut cut = push_field(out, f.method);
    cut |= push_field(out, f.host);
    cut |= push_field(out, f.target);
    let count = out.len();
    out.push(0);
    let mut n = 0u8;
    for (i, (_, name)) in HEADERS.iter().enumerate() {
        let found = f
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()));
        if let Some((_, v)) = found {
            out.push(i as u8);
            cut |= push_field(out, v);
            n += 1;
        }
    }
    out[count] = n;
    out[flags] = u8::from(cut);
}

/// A record read back.
struct Record<'a> {
    time_ms: u64,
    ip: IpAddr,
    cut: bool,
    method: &'a [u8],
    host: &'a [u8],
    target: &'a [u8],
    headers: [Option<&'a [u8]>; HEADERS.len()],
}

/// The next record, as [`encode`] wrote it.
fn record<'a>(c: &mut crate::records::Cursor<'a>) -> Option<Record<'a>> {
    let time_ms = u64::from_le_bytes(c.take(8)?.try_into().ok()?);
    let ip = c.ip()?;
    let cut = c.byte()? != 0;
    let (method, host, target) = (c.field()?, c.field()?, c.field()?);
    let mut headers = [None; HEADERS.len()];
    for _ in 0..c.byte()? {
        let i = c.byte()? as usize;
        let v = c.field()?;
        *headers.get_mut(i)? = Some(v);
    }
    Some(Record {
        time_ms,
        ip,
        cut,
        method,
        host,
        target,
        headers,
    })
}

/// A webrequest line, in the schema's names; `dt` first, so that a line
/// of requests never starts as a control answer (`{"ok"`) does.
#[derive(Serialize)]
struct Line<'a> {
    dt: String,
    ip: String,
    http_method: Cow<'a, str>,
    uri_host: Cow<'a, str>,
    uri_path: Cow<'a, str>,
    uri_query: Cow<'a, str>,
    /// The headers the request had, by column.
    #[serde(flatten)]
    headers: BTreeMap<&'static str, Cow<'a, str>>,
}

/// `2026-12-01T10:34:31.123Z`.
fn dt(time_ms: u64) -> String {
    let s = rctl_os::clock::rfc3339(time_ms / 1000);
    format!("{}.{:03}Z", s.trim_end_matches('Z'), time_ms % 1000)
}

/// What the lines of some records came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Requests (lines).
    pub requests: u64,
    /// Requests one of whose fields was cut at [`FIELD_MAX`].
    pub cut: u64,
}

/// Appends the webrequest lines of the records in `buf` to `out`; a
/// record cut short ends it.
fn lines(buf: &[u8], out: &mut Vec<u8>) -> Written {
    let mut c = crate::records::Cursor::new(buf);
    let mut w = Written::default();
    let text = String::from_utf8_lossy;
    while let Some(r) = record(&mut c) {
        let (path, query) = match r.target.iter().position(|&b| b == b'?') {
            Some(q) => (&r.target[..q], &r.target[q..]),
            None => (r.target, &b""[..]),
        };
        let headers = HEADERS
            .iter()
            .zip(r.headers)
            .filter_map(|((col, _), v)| Some((*col, text(v?))))
            .collect();
        let line = Line {
            dt: dt(r.time_ms),
            ip: r.ip.to_string(),
            http_method: text(r.method),
            uri_host: text(r.host),
            uri_path: text(path),
            uri_query: text(query),
            headers,
        };
        if let Ok(json) = serde_json::to_string(&line) {
            crate::reqlog::safe_json(out, &json);
            out.push(b'\n');
            w.requests += 1;
            w.cut += u64::from(r.cut);
        }
    }
    w
}

impl Taps {
    /// Taps whose pending buffers hold at most `max_pending` bytes each.
    pub fn with_bound(max_pending: usize) -> Taps {
        Taps {
            active: AtomicUsize::new(0),
            slots: Mutex::new(Vec::new()),
            next: AtomicU64::new(1),
            max_pending,
        }
    }

    /// Keeps `f` for every open tap: the request path's whole share.
    /// With no tap open, one relaxed load.
    #[inline]
    pub fn record(&self, f: &Fields<'_>) {
        if self.active.load(Relaxed) == 0 {
            return;
        }
        self.record_open(now_ms(), f);
    }

    #[cold]
    fn record_open(&self, time_ms: u64, f: &Fields<'_>) {
        let mut slots = lock(&self.slots);
        let max = self.max_pending;
        // Encoded once, into the first tap with room, copied to the rest.
        let mut made: Option<(usize, usize, usize)> = None;
        for i in 0..slots.len() {
            if slots[i].records.len() >= max {
                slots[i].lost += 1;
                continue;
            }
            match made {
                None => {
                    let s = &mut slots[i];
                    let start = s.records.len();
                    encode(&mut s.records, time_ms, f);
                    made = Some((i, start, s.records.len()));
                }
                Some((from, a, b)) => {
                    let (src, dst) = slots.split_at_mut(i);
                    dst[0].records.extend_from_slice(&src[from].records[a..b]);
                }
            }
        }
    }

    /// Opens a tap: from now on every decided request is kept for it,
    /// until the handle is closed or dropped.
    pub fn open(self: &Arc<Self>) -> Result<Tap, TapError> {
        let mut slots = lock(&self.slots);
        if slots.len() >= MAX_TAPS {
            return Err(TapError::Busy);
        }
        let id = self.next.fetch_add(1, Relaxed);
        slots.push(Slot {
            id,
            records: Vec::new(),
            lost: 0,
        });
        self.active.store(slots.len(), Relaxed);
        Ok(Tap {
            taps: Arc::clone(self),
            id,
            open: true,
        })
    }

    /// Of the webrequest headers, those the proxies in front send the
    /// agent, as they said last (see [`crate::proxies`]): the ones each
    /// proxy heard from sends; with none heard from, the ones `rs` reads
    /// (what an emitted configuration sends).
    pub fn received(
        proxies: &crate::proxies::Proxies,
        rs: &rctl_compiler::ir::Ruleset,
    ) -> Vec<String> {
        let sent = proxies.headers_sent(rs);
        HEADERS
            .iter()
            .map(|(_, h)| h.to_string())
            .filter(|h| sent.as_ref().is_none_or(|s| s.contains(h)))
            .collect()
    }
}

/// An open tap; dropped, it closes.
pub struct Tap {
    taps: Arc<Taps>,
    id: u64,
    open: bool,
}

impl Tap {
    /// Appends the lines of the requests kept since the last take to
    /// `out`; what they came to, and how many requests were lost so far.
    pub fn take(&self, spare: &mut Vec<u8>, out: &mut Vec<u8>) -> (Written, u64) {
        let lost = {
            let mut slots = lock(&self.taps.slots);
            match slots.iter_mut().find(|s| s.id == self.id) {
                Some(s) => {
                    std::mem::swap(&mut s.records, spare);
                    s.lost
                }
                None => 0,
            }
        };
        let w = lines(spare, out);
        spare.clear();
        (w, lost)
    }

    /// Closes the tap: no request is kept for it from now on. The lines
    /// of what was kept and not taken, and the requests lost in all.
    pub fn close(mut self, out: &mut Vec<u8>) -> (Written, u64) {
        let slot = self.remove();
        match slot {
            Some(s) => (lines(&s.records, out), s.lost),
            None => (Written::default(), 0),
        }
    }

    fn remove(&mut self) -> Option<Slot> {
        if !std::mem::take(&mut self.open) {
            return None;
        }
        let mut slots = lock(&self.taps.slots);
        let at = slots.iter().position(|s| s.id == self.id)?;
        let s = slots.swap_remove(at);
        self.taps.active.store(slots.len(), Relaxed);
        Some(s)
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.remove();
    }
}

impl Observer for Taps {
    fn decided(&self, _: &Generation, f: &Fields<'_>, _: &Outcome, _: &Decision, _: Duration) {
        self.record(f);
    }

    fn failed(&self, _: &'static str, _: &str) {}
}

#[cfg(test)]
#[path = "tap_tests.rs"]
mod tests;
