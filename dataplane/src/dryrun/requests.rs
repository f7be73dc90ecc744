//! The request side of a replay: every reassembled HTTP request through
//! the request decision, and the per-rule statistics. It runs on its own
//! thread, fed in capture order by the packet side (see `super`).

use super::affected::{Distinct, Stops};
use super::report::{Change, Counts, KeyCount, RuleReport, RuleSoFar, ThrottleKeys, Unmatched};
use super::series::{Series, FINE_MAX, FINE_NS};
use crate::capture::stream::HttpRequest;
use crate::partial::{Blind, Judged, PartialTrace};
use crate::request::Fields;
use crate::topk::TopK;
use crate::topkey::{ip_key, path_key, prefix_key, show_ip, show_prefix};
use crate::{Decision, Engine, Request, Scratch, Trace, Verdict};
use rctl_compiler::ir::{Action, Key, Ruleset};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What an input lacks, for the engine and for the `--against` engine.
pub struct Blinds {
    /// For the engine.
    pub new: Blind,
    /// For the `--against` engine.
    pub old: Option<Blind>,
}

/// Reported top keys per table.
pub(super) const TOP: usize = 10;
/// Candidates a top-key table keeps (Space-Saving counters).
pub(super) const CANDIDATES: usize = 1_000;

/// Traffic whose decision changed one way (`--against`).
#[derive(Default)]
pub(super) struct ChangeStats {
    pub requests: u64,
    pub packets: u64,
    pub ips: Option<TopK>,
    /// Addresses among the requests only, and among the packets only.
    pub req_ips: Option<TopK>,
    pub pkt_ips: Option<TopK>,
    pub uas: Option<TopK>,
    pub paths: Option<TopK>,
}

/// Decision changes, by (old, new) description.
pub(super) type Changes = BTreeMap<(String, String), ChangeStats>;

/// Records one changed decision: `req` is (User-Agent, path) for requests.
pub(super) fn changed(
    changes: &mut Changes,
    from: String,
    to: String,
    ip: &[u8],
    req: Option<(&[u8], &[u8])>,
) {
    let c = changes.entry((from, to)).or_default();
    c.ips.get_or_insert_with(|| TopK::new(CANDIDATES)).add(ip);
    match req {
        Some((ua, path)) => {
            c.requests += 1;
            c.req_ips
                .get_or_insert_with(|| TopK::new(CANDIDATES))
                .add(ip);
            c.uas.get_or_insert_with(|| TopK::new(CANDIDATES)).add(ua);
            c.paths
                .get_or_insert_with(|| TopK::new(CANDIDATES))
                .add(path);
        }
        None => {
            c.packets += 1;
            c.pkt_ips
                .get_or_insert_with(|| TopK::new(CANDIDATES))
                .add(ip);
        }
    }
}

fn merge_top(a: Option<TopK>, b: Option<TopK>) -> Option<TopK> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.merge(&b);
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

/// The report's change list from both sides' changes, largest first.
pub(super) fn change_report(mut a: Changes, b: Changes) -> Vec<Change> {
    for (k, c) in b {
        let e = a.entry(k).or_default();
        e.requests += c.requests;
        e.packets += c.packets;
        e.ips = merge_top(e.ips.take(), c.ips);
        e.req_ips = merge_top(e.req_ips.take(), c.req_ips);
        e.pkt_ips = merge_top(e.pkt_ips.take(), c.pkt_ips);
        e.uas = merge_top(e.uas.take(), c.uas);
        e.paths = merge_top(e.paths.take(), c.paths);
    }
    let mut v: Vec<Change> = a
        .into_iter()
        .map(|((from, to), c)| Change {
            from,
            to,
            requests: c.requests,
            packets: c.packets,
            top_ips: c.ips.map_or(Vec::new(), |t| t.top_with(TOP, show_ip)),
            request_top_ips: c.req_ips.map_or(Vec::new(), |t| t.top_with(TOP, show_ip)),
            packet_top_ips: c.pkt_ips.map_or(Vec::new(), |t| t.top_with(TOP, show_ip)),
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
}

/// A decision as the change report names it.
pub(super) fn describe(rs: &Ruleset, v: &Verdict) -> String {
    match v.rule() {
        Some(i) => format!("{} by {}", v.kind(), rs.rules[i].name),
        None => v.kind().to_string(),
    }
}

/// Adds one verdict to its action's count.
pub(super) fn count(c: &mut Counts, v: &Verdict) {
    match v {
        Verdict::Pass => {}
        Verdict::Allow { .. } => c.allow += 1,
        Verdict::Deny { .. } => c.deny += 1,
        Verdict::Throttle { .. } => c.throttle += 1,
        Verdict::Drop { .. } => c.drop += 1,
    }
}

fn header<'a>(req: &Request<'a>, lower: &[u8]) -> Option<&'a [u8]> {
    req.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(lower))
        .map(|(_, v)| *v)
}

/// A request's throttle key as a top-key entry: each part as the limiter
/// reads it (normalised host and path; the address as 4 or 16 bytes, a
/// prefix masked with its length after it), each with its length in
/// front (2 bytes). Shown by [`show_key`] when the replay ends, so that
/// nothing is formatted per request. `f` is made only for keys that read
/// the request's fields.
fn key_entry<'r>(
    keys: &[Key],
    f: &mut Option<Fields<'r>>,
    req: &'r Request<'r>,
    out: &mut Vec<u8>,
) {
    out.clear();
    for k in keys {
        let at = out.len();
        out.extend_from_slice(&[0, 0]);
        let ip = ip_key(req.ip);
        let ip = &ip.0[..ip.1];
        match k {
            Key::Ip => out.extend_from_slice(ip),
            Key::Prefix { v4, v6 } => {
                let bits = usize::from(if ip.len() == 4 { *v4 } else { *v6 }).min(ip.len() * 8);
                for (i, b) in ip.iter().enumerate() {
                    let keep = bits.saturating_sub(i * 8).min(8);
                    out.push(if keep == 0 {
                        0
                    } else {
                        b & (0xffu8 << (8 - keep))
                    });
                }
                out.push(bits as u8);
            }
            Key::Server => {}
            k => {
                let f = f.get_or_insert_with(|| Fields::new(req));
                match k {
                    Key::Path => out.extend_from_slice(&f.path),
                    Key::Method => out.extend_from_slice(f.method),
                    Key::Header(h) => out.extend_from_slice(f.header(h.as_bytes()).unwrap_or(b"")),
                    Key::Query(q) => out.extend_from_slice(
                        &f.get(&rctl_compiler::ir::StrField::QueryParam(q.clone()))
                            .unwrap_or_default(),
                    ),
                    _ => out.extend_from_slice(&f.host),
                }
            }
        }
        let len = (out.len() - at - 2).min(usize::from(u16::MAX)) as u16;
        out.truncate(at + 2 + usize::from(len));
        out[at..at + 2].copy_from_slice(&len.to_le_bytes());
    }
}

/// Shows an entry made by [`key_entry`]: its parts separated by spaces.
fn show_key(keys: &[Key], mut entry: &[u8]) -> String {
    let mut parts = Vec::new();
    for k in keys {
        let Some((len, rest)) = entry.split_first_chunk::<2>() else {
            break;
        };
        let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
        let (part, rest) = rest.split_at(len);
        entry = rest;
        parts.push(match (k, part.split_last()) {
            (Key::Ip, _) => show_ip(part),
            (Key::Prefix { .. }, Some((bits, net))) => format!("{}/{bits}", show_ip(net)),
            (Key::Server, _) => "(one bucket)".to_string(),
            _ => String::from_utf8_lossy(part).into_owned(),
        });
    }
    parts.join(" ")
}

/// A request throttle's keys while a replay runs.
struct ThrottleStats {
    keys: Vec<Key>,
    /// Requests per key, the limited ones tagged.
    top: TopK,
    all: Distinct,
    limited: Distinct,
}

impl ThrottleStats {
    fn report(&self) -> ThrottleKeys {
        ThrottleKeys {
            by: Key::list(&self.keys),
            keys: self.all.len(),
            limited_keys: self.limited.len(),
            exact: self.all.exact() && self.limited.exact(),
            top: self
                .top
                .top_tagged(TOP, |k| show_key(&self.keys, k))
                .into_iter()
                .map(|(h, limited)| KeyCount {
                    key: h.key,
                    requests: h.count,
                    limited,
                    passed: h.count - limited,
                    error: h.error,
                })
                .collect(),
        }
    }
}

/// One rule's request statistics.
pub(super) struct RuleStats {
    pub report: RuleReport,
    ips: TopK,
    uas: TopK,
    paths: TopK,
    prefixes: TopK,
    throttle: Option<ThrottleStats>,
    /// Matches it could not run (a throttle on a sample, or keyed by a
    /// field the input lacks): neither limited nor passed.
    unrun: u64,
}

/// What the request side has when the replay ends.
pub(super) struct Finished {
    pub requests: u64,
    pub rules: Vec<RuleReport>,
    pub unmatched: Unmatched,
    pub changes: Changes,
    pub series: Vec<Vec<(u32, u32)>>,
    pub fine: Option<Vec<Vec<(u32, u32)>>>,
    pub stops: Stops,
}

/// The request decision and everything counted from it.
pub(super) struct RequestSide {
    engine: Arc<Engine>,
    scratch: Scratch,
    old: Option<(Arc<Engine>, Scratch)>,
    requests: u64,
    rules: Vec<RuleStats>,
    unmatched: (u64, TopK, TopK, TopK),
    trace: Trace,
    changes: Changes,
    series: Series,
    /// Per 100 ms, while the matches span at most two minutes.
    fine: Option<Series>,
    /// The header list's buffer, kept from one request to the next.
    headers: Vec<(&'static [u8], &'static [u8])>,
    partial: PartialTrace,
    /// Requests whose verdict is unknown.
    pub unknown: u64,
    /// The requests it stopped, and for whom.
    stops: Stops,
    /// A throttle key being shown, kept from one request to the next.
    key: Vec<u8>,
}

/// An empty vector with `v`'s allocation, for items of another lifetime
/// (the in-place collect reuses the buffer; no item is ever converted).
#[expect(
    clippy::unnecessary_filter_map,
    reason = "the map is what changes the items' lifetime"
)]
fn reuse<'b>(mut v: Vec<(&[u8], &[u8])>) -> Vec<(&'b [u8], &'b [u8])> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

impl RequestSide {
    /// Counts requests through `engine` (reports in the ruleset's order);
    /// its stops are counted with `stops`'s fingerprints.
    pub fn new(engine: Arc<Engine>, stops: Stops) -> Self {
        // One fingerprint function for every counter, so that a request's
        // keys are hashed once however many rules it matches.
        let shared = TopK::new(1);
        let rules: Vec<RuleStats> = engine
            .ruleset()
            .rules
            .iter()
            .map(|r| RuleStats {
                report: RuleReport {
                    name: r.name.clone(),
                    action: r.action.kind().into(),
                    shadow: r.shadow,
                    matches: 0,
                    requests: Counts::default(),
                    passed: 0,
                    would: Counts::default(),
                    packets: Counts::default(),
                    first_seen_ns: None,
                    last_seen_ns: None,
                    top_ips: Vec::new(),
                    top_user_agents: Vec::new(),
                    top_paths: Vec::new(),
                    top_prefixes: Vec::new(),
                    throttle: None,
                    stopped_packets: 0,
                    stopped_requests: 0,
                    stopped_top_ips: Vec::new(),
                    stopped_top_user_agents: Vec::new(),
                    unknown: 0,
                    missing_fields: Vec::new(),
                },
                ips: shared.sharing(CANDIDATES),
                uas: shared.sharing(CANDIDATES),
                paths: shared.sharing(CANDIDATES),
                prefixes: shared.sharing(CANDIDATES),
                throttle: match &r.action {
                    Action::Throttle(t) if !r.is_packet_limit() => Some(ThrottleStats {
                        keys: t.keys.clone(),
                        top: shared.sharing(CANDIDATES),
                        all: Distinct::default(),
                        limited: Distinct::default(),
                    }),
                    _ => None,
                },
                unrun: 0,
            })
            .collect();
        let n = rules.len();
        RequestSide {
            scratch: engine.scratch(),
            engine,
            old: None,
            requests: 0,
            rules,
            unmatched: (
                0,
                shared.sharing(CANDIDATES),
                shared.sharing(CANDIDATES),
                shared.sharing(CANDIDATES),
            ),
            trace: Trace::default(),
            changes: Changes::new(),
            series: Series::new(n),
            fine: Some(Series::with_unit(n, FINE_NS, FINE_MAX)),
            headers: Vec::new(),
            partial: PartialTrace::default(),
            unknown: 0,
            stops,
            key: Vec::new(),
        }
    }

    /// Per rule so far: its name, matches, verdicts and unknown requests.
    pub fn so_far(&self) -> Vec<RuleSoFar> {
        self.rules
            .iter()
            .map(|r| RuleSoFar {
                name: r.report.name.clone(),
                matches: r.report.matches,
                requests: r.report.requests.clone(),
                unknown: r.report.unknown,
            })
            .collect()
    }

    /// The replayed throttle outcomes the next decisions take.
    pub(super) fn replay_mut(&mut self) -> &mut Option<crate::Replay> {
        &mut self.scratch.replay
    }

    /// Also decides every request with `old`, for `--against`.
    pub fn against(&mut self, old: Arc<Engine>) {
        let scratch = old.scratch();
        self.old = Some((old, scratch));
    }

    /// Decides and counts one request.
    pub fn request(&mut self, r: &HttpRequest) {
        let mut headers = reuse(std::mem::take(&mut self.headers));
        headers.extend(r.headers());
        let req = Request {
            method: r.method(),
            host: r.header("host").unwrap_or(b""),
            target: r.target(),
            headers: &headers,
            ip: r.client.0,
            dst: Some(r.server.0),
            port: r.server.1,
            time_ns: r.time_ns,
        };
        self.decide(&req, None, &[]);
        self.headers = reuse(headers);
    }

    /// Decides and counts one request from an input that may lack
    /// fields (`blind`: what it lacks; `cut`: headers that may be cut);
    /// `Some(rule)` if a packet-plane rule stopped it (the caller counts
    /// it there).
    pub fn decide(
        &mut self,
        req: &Request<'_>,
        blinds: Option<&Blinds>,
        cut: &[&[u8]],
    ) -> Option<usize> {
        // The request's keys are hashed first, and the memory where the
        // traffic no rule matches (most of it) is counted is asked for,
        // so that those cache misses overlap the decision.
        let ip = ip_key(req.ip);
        let ip = &ip.0[..ip.1];
        let ua = header(req, b"user-agent").unwrap_or(b"(none)");
        let path = path_key(req.target);
        let fp = &self.unmatched.1;
        let fps = (fp.fingerprint(ip), fp.fingerprint(ua), fp.fingerprint(path));
        self.unmatched.1.prefetch(fps.0);
        self.unmatched.2.prefetch(fps.1);
        self.unmatched.3.prefetch(fps.2);
        self.trace.steps.clear();
        self.partial.clear();
        let (d, unknown) = match blinds.map(|b| &b.new) {
            None => (
                self.engine
                    .decide_request_steps(req, &mut self.scratch, &mut self.trace.steps),
                false,
            ),
            Some(b) => {
                match self.engine.judge_request_cut(
                    req,
                    b,
                    cut,
                    &mut self.scratch,
                    &mut self.partial,
                ) {
                    Judged::Stopped(i) => return Some(i),
                    Judged::Decided(d) => {
                        std::mem::swap(&mut self.trace.steps, &mut self.partial.steps);
                        (d, false)
                    }
                    Judged::Unknown { logged, .. } => {
                        std::mem::swap(&mut self.trace.steps, &mut self.partial.steps);
                        (
                            Decision {
                                verdict: Verdict::Pass,
                                logged,
                            },
                            true,
                        )
                    }
                }
            }
        };
        self.requests += 1;
        if let Some((old, scratch)) = &mut self.old {
            let a = match blinds.and_then(|b| b.old.as_ref()) {
                None => describe(
                    old.ruleset(),
                    &old.decide_request_with(req, scratch, None).verdict,
                ),
                Some(ob) => {
                    let mut t = PartialTrace::default();
                    match old.judge_request_cut(req, ob, cut, scratch, &mut t) {
                        Judged::Decided(od) => describe(old.ruleset(), &od.verdict),
                        Judged::Stopped(i) => format!("drop by {}", old.rule(i).name),
                        Judged::Unknown { .. } => "unknown".to_string(),
                    }
                }
            };
            let b = if unknown {
                "unknown".to_string()
            } else {
                describe(self.engine.ruleset(), &d.verdict)
            };
            if a != b {
                changed(&mut self.changes, a, b, ip, Some((ua, path)));
            }
        }
        // A shadow rule left unknown leaves its own match unknown; the
        // rule that made the verdict unknown is the last one.
        for &i in &self.partial.unknown {
            self.rules[i].report.unknown += 1;
        }
        if unknown {
            self.unknown += 1;
        } else if d.verdict.is_stop() {
            // Only a stop is counted there (most requests pass).
            let al = header(req, b"accept-language").is_some();
            self.stops.add(d.verdict.kind(), req.ip, ua, al);
        }
        if self.trace.steps.is_empty() {
            if !self.partial.unknown.is_empty() {
                return None;
            }
            let u = &mut self.unmatched;
            u.1.prefetch_counter(fps.0);
            u.2.prefetch_counter(fps.1);
            u.3.prefetch_counter(fps.2);
            u.0 += 1;
            u.1.add_hashed(fps.0, ip);
            u.2.add_hashed(fps.1, ua);
            u.3.add_hashed(fps.2, path);
            return None;
        }
        let net = prefix_key(req.ip);
        let net = &net.0[..net.1];
        let net_fp = self.unmatched.1.fingerprint(net);
        // The counters of every rule matched are asked for first, together.
        for step in &self.trace.steps {
            let s = &self.rules[step.rule];
            s.ips.prefetch(fps.0);
            s.uas.prefetch(fps.1);
            s.paths.prefetch(fps.2);
            s.prefixes.prefetch(net_fp);
        }
        let mut fields = None;
        for i in 0..self.trace.steps.len() {
            let (rule, shadow) = (self.trace.steps[i].rule, self.trace.steps[i].shadow);
            let decided = d.verdict.rule() == Some(rule);
            let enforced = !shadow && decided && d.verdict.kind() != "allow";
            self.series.tick(rule, req.time_ns, enforced);
            if let Some(f) = &mut self.fine {
                f.tick(rule, req.time_ns, enforced);
                if f.exceeded {
                    self.fine = None;
                }
            }
            let s = &mut self.rules[rule];
            let rep = &mut s.report;
            rep.matches += 1;
            rep.first_seen_ns = Some(
                rep.first_seen_ns
                    .map_or(req.time_ns, |t| t.min(req.time_ns)),
            );
            rep.last_seen_ns = Some(rep.last_seen_ns.map_or(req.time_ns, |t| t.max(req.time_ns)));
            // A throttle that matched but could not be run did something
            // unknown (`Blind`): its match counts, no effect does.
            let ran = !self.partial.unknown.contains(&rule);
            if !ran {
                s.unrun += 1;
            }
            if shadow {
                rep.requests.log += 1;
                if ran {
                    count(&mut rep.would, &self.trace.steps[i].effect);
                }
            } else if decided {
                count(&mut rep.requests, &d.verdict);
            }
            s.ips.add_hashed(fps.0, ip);
            s.uas.add_hashed(fps.1, ua);
            s.paths.add_hashed(fps.2, path);
            s.prefixes.add_hashed(net_fp, net);
            if let (Some(t), false, true) = (&mut s.throttle, shadow, ran) {
                key_entry(&t.keys, &mut fields, req, &mut self.key);
                let kfp = t.top.fingerprint(&self.key);
                let limited = decided && d.verdict.kind() == "throttle";
                t.top.add_hashed_tagged(kfp, &self.key, limited);
                t.all.add(kfp);
                if limited {
                    t.limited.add(kfp);
                }
            }
        }
        None
    }

    /// The statistics, with each table cut to its top entries; the series
    /// start at the second of `first_ns`, the capture's first packet.
    pub fn finish(self, first_ns: Option<u64>) -> Finished {
        let rules = self
            .rules
            .into_iter()
            .map(|s| {
                let c = &s.report.requests;
                RuleReport {
                    passed: s
                        .report
                        .matches
                        .saturating_sub(c.allow + c.deny + c.throttle + c.drop + s.unrun),
                    top_ips: s.ips.top_with(TOP, show_ip),
                    top_user_agents: s.uas.top(TOP),
                    top_paths: s.paths.top(TOP),
                    top_prefixes: s.prefixes.top_with(TOP, show_prefix),
                    throttle: s.throttle.as_ref().map(ThrottleStats::report),
                    ..s.report
                }
            })
            .collect();
        let (n, ips, uas, paths) = self.unmatched;
        let series = self.series.finish(first_ns);
        let fine = self
            .fine
            .filter(|f| f.covers(first_ns))
            .map(|f| f.finish(first_ns));
        Finished {
            requests: self.requests,
            rules,
            unmatched: Unmatched {
                requests: n,
                top_ips: ips.top_with(TOP, show_ip),
                top_user_agents: uas.top(TOP),
                top_paths: paths.top(TOP),
            },
            changes: self.changes,
            series,
            fine,
            stops: self.stops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_keys_are_shown_as_the_limiter_reads_them() {
        let headers: Vec<(&[u8], &[u8])> = vec![(b"x-client", b"app/1")];
        let req = Request {
            method: b"GET",
            host: b"WWW.Example.org:443",
            target: b"/wiki/%7ETitle?x=1",
            headers: &headers,
            ip: "203.0.113.77".parse().unwrap(),
            dst: None,
            port: 443,
            time_ns: 0,
        };
        let keys = vec![
            Key::Ip,
            Key::Prefix { v4: 20, v6: 48 },
            Key::Host,
            Key::Path,
            Key::Header("x-client".into()),
            Key::Query("x".into()),
            Key::Server,
        ];
        let (mut f, mut out) = (None, Vec::new());
        key_entry(&keys, &mut f, &req, &mut out);
        assert_eq!(
            show_key(&keys, &out),
            "203.0.113.77 203.0.112.0/20 www.example.org /wiki/~Title app/1 1 (one bucket)"
        );
        // Addresses alone need no fields.
        let mut f = None;
        key_entry(&[Key::Ip], &mut f, &req, &mut out);
        assert!(f.is_none());
        let v6 = Request {
            ip: "2001:db8:aaaa:bbbb::1".parse().unwrap(),
            ..req
        };
        key_entry(&[Key::Prefix { v4: 24, v6: 40 }], &mut None, &v6, &mut out);
        assert_eq!(
            show_key(&[Key::Prefix { v4: 24, v6: 40 }], &out),
            "2001:db8:aa00::/40"
        );
    }
}
