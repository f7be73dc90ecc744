//! The agent's recent traffic by key, for `rctl top`: every decided
//! request counted in a bounded window ([`rctl_top::Window`]) by address,
//! /24 or /48, User-Agent and its family, and path template, with its
//! verdict; read through the control socket (`{"op":"top"}`).
//!
//! Counting is off the request path, as varnishtop reads Varnish's shared
//! log rather than the workers counting: a decided request only appends
//! a compact record (its second, address, verdict, User-Agent, host and
//! path, each cut at [`rctl_top::MAX_KEY`] bytes) to a pending buffer
//! under a short lock. A counter thread takes the buffer every
//! [`DRAIN_EVERY`] and counts it into the window; a read counts what is
//! pending first, so it sees every request decided before it. The
//! buffer holds at most [`PENDING_MAX`] bytes: past it, records are not
//! kept and are counted as `dropped`, so memory stays bounded if the
//! counter falls behind.

use crate::judge::{Fields, Generation, Observer, Outcome};
use crate::records::{push_field, push_ip, Cursor};
use rctl_dataplane::{Decision, Request};
use rctl_top::{Top, Window, MAX_KEY};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The window's length: what `rctl top --window` can ask for at most.
pub const WINDOW_S: u64 = 60;

/// Keys kept per kind and second.
pub const CAPACITY: usize = 256;

/// How often the counter thread counts what is pending.
pub const DRAIN_EVERY: Duration = Duration::from_millis(100);

/// The most bytes of records pending at once (about 20,000 requests with
/// long User-Agents and paths).
pub const PENDING_MAX: usize = 8 << 20;

/// The verdict kinds a record names by index.
const KINDS: [&str; 5] = ["pass", "allow", "deny", "throttle", "drop"];

/// Records not counted yet, and how many were not kept.
#[derive(Default)]
struct Pending {
    records: Vec<u8>,
    dropped: u64,
}

struct Shared {
    pending: Mutex<Pending>,
    window: Mutex<Window>,
    /// Set when the counters are dropped: the counter thread ends.
    stop: AtomicBool,
    max_pending: usize,
}

/// The counters, shared by every listener; counted by a thread of their
/// own, which stops when they are dropped.
pub struct TopCounts {
    shared: Arc<Shared>,
    counter: Option<std::thread::JoinHandle<()>>,
}

impl Default for TopCounts {
    fn default() -> Self {
        TopCounts::with_bound(PENDING_MAX)
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The longest path kept: a template collapses ids, so a path longer than
/// the key can still make a key that fits.
const PATH_MAX: usize = 8 * MAX_KEY;

/// One record: second, address, verdict, User-Agent, host, path.
fn encode(out: &mut Vec<u8>, now_s: u64, r: &Request<'_>, kind: &str) {
    out.extend_from_slice(&now_s.to_le_bytes());
    push_ip(out, r.ip);
    out.push(KINDS.iter().position(|k| *k == kind).unwrap_or(0) as u8);
    let ua = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(b"user-agent"))
        .map_or(&b""[..], |(_, v)| v);
    push_field(out, ua, MAX_KEY);
    push_field(out, r.host, MAX_KEY);
    let path = r.target.split(|&b| b == b'?').next().unwrap_or(r.target);
    push_field(out, path, PATH_MAX);
}

/// The next record: second, address, verdict, User-Agent, host, path.
#[expect(clippy::type_complexity, reason = "a record's six fields")]
fn record<'a>(
    c: &mut Cursor<'a>,
) -> Option<(u64, IpAddr, &'static str, &'a [u8], &'a [u8], &'a [u8])> {
    let second = u64::from_le_bytes(c.take(8)?.try_into().ok()?);
    let ip = c.ip()?;
    let kind = KINDS.get(c.byte()? as usize).copied()?;
    Some((second, ip, kind, c.field()?, c.field()?, c.field()?))
}

/// Reads the records of `buf` (as [`encode`] wrote them) into `w`; a
/// record cut short ends it.
fn count(w: &mut Window, buf: &[u8]) {
    let mut c = Cursor::new(buf);
    while let Some((second, ip, kind, ua, host, path)) = record(&mut c) {
        let headers: [(&[u8], &[u8]); 1] = [(b"user-agent", ua)];
        let r = Request {
            method: b"",
            host,
            target: path,
            headers: if ua.is_empty() { &[] } else { &headers },
            ip,
            dst: None,
            port: 0,
            time_ns: 0,
        };
        w.add(second, &r, kind);
    }
}

impl Shared {
    /// Counts what is pending into the window.
    fn drain(&self, spare: &mut Vec<u8>) -> u64 {
        let dropped = {
            let mut p = lock(&self.pending);
            std::mem::swap(&mut p.records, spare);
            p.dropped
        };
        if !spare.is_empty() {
            count(&mut lock(&self.window), spare);
            spare.clear();
        }
        dropped
    }
}

impl TopCounts {
    /// Counters whose pending buffer holds at most `max_pending` bytes.
    pub fn with_bound(max_pending: usize) -> TopCounts {
        TopCounts::new(max_pending, true)
    }

    /// With `thread`, a counter thread drains the buffer; without, only
    /// reads do.
    fn new(max_pending: usize, thread: bool) -> TopCounts {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            window: Mutex::new(Window::new(WINDOW_S, CAPACITY)),
            stop: AtomicBool::new(false),
            max_pending,
        });
        let s = Arc::clone(&shared);
        let counter = thread
            .then(|| {
                std::thread::Builder::new()
                    .name("rctl-top".into())
                    .spawn(move || {
                        let mut spare = Vec::new();
                        while !s.stop.load(Ordering::Relaxed) {
                            std::thread::park_timeout(DRAIN_EVERY);
                            s.drain(&mut spare);
                        }
                    })
                    .ok()
            })
            .flatten();
        TopCounts { shared, counter }
    }

    /// The heaviest `n` keys of each kind over the last `seconds`
    /// (at most [`WINDOW_S`]), with every request decided before the
    /// call counted.
    pub fn top(&self, seconds: u64, n: usize) -> Top {
        let dropped = self.shared.drain(&mut Vec::new());
        let now = now_s();
        // Copied under the lock, merged outside it: counting goes on
        // meanwhile.
        let recent = lock(&self.shared.window).recent(now, seconds);
        let mut t = recent.top_over(now, seconds, n);
        t.dropped = dropped;
        t
    }

    /// Keeps `r`, decided `kind` at second `now_s`, for the counter
    /// thread: the request path's whole share of the counting.
    pub fn record(&self, now_s: u64, r: &Request<'_>, kind: &str) {
        let mut p = lock(&self.shared.pending);
        if p.records.len() >= self.shared.max_pending {
            p.dropped += 1;
            return;
        }
        encode(&mut p.records, now_s, r, kind);
    }
}

impl Drop for TopCounts {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(c) = self.counter.take() {
            c.thread().unpark();
            let _ = c.join();
        }
    }
}

impl Observer for TopCounts {
    fn decided(&self, _: &Generation, f: &Fields<'_>, _: &Outcome, d: &Decision, _: Duration) {
        self.record(now_s(), &f.request(0), d.verdict.kind());
    }

    fn failed(&self, _: &'static str, _: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctl_top::KeyKind;

    fn request<'a>(ip: &str, target: &'a [u8], ua: &'a [(&'a [u8], &'a [u8])]) -> Request<'a> {
        Request {
            method: b"GET",
            host: b"Query.Wikidata.org",
            target,
            headers: ua,
            ip: ip.parse().unwrap(),
            dst: None,
            port: 80,
            time_ns: 0,
        }
    }

    const PY: &[(&[u8], &[u8])] = &[(b"User-Agent", b"python-requests/2.31.0")];

    /// The records, read back, count as the requests themselves would.
    #[test]
    fn records_count_as_the_requests_do() {
        let long = vec![b'a'; 3 * MAX_KEY];
        let long_ua: &[(&[u8], &[u8])] = &[(b"user-agent", &long)];
        let mut path = b"/wiki/".to_vec();
        path.extend_from_slice(&long);
        let reqs = [
            (request("192.0.2.7", b"/sparql?query=1", PY), "throttle"),
            (request("2001:db8::1", b"/wiki/Q42", &[]), "pass"),
            (request("192.0.2.8", &path, long_ua), "deny"),
            (request("192.0.2.7", b"/sparql", PY), "allow"),
        ];
        let now = 1_800_000_000;
        let mut direct = Window::new(WINDOW_S, CAPACITY);
        let mut buf = Vec::new();
        for (r, k) in &reqs {
            direct.add(now, r, k);
            encode(&mut buf, now, r, k);
        }
        let mut read = Window::new(WINDOW_S, CAPACITY);
        count(&mut read, &buf);
        assert_eq!(read.top(now, 10), direct.top(now, 10));
        let t = read.top(now, 10);
        assert_eq!(t.requests, 4);
        let ips = &t.keys[&KeyKind::Ip];
        assert_eq!(ips[0].key, "192.0.2.7");
        assert_eq!(ips[0].verdicts["throttle"], 1);
        assert_eq!(ips[0].verdicts["allow"], 1);
        // A record cut short is not counted, and nothing panics.
        let mut cut = Window::new(WINDOW_S, CAPACITY);
        count(&mut cut, &buf[..buf.len() - 3]);
        assert_eq!(cut.top(now, 10).requests, 3);
    }

    /// A read sees every request recorded before it, without waiting for
    /// the counter thread; past the bound, requests are dropped and said
    /// to be.
    #[test]
    fn reads_count_what_is_pending_and_the_bound_drops_the_rest() {
        // No counter thread, so that the second record finds the first
        // still pending.
        let t = TopCounts::new(1, false);
        let now = now_s();
        t.record(now, &request("192.0.2.7", b"/sparql", PY), "throttle");
        t.record(now, &request("192.0.2.8", b"/sparql", PY), "pass");
        let top = t.top(WINDOW_S, 10);
        assert_eq!((top.requests, top.dropped), (1, 1));
        assert_eq!(top.keys[&KeyKind::Ip][0].key, "192.0.2.7");
        let t = TopCounts::default();
        for i in 0..1000u32 {
            let ip = format!("198.51.100.{}", i % 200);
            t.record(now, &request(&ip, b"/wiki/Q42", PY), "pass");
        }
        let top = t.top(WINDOW_S, 3);
        assert_eq!((top.requests, top.dropped), (1000, 0));
        assert_eq!(top.keys[&KeyKind::PathTemplate][0].requests, 1000);
    }
}
