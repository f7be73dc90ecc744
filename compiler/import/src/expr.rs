//! requestctl's action expressions, parsed as its pyparsing grammar does:
//!
//! ```text
//! grammar ::= item (boolean item)*
//! item    ::= "pattern@" word | "ipblock@" word | "(" grammar ")"
//! boolean ::= "AND NOT" | "OR NOT" | "AND" | "OR"     (keywords, upper case)
//! word    ::= [A-Za-z0-9/_-]+                         (scope/name)
//! ```
//!
//! Whitespace separates tokens; `NOT` only follows `AND` or `OR`, with one
//! space, as pyparsing's `Keyword("AND NOT")` matches it. The result keeps
//! each token's byte range in the expression, so that diagnostics point at
//! it inside the YAML file.

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// `pattern@scope/name`.
    Pattern(String),
    /// `ipblock@scope/name`.
    Ipblock(String),
    /// `AND`.
    And,
    /// `OR`.
    Or,
    /// `AND NOT`.
    AndNot,
    /// `OR NOT`.
    OrNot,
    /// `(`.
    Open,
    /// `)`.
    Close,
}

/// A token and its byte range in the expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Start offset.
    pub at: usize,
    /// End offset.
    pub end: usize,
}

/// Why an expression does not parse: the message and its byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// What is wrong.
    pub message: String,
    /// Start offset.
    pub at: usize,
    /// End offset.
    pub end: usize,
}

fn word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'/' | b'-' | b'_')
}

fn keyword_at(s: &[u8], i: usize, kw: &str) -> bool {
    s[i..].starts_with(kw.as_bytes())
        && s.get(i + kw.len())
            .is_none_or(|&c| !(c.is_ascii_alphanumeric() || c == b'_' || c == b'$'))
}

/// Splits an expression into tokens.
pub fn tokens(expr: &str) -> Result<Vec<Token>, ExprError> {
    let s = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let tok = if s[i] == b'(' {
            i += 1;
            Tok::Open
        } else if s[i] == b')' {
            i += 1;
            Tok::Close
        } else if keyword_at(s, i, "AND NOT") {
            i += 7;
            Tok::AndNot
        } else if keyword_at(s, i, "OR NOT") {
            i += 6;
            Tok::OrNot
        } else if keyword_at(s, i, "AND") {
            i += 3;
            Tok::And
        } else if keyword_at(s, i, "OR") {
            i += 2;
            Tok::Or
        } else {
            let (kind, pfx) = if s[i..].starts_with(b"pattern@") {
                (true, 8)
            } else if s[i..].starts_with(b"ipblock@") {
                (false, 8)
            } else {
                let end = (i + 1..=s.len())
                    .find(|&j| {
                        j == s.len() || s[j].is_ascii_whitespace() || matches!(s[j], b'(' | b')')
                    })
                    .unwrap_or(s.len());
                return Err(ExprError {
                    message: format!(
                        "expected pattern@scope/name, ipblock@scope/name, `(`, or AND/OR/AND NOT/OR NOT, found `{}`",
                        &expr[i..end]
                    ),
                    at: i,
                    end,
                });
            };
            let mut j = i + pfx;
            while j < s.len() && word_char(s[j]) {
                j += 1;
            }
            let slug = &expr[i + pfx..j];
            if slug.is_empty()
                || slug.matches('/').count() != 1
                || slug.starts_with('/')
                || slug.ends_with('/')
            {
                return Err(ExprError {
                    message: format!("`{}` is not scope/name", &expr[i..j]),
                    at: i,
                    end: j.max(i + pfx),
                });
            }
            i = j;
            if kind {
                Tok::Pattern(slug.to_string())
            } else {
                Tok::Ipblock(slug.to_string())
            }
        };
        out.push(Token {
            tok,
            at: start,
            end: i,
        });
    }
    Ok(out)
}

/// Parses an expression: its tokens once the grammar accepts them.
pub fn parse(expr: &str) -> Result<Vec<Token>, ExprError> {
    let toks = tokens(expr)?;
    let mut p = 0usize;
    let mut depth = 0usize;
    grammar(&toks, &mut p, &mut depth, expr.len())?;
    if let Some(t) = toks.get(p) {
        return Err(ExprError {
            message: "unexpected token after the expression".into(),
            at: t.at,
            end: t.end,
        });
    }
    Ok(toks)
}

fn item(toks: &[Token], p: &mut usize, depth: &mut usize, len: usize) -> Result<(), ExprError> {
    match toks.get(*p) {
        Some(Token {
            tok: Tok::Pattern(_) | Tok::Ipblock(_),
            ..
        }) => {
            *p += 1;
            Ok(())
        }
        Some(Token {
            tok: Tok::Open, at, ..
        }) => {
            let open = *at;
            *p += 1;
            *depth += 1;
            if *depth > 64 {
                return Err(ExprError {
                    message: "parentheses nest deeper than 64".into(),
                    at: open,
                    end: open + 1,
                });
            }
            grammar(toks, p, depth, len)?;
            *depth -= 1;
            match toks.get(*p) {
                Some(Token {
                    tok: Tok::Close, ..
                }) => {
                    *p += 1;
                    Ok(())
                }
                Some(t) => Err(ExprError {
                    message: "expected `)` or AND/OR".into(),
                    at: t.at,
                    end: t.end,
                }),
                None => Err(ExprError {
                    message: "this `(` is never closed".into(),
                    at: open,
                    end: open + 1,
                }),
            }
        }
        Some(t) => Err(ExprError {
            message: "expected pattern@…, ipblock@… or `(`".into(),
            at: t.at,
            end: t.end,
        }),
        None => Err(ExprError {
            message: "the expression ends where pattern@…, ipblock@… or `(` was expected".into(),
            at: len,
            end: len,
        }),
    }
}

fn grammar(toks: &[Token], p: &mut usize, depth: &mut usize, len: usize) -> Result<(), ExprError> {
    item(toks, p, depth, len)?;
    while let Some(Token {
        tok: Tok::And | Tok::Or | Tok::AndNot | Tok::OrNot,
        ..
    }) = toks.get(*p)
    {
        *p += 1;
        item(toks, p, depth, len)?;
    }
    Ok(())
}

/// The expression in rctl's syntax (same precedence: `and` binds tighter
/// than `or`, `not` tightest, as in requestctl's VCL and HAProxy output).
pub fn to_rctl(toks: &[Token]) -> String {
    let mut out = String::new();
    for t in toks {
        let piece = match &t.tok {
            Tok::Pattern(s) => format!("pattern@{s}"),
            Tok::Ipblock(s) => format!("ipblock@{s}"),
            Tok::And => "and".into(),
            Tok::Or => "or".into(),
            Tok::AndNot => "and not".into(),
            Tok::OrNot => "or not".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
        };
        if !out.is_empty() && !out.ends_with('(') && piece != ")" {
            out.push(' ');
        }
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requestctl_expressions_parse_and_translate() {
        let e = "( pattern@cache-text/action_api OR pattern@cache-text/restbase ) AND NOT ipblock@cloud/aws";
        let t = parse(e).unwrap();
        assert_eq!(
            to_rctl(&t),
            "(pattern@cache-text/action_api or pattern@cache-text/restbase) and not ipblock@cloud/aws"
        );
        assert_eq!(&e[t[1].at..t[1].end], "pattern@cache-text/action_api");
    }

    #[test]
    fn what_requestctl_refuses_is_refused_where_it_is() {
        // An unclosed parenthesis (requestctl's bad_expr fixture).
        let e = "pattern@ua/requests AND (pattern@a/b OR pattern@a/c";
        assert_eq!(parse(e).unwrap_err().at, 24);
        // Lower-case keywords are not requestctl's.
        assert!(parse("pattern@a/b and pattern@a/c").is_err());
        // NOT only after AND/OR.
        assert!(parse("NOT pattern@a/b").is_err());
        assert!(parse("pattern@a/b AND  NOT pattern@a/c").is_err());
        // A slug needs exactly one slash.
        assert_eq!(parse("pattern@a/b/c").unwrap_err().at, 0);
        assert!(parse("").is_err());
        assert!(parse("pattern@a/b OR").is_err());
        assert!(parse("pattern@a/b )").is_err());
    }
}
