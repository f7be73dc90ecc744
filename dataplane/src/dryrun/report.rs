//! The dry-run report: what `rctl dry-run --format json` prints.

use crate::topk::Hitter;
use serde::Serialize;

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

/// One rule's counts while a replay runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSoFar {
    /// Rule name.
    pub name: String,
    /// Requests it matched.
    pub matches: u64,
    /// Its verdicts on them.
    pub requests: Counts,
    /// Requests whose verdict it left unknown.
    pub unknown: u64,
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
    /// Requests it matched and let through: neither allowed, denied,
    /// throttled nor dropped by it (a throttle's requests within its
    /// limit, every match of a log or shadow rule). The matches of a
    /// throttle that could not be run (on a sample, or keyed by a field
    /// the input lacks) are in `unknown`, not here.
    pub passed: u64,
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
    /// Busiest networks among its matches: IPv4 /24s, IPv6 /48s.
    pub top_prefixes: Vec<Hitter>,
    /// For a request throttle: the keys its buckets were counted by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleKeys>,
    /// Packets it stopped on the packet plane (dropped, or over its
    /// limit): `packets.drop + packets.throttle`.
    pub stopped_packets: u64,
    /// HTTP requests those packets carried: requests whose head the
    /// reassembler completed on a packet this rule stopped. They never
    /// reach the HTTP plane, so no request rule sees them.
    pub stopped_requests: u64,
    /// Busiest client addresses among the requests it stopped.
    pub stopped_top_ips: Vec<Hitter>,
    /// Busiest User-Agents among the requests it stopped.
    pub stopped_top_user_agents: Vec<Hitter>,
    /// Requests (from logs) whose verdict is unknown from this rule on:
    /// its condition, or its throttle's key, reads a field the input
    /// lacks, or it is a throttle that matched on a sample (for shadow
    /// and log rules: matches left unknown). Never counted as passing.
    /// A throttle's matches are in `matches` all the same.
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown: u64,
    /// The fields it reads that some input lacks, as the language writes
    /// them (`header("referer")`, `port`): it is not judged on that input.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_fields: Vec<String>,
}

/// A request throttle's keys: how many it counted and limited, and the
/// busiest with their requests limited and passed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThrottleKeys {
    /// What its buckets are keyed by, as the language writes it
    /// (`ip`, `host, path`).
    pub by: String,
    /// Distinct keys among the requests it counted (at least this many
    /// when `exact` is false).
    pub keys: u64,
    /// Distinct keys it limited at least once (see `exact`).
    pub limited_keys: u64,
    /// Whether `keys` and `limited_keys` are exact: each counts at most
    /// [`DISTINCT_MAX`] keys, and says "at least" beyond.
    pub exact: bool,
    /// The keys with the most requests counted, most first.
    pub top: Vec<KeyCount>,
}

/// One throttle key's requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyCount {
    /// The key's parts, as the request carried them, separated by spaces
    /// (an address, `host path`, …).
    pub key: String,
    /// Requests counted against it: `limited` + `passed` (may
    /// overestimate by `error`).
    pub requests: u64,
    /// Requests it limited.
    pub limited: u64,
    /// Requests within the limit.
    pub passed: u64,
    /// How much `requests` and `passed` may overestimate (Space-Saving).
    pub error: u64,
}

/// Distinct values a set counts exactly; past it, figures are lower bounds.
pub const DISTINCT_MAX: usize = 1 << 15;

/// Requests and clients one kind of enforcement stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Affect {
    /// Requests.
    pub requests: u64,
    /// Distinct client addresses among them.
    pub clients: u64,
    /// Requests that look legitimate: a browser-like User-Agent with an
    /// Accept-Language header, or a client in an `allow` rule's address
    /// blocks.
    pub legit_requests: u64,
    /// Distinct client addresses among those.
    pub legit_clients: u64,
}

/// Who the ruleset would stop: requests denied, throttled and dropped
/// (on either plane; shadow and log rules stop nothing), and how many of
/// them look legitimate.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Affected {
    /// Denied.
    pub deny: Affect,
    /// Throttled.
    pub throttle: Affect,
    /// Dropped (requests in dropped packets included).
    pub drop: Affect,
    /// All three; a client stopped several ways counts once.
    pub total: Affect,
    /// Whether the client counts are exact (each counts at most
    /// [`DISTINCT_MAX`] addresses, and is a lower bound beyond).
    pub exact: bool,
    /// The inputs that log no User-Agent or no Accept-Language: on them
    /// a request looks legitimate only by an `allow` rule's blocks, so
    /// the `legit_` figures are lower bounds. Empty: they are measured
    /// on every input.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub legit_unmeasured: Vec<String>,
}

/// Which ruleset ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RulesetInfo {
    /// What it was loaded from (the caller names it; empty if not).
    pub name: String,
    /// The SHA-256 content hash its compiled artifact carries, in hex
    /// (what `rctl compile` prints).
    pub hash: String,
    /// Its rules.
    pub rules: usize,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    /// HTTP requests that reached the HTTP plane (the request decision):
    /// those the packet plane let through.
    pub requests: u64,
    /// HTTP requests the capture held: `requests` and `stopped_requests`.
    pub captured_requests: u64,
    /// HTTP requests in packets an XDP rule stopped (dropped or limited),
    /// which never reached the HTTP plane.
    pub stopped_requests: u64,
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
    /// The bound on stream bytes held by all flows together (partial heads
    /// and out-of-order segments, with their bookkeeping).
    pub max_buffered_bytes: u64,
    /// The most they held at once.
    pub buffered_peak_bytes: u64,
    /// Times a flow's held bytes were dropped to stay within the bound
    /// (the flows holding the most first; the flow then resynchronises at
    /// its next request line).
    pub shed_flows: u64,
    /// Stream bytes dropped that way (requests in them are not seen).
    pub shed_bytes: u64,
    /// Requests (from logs) whose verdict depends on a field the input
    /// lacks; they are neither passed nor enforced (see the rules'
    /// `unknown`).
    pub unknown_requests: u64,
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
    /// For a log: what was read from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<LogInput>,
}

/// What a log input held and how much of it was judged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LogInput {
    /// Its format's name.
    pub format: String,
    /// Lines read.
    pub lines: u64,
    /// Lines judged (requests).
    pub judged: u64,
    /// Lines that could not be read as a request of the format (too
    /// long, malformed, no client address or time).
    pub bad_lines: u64,
    /// The first bad lines: position, what is wrong, a short escaped
    /// excerpt.
    pub bad: Vec<BadLine>,
    /// The resolution of its times, ns (1 s: limiters ran on
    /// second-resolution timestamps, lines within a second in file order).
    pub resolution_ns: u64,
    /// The fields the ruleset reads that it lacks.
    pub missing_fields: Vec<String>,
    /// Lines with a header value as long as its logged length (a HAProxy
    /// capture's `len`), which may be the start of a longer value: rules
    /// reading it were judged only as far as that start tells.
    #[serde(skip_serializing_if = "is_zero")]
    pub cut_lines: u64,
    /// Lines holding captured request headers (HAProxy's `{…}`) whose
    /// names were not given: their values were not read, and rules on
    /// those headers not judged.
    #[serde(skip_serializing_if = "is_zero")]
    pub unnamed_captures: u64,
    /// Lines judged after a line of a later time (a server that writes a
    /// request's line when it ends, with the time it began): throttles
    /// judged them in that order, not in the order the requests came.
    #[serde(skip_serializing_if = "is_zero")]
    pub late_lines: u64,
    /// The largest lag of `late_lines`, ns: how much earlier than the
    /// latest time judged before it a line's time was.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_late_ns: u64,
    /// For a columnar table: the columns decoded (what the ruleset and
    /// the report read), in the table's order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
}

/// One line that could not be judged.
#[derive(Debug, Clone, Serialize)]
pub struct BadLine {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset of the line's start.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
    /// Its first bytes, escaped.
    pub excerpt: String,
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
    /// Busiest client addresses among them, counting requests and
    /// packets together (see `request_top_ips`, `packet_top_ips`).
    pub top_ips: Vec<Hitter>,
    /// Busiest client addresses among the requests, in requests.
    pub request_top_ips: Vec<Hitter>,
    /// Busiest client addresses among the packets, in packets.
    pub packet_top_ips: Vec<Hitter>,
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
    /// The ruleset that ran.
    pub ruleset: RulesetInfo,
    /// With `--against`: the old ruleset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against: Option<RulesetInfo>,
    /// Who the ruleset would stop.
    pub affected: Affected,
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
    /// Requests per second matched (`.0`) and enforced (`.1`) per rule
    /// (enforced: decided by it, other than `allow`), one entry per whole
    /// second of capture time (UTC), entry 0 being the second that holds
    /// `totals.first_ns`, the capture's first packet; every rule's series
    /// has the same length, at most 86,400 entries (a day); empty when no
    /// rule matched a request.
    pub series: Vec<Vec<(u32, u32)>>,
    /// The same per 100 ms, entry 0 being the 100 ms (since the epoch)
    /// that holds `totals.first_ns`, when the capture's first packet and
    /// every matched request lie within two minutes (1,200 entries);
    /// absent otherwise. For charts of short captures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series_100ms: Option<Vec<Vec<(u32, u32)>>>,
}

impl Report {
    /// Whether every input was a log, none a capture: its packets, flows
    /// and stream memory then have nothing to tell.
    pub fn logs_only(&self) -> bool {
        !self.inputs.is_empty() && self.inputs.iter().all(|i| i.log.is_some())
    }
}
