//! Counting the traffic in bounded memory, by the keys [`crate::find`]
//! looks for offenders by: one request at a time, nothing of it kept but
//! counts per key ([`crate::bounded`]).
//!
//! Two counts, each a pass over the inputs:
//!
//! 1. **paths**: each path's requests under its parent (host and the
//!    path up to its last `/`), for the loops, and the traffic's span;
//! 2. **endpoints**: per endpoint (host and path template), per address,
//!    per /24 or /48, per User-Agent (with the addresses that sent it),
//!    and per address over each host and over all hosts, for the normal
//!    clients' baselines. The requests of a loop found by the first count
//!    are left out: they are the loop's. When no loop is found, both are
//!    counted in the same pass.

use crate::bounded::{Bounded, ByFingerprint, Fingerprints};
use crate::keys::{network, template_into};
use crate::obs::{header, looks_legitimate, no_cache, path};
use crate::Existing;
use rctl_dataplane::Request;
use std::hash::Hasher as _;
use std::net::IpAddr;

/// How many keys each count holds at most: what bounds the memory.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Addresses per endpoint, per host and over all hosts (each).
    pub clients: usize,
    /// Endpoints, paths, /24s and /48s per endpoint, User-Agents per
    /// endpoint (each).
    pub keys: usize,
    /// Addresses kept per User-Agent of an endpoint (past it, the
    /// User-Agent is known to come from at least that many).
    pub ips_per_agent: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            clients: 1 << 20,
            keys: 1 << 18,
            ips_per_agent: 4096,
        }
    }
}

/// A path's requests, for the loops.
#[derive(Debug, Clone)]
pub struct PathCount {
    /// Host, lower-cased.
    pub host: String,
    /// The path up to its last `/`.
    pub parent: String,
    /// The path.
    pub path: Vec<u8>,
    /// Its parent's fingerprint.
    pub parent_fp: u64,
    /// Up to eight addresses that asked for it.
    pub ips: Vec<IpAddr>,
    /// Whether more did.
    pub more: bool,
    /// Whether every request of it said no-cache.
    pub all_no_cache: bool,
}

/// An endpoint.
#[derive(Debug, Clone)]
pub struct EndpointCount {
    /// Host, lower-cased.
    pub host: String,
    /// The host's fingerprint (its scope in the per-host counts).
    pub host_fp: u64,
    /// Path template.
    pub template: String,
}

/// A key's requests on an endpoint, and how many looked legitimate.
#[derive(Debug, Clone)]
pub struct ClientCount {
    /// The endpoint's (or host's) fingerprint; 0 over all hosts.
    pub scope: u64,
    /// The address, or the /24 or /48.
    pub ip: IpAddr,
    /// Requests that looked legitimate.
    pub legit: u64,
    /// For a /24 or /48: up to four of its addresses, and whether it had
    /// more.
    pub ips: Vec<IpAddr>,
    /// Whether it had more addresses than `ips` holds.
    pub more: bool,
}

/// A User-Agent's requests on an endpoint.
#[derive(Debug, Clone)]
pub struct AgentCount {
    /// The endpoint's fingerprint.
    pub scope: u64,
    /// The User-Agent as sent.
    pub ua: Vec<u8>,
    /// Requests that looked legitimate.
    pub legit: u64,
    /// Per address, its requests (not kept for browsers' User-Agents,
    /// which are never a swarm's); at most [`Bounds::ips_per_agent`].
    pub ips: Option<ByFingerprint<(IpAddr, u64)>>,
    /// Whether more addresses sent it than `ips` holds.
    pub wide: bool,
}

/// The counts of a traffic.
pub struct Counts {
    pub(crate) fp: Fingerprints,
    pub(crate) bounds: Bounds,
    /// Requests read (each input, every verdict).
    pub requests: u64,
    /// Of them, those that look legitimate.
    pub legit: u64,
    /// The first and last request's time, nanoseconds.
    pub span_ns: Option<(u64, u64)>,
    pub(crate) paths: Bounded<PathCount>,
    pub(crate) parents: Bounded<()>,
    /// The loops' paths (fingerprints of host and path), once found.
    pub(crate) looped: ByFingerprint<()>,
    pub(crate) endpoints: Bounded<EndpointCount>,
    pub(crate) clients: Bounded<ClientCount>,
    pub(crate) networks: Bounded<ClientCount>,
    pub(crate) agents: Bounded<AgentCount>,
    pub(crate) host_clients: Bounded<ClientCount>,
    pub(crate) all_clients: Bounded<ClientCount>,
    host: Vec<u8>,
    template: Vec<u8>,
}

/// What the counts need of one request.
struct Seen<'r> {
    pub path: &'r [u8],
    pub ua: &'r [u8],
    pub ip: IpAddr,
    pub legit: bool,
}

impl Counts {
    /// Empty counts, holding at most `bounds` keys each.
    pub fn new(bounds: Bounds) -> Counts {
        Counts {
            fp: Fingerprints::default(),
            bounds,
            requests: 0,
            legit: 0,
            span_ns: None,
            paths: Bounded::new(bounds.keys),
            parents: Bounded::new(bounds.keys),
            looped: ByFingerprint::default(),
            endpoints: Bounded::new(bounds.keys),
            clients: Bounded::new(bounds.clients),
            networks: Bounded::new(bounds.keys),
            agents: Bounded::new(bounds.keys),
            host_clients: Bounded::new(bounds.clients),
            all_clients: Bounded::new(bounds.clients),
            host: Vec::new(),
            template: Vec::new(),
        }
    }

    /// Whether every count is exact: no count dropped a key.
    pub fn exact(&self) -> bool {
        [
            self.paths.exact(),
            self.parents.exact(),
            self.endpoints.exact(),
            self.clients.exact(),
            self.networks.exact(),
            self.agents.exact(),
            self.host_clients.exact(),
            self.all_clients.exact(),
        ]
        .iter()
        .all(|&e| e)
    }

    /// After the first pass: whether a loop was found. If so, its paths
    /// are noted and the endpoints emptied, to be counted again by
    /// [`Counts::second`] without the loops' requests.
    pub fn find_loops(&mut self, o: &crate::Options) -> bool {
        let loops = crate::find::rerenders(self, 60, o);
        for f in &loops {
            if let crate::Members::Loop { path, .. } = f.members {
                self.looped.insert(path, ());
            }
        }
        if self.looped.is_empty() {
            return false;
        }
        let b = self.bounds;
        self.endpoints = Bounded::new(b.keys);
        self.clients = Bounded::new(b.clients);
        self.networks = Bounded::new(b.keys);
        self.agents = Bounded::new(b.keys);
        self.host_clients = Bounded::new(b.clients);
        self.all_clients = Bounded::new(b.clients);
        true
    }

    /// The fingerprint of a host (lower-cased) and a path: a loop's key.
    pub(crate) fn path_key(&self, host: &[u8], path: &[u8]) -> u64 {
        self.fp.of(&[host, path])
    }

    /// Lower-cases `r`'s host into the reused buffer.
    fn lower_host(&mut self, r: &Request<'_>) {
        self.host.clear();
        self.host.extend(r.host.iter().map(u8::to_ascii_lowercase));
    }

    /// Counts `r`, which the existing rules judged `existing`, in the
    /// first pass: its paths, and its endpoints too when `endpoints`
    /// (the caller then makes no second pass unless a loop is found).
    pub fn first(&mut self, r: &Request<'_>, existing: Existing, trusted: bool, endpoints: bool) {
        self.requests += 1;
        let legit = looks_legitimate(r);
        self.legit += u64::from(legit);
        self.span_ns = Some(match self.span_ns {
            None => (r.time_ns, r.time_ns),
            Some((a, b)) => (a.min(r.time_ns), b.max(r.time_ns)),
        });
        if existing != Existing::Pass || trusted || !r.target.starts_with(b"/") {
            return;
        }
        self.lower_host(r);
        if !r.host.is_empty() {
            self.count_path(r);
        }
        if endpoints {
            self.count_endpoint(r, legit);
        }
    }

    /// Counts `r` in the second pass: its endpoints, unless it is a
    /// loop's request.
    pub fn second(&mut self, r: &Request<'_>, existing: Existing, trusted: bool) {
        if existing != Existing::Pass || trusted || !r.target.starts_with(b"/") {
            return;
        }
        self.lower_host(r);
        if !r.host.is_empty()
            && self
                .looped
                .contains_key(&self.path_key(&self.host, path(r)))
        {
            return;
        }
        self.count_endpoint(r, looks_legitimate(r));
    }

    fn count_path(&mut self, r: &Request<'_>) {
        let p = path(r);
        let Some(cut) = p.iter().rposition(|&b| b == b'/') else {
            return;
        };
        let parent = &p[..=cut];
        let parent_fp = self.fp.of(&[&self.host, parent]);
        self.parents.add(parent_fp, || ());
        let key = self.path_key(&self.host, p);
        let host = &self.host;
        let e = self.paths.add(key, || PathCount {
            host: String::from_utf8_lossy(host).into_owned(),
            parent: String::from_utf8_lossy(parent).into_owned(),
            path: p.to_vec(),
            parent_fp,
            ips: Vec::new(),
            more: false,
            all_no_cache: true,
        });
        let v = &mut e.value;
        if !v.ips.contains(&r.ip) {
            if v.ips.len() < 8 {
                v.ips.push(r.ip);
            } else {
                v.more = true;
            }
        }
        v.all_no_cache &= no_cache(r);
    }

    fn count_endpoint(&mut self, r: &Request<'_>, legit: bool) {
        let s = Seen {
            path: path(r),
            ua: header(r, "user-agent").unwrap_or_default(),
            ip: r.ip,
            legit,
        };
        self.template.clear();
        template_into(s.path, &mut self.template);
        let ep = self.fp.of(&[&self.host, &self.template]);
        let host_fp = self.fp.of(&[&self.host]);
        let (host, template) = (&self.host, &self.template);
        self.endpoints.add(ep, || EndpointCount {
            host: String::from_utf8_lossy(host).into_owned(),
            host_fp,
            template: String::from_utf8_lossy(template).into_owned(),
        });
        let tag = u64::from(s.legit);
        let ip_fp = |scope: u64, ip: IpAddr| {
            let mut h = self.fp.hasher();
            h.write_u64(scope);
            match ip {
                IpAddr::V4(a) => h.write(&a.octets()),
                IpAddr::V6(a) => h.write(&a.octets()),
            }
            h.finish()
        };
        let client = |scope, ip| {
            move || ClientCount {
                scope,
                ip,
                legit: 0,
                ips: Vec::new(),
                more: false,
            }
        };
        let (k_ep, k_host, k_all) = (ip_fp(ep, s.ip), ip_fp(host_fp, s.ip), ip_fp(0, s.ip));
        let net = network(s.ip);
        let k_net = ip_fp(ep, net);
        self.clients.add(k_ep, client(ep, s.ip)).value.legit += tag;
        self.host_clients
            .add(k_host, client(host_fp, s.ip))
            .value
            .legit += tag;
        self.all_clients.add(k_all, client(0, s.ip)).value.legit += tag;
        let n = &mut self.networks.add(k_net, client(ep, net)).value;
        n.legit += tag;
        if !n.ips.contains(&s.ip) {
            if n.ips.len() < 4 {
                n.ips.push(s.ip);
            } else {
                n.more = true;
            }
        }
        let k_ua = {
            let mut h = self.fp.hasher();
            h.write_u64(ep);
            h.write(s.ua);
            h.finish()
        };
        let a = &mut self
            .agents
            .add(k_ua, || AgentCount {
                scope: ep,
                ua: s.ua.to_vec(),
                legit: 0,
                ips: (!crate::keys::ua_family(s.ua).starts_with("browser:"))
                    .then(ByFingerprint::default),
                wide: false,
            })
            .value;
        a.legit += tag;
        if let Some(ips) = &mut a.ips {
            let len = ips.len();
            match ips.get_mut(&k_all) {
                Some(c) => c.1 += 1,
                None if len < self.bounds.ips_per_agent => {
                    ips.insert(k_all, (s.ip, 1));
                }
                None => a.wide = true,
            }
        }
    }
}
