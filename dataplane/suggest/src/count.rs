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

use crate::bounded::{Bounded, ByFingerprint, Fingerprints, Stage};
use crate::keys::{network, template_into};
use crate::obs::{header, looks_legitimate, no_cache, path};
use crate::{Existing, Origin};
use rctl_dataplane::Request;
use std::hash::Hasher as _;
use std::net::IpAddr;

/// Different paths under one parent from which its last segment is a
/// title (see [`Counts::titled`]).
pub const TITLES: u64 = 100;

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
    /// Whether a request of it logged a host that may have been cut
    /// (`host` is then a prefix of the host sent).
    pub host_cut: bool,
}

/// An endpoint.
#[derive(Debug, Clone)]
pub struct EndpointCount {
    /// Host, lower-cased.
    pub host: String,
    /// The host's fingerprint (its scope in the per-host counts).
    pub host_fp: u64,
    /// The fingerprint of the host and the path's parent (0 without a
    /// host): whether its last segment is a title is told by
    /// [`Counts::titled`].
    pub parent: u64,
    /// Whether the template's last segment is the parent's titles
    /// collapsed (`*`).
    pub collapsed: bool,
    /// Path template.
    pub template: String,
    /// The query's shape ([`crate::keys::query_shape`]) on an endpoint of
    /// the path template and a shape; empty on one of the path alone.
    pub shape: String,
    /// On an endpoint with a shape, the fingerprint of the endpoint of
    /// its path template alone (whose offenders it does not repeat).
    pub base: u64,
    /// Whether a request of it logged a host that may have been cut
    /// (`host` is then a prefix of the host sent).
    pub host_cut: bool,
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
    /// For a /24 or /48: its addresses (boxed: an address has none, and
    /// the addresses are most of the keys).
    pub ips: Option<Box<Addresses>>,
}

/// Up to four addresses of a /24 or /48, and whether it had more (held
/// in place: one memory access reads them).
#[derive(Debug, Clone)]
pub struct Addresses {
    held: [IpAddr; 4],
    len: u8,
    /// Whether there were more.
    pub more: bool,
}

impl Default for Addresses {
    fn default() -> Self {
        Addresses {
            held: [IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED); 4],
            len: 0,
            more: false,
        }
    }
}

impl Addresses {
    /// The first four.
    pub fn ips(&self) -> &[IpAddr] {
        &self.held[..usize::from(self.len)]
    }

    /// Notes `ip`: held if one of the first four, else `more`.
    pub fn add(&mut self, ip: IpAddr) {
        if self.more || self.ips().contains(&ip) {
            return;
        }
        match self.held.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = ip;
                self.len += 1;
            }
            None => self.more = true,
        }
    }
}

/// The fingerprint of `host` and the template of `path` up to its last
/// `/` (built in `buf`): where a path's titles are counted
/// ([`Counts::titled`]); 0 without a host or a `/`. The same for every
/// path of an endpoint, whose template is this parent's and its last
/// segment's.
pub(crate) fn title_fp(fp: &Fingerprints, host: &[u8], path: &[u8], buf: &mut Vec<u8>) -> u64 {
    match path.iter().rposition(|&b| b == b'/') {
        Some(cut) if !host.is_empty() => {
            buf.clear();
            template_into(&path[..=cut], buf);
            fp.of(&[host, buf])
        }
        _ => 0,
    }
}

/// The fingerprint of the endpoint of `host`, a path `template` and a
/// query `shape`.
pub(crate) fn shape_fp(fp: &Fingerprints, host: &[u8], template: &[u8], shape: &[u8]) -> u64 {
    fp.of(&[host, template, b"?", shape])
}

/// An endpoint's fingerprint: its host and template, and whether the
/// template is a parent's titles collapsed (a template `/w/*` of ids and
/// the titles of `/w/` collapsed are two endpoints, of which one is
/// analysed).
pub(crate) fn endpoint_fp(fp: &Fingerprints, host: &[u8], template: &[u8], collapsed: bool) -> u64 {
    if collapsed {
        fp.of(&[host, template, b"titles"])
    } else {
        fp.of(&[host, template])
    }
}

impl ClientCount {
    /// What makes the count of `ip` in `scope`, none counted yet.
    fn maker(scope: u64, ip: IpAddr) -> impl FnOnce() -> ClientCount {
        move || ClientCount {
            scope,
            ip,
            legit: 0,
            ips: None,
        }
    }
}

/// A User-Agent family's requests on an endpoint: the User-Agents that
/// start with the same product token, whatever their versions
/// ([`crate::keys::family_prefix`]).
#[derive(Debug, Clone)]
pub struct AgentCount {
    /// The endpoint's fingerprint.
    pub scope: u64,
    /// The family's prefix.
    pub ua: Vec<u8>,
    /// The first User-Agent of it seen.
    pub first: Vec<u8>,
    /// Whether others were seen (other versions).
    pub versions: bool,
    /// Requests that looked legitimate.
    pub legit: u64,
    /// Per address, its requests (not kept for browsers' User-Agents,
    /// which are never a swarm's); at most [`Bounds::ips_per_agent`].
    pub ips: Option<ByFingerprint<(IpAddr, u64)>>,
    /// Whether more addresses sent it than `ips` holds.
    pub wide: bool,
    /// Whether a request of it logged a User-Agent that may have been
    /// cut (`ua` is then a prefix of what was sent, to be tested with
    /// `starts_with`).
    pub cut: bool,
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
    /// Per parent (host and the path up to its last `/`), its requests.
    pub(crate) parents: Bounded<()>,
    /// Per parent template (host and the template up to its last `/`),
    /// how many different paths under it were first seen.
    pub(crate) titles: Bounded<u64>,
    /// Addresses held in the User-Agent families' maps, all families:
    /// at most [`Bounds::clients`].
    agent_ips: usize,
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
    collapsed: Vec<u8>,
    shape: Vec<u8>,
}

/// Which endpoint of a request: of its path template, of its parent's
/// titles collapsed, or of its path template and query shape.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Plain,
    Collapsed,
    Shape,
}

impl Scope {
    /// The template of this endpoint: `collapsed` under a parent's
    /// titles, else `template`.
    fn template<'a>(self, template: &'a [u8], collapsed: &'a [u8]) -> &'a [u8] {
        match self {
            Scope::Collapsed => collapsed,
            Scope::Plain | Scope::Shape => template,
        }
    }
}

/// The keys a request is counted under on one endpoint.
#[derive(Clone, Copy)]
struct ScopeKeys {
    /// Which endpoint.
    scope: Scope,
    /// The endpoint's.
    ep: u64,
    /// Its address's on the endpoint.
    client: u64,
    /// Its /24's or /48's on the endpoint.
    net: u64,
    /// Its User-Agent family's on the endpoint.
    agent: u64,
}

/// What the counts need of one request.
struct Seen<'r> {
    pub path: &'r [u8],
    pub ua: &'r [u8],
    pub ip: IpAddr,
    pub legit: bool,
    /// Whether the User-Agent may have been cut.
    pub ua_cut: bool,
    /// Whether the host may have been cut.
    pub host_cut: bool,
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
            titles: Bounded::new(bounds.keys),
            agent_ips: 0,
            looped: ByFingerprint::default(),
            endpoints: Bounded::new(bounds.keys),
            clients: Bounded::new(bounds.clients),
            networks: Bounded::new(bounds.keys),
            agents: Bounded::new(bounds.keys),
            host_clients: Bounded::new(bounds.clients),
            all_clients: Bounded::new(bounds.clients),
            host: Vec::new(),
            template: Vec::new(),
            collapsed: Vec::new(),
            shape: Vec::new(),
        }
    }

    /// Whether every count is exact: no count dropped a key.
    pub fn exact(&self) -> bool {
        [
            self.paths.exact(),
            self.parents.exact(),
            self.titles.exact(),
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
        self.agent_ips = 0;
        true
    }

    /// Whether the last segment of paths under `parent` is a title: at
    /// least [`TITLES`] different paths were asked for under it, so
    /// each is counted under the parent's `*` (`/wiki/*`), as a scraper
    /// of many pages asks; otherwise each path is its own endpoint.
    pub fn titled(&self, parent: u64) -> bool {
        parent != 0 && self.titles.get(parent).is_some_and(|p| p.value >= TITLES)
    }

    /// Every parent whose last segments are titles.
    pub(crate) fn titled_parents(&self) -> ByFingerprint<()> {
        self.titles
            .iter()
            .filter(|(k, _)| self.titled(**k))
            .map(|(k, _)| (*k, ()))
            .collect()
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
    /// first pass: its paths and its endpoints (counted again by
    /// [`Counts::second`] when a loop is found).
    pub fn first(&mut self, r: &Request<'_>, o: Origin<'_>, existing: Existing, trusted: bool) {
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
        let parent = self.parent_fp(r);
        let title = title_fp(&self.fp, &self.host, path(r), &mut self.template);
        // The path's tables are asked for now and counted in last, once
        // their memory has arrived.
        let key = (parent != 0).then(|| self.path_key(&self.host, path(r)));
        if let Some(key) = key {
            self.paths.prefetch(key, Stage::Index);
            self.parents.prefetch(parent, Stage::Index);
            self.titles.prefetch(title, Stage::Index);
        }
        self.count_endpoint(r, o, legit, title);
        if let Some(key) = key {
            self.count_path(r, o.cut("host"), key, parent, title);
        }
    }

    /// The fingerprint of `r`'s host (lower-cased in the buffer) and the
    /// parent of its path; 0 without a host or a `/`.
    fn parent_fp(&self, r: &Request<'_>) -> u64 {
        let p = path(r);
        match p.iter().rposition(|&b| b == b'/') {
            Some(cut) if !r.host.is_empty() => self.fp.of(&[&self.host, &p[..=cut]]),
            _ => 0,
        }
    }

    /// Counts `r` in the second pass: its endpoints, unless it is a
    /// loop's request.
    pub fn second(&mut self, r: &Request<'_>, o: Origin<'_>, existing: Existing, trusted: bool) {
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
        let title = title_fp(&self.fp, &self.host, path(r), &mut self.template);
        self.count_endpoint(r, o, looks_legitimate(r), title);
    }

    /// Counts `r`'s path (`key`: [`Counts::path_key`]) under its parent.
    fn count_path(
        &mut self,
        r: &Request<'_>,
        host_cut: bool,
        key: u64,
        parent_fp: u64,
        title: u64,
    ) {
        let p = path(r);
        let Some(cut) = p.iter().rposition(|&b| b == b'/') else {
            return;
        };
        let parent = &p[..=cut];
        let host = &self.host;
        let e = self.paths.add(key, || PathCount {
            host: String::from_utf8_lossy(host).into_owned(),
            parent: String::from_utf8_lossy(parent).into_owned(),
            path: p.to_vec(),
            parent_fp,
            ips: Vec::new(),
            more: false,
            all_no_cache: true,
            host_cut: false,
        });
        // Just taken: counted once past its error.
        let new = e.count == e.error + 1;
        let v = &mut e.value;
        if !v.ips.contains(&r.ip) {
            if v.ips.len() < 8 {
                v.ips.push(r.ip);
            } else {
                v.more = true;
            }
        }
        v.all_no_cache &= no_cache(r);
        v.host_cut |= host_cut;
        self.parents.add(parent_fp, || ());
        if title != 0 {
            self.titles.add(title, || 0).value += u64::from(new);
        }
    }

    fn count_endpoint(&mut self, r: &Request<'_>, o: Origin<'_>, legit: bool, parent: u64) {
        let s = Seen {
            path: path(r),
            ua: header(r, "user-agent").unwrap_or_default(),
            ip: r.ip,
            legit,
            ua_cut: o.cut("user-agent"),
            host_cut: o.cut("host"),
        };
        let host_fp = self.fp.of(&[&self.host]);
        let k_host = self.ip_fp(host_fp, s.ip);
        let k_all = self.ip_fp(0, s.ip);
        self.template.clear();
        template_into(s.path, &mut self.template);
        let plain = self.scope_keys(&s, Scope::Plain);
        // The same request under its parent's titles, collapsed: which of
        // the two is analysed is told once the parent's children are
        // counted ([`Counts::titled`]).
        let last = self.template.iter().rposition(|&b| b == b'/');
        let collapsed = last.filter(|_| parent != 0).map(|cut| {
            self.collapsed.clear();
            self.collapsed.extend_from_slice(&self.template[..=cut]);
            self.collapsed.push(b'*');
            self.scope_keys(&s, Scope::Collapsed)
        });
        // And under its path template and query shape, when the query has
        // one a rule can test.
        let query = r.target.get(s.path.len() + 1..).unwrap_or_default();
        let shaped = crate::keys::shape_into(query, &mut self.shape)
            .then(|| self.scope_keys(&s, Scope::Shape));
        // Every table this request is counted in is asked for at once,
        // index then entry, so that their cache misses overlap.
        let scopes = [Some(plain), collapsed, shaped];
        for stage in [Stage::Index, Stage::Entry] {
            self.host_clients.prefetch(k_host, stage);
            self.all_clients.prefetch(k_all, stage);
            for k in scopes.iter().flatten() {
                self.endpoints.prefetch(k.ep, stage);
                self.clients.prefetch(k.client, stage);
                self.networks.prefetch(k.net, stage);
                self.agents.prefetch(k.agent, stage);
            }
        }
        let tag = u64::from(s.legit);
        self.host_clients
            .add(k_host, ClientCount::maker(host_fp, s.ip))
            .value
            .legit += tag;
        self.all_clients
            .add(k_all, ClientCount::maker(0, s.ip))
            .value
            .legit += tag;
        for k in scopes.iter().flatten() {
            self.count_scope(&s, host_fp, parent, k, plain.ep, k_all);
        }
    }

    /// The keys of `s` on its endpoint of `scope` (the template and
    /// shape in the buffers).
    fn scope_keys(&self, s: &Seen<'_>, scope: Scope) -> ScopeKeys {
        let template = scope.template(&self.template, &self.collapsed);
        let ep = match scope {
            Scope::Shape => shape_fp(&self.fp, &self.host, template, &self.shape),
            _ => endpoint_fp(&self.fp, &self.host, template, scope == Scope::Collapsed),
        };
        let agent = {
            let mut h = self.fp.hasher();
            h.write_u64(ep);
            h.write(crate::keys::family_prefix(s.ua));
            h.finish()
        };
        ScopeKeys {
            scope,
            ep,
            client: self.ip_fp(ep, s.ip),
            net: self.ip_fp(ep, network(s.ip)),
            agent,
        }
    }

    /// The fingerprint of `ip` in `scope`.
    fn ip_fp(&self, scope: u64, ip: IpAddr) -> u64 {
        let mut h = self.fp.hasher();
        h.write_u64(scope);
        match ip {
            IpAddr::V4(a) => h.write(&a.octets()),
            IpAddr::V6(a) => h.write(&a.octets()),
        }
        h.finish()
    }

    /// Counts `s` on the endpoint `k` names (`base`: the endpoint of its
    /// path template alone).
    fn count_scope(
        &mut self,
        s: &Seen<'_>,
        host_fp: u64,
        parent: u64,
        k: &ScopeKeys,
        base: u64,
        k_all: u64,
    ) {
        let ep = k.ep;
        let host = &self.host;
        let template = k.scope.template(&self.template, &self.collapsed);
        let shape = &self.shape;
        let e = self.endpoints.add(ep, || EndpointCount {
            host: String::from_utf8_lossy(host).into_owned(),
            host_fp,
            template: String::from_utf8_lossy(template).into_owned(),
            parent,
            collapsed: k.scope == Scope::Collapsed,
            shape: match k.scope {
                Scope::Shape => String::from_utf8_lossy(shape).into_owned(),
                _ => String::new(),
            },
            base: if k.scope == Scope::Shape { base } else { 0 },
            host_cut: false,
        });
        e.value.host_cut |= s.host_cut;
        let tag = u64::from(s.legit);
        let net = network(s.ip);
        self.clients
            .add(k.client, ClientCount::maker(ep, s.ip))
            .value
            .legit += tag;
        let n = &mut self.networks.add(k.net, ClientCount::maker(ep, net)).value;
        n.legit += tag;
        n.ips.get_or_insert_with(Default::default).add(s.ip);
        let family = crate::keys::family_prefix(s.ua);
        let a = &mut self
            .agents
            .add(k.agent, || AgentCount {
                scope: ep,
                ua: family.to_vec(),
                first: s.ua.to_vec(),
                versions: false,
                legit: 0,
                ips: (!crate::keys::ua_family(s.ua).starts_with("browser:"))
                    .then(ByFingerprint::default),
                wide: false,
                cut: false,
            })
            .value;
        a.cut |= s.ua_cut;
        a.legit += tag;
        a.versions |= a.first != s.ua;
        if let Some(ips) = &mut a.ips {
            let len = ips.len();
            match ips.get_mut(&k_all) {
                Some(c) => c.1 += 1,
                None if len < self.bounds.ips_per_agent && self.agent_ips < self.bounds.clients => {
                    ips.insert(k_all, (s.ip, 1));
                    self.agent_ips += 1;
                }
                None => a.wide = true,
            }
        }
    }
}
