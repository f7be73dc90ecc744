//! TCP reassembly and HTTP/1.x request parsing, per flow, streaming.
//!
//! - **Direction.** The client is the side that sent the SYN; for flows
//!   that began before the capture, the side whose port is not the
//!   service's (the lower, or a well-known, port is the server).
//! - **Reassembly.** In-order bytes go straight to the parser;
//!   retransmitted bytes are trimmed; out-of-order segments wait, up to
//!   [`Limits::pending_bytes`] per flow, after which the gap is skipped and
//!   the parser resynchronises.
//! - **Parsing.** httparse parses each request head; bodies are skipped by
//!   Content-Length or chunked encoding; pipelined requests in one segment
//!   all come out. A stream that starts mid-request, or holds garbage, is
//!   resynchronised at the next line starting with a method; the skipped
//!   bytes are counted as unparsable. A head that arrives in pieces is
//!   held, and parsed once its end (an empty line) has arrived: each byte
//!   is looked at about once, however small the segments.
//! - **Time.** A request's time is the capture time of the packet after
//!   which its head was complete: the one carrying the head's last byte,
//!   or, if that byte came early (out of order), the one that filled the
//!   gap before it.
//! - **Bounds.** At most [`Limits::max_flows`] flows; when full, the flows
//!   idle longest are evicted (an eighth of the table at a time). A head
//!   larger than [`Limits::max_head`] is unparsable, however it is
//!   segmented.
//! - **Memory.** What the flows hold (partial heads and body lines, and
//!   out-of-order segments, each charged [`SEGMENT_COST`] bytes of
//!   bookkeeping on top of its payload) is bounded in total by
//!   [`Limits::max_buffered`]. When a segment takes the total past it, the
//!   flows holding the most are *shed*, largest first, until the total is
//!   back under seven eighths of the bound: their held bytes are dropped
//!   and they resynchronise at their next request line, as a flow that
//!   began before the capture does. Largest first, because the flows that
//!   hold the most are the stuck ones (a head that never ends, a gap that
//!   is never filled), while an ordinary flow holds at most part of one
//!   request: each shed frees the most memory for the fewest requests
//!   lost, and idle flows with nothing held cost nothing. Shedding down to
//!   seven eighths makes one scan of the table free at least an eighth of
//!   the bound. The bound holds between segments; within one segment, its
//!   own flow can pass it by that segment's growth. The flow table itself
//!   (160 bytes a flow) is bounded by [`Limits::max_flows`].
//! - **TLS** (a client stream starting with a TLS record) is counted and
//!   not parsed.

mod http;
#[cfg(test)]
mod tests;

use crate::matcher::{FastHash, FastMap};
use http::Parser;
pub use http::{Batch, HttpRequest, KEPT_HEAD};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Bytes of bookkeeping charged for each held out-of-order segment, on top
/// of its payload (its buffer's header and allocation, and its entry in
/// the flow's tree), against both [`Limits::pending_bytes`] and
/// [`Limits::max_buffered`].
pub const SEGMENT_COST: usize = 64;

/// Bounds of the reassembler.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most flows tracked at once.
    pub max_flows: usize,
    /// Most out-of-order bytes held per flow.
    pub pending_bytes: usize,
    /// Largest request head.
    pub max_head: usize,
    /// Most bytes held by all flows together (see the module's
    /// documentation).
    pub max_buffered: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_flows: 200_000,
            pending_bytes: 256 << 10,
            max_head: 64 << 10,
            max_buffered: 256 << 20,
        }
    }
}

/// One TCP segment's fields.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// Sequence number.
    pub seq: u32,
    /// TCP flags.
    pub flags: u8,
    /// Payload.
    pub payload: &'a [u8],
    /// Capture time.
    pub time_ns: u64,
}

/// Counters of what the reassembler saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Flows seen.
    pub flows: u64,
    /// Flows carrying TLS.
    pub tls_flows: u64,
    /// Bytes skipped as unparsable.
    pub unparsable_bytes: u64,
    /// Times the parser lost sync (garbage, bad heads, gaps).
    pub resyncs: u64,
    /// Gaps skipped because out-of-order data exceeded the bound.
    pub gaps: u64,
    /// Retransmitted bytes trimmed.
    pub retransmitted_bytes: u64,
    /// Flows evicted to stay within the bound.
    pub evicted_flows: u64,
    /// The most bytes held by all flows at once, between segments, as
    /// [`Limits::max_buffered`] counts them.
    pub buffered_peak: u64,
    /// Times a flow's held bytes were dropped to stay within
    /// [`Limits::max_buffered`].
    pub shed_flows: u64,
    /// Stream bytes (payload, not bookkeeping) dropped that way.
    pub shed_bytes: u64,
}

/// A connection's two endpoints, in a fixed order (the lower address and
/// port first) so that one lookup finds it from either direction, packed
/// so that hashing it costs five word mixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    low: u128,
    high: u128,
    /// Low port, high port, and the address family in bit 32.
    ports: u64,
}

impl Key {
    /// The key of the connection between `a` and `b`, and whether `a` is
    /// its low endpoint.
    fn of(a: (IpAddr, u16), b: (IpAddr, u16)) -> (Key, bool) {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        let (x, y) = ((bits(a.0), a.1), (bits(b.0), b.1));
        let a_low = x <= y;
        let (l, h) = if a_low { (x, y) } else { (y, x) };
        let key = Key {
            low: l.0,
            high: h.0,
            ports: u64::from(l.1) << 16 | u64::from(h.1) | u64::from(a.0.is_ipv6()) << 32,
        };
        (key, a_low)
    }
}

/// Who talks to whom, and when: what every parsed request carries.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    client: (IpAddr, u16),
    server: (IpAddr, u16),
    time_ns: u64,
}

#[derive(Debug)]
struct Flow {
    next_seq: Option<u32>,
    /// Out-of-order segments, by sequence number.
    pending: BTreeMap<u32, Vec<u8>>,
    /// Their payload plus [`SEGMENT_COST`] each.
    pending_len: usize,
    http: Parser,
    last_seen: u64,
    /// Whether the client is the key's low endpoint.
    client_low: bool,
}

impl Flow {
    /// Bytes held, as [`Limits::max_buffered`] counts them.
    fn held(&self) -> usize {
        self.http.held() + self.pending_len
    }

    /// Stream bytes held, not yet parsed.
    fn held_payload(&self) -> usize {
        self.http.pending() + self.pending_len - self.pending.len() * SEGMENT_COST
    }

    /// Drops what the flow holds: it picks up again at its next segment,
    /// resynchronising at the next request line.
    fn shed(&mut self) {
        self.http.reset();
        if !self.pending.is_empty() {
            self.pending = BTreeMap::new();
            self.pending_len = 0;
            self.next_seq = None;
        }
    }
}

/// The reassembler and parser for all flows of a capture.
#[derive(Debug)]
pub struct Streams {
    flows: FastMap<Key, Flow>,
    limits: Limits,
    /// What all flows hold now, as [`Limits::max_buffered`] counts it.
    buffered: usize,
    /// What was seen.
    pub stats: StreamStats,
}

fn well_known(port: u16) -> bool {
    matches!(port, 80 | 443 | 8080 | 8000 | 8443 | 3128 | 9080)
}

impl Streams {
    /// A reassembler with these bounds.
    pub fn new(limits: Limits) -> Self {
        Streams {
            flows: FastMap::with_hasher(FastHash::random()),
            limits,
            buffered: 0,
            stats: StreamStats::default(),
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Changes the bound on what all flows hold together, shedding now if
    /// they hold more.
    pub fn set_max_buffered(&mut self, bytes: usize) {
        self.limits.max_buffered = bytes;
        if self.buffered > bytes {
            self.shed();
        }
    }

    /// Bytes all flows hold now, as [`Limits::max_buffered`] counts them.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Whether a segment from `src` to `dst` goes from client to server:
    /// the flow's known direction, else the SYN's, else the service port's.
    pub fn from_client(&self, src: (IpAddr, u16), dst: (IpAddr, u16), flags: u8) -> bool {
        use super::decode::tcp::{ACK, SYN};
        let (key, src_low) = Key::of(src, dst);
        if let Some(flow) = self.flows.get(&key) {
            flow.client_low == src_low
        } else if flags & SYN != 0 {
            flags & ACK == 0
        } else {
            well_known(dst.1) && !well_known(src.1)
                || (well_known(dst.1) == well_known(src.1) && dst.1 < src.1)
        }
    }

    /// Feeds one TCP segment (`src` and `dst` are address and port);
    /// parsed requests are appended to `out`.
    pub fn segment(
        &mut self,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        seg: Segment<'_>,
        out: &mut Batch,
    ) {
        let from_client = self.from_client(src, dst, seg.flags);
        self.segment_from(src, dst, from_client, seg, out);
    }

    /// Like [`Streams::segment`], with the direction already known (from
    /// [`Streams::from_client`]).
    pub fn segment_from(
        &mut self,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        from_client: bool,
        seg: Segment<'_>,
        out: &mut Batch,
    ) {
        let Segment {
            seq,
            flags,
            payload,
            time_ns,
        } = seg;
        use super::decode::tcp::{FIN, RST, SYN};
        let syn = flags & SYN != 0;
        let (client, server) = if from_client { (src, dst) } else { (dst, src) };
        let (key, client_low) = Key::of(client, server);
        if self.flows.len() >= self.limits.max_flows && !self.flows.contains_key(&key) {
            self.evict();
        }
        let flow = match self.flows.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                if flags & (RST | FIN) != 0 && payload.is_empty() {
                    return;
                }
                self.stats.flows += 1;
                v.insert(Flow {
                    next_seq: None,
                    pending: BTreeMap::new(),
                    pending_len: 0,
                    http: Parser::default(),
                    last_seen: time_ns,
                    client_low,
                })
            }
        };
        flow.last_seen = time_ns;
        // The flow's own orientation wins over the caller's guess.
        let from_client = from_client == (flow.client_low == client_low);
        let (client, server) = if from_client { (src, dst) } else { (dst, src) };
        let before = flow.held();
        if from_client {
            if syn {
                flow.next_seq = Some(seq.wrapping_add(1));
                flow.http.start();
            } else if !payload.is_empty() {
                let ctx = Ctx {
                    client,
                    server,
                    time_ns,
                };
                Self::data(flow, &self.limits, &mut self.stats, &ctx, seq, payload, out);
            }
        }
        let after = flow.held();
        self.buffered = self.buffered - before + after;
        if flags & (RST | FIN) != 0 && (from_client || flags & RST != 0) {
            self.flows.remove(&key);
            self.buffered -= after;
        }
        if self.buffered > self.limits.max_buffered {
            self.shed();
        }
        self.stats.buffered_peak = self.stats.buffered_peak.max(self.buffered as u64);
    }

    fn evict(&mut self) {
        let mut ages: Vec<(u64, Key)> = self.flows.iter().map(|(k, f)| (f.last_seen, *k)).collect();
        ages.sort_unstable();
        let n = (ages.len() / 8).max(1);
        for (_, k) in ages.into_iter().take(n) {
            if let Some(f) = self.flows.remove(&k) {
                self.buffered -= f.held();
                self.stats.evicted_flows += 1;
            }
        }
    }

    /// Sheds the flows holding the most until the total is under seven
    /// eighths of the bound (ties: the flow idle longest first).
    fn shed(&mut self) {
        let target = self.limits.max_buffered - self.limits.max_buffered / 8;
        let mut holders: Vec<(usize, u64, Key)> = self
            .flows
            .iter()
            .filter(|(_, f)| f.held() > 0)
            .map(|(k, f)| (f.held(), f.last_seen, *k))
            .collect();
        holders.sort_unstable_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        for (held, _, k) in holders {
            if self.buffered <= target {
                break;
            }
            let Some(f) = self.flows.get_mut(&k) else {
                continue;
            };
            self.stats.shed_flows += 1;
            self.stats.shed_bytes += f.held_payload() as u64;
            f.shed();
            self.buffered -= held;
        }
    }

    fn data(
        flow: &mut Flow,
        limits: &Limits,
        stats: &mut StreamStats,
        ctx: &Ctx,
        seq: u32,
        payload: &[u8],
        out: &mut Batch,
    ) {
        let next = *flow.next_seq.get_or_insert(seq);
        let diff = seq.wrapping_sub(next) as i32;
        if diff > 0 {
            if flow.pending_len + payload.len() + SEGMENT_COST > limits.pending_bytes {
                // Give up on the gap: continue from the earliest held data.
                stats.gaps += 1;
                stats.resyncs += 1;
                flow.http.reset();
                let Some((&first, _)) = flow.pending.iter().next() else {
                    flow.next_seq = Some(seq.wrapping_add(payload.len() as u32));
                    return;
                };
                flow.next_seq = Some(first);
            } else {
                flow.pending_len += payload.len() + SEGMENT_COST;
                if let Some(old) = flow.pending.insert(seq, payload.to_vec()) {
                    flow.pending_len -= old.len() + SEGMENT_COST;
                }
                return;
            }
        } else {
            let skip = diff.unsigned_abs() as usize;
            if skip >= payload.len() {
                stats.retransmitted_bytes += payload.len() as u64;
                return;
            }
            stats.retransmitted_bytes += skip as u64;
            Self::append(flow, limits, stats, &payload[skip..], ctx, out);
        }
        // Drain held segments that are now in order.
        while let Some(next) = flow.next_seq {
            let Some((&s, _)) = flow.pending.iter().next() else {
                break;
            };
            let d = s.wrapping_sub(next) as i32;
            if d > 0 {
                break;
            }
            let Some(seg) = flow.pending.remove(&s) else {
                break;
            };
            flow.pending_len -= seg.len() + SEGMENT_COST;
            let skip = d.unsigned_abs() as usize;
            if skip < seg.len() {
                stats.retransmitted_bytes += skip as u64;
                Self::append(flow, limits, stats, &seg[skip..], ctx, out);
            } else {
                stats.retransmitted_bytes += seg.len() as u64;
            }
        }
    }

    /// Hands in-order bytes to the flow's parser.
    fn append(
        flow: &mut Flow,
        limits: &Limits,
        stats: &mut StreamStats,
        bytes: &[u8],
        ctx: &Ctx,
        out: &mut Batch,
    ) {
        flow.next_seq = flow.next_seq.map(|n| n.wrapping_add(bytes.len() as u32));
        flow.http.feed(limits, stats, bytes, ctx, out);
    }
}
