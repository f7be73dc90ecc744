//! Finding who is heavy: per endpoint (host and path template, alone
//! and with each query shape), by
//! address, by /24 or /48, by User-Agent family across many addresses,
//! and by one path re-requested among its siblings; each against how the
//! normal clients of the same endpoint behave.

use crate::count::{AgentCount, ClientCount, Counts};
use crate::keys::{network, prefix, ua_family};
use crate::obs::Obs;
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

/// The key a suggested throttle counts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// Each address.
    Ip,
    /// Each /24 (IPv4) or /48 (IPv6).
    Prefix,
    /// Each User-Agent string (a swarm sends one).
    UserAgent,
    /// Each host and path (one bucket per page).
    HostPath,
}

/// One offender found, and the rule that would limit it.
#[derive(Debug, Clone)]
pub struct Finding {
    /// What was found, in a line.
    pub what: String,
    /// The host the endpoint is on (empty: any).
    pub host: String,
    /// True when `host` may be a cut host (a captured header logged as
    /// long as its capture's length): the rule tests `starts_with`.
    pub host_cut: bool,
    /// The endpoint: a path, or a template with `*` segments.
    pub path: String,
    /// True when `path` is a prefix (`starts_with`), not the whole path.
    pub path_prefix: bool,
    /// Query parameters the rule also requires (the endpoint's query
    /// shape; empty: none).
    pub query: Vec<String>,
    /// A User-Agent prefix the rule also requires.
    pub ua_prefix: Option<String>,
    /// True when `ua_prefix` may be a cut User-Agent (see `host_cut`):
    /// the rule tests `starts_with`, never `==`.
    pub ua_cut: bool,
    /// Whether the offender's requests all say no-cache (the rule then
    /// requires it, so cached readers are never limited).
    pub no_cache: bool,
    /// The key.
    pub key: Key,
    /// Requests allowed per period: the normal clients' rate over the
    /// traffic's span, scaled to the period.
    pub limit: u64,
    /// The period, seconds.
    pub period_s: u64,
    /// How the limit was derived (the percentile of normal clients).
    pub basis: String,
    /// The offender's requests as counted (at least this many; exactly,
    /// when the counts are exact).
    pub counted: u64,
    /// Which requests are the offender's.
    pub members: Members,
    /// A normal client of the endpoint (its address, or its /24 or /48
    /// for a prefix rule), for the test block.
    pub normal_key: Option<IpAddr>,
    /// Measured on the traffic ([`crate::Measure`]): the offender's
    /// requests, its first one, and a normal client's first one.
    pub requests: u64,
    /// The offender's first request.
    pub offender: Option<Obs>,
    /// A normal client's first request on the endpoint.
    pub normal: Option<Obs>,
}

/// Which requests a finding's offender sent: on its endpoint (a
/// fingerprint of the host and path template, see [`Counts`]), those of
/// some addresses, of some /24s or /48s, or of one User-Agent; or the
/// requests of one path (a loop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Members {
    /// One path on one host (fingerprint of both), under a parent
    /// (fingerprint of the host and the parent).
    Loop {
        /// The path's key.
        path: u64,
        /// Its parent's.
        parent: u64,
    },
    /// The addresses on an endpoint.
    Ips(u64, BTreeSet<IpAddr>),
    /// The /24s and /48s on an endpoint (their network addresses), less
    /// the addresses of an earlier finding.
    Prefixes(u64, BTreeSet<IpAddr>),
    /// The User-Agents starting with a family's prefix on an endpoint,
    /// less the requests of the endpoint's earlier findings.
    Agent(u64, Vec<u8>),
}

/// The suggester's knobs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Fewest requests an offender has before it is worth a rule.
    pub min_requests: u64,
    /// Least share of an endpoint's requests an offender has.
    pub min_share: f64,
    /// An offender sends more than this many times the limit.
    pub over_limit: u64,
    /// Fewest addresses a swarm spans.
    pub min_swarm: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            min_requests: 50,
            min_share: 0.05,
            over_limit: 2,
            min_swarm: 5,
        }
    }
}

/// The percentile `p` (0..=100) of `v`, nearest rank; 0 when empty.
pub fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// A key held in a count: its count (never under the truth), what was
/// counted since it took its place (never over: `count` less its
/// error), and what is kept beside them.
struct Held<'a, V> {
    n: u64,
    low: u64,
    v: &'a V,
}

impl<'a, V> Held<'a, V> {
    fn of(e: &'a crate::bounded::Counted<V>) -> Self {
        Held {
            n: e.count,
            low: e.lower(),
            v: &e.value,
        }
    }
}

/// Per scope (an endpoint or a host), its keys' counts.
type Scoped<'a, V> = HashMap<u64, Vec<Held<'a, V>>>;

fn scoped<'a>(t: &'a crate::bounded::Bounded<ClientCount>) -> Scoped<'a, ClientCount> {
    let mut out: Scoped<'a, ClientCount> = HashMap::new();
    for (_, e) in t.iter() {
        out.entry(e.value.scope).or_default().push(Held::of(e));
    }
    out
}

/// Whether a key looks legitimate: most of its requests do (of those
/// counted since it took its place, of which `legit` is exact).
fn legit_key(low: u64, legit: u64) -> bool {
    legit * 2 > low
}

/// (clients, their 99th percentile) of the keys that look legitimate.
fn summary<'a>(keys: impl Iterator<Item = &'a Held<'a, ClientCount>>) -> (usize, u64) {
    let mut v: Vec<u64> = keys
        .filter(|h| legit_key(h.low, h.v.legit))
        .map(|h| h.n)
        .collect();
    (v.len(), percentile(&mut v, 99.0))
}

/// Every finding in the counted traffic.
pub fn find(c: &Counts, o: &Options) -> Vec<Finding> {
    let span_s = c
        .span_ns
        .map_or(0, |(a, b)| b.saturating_sub(a).div_ceil(1_000_000_000));
    // The period: the traffic's span rounded up to whole minutes.
    let period_s = span_s.max(1).div_ceil(60) * 60;
    let mut out = rerenders(c, period_s, o);
    let clients = scoped(&c.clients);
    let networks = scoped(&c.networks);
    let hosts = scoped(&c.host_clients);
    let all: Vec<Held<'_, ClientCount>> = c.all_clients.iter().map(|(_, e)| Held::of(e)).collect();
    let mut agents: Scoped<'_, AgentCount> = HashMap::new();
    for (_, e) in c.agents.iter() {
        agents.entry(e.value.scope).or_default().push(Held::of(e));
    }
    let global = summary(all.iter());
    let host_summary: HashMap<u64, (usize, u64)> =
        hosts.iter().map(|(h, v)| (*h, summary(v.iter()))).collect();
    let mut endpoints: Vec<(&u64, &crate::bounded::Counted<crate::count::EndpointCount>)> = c
        .endpoints
        .iter()
        .filter(|(_, e)| e.count >= o.min_requests && analysed(c, e))
        .collect();
    // An endpoint of a path template comes before those of the same
    // template and a query shape, which do not repeat its offenders.
    endpoints.sort_by(|a, b| {
        let (a, b) = (&a.1.value, &b.1.value);
        (&a.host, &a.template, &a.shape).cmp(&(&b.host, &b.template, &b.shape))
    });
    let none = Vec::new();
    let mut caught_on: HashMap<u64, Caught> = HashMap::new();
    let no_one = Caught::default();
    for (&ep, e) in endpoints {
        let base = match e.value.base {
            0 => &no_one,
            b => caught_on.get(&b).unwrap_or(&no_one),
        };
        let end = Endpoint {
            ep,
            host: &e.value.host,
            host_cut: e.value.host_cut,
            path: &e.value.template,
            shape: &e.value.shape,
            total: e.count,
            period_s,
            o,
            clients: clients.get(&ep).unwrap_or(&none),
            baselines: [
                (
                    "of its host",
                    host_summary
                        .get(&e.value.host_fp)
                        .copied()
                        .unwrap_or((0, 0)),
                ),
                ("of all hosts", global),
            ],
        };
        let (ips, mut caught_ips) = end.by_ip(&base.ips);
        out.extend(ips);
        caught_ips.extend(&base.ips);
        let nets = networks.get(&ep).unwrap_or(&none);
        let (prefixes, mut caught_nets) = end.by_prefix(nets, &caught_ips, &base.nets);
        out.extend(prefixes);
        caught_nets.extend(&base.nets);
        let agents = agents.get(&ep).map_or(&[][..], Vec::as_slice);
        let swarms = end.swarms(agents, &caught_ips, &caught_nets, &base.agents);
        if e.value.base == 0 {
            let agents = swarms
                .iter()
                .filter_map(|f| match &f.members {
                    Members::Agent(_, a) => Some(a.clone()),
                    _ => None,
                })
                .collect();
            caught_on.insert(
                ep,
                Caught {
                    ips: caught_ips,
                    nets: caught_nets,
                    agents,
                },
            );
        }
        out.extend(swarms);
    }
    // Counted over the traffic's span, limited per period: a client's
    // rate is kept, so a short capture does not make a tight limit.
    let span = span_s.max(1);
    for f in &mut out {
        if span != period_s {
            f.limit = (f.limit * period_s).div_ceil(span);
            f.basis = format!(
                "{}, over {span} s of traffic, scaled to {period_s} s",
                f.basis
            );
        }
    }
    out
}

/// Whether `e` is analysed: a path under a parent with titles is
/// analysed under the parent's `*`, any other as itself; a path template
/// with a query shape like its template alone, unless every request of
/// the template has that shape (the same traffic).
fn analysed(c: &Counts, e: &crate::bounded::Counted<crate::count::EndpointCount>) -> bool {
    let v = &e.value;
    let shared = v.base != 0
        && c.endpoints
            .get(v.base)
            .is_some_and(|b| b.lower() <= e.count);
    v.collapsed == c.titled(v.parent) && !shared
}

/// What the findings on an endpoint of a path template alone caught:
/// those on the same template with a query shape leave them out.
#[derive(Default)]
struct Caught {
    ips: BTreeSet<IpAddr>,
    nets: BTreeSet<IpAddr>,
    agents: BTreeSet<Vec<u8>>,
}

struct Endpoint<'a> {
    ep: u64,
    host: &'a str,
    /// Whether the host may have been cut.
    host_cut: bool,
    path: &'a str,
    /// The query shape (empty: the path template alone).
    shape: &'a str,
    total: u64,
    period_s: u64,
    o: &'a Options,
    /// The endpoint's addresses.
    clients: &'a [Held<'a, ClientCount>],
    /// Per-client counts of legitimate-looking clients, wider than the
    /// endpoint, with what they are.
    baselines: [(&'static str, (usize, u64)); 2],
}

impl Endpoint<'_> {
    /// The first legitimate-looking client, by address (a normal
    /// request for a test block).
    fn normal_ip(&self) -> Option<IpAddr> {
        self.clients
            .iter()
            .filter(|h| legit_key(h.low, h.v.legit))
            .map(|h| h.v.ip)
            .min()
    }

    /// Heavy addresses (but those a finding on the template alone
    /// caught, `taken`): one rule limits them all; and the addresses
    /// caught.
    fn by_ip(&self, taken: &BTreeSet<IpAddr>) -> (Option<Finding>, BTreeSet<IpAddr>) {
        let keys: Vec<(IpAddr, u64, bool)> = self
            .clients
            .iter()
            .map(|h| (h.v.ip, h.n, legit_key(h.low, h.v.legit)))
            .collect();
        let (limit, basis) = limit_of(&keys, &self.baselines);
        // Judged on the fewest requests each can have sent.
        let mut heavy: Vec<(IpAddr, u64)> = self
            .clients
            .iter()
            .filter(|h| !legit_key(h.low, h.v.legit) && self.heavy(h.low, limit))
            .filter(|h| !taken.contains(&h.v.ip))
            .map(|h| (h.v.ip, h.low))
            .collect();
        if heavy.is_empty() {
            return (None, BTreeSet::new());
        }
        let caught: BTreeSet<IpAddr> = heavy.iter().map(|(ip, _)| *ip).collect();
        let f = self.named(Key::Ip, &mut heavy, limit, basis, |ip| ip.to_string());
        let f = Finding {
            members: Members::Ips(self.ep, caught.clone()),
            normal_key: self.normal_ip(),
            ..f
        };
        (Some(f), caught)
    }

    /// Heavy /24s and /48s without one heavy address (the requests of
    /// the `caught` addresses are another finding's); and those caught.
    fn by_prefix(
        &self,
        nets: &[Held<'_, ClientCount>],
        caught: &BTreeSet<IpAddr>,
        taken_nets: &BTreeSet<IpAddr>,
    ) -> (Option<Finding>, BTreeSet<IpAddr>) {
        // The caught addresses' requests, per network: (at least, at
        // most).
        let mut taken: HashMap<IpAddr, (u64, u64)> = HashMap::new();
        for h in self.clients {
            if caught.contains(&h.v.ip) {
                let t = taken.entry(network(h.v.ip)).or_default();
                t.0 += h.low;
                t.1 += h.n;
            }
        }
        // (network, most requests left, fewest left, legitimate, addresses)
        let keys: Vec<(IpAddr, u64, u64, bool, usize)> = nets
            .iter()
            .map(|h| {
                let (least, most) = taken.get(&h.v.ip).copied().unwrap_or_default();
                let held = h.v.ips.as_deref().cloned().unwrap_or_default();
                let left = held.ips().iter().filter(|ip| !caught.contains(ip)).count();
                let ips = if held.more { left.max(2) } else { left };
                (
                    h.v.ip,
                    h.n.saturating_sub(least),
                    h.low.saturating_sub(most),
                    legit_key(h.low, h.v.legit),
                    ips,
                )
            })
            .collect();
        let plain: Vec<(IpAddr, u64, bool)> =
            keys.iter().map(|&(k, n, _, l, _)| (k, n, l)).collect();
        let (limit, basis) = limit_of(&plain, &self.baselines);
        let mut heavy: Vec<(IpAddr, u64)> = keys
            .iter()
            .filter(|(_, _, low, legit, ips)| {
                // A prefix whose one address is heavy is that address's.
                !legit && *ips >= 2 && self.heavy(*low, limit)
            })
            .filter(|(k, ..)| !taken_nets.contains(k))
            .map(|(k, _, low, _, _)| (*k, *low))
            .collect();
        if heavy.is_empty() {
            return (None, BTreeSet::new());
        }
        let nets: BTreeSet<IpAddr> = heavy.iter().map(|(k, _)| *k).collect();
        let f = self.named(Key::Prefix, &mut heavy, limit, basis, prefix);
        let normal = keys
            .iter()
            .filter(|(_, _, _, legit, _)| *legit)
            .map(|(k, ..)| *k)
            .min();
        let f = Finding {
            members: Members::Prefixes(self.ep, nets.clone()),
            normal_key: normal,
            ..f
        };
        (Some(f), nets)
    }

    /// The finding limiting `heavy` (keys and counts), named.
    fn named(
        &self,
        key: Key,
        heavy: &mut [(IpAddr, u64)],
        limit: u64,
        basis: String,
        show: impl Fn(IpAddr) -> String,
    ) -> Finding {
        heavy.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let requests: u64 = heavy.iter().map(|(_, n)| n).sum();
        let what = if key == Key::Ip { "address" } else { "prefix" };
        let named: Vec<String> = heavy
            .iter()
            .take(5)
            .map(|(k, n)| format!("{} ({n})", show(*k)))
            .collect();
        let more = if heavy.len() > 5 {
            format!(" and {} more", heavy.len() - 5)
        } else {
            String::new()
        };
        self.finding(
            format!(
                "{} {what}{} {}{more}: {requests} of the {} requests to {}",
                heavy.len(),
                if heavy.len() == 1 { "" } else { "es" },
                named.join(", "),
                self.total,
                self.endpoint()
            ),
            key,
            None,
            limit,
            basis,
            requests,
        )
    }

    /// A User-Agent family (not a browser's) over many addresses, each
    /// under the per-address limit, together heavy (the requests of the
    /// `ips` and `nets` caught are other findings').
    fn swarms(
        &self,
        agents: &[Held<'_, AgentCount>],
        ips: &BTreeSet<IpAddr>,
        nets: &BTreeSet<IpAddr>,
        taken: &BTreeSet<Vec<u8>>,
    ) -> Vec<Finding> {
        let keys: Vec<(&[u8], u64, bool)> = agents
            .iter()
            .map(|h| (h.v.ua.as_slice(), h.n, legit_key(h.low, h.v.legit)))
            .collect();
        let (limit, basis) = limit_of(&keys, &self.baselines);
        let mut sorted: Vec<&Held<'_, AgentCount>> = agents.iter().collect();
        sorted.sort_by(|a, b| a.v.ua.cmp(&b.v.ua));
        let mut out = Vec::new();
        for h in sorted {
            let a = h.v;
            let family = ua_family(&a.first);
            if family.starts_with("browser:") || family == "-" || taken.contains(&a.ua) {
                continue;
            }
            // A cut `Mozilla/…` may be the start of any browser's
            // User-Agent (a Chrome one cut at 64 bytes holds no `Chrome/`):
            // a rule on it would limit every browser that starts so.
            if a.cut && a.ua.starts_with(b"Mozilla/") {
                continue;
            }
            let Some(by_ip) = &a.ips else { continue };
            let (mut left, mut addresses, mut taken) = (0, 0usize, 0);
            for (ip, c) in by_ip.values() {
                if ips.contains(ip) || nets.contains(&network(*ip)) {
                    taken += c;
                } else {
                    left += c;
                    addresses += 1;
                }
            }
            // Past the addresses held, the count is the User-Agent's,
            // less what is known to be taken.
            let n = if a.wide {
                h.low.saturating_sub(taken)
            } else {
                left
            };
            let at_least = if a.wide { "at least " } else { "" };
            if addresses < self.o.min_swarm || !self.heavy(n, limit) {
                continue;
            }
            let f = self.finding(
                format!(
                    "User-Agent {}{} from {at_least}{addresses} addresses: {n} of the {} requests to {}",
                    String::from_utf8_lossy(&a.first),
                    if a.versions { " and other versions" } else { "" },
                    self.total,
                    self.endpoint()
                ),
                Key::UserAgent,
                Some(String::from_utf8_lossy(&a.ua).into_owned()),
                limit,
                basis.clone(),
                n,
            );
            out.push(Finding {
                ua_cut: a.cut,
                members: Members::Agent(self.ep, a.ua.clone()),
                normal_key: self.normal_ip(),
                ..f
            });
        }
        out
    }

    fn heavy(&self, n: u64, limit: u64) -> bool {
        n >= self.o.min_requests
            && n > self.o.over_limit * limit
            && n as f64 >= self.o.min_share * self.total as f64
    }

    fn endpoint(&self) -> String {
        if self.shape.is_empty() {
            format!("{}{}", self.host, self.path)
        } else {
            format!("{}{} with query {}", self.host, self.path, self.shape)
        }
    }

    fn finding(
        &self,
        what: String,
        key: Key,
        ua_prefix: Option<String>,
        limit: u64,
        basis: String,
        counted: u64,
    ) -> Finding {
        Finding {
            what,
            host: self.host.to_string(),
            host_cut: self.host_cut,
            path: self.path.to_string(),
            path_prefix: false,
            query: if self.shape.is_empty() {
                Vec::new()
            } else {
                self.shape.split('&').map(str::to_string).collect()
            },
            ua_prefix,
            ua_cut: false,
            no_cache: false,
            key,
            limit,
            period_s: self.period_s,
            basis,
            counted,
            members: Members::Ips(self.ep, BTreeSet::new()),
            normal_key: None,
            requests: 0,
            offender: None,
            normal: None,
        }
    }
}

/// The limit for a key from the normal clients' per-key counts (`keys`:
/// each key, its count, whether it looks legitimate): twice their 99th
/// percentile (at least 10); with fewer than three keys that look
/// legitimate, the same of the first baseline with three clients; else
/// three times the median of all keys.
fn limit_of<K>(keys: &[(K, u64, bool)], baselines: &[(&str, (usize, u64))]) -> (u64, String) {
    let mut normal: Vec<u64> = keys.iter().filter(|k| k.2).map(|k| k.1).collect();
    let own = (normal.len(), percentile(&mut normal, 99.0));
    for &(what, (n, p)) in std::iter::once(&("of the endpoint", own)).chain(baselines) {
        if n >= 3 {
            return (
                (2 * p).max(10),
                format!(
                    "twice the 99th percentile ({p}) of the {n} legitimate-looking clients {what}"
                ),
            );
        }
    }
    let mut all: Vec<u64> = keys.iter().map(|k| k.1).collect();
    let n = all.len();
    let m = percentile(&mut all, 50.0);
    (
        (3 * m).max(10),
        format!("three times the median ({m}) of all {n} clients (too few look legitimate)"),
    )
}

/// One path re-requested far more than its siblings (the same parent on
/// the same host), from more than one address: a loop keyed by what is
/// requested.
pub(crate) fn rerenders(c: &Counts, period_s: u64, o: &Options) -> Vec<Finding> {
    let mut parents: HashMap<u64, Vec<(u64, &crate::bounded::Counted<crate::count::PathCount>)>> =
        HashMap::new();
    for (k, e) in c.paths.iter() {
        parents.entry(e.value.parent_fp).or_default().push((*k, e));
    }
    let mut parents: Vec<_> = parents.into_iter().collect();
    parents.sort_by(|a, b| {
        let (x, y) = (&a.1[0].1.value, &b.1[0].1.value);
        (&x.host, &x.parent).cmp(&(&y.host, &y.parent))
    });
    let mut out = Vec::new();
    for (parent_fp, mut paths) in parents {
        if paths.len() < 3 {
            continue;
        }
        paths.sort_by(|a, b| a.1.value.path.cmp(&b.1.value.path));
        let total = c.parents.get(parent_fp).map_or(0, |p| p.count);
        let mut counts: Vec<u64> = paths.iter().map(|(_, e)| e.count).collect();
        let siblings = counts.len();
        // The siblings' 90th percentile, the hot path left out by rank.
        counts.sort_unstable();
        let p = percentile(&mut counts[..siblings - 1], 90.0);
        let limit = (2 * p).max(10);
        for (key, e) in &paths {
            let n = e.lower();
            let v = &e.value;
            if n < o.min_requests
                || n <= 5 * limit
                || v.ips.len() < 2
                || (n as f64) < o.min_share * total as f64
            {
                continue;
            }
            let ips = if v.more {
                format!("more than {}", v.ips.len())
            } else {
                v.ips.len().to_string()
            };
            out.push(Finding {
                what: format!(
                    "{}{}: {n} requests from {ips} addresses, against at most {p} for 9 in 10 of its {} siblings",
                    v.host,
                    String::from_utf8_lossy(&v.path),
                    siblings - 1
                ),
                host: v.host.clone(),
                host_cut: v.host_cut,
                path: v.parent.clone(),
                path_prefix: true,
                query: Vec::new(),
                ua_prefix: None,
                ua_cut: false,
                no_cache: v.all_no_cache,
                key: Key::HostPath,
                limit,
                period_s,
                basis: format!("twice the 90th percentile ({p}) of the {} sibling paths", siblings - 1),
                counted: n,
                members: Members::Loop {
                    path: *key,
                    parent: parent_fp,
                },
                normal_key: None,
                requests: 0,
                offender: None,
                normal: None,
            });
        }
    }
    out
}
