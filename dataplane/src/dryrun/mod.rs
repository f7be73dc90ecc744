//! `rctl dry-run`: replays captures through a ruleset, on capture time,
//! and reports what every rule would have done, to whom.
//!
//! Every packet goes through the packet decision (what XDP would do);
//! every reassembled HTTP request goes through the request decision, with
//! limiters running on the capture's timestamps. Nothing is sampled.

use crate::capture::decode::{decode, tcp, Skip};
use crate::capture::pcap::{CaptureError, CaptureReader, Frame, FrameRef};
use crate::capture::stream::{Batch, HttpRequest, Limits, Segment, Streams};
mod affected;
mod report;
mod requests;
mod series;

pub use affected::{browser_like, Distinct};

pub use crate::partial::Known;
use crate::topk::TopK;
use crate::topkey::{ip_key, show_ip};
use crate::Request;
use crate::{Engine, EngineConfig, EngineError, Packet, Scratch, Verdict};
use affected::Stops;
use rctl_compiler::ir::{Proto, Ruleset};
pub use report::{
    Affect, Affected, BadLine, Change, Counts, InputReport, KeyCount, LogInput, Report, RuleReport,
    RuleSoFar, RulesetInfo, ThrottleKeys, Totals, Unmatched, DISTINCT_MAX,
};
use requests::{
    change_report, changed, count, describe, Blinds, Changes, RequestSide, CANDIDATES, TOP,
};
use std::io::{BufRead, Read};
use std::sync::Arc;

/// Every HTTP request in a capture, in the order the reassembler completes
/// them (for cross-checks and tools), and the read error if any.
pub fn requests_in(input: impl Read) -> (Vec<HttpRequest>, Option<CaptureError>) {
    let mut out = Vec::new();
    let err = each_request_in(input, |r| out.push(r.clone()));
    (out, err)
}

/// Hands each HTTP request of a capture to `each`, in the order the
/// reassembler completes them, holding only the requests of one frame at
/// a time; the read error if any (the requests before it were handed).
pub fn each_request_in(
    input: impl Read,
    mut each: impl FnMut(&HttpRequest),
) -> Option<CaptureError> {
    let mut streams = Streams::new(Limits::default());
    let mut out = Batch::new();
    let result = (|| {
        let mut reader = CaptureReader::new(input)?;
        while let Some(f) = reader.next_frame()? {
            if let Ok(d) = decode(f.linktype, &f.data, f.orig_len) {
                if d.proto == 6 {
                    streams.segment(
                        (d.src, d.sport),
                        (d.dst, d.dport),
                        Segment {
                            seq: d.seq,
                            flags: d.flags,
                            payload: d.payload,
                            time_ns: f.time_ns,
                        },
                        &mut out,
                    );
                    if !out.is_empty() {
                        out.iter().for_each(&mut each);
                        out.clear();
                    }
                }
            }
        }
        Ok(())
    })();
    result.err()
}

/// Requests handed from the packet side to the request side at a time;
/// a batch is handed over sooner when its heads reach [`BATCH_BYTES`].
const BATCH: usize = 256;

/// Bytes of request heads handed over at a time at most (plus one head):
/// with at most [`IN_FLIGHT`] batches queued, one being filled and one
/// being counted, the requests between the two sides take a few
/// megabytes however large their heads.
const BATCH_BYTES: usize = 256 << 10;

/// Batches queued between the two sides.
const IN_FLIGHT: usize = 8;

/// A replay in progress.
///
/// Two stages, each strictly in capture order: the packet side (read,
/// decode, packet decision, TCP reassembly, HTTP parsing) runs on the
/// caller's thread and hands parsed requests, in batches, to the request
/// side (request decision and statistics) on a second thread. The two
/// share the compiled engine; packet and request limiters are separate
/// rules, so neither side's order depends on the other's.
pub struct DryRun {
    packets: PacketSide,
    requests: RequestSide,
    inputs: Vec<InputReport>,
    /// Per input: what it lacks (`None` for captures, which lack nothing).
    blinds: Vec<Option<Blinds>>,
    engine: Arc<Engine>,
    old: Option<Arc<Engine>>,
    /// Per rule: the fields it reads that some input lacks.
    missing: Vec<Vec<String>>,
    /// The ruleset, and with `--against` the old one.
    ruleset: RulesetInfo,
    against: Option<RulesetInfo>,
    /// The inputs that log no User-Agent or no Accept-Language.
    legit_unmeasured: Vec<String>,
}

/// The packet decision, reassembly and parsing.
struct PacketSide {
    engine: Arc<Engine>,
    scratch: Scratch,
    old: Option<(Arc<Engine>, Scratch)>,
    streams: Streams,
    totals: Totals,
    /// Per rule: packets it decided.
    decided: Vec<Counts>,
    /// Per rule: the requests in the packets it stopped.
    stopped: Vec<Stopped>,
    /// Requests completed by a stopped packet, counted and cleared.
    spare: Batch,
    /// Packet decisions that change under `--against`.
    changes: Changes,
    /// Requests in stopped packets, and for whom.
    stops: Stops,
}

/// What the report says of a ruleset: its content hash and rule count
/// (its name is the caller's, [`DryRun::name`]).
fn info(rs: &Ruleset) -> RulesetInfo {
    let bytes = rctl_compiler::artifact::encode(rs);
    let hash = rctl_compiler::artifact::content_hash(&bytes)
        .unwrap_or_else(|| rctl_compiler::artifact::sha256(&bytes));
    RulesetInfo {
        name: String::new(),
        hash: rctl_compiler::artifact::hex(&hash),
        rules: rs.rules.len(),
    }
}

fn engine_for(ruleset: Ruleset, site: Option<String>) -> Result<Arc<Engine>, EngineError> {
    let config = EngineConfig {
        site,
        ..Default::default()
    };
    Ok(Arc::new(Engine::new(ruleset, &config)?))
}

impl DryRun {
    /// Prepares a replay of `ruleset` for `site`.
    pub fn new(ruleset: Ruleset, site: Option<String>) -> Result<DryRun, EngineError> {
        let n = ruleset.rules.len();
        let stops = Stops::new(&ruleset);
        let ruleset_info = info(&ruleset);
        let engine = engine_for(ruleset, site)?;
        let engine2 = engine.clone();
        Ok(DryRun {
            blinds: Vec::new(),
            old: None,
            missing: vec![Vec::new(); n],
            ruleset: ruleset_info,
            against: None,
            requests: RequestSide::new(engine.clone(), stops.sharing()),
            packets: PacketSide {
                stops,
                scratch: engine.scratch(),
                engine,
                old: None,
                streams: Streams::new(Limits::default()),
                totals: Totals::default(),
                decided: vec![Counts::default(); n],
                stopped: (0..n).map(|_| Stopped::default()).collect(),
                spare: Batch::new(),
                changes: Changes::new(),
            },
            inputs: Vec::new(),
            engine: engine2,
            legit_unmeasured: Vec::new(),
        })
    }

    /// Bounds the stream bytes all flows hold together (default 256 MiB;
    /// see [`crate::capture::stream`] for what is shed beyond it).
    pub fn set_max_buffered(&mut self, bytes: usize) {
        self.packets.streams.set_max_buffered(bytes);
    }

    /// Also evaluates every packet and request with `old`, and reports
    /// where the decisions differ.
    pub fn against(&mut self, old: Ruleset, site: Option<String>) -> Result<(), EngineError> {
        self.against = Some(info(&old));
        let engine = engine_for(old, site)?;
        self.requests.against(engine.clone());
        self.packets.old = Some((engine.clone(), engine.scratch()));
        self.old = Some(engine);
        Ok(())
    }

    /// The fields the ruleset (and the old one, with `--against`) reads
    /// that an input carrying `known` lacks (sorted, each once): what a columnar reader must decode is what
    /// makes this list longer when left out.
    pub fn missing_for(&self, known: &Known) -> Vec<String> {
        let blind = self.engine.blind(known);
        let mut out: Vec<String> = (0..self.missing.len())
            .flat_map(|i| blind.missing(i).iter().cloned())
            .collect();
        // The old ruleset of `--against` reads what it reads too.
        if let Some(old) = &self.old {
            let b = old.blind(known);
            out.extend((0..old.ruleset().rules.len()).flat_map(|i| b.missing(i).iter().cloned()));
        }
        out.sort();
        out.dedup();
        out
    }

    /// Names the ruleset, and with `--against` the old one, as the report
    /// shows them (the paths they were loaded from).
    pub fn name(&mut self, ruleset: &str, against: Option<&str>) {
        self.ruleset.name = ruleset.to_string();
        if let (Some(a), Some(name)) = (&mut self.against, against) {
            a.name = name.to_string();
        }
    }

    /// Starts an input of requests that carries the fields `known` says
    /// (a log, in the format `format`); returns its index for
    /// [`DryRun::log_request`]. A rule that reads a field it lacks is
    /// not judged on it: the requests whose verdict that leaves unknown
    /// are counted as such (never as passing).
    pub fn add_request_input(&mut self, name: &str, format: &str, known: &Known) -> usize {
        let new = self.engine.blind(known);
        let mut missing_fields = Vec::new();
        for (i, m) in self.missing.iter_mut().enumerate() {
            for f in new.missing(i) {
                if !m.contains(f) {
                    m.push(f.clone());
                }
                if !missing_fields.contains(f) {
                    missing_fields.push(f.clone());
                }
            }
        }
        missing_fields.sort();
        let tells = known.has_header("user-agent") && known.has_header("accept-language");
        if !tells && !self.legit_unmeasured.iter().any(|n| n == name) {
            self.legit_unmeasured.push(name.to_string());
        }
        let old = self.old.as_ref().map(|o| o.blind(known));
        self.blinds.push(Some(Blinds { new, old }));
        self.inputs.push(InputReport {
            path: name.to_string(),
            packets: 0,
            error: None,
            log: Some(LogInput {
                format: format.to_string(),
                missing_fields,
                ..LogInput::default()
            }),
        });
        self.inputs.len() - 1
    }

    /// Decides and counts one request of input `input` (from
    /// [`DryRun::add_request_input`]), on its own time.
    pub fn log_request(&mut self, input: usize, req: &Request<'_>) {
        self.log_request_cut(input, req, &[]);
    }

    /// [`DryRun::log_request`] for a request whose headers named in `cut`
    /// may have been cut at their logged length (see
    /// [`Engine::judge_request_cut`](crate::Engine::judge_request_cut)).
    pub fn log_request_cut(&mut self, input: usize, req: &Request<'_>, cut: &[&[u8]]) {
        let t = &mut self.packets.totals;
        t.first_ns = Some(t.first_ns.map_or(req.time_ns, |x| x.min(req.time_ns)));
        t.last_ns = Some(t.last_ns.map_or(req.time_ns, |x| x.max(req.time_ns)));
        let blinds = self.blinds.get(input).and_then(Option::as_ref);
        if let Some(i) = self.requests.decide(req, blinds, cut) {
            let ua = req
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(b"user-agent"))
                .map_or(&b""[..], |(_, v)| v);
            let al = req
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(b"accept-language"));
            let kind = self.engine.rule(i).action.kind();
            self.packets.stops.add(kind, req.ip, ua, al);
            self.packets.stopped[i].add_parts(req.ip, ua);
            self.packets.totals.stopped_requests += 1;
        }
    }

    /// The throttle outcomes the request side's next decisions take
    /// instead of counting in their limiters (see [`crate::Replay`]):
    /// set it before [`DryRun::log_request`] to replay a request whose
    /// throttles were run elsewhere; `None` (the default) counts as usual.
    pub fn replay_mut(&mut self) -> &mut Option<crate::Replay> {
        self.requests.replay_mut()
    }

    /// Each rule's counts so far (a followed log's running screen).
    pub fn so_far(&self) -> Vec<RuleSoFar> {
        self.requests.so_far()
    }

    /// Records what was read from request input `input`: its lines, bad
    /// lines and time resolution, and the error that stopped it, if any.
    pub fn finish_request_input(&mut self, input: usize, log: LogInput, error: Option<String>) {
        if let Some(i) = self.inputs.get_mut(input) {
            let missing_fields = i.log.take().map(|l| l.missing_fields).unwrap_or_default();
            i.log = Some(LogInput {
                missing_fields,
                ..log
            });
            i.error = error;
        }
    }

    /// Replays one capture. On a read error, everything before it counts
    /// and the error (with its byte offset) is returned and recorded.
    pub fn replay(&mut self, name: &str, input: impl BufRead) -> Result<(), CaptureError> {
        let DryRun {
            packets,
            requests,
            inputs,
            ..
        } = self;
        let before = packets.totals.packets;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(IN_FLIGHT);
        let (back, recycled) = std::sync::mpsc::channel::<Batch>();
        let result = std::thread::scope(|scope| {
            scope.spawn(move || {
                for mut batch in rx {
                    batch.iter().for_each(|r| requests.request(r));
                    batch.clear();
                    // The packet side may be gone already; the batch is
                    // then simply freed.
                    let _ = back.send(batch);
                }
            });
            let mut batch = Batch::new();
            let result = (|| {
                let mut reader = CaptureReader::new(input)?;
                let mut frame = Frame {
                    time_ns: 0,
                    linktype: 0,
                    data: Vec::new(),
                    orig_len: 0,
                    offset: 0,
                };
                while let Some(f) = reader.next_frame_ref(&mut frame)? {
                    packets.frame(f, &mut batch);
                    if batch.len() >= BATCH || batch.bytes() >= BATCH_BYTES {
                        let next = recycled.try_recv().unwrap_or_default();
                        // The request side only stops when this side drops
                        // the sender, so the send cannot fail.
                        let _ = tx.send(std::mem::replace(&mut batch, next));
                    }
                }
                Ok(())
            })();
            let _ = tx.send(batch);
            drop(tx);
            result
        });
        inputs.push(InputReport {
            path: name.to_string(),
            packets: packets.totals.packets - before,
            error: result.as_ref().err().map(|e: &CaptureError| e.to_string()),
            log: None,
        });
        self.blinds.push(None);
        result
    }
}

impl PacketSide {
    /// Feeds one frame; requests it completes are appended to `out`.
    fn frame(&mut self, f: FrameRef<'_>, out: &mut Batch) {
        let t = &mut self.totals;
        t.packets += 1;
        t.bytes += u64::from(f.orig_len);
        t.first_ns = Some(t.first_ns.map_or(f.time_ns, |x| x.min(f.time_ns)));
        t.last_ns = Some(t.last_ns.map_or(f.time_ns, |x| x.max(f.time_ns)));
        let d = match decode(f.linktype, f.data, f.orig_len) {
            Ok(d) => d,
            Err(Skip::Fragment) => return t.fragments += 1,
            Err(Skip::Truncated) => return t.truncated += 1,
            Err(Skip::NotIp) => return t.not_ip += 1,
            Err(Skip::UnsupportedLink(_)) => return t.unsupported_link += 1,
            Err(Skip::Malformed) => return t.malformed += 1,
        };
        if d.truncated {
            t.truncated += 1;
        }
        let proto = match d.proto {
            6 => Proto::Tcp,
            17 => Proto::Udp,
            1 | 58 => Proto::Icmp,
            _ => return,
        };
        let syn = d.flags & tcp::SYN != 0 && d.flags & tcp::ACK == 0;
        let mut stopped_by = None;
        // XDP sits on the edge's ingress: it judges what clients send, not
        // the servers' answers (for UDP and ICMP every packet is judged).
        let inbound = d.proto != 6
            || self
                .streams
                .from_client((d.src, d.sport), (d.dst, d.dport), d.flags);
        if inbound {
            let p = Packet {
                src: d.src,
                dst: Some(d.dst),
                proto,
                dst_port: d.dport,
                syn,
                time_ns: f.time_ns,
            };
            let pd = self.engine.decide_packet_with(&p, &mut self.scratch);
            if let Some(i) = pd.verdict.rule() {
                count(&mut self.decided[i], &pd.verdict);
            }
            if let Some((old, scratch)) = &mut self.old {
                let od = old.decide_packet_with(&p, scratch);
                let (a, b) = (
                    describe(old.ruleset(), &od.verdict),
                    describe(self.engine.ruleset(), &pd.verdict),
                );
                if a != b {
                    let ip = ip_key(d.src);
                    changed(&mut self.changes, a, b, &ip.0[..ip.1], None);
                }
            }
            if let Verdict::Drop { rule } | Verdict::Throttle { rule, .. } = pd.verdict {
                stopped_by = Some(rule);
            }
        }
        if d.proto != 6 {
            return;
        }
        // A stopped packet still goes through reassembly, so that the
        // requests it carried are counted (and its flow stays in step);
        // the requests it completes go to its rule, not to the HTTP plane.
        let to = match stopped_by {
            Some(_) => &mut self.spare,
            None => out,
        };
        self.streams.segment_from(
            (d.src, d.sport),
            (d.dst, d.dport),
            inbound,
            Segment {
                seq: d.seq,
                flags: d.flags,
                payload: d.payload,
                time_ns: f.time_ns,
            },
            to,
        );
        if let Some(i) = stopped_by {
            let s = &mut self.stopped[i];
            let kind = self.engine.rule(i).action.kind();
            for r in self.spare.iter() {
                let ua = r.header("user-agent").unwrap_or(b"");
                let al = r.header("accept-language").is_some();
                self.stops.add(kind, r.client.0, ua, al);
                s.add(r);
                self.totals.stopped_requests += 1;
            }
            self.spare.clear();
        }
    }
}

/// The requests in the packets one rule stopped.
#[derive(Default)]
struct Stopped {
    requests: u64,
    ips: Option<TopK>,
    uas: Option<TopK>,
}

impl Stopped {
    fn add(&mut self, r: &HttpRequest) {
        self.add_parts(r.client.0, r.header("user-agent").unwrap_or(b""));
    }

    fn add_parts(&mut self, client: std::net::IpAddr, ua: &[u8]) {
        self.requests += 1;
        let ip = ip_key(client);
        self.ips
            .get_or_insert_with(|| TopK::new(CANDIDATES))
            .add(&ip.0[..ip.1]);
        self.uas
            .get_or_insert_with(|| TopK::new(CANDIDATES))
            .add(ua);
    }
}

impl DryRun {
    /// Finishes the replay.
    pub fn finish(self) -> Report {
        let p = self.packets;
        let st = &p.streams.stats;
        let mut t = p.totals;
        t.flows = st.flows;
        t.tls_flows = st.tls_flows;
        t.unparsable_bytes = st.unparsable_bytes;
        t.resyncs = st.resyncs;
        t.retransmitted_bytes = st.retransmitted_bytes;
        t.evicted_flows = st.evicted_flows;
        t.max_buffered_bytes = p.streams.limits().max_buffered as u64;
        t.buffered_peak_bytes = st.buffered_peak;
        t.shed_flows = st.shed_flows;
        t.shed_bytes = st.shed_bytes;
        let unknown = self.requests.unknown;
        let r = self.requests.finish(t.first_ns);
        t.requests = r.requests;
        t.unknown_requests = unknown;
        t.captured_requests = t.requests + t.stopped_requests;
        let rules = r
            .rules
            .into_iter()
            .zip(p.decided)
            .zip(p.stopped)
            .zip(self.missing)
            .map(|(((rule, packets), s), mut missing_fields)| RuleReport {
                missing_fields: {
                    missing_fields.sort();
                    missing_fields
                },
                stopped_packets: packets.drop + packets.throttle,
                stopped_requests: s.requests,
                stopped_top_ips: s.ips.map_or(Vec::new(), |t| t.top_with(TOP, show_ip)),
                stopped_top_user_agents: s.uas.map_or(Vec::new(), |t| t.top(TOP)),
                packets,
                ..rule
            })
            .collect();
        let changes = p.old.is_some().then(|| change_report(p.changes, r.changes));
        let mut stops = p.stops;
        stops.merge(&r.stops);
        // Tenths of a second mean nothing for a log timed to the second.
        let coarse = self.inputs.iter().any(|i| {
            i.log
                .as_ref()
                .is_some_and(|l| l.resolution_ns > 100_000_000)
        });
        Report {
            schema: 1,
            ruleset: self.ruleset,
            against: self.against,
            affected: Affected {
                legit_unmeasured: self.legit_unmeasured,
                ..stops.report()
            },
            totals: t,
            rules,
            unmatched: r.unmatched,
            inputs: self.inputs,
            changes,
            series: r.series,
            series_100ms: r.fine.filter(|_| !coarse),
        }
    }
}
