//! Syntax errors: where the parse stopped, what the grammar wanted there
//! in words, and a hint about what was being written (a misspelt
//! keyword, a single `=`, a name without its scope).

use crate::diag::{code, Diagnostic};
use crate::source::{FileId, SourceFile};
use rctl_grammar::Rule;

/// The diagnostic for a parse that stopped: where, what the grammar
/// wanted there (in words), and a hint about what was being written.
pub(super) fn syntax_diag(
    src: &SourceFile,
    file: FileId,
    base: usize,
    e: &pest::error::Error<Rule>,
) -> Diagnostic {
    use pest::error::{ErrorVariant, InputLocation};
    let (s, end) = match e.location {
        InputLocation::Pos(p) => (p, p + 1),
        InputLocation::Span((a, b)) => (a, b.max(a + 1)),
    };
    let start = (base + s).min(src.text.len());
    let mut end = (base + end).min(src.text.len()).max(start);
    while end < src.text.len() && !src.text.is_char_boundary(end) {
        end += 1;
    }
    let span = src.span(file, start, end);
    let expected = match &e.variant {
        ErrorVariant::ParsingError { positives, .. } => {
            let mut names: Vec<&str> = positives.iter().filter_map(|r| friendly(*r)).collect();
            names.sort_unstable();
            names.dedup();
            names
        }
        ErrorVariant::CustomError { .. } => Vec::new(),
    };
    let found = src.text[start..]
        .split(|c: char| c.is_whitespace())
        .next()
        .filter(|w| !w.is_empty())
        .map_or("end of input".to_string(), |w| {
            format!("`{}`", w.chars().take(30).collect::<String>())
        });
    let msg = format!("syntax error: unexpected {found}");
    let label = if expected.is_empty() {
        "not expected here".to_string()
    } else {
        format!("expected {}", expected.join(", "))
    };
    Diagnostic::error(code::SYNTAX, msg)
        .primary(span, label)
        .hint(hint_for(&src.text[start..], &expected))
}

/// Every keyword of the language (the grammar's `^"…"` words; a test
/// holds this list to the grammar), for "did you mean" hints.
pub(crate) const KEYWORDS: &[&str] = &[
    "absent",
    "all",
    "allow",
    "allow_undecided",
    "and",
    "at",
    "ban",
    "bucket",
    "burst",
    "by",
    "captured",
    "comment",
    "contains",
    "deny",
    "drop",
    "dst_ip",
    "enabled",
    "ends_with",
    "expect",
    "false",
    "file",
    "first",
    "for",
    "format",
    "header",
    "host",
    "in",
    "include",
    "ip",
    "ipblock",
    "last",
    "log",
    "logged",
    "method",
    "none",
    "not",
    "or",
    "over",
    "packet",
    "pass",
    "path",
    "pattern",
    "per",
    "port",
    "prefix",
    "present",
    "priority",
    "proto",
    "query",
    "reason",
    "repeat",
    "replay",
    "request",
    "rule",
    "shadow",
    "shared",
    "site",
    "sites",
    "starts_with",
    "status",
    "syn",
    "test",
    "throttle",
    "true",
    "url",
    "when",
];

/// A hint about the construct being parsed where the parse stopped:
/// `rest` is the input from there, `expected` what the grammar wanted.
fn hint_for(rest: &str, expected: &[&str]) -> String {
    let word: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let wants = |s: &str| expected.iter().any(|e| e.contains(s));
    if word.eq_ignore_ascii_case("action") {
        return "requestctl's `action` is called `rule` here: `rule name { when … deny 403 \"…\" }`"
            .into();
    }
    if word.is_empty() && rest.starts_with('}') {
        return "is a `when` condition or a value missing before this `}`?".into();
    }
    if rest.starts_with('=') && !rest.starts_with("==") && wants("operator") {
        return "comparisons are written `==` (and `!=`); a single `=` is not an operator".into();
    }
    // A name or a value may be any word: no keyword is suggested there.
    let names = ["`scope/name`", "a rule name", "\"string\"", "a value"];
    let keyword_wanted = !names.iter().any(|n| wants(n));
    if keyword_wanted && !word.is_empty() && !KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(&word))
    {
        if let Some(k) = crate::diag::nearest(&word, KEYWORDS.iter().copied()) {
            return format!("did you mean `{k}`?");
        }
    }
    if wants("`scope/name`") {
        return "ipblocks and patterns are named `scope/name`, such as `cloud/aws` or `ua/curl`"
            .into();
    }
    if wants("\"string\"") && !word.is_empty() {
        return format!("strings need double quotes: \"{word}\"");
    }
    if wants("a condition") {
        return "a condition compares a field (`path == \"/x\"`), tests one (`header(\"x\") present`), or names a pattern (`pattern@ua/curl`)".into();
    }
    if wants("an item") {
        return "a file holds `ipblock`, `pattern`, `rule`, `test` and `include` items".into();
    }
    "see the language reference, grammar/README.md".into()
}

fn friendly(r: Rule) -> Option<&'static str> {
    Some(match r {
        Rule::kw_include | Rule::kw_ipblock | Rule::kw_pattern | Rule::kw_rule | Rule::kw_test => {
            "an item (`ipblock`, `pattern`, `rule`, `test`, `include`)"
        }
        Rule::object_name => "a `scope/name`",
        Rule::rule_name => "a rule name",
        Rule::string => "a \"string\"",
        Rule::bare | Rule::status_code => "a value",
        Rule::expr | Rule::and_expr | Rule::unary | Rule::paren | Rule::condition => "a condition",
        Rule::f_method
        | Rule::f_host
        | Rule::f_path
        | Rule::f_query
        | Rule::f_ip
        | Rule::f_dst_ip
        | Rule::f_port
        | Rule::f_proto
        | Rule::f_header
        | Rule::f_query_param => "a field",
        Rule::pattern_ref => "`pattern@scope/name`",
        Rule::ipblock_ref => "`ipblock@scope/name`",
        Rule::cmp_op | Rule::cmp => "an operator (==, !=, ~, ~*, starts_with, …)",
        Rule::set_test | Rule::kw_in => "`in`",
        Rule::presence => "`present`/`absent`",
        Rule::kw_and | Rule::kw_or => "`and`/`or`",
        Rule::when
        | Rule::priority
        | Rule::sites
        | Rule::enabled
        | Rule::shadow
        | Rule::allow_undecided
        | Rule::comment_prop => "a rule property (`when`, `priority`, `sites`, …)",
        Rule::allow | Rule::log | Rule::drop | Rule::kw_deny | Rule::deny | Rule::throttle => {
            "an action (`allow`, `deny`, `throttle`, `log`, `drop`)"
        }
        Rule::t_burst
        | Rule::t_by
        | Rule::t_ban
        | Rule::t_status
        | Rule::t_reason
        | Rule::t_bucket
        | Rule::t_shared => {
            "a throttle option (`burst`, `by`, `ban`, `status`, `reason`, `bucket`, `shared`)"
        }
        Rule::k_header | Rule::k_query | Rule::k_prefix | Rule::k_word => "a throttle key",
        Rule::cidr_token | Rule::ib_file => "a CIDR or `file \"…\"`",
        Rule::request_block
        | Rule::packet_block
        | Rule::expect
        | Rule::t_site
        | Rule::t_replay
        | Rule::kw_replay => "`request {…}`, `packet {…}`, `replay \"file\"`, `expect …` or `site`",
        Rule::r_format | Rule::r_captured | Rule::r_ip => {
            "`format \"…\"`, `captured \"…\"` or `ip CIDR`"
        }
        Rule::s_field_name | Rule::s_header | Rule::s_repeat | Rule::s_at | Rule::s_syn => {
            "a sample field (`method`, `path`, `header`, `ip`, `repeat`, …)"
        }
        Rule::quantity => "`all`, `none`, `first`, `last` or a count",
        Rule::verdict => "a verdict (`pass`, `allow`, `deny`, `throttle`, `drop`, `logged`)",
        Rule::EOI => "end of input",
        _ => return None,
    })
}

#[cfg(test)]
mod hint_tests {
    use super::*;

    #[test]
    fn the_keyword_list_is_the_grammars() {
        let grammar = include_str!("../../../grammar/rctl.pest");
        let mut words: Vec<&str> = grammar
            .split("^\"")
            .skip(1)
            .filter_map(|s| s.split('"').next())
            .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !w.is_empty())
            .collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words, KEYWORDS);
    }

    fn hint(src: &str) -> String {
        let c = crate::compile_str("t.rctl", src, &Default::default());
        c.diagnostics
            .iter()
            .filter_map(|d| d.hint.clone())
            .collect::<Vec<_>>()
            .join(" | ")
    }

    #[test]
    fn syntax_errors_get_a_hint_about_what_was_being_written() {
        assert_eq!(
            hint("rule r { priorty 5 when path == \"/\" deny }"),
            "did you mean `priority`?"
        );
        assert_eq!(
            hint("rule r { whne path == \"/\" deny }"),
            "did you mean `when`?"
        );
        assert!(hint("rule r { when path = \"/\" deny }").contains("`==`"));
        assert!(hint("ipblock x { 10.0.0.0/8 }").contains("scope/name"));
        // A name is any word: `bad` is not a misspelt `ban` there.
        assert!(
            hint("ipblock bad { 10.0.0.0/8 }").starts_with("ipblocks and patterns are named"),
            "{}",
            hint("ipblock bad { 10.0.0.0/8 }")
        );
        assert!(hint("action a { }").contains("called `rule`"));
        assert!(
            hint("rule r { when path == \"/\" throttle 5 requests per minute }")
                .contains("did you mean `1m`?")
        );
        assert!(hint(
            "rule limit { when path == \"/\" deny }\ntest \"t\" { request a { path \"/\" } expect for a all deny by limt }"
        )
        .contains("did you mean `limit`?"));
    }
}
