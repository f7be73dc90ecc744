//! Who a ruleset would stop, for the report's `affected`: requests and
//! distinct clients per kind of enforcement, and which of them look
//! legitimate. Bounded: each client set counts at most
//! [`DISTINCT_MAX`] addresses exactly.

use super::report::{Affect, Affected, DISTINCT_MAX};
use crate::matcher::FastHash;
use rctl_compiler::cidr::PrefixSet;
use rctl_compiler::ir::{Action, Atom, Ruleset};
use std::collections::HashSet;
use std::net::IpAddr;

/// Distinct 64-bit fingerprints, exactly up to [`DISTINCT_MAX`]; past it,
/// new ones are not counted and the count is a lower bound.
#[derive(Debug, Clone)]
pub struct Distinct {
    seen: HashSet<u64, FastHash>,
    full: bool,
}

impl Default for Distinct {
    fn default() -> Self {
        Distinct {
            seen: HashSet::with_hasher(FastHash::random()),
            full: false,
        }
    }
}

impl Distinct {
    /// Counts `fp`.
    pub fn add(&mut self, fp: u64) {
        if self.seen.len() < DISTINCT_MAX {
            self.seen.insert(fp);
        } else if !self.seen.contains(&fp) {
            self.full = true;
        }
    }

    /// Distinct values counted.
    pub fn len(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Whether none was counted.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Whether [`Distinct::len`] is exact.
    pub fn exact(&self) -> bool {
        !self.full
    }

    /// Adds `other`'s values.
    pub fn merge(&mut self, other: &Distinct) {
        self.full |= other.full;
        for &fp in &other.seen {
            self.add(fp);
        }
    }
}

/// Whether a request looks like a person's: a browser-like User-Agent
/// with an Accept-Language header, or a client in an `allow` rule's
/// address blocks.
#[derive(Debug, Clone, Default)]
pub(super) struct Legit {
    /// The address blocks `allow` rules test the client against.
    blocks: Vec<PrefixSet>,
}

/// Words in a User-Agent that say it is not a browser driven by a person.
const NOT_A_PERSON: &[&str] = &[
    "bot", "crawl", "spider", "slurp", "headless", "python", "curl", "wget", "java/", "go-http",
];

/// Whether a User-Agent reads like a browser's: `Mozilla/` with an engine
/// browsers send (Gecko, AppleWebKit, Trident), and no word of
/// [`NOT_A_PERSON`] (case-insensitive).
pub fn browser_like(ua: &[u8]) -> bool {
    let ua = String::from_utf8_lossy(ua).to_ascii_lowercase();
    ua.starts_with("mozilla/")
        && ["gecko", "applewebkit", "trident"]
            .iter()
            .any(|e| ua.contains(e))
        && !NOT_A_PERSON.iter().any(|w| ua.contains(w))
}

impl Legit {
    /// The test for `rs`: the ip sets its `allow` rules' conditions read.
    pub fn new(rs: &Ruleset) -> Self {
        let mut sets = Vec::new();
        for r in rs.rules.iter().filter(|r| r.action == Action::Allow) {
            r.cond.visit_atoms(&mut |a| {
                if let Some(Atom::Ip(s)) = rs.atoms.get(a as usize) {
                    if !sets.contains(s) {
                        sets.push(*s);
                    }
                }
            });
        }
        Legit {
            blocks: sets
                .into_iter()
                .filter_map(|s| rs.ipsets.get(s as usize).map(|s| s.prefixes.clone()))
                .collect(),
        }
    }

    /// Whether the request looks legitimate.
    pub fn is(&self, ip: IpAddr, ua: &[u8], accept_language: bool) -> bool {
        (accept_language && browser_like(ua))
            || self.blocks.iter().any(|b| match ip {
                IpAddr::V4(a) => b.contains_v4(u32::from(a)),
                IpAddr::V6(a) => b.contains_v6(u128::from(a)),
            })
    }
}

/// One kind of enforcement's counts while a replay runs.
#[derive(Debug, Clone, Default)]
struct Side {
    requests: u64,
    clients: Distinct,
    legit_requests: u64,
    legit_clients: Distinct,
}

impl Side {
    fn add(&mut self, fp: u64, legit: bool) {
        self.requests += 1;
        self.clients.add(fp);
        if legit {
            self.legit_requests += 1;
            self.legit_clients.add(fp);
        }
    }

    fn merge(&mut self, o: &Side) {
        self.requests += o.requests;
        self.legit_requests += o.legit_requests;
        self.clients.merge(&o.clients);
        self.legit_clients.merge(&o.legit_clients);
    }

    fn exact(&self) -> bool {
        self.clients.exact() && self.legit_clients.exact()
    }

    fn report(&self) -> Affect {
        Affect {
            requests: self.requests,
            clients: self.clients.len(),
            legit_requests: self.legit_requests,
            legit_clients: self.legit_clients.len(),
        }
    }
}

/// Requests stopped, by kind, and everything stopped together.
#[derive(Debug, Clone, Default)]
pub(super) struct Stops {
    legit: Legit,
    hasher: FastHash,
    deny: Side,
    throttle: Side,
    drop: Side,
    total: Side,
}

impl Stops {
    /// Counts for `rs`.
    pub fn new(rs: &Ruleset) -> Self {
        Stops {
            legit: Legit::new(rs),
            hasher: FastHash::random(),
            ..Stops::default()
        }
    }

    /// Counts one request stopped by a verdict of kind `kind` (`deny`,
    /// `throttle`, `drop`; anything else is not a stop).
    pub fn add(&mut self, kind: &str, ip: IpAddr, ua: &[u8], accept_language: bool) {
        use std::hash::BuildHasher as _;
        let side = match kind {
            "deny" => &mut self.deny,
            "throttle" => &mut self.throttle,
            "drop" => &mut self.drop,
            _ => return,
        };
        let fp = self.hasher.hash_one(ip);
        let legit = self.legit.is(ip, ua, accept_language);
        side.add(fp, legit);
        self.total.add(fp, legit);
    }

    /// Adds the other side's stops (made by [`Stops::sharing`]).
    pub fn merge(&mut self, o: &Stops) {
        self.deny.merge(&o.deny);
        self.throttle.merge(&o.throttle);
        self.drop.merge(&o.drop);
        self.total.merge(&o.total);
    }

    /// Counts for the same ruleset whose client fingerprints agree with
    /// these, so that the two can be merged.
    pub fn sharing(&self) -> Self {
        Stops {
            legit: self.legit.clone(),
            hasher: self.hasher,
            ..Stops::default()
        }
    }

    /// The report's figures.
    pub fn report(&self) -> Affected {
        Affected {
            deny: self.deny.report(),
            throttle: self.throttle.report(),
            drop: self.drop.report(),
            total: self.total.report(),
            exact: [&self.deny, &self.throttle, &self.drop, &self.total]
                .iter()
                .all(|s| s.exact()),
            legit_unmeasured: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browsers_are_told_from_tools() {
        let firefox = b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
        let chrome = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36";
        assert!(browser_like(firefox) && browser_like(chrome));
        for ua in [
            &b"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"[..],
            b"Mozilla/5.0 (X11) AppleWebKit/537.36 HeadlessChrome/126.0",
            b"curl/8.5.0",
            b"python-requests/2.31",
            b"Mozilla/4.0",
            b"",
        ] {
            assert!(!browser_like(ua), "{}", String::from_utf8_lossy(ua));
        }
    }

    #[test]
    fn client_sets_count_exactly_then_say_at_least() {
        let mut d = Distinct::default();
        for i in 0..(DISTINCT_MAX as u64 + 10) {
            d.add(i % (DISTINCT_MAX as u64));
        }
        assert_eq!((d.len(), d.exact()), (DISTINCT_MAX as u64, true));
        d.add(u64::MAX);
        assert_eq!((d.len(), d.exact()), (DISTINCT_MAX as u64, false));
    }
}
