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
//! Each finding becomes a rule of the language ([`write`]), `shadow`
//! first, with a test block built from real requests, ordered after every
//! existing rule so that the existing exemptions keep winning. Its effect
//! and collateral are measured by replaying the same traffic through the
//! merged ruleset ([`effect`]).

pub mod effect;
pub mod find;
pub mod keys;
pub mod obs;
pub mod write;

pub use effect::{measure, Effect};
pub use find::{find, Existing, Finding, Key, Options};
pub use obs::Obs;

use rctl_compiler::ir::cidr::PrefixSet;
use rctl_compiler::ir::Ruleset;
use rctl_dataplane::partial::{Blind, Judged, Known, PartialTrace};
use rctl_dataplane::{Engine, EngineConfig, EngineError, Scratch, Verdict};
use std::net::IpAddr;

/// The fields each input carries, indexed by [`Obs::input`]: a log
/// carries what its format writes; an index past the end (a capture)
/// carries every field.
pub type Inputs = [Known];

/// Per input of `inputs`, what `engine` cannot evaluate on it, and one
/// for the inputs past the end (every field known).
pub(crate) fn blinds(engine: &Engine, inputs: &Inputs) -> Vec<Blind> {
    inputs
        .iter()
        .chain(std::iter::once(&Known::all()))
        .map(|k| engine.blind(k))
        .collect()
}

/// How `engine` judges `r`, with the fields its input carries: a rule
/// reading a field the input lacks is evaluated three-valued, as
/// `rctl dry-run` evaluates it, never guessed.
pub(crate) fn judge(
    engine: &Engine,
    blinds: &[Blind],
    r: &Obs,
    scratch: &mut Scratch,
    trace: &mut PartialTrace,
) -> Judged {
    let i = (r.input as usize).min(blinds.len().saturating_sub(1));
    match blinds.get(i) {
        Some(b) => r.with_request(|q| engine.judge_request(q, b, scratch, trace)),
        None => Judged::Decided(r.with_request(|q| engine.decide_request_with(q, scratch, None))),
    }
}

/// What `ruleset` does to each request of `traffic` (in time order);
/// `inputs`: the fields each input carries.
pub fn existing(
    ruleset: Option<Ruleset>,
    traffic: &[Obs],
    inputs: &Inputs,
) -> Result<Vec<Existing>, EngineError> {
    let Some(rs) = ruleset else {
        return Ok(vec![Existing::Pass; traffic.len()]);
    };
    let engine = Engine::new(rs, &EngineConfig::default())?;
    let blinds = blinds(&engine, inputs);
    let mut scratch = engine.scratch();
    let mut trace = PartialTrace::default();
    Ok(traffic
        .iter()
        .map(
            |r| match judge(&engine, &blinds, r, &mut scratch, &mut trace) {
                Judged::Decided(d) => match d.verdict {
                    Verdict::Pass => Existing::Pass,
                    Verdict::Allow { .. } => Existing::Allowed,
                    _ => Existing::Limited,
                },
                Judged::Stopped(_) => Existing::Limited,
                Judged::Unknown { .. } => Existing::Unknown,
            },
        )
        .collect())
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
