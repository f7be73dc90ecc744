//! From text to the spanned AST: the pest parse tree, error recovery, and
//! guards for hostile input (nesting depth, size).

use super::syntax::syntax_diag;
use crate::ast::*;
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::source::{FileId, SourceFile, Span};
use pest::iterators::Pair;
use pest::Parser as _;
use rctl_grammar::{RctlParser, Rule};

/// Limits applied while parsing.
#[derive(Debug, Clone)]
pub struct ParseLimits {
    /// Deepest nesting of parentheses in an expression.
    pub max_depth: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits { max_depth: 64 }
    }
}

struct Builder<'a> {
    file: FileId,
    src: &'a SourceFile,
    base: usize,
}

impl Builder<'_> {
    fn span(&self, p: &Pair<'_, Rule>) -> Span {
        let s = p.as_span();
        self.src
            .span(self.file, self.base + s.start(), self.base + s.end())
    }

    fn word(&self, p: Pair<'_, Rule>) -> Word {
        let span = self.span(&p);
        match p.as_rule() {
            Rule::string => {
                let body = p.into_inner().next().map_or("", |b| b.as_str());
                Word {
                    text: unescape(body),
                    quoted: true,
                    span,
                }
            }
            _ => Word {
                text: p.as_str().to_string(),
                quoted: false,
                span,
            },
        }
    }

    fn item(&self, p: Pair<'_, Rule>) -> Option<Item> {
        let span = self.span(&p);
        let kind = p.as_rule();
        let mut inner = p.into_inner().filter(|p| !is_keyword(p.as_rule()));
        Some(match kind {
            Rule::include => Item::Include(self.word(inner.next()?)),
            Rule::ipblock => {
                let name = self.word(inner.next()?);
                let entries = inner
                    .map(|e| match e.as_rule() {
                        Rule::ib_file => IpblockEntry::File(self.first_word(e)),
                        Rule::comment_prop => IpblockEntry::Comment(self.first_word(e)),
                        _ => IpblockEntry::Cidr(self.word(e)),
                    })
                    .collect();
                Item::Ipblock(IpblockDecl {
                    name,
                    entries,
                    span,
                })
            }
            Rule::pattern => {
                let name = self.word(inner.next()?);
                let mut comment = None;
                let mut body = None;
                for e in inner {
                    match e.as_rule() {
                        Rule::comment_prop => comment = Some(self.first_word(e)),
                        _ => body = Some(self.expr(e)),
                    }
                }
                Item::Pattern(PatternDecl {
                    name,
                    comment,
                    body: body?,
                    span,
                })
            }
            Rule::rule => {
                let name = self.word(inner.next()?);
                let props = inner.filter_map(|e| self.rule_prop(e)).collect();
                Item::Rule(RuleDecl { name, props, span })
            }
            Rule::test => self.test(inner, span)?,
            _ => return None,
        })
    }

    fn first_word(&self, p: Pair<'_, Rule>) -> Word {
        let span = self.span(&p);
        p.into_inner()
            .find(|p| !is_keyword(p.as_rule()))
            .map(|w| self.word(w))
            .unwrap_or(Word {
                text: String::new(),
                quoted: false,
                span,
            })
    }

    fn words(&self, p: Pair<'_, Rule>) -> Vec<Word> {
        p.into_inner()
            .filter(|p| !is_keyword(p.as_rule()))
            .map(|w| self.word(w))
            .collect()
    }

    fn expr(&self, p: Pair<'_, Rule>) -> Expr {
        let span = self.span(&p);
        match p.as_rule() {
            Rule::expr | Rule::and_expr => {
                let is_or = p.as_rule() == Rule::expr;
                let mut parts: Vec<Expr> = p
                    .into_inner()
                    .filter(|c| !matches!(c.as_rule(), Rule::kw_and | Rule::kw_or))
                    .map(|c| self.expr(c))
                    .collect();
                if parts.len() == 1 {
                    return parts.remove(0);
                }
                let kind = if is_or {
                    ExprKind::Or(parts)
                } else {
                    ExprKind::And(parts)
                };
                Expr { kind, span }
            }
            Rule::unary => {
                let mut nots = 0usize;
                let mut primary = None;
                for c in p.into_inner() {
                    if c.as_rule() == Rule::not_op {
                        nots += 1;
                    } else {
                        primary = Some(self.expr(c));
                    }
                }
                let e = primary.unwrap_or(Expr {
                    kind: ExprKind::Bool(true),
                    span,
                });
                // `not not x` is `x`: collapsing keeps the tree shallow even
                // for thousands of stacked `not`s.
                if nots % 2 == 1 {
                    Expr {
                        kind: ExprKind::Not(Box::new(e)),
                        span,
                    }
                } else {
                    e
                }
            }
            Rule::paren => {
                let inner = p.into_inner().next().map(|c| self.expr(c));
                let e = inner.unwrap_or(Expr {
                    kind: ExprKind::Bool(true),
                    span,
                });
                Expr {
                    kind: ExprKind::Paren(Box::new(e)),
                    span,
                }
            }
            Rule::pattern_ref => Expr {
                kind: ExprKind::PatternRef(self.ref_name(p)),
                span,
            },
            Rule::ipblock_ref => Expr {
                kind: ExprKind::IpblockRef(self.ref_name(p)),
                span,
            },
            Rule::bool_lit => Expr {
                kind: ExprKind::Bool(p.as_str().eq_ignore_ascii_case("true")),
                span,
            },
            Rule::condition => Expr {
                kind: ExprKind::Cond(self.condition(p)),
                span,
            },
            _ => Expr {
                kind: ExprKind::Bool(true),
                span,
            },
        }
    }

    /// The name of a `pattern@…`/`ipblock@…` reference, spanning the whole
    /// reference so diagnostics underline `pattern@scope/name`.
    fn ref_name(&self, p: Pair<'_, Rule>) -> Word {
        let span = self.span(&p);
        let text = p
            .into_inner()
            .find(|c| c.as_rule() == Rule::object_name)
            .map_or(String::new(), |c| c.as_str().to_string());
        Word {
            text,
            quoted: false,
            span,
        }
    }

    fn condition(&self, p: Pair<'_, Rule>) -> Condition {
        let mut inner = p.into_inner();
        let f = inner.next().expect("grammar: condition has a field");
        let field_span = self.span(&f);
        let field = match f.as_rule() {
            Rule::f_header => Field::Header(self.first_word(f)),
            Rule::f_query_param => Field::QueryParam(self.first_word(f)),
            Rule::f_method => Field::Method,
            Rule::f_host => Field::Host,
            Rule::f_path => Field::Path,
            Rule::f_query => Field::Query,
            Rule::f_url => Field::Url,
            Rule::f_ip => Field::Ip,
            Rule::f_dst_ip => Field::DstIp,
            Rule::f_port => Field::Port,
            _ => Field::Proto,
        };
        let t = inner.next().expect("grammar: condition has a test");
        let op_span = self.span(&t);
        let test = match t.as_rule() {
            Rule::presence => {
                if t.as_str().eq_ignore_ascii_case("present") {
                    Test::Present
                } else {
                    Test::Absent
                }
            }
            Rule::set_test => {
                let mut negated = false;
                let mut set = SetExpr::Literal(Vec::new(), op_span);
                for c in t.into_inner() {
                    match c.as_rule() {
                        Rule::set_neg => negated = true,
                        Rule::set_literal => {
                            let s = self.span(&c);
                            set = SetExpr::Literal(self.words(c), s);
                        }
                        Rule::ipblock_ref => set = SetExpr::Ipblock(self.ref_name(c)),
                        _ => {}
                    }
                }
                Test::In { negated, set }
            }
            _ => {
                let mut c = t.into_inner();
                let op = c.next().map_or("==", |o| o.as_str()).to_ascii_lowercase();
                let op = match op.as_str() {
                    "!=" => CmpOp::Ne,
                    "~" => CmpOp::Match,
                    "~*" => CmpOp::IMatch,
                    "!~" => CmpOp::NotMatch,
                    "!~*" => CmpOp::NotIMatch,
                    "starts_with" => CmpOp::StartsWith,
                    "ends_with" => CmpOp::EndsWith,
                    "contains" => CmpOp::Contains,
                    _ => CmpOp::Eq,
                };
                let value = c.next().map(|v| self.word(v)).unwrap_or(Word {
                    text: String::new(),
                    quoted: false,
                    span: op_span,
                });
                Test::Cmp(op, value)
            }
        };
        Condition {
            field,
            field_span,
            test,
            op_span,
        }
    }

    fn rule_prop(&self, p: Pair<'_, Rule>) -> Option<Prop> {
        let span = self.span(&p);
        let prop = match p.as_rule() {
            Rule::when => RuleProp::When(self.expr(p.into_inner().next()?)),
            Rule::priority => RuleProp::Priority(self.first_word(p)),
            Rule::sites => RuleProp::Sites(self.words(p)),
            Rule::enabled => RuleProp::Enabled(self.first_word(p)),
            Rule::shadow => RuleProp::Shadow,
            Rule::allow_undecided => RuleProp::AllowUndecided,
            Rule::comment_prop => RuleProp::Comment(self.first_word(p)),
            Rule::allow => RuleProp::Action(ActionDecl::Allow),
            Rule::log => RuleProp::Action(ActionDecl::Log),
            Rule::drop => RuleProp::Action(ActionDecl::Drop),
            Rule::deny => {
                let mut status = None;
                let mut reason = None;
                for c in p.into_inner() {
                    match c.as_rule() {
                        Rule::status_code => status = Some(self.word(c)),
                        Rule::string => reason = Some(self.word(c)),
                        _ => {}
                    }
                }
                RuleProp::Action(ActionDecl::Deny(status, reason))
            }
            Rule::throttle => RuleProp::Action(ActionDecl::Throttle(Box::new(self.throttle(p)?))),
            _ => return None,
        };
        Some(Prop { prop, span })
    }

    fn throttle(&self, p: Pair<'_, Rule>) -> Option<ThrottleDecl> {
        let mut inner = p.into_inner();
        let limit = self.word(inner.next()?);
        let unit = self.word(inner.next()?);
        let period = self.word(inner.next()?);
        let mut t = ThrottleDecl {
            limit,
            unit,
            period,
            burst: None,
            by: Vec::new(),
            by_span: None,
            ban: None,
            status: None,
            reason: None,
            bucket: None,
            shared: None,
        };
        for opt in inner {
            match opt.as_rule() {
                Rule::t_burst => t.burst = Some(self.first_word(opt)),
                Rule::t_ban => t.ban = Some(self.first_word(opt)),
                Rule::t_status => t.status = Some(self.first_word(opt)),
                Rule::t_reason => t.reason = Some(self.first_word(opt)),
                Rule::t_bucket => t.bucket = Some(self.first_word(opt)),
                Rule::t_shared => t.shared = Some(self.span(&opt)),
                Rule::t_by => {
                    t.by_span = Some(self.span(&opt));
                    for k in opt.into_inner() {
                        let ks = self.span(&k);
                        t.by.push(match k.as_rule() {
                            Rule::k_header => KeyDecl::Header(self.first_word(k)),
                            Rule::k_query => KeyDecl::Query(self.first_word(k)),
                            Rule::k_prefix => {
                                let mut w = self.words(k).into_iter();
                                let v4 = w.next()?;
                                KeyDecl::Prefix(v4, w.next(), ks)
                            }
                            _ => KeyDecl::Word(self.word(k)),
                        });
                    }
                }
                _ => {}
            }
        }
        Some(t)
    }

    fn test<'i>(
        &self,
        mut inner: impl Iterator<Item = Pair<'i, Rule>>,
        span: Span,
    ) -> Option<Item> {
        let name = self.word(inner.next()?);
        let mut t = TestDecl {
            name,
            site: None,
            samples: Vec::new(),
            replays: Vec::new(),
            expects: Vec::new(),
            span,
        };
        for p in inner {
            let pspan = self.span(&p);
            match p.as_rule() {
                Rule::t_site => t.site = Some(self.first_word(p)),
                Rule::t_replay => {
                    let mut label = None;
                    let mut path = None;
                    let mut format: Option<Word> = None;
                    let mut captured: Option<Word> = None;
                    let mut ip: Option<Word> = None;
                    let mut repeated = Vec::new();
                    for c in p.into_inner() {
                        let slot = match c.as_rule() {
                            Rule::ident => {
                                label = Some(self.word(c));
                                continue;
                            }
                            Rule::string => {
                                path = Some(self.word(c));
                                continue;
                            }
                            Rule::r_format => &mut format,
                            Rule::r_captured => &mut captured,
                            Rule::r_ip => &mut ip,
                            _ => continue,
                        };
                        let w = self.first_word(c);
                        match slot {
                            Some(_) => repeated.push(w),
                            None => *slot = Some(w),
                        }
                    }
                    // One more than lowering takes, so that it says so.
                    if t.replays.len() <= 1_000 {
                        t.replays.push(ReplayDecl {
                            label,
                            path: path?,
                            format,
                            captured,
                            ip,
                            repeated,
                            span: pspan,
                        });
                    }
                }
                Rule::request_block | Rule::packet_block => {
                    let mut s = SampleDecl {
                        is_packet: p.as_rule() == Rule::packet_block,
                        label: None,
                        fields: Vec::new(),
                        headers: Vec::new(),
                        syn: None,
                        repeat: None,
                        at: None,
                        span: pspan,
                    };
                    for c in p.into_inner() {
                        let cspan = self.span(&c);
                        match c.as_rule() {
                            Rule::ident => s.label = Some(self.word(c)),
                            Rule::s_header | Rule::s_field => {
                                let mut w = c.into_inner().map(|x| self.word(x));
                                if let (Some(a), Some(b)) = (w.next(), w.next()) {
                                    if s.fields.len() + s.headers.len() < 10_000 {
                                        if a.quoted {
                                            s.headers.push((a, b));
                                        } else {
                                            s.fields.push((a, b));
                                        }
                                    }
                                }
                            }
                            Rule::s_syn => s.syn = Some(cspan),
                            Rule::s_at => s.at = Some(self.first_word(c)),
                            Rule::s_repeat => {
                                let mut w = self.words(c).into_iter();
                                if let Some(n) = w.next() {
                                    s.repeat = Some((n, w.next()));
                                }
                            }
                            _ => {}
                        }
                    }
                    t.samples.push(s);
                }
                Rule::expect => {
                    let mut label = None;
                    let mut quantity = None;
                    let mut verdict = None;
                    let mut rule = None;
                    for c in p.into_inner() {
                        match c.as_rule() {
                            Rule::ident => label = Some(self.word(c)),
                            Rule::quantity => quantity = Some(self.word(c)),
                            Rule::verdict => verdict = Some(self.word(c)),
                            Rule::rule_name => rule = Some(self.word(c)),
                            _ => {}
                        }
                    }
                    t.expects.push(ExpectDecl {
                        label,
                        quantity: quantity?,
                        verdict: verdict?,
                        rule,
                        span: pspan,
                    });
                }
                _ => {}
            }
        }
        Some(Item::Test(t))
    }
}

fn is_keyword(r: Rule) -> bool {
    matches!(
        r,
        Rule::kw_include
            | Rule::kw_ipblock
            | Rule::kw_pattern
            | Rule::kw_rule
            | Rule::kw_test
            | Rule::kw_replay
            | Rule::kw_deny
            | Rule::kw_for
            | Rule::kw_by
    )
}

/// Undoes string escapes: `\"` and `\\`. Any other backslash is kept, so
/// regexes read naturally: `"^Mozilla/5\.0"` is the regex `^Mozilla/5\.0`.
pub fn unescape(s: &str) -> String {
    unescape_mapped(s).0
}

/// Like [`unescape`], also returning for each output byte its offset in `s`.
pub fn unescape_mapped(s: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(s.len());
    let mut map = Vec::with_capacity(s.len());
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let (at, ch) = match (c, it.peek()) {
            ('\\', Some(&(j, n))) if n == '"' || n == '\\' => {
                it.next();
                (j, n)
            }
            _ => (i, c),
        };
        for _ in 0..ch.len_utf8() {
            map.push(at);
        }
        out.push(ch);
    }
    (out, map)
}

/// Finds the first place where parentheses nest deeper than `max`, skipping
/// strings and comments. Parsing such input would recurse without bound.
fn too_deep(text: &str, max: usize) -> Option<usize> {
    let b = text.as_bytes();
    let (mut i, mut depth) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Start offsets of lines that begin (at column 1) with a top-level keyword.
fn item_starts(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut off = 0;
    for line in text.split_inclusive('\n') {
        let lower: String = line
            .chars()
            .take(9)
            .collect::<String>()
            .to_ascii_lowercase();
        if ["ipblock", "pattern", "rule", "test", "include"]
            .iter()
            .any(|k| lower.starts_with(k) && lower[k.len()..].starts_with([' ', '\t', '"']))
        {
            out.push(off);
        }
        off += line.len();
    }
    out
}

/// Parses one source file. Syntax errors are recovered from at item
/// boundaries (lines starting with a top-level keyword), so a run reports
/// every broken item, not just the first.
pub fn parse_file(
    src: &SourceFile,
    file: FileId,
    limits: &ParseLimits,
    diags: &mut Diagnostics,
) -> File {
    if let Some(at) = too_deep(&src.text, limits.max_depth) {
        diags.push(
            Diagnostic::error(
                code::TOO_DEEP,
                format!("expression nests deeper than {} parentheses", limits.max_depth),
            )
            .primary(src.span(file, at, at + 1), "too deep here")
            .hint("split the condition into named patterns and reference them with pattern@scope/name"),
        );
        return File::default();
    }
    match RctlParser::parse(Rule::file, &src.text) {
        Ok(mut pairs) => {
            let b = Builder { file, src, base: 0 };
            let items = pairs
                .next()
                .map(|f| f.into_inner().filter_map(|p| b.item(p)).collect())
                .unwrap_or_default();
            File { items }
        }
        Err(whole) => {
            let mut starts = item_starts(&src.text);
            if starts.first() != Some(&0) {
                starts.insert(0, 0);
            }
            let mut items = Vec::new();
            let mut chunk_errors = Diagnostics::default();
            for (i, &s) in starts.iter().enumerate() {
                let e = starts.get(i + 1).copied().unwrap_or(src.text.len());
                let chunk = &src.text[s..e];
                if chunk.trim().is_empty()
                    || chunk
                        .lines()
                        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
                {
                    continue;
                }
                match RctlParser::parse(Rule::single_item, chunk) {
                    Ok(mut pairs) => {
                        let b = Builder { file, src, base: s };
                        if let Some(p) = pairs.next() {
                            items.extend(p.into_inner().filter_map(|p| b.item(p)));
                        }
                    }
                    Err(e) => chunk_errors.push(syntax_diag(src, file, s, &e)),
                }
            }
            if chunk_errors.has_errors() {
                diags.extend(chunk_errors);
            } else {
                diags.push(syntax_diag(src, file, 0, &whole));
            }
            File { items }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (File, Diagnostics) {
        let src = SourceFile::new("t.rctl".into(), text.into());
        let mut d = Diagnostics::default();
        let f = parse_file(&src, 0, &ParseLimits::default(), &mut d);
        (f, d)
    }

    #[test]
    fn every_broken_item_is_reported() {
        let (f, d) = parse(
            "rule a { when path == }\nrule ok { when path == \"/\" deny 403 }\nrule b { when ( deny }\n",
        );
        assert_eq!(d.error_count(), 2, "{d:?}");
        assert_eq!(f.items.len(), 1);
        let lines: Vec<u32> = d.iter().map(|d| d.location().unwrap().line).collect();
        assert_eq!(lines, vec![1, 3]);
    }

    #[test]
    fn nesting_is_limited_before_pest_recurses() {
        let deep = format!(
            "rule a {{ when {}path == \"/\"{} deny }}",
            "(".repeat(10_000),
            ")".repeat(10_000)
        );
        let (_, d) = parse(&deep);
        assert_eq!(d.iter().next().unwrap().code, code::TOO_DEEP);
    }

    #[test]
    fn stacked_nots_collapse() {
        let text = format!(
            "rule a {{ when {} path == \"/\" deny }}",
            "not ".repeat(10_001)
        );
        let (f, d) = parse(&text);
        assert!(!d.has_errors());
        let Item::Rule(r) = &f.items[0] else { panic!() };
        let RuleProp::When(e) = &r.props[0].prop else {
            panic!()
        };
        let ExprKind::Not(inner) = &e.kind else {
            panic!("{e:?}")
        };
        assert!(matches!(inner.kind, ExprKind::Cond(_)));
    }

    #[test]
    fn spans_point_at_nodes() {
        let (f, _) = parse("pattern ua/x {\n  header(\"User-Agent\") ~* \"^curl\"\n}\n");
        let Item::Pattern(p) = &f.items[0] else {
            panic!()
        };
        let ExprKind::Cond(c) = &p.body.kind else {
            panic!()
        };
        assert_eq!((c.field_span.line, c.field_span.col), (2, 3));
        let Test::Cmp(op, v) = &c.test else { panic!() };
        assert_eq!(*op, CmpOp::IMatch);
        assert_eq!(v.text, "^curl");
        assert_eq!((v.span.line, v.span.col), (2, 27));
    }
}
