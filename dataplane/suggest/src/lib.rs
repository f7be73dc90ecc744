//! `rctl suggest`: from all the traffic to proposed rules.
//!
//! Every request of the input is decided by the existing ruleset first:
//! what it allows is never limited, what it already limits is not
//! suggested again. The rest is counted per endpoint (host and path
//! template) by the keys that matter ([`find`]): each address, each /24
//! or /48, a User-Agent sent from many addresses (a swarm that stays
//! under any per-address limit), and one path re-requested among its
//! siblings (a loop keyed by what is requested). An offender is heavy
//! against the normal clients of the same endpoint: those whose requests
//! look like a person's browser (a browser's User-Agent and an
//! Accept-Language), and the limit is derived from their percentiles.
//!
//! Each finding becomes a rule of the language ([`write`](mod@write)), `shadow`
//! first, with a test block built from real requests, ordered after every
//! existing rule so that the existing exemptions keep winning. Its effect
//! and collateral are measured by replaying the same traffic through the
//! merged ruleset ([`effect`]).

pub mod bounded;
pub mod count;
pub mod effect;
pub mod find;
pub mod keys;
pub mod obs;
pub mod write;

#[cfg(test)]
mod end_to_end;

pub use count::{Bounds, Counts};
pub use effect::{Effect, Measure, Measured};
pub use find::{Finding, Key, Members, Options};
pub use obs::Obs;

use rctl_compiler::ir::cidr::PrefixSet;
use rctl_compiler::ir::Ruleset;
use rctl_dataplane::partial::{Blind, Judged, Known, PartialTrace};
use rctl_dataplane::{Engine, EngineConfig, EngineError, Request, Scratch, Verdict};
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

/// The input of a request that came from a capture: every field known.
pub const CAPTURE: u32 = u32::MAX;

/// Where a request came from: its input (an index; [`CAPTURE`] for a
/// capture's), the fields that input carries, and the captured headers
/// of this request whose values may have been cut at their capture's
/// length (HAProxy's `len`): such a value is a prefix of what was sent.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The input.
    pub input: u32,
    /// The fields it carries.
    pub known: &'a Known,
    /// The headers (names as the input names them) that may be cut.
    pub cut: &'a [&'a [u8]],
}

impl Origin<'_> {
    /// Whether the header `name` (any case) may have been cut.
    pub fn cut(&self, name: &str) -> bool {
        self.cut
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
    }
}

/// An engine judging requests with the fields their input carries: a
/// rule reading a field the input lacks is evaluated three-valued, as
/// `rctl dry-run` evaluates it, never guessed.
pub struct Judge {
    engine: Engine,
    /// Per input index, what the engine cannot evaluate on it.
    blinds: Vec<Option<Blind>>,
    scratch: Scratch,
    trace: PartialTrace,
}

impl Judge {
    /// A judge of `ruleset`.
    pub fn new(ruleset: Ruleset) -> Result<Judge, EngineError> {
        let engine = Engine::new(ruleset, &EngineConfig::default())?;
        let scratch = engine.scratch();
        Ok(Judge {
            engine,
            blinds: Vec::new(),
            scratch,
            trace: PartialTrace::default(),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// How `r`, from `o`, is judged: a header it may have cut is judged
    /// only as far as its start tells.
    pub fn judge(&mut self, o: Origin<'_>, r: &Request<'_>) -> Judged {
        let (input, known) = (o.input, o.known);
        if input == CAPTURE {
            self.trace.clear();
            return Judged::Decided(self.engine.decide_request_with(r, &mut self.scratch, None));
        }
        let i = input as usize;
        if self.blinds.len() <= i {
            self.blinds.resize_with(i + 1, || None);
        }
        let engine = &self.engine;
        let blind = self.blinds[i].get_or_insert_with(|| engine.blind(known));
        engine.judge_request_cut(r, blind, o.cut, &mut self.scratch, &mut self.trace)
    }

    /// The rules the last request judged left unknown (see
    /// [`PartialTrace::unknown`]): a shadow rule among them may or may
    /// not have logged it.
    pub fn unknown(&self) -> &[usize] {
        &self.trace.unknown
    }

    /// What the ruleset does to `r`, as the suggester counts it.
    pub fn existing(&mut self, o: Origin<'_>, r: &Request<'_>) -> Existing {
        match self.judge(o, r) {
            Judged::Decided(d) => match d.verdict {
                Verdict::Pass => Existing::Pass,
                Verdict::Allow { .. } => Existing::Allowed,
                _ => Existing::Limited,
            },
            Judged::Stopped(_) => Existing::Limited,
            Judged::Unknown { .. } => Existing::Unknown,
        }
    }
}

/// Traffic that can be read more than once: each pass hands every
/// request, in order, with where it came from.
pub trait Traffic {
    /// Reads the traffic once; an error stops the pass.
    fn each(&mut self, f: &mut dyn FnMut(Origin<'_>, &Request<'_>)) -> Result<(), String>;
}

/// Requests held in memory, with the fields each input carries
/// (`inputs[i]` for input `i`; past the end, every field).
pub struct Recorded<'a> {
    /// The requests, in order.
    pub traffic: &'a [Obs],
    /// The fields per input.
    pub inputs: &'a [Known],
}

impl Traffic for Recorded<'_> {
    fn each(&mut self, f: &mut dyn FnMut(Origin<'_>, &Request<'_>)) -> Result<(), String> {
        let all = Known::all();
        for o in self.traffic {
            let known = self.inputs.get(o.input as usize).unwrap_or(&all);
            o.with_request(|r, cut| {
                f(
                    Origin {
                        input: o.input,
                        known,
                        cut,
                    },
                    r,
                )
            });
        }
        Ok(())
    }
}

/// Why a suggestion could not be made.
#[derive(Debug)]
pub enum Error {
    /// A ruleset the engine refused.
    Engine(EngineError),
    /// Reading the traffic failed.
    Input(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Engine(e) => write!(f, "{e}"),
            Error::Input(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        Error::Engine(e)
    }
}

/// Counts `traffic` after `existing` decided it (`trusted`: the
/// addresses never to limit): one pass, or two when the first finds a
/// loop (whose requests the second leaves out of the endpoints).
pub fn count(
    traffic: &mut dyn Traffic,
    existing: Option<&Ruleset>,
    trusted: &dyn Fn(IpAddr) -> bool,
    o: &Options,
    bounds: Bounds,
) -> Result<Counts, Error> {
    let mut judge = existing.cloned().map(Judge::new).transpose()?;
    let mut c = Counts::new(bounds);
    let seen = |judge: &mut Option<Judge>, o: Origin<'_>, r: &Request<'_>| {
        judge.as_mut().map_or(Existing::Pass, |j| j.existing(o, r))
    };
    traffic
        .each(&mut |o, r| {
            let e = seen(&mut judge, o, r);
            c.first(r, o, e, trusted(r.ip));
        })
        .map_err(Error::Input)?;
    if c.find_loops(o) {
        // A fresh engine: the existing throttles start again from the
        // traffic's beginning, as in the first pass.
        judge = existing.cloned().map(Judge::new).transpose()?;
        traffic
            .each(&mut |o, r| {
                let e = seen(&mut judge, o, r);
                c.second(r, o, e, trusted(r.ip));
            })
            .map_err(Error::Input)?;
    }
    Ok(c)
}

/// Measures `findings` (called `names`) on `traffic` through `merged`,
/// the existing rules with the suggestions, in one more pass.
pub fn measure(
    traffic: &mut dyn Traffic,
    merged: Ruleset,
    findings: Vec<Finding>,
    names: Vec<String>,
    counts: &Counts,
    keep: Vec<String>,
    trusted: &dyn Fn(IpAddr) -> bool,
) -> Result<Vec<Measured>, Error> {
    let mut m = Measure::new(merged, findings, names, counts, keep)?;
    traffic
        .each(&mut |o, r| m.request(o, r, trusted(r.ip)))
        .map_err(Error::Input)?;
    Ok(m.finish())
}

/// Whether the requests of an input carrying `known` can be told to
/// look legitimate (it logs the User-Agent and the Accept-Language): on
/// one that cannot, collateral is not measured, and is said so.
pub fn collateral_measurable(known: &Known) -> bool {
    known.has_header("user-agent") && known.has_header("accept-language")
}

/// The headers a request of the traffic is kept with (lower-case): those
/// `ruleset` reads, in a condition or a throttle's key, and those the
/// suggester and its rules read. Decisions and tests need no other, and
/// a browser's request carries many: the rest are not held.
pub fn headers_read(ruleset: Option<&Ruleset>) -> Vec<String> {
    use rctl_compiler::ir::{Action, Atom, Key as IrKey, StrField};
    let mut out: Vec<String> = ["user-agent", "accept-language", "cache-control", "pragma"]
        .map(String::from)
        .to_vec();
    if let Some(rs) = ruleset {
        for a in &rs.atoms {
            if let Atom::Str {
                field: StrField::Header(h),
                ..
            }
            | Atom::Present(StrField::Header(h)) = a
            {
                out.push(h.to_ascii_lowercase());
            }
        }
        for r in &rs.rules {
            if let Action::Throttle(t) = &r.action {
                for k in &t.keys {
                    if let IrKey::Header(h) = k {
                        out.push(h.to_ascii_lowercase());
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The priority after every rule of `ruleset`: where suggestions go, so
/// that no existing `allow` is pre-empted.
pub fn first_priority(ruleset: Option<&Ruleset>) -> i64 {
    let last = ruleset
        .and_then(|rs| rs.rules.iter().map(|r| i64::from(r.priority)).max())
        .unwrap_or(0);
    (last / 100 + 1) * 100 + 900
}

/// The prefixes of the ipblocks `names` (`scope/name`, or
/// `ipblock@scope/name`) of `ruleset`; an unknown name is the error.
pub fn trusted_blocks(
    ruleset: Option<&Ruleset>,
    names: &[String],
) -> Result<Vec<PrefixSet>, String> {
    let mut out = Vec::new();
    for n in names {
        let n = n.strip_prefix("ipblock@").unwrap_or(n);
        let set = ruleset
            .and_then(|rs| rs.ipsets.iter().find(|s| s.name == n))
            .ok_or_else(|| n.to_string())?;
        out.push(set.prefixes.clone());
    }
    Ok(out)
}

/// Whether `ip` is in any of `sets`.
pub fn in_sets(sets: &[PrefixSet], ip: IpAddr) -> bool {
    sets.iter().any(|s| match ip {
        IpAddr::V4(a) => {
            let a = u32::from(a);
            s.v4.iter().any(|&(net, len)| {
                let mask = if len == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(len))
                };
                a & mask == net & mask
            })
        }
        IpAddr::V6(a) => {
            let a = u128::from(a);
            s.v6.iter().any(|&(net, len)| {
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(len))
                };
                a & mask == net & mask
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_keep_the_headers_the_rules_and_the_suggester_read() {
        let c = rctl_compiler::compile_str(
            "t.rctl",
            r#"
rule no_referer {
  when not header("Referer") starts_with "https://"
  throttle 10 requests per 1m by header("X-Api-Key")
}
"#,
            &Default::default(),
        );
        let rs = c.ruleset.expect("compiles");
        assert_eq!(
            headers_read(Some(&rs)),
            [
                "accept-language",
                "cache-control",
                "pragma",
                "referer",
                "user-agent",
                "x-api-key"
            ]
        );
        assert_eq!(headers_read(None).len(), 4);
    }
}
