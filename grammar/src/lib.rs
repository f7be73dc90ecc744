//! The pest grammar of the `.rctl` rule language.
//!
//! `rctl.pest` beside this crate is the only grammar of the language. This
//! crate exposes the generated parser; the compiler turns its parse tree into
//! a spanned AST.

#![forbid(unsafe_code)]

use pest_derive::Parser;

/// The generated parser for `.rctl` sources. See `rctl.pest` for the rules.
#[derive(Parser)]
#[grammar = "../rctl.pest"]
pub struct RctlParser;

#[cfg(test)]
mod tests {
    use super::*;
    use pest::Parser;

    fn parses(start: Rule, src: &str) -> bool {
        RctlParser::parse(start, src).is_ok()
    }

    #[test]
    fn keywords_are_case_insensitive_like_requestctl() {
        assert!(parses(
            Rule::single_item,
            "rule r { when pattern@ua/bot AND NOT ipblock@cloud/aws deny 403 \"no\" }"
        ));
    }

    #[test]
    fn unbalanced_block_is_a_syntax_error() {
        assert!(!parses(Rule::file, "rule r { when path == \"/x\" deny"));
    }

    #[test]
    fn deny_status_does_not_swallow_the_next_property() {
        assert!(parses(
            Rule::single_item,
            "rule r { deny priority 5 when path == \"/\" }"
        ));
    }
}
