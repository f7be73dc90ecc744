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

/// One group of a field's patterns, with the lazy DFA the engine tries
/// first for them (the meta regex of [`build`] is the fallback when a
/// lazy DFA gives up).
///
/// A field's patterns are split in two groups, so that a search reads
/// only the bytes it must:
/// - those anchored at the value's start (`starts_with`, `^…` regexes),
///   searched anchored: the search ends as soon as no pattern can match
///   any more, usually within a few bytes of a long value;
/// - the others, searched over the whole value, skipping ahead with a
///   prefilter of their literal prefixes where one is worth having (a
///   value in which none of them occurs is passed over at memchr's speed
///   rather than a DFA step per byte).
pub struct ScanPart {
    /// The group's automaton, reporting every overlapping match.
    pub dfa: hybrid::dfa::DFA,
    /// Searched anchored at the value's start.
    pub anchored: bool,
    /// Its patterns' indices in the field's list, by the DFA's pattern id.
    pub patterns: Vec<usize>,
    /// For an anchored group: the first bytes after which a match is
    /// still possible (a 256-bit set). A value that starts with another
    /// byte matches none of its patterns, and is not searched at all
    /// (most User-Agents start with `Mozilla/`).
    pub first: Option<[u64; 4]>,
}

impl ScanPart {
    /// Reports to `found` the index (in the field's list) of every
    /// pattern of this group that `value` matches; an error if the lazy
    /// DFA gave up (what was reported is then only a part).
    pub fn search(
        &self,
        cache: &mut hybrid::dfa::Cache,
        value: &[u8],
        mut found: impl FnMut(usize),
    ) -> Result<(), regex_automata::MatchError> {
        let anchored = if self.anchored {
            regex_automata::Anchored::Yes
        } else {
            regex_automata::Anchored::No
        };
        if let (Some(first), Some(&b)) = (&self.first, value.first()) {
            if first[usize::from(b >> 6)] >> (b & 63) & 1 == 0 {
                return Ok(());
            }
        }
        let input = regex_automata::Input::new(value).anchored(anchored);
        let mut state = hybrid::dfa::OverlappingState::start();
        loop {
            self.dfa
                .try_search_overlapping_fwd(cache, &input, &mut state)?;
            match state.get_match() {
                Some(m) => found(self.patterns[m.pattern().as_usize()]),
                None => return Ok(()),
            }
        }
    }
}

/// The lazy DFAs the engine tries first for a field's patterns, by
/// group (see [`ScanPart`]); `None` when one cannot be built (the meta
/// regex then does all the work, so this is never an error).
pub fn lazy_parts(patterns: &[&str]) -> Option<Vec<ScanPart>> {
    use regex_automata::util::prefilter::Prefilter;
    use regex_automata::util::syntax::parse_with;
    use regex_syntax::hir::Look;
    let hirs = patterns
        .iter()
        .map(|p| parse_with(p, &syntax(false)).ok())
        .collect::<Option<Vec<_>>>()?;
    let mut parts = Vec::new();
    for anchored in [true, false] {
        let ids: Vec<usize> = (0..hirs.len())
            .filter(|&i| hirs[i].properties().look_set_prefix().contains(Look::Start) == anchored)
            .collect();
        if ids.is_empty() {
            continue;
        }
        let mut config = hybrid::dfa::DFA::config()
            .match_kind(MatchKind::All)
            .cache_capacity(DFA_CACHE_BYTES);
        if !anchored {
            let group: Vec<&regex_syntax::hir::Hir> = ids.iter().map(|&i| &hirs[i]).collect();
            // Leftmost-first literals: a prefilter only finds where a match
            // may start, and a match of any pattern starts where a
            // leftmost-first one does (its first alternative that matches
            // there); for `All`, the extractor gives up on case-insensitive
            // alternations that leftmost-first keeps fast.
            let pre = Prefilter::from_hirs_prefix(MatchKind::LeftmostFirst, &group)
                .filter(Prefilter::is_fast);
            config = config.prefilter(pre);
        }
        let group: Vec<&str> = ids.iter().map(|&i| patterns[i]).collect();
        let dfa = hybrid::dfa::DFA::builder()
            .syntax(syntax(false))
            .configure(config)
            .build_many(&group)
            .ok()?;
        let first = if anchored { first_bytes(&dfa) } else { None };
        parts.push(ScanPart {
            dfa,
            anchored,
            patterns: ids,
            first,
        });
    }
    Some(parts)
}

/// The bytes an anchored search can start with and still match: those
/// whose transition from the start state is not the dead state. (A DFA
/// reports a match one byte late, so even a pattern matching the empty
/// prefix leaves a first byte's transition alive.) `None` if the states
/// cannot be computed.
fn first_bytes(dfa: &hybrid::dfa::DFA) -> Option<[u64; 4]> {
    let mut cache = dfa.create_cache();
    let config = regex_automata::util::start::Config::new()
        .anchored(regex_automata::Anchored::Yes)
        .look_behind(None);
    let start = dfa.start_state(&mut cache, &config).ok()?;
    let mut set = [0u64; 4];
    for b in 0..=255u8 {
        let next = dfa.next_state(&mut cache, start, b).ok()?;
        if !next.is_dead() {
            set[usize::from(b >> 6)] |= 1 << (b & 63);
        }
    }
    Some(set)
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

#[cfg(test)]
mod tests {
    use super::*;
    use regex_automata::{Input, PatternSet};

    /// The patterns each lazy DFA group finds, searched as the engine
    /// does, by index in the field's list.
    fn by_parts(parts: &[ScanPart], value: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        for p in parts {
            let mut cache = p.dfa.create_cache();
            p.search(&mut cache, value, |i| found.push(i)).unwrap();
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Anchored and unanchored patterns split in two groups (the second
    /// with a prefilter) find what the one meta regex over all of them
    /// finds, on values where each pattern matches, misses, or matches
    /// only away from the start.
    #[test]
    fn split_groups_find_what_the_meta_regex_finds() {
        let pats = [
            pattern(&StrOp::Prefix("wmf-updater/".into())).unwrap(),
            pattern(&StrOp::Suffix(".php".into())).unwrap(),
            pattern(&StrOp::Contains("bot".into())).unwrap(),
            r"(?i:(masscan|zgrab|nikto|sqlmap|nuclei|nmap scripting engine))".to_string(),
            r"(?i:^(python-requests|curl|wget)[/ ])".to_string(),
            r"(?:^a|b)c".to_string(),
            r"(?m:^x)".to_string(),
            r"^$".to_string(),
        ];
        let list: Vec<&str> = pats.iter().map(String::as_str).collect();
        let parts = lazy_parts(&list).expect("lazy DFAs");
        assert_eq!(parts.len(), 2);
        assert!(parts[0].anchored && !parts[1].anchored);
        assert_eq!(parts[0].patterns, vec![0, 4, 7]);
        // The shipped User-Agent tests: the unanchored group is skipped
        // through with a prefilter.
        let ua = [pats[3].as_str(), pats[4].as_str(), pats[0].as_str()];
        let ua_parts = lazy_parts(&ua).expect("lazy DFAs");
        assert!(ua_parts[1].dfa.get_config().get_prefilter().is_some());
        // Their anchored group is not searched on a browser's value.
        let first = ua_parts[0].first.expect("first bytes");
        let has = |b: u8| first[usize::from(b >> 6)] >> (b & 63) & 1 == 1;
        assert!(has(b'p') && has(b'P') && has(b'w') && !has(b'M') && !has(b'x'));
        let re = build(&list).unwrap();
        let values: [&[u8]; 12] = [
            b"",
            b"wmf-updater/1.0 bot",
            b"Mozilla/5.0 (Nikto/2.5.0)",
            b"Curl/8.0 via python-requests/2",
            b"python-requests/2.31.0",
            b"index.php",
            b"ac bc",
            b"zac",
            b"a\nx",
            b"x-wmf-updater/ SQLMAP",
            b"\xff\xfebot\x00",
            b"nmap scripting engine.php",
        ];
        for v in values {
            let mut set = PatternSet::new(re.pattern_len());
            re.which_overlapping_matches(&Input::new(v), &mut set);
            let want: Vec<usize> = set.iter().map(|p| p.as_usize()).collect();
            assert_eq!(by_parts(&parts, v), want, "{}", String::from_utf8_lossy(v));
        }
    }
}
