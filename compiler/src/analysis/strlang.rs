//! Exact answers about one string field: is there a value that every
//! positive test accepts and no negated test does, and which one?
//!
//! Each test is a language of byte strings. `==` and `in` are finite;
//! `starts_with`, `ends_with`, `contains` and regexes become the same
//! patterns the engine's scan automaton holds ([`crate::scan::pattern`]),
//! each compiled to a dense DFA (regex-automata) that is searched
//! unanchored, exactly as the engine searches a field: a value is in the
//! language when a match ends anywhere in it. A conjunction of tests is the
//! product of their DFAs, explored breadth first from the start state, so
//! the first accepting product state found gives a shortest value; a
//! negated test is its DFA's complement (a branch dies as soon as that DFA
//! matches). Bytes are grouped into the classes no DFA tells apart, and
//! each class is tried through its most readable byte, so values come out
//! as letters and digits where the tests allow.
//!
//! Budgets: each DFA is at most [`DFA_BYTES`] (regex-automata's own size
//! limits, during and after determinisation), and one product search
//! visits at most `max_states` product states. Past either, or on a regex
//! a DFA cannot run exactly (a Unicode `\b` meeting a non-ASCII byte), the
//! answer is [`Found::Unknown`] and the caller falls back to its
//! conservative answer.

use regex_automata::dfa::{dense, Automaton};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::{start, syntax};
use regex_automata::Anchored;
use std::collections::HashMap;
use std::rc::Rc;

/// Largest DFA of one test, in bytes (both while it is determinised and
/// once built).
pub const DFA_BYTES: usize = 4 << 20;

/// A compiled test.
pub type Dfa = dense::DFA<Vec<u32>>;

/// What a search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A value every constraint agrees with.
    Sat(Vec<u8>),
    /// No value exists.
    Unsat,
    /// Not decided, and why.
    Unknown(String),
}

/// Compiles a pattern into a DFA searched unanchored. `bytes` patterns may
/// match invalid UTF-8 (the domains of fields); the tests' own patterns
/// are compiled with the engine's syntax (UTF-8, Unicode).
pub fn build(pattern: &str, bytes: bool) -> Result<Dfa, String> {
    dense::Builder::new()
        .configure(
            dense::DFA::config()
                .dfa_size_limit(Some(DFA_BYTES))
                .determinize_size_limit(Some(DFA_BYTES))
                .unicode_word_boundary(true),
        )
        .syntax(syntax::Config::new().utf8(!bytes))
        .thompson(thompson::Config::new().nfa_size_limit(Some(DFA_BYTES)))
        .build(pattern)
        .map_err(|e| {
            if e.is_size_limit_exceeded() {
                format!("its DFA would exceed {} MiB", DFA_BYTES >> 20)
            } else {
                format!("a regex the analysis cannot compile to a DFA: {e}")
            }
        })
}

/// Compiled patterns, each built once per compilation.
#[derive(Default)]
pub struct Langs {
    built: HashMap<(String, bool), Result<Rc<Dfa>, String>>,
}

impl Langs {
    /// The DFA of `pattern`, built on first use.
    pub fn get(&mut self, pattern: &str, bytes: bool) -> Result<Rc<Dfa>, String> {
        self.built
            .entry((pattern.to_string(), bytes))
            .or_insert_with(|| build(pattern, bytes).map(Rc::new))
            .clone()
    }
}

/// Whether `dfa` finds a match in `v` (`None`: it had to give up on a
/// byte).
pub fn accepts(dfa: &Dfa, v: &[u8]) -> Option<bool> {
    let mut s = dfa
        .start_state(&start::Config::new().anchored(Anchored::No))
        .ok()?;
    for &b in v {
        s = dfa.next_state(s, b);
        if dfa.is_match_state(s) {
            return Some(true);
        }
        if dfa.is_dead_state(s) {
            return Some(false);
        }
        if dfa.is_quit_state(s) {
            return None;
        }
    }
    Some(dfa.is_match_state(dfa.next_eoi_state(s)))
}

/// Whether `v` satisfies every constraint (`None`: a DFA gave up).
pub fn check(constraints: &[(Rc<Dfa>, bool)], v: &[u8]) -> Option<bool> {
    for (d, must) in constraints {
        if accepts(d, v)? != *must {
            return Some(false);
        }
    }
    Some(true)
}

/// One component of a product state.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum St {
    /// Still searching.
    At(StateID),
    /// A positive test has matched: it holds whatever follows.
    Held,
    /// A negated test can no longer match.
    Safe,
}

/// Bytes in the order they are tried: what reads well in a request first.
fn preference() -> Vec<u8> {
    let mut out: Vec<u8> = Vec::with_capacity(256);
    out.extend(b'a'..=b'z');
    out.extend(b'0'..=b'9');
    out.extend(b"/.-_");
    out.extend(b'A'..=b'Z');
    out.extend((b'!'..=b'~').filter(|b| !b.is_ascii_alphanumeric() && !b"/.-_".contains(b)));
    out.push(b' ');
    out.extend(0x80..=0xff);
    out.extend((0..0x20).chain([0x7f]));
    out
}

/// Searches for a value that every `(dfa, true)` accepts and no
/// `(dfa, false)` does, visiting at most `max_states` product states.
pub fn search(constraints: &[(Rc<Dfa>, bool)], max_states: usize) -> Found {
    let cfg = start::Config::new().anchored(Anchored::No);
    let mut first = Vec::with_capacity(constraints.len());
    for (d, _) in constraints {
        match d.start_state(&cfg) {
            Ok(s) => first.push(St::At(s)),
            Err(e) => return Found::Unknown(format!("a DFA has no start state: {e}")),
        }
    }
    // One representative byte per class of bytes no DFA tells apart.
    let mut reps: Vec<u8> = Vec::new();
    let mut seen: HashMap<Vec<u8>, ()> = HashMap::new();
    for b in preference() {
        let key: Vec<u8> = constraints
            .iter()
            .map(|(d, _)| d.byte_classes().get(b))
            .collect();
        if seen.insert(key, ()).is_none() {
            reps.push(b);
        }
    }
    let mut states: Vec<Vec<St>> = vec![first.clone()];
    let mut parent: Vec<(usize, u8)> = vec![(usize::MAX, 0)];
    let mut index: HashMap<Vec<St>, usize> = HashMap::from([(first, 0)]);
    let mut quit = false;
    let mut at = 0;
    while at < states.len() {
        if done(constraints, &states[at]) {
            let mut v = Vec::new();
            let mut i = at;
            while parent[i].0 != usize::MAX {
                v.push(parent[i].1);
                i = parent[i].0;
            }
            v.reverse();
            return Found::Sat(v);
        }
        'bytes: for &b in &reps {
            let mut next = Vec::with_capacity(constraints.len());
            for ((d, must), &s) in constraints.iter().zip(&states[at]) {
                let St::At(s) = s else {
                    next.push(s);
                    continue;
                };
                let n = d.next_state(s, b);
                next.push(if d.is_match_state(n) {
                    if !must {
                        continue 'bytes;
                    }
                    St::Held
                } else if d.is_dead_state(n) {
                    if *must {
                        continue 'bytes;
                    }
                    St::Safe
                } else if d.is_quit_state(n) {
                    quit = true;
                    continue 'bytes;
                } else {
                    St::At(n)
                });
            }
            if !index.contains_key(&next) {
                if states.len() >= max_states {
                    return Found::Unknown(format!(
                        "the search for a value visited {max_states} states"
                    ));
                }
                index.insert(next.clone(), states.len());
                states.push(next);
                parent.push((at, b));
            }
        }
        at += 1;
    }
    if quit {
        Found::Unknown("a regex's word boundary cannot be decided on non-ASCII text".into())
    } else {
        Found::Unsat
    }
}

/// Whether a product state accepts at the end of the value.
fn done(constraints: &[(Rc<Dfa>, bool)], state: &[St]) -> bool {
    constraints.iter().zip(state).all(|((d, must), s)| match s {
        St::Held => true,
        St::Safe => true,
        St::At(s) => d.is_match_state(d.next_eoi_state(*s)) == *must,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dfa(p: &str) -> Rc<Dfa> {
        Rc::new(build(p, false).unwrap())
    }

    #[test]
    fn the_updater_is_no_generic_client() {
        let ua = dfa("(?i:^(python-requests|python-urllib|aiohttp|go-http-client|java|okhttp|axios|node-fetch|curl|wget|libwww-perl)[/ ])");
        let updater = dfa(r"\A(?:wmf-streaming-updater-consumer/)");
        assert_eq!(
            search(&[ua.clone(), updater.clone()].map(|d| (d, true)), 10_000),
            Found::Unsat
        );
        // Either one alone has a value, and the shortest is found.
        assert_eq!(
            search(&[(ua.clone(), true)], 10_000),
            Found::Sat(b"curl/".to_vec())
        );
        let Found::Sat(v) = search(&[(updater, true), (ua, false)], 10_000) else {
            panic!()
        };
        assert_eq!(v, b"wmf-streaming-updater-consumer/");
    }

    #[test]
    fn negations_are_complements() {
        let bot = dfa("bot");
        let crawler = dfa(r"(?i:crawl|bot)");
        // Every value with "bot" also matches the second: no value is
        // "bot" without being a crawler.
        assert_eq!(
            search(&[(bot.clone(), true), (crawler.clone(), false)], 10_000),
            Found::Unsat
        );
        let Found::Sat(v) = search(&[(crawler, true), (bot, false)], 10_000) else {
            panic!()
        };
        assert_eq!(accepts(&dfa("(?i:crawl|bot)"), &v), Some(true));
        assert!(!v.windows(3).any(|w| w == b"bot"));
    }

    #[test]
    fn anchors_and_budgets() {
        let exact = dfa(r"\A(?:/sparql)\z");
        let prefix = dfa(r"\A(?:/sparql/)");
        assert_eq!(
            search(&[(exact.clone(), true), (prefix, true)], 10_000),
            Found::Unsat
        );
        assert_eq!(
            search(&[(exact, true)], 10_000),
            Found::Sat(b"/sparql".to_vec())
        );
        let long = dfa("[a-z]{20}x");
        assert!(matches!(search(&[(long, true)], 10), Found::Unknown(_)));
    }
}
