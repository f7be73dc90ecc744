//! Lowering of expressions and conditions: field types, operators, values,
//! regexes and pattern references.

use crate::artifact::MAX_COND_DEPTH;
use crate::ast::{self, CmpOp, Condition, Expr, ExprKind, Field, SetExpr, Test, Word};
use crate::cidr::{parse_cidr, PrefixSet};
use crate::diag::{code, Diagnostic};
use crate::ir::{Atom, Cond, Proto, StrField, StrOp};
use crate::lower::Lowerer;
use crate::source::Span;
use crate::value::normalize_path;

/// Names an expression references: (patterns, ipblocks).
pub(crate) type Uses = (Vec<String>, Vec<String>);

impl Lowerer<'_> {
    /// Lowers (once) the pattern called `name` and every pattern it
    /// references, dependencies first.
    ///
    /// A depth-first walk with its own stack, not recursion: a chain of
    /// references may be as long as the input. Cycles are reported where
    /// they close; the inlined result is bounded by the size and depth
    /// limits at each reference (see [`Lowerer::inline`]).
    pub(crate) fn pattern_cond(&mut self, name: &str) -> Option<Cond> {
        if let Some((c, _, _)) = self.pattern_conds.get(name) {
            return c.clone();
        }
        if self.in_progress.contains(name) {
            // A cycle through `name`: reported where the walk found it.
            return None;
        }
        let root = self.patterns.get(name)?.decl;
        struct Frame<'d> {
            name: String,
            decl: &'d ast::PatternDecl,
            refs: Vec<&'d Word>,
            next: usize,
        }
        let mut chain: Vec<String> = vec![name.to_string()];
        self.in_progress.insert(name.to_string());
        let mut stack = vec![Frame {
            name: name.to_string(),
            decl: root,
            refs: pattern_refs(&root.body),
            next: 0,
        }];
        while let Some(top) = stack.last_mut() {
            if let Some(&w) = top.refs.get(top.next) {
                top.next += 1;
                let n = w.text.as_str();
                if self.pattern_conds.contains_key(n) {
                    continue;
                }
                let Some(d) = self.patterns.get(n).map(|d| d.decl) else {
                    continue; // reported as unknown when the body is lowered
                };
                if self.in_progress.contains(n) {
                    self.cycle(n, &chain, w.span, d.name.span);
                    continue;
                }
                chain.push(n.to_string());
                self.in_progress.insert(n.to_string());
                stack.push(Frame {
                    name: n.to_string(),
                    decl: d,
                    refs: pattern_refs(&d.body),
                    next: 0,
                });
                continue;
            }
            let Some(f) = stack.pop() else { break };
            chain.pop();
            self.in_progress.remove(&f.name);
            let errors = self.diags.error_count();
            let mut uses = Uses::default();
            let c = self.expr(&f.decl.body, &mut uses);
            let c = (self.diags.error_count() == errors).then_some(c);
            self.pattern_conds.insert(f.name, (c, uses.0, uses.1));
        }
        self.pattern_conds.get(name).and_then(|x| x.0.clone())
    }

    fn cycle(&mut self, name: &str, chain: &[String], at: Span, decl: Span) {
        let from = chain.iter().rposition(|n| n == name).unwrap_or(0);
        let mut names: Vec<&str> = chain[from..].iter().map(String::as_str).collect();
        if names.len() > 8 {
            let tail = names.split_off(names.len() - 3);
            names.truncate(3);
            names.push("…");
            names.extend(tail);
        }
        self.diags.push(
            Diagnostic::error(
                code::REF_CYCLE,
                format!(
                    "pattern `{name}` references itself: {} -> {name}",
                    names.join(" -> ")
                ),
            )
            .primary(at, "cycle closes here")
            .secondary(decl, "pattern defined here")
            .hint("a pattern cannot include itself, directly or through others"),
        );
    }

    pub(crate) fn expr(&mut self, e: &Expr, uses: &mut Uses) -> Cond {
        match &e.kind {
            ExprKind::Or(v) => Cond::Or(v.iter().map(|x| self.expr(x, uses)).collect()),
            ExprKind::And(v) => Cond::And(v.iter().map(|x| self.expr(x, uses)).collect()),
            ExprKind::Not(x) => Cond::Not(Box::new(self.expr(x, uses))),
            ExprKind::Paren(x) => self.expr(x, uses),
            ExprKind::Bool(true) => Cond::True,
            ExprKind::Bool(false) => Cond::False,
            ExprKind::PatternRef(w) => {
                if !self.patterns.contains_key(&w.text) {
                    self.unknown("pattern", w);
                    return Cond::True;
                }
                uses.0.push(w.text.clone());
                match self.pattern_cond(&w.text) {
                    Some(c) => self.inline(c, w.span),
                    None => Cond::True,
                }
            }
            ExprKind::IpblockRef(w) => match self.ipblock_ref(w, uses) {
                Some(i) => self.atom(Atom::Ip(i)),
                None => Cond::True,
            },
            ExprKind::Cond(c) => self.condition(c, uses).unwrap_or(Cond::True),
        }
    }

    /// A pattern's condition, to be pasted in at `at`, unless it is
    /// larger or deeper than the limits allow (then an error, and `true`
    /// in its place).
    fn inline(&mut self, c: Cond, at: Span) -> Cond {
        let (nodes, depth) = cond_metrics(&c);
        if nodes > self.opts.max_cond_nodes {
            self.diags.push(
                Diagnostic::error(
                    code::LIMIT,
                    format!(
                        "condition grows past {} nodes once patterns are inlined",
                        self.opts.max_cond_nodes
                    ),
                )
                .primary(at, "inlined here")
                .hint("patterns that reference one pattern many times multiply; simplify them"),
            );
            return Cond::True;
        }
        if depth > MAX_COND_DEPTH {
            self.diags.push(too_deep(at, "inlined here", depth));
            return Cond::True;
        }
        c
    }

    /// Reports a rule's condition nested deeper than an artifact holds.
    pub(crate) fn check_depth(&mut self, c: &Cond, at: Span) {
        let (_, depth) = cond_metrics(c);
        if depth > MAX_COND_DEPTH {
            self.diags.push(too_deep(at, "this condition", depth));
        }
    }

    fn ipblock_ref(&mut self, w: &Word, uses: &mut Uses) -> Option<u32> {
        if !self.ipblocks.contains_key(&w.text) {
            self.unknown("ipblock", w);
            return None;
        }
        uses.1.push(w.text.clone());
        self.ipblock_set(&w.text)
    }

    fn unknown(&mut self, kind: &str, w: &Word) {
        let names: Vec<&String> = if kind == "pattern" {
            self.patterns.keys().collect()
        } else {
            self.ipblocks.keys().collect()
        };
        let best = names
            .iter()
            .map(|n| (crate::diag::edit_distance(n, &w.text), *n))
            .filter(|(d, _)| *d <= 3)
            .min();
        let hint = match best {
            Some((_, n)) => format!("did you mean `{kind}@{n}`?"),
            None => format!(
                "define it with `{kind} {} {{ … }}` in any file of the ruleset",
                w.text
            ),
        };
        self.diags.push(
            Diagnostic::error(code::UNKNOWN_REF, format!("unknown {kind} `{}`", w.text))
                .primary(w.span, "not defined")
                .hint(hint),
        );
    }

    fn type_error(&mut self, span: Span, msg: String, label: &str, hint: &str) -> Option<Cond> {
        self.diags.push(
            Diagnostic::error(code::TYPE, msg)
                .primary(span, label.to_string())
                .hint(hint.to_string()),
        );
        None
    }

    fn condition(&mut self, c: &Condition, uses: &mut Uses) -> Option<Cond> {
        let field = match &c.field {
            Field::Method => StrField::Method,
            Field::Host => StrField::Host,
            Field::Path => StrField::Path,
            Field::Query => StrField::Query,
            Field::Url => StrField::Url,
            Field::QueryParam(w) => StrField::QueryParam(w.text.clone()),
            Field::Header(w) => {
                if w.text.is_empty() || !w.text.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                    return self.type_error(
                        w.span,
                        format!("`{}` is not a header name", w.text),
                        "invalid header name",
                        "header names are visible ASCII without `:`",
                    );
                }
                StrField::Header(w.text.to_ascii_lowercase())
            }
            Field::Ip => return self.ip_condition(c, uses, false),
            Field::DstIp => return self.ip_condition(c, uses, true),
            Field::Port => return self.port_condition(c),
            Field::Proto => return self.proto_condition(c),
        };
        match &c.test {
            Test::Present | Test::Absent => {
                if !matches!(field, StrField::Header(_) | StrField::QueryParam(_)) {
                    return self.type_error(
                        c.op_span,
                        format!("`present`/`absent` do not apply to `{}`", field.display()),
                        "only for header(\"…\") and query(\"…\")",
                        "every request has a method, host and path",
                    );
                }
                let a = self.atom(Atom::Present(field));
                Some(if matches!(c.test, Test::Absent) {
                    Cond::Not(Box::new(a))
                } else {
                    a
                })
            }
            Test::In { negated, set } => {
                let SetExpr::Literal(values, _) = set else {
                    let SetExpr::Ipblock(w) = set else {
                        return None;
                    };
                    uses.1.push(w.text.clone());
                    return self.type_error(
                        w.span,
                        format!(
                            "`ipblock@{}` is a set of addresses, but `{}` is a string field",
                            w.text,
                            field.display()
                        ),
                        "address set",
                        "match the client address with `ip in ipblock@…`",
                    );
                };
                let mut out = Vec::with_capacity(values.len());
                for v in values {
                    out.push(self.string_value(&field, v)?);
                }
                out.sort();
                out.dedup();
                let a = self.atom(Atom::Str {
                    field,
                    op: StrOp::In(out),
                });
                Some(if *negated { Cond::Not(Box::new(a)) } else { a })
            }
            Test::Cmp(op, v) => {
                let text = self.string_value(&field, v)?;
                let (op_ir, negated) = match op {
                    CmpOp::Eq => (StrOp::Eq(text), false),
                    CmpOp::Ne => (StrOp::Eq(text), true),
                    CmpOp::StartsWith => (StrOp::Prefix(text), false),
                    CmpOp::EndsWith => (StrOp::Suffix(text), false),
                    CmpOp::Contains => (StrOp::Contains(text), false),
                    CmpOp::Match | CmpOp::IMatch | CmpOp::NotMatch | CmpOp::NotIMatch => {
                        // Hosts compare case-insensitively everywhere.
                        let ci = matches!(op, CmpOp::IMatch | CmpOp::NotIMatch)
                            || field == StrField::Host;
                        self.check_regex(&v.text, ci, v)?;
                        (
                            StrOp::Regex {
                                pattern: v.text.clone(),
                                ci,
                            },
                            matches!(op, CmpOp::NotMatch | CmpOp::NotIMatch),
                        )
                    }
                };
                let a = self.atom_at(Atom::Str { field, op: op_ir }, v.span);
                Some(if negated { Cond::Not(Box::new(a)) } else { a })
            }
        }
    }

    /// Checks a string operand and normalises it for its field.
    fn string_value(&mut self, field: &StrField, v: &Word) -> Option<String> {
        if !v.quoted {
            let bare_ok =
                *field == StrField::Method && v.text.bytes().all(|b| b.is_ascii_alphabetic());
            if !bare_ok {
                if parse_cidr(&v.text).is_ok() {
                    self.type_error(
                        v.span,
                        format!(
                            "type error: `{}` is an address, but `{}` is a string field",
                            v.text,
                            field.display()
                        ),
                        "address on a string field",
                        "addresses and CIDRs go with `ip`: `ip in { … }`",
                    );
                } else {
                    self.type_error(
                        v.span,
                        format!("`{}` must be a quoted string", v.text),
                        "unquoted value",
                        &format!("write \"{}\"", v.text),
                    );
                }
                return None;
            }
        }
        Some(match field {
            StrField::Host => v.text.to_ascii_lowercase(),
            StrField::Path => normalize_path(&v.text),
            _ => v.text.clone(),
        })
    }

    fn check_regex(&mut self, pattern: &str, ci: bool, v: &Word) -> Option<()> {
        self.regex_count += 1;
        if self.regex_count == self.opts.max_regexes + 1 {
            self.diags.push(
                Diagnostic::error(
                    code::LIMIT,
                    format!("more than {} regexes in the ruleset", self.opts.max_regexes),
                )
                .primary(v.span, "the limit is crossed here")
                .hint("use starts_with, ends_with, contains or `in { … }` where a literal will do"),
            );
            return None;
        }
        let built = crate::validate::build_regex(pattern, ci, self.opts.max_regex_bytes);
        let Err(err) = built else { return Some(()) };
        let (msg, offset) = match err.syntax_error() {
            Some(regex_syntax::Error::Parse(e)) => {
                (e.kind().to_string(), Some(e.span().start.offset))
            }
            Some(regex_syntax::Error::Translate(e)) => {
                (e.kind().to_string(), Some(e.span().start.offset))
            }
            Some(other) => (other.to_string(), None),
            None if err.size_limit().is_some() => (
                format!(
                    "compiled regex exceeds the size limit of {} bytes",
                    self.opts.max_regex_bytes
                ),
                None,
            ),
            None => (err.to_string(), None),
        };
        let span = match (offset, self.map.get(v.span.file)) {
            (Some(o), Some(src)) if v.quoted => {
                let raw = src
                    .text
                    .get(v.span.start as usize + 1..v.span.end as usize - 1)
                    .unwrap_or("");
                let (_, map) = crate::parse::unescape_mapped(raw);
                let at = map.get(o).copied().unwrap_or(raw.len());
                let start = v.span.start as usize + 1 + at;
                let len = src.text[start..].chars().next().map_or(1, char::len_utf8);
                src.span(v.span.file, start, start + len)
            }
            _ => v.span,
        };
        self.diags.push(
            Diagnostic::error(code::BAD_REGEX, format!("invalid regex: {msg}"))
                .primary(span, msg)
                .hint("regexes use regex-automata syntax (like Rust's regex crate); escape literal metacharacters with \\"),
        );
        None
    }

    /// `ip …` (the client's address) or, with `dst`, `dst_ip …`.
    fn ip_condition(&mut self, c: &Condition, uses: &mut Uses, dst: bool) -> Option<Cond> {
        let name = if dst { "dst_ip" } else { "ip" };
        let (set_index, negated) = match &c.test {
            Test::Cmp(op @ (CmpOp::Eq | CmpOp::Ne), v) => {
                let set = self.cidr_set(std::slice::from_ref(v))?;
                (self.inline_set(set), *op == CmpOp::Ne)
            }
            Test::Cmp(op, _) => {
                return self.type_error(
                    c.op_span,
                    format!("`{}` does not apply to `{name}`", op.as_str()),
                    "not an address operator",
                    &format!("compare addresses with ==, != or `{name} in {{ 192.0.2.0/24, … }}`"),
                );
            }
            Test::In {
                negated,
                set: SetExpr::Ipblock(w),
            } => (self.ipblock_ref(w, uses)?, *negated),
            Test::In {
                negated,
                set: SetExpr::Literal(vs, _),
            } => {
                let set = self.cidr_set(vs)?;
                (self.inline_set(set), *negated)
            }
            Test::Present | Test::Absent => {
                return self.type_error(
                    c.op_span,
                    format!("`present`/`absent` do not apply to `{name}`"),
                    "every packet has an address",
                    &format!("use `{name} in {{ … }}`"),
                );
            }
        };
        let a = self.atom(if dst {
            Atom::DstIp(set_index)
        } else {
            Atom::Ip(set_index)
        });
        Some(if negated { Cond::Not(Box::new(a)) } else { a })
    }

    fn cidr_set(&mut self, vs: &[Word]) -> Option<PrefixSet> {
        let mut cidrs = Vec::with_capacity(vs.len());
        let mut ok = true;
        for v in vs {
            match parse_cidr(&v.text) {
                Ok((c, hb)) if !v.quoted => {
                    if hb {
                        self.diags.push(
                            Diagnostic::warning(code::HOST_BITS, "CIDR has host bits set")
                                .primary(v.span, "host bits are ignored")
                                .hint("write the network address"),
                        );
                    }
                    cidrs.push(c);
                }
                Ok(_) => {
                    ok = false;
                    self.type_error(
                        v.span,
                        format!(
                            "`\"{}\"` is a string; addresses are written without quotes",
                            v.text
                        ),
                        "quoted address",
                        &format!("write {}", v.text),
                    );
                }
                Err(e) => {
                    ok = false;
                    let msg = if v.quoted {
                        format!(
                            "type error: \"{}\" is a string, but `ip` is an address field",
                            v.text
                        )
                    } else {
                        format!("invalid CIDR `{}`", v.text)
                    };
                    let code = if v.quoted { code::TYPE } else { code::BAD_CIDR };
                    self.diags.push(
                        Diagnostic::error(code, msg)
                            .primary(v.span, e.reason)
                            .hint("write an address or network like 192.0.2.0/24 or 2001:db8::/32"),
                    );
                }
            }
        }
        ok.then(|| PrefixSet::from_cidrs(cidrs))
    }

    /// The operands of `== v`, `!= v` or `[not] in { … }` (negated for
    /// `!=` and `not in`); any other test is a type error.
    fn eq_or_set<'c>(
        &mut self,
        c: &'c Condition,
        what: &str,
        hint: &str,
    ) -> Option<(Vec<&'c Word>, bool)> {
        match &c.test {
            Test::Cmp(op @ (CmpOp::Eq | CmpOp::Ne), v) => Some((vec![v], *op == CmpOp::Ne)),
            Test::In {
                negated,
                set: SetExpr::Literal(vs, _),
            } => Some((vs.iter().collect(), *negated)),
            _ => {
                self.type_error(
                    c.op_span,
                    format!("this test does not apply to `{what}`"),
                    &format!("not a {what} test"),
                    hint,
                );
                None
            }
        }
    }

    fn port_condition(&mut self, c: &Condition) -> Option<Cond> {
        let (values, negated) = self.eq_or_set(
            c,
            "port",
            "use port == 443, port != 80 or port in { 80, 443, 8000-8080 }",
        )?;
        let mut ranges = Vec::new();
        for v in values {
            let parsed = match v.text.split_once('-') {
                Some((a, b)) => a
                    .parse::<u16>()
                    .ok()
                    .zip(b.parse::<u16>().ok())
                    .filter(|(a, b)| a <= b),
                None => v.text.parse::<u16>().ok().map(|p| (p, p)),
            };
            match parsed {
                Some(r) if !v.quoted => ranges.push(r),
                _ => {
                    self.diags.push(
                        Diagnostic::error(code::BAD_NUMBER, format!("invalid port `{}`", v.text))
                            .primary(v.span, "expected 0 to 65535 or a range like 8000-8080")
                            .hint("ports are unquoted numbers"),
                    );
                    return None;
                }
            }
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u16, u16)> = Vec::new();
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(last) if u32::from(a) <= u32::from(last.1) + 1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let a = self.atom(Atom::Port(merged));
        Some(if negated { Cond::Not(Box::new(a)) } else { a })
    }

    fn proto_condition(&mut self, c: &Condition) -> Option<Cond> {
        let (values, negated) =
            self.eq_or_set(c, "proto", "use proto == tcp or proto in { tcp, udp }")?;
        let mut protos = Vec::new();
        for v in values {
            protos.push(match v.text.to_ascii_lowercase().as_str() {
                "tcp" => Proto::Tcp,
                "udp" => Proto::Udp,
                "icmp" | "icmpv6" => Proto::Icmp,
                _ => {
                    self.diags.push(
                        Diagnostic::error(
                            code::BAD_VALUE,
                            format!("unknown protocol `{}`", v.text),
                        )
                        .primary(v.span, "expected tcp, udp or icmp")
                        .hint("the packet plane knows tcp, udp and icmp"),
                    );
                    return None;
                }
            });
        }
        protos.sort();
        protos.dedup();
        let a = self.atom(Atom::Proto(protos));
        Some(if negated { Cond::Not(Box::new(a)) } else { a })
    }
}

/// The `pattern@…` references of an expression, in source order.
fn pattern_refs(e: &Expr) -> Vec<&Word> {
    let mut out = Vec::new();
    let mut todo = vec![e];
    while let Some(e) = todo.pop() {
        match &e.kind {
            ExprKind::Or(v) | ExprKind::And(v) => todo.extend(v.iter().rev()),
            ExprKind::Not(x) | ExprKind::Paren(x) => todo.push(x),
            ExprKind::PatternRef(w) => out.push(w),
            ExprKind::Bool(_) | ExprKind::IpblockRef(_) | ExprKind::Cond(_) => {}
        }
    }
    out
}

/// Node count and nesting depth of a condition, without recursion.
fn cond_metrics(c: &Cond) -> (usize, usize) {
    let (mut nodes, mut deepest) = (0, 0);
    let mut todo = vec![(c, 1usize)];
    while let Some((c, d)) = todo.pop() {
        nodes += 1;
        deepest = deepest.max(d);
        match c {
            Cond::True | Cond::False | Cond::Atom(_) => {}
            Cond::Not(x) => todo.push((x, d + 1)),
            Cond::And(v) | Cond::Or(v) => todo.extend(v.iter().map(|x| (x, d + 1))),
        }
    }
    (nodes, deepest)
}

/// The error for a condition nested deeper than an artifact may hold.
fn too_deep(at: Span, label: &str, depth: usize) -> Diagnostic {
    Diagnostic::error(
        code::LIMIT,
        format!("condition nests {depth} levels deep once patterns are inlined, more than the limit of {MAX_COND_DEPTH}"),
    )
    .primary(at, label.to_string())
    .hint("every `and`, `or` and `not` inside a pattern adds its levels to the condition that references it; flatten the patterns or split the rule")
}
