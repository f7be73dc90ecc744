//! Finding who is heavy: per endpoint (host and path template), by
//! address, by /24 or /48, by User-Agent family across many addresses,
//! and by one path re-requested among its siblings; each against how the
//! normal clients of the same endpoint behave.

use crate::keys::{network, path_template, prefix, ua_family, ua_prefix};
use crate::obs::Obs;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// What the existing ruleset did to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Passed: a new rule may limit it.
    Pass,
    /// Exempted by an `allow` rule: a new rule never sees it.
    Allowed,
    /// Already denied, throttled or dropped: already covered.
    Limited,
    /// Not known: an existing rule reads a field the input lacks (a
    /// header a log does not write), so neither counted nor limited.
    Unknown,
}

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
    /// The endpoint: a path, or a template with `*` segments.
    pub path: String,
    /// True when `path` is a prefix (`starts_with`), not the whole path.
    pub path_prefix: bool,
    /// A User-Agent prefix the rule also requires.
    pub ua_prefix: Option<String>,
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
    /// The offender's requests (indices into the traffic).
    pub requests: Vec<usize>,
    /// Indices of requests of normal clients of the same endpoint (for
    /// the rule's test block).
    pub normal: Vec<usize>,
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

/// Whether a request counts: the existing rules passed it, it is not
/// from a trusted address, and its target is a path (origin form: a
/// rule and a test can name it).
fn usable(r: &Obs, existing: Existing, trusted: &dyn Fn(IpAddr) -> bool) -> bool {
    existing == Existing::Pass && !trusted(r.ip) && r.target.starts_with(b"/")
}

/// Every finding in `traffic` (in time order), `existing[i]` what the
/// existing ruleset did to request `i`, `trusted` the addresses never
/// to limit.
pub fn find(
    traffic: &[Obs],
    existing: &[Existing],
    trusted: &dyn Fn(IpAddr) -> bool,
    o: &Options,
) -> Vec<Finding> {
    let span_s = match (traffic.first(), traffic.last()) {
        (Some(a), Some(b)) => b.time_ns.saturating_sub(a.time_ns).div_ceil(1_000_000_000),
        _ => 0,
    };
    // The period: the traffic's span rounded up to whole minutes.
    let period_s = span_s.max(1).div_ceil(60) * 60;
    let legit: Vec<bool> = traffic.iter().map(Obs::looks_legitimate).collect();
    let legit = legit.as_slice();
    // A loop first: its requests are the page's, not its clients'.
    let loops = rerenders(traffic, existing, trusted, period_s, o);
    let looped: BTreeSet<usize> = loops
        .iter()
        .flat_map(|f| f.requests.iter().copied())
        .collect();
    // Hashed while counting (one lookup a request), ordered after.
    let mut hashed: HashMap<(String, String), Vec<usize>> = HashMap::new();
    for (i, r) in traffic.iter().enumerate() {
        if !usable(r, existing[i], trusted) || looped.contains(&i) {
            continue;
        }
        let host = String::from_utf8_lossy(&r.host).to_lowercase();
        hashed
            .entry((host, path_template(r.path())))
            .or_default()
            .push(i);
    }
    let endpoints: BTreeMap<(String, String), Vec<usize>> = hashed.into_iter().collect();
    // Baselines where an endpoint has too few normal clients of its
    // own: the legitimate-looking clients of its host, then of all hosts.
    let mut per_host: BTreeMap<&str, BTreeMap<IpAddr, Vec<usize>>> = BTreeMap::new();
    let mut everywhere: BTreeMap<IpAddr, Vec<usize>> = BTreeMap::new();
    for ((host, _), reqs) in &endpoints {
        for &i in reqs {
            let ip = traffic[i].ip;
            per_host
                .entry(host)
                .or_default()
                .entry(ip)
                .or_default()
                .push(i);
            everywhere.entry(ip).or_default().push(i);
        }
    }
    let legit_counts = |by: &BTreeMap<IpAddr, Vec<usize>>| -> Vec<u64> {
        by.values()
            .filter(|v| v.iter().filter(|&&i| legit[i]).count() * 2 > v.len())
            .map(|v| v.len() as u64)
            .collect()
    };
    // (clients, their 99th percentile), computed once.
    let summary = |mut v: Vec<u64>| (v.len(), percentile(&mut v, 99.0));
    let global = summary(legit_counts(&everywhere));
    let hosts: BTreeMap<&str, (usize, u64)> = per_host
        .iter()
        .map(|(h, by)| (*h, summary(legit_counts(by))))
        .collect();
    let mut out = loops;
    for ((host, path), reqs) in &endpoints {
        let e = Endpoint {
            traffic,
            host,
            path,
            reqs,
            period_s,
            o,
            legit,
            baselines: [
                (
                    "of its host",
                    hosts.get(host.as_str()).copied().unwrap_or((0, 0)),
                ),
                ("of all hosts", global),
            ],
        };
        let mut caught = BTreeSet::new();
        for key in [Key::Ip, Key::Prefix] {
            for f in e.by_key(key, &caught) {
                caught.extend(f.requests.iter().copied());
                out.push(f);
            }
        }
        out.extend(e.swarms(&caught));
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

struct Endpoint<'a> {
    traffic: &'a [Obs],
    host: &'a str,
    path: &'a str,
    reqs: &'a [usize],
    period_s: u64,
    o: &'a Options,
    /// Per-client counts of legitimate-looking clients, wider than the
    /// endpoint, with what they are.
    baselines: [(&'static str, (usize, u64)); 2],
    /// Whether each request of the traffic looks legitimate.
    legit: &'a [bool],
}

impl Endpoint<'_> {
    /// Clients that look legitimate (most of their requests do): the
    /// normal behaviour. With fewer than three, every client.
    fn normal<K: Ord + Clone>(
        &self,
        key: impl Fn(&Obs) -> K,
    ) -> (BTreeMap<K, Vec<usize>>, BTreeSet<K>) {
        let mut by: BTreeMap<K, Vec<usize>> = BTreeMap::new();
        for &i in self.reqs {
            by.entry(key(&self.traffic[i])).or_default().push(i);
        }
        let legit: BTreeSet<K> = by
            .iter()
            .filter(|(_, v)| v.iter().filter(|&&i| self.legit[i]).count() * 2 > v.len())
            .map(|(k, _)| k.clone())
            .collect();
        (by, legit)
    }

    /// Heavy addresses, or prefixes heavy without one heavy address
    /// (requests in `caught` are already another finding's).
    fn by_key(&self, key: Key, caught: &BTreeSet<usize>) -> Vec<Finding> {
        let k = |r: &Obs| match key {
            Key::Prefix => network(r.ip),
            _ => r.ip,
        };
        let (mut by, legit) = self.normal(k);
        for v in by.values_mut() {
            v.retain(|i| !caught.contains(i));
        }
        let (limit, basis) = limit_of(&by, &legit, &self.baselines);
        let total = self.reqs.len() as u64;
        // One rule limits every heavy key of the endpoint.
        let mut heavy: Vec<(&IpAddr, usize)> = Vec::new();
        let mut requests = Vec::new();
        for (name, reqs) in &by {
            let n = reqs.len() as u64;
            if legit.contains(name) || !self.heavy(n, total, limit) {
                continue;
            }
            // A prefix whose one address is heavy is that address's.
            if key == Key::Prefix {
                let ips: BTreeSet<IpAddr> = reqs.iter().map(|&i| self.traffic[i].ip).collect();
                if ips.len() < 2 {
                    continue;
                }
            }
            heavy.push((name, reqs.len()));
            requests.extend(reqs.iter().copied());
        }
        if heavy.is_empty() {
            return Vec::new();
        }
        requests.sort_unstable();
        heavy.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let what = if key == Key::Ip { "address" } else { "prefix" };
        let named: Vec<String> = heavy
            .iter()
            .take(5)
            .map(|(k, n)| match key {
                Key::Prefix => format!("{} ({n})", prefix(**k)),
                _ => format!("{k} ({n})"),
            })
            .collect();
        let more = if heavy.len() > 5 {
            format!(" and {} more", heavy.len() - 5)
        } else {
            String::new()
        };
        vec![self.finding(
            format!(
                "{} {what}{} {}{more}: {} of the {total} requests to {}",
                heavy.len(),
                if heavy.len() == 1 { "" } else { "es" },
                named.join(", "),
                requests.len(),
                self.endpoint()
            ),
            key,
            None,
            limit,
            basis,
            requests,
            &legit_requests(&by, &legit),
        )]
    }

    /// A User-Agent family (not a browser's) over many addresses, each
    /// under the per-address limit, together heavy.
    fn swarms(&self, caught: &BTreeSet<usize>) -> Vec<Finding> {
        let (by_ua, legit_ua) = self.normal(|r| r.user_agent().to_vec());
        let (by_ip, legit_ip) = self.normal(|r| r.ip);
        let (limit, basis) = limit_of(&by_ua, &legit_ua, &self.baselines);
        let total = self.reqs.len() as u64;
        let mut out = Vec::new();
        for (ua, reqs) in &by_ua {
            let family = ua_family(ua);
            if family.starts_with("browser:") || family == "-" {
                continue;
            }
            let reqs: Vec<usize> = reqs
                .iter()
                .copied()
                .filter(|i| !caught.contains(i))
                .collect();
            let ips: BTreeSet<IpAddr> = reqs.iter().map(|&i| self.traffic[i].ip).collect();
            let n = reqs.len() as u64;
            if ips.len() < self.o.min_swarm || !self.heavy(n, total, limit) {
                continue;
            }
            out.push(self.finding(
                format!(
                    "User-Agent {} from {} addresses: {n} of the {total} requests to {}",
                    String::from_utf8_lossy(ua),
                    ips.len(),
                    self.endpoint()
                ),
                Key::UserAgent,
                Some(ua_prefix(ua)),
                limit,
                basis.clone(),
                reqs,
                &legit_requests(&by_ip, &legit_ip),
            ));
        }
        out
    }

    fn heavy(&self, n: u64, total: u64, limit: u64) -> bool {
        n >= self.o.min_requests
            && n > self.o.over_limit * limit
            && n as f64 >= self.o.min_share * total as f64
    }

    fn endpoint(&self) -> String {
        format!("{}{}", self.host, self.path)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "a finding is its endpoint and these six facts"
    )]
    fn finding(
        &self,
        what: String,
        key: Key,
        ua_prefix: Option<String>,
        limit: u64,
        basis: String,
        requests: Vec<usize>,
        normal: &[usize],
    ) -> Finding {
        Finding {
            what,
            host: self.host.to_string(),
            path: self.path.to_string(),
            path_prefix: false,
            ua_prefix,
            no_cache: false,
            key,
            limit,
            period_s: self.period_s,
            basis,
            requests,
            normal: normal.to_vec(),
        }
    }
}

/// The limit for a key from the normal clients' per-key counts: twice
/// their 99th percentile (at least 10); with fewer than three keys that
/// look legitimate, the same of the first baseline with three clients;
/// else three times the median of all keys.
fn limit_of<K: Ord>(
    by: &BTreeMap<K, Vec<usize>>,
    legit: &BTreeSet<K>,
    baselines: &[(&str, (usize, u64))],
) -> (u64, String) {
    let mut normal: Vec<u64> = by
        .iter()
        .filter(|(k, _)| legit.contains(k))
        .map(|(_, v)| v.len() as u64)
        .collect();
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
    let mut all: Vec<u64> = by.values().map(|v| v.len() as u64).collect();
    let n = all.len();
    let m = percentile(&mut all, 50.0);
    (
        (3 * m).max(10),
        format!("three times the median ({m}) of all {n} clients (too few look legitimate)"),
    )
}

fn legit_requests<K: Ord>(by: &BTreeMap<K, Vec<usize>>, legit: &BTreeSet<K>) -> Vec<usize> {
    by.iter()
        .filter(|(k, _)| legit.contains(k))
        .flat_map(|(_, v)| v.iter().copied())
        .collect()
}

/// The requests of each path (indices into the traffic).
type Requests<'a> = HashMap<&'a [u8], Vec<usize>>;

/// One path re-requested far more than its siblings (the same template
/// parent on the same host), from more than one address: a loop keyed by
/// what is requested.
fn rerenders(
    traffic: &[Obs],
    existing: &[Existing],
    trusted: &dyn Fn(IpAddr) -> bool,
    period_s: u64,
    o: &Options,
) -> Vec<Finding> {
    let mut parents: HashMap<(String, String), Requests<'_>> = HashMap::new();
    for (i, r) in traffic.iter().enumerate() {
        // Keyed by host and path: a request without a Host (a log that
        // does not write it) cannot be counted by one.
        if !usable(r, existing[i], trusted) || r.host.is_empty() {
            continue;
        }
        let path = r.path();
        let Some(cut) = path.iter().rposition(|&b| b == b'/') else {
            continue;
        };
        let parent = String::from_utf8_lossy(&path[..=cut]).into_owned();
        let host = String::from_utf8_lossy(&r.host).to_lowercase();
        parents
            .entry((host, parent))
            .or_default()
            .entry(path)
            .or_default()
            .push(i);
    }
    let mut out = Vec::new();
    let mut parents: Vec<_> = parents.into_iter().collect();
    parents.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for ((host, parent), paths) in parents {
        if paths.len() < 3 {
            continue;
        }
        let paths: BTreeMap<&[u8], Vec<usize>> = paths.into_iter().collect();
        let mut counts: Vec<u64> = paths.values().map(|v| v.len() as u64).collect();
        let total: u64 = counts.iter().sum();
        let siblings = counts.len();
        // The siblings' 90th percentile, the hot path left out by rank.
        counts.sort_unstable();
        let p = percentile(&mut counts[..siblings - 1].to_vec(), 90.0);
        let limit = (2 * p).max(10);
        for (path, reqs) in &paths {
            let n = reqs.len() as u64;
            let ips: BTreeSet<IpAddr> = reqs.iter().map(|&i| traffic[i].ip).collect();
            if n < o.min_requests
                || n <= 5 * limit
                || ips.len() < 2
                || (n as f64) < o.min_share * total as f64
            {
                continue;
            }
            let no_cache = reqs.iter().all(|&i| {
                let r = &traffic[i];
                r.header("cache-control")
                    .is_some_and(|v| crate::obs::contains(v, b"no-cache"))
                    || r.header("pragma") == Some(b"no-cache")
            });
            let normal: Vec<usize> = paths
                .iter()
                .filter(|(p, _)| *p != path)
                .flat_map(|(_, v)| v.iter().copied())
                .collect();
            out.push(Finding {
                what: format!(
                    "{host}{}: {n} requests from {} addresses, against at most {p} for 9 in 10 of its {} siblings",
                    String::from_utf8_lossy(path),
                    ips.len(),
                    siblings - 1
                ),
                host: host.clone(),
                path: parent.clone(),
                path_prefix: true,
                ua_prefix: None,
                no_cache,
                key: Key::HostPath,
                limit,
                period_s,
                basis: format!("twice the 90th percentile ({p}) of the {} sibling paths", siblings - 1),
                requests: reqs.clone(),
                normal,
            });
        }
    }
    out
}
