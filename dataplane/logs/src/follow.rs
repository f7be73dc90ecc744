//! Following a growing log, as `tail -F` does, through its rotations:
//!
//! - **rename and reopen** (logrotate's default, `create`): the file is
//!   renamed and the server reopens a new one at the same path. The old
//!   file is read to its end first; the new one is taken once it has a
//!   byte, or once a grace period has passed (the server may still write
//!   to the old one until it reopens).
//! - **copytruncate**: the file is copied and cut to zero in place. A
//!   file shorter than what was read was truncated: reading starts again
//!   at its first byte. (Lines written between the copy and the cut are
//!   in neither file: that is copytruncate's own loss, documented by
//!   logrotate.)
//!
//! A [`Follow`] never blocks once it has read a byte (before, it may be
//! told to wait for one: a format is detected from the first lines): at
//! the end of what is there it returns 0, and [`follow`] polls, judges
//! new lines as they come and calls back every interval with what the
//! last one held.

use crate::record::HeaderBuf;
use crate::run::{Source, Summary};
use rctl_dataplane::dryrun::DryRun;
use rctl_dataplane::topk::TopK;
use rctl_dataplane::topkey::{ip_key, path_key, prefix_key};
use rctl_dataplane::Request;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Lines judged between two readings of the clock while lines keep
/// coming (a busy edge writes thousands a second; a slow one goes idle
/// between them, and the clock is read then).
const CLOCK_EVERY: u32 = 256;

/// How long a renamed file is still read after a new one appeared empty.
const GRACE: Duration = Duration::from_secs(2);

/// A file read as it grows, across rotations.
pub struct Follow {
    path: PathBuf,
    file: File,
    pos: u64,
    id: (u64, u64),
    /// When a new file was first seen at the path.
    new_seen: Option<Instant>,
    /// Rotations seen: (renamed, truncated).
    pub rotations: (u64, u64),
    /// Until the first byte: wait for one, polling at this interval,
    /// unless the flag is set.
    first: Option<(std::sync::Arc<AtomicBool>, Duration)>,
}

fn id(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

impl Follow {
    /// Opens `path`, read from its first byte.
    pub fn open(path: &Path) -> io::Result<Follow> {
        let file = File::open(path)?;
        let m = file.metadata()?;
        Ok(Follow {
            path: path.to_path_buf(),
            file,
            pos: 0,
            id: id(&m),
            new_seen: None,
            rotations: (0, 0),
            first: None,
        })
    }

    /// Makes reads wait for the file's first byte (through rotations),
    /// polling every `poll`, until `stop` is set: an empty log (one just
    /// rotated) is followed until it has a line to detect its format
    /// from.
    pub fn wait_for_first_byte(mut self, stop: std::sync::Arc<AtomicBool>, poll: Duration) -> Self {
        self.first = Some((stop, poll));
        self
    }

    /// At the end of the open file: whether to go on with another (a
    /// truncated file from its start, or the new file at the path).
    fn rotated(&mut self) -> io::Result<bool> {
        if self.file.metadata()?.len() < self.pos {
            self.file.seek(SeekFrom::Start(0))?;
            self.pos = 0;
            self.rotations.1 += 1;
            return Ok(true);
        }
        let Ok(m) = std::fs::metadata(&self.path) else {
            return Ok(false);
        };
        if id(&m) == self.id {
            self.new_seen = None;
            return Ok(false);
        }
        let seen = *self.new_seen.get_or_insert_with(Instant::now);
        if m.len() == 0 && seen.elapsed() < GRACE {
            return Ok(false);
        }
        let Ok(file) = File::open(&self.path) else {
            return Ok(false);
        };
        self.id = id(&file.metadata()?);
        self.file = file;
        self.pos = 0;
        self.new_seen = None;
        self.rotations.0 += 1;
        Ok(true)
    }
}

impl Read for Follow {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.file.read(buf)?;
            if n > 0 || buf.is_empty() {
                self.pos += n as u64;
                if n > 0 {
                    self.first = None;
                }
                return Ok(n);
            }
            // Whatever the old file still had is read before switching.
            if !self.rotated()? {
                match &self.first {
                    Some((stop, poll)) if !stop.load(Ordering::Relaxed) => {
                        std::thread::sleep(*poll);
                        continue;
                    }
                    _ => return Ok(0),
                }
            }
        }
    }
}

/// A stream read by a thread of its own (standard input, a pipe), so
/// that following it never blocks while it is quiet: the screen goes on
/// and a signal is seen. Like a [`Follow`], it returns 0 at the end of
/// what has come; [`Pipe::closed`] says whether the writer has gone.
/// The first read waits for the first bytes (a format is detected from
/// them). A gzip or zstd stream is decoded as it comes, on that thread.
pub struct Pipe {
    rx: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
    started: bool,
    closed: std::sync::Arc<AtomicBool>,
    /// Set to stop waiting for the first bytes.
    stop: Option<std::sync::Arc<AtomicBool>>,
}

impl Pipe {
    /// Starts reading `src` on a thread (at most a few chunks ahead),
    /// decoded if its first bytes are gzip's or zstd's.
    pub fn spawn(src: impl Read + Send + 'static) -> Pipe {
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        std::thread::spawn(move || {
            let mut src = match crate::input::decompress(Box::new(src)) {
                Ok((r, _)) => r,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            Pipe::pump(&mut src, &tx);
        });
        Pipe {
            rx,
            chunk: Vec::new(),
            at: 0,
            started: false,
            closed: std::sync::Arc::default(),
            stop: None,
        }
    }

    /// Stops waiting for the first bytes once `stop` is set (a signal
    /// before anything came): the first read then returns 0.
    pub fn stop_waiting_on(mut self, stop: std::sync::Arc<AtomicBool>) -> Pipe {
        self.stop = Some(stop);
        self
    }

    /// The first chunk: waited for, until `stop` is set.
    fn first(&self) -> Result<io::Result<Vec<u8>>, std::sync::mpsc::TryRecvError> {
        use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
        loop {
            match self.rx.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok(c) => return Ok(c),
                Err(RecvTimeoutError::Disconnected) => return Err(TryRecvError::Disconnected),
                Err(RecvTimeoutError::Timeout) => {
                    if self
                        .stop
                        .as_ref()
                        .is_some_and(|s| s.load(Ordering::Relaxed))
                    {
                        return Err(TryRecvError::Empty);
                    }
                }
            }
        }
    }

    /// Sends what `src` gives, chunk by chunk, until its end or an error.
    fn pump(src: &mut dyn Read, tx: &std::sync::mpsc::SyncSender<io::Result<Vec<u8>>>) {
        loop {
            let mut b = vec![0u8; 64 << 10];
            match src.read(&mut b) {
                Ok(0) => return,
                Ok(n) => {
                    b.truncate(n);
                    if tx.send(Ok(b)).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    }

    /// Set once the writer has closed the stream and all of it was read.
    pub fn closed(&self) -> std::sync::Arc<AtomicBool> {
        self.closed.clone()
    }
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::sync::mpsc::TryRecvError;
        if self.at == self.chunk.len() {
            let next = if self.started {
                self.rx.try_recv()
            } else {
                self.first()
            };
            self.started = true;
            match next {
                Ok(Ok(c)) => (self.chunk, self.at) = (c, 0),
                Ok(Err(e)) => return Err(e),
                Err(TryRecvError::Empty) => return Ok(0),
                Err(TryRecvError::Disconnected) => {
                    self.closed.store(true, Ordering::Relaxed);
                    return Ok(0);
                }
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The busiest keys of one interval.
#[derive(Debug)]
pub struct Talkers {
    /// Requests in the interval.
    pub requests: u64,
    /// By client address, keyed by its bytes
    /// ([`rctl_dataplane::topkey::ip_key`], shown by
    /// [`rctl_dataplane::topkey::show_ip`]).
    pub ips: TopK,
    /// By /24 (IPv4) or /48 (IPv6), keyed by the network's bytes
    /// ([`rctl_dataplane::topkey::prefix_key`], shown by
    /// [`rctl_dataplane::topkey::show_prefix`]).
    pub prefixes: TopK,
    /// By User-Agent.
    pub user_agents: TopK,
    /// By path.
    pub paths: TopK,
}

/// Counters kept per interval and table: Space-Saving keeps every key
/// with more than 1/`KEYS` of the interval's requests, whatever the
/// number of others, in bounded memory.
const KEYS: usize = 1_000;

impl Default for Talkers {
    fn default() -> Self {
        Talkers {
            requests: 0,
            ips: TopK::new(KEYS),
            prefixes: TopK::new(KEYS),
            user_agents: TopK::new(KEYS),
            paths: TopK::new(KEYS),
        }
    }
}

impl Talkers {
    /// Counts one request.
    pub fn add(&mut self, r: &Request<'_>) {
        self.requests += 1;
        // Counted by their bytes, written out only on the screen.
        let (ip, n) = ip_key(r.ip);
        let ip = &ip[..n];
        let (net, n) = prefix_key(r.ip);
        let net = &net[..n];
        let ua = r
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"user-agent"))
            .map_or(&b"-"[..], |(_, v)| v);
        let path = path_key(r.target);
        // The four counters' memory is asked for before any is counted,
        // so that their cache misses overlap.
        let fps = [
            self.ips.fingerprint(ip),
            self.prefixes.fingerprint(net),
            self.user_agents.fingerprint(ua),
            self.paths.fingerprint(path),
        ];
        self.ips.prefetch(fps[0]);
        self.prefixes.prefetch(fps[1]);
        self.user_agents.prefetch(fps[2]);
        self.paths.prefetch(fps[3]);
        self.ips.add_hashed(fps[0], ip);
        self.prefixes.add_hashed(fps[1], net);
        self.user_agents.add_hashed(fps[2], ua);
        self.paths.add_hashed(fps[3], path);
    }
}

/// How to follow.
pub struct FollowOptions<'a> {
    /// How often `tick` is called.
    pub every: Duration,
    /// How long to wait for more when there is nothing to read.
    pub poll: Duration,
    /// Set (by a signal handler) to stop: what is there is read first.
    pub stop: &'a AtomicBool,
    /// Set when the input has ended (a [`Pipe`]'s writer closed it):
    /// what is left is read, and following stops.
    pub ended: Option<&'a AtomicBool>,
}

/// Judges `src`'s lines as they come until `opts.stop` is set; calls
/// `tick` with the run and the interval's talkers every `opts.every`
/// (and once at the end). Returns what was read.
pub fn follow(
    run: &mut DryRun,
    mut src: Source,
    opts: &FollowOptions<'_>,
    mut tick: impl FnMut(&DryRun, &Talkers),
) -> Summary {
    let mut headers = HeaderBuf::default();
    let mut talkers = Talkers::default();
    let mut next = Instant::now() + opts.every;
    src.reader_mut().wait_for_newline = true;
    src.set_live(true);
    // Lines judged since the clock was last read: while lines keep
    // coming it is read every `CLOCK_EVERY` of them, and whenever the
    // input is idle.
    let mut unclocked = 0u32;
    loop {
        if src.fill() {
            src.judge_with(run, &mut headers, |r| talkers.add(r));
            unclocked += 1;
            if unclocked < CLOCK_EVERY {
                continue;
            }
        } else {
            if src.error.is_some() {
                break;
            }
            if opts.ended.is_some_and(|e| e.load(Ordering::Relaxed)) {
                // The rest, and a last line without its newline, and
                // the lines held for a reorder window.
                src.set_live(false);
                src.reader_mut().wait_for_newline = false;
                src.reader_mut().resume();
                while src.fill() {
                    src.judge_with(run, &mut headers, |r| talkers.add(r));
                }
                break;
            }
            if opts.stop.load(Ordering::Relaxed) {
                // One last look: what was written before the signal,
                // then the lines held for a reorder window.
                src.set_live(false);
                src.reader_mut().resume();
                if !src.fill() {
                    break;
                }
                src.judge_with(run, &mut headers, |r| talkers.add(r));
                continue;
            }
            std::thread::sleep(opts.poll);
            src.reader_mut().resume();
        }
        unclocked = 0;
        if Instant::now() >= next {
            tick(run, &talkers);
            talkers = Talkers::default();
            next = Instant::now() + opts.every;
        }
    }
    tick(run, &talkers);
    let mut summary = Summary::default();
    let (name, stats, err) = src.finish(run);
    summary.inputs.push((name, stats));
    summary.errors.extend(err);
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    /// A client that comes after 60,000 others, each seen once, is still
    /// the interval's top address (a map that stops taking keys when full
    /// would never count it).
    #[test]
    fn a_late_heavy_client_tops_the_interval_after_many_others() {
        let mut t = Talkers::default();
        let ua: &[(&[u8], &[u8])] = &[(b"user-agent", b"x")];
        let req = |ip: IpAddr| Request {
            method: b"GET",
            host: b"h",
            target: b"/p?q",
            headers: ua,
            ip,
            dst: None,
            port: 80,
            time_ns: 0,
        };
        for i in 0..60_000u32 {
            t.add(&req(IpAddr::from((0x0b00_0000 + i * 7).to_be_bytes())));
        }
        let heavy: IpAddr = "185.220.101.66".parse().unwrap();
        for _ in 0..5_000 {
            t.add(&req(heavy));
        }
        let top = t.ips.top_with(1, rctl_dataplane::topkey::show_ip);
        assert_eq!(top[0].key, "185.220.101.66");
        let nets = t.prefixes.top_with(1, rctl_dataplane::topkey::show_prefix);
        assert_eq!(nets[0].key, "185.220.101.0/24");
        assert!(top[0].count >= 5_000 && top[0].count - top[0].error <= 5_000);
        assert_eq!(t.paths.top(1)[0].key, "/p");
        assert_eq!(t.requests, 65_000);
    }
}
