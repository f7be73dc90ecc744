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
//! A [`Follow`] never blocks: at the end of what is there it returns 0,
//! and [`follow`] polls, judges new lines as they come and calls back
//! every interval with what the last one held.

use crate::record::HeaderBuf;
use crate::run::{Source, Summary};
use rctl_dataplane::dryrun::DryRun;
use rctl_dataplane::Request;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
        })
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
                return Ok(n);
            }
            // Whatever the old file still had is read before switching.
            if !self.rotated()? {
                return Ok(0);
            }
        }
    }
}

/// The busiest keys of one interval.
#[derive(Debug, Default)]
pub struct Talkers {
    /// Requests in the interval.
    pub requests: u64,
    /// By client address.
    pub ips: HashMap<IpAddr, u64>,
    /// By /24 (IPv4) or /48 (IPv6).
    pub prefixes: HashMap<String, u64>,
    /// By User-Agent.
    pub user_agents: HashMap<Vec<u8>, u64>,
    /// By path.
    pub paths: HashMap<Vec<u8>, u64>,
}

/// Distinct keys kept per interval and table; past it, new keys are not
/// counted (the screen shows the top few; memory stays bounded).
const KEYS: usize = 50_000;

fn bump<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u64>, k: K) {
    let n = m.len();
    match m.get_mut(&k) {
        Some(c) => *c += 1,
        None if n < KEYS => {
            m.insert(k, 1);
        }
        None => {}
    }
}

/// The /24 or /48 an address is in.
pub fn prefix(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            format!("{}.{}.{}.0/24", o[0], o[1], o[2])
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
    }
}

impl Talkers {
    /// Counts one request.
    pub fn add(&mut self, r: &Request<'_>) {
        self.requests += 1;
        bump(&mut self.ips, r.ip);
        bump(&mut self.prefixes, prefix(r.ip));
        let ua = r
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"user-agent"))
            .map_or(&b"-"[..], |(_, v)| v);
        bump(&mut self.user_agents, ua.to_vec());
        let path = r.target.split(|&b| b == b'?').next().unwrap_or(r.target);
        bump(&mut self.paths, path.to_vec());
    }

    /// The `n` busiest of `m`, busiest first (ties by key).
    pub fn top<K: Ord + Clone>(m: &HashMap<K, u64>, n: usize) -> Vec<(K, u64)> {
        let mut v: Vec<(K, u64)> = m.iter().map(|(k, c)| (k.clone(), *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
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
    /// The input has a real end (a pipe on stdin): reaching it stops.
    pub ends: bool,
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
    src.reader_mut().wait_for_newline = !opts.ends;
    loop {
        if src.fill() {
            src.judge_with(run, &mut headers, |r| talkers.add(r));
        } else {
            if src.error.is_some() || opts.ends {
                break;
            }
            if opts.stop.load(Ordering::Relaxed) {
                // One last look: what was written before the signal.
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
