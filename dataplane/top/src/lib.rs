//! Recent traffic by key, in bounded memory: what `rctl top` shows of a
//! running agent.
//!
//! A [`Window`] is a ring of one slot per second over the last N seconds;
//! each slot holds one bounded top-k counter (Space-Saving,
//! [`rctl_dataplane::topk`]) per [`KeyKind`]: address, /24 or /48,
//! User-Agent, User-Agent family, path template, the keys `rctl suggest`
//! finds offenders by. A key is counted with its verdict (`key`, a NUL,
//! the verdict's kind), so each key's verdicts come with it. Reading
//! merges the slots of the window and groups each key's verdicts; a slot
//! older than the window is emptied when its second comes round again.
//! Memory is `seconds × kinds × capacity` counters, whatever the traffic.

#![warn(missing_docs)]

use rctl_dataplane::topk::TopK;
use rctl_dataplane::topkey::{ip_key, show_ip};
use rctl_dataplane::Request;
use rctl_suggest::keys::{is_id, network, prefix, ua_family};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// What a key is of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    /// The client address.
    Ip,
    /// Its /24 (IPv4) or /48 (IPv6).
    Prefix,
    /// The User-Agent as sent (`-` when none).
    UserAgent,
    /// The User-Agent's family, versions stripped.
    UaFamily,
    /// The host and path template (ids, digits and hex runs as `*`, as
    /// `rctl_suggest::keys::path_template` makes it).
    PathTemplate,
}

impl KeyKind {
    /// Every kind, in the order they are shown.
    pub const ALL: [KeyKind; 5] = [
        KeyKind::Ip,
        KeyKind::Prefix,
        KeyKind::UserAgent,
        KeyKind::UaFamily,
        KeyKind::PathTemplate,
    ];
}

/// One key of the window, with its verdicts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The key, as text.
    pub key: String,
    /// Requests counted for it over the window (an overestimate by at
    /// most `error`).
    pub requests: u64,
    /// How far `requests` may overestimate (Space-Saving's bound).
    pub error: u64,
    /// Its requests by verdict kind (`pass`, `allow`, `deny`, `throttle`…).
    pub verdicts: BTreeMap<String, u64>,
}

/// The window read at one second: per kind, its heaviest keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Top {
    /// The window's length, seconds.
    pub window_s: u64,
    /// Requests counted in it.
    pub requests: u64,
    /// Per kind, the heaviest keys, heaviest first.
    pub keys: BTreeMap<KeyKind, Vec<Entry>>,
    /// Requests not counted since counting began, because the counter
    /// fell behind its bounded buffer (0 from a [`Window`] itself).
    #[serde(default)]
    pub dropped: u64,
}

struct Slot {
    /// The second it counts (since the epoch); `None` when empty.
    second: Option<u64>,
    counters: Vec<TopK>,
}

/// The last `seconds` seconds of traffic, by key, in bounded memory.
pub struct Window {
    capacity: usize,
    slots: Vec<Slot>,
    /// The counter the slots share their fingerprints with (so that
    /// they merge).
    proto: TopK,
    /// A key's bytes, reused from request to request.
    buf: Vec<u8>,
    /// User-Agent families already computed (at most [`FAMILIES`]).
    families: HashMap<Vec<u8>, String>,
}

/// The most User-Agent families remembered; past it, they are forgotten
/// and computed again.
const FAMILIES: usize = 4096;

/// The longest key kept, in bytes: a longer User-Agent or host and path
/// is counted by its first bytes, so that memory is bounded whatever the
/// requests carry.
pub const MAX_KEY: usize = 256;

/// An address as its bytes (4 for IPv4, 16 for IPv6), shown by
/// [`show_ip`].
fn push_ip(buf: &mut Vec<u8>, ip: IpAddr) {
    let (k, n) = ip_key(ip);
    buf.extend_from_slice(&k[..n]);
}

/// [`path_template`] of `path`, appended to `buf`.
fn template_into(path: &[u8], buf: &mut Vec<u8>) {
    for (i, seg) in path.split(|&b| b == b'/').enumerate() {
        if i > 0 {
            buf.push(b'/');
        }
        if seg.is_empty() || !is_id(seg) {
            buf.extend_from_slice(seg);
        } else {
            buf.push(b'*');
        }
    }
}

impl Window {
    /// A window of `seconds` (at least 1) keeping `capacity` keys per
    /// kind and second.
    pub fn new(seconds: u64, capacity: usize) -> Window {
        let proto = TopK::new(capacity);
        let slots = (0..seconds.max(1))
            .map(|_| Slot {
                second: None,
                counters: KeyKind::ALL
                    .iter()
                    .map(|_| proto.sharing(capacity))
                    .collect(),
            })
            .collect();
        Window {
            capacity,
            slots,
            proto,
            buf: Vec::new(),
            families: HashMap::new(),
        }
    }

    /// The window's length, seconds.
    pub fn seconds(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Counts `r`, decided `verdict` (a verdict's kind: `pass`, `deny`…),
    /// at second `now_s`.
    pub fn add(&mut self, now_s: u64, r: &Request<'_>, verdict: &str) {
        let n = self.slots.len() as u64;
        let i = (now_s % n) as usize;
        let slot = &mut self.slots[i];
        if slot.second != Some(now_s) {
            if slot.second.is_some_and(|s| s > now_s) {
                // A request of a second already gone round: too old.
                return;
            }
            for c in &mut slot.counters {
                *c = self.proto.sharing(self.capacity);
            }
            slot.second = Some(now_s);
        }
        let ua = r
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(b"user-agent"))
            .map_or(&b""[..], |(_, v)| v);
        let ua = &ua[..ua.len().min(MAX_KEY)];
        let path = r.target.split(|&b| b == b'?').next().unwrap_or(r.target);
        // A User-Agent's family, remembered: clients send few distinct
        // ones, and the request path should not parse each again.
        if !self.families.contains_key(ua) {
            if self.families.len() >= FAMILIES {
                self.families.clear();
            }
            self.families.insert(ua.to_vec(), ua_family(ua));
        }
        let family = self.families.get(ua).map_or("-", String::as_str);
        for (k, c) in KeyKind::ALL.iter().zip(&mut slot.counters) {
            let buf = &mut self.buf;
            buf.clear();
            match k {
                // Addresses as their bytes, shown when read.
                KeyKind::Ip => push_ip(buf, r.ip),
                KeyKind::Prefix => push_ip(buf, network(r.ip)),
                KeyKind::UserAgent if ua.is_empty() => buf.push(b'-'),
                KeyKind::UserAgent => buf.extend_from_slice(ua),
                KeyKind::UaFamily => buf.extend_from_slice(family.as_bytes()),
                KeyKind::PathTemplate => {
                    buf.extend(r.host.iter().map(u8::to_ascii_lowercase));
                    template_into(path, buf);
                    buf.truncate(MAX_KEY);
                }
            }
            buf.push(0);
            buf.extend_from_slice(verdict.as_bytes());
            c.add(buf);
        }
    }

    /// The window as of second `now_s`: the `n` heaviest keys of each
    /// kind over the seconds `now_s - seconds + 1 ..= now_s`.
    pub fn top(&self, now_s: u64, n: usize) -> Top {
        self.top_over(now_s, self.seconds(), n)
    }

    /// A copy of the slots [`Window::top_over`] would read for `seconds`
    /// at `now_s` (the others left empty): taken under a lock, merged
    /// outside it, so that reading never holds up counting.
    pub fn recent(&self, now_s: u64, seconds: u64) -> Window {
        let len = seconds.clamp(1, self.slots.len() as u64);
        let slots = self
            .slots
            .iter()
            .map(|s| match s.second {
                Some(t) if t <= now_s && t + len > now_s => Slot {
                    second: s.second,
                    counters: s.counters.clone(),
                },
                _ => Slot {
                    second: None,
                    counters: Vec::new(),
                },
            })
            .collect();
        Window {
            capacity: self.capacity,
            slots,
            proto: self.proto.sharing(1),
            buf: Vec::new(),
            families: HashMap::new(),
        }
    }

    /// [`Window::top`] over the last `seconds` only (1 to the window's
    /// length).
    pub fn top_over(&self, now_s: u64, seconds: u64, n: usize) -> Top {
        let len = seconds.clamp(1, self.slots.len() as u64);
        let live: Vec<&Slot> = self
            .slots
            .iter()
            .filter(|s| s.second.is_some_and(|t| t <= now_s && t + len > now_s))
            .collect();
        let mut keys = BTreeMap::new();
        let mut requests = 0;
        for (i, kind) in KeyKind::ALL.iter().enumerate() {
            let mut merged = self.proto.sharing(self.capacity * live.len().max(1));
            for s in &live {
                merged.merge(&s.counters[i]);
            }
            if i == 0 {
                requests = merged.total();
            }
            keys.insert(*kind, group(&merged, *kind, n));
        }
        Top {
            window_s: len,
            requests,
            keys,
            dropped: 0,
        }
    }
}

/// The (key, verdict) counts of `t` (keys of `kind`) grouped by key;
/// the `n` heaviest.
fn group(t: &TopK, kind: KeyKind, n: usize) -> Vec<Entry> {
    let mut by: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
    // Each counted key is the key's bytes, a NUL, the verdict's kind.
    for h in t.top_with(usize::MAX, |k| {
        let cut = k.iter().rposition(|&b| b == 0).unwrap_or(k.len());
        let key = &k[..cut];
        let verdict = String::from_utf8_lossy(k.get(cut + 1..).unwrap_or_default());
        let key = match kind {
            KeyKind::Ip => show_ip(key),
            KeyKind::Prefix => prefix(show_ip(key).parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
            _ => String::from_utf8_lossy(key).into_owned(),
        };
        format!("{key}\0{verdict}")
    }) {
        let (key, verdict) = h.key.rsplit_once('\0').unwrap_or((h.key.as_str(), "?"));
        let e = by.entry(key.as_bytes().to_vec()).or_insert_with(|| Entry {
            key: key.to_string(),
            requests: 0,
            error: 0,
            verdicts: BTreeMap::new(),
        });
        e.requests += h.count;
        e.error += h.error;
        *e.verdicts.entry(verdict.to_string()).or_default() += h.count;
    }
    let mut v: Vec<Entry> = by.into_values().collect();
    v.sort_by(|a, b| b.requests.cmp(&a.requests).then_with(|| a.key.cmp(&b.key)));
    v.truncate(n);
    v
}

#[cfg(test)]
mod tests;
