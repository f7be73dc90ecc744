//! The user-space engine's scan automata: per string field, one
//! multi-pattern regex over every prefix, suffix, substring and regex test
//! of that field. The engine builds them when it loads a ruleset; the
//! compiler builds the same ones, with the same settings, so that a
//! ruleset `rctl check` accepts is one the engine can load.

use crate::ir::{Atom, StrField, StrOp};
use regex_automata::{hybrid, meta, MatchKind};
use std::collections::BTreeMap;

/// Largest NFA of one field's automaton, in bytes (the meta regex's own
/// default, stated here so that both sides use one number).
pub const NFA_SIZE_LIMIT: usize = 10 << 20;

/// Lazy DFA cache per field and thread, in bytes.
pub const DFA_CACHE_BYTES: usize = 8 << 20;

/// The regex syntax every evaluator uses: the crate's own, except that a
/// pattern may match bytes that are not UTF-8, so that `(?-u)` gives PCRE's
/// byte semantics (`(?-u:.)` is any byte but `\n`, `(?-u:\w)` is ASCII),
/// as requestctl's imported regexes need. Values are bytes anyway.
pub fn syntax(ci: bool) -> regex_automata::util::syntax::Config {
    regex_automata::util::syntax::Config::new()
        .utf8(false)
        .case_insensitive(ci)
}

/// The pattern an atom adds to its field's automaton, if any (`==` and
/// `in` go to a hash table instead).
pub fn pattern(op: &StrOp) -> Option<String> {
    let escape = regex_syntax::escape;
    Some(match op {
        StrOp::Eq(_) | StrOp::In(_) => return None,
        StrOp::Prefix(v) => format!(r"\A(?:{})", escape(v)),
        StrOp::Suffix(v) => format!(r"(?:{})\z", escape(v)),
        StrOp::Contains(v) => escape(v),
        StrOp::Regex { pattern, ci } => format!("(?{}:{pattern})", if *ci { "i" } else { "" }),
    })
}

/// Every field's scan patterns, each with its atom index, in atom order.
pub fn patterns(atoms: &[Atom]) -> BTreeMap<&StrField, Vec<(String, u32)>> {
    let mut out: BTreeMap<&StrField, Vec<(String, u32)>> = BTreeMap::new();
    for (i, a) in atoms.iter().enumerate() {
        if let Atom::Str { field, op } = a {
            if let Some(p) = pattern(op) {
                out.entry(field).or_default().push((p, i as u32));
            }
        }
    }
    out
}

/// Builds one field's automaton: the meta regex, reporting every
/// overlapping match.
pub fn build(patterns: &[&str]) -> Result<meta::Regex, Box<meta::BuildError>> {
    meta::Regex::builder()
        .syntax(syntax(false))
        .configure(
            meta::Regex::config()
                .match_kind(MatchKind::All)
                .nfa_size_limit(Some(NFA_SIZE_LIMIT))
                .hybrid_cache_capacity(DFA_CACHE_BYTES),
        )
        .build_many(patterns)
        .map_err(Box::new)
}

/// The lazy DFA the engine tries first for the same patterns; `None` when
/// it cannot be built (the meta regex then does all the work, so this is
/// never an error).
pub fn lazy_dfa(patterns: &[&str]) -> Option<hybrid::dfa::DFA> {
    hybrid::dfa::DFA::builder()
        .syntax(syntax(false))
        .configure(
            hybrid::dfa::DFA::config()
                .match_kind(MatchKind::All)
                .cache_capacity(DFA_CACHE_BYTES),
        )
        .build_many(patterns)
        .ok()
}

/// Why a field's automaton cannot be built, in words: which limit, or
/// what else went wrong.
pub fn explain(e: &meta::BuildError) -> String {
    match e.size_limit() {
        Some(limit) => format!(
            "its automaton needs more than the engine's limit of {} MiB",
            limit >> 20
        ),
        None => e.to_string(),
    }
}

/// Regexes measured one by one to find the largest, when a field's
/// automaton is too large.
const MEASURED: usize = 256;

/// Builds every field's automaton as the engine will, and reports each
/// field whose automaton cannot be built, at its largest patterns.
pub(crate) fn check(
    atoms: &[Atom],
    spans: &std::collections::HashMap<u32, crate::source::Span>,
    diags: &mut crate::diag::Diagnostics,
) {
    use crate::diag::{code, Diagnostic};
    for (field, pats) in patterns(atoms) {
        let list: Vec<&str> = pats.iter().map(|(p, _)| p.as_str()).collect();
        let Err(e) = build(&list) else { continue };
        // Point at the patterns that cost the most: the longest regexes
        // measured alone, the others (and literals) by their length.
        let mut by_len: Vec<(usize, bool, u32)> = pats
            .iter()
            .map(|(p, a)| {
                let regex = matches!(
                    &atoms[*a as usize],
                    Atom::Str {
                        op: StrOp::Regex { .. },
                        ..
                    }
                );
                (p.len(), regex, *a)
            })
            .collect();
        by_len.sort_by_key(|x| std::cmp::Reverse(x.0));
        let mut measured = 0;
        let mut sized: Vec<(usize, u32)> = Vec::with_capacity(by_len.len());
        for (len, regex, a) in by_len {
            let size = if regex && measured < MEASURED {
                measured += 1;
                let p = pats.iter().find(|x| x.1 == a).map_or("", |x| x.0.as_str());
                build(&[p]).map_or(usize::MAX, |r| r.memory_usage())
            } else {
                len
            };
            sized.push((size, a));
        }
        sized.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        let at = |i: usize| sized.get(i).and_then(|(_, a)| spans.get(a)).copied();
        let mut d = Diagnostic::error(
            code::LIMIT,
            format!(
                "the engine cannot build the matcher for `{}`: {}",
                field.display(),
                explain(&e)
            ),
        );
        if let Some(s) = at(0) {
            d = d.primary(s, format!("the largest of its {} patterns", pats.len()));
        }
        for i in 1..4 {
            if let Some(s) = at(i) {
                d = d.secondary(s, "and the next largest");
            }
        }
        diags.push(d.hint(format!(
            "every regex, prefix, suffix and substring test on one field is compiled into one automaton, of at most {} MiB; make the largest regexes smaller (counted repetitions such as {{1000}} and Unicode classes such as \\w grow them; (?-u) makes classes ASCII), or use ==, in, starts_with, ends_with or contains where a literal will do",
            NFA_SIZE_LIMIT >> 20
        )));
    }
}
