//! Header values an input logged only up to a length (HAProxy's captures,
//! `capture request header User-Agent len 64`): a value of that length
//! may be the start of a longer one. The verdict is still never guessed.
//! Each atom on such a value is refined three-valued: it is known when
//! every value that starts with the logged one gives it the same truth
//! (`header("user-agent") starts_with "sqlmap"` on a cut `sqlmap/1.7 (ht`
//! holds whatever was cut; `contains "bot"` on a cut `Mozilla/5.0 (X11`
//! may or may not), and unknown otherwise. A throttle keyed by a cut
//! header cannot be run on that request.
//!
//! The refinements are exact where that is cheap, and never wrong: an
//! atom left unknown may in fact be decided by every extension (a
//! `contains` whose needle cannot fit), never the other way round
//! (`cut_tests` checks it against the reference evaluator on the whole
//! values).

use crate::matcher::AtomSet;
use crate::request::Fields;
use rctl_compiler::ir::{Action, Atom, Key, Ruleset, StrField, StrOp};
use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::nfa::thompson;
use regex_automata::{Anchored, Input};
use regex_syntax::hir::Look;

/// How one atom on a cut value is known.
#[derive(Debug, Clone)]
enum Refine {
    /// The header is there: presence holds whatever was cut.
    Present,
    /// Equal to one of these: unknown while one of them starts with the
    /// cut value (it may be the whole value).
    Equal(Vec<Vec<u8>>),
    /// Starts with this: known if it held; else unknown while this starts
    /// with the cut value.
    Prefix(Vec<u8>),
    /// Ends with: unknown (the real end was cut).
    Suffix,
    /// Contains: known if it held; else unknown.
    Contains,
    /// A regex search: known if it held and the pattern has no
    /// look-around (a match inside the value is a match inside every
    /// longer one); known false if its unanchored automaton is dead after
    /// the cut value (no continuation can match: `^curl` on `Mozilla…`);
    /// else unknown. `None`: the pattern is not anchored at the start (a
    /// match may begin past the cut), or no automaton within the size
    /// limit.
    Regex {
        /// The pattern asserts nothing about what follows a match.
        plain: bool,
        /// Its anchored forward automaton.
        dfa: Option<Box<dense::DFA<Vec<u32>>>>,
    },
}

/// Largest automaton built for one regex on a cut header.
const DFA_LIMIT: usize = 1 << 20;

impl Refine {
    fn of(op: &StrOp) -> Refine {
        match op {
            StrOp::Eq(x) => Refine::Equal(vec![x.as_bytes().to_vec()]),
            StrOp::In(xs) => Refine::Equal(xs.iter().map(|x| x.as_bytes().to_vec()).collect()),
            StrOp::Prefix(x) => Refine::Prefix(x.as_bytes().to_vec()),
            StrOp::Suffix(_) => Refine::Suffix,
            StrOp::Contains(_) => Refine::Contains,
            StrOp::Regex { pattern, ci } => {
                let hir = regex_syntax::ParserBuilder::new()
                    .utf8(false)
                    .case_insensitive(*ci)
                    .build()
                    .parse(pattern);
                let Ok(hir) = hir else {
                    return Refine::Regex {
                        plain: false,
                        dfa: None,
                    };
                };
                let plain = hir.properties().look_set().is_empty();
                // Unanchored, a search may start anywhere further on: no
                // value rules it out. Anchored at the start, it may.
                let anchored = hir.properties().look_set_prefix().contains(Look::Start);
                let dfa = anchored
                    .then(|| {
                        dense::Builder::new()
                            .syntax(rctl_compiler::scan::syntax(*ci))
                            .thompson(thompson::Config::new().utf8(false))
                            .configure(
                                dense::Config::new()
                                    .start_kind(StartKind::Anchored)
                                    .dfa_size_limit(Some(DFA_LIMIT))
                                    .determinize_size_limit(Some(4 * DFA_LIMIT)),
                            )
                            .build(pattern)
                            .ok()
                    })
                    .flatten()
                    .map(Box::new);
                Refine::Regex { plain, dfa }
            }
        }
    }

    /// Whether the atom is unknown on `v`, a value that may have been cut,
    /// given whether it `held` on `v` as written.
    fn unknown(&self, v: &[u8], held: bool) -> bool {
        match self {
            Refine::Present => false,
            Refine::Equal(xs) => xs.iter().any(|x| x.starts_with(v)),
            Refine::Prefix(x) => !held && x.starts_with(v),
            Refine::Suffix => true,
            Refine::Contains => !held,
            Refine::Regex { plain, dfa } => {
                if held {
                    return !plain;
                }
                let Some(dfa) = dfa else { return true };
                !dead_after(dfa, v)
            }
        }
    }
}

/// Whether the automaton can match no continuation of `v`.
fn dead_after(dfa: &dense::DFA<Vec<u32>>, v: &[u8]) -> bool {
    let Ok(mut sid) = dfa.start_state_forward(&Input::new(v).anchored(Anchored::Yes)) else {
        return false;
    };
    for &b in v {
        sid = dfa.next_state(sid, b);
        if dfa.is_dead_state(sid) {
            return true;
        }
    }
    false
}

/// One header that may be cut: its atoms, the rules that read it, the
/// throttles keyed by it. A cut Host header leaves the `host` field's
/// atoms to be refined as well, on the normalised host.
#[derive(Debug, Clone)]
pub(crate) struct CutHeader {
    /// Lower-case name.
    name: String,
    /// Each atom reading it, how it is refined, and whether it reads the
    /// `host` field rather than the header.
    atoms: Vec<(u32, Refine, bool)>,
    /// Request rules whose condition reads one of its atoms.
    pub(crate) rules: Vec<u32>,
    /// Request throttles keyed by it.
    keyed: Vec<u32>,
}

/// The headers of an input that may be cut, compiled against a ruleset;
/// only those some rule reads.
pub(crate) fn compile(rs: &Ruleset, capped: &[String]) -> Vec<CutHeader> {
    let mut out = Vec::new();
    for name in capped {
        let name = name.to_ascii_lowercase();
        let host = name == "host";
        let reads = |f: &StrField| match f {
            StrField::Header(h) => h.eq_ignore_ascii_case(&name),
            StrField::Host => host,
            _ => false,
        };
        let mut atoms = Vec::new();
        for (i, a) in rs.atoms.iter().enumerate() {
            match a {
                Atom::Present(f) if reads(f) => {
                    atoms.push((i as u32, Refine::Present, *f == StrField::Host))
                }
                Atom::Str { field, op } if reads(field) => {
                    atoms.push((i as u32, Refine::of(op), *field == StrField::Host))
                }
                _ => {}
            }
        }
        let mut rules = Vec::new();
        let mut keyed = Vec::new();
        for (r, rule) in rs.rules.iter().enumerate() {
            let mut hit = false;
            rule.cond.visit_atoms(&mut |a| {
                hit |= atoms.iter().any(|&(x, _, _)| x == a);
            });
            if hit {
                rules.push(r as u32);
            }
            if let Action::Throttle(t) = &rule.action {
                let by = |k: &Key| match k {
                    Key::Header(h) => h.eq_ignore_ascii_case(&name),
                    Key::Host | Key::Global => host,
                    _ => false,
                };
                if t.keys.iter().any(by) {
                    keyed.push(r as u32);
                }
            }
        }
        if !atoms.is_empty() || !keyed.is_empty() {
            out.push(CutHeader {
                name,
                atoms,
                rules,
                keyed,
            });
        }
    }
    out
}

/// What cut values change for one request: which atoms are unknown
/// (`base` with the refined ones set), which rules must be evaluated,
/// which throttles cannot be run.
pub(crate) struct Refined {
    pub(crate) unknown: Vec<bool>,
    pub(crate) rules: Vec<u32>,
    pub(crate) keyed: Vec<u32>,
}

/// Refines `base` (the input's unknown atoms) for a request whose headers
/// named in `cut` may be cut; `f` has its values as the matcher read
/// them, `atoms` what held on them. `None` if no rule reads a cut header.
pub(crate) fn refine(
    headers: &[CutHeader],
    cut: &[&[u8]],
    f: &Fields<'_>,
    atoms: &AtomSet,
    base: &[bool],
) -> Option<Refined> {
    let mut out: Option<Refined> = None;
    for h in headers {
        if !cut
            .iter()
            .any(|c| c.eq_ignore_ascii_case(h.name.as_bytes()))
        {
            continue;
        }
        let Some(v) = f.header(h.name.as_bytes()) else {
            continue;
        };
        let r = out.get_or_insert_with(|| Refined {
            unknown: base.to_vec(),
            rules: Vec::new(),
            keyed: Vec::new(),
        });
        for (a, how, host) in &h.atoms {
            let v: &[u8] = if *host { &f.host } else { v };
            if how.unknown(v, atoms.contains(*a)) {
                if let Some(u) = r.unknown.get_mut(*a as usize) {
                    *u = true;
                }
            }
        }
        r.rules.extend_from_slice(&h.rules);
        r.keyed.extend_from_slice(&h.keyed);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regex(p: &str) -> Refine {
        Refine::of(&StrOp::Regex {
            pattern: p.into(),
            ci: false,
        })
    }

    #[test]
    fn each_test_is_known_only_when_every_continuation_agrees() {
        let eq = Refine::of(&StrOp::Eq("curl/8.0".into()));
        assert!(eq.unknown(b"curl/8", false));
        assert!(!eq.unknown(b"wget/1", false));
        let pre = Refine::of(&StrOp::Prefix("sqlmap".into()));
        assert!(!pre.unknown(b"sqlmap/1.7 (h", true));
        assert!(pre.unknown(b"sql", false));
        assert!(!pre.unknown(b"Mozilla/5.0", false));
        assert!(Refine::of(&StrOp::Suffix("bot".into())).unknown(b"x", false));
        let has = Refine::of(&StrOp::Contains("bot".into()));
        assert!(!has.unknown(b"Googlebot/2.1 (", true));
        assert!(has.unknown(b"Mozilla/5.0 (", false));
        assert!(!Refine::Present.unknown(b"a", true));
    }

    #[test]
    fn a_regex_is_decided_by_a_match_or_a_dead_automaton() {
        // A match inside the value is one inside any longer value.
        assert!(!regex("python-requests/[0-9]").unknown(b"python-requests/2.3", true));
        // A look-around may fail once the value goes on.
        assert!(regex(r"bot\b").unknown(b"Googlebot", true));
        assert!(regex(r"bot$").unknown(b"Googlebot", true));
        // Anchored at the start, and already off: no continuation matches.
        assert!(!regex("^curl").unknown(b"Mozilla/5.0 (X11", false));
        assert!(!regex(r"\Acurl").unknown(b"Mozilla/5.0 (X11", false));
        // Unanchored: the rest may hold it.
        assert!(regex("curl").unknown(b"Mozilla/5.0 (X11", false));
        assert!(regex("^Mozilla.*Firefox").unknown(b"Mozilla/5.0 (X11", false));
    }
}
