//! `rctl dry-run`: replays captures through a ruleset, on capture time,
//! and reports what every rule would have done, to whom.
//!
//! Every packet goes through the packet decision (what XDP would do);
//! every reassembled HTTP request goes through the request decision, with
//! limiters running on the capture's timestamps. Nothing is sampled.

use crate::capture::decode::{decode, tcp, Skip};
use crate::capture::pcap::{CaptureError, CaptureReader, Frame};
use crate::capture::stream::{HttpRequest, Limits, Segment, Streams};
use crate::topk::{Hitter, TopK};
use crate::{Engine, EngineConfig, EngineError, Packet, Request, Scratch, Trace, Verdict};
use rctl_compiler::ir::{Proto, Ruleset};
use serde::Serialize;
use std::io::Read;

/// Counts per action.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Allowed (exempted).
    pub allow: u64,
    /// Denied.
    pub deny: u64,
    /// Throttled.
    pub throttle: u64,
    /// Dropped.
    pub drop: u64,
    /// Only logged (log and shadow rules).
    pub log: u64,
}

/// What one rule did.
#[derive(Debug, Clone, Serialize)]
pub struct RuleReport {
    /// Rule name.
    pub name: String,
    /// Its action (allow, deny, throttle, log, drop).
    pub action: String,
    /// Shadow mode.
    pub shadow: bool,
    /// Requests its condition matched (whether or not it decided).
    pub matches: u64,
    /// Requests it decided, by verdict; `log` counts log and shadow matches.
    pub requests: Counts,
    /// What a shadow rule would have done to the requests it matched.
    pub would: Counts,
    /// Packets it decided on the packet plane.
    pub packets: Counts,
    /// Capture time of the first and last match, ns since the epoch.
    pub first_seen_ns: Option<u64>,
    /// See `first_seen_ns`.
    pub last_seen_ns: Option<u64>,
    /// Busiest client addresses among its matches.
    pub top_ips: Vec<Hitter>,
    /// Busiest User-Agents among its matches.
    pub top_user_agents: Vec<Hitter>,
    /// Busiest paths among its matches.
    pub top_paths: Vec<Hitter>,
}

/// Input totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Frames read.
    pub packets: u64,
    /// Bytes on the wire.
    pub bytes: u64,
    /// TCP flows.
    pub flows: u64,
    /// Flows carrying TLS (not inspected; L3/L4 rules still apply).
    pub tls_flows: u64,
    /// HTTP requests parsed.
    pub requests: u64,
    /// IP fragments (not reassembled).
    pub fragments: u64,
    /// Frames cut before their headers ended.
    pub truncated: u64,
    /// Frames that are not IP.
    pub not_ip: u64,
    /// Frames of an unsupported link type.
    pub unsupported_link: u64,
    /// Malformed frames.
    pub malformed: u64,
    /// TCP stream bytes that were not HTTP.
    pub unparsable_bytes: u64,
    /// Times the HTTP parser resynchronised.
    pub resyncs: u64,
    /// Retransmitted bytes trimmed.
    pub retransmitted_bytes: u64,
    /// Flows evicted by the flow-table bound.
    pub evicted_flows: u64,
    /// First and last capture time, ns.
    pub first_ns: Option<u64>,
    /// See `first_ns`.
    pub last_ns: Option<u64>,
}

/// Traffic no rule touched.
#[derive(Debug, Clone, Serialize)]
pub struct Unmatched {
    /// Requests no rule matched.
    pub requests: u64,
    /// Busiest addresses.
    pub top_ips: Vec<Hitter>,
    /// Busiest User-Agents.
    pub top_user_agents: Vec<Hitter>,
    /// Busiest paths.
    pub top_paths: Vec<Hitter>,
}

/// A file's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct InputReport {
    /// The file.
    pub path: String,
    /// Frames read from it.
    pub packets: u64,
    /// The error that stopped reading it, if any.
    pub error: Option<String>,
}

/// Traffic whose decision differs between the old ruleset (`--against`)
/// and the new one.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// The old decision, like `throttle by wdqs_sparql` or `pass`.
    pub from: String,
    /// The new decision.
    pub to: String,
    /// Requests that changed this way.
    pub requests: u64,
    /// Packets that changed this way.
    pub packets: u64,
    /// Busiest client addresses among them.
    pub top_ips: Vec<Hitter>,
    /// Busiest User-Agents among the requests.
    pub top_user_agents: Vec<Hitter>,
    /// Busiest paths among the requests.
    pub top_paths: Vec<Hitter>,
}

/// The dry-run report. `totals.requests`, `totals.packets` and `rules`
/// (`name`, `matches`, `requests`) are the stable part of the JSON schema.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Report format version.
    pub schema: u32,
    /// Input totals.
    pub totals: Totals,
    /// One entry per rule, in evaluation order.
    pub rules: Vec<RuleReport>,
    /// Traffic no rule touched.
    pub unmatched: Unmatched,
    /// Per input file.
    pub inputs: Vec<InputReport>,
    /// With `--against`: how decisions change, largest first.
    pub changes: Option<Vec<Change>>,
    /// Requests per second matched (`.0`) and enforced (`.1`) per rule,
    /// one entry per second of capture time from `totals.first_ns`.
    pub series: Vec<Vec<(u32, u32)>>,
}

#[derive(Default)]
struct ChangeStats {
    requests: u64,
    packets: u64,
    ips: Option<TopK>,
    uas: Option<TopK>,
    paths: Option<TopK>,
}

/// Per-second series are kept for at most this many seconds.
const MAX_SERIES_SECONDS: usize = 86_400;

struct RuleStats {
    report: RuleReport,
    ips: TopK,
    uas: TopK,
    paths: TopK,
}

/// Every HTTP request in a capture, in the order the reassembler completes
/// them (for cross-checks and tools), and the read error if any.
pub fn requests_in(input: impl Read) -> (Vec<HttpRequest>, Option<CaptureError>) {
    let mut streams = Streams::new(Limits::default());
    let mut out = Vec::new();
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
                }
            }
        }
        Ok(())
    })();
    (out, result.err())
}

/// A replay in progress.
pub struct DryRun {
    engine: Engine,
    scratch: Scratch,
    streams: Streams,
    rules: Vec<RuleStats>,
    totals: Totals,
    unmatched: (u64, TopK, TopK, TopK),
    inputs: Vec<InputReport>,
    pending: Vec<HttpRequest>,
    trace: Trace,
    old: Option<(Engine, Scratch)>,
    changes: std::collections::BTreeMap<(String, String), ChangeStats>,
    series: Vec<Vec<(u32, u32)>>,
    series_start: Option<u64>,
}

fn describe(rs: &Ruleset, v: &Verdict) -> String {
    match v.rule() {
        Some(i) => format!("{} by {}", v.kind(), rs.rules[i].name),
        None => v.kind().to_string(),
    }
}

const TOP: usize = 10;
const CANDIDATES: usize = 1_000;

fn path_of(target: &[u8]) -> &[u8] {
    target.split(|&b| b == b'?').next().unwrap_or(target)
}

impl DryRun {
    /// Prepares a replay of `ruleset` for `site`.
    pub fn new(ruleset: Ruleset, site: Option<String>) -> Result<DryRun, EngineError> {
        let rules = ruleset
            .rules
            .iter()
            .map(|r| RuleStats {
                report: RuleReport {
                    name: r.name.clone(),
                    action: r.action.kind().into(),
                    shadow: r.shadow,
                    matches: 0,
                    requests: Counts::default(),
                    would: Counts::default(),
                    packets: Counts::default(),
                    first_seen_ns: None,
                    last_seen_ns: None,
                    top_ips: Vec::new(),
                    top_user_agents: Vec::new(),
                    top_paths: Vec::new(),
                },
                ips: TopK::new(CANDIDATES),
                uas: TopK::new(CANDIDATES),
                paths: TopK::new(CANDIDATES),
            })
            .collect();
        let n = ruleset.rules.len();
        let engine = Engine::new(
            ruleset,
            &EngineConfig {
                site,
                ..Default::default()
            },
        )?;
        let scratch = engine.scratch();
        Ok(DryRun {
            engine,
            scratch,
            streams: Streams::new(Limits::default()),
            rules,
            totals: Totals::default(),
            unmatched: (
                0,
                TopK::new(CANDIDATES),
                TopK::new(CANDIDATES),
                TopK::new(CANDIDATES),
            ),
            inputs: Vec::new(),
            pending: Vec::new(),
            trace: Trace::default(),
            old: None,
            changes: Default::default(),
            series: vec![Vec::new(); n],
            series_start: None,
        })
    }

    /// Also evaluates every packet and request with `old`, and reports
    /// where the decisions differ.
    pub fn against(&mut self, old: Ruleset, site: Option<String>) -> Result<(), EngineError> {
        let engine = Engine::new(
            old,
            &EngineConfig {
                site,
                ..Default::default()
            },
        )?;
        let scratch = engine.scratch();
        self.old = Some((engine, scratch));
        Ok(())
    }

    fn changed(&mut self, from: String, to: String, ip: &str, req: Option<(&[u8], &[u8])>) {
        let c = self.changes.entry((from, to)).or_default();
        c.ips
            .get_or_insert_with(|| TopK::new(CANDIDATES))
            .add(ip.as_bytes());
        match req {
            Some((ua, path)) => {
                c.requests += 1;
                c.uas.get_or_insert_with(|| TopK::new(CANDIDATES)).add(ua);
                c.paths
                    .get_or_insert_with(|| TopK::new(CANDIDATES))
                    .add(path);
            }
            None => c.packets += 1,
        }
    }

    fn tick(&mut self, rule: usize, time_ns: u64, enforced: bool) {
        let start = *self.series_start.get_or_insert(time_ns);
        let sec = (time_ns.saturating_sub(start) / 1_000_000_000) as usize;
        if sec >= MAX_SERIES_SECONDS {
            return;
        }
        let series = &mut self.series[rule];
        if series.len() <= sec {
            series.resize(sec + 1, (0, 0));
        }
        series[sec].0 += 1;
        if enforced {
            series[sec].1 += 1;
        }
    }

    /// Replays one capture. On a read error, everything before it counts
    /// and the error (with its byte offset) is returned and recorded.
    pub fn replay(&mut self, name: &str, input: impl Read) -> Result<(), CaptureError> {
        let before = self.totals.packets;
        let result = (|| {
            let mut reader = CaptureReader::new(input)?;
            let mut frame = Frame {
                time_ns: 0,
                linktype: 0,
                data: Vec::new(),
                orig_len: 0,
                offset: 0,
            };
            while reader.next_frame_into(&mut frame)? {
                self.frame(&frame);
            }
            Ok(())
        })();
        self.inputs.push(InputReport {
            path: name.to_string(),
            packets: self.totals.packets - before,
            error: result.as_ref().err().map(|e: &CaptureError| e.to_string()),
        });
        result
    }

    fn count(c: &mut Counts, v: &Verdict) {
        match v {
            Verdict::Pass => {}
            Verdict::Allow { .. } => c.allow += 1,
            Verdict::Deny { .. } => c.deny += 1,
            Verdict::Throttle { .. } => c.throttle += 1,
            Verdict::Drop { .. } => c.drop += 1,
        }
    }

    /// Feeds one frame.
    pub fn frame(&mut self, f: &Frame) {
        let t = &mut self.totals;
        t.packets += 1;
        t.bytes += u64::from(f.orig_len);
        t.first_ns = Some(t.first_ns.map_or(f.time_ns, |x| x.min(f.time_ns)));
        t.last_ns = Some(t.last_ns.map_or(f.time_ns, |x| x.max(f.time_ns)));
        let d = match decode(f.linktype, &f.data, f.orig_len) {
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
        // XDP sits on the edge's ingress: it judges what clients send, not
        // the servers' answers (for UDP and ICMP every packet is judged).
        let inbound = d.proto != 6
            || self
                .streams
                .from_client((d.src, d.sport), (d.dst, d.dport), d.flags);
        if inbound {
            let p = Packet {
                src: d.src,
                proto,
                dst_port: d.dport,
                syn,
                time_ns: f.time_ns,
            };
            let pd = self.engine.decide_packet_with(&p, &mut self.scratch);
            if let Some(i) = pd.verdict.rule() {
                Self::count(&mut self.rules[i].report.packets, &pd.verdict);
            }
            if let Some((old, scratch)) = &mut self.old {
                let od = old.decide_packet_with(&p, scratch);
                let (a, b) = (
                    describe(old.ruleset(), &od.verdict),
                    describe(self.engine.ruleset(), &pd.verdict),
                );
                if a != b {
                    self.changed(a, b, &d.src.to_string(), None);
                }
            }
            if matches!(pd.verdict, Verdict::Drop { .. } | Verdict::Throttle { .. }) {
                return;
            }
        }
        if d.proto != 6 {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
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
            &mut pending,
        );
        for r in pending.drain(..) {
            self.request(&r);
        }
        self.pending = pending;
    }

    fn request(&mut self, r: &HttpRequest) {
        self.totals.requests += 1;
        let headers: Vec<(&[u8], &[u8])> = r.headers().collect();
        let host = r.header("host").unwrap_or(b"");
        let req = Request {
            method: r.method(),
            host,
            target: r.target(),
            headers: &headers,
            ip: r.client.0,
            port: r.server.1,
            time_ns: r.time_ns,
        };
        self.trace.steps.clear();
        let d = self
            .engine
            .decide_request_steps(&req, &mut self.scratch, &mut self.trace.steps);
        let ip = r.client.0.to_string();
        let ua = r.header("user-agent").unwrap_or(b"(none)");
        let path = path_of(r.target());
        if let Some((old, scratch)) = &mut self.old {
            let od = old.decide_request_with(&req, scratch, None);
            let (a, b) = (
                describe(old.ruleset(), &od.verdict),
                describe(self.engine.ruleset(), &d.verdict),
            );
            if a != b {
                self.changed(a, b, &ip, Some((ua, path)));
            }
        }
        let steps: Vec<(usize, bool)> = self
            .trace
            .steps
            .iter()
            .map(|s| {
                (
                    s.rule,
                    !s.shadow && d.verdict.rule() == Some(s.rule) && d.verdict.kind() != "allow",
                )
            })
            .collect();
        for (rule, enforced) in steps {
            self.tick(rule, r.time_ns, enforced);
        }
        if self.trace.steps.is_empty() {
            let u = &mut self.unmatched;
            u.0 += 1;
            u.1.add(ip.as_bytes());
            u.2.add(ua);
            u.3.add(path);
            return;
        }
        for step in &self.trace.steps {
            let s = &mut self.rules[step.rule];
            let rep = &mut s.report;
            rep.matches += 1;
            rep.first_seen_ns = Some(rep.first_seen_ns.map_or(r.time_ns, |t| t.min(r.time_ns)));
            rep.last_seen_ns = Some(rep.last_seen_ns.map_or(r.time_ns, |t| t.max(r.time_ns)));
            if step.shadow {
                rep.requests.log += 1;
                Self::count(&mut rep.would, &step.effect);
            } else if d.verdict.rule() == Some(step.rule) {
                Self::count(&mut rep.requests, &d.verdict);
            }
            s.ips.add(ip.as_bytes());
            s.uas.add(ua);
            s.paths.add(path);
        }
    }

    /// Finishes the replay.
    pub fn finish(mut self) -> Report {
        let st = &self.streams.stats;
        let t = &mut self.totals;
        t.flows = st.flows;
        t.tls_flows = st.tls_flows;
        t.unparsable_bytes = st.unparsable_bytes;
        t.resyncs = st.resyncs;
        t.retransmitted_bytes = st.retransmitted_bytes;
        t.evicted_flows = st.evicted_flows;
        let rules = self
            .rules
            .into_iter()
            .map(|s| RuleReport {
                top_ips: s.ips.top(TOP),
                top_user_agents: s.uas.top(TOP),
                top_paths: s.paths.top(TOP),
                ..s.report
            })
            .collect();
        // One time axis for every rule.
        let len = self.series.iter().map(Vec::len).max().unwrap_or(0);
        self.series.iter_mut().for_each(|s| s.resize(len, (0, 0)));
        let (n, ips, uas, paths) = self.unmatched;
        let changes = self.old.as_ref().map(|_| {
            let mut v: Vec<Change> = self
                .changes
                .into_iter()
                .map(|((from, to), c)| Change {
                    from,
                    to,
                    requests: c.requests,
                    packets: c.packets,
                    top_ips: c.ips.map_or(Vec::new(), |t| t.top(TOP)),
                    top_user_agents: c.uas.map_or(Vec::new(), |t| t.top(TOP)),
                    top_paths: c.paths.map_or(Vec::new(), |t| t.top(TOP)),
                })
                .collect();
            v.sort_by(|a, b| {
                (b.requests + b.packets)
                    .cmp(&(a.requests + a.packets))
                    .then_with(|| (&a.from, &a.to).cmp(&(&b.from, &b.to)))
            });
            v
        });
        Report {
            schema: 1,
            totals: self.totals,
            rules,
            unmatched: Unmatched {
                requests: n,
                top_ips: ips.top(TOP),
                top_user_agents: uas.top(TOP),
                top_paths: paths.top(TOP),
            },
            inputs: self.inputs,
            changes,
            series: self.series,
        }
    }
}
