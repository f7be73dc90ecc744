//! requestctl's objects as rctl rulesets: one for the Varnish actions of
//! each cluster (`varnish/<cluster>/`), one for its HAProxy actions
//! (`haproxy/<cluster>/`), each holding every ipblock (`ipblock-<scope>.rctl`),
//! every pattern its target can translate (`pattern-<scope>.rctl`) and its
//! rules (`<cluster>.rctl`), formatted as `rctl fmt` writes them.
//!
//! **Order.** requestctl's VCL for a site is its `hit-global`, `hit-<site>`,
//! `global` and `<site>` objects in that order (puppet's confd template
//! includes global before site; actions with `cache_miss_only: false` run
//! for hits too, before the lookup), each sorted by name (view.py sorts by
//! name after api.py's sort by priority, so priority does not change the
//! order there). HAProxy's is one list by name. rctl evaluates by priority,
//! then file order: the rules are written in requestctl's order, and
//! `priority` is kept, so the orders agree unless priorities differ, which
//! is a warning naming the pairs that change places.

mod pattern;

use crate::expr::{self, Tok};
use crate::model::{Body, Common, Entity, Object, Val};
use crate::{HeaderSchema, Options, OutFile, OutRuleset};
use rctl_compiler::cidr::{parse_cidr, PrefixSet};
use rctl_compiler::diag::{code, Diagnostic, Diagnostics};
use rctl_compiler::source::{SourceMap, Span};
use std::collections::{BTreeMap, BTreeSet};

/// Which server's translation a ruleset follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Flavor {
    /// requestctl's VCL (`request-actions`).
    Varnish,
    /// requestctl's HAProxy configuration (`request-haproxy-actions`).
    Haproxy,
}

pub(crate) struct Ctx<'a> {
    pub opts: &'a Options,
    pub sources: &'a SourceMap,
    pub diags: &'a mut Diagnostics,
    pub header_schema: HeaderSchema,
}

/// An rctl string literal: `"` and a `\` that would start an escape are
/// escaped; everything else stays as written.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' if matches!(it.peek(), None | Some('\\') | Some('"')) => out.push_str("\\\\"),
            '\n' | '\r' | '\t' => out.push(' '),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A multi-line comment as `#` lines (a one-line one is only the
/// `comment` property).
fn comment_lines(c: &str) -> String {
    let lines: Vec<&str> = c.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() < 2 {
        return String::new();
    }
    lines
        .iter()
        .map(|l| format!("# {}\n", l.trim_end()))
        .collect()
}

/// A comment on one line, for the `comment` property.
fn one_line(c: &str) -> String {
    c.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Decides the header schema of a tree (see [`HeaderSchema::New`]).
fn header_schema(objects: &[(Entity, Object)], opts: &Options) -> HeaderSchema {
    if let Some(s) = opts.header_schema {
        return s;
    }
    let newer = objects.iter().any(|(e, o)| match &o.body {
        Body::Pattern(p) => p.header_is_set.given,
        Body::Action(a) => a.common.priority.given,
        Body::HaproxyAction(_) => *e == Entity::HaproxyAction,
        Body::Ipblock(_) => false,
    });
    if newer {
        HeaderSchema::New
    } else {
        HeaderSchema::Old
    }
}

/// Writes the rulesets for every cluster of both targets.
pub(crate) fn map(
    objects: &[(Entity, Object)],
    opts: &Options,
    sources: &SourceMap,
    diags: &mut Diagnostics,
) -> Vec<OutRuleset> {
    let mut ctx = Ctx {
        opts,
        sources,
        diags,
        header_schema: header_schema(objects, opts),
    };
    let of = |e: Entity| objects.iter().filter(move |(k, _)| *k == e).map(|(_, o)| o);
    let ipblocks: BTreeMap<String, &Object> = of(Entity::Ipblock).map(|o| (o.slug(), o)).collect();
    let patterns: BTreeMap<String, &Object> = of(Entity::Pattern).map(|o| (o.slug(), o)).collect();
    let mut clusters: BTreeMap<(Flavor, String), Vec<&Object>> = BTreeMap::new();
    for (e, o) in objects {
        let flavor = match e {
            Entity::Action => Flavor::Varnish,
            Entity::HaproxyAction => Flavor::Haproxy,
            _ => continue,
        };
        clusters.entry((flavor, o.tag.clone())).or_default().push(o);
    }
    let mut out = Vec::new();
    for ((flavor, cluster), actions) in &clusters {
        let (refs, blocks) = ctx.references(actions, &patterns, &ipblocks);
        let mut files = ctx.ipblocks(&ipblocks, Some(&blocks));
        files.extend(ctx.patterns(&patterns, *flavor, Some(&refs)));
        let rules = ctx.rules(actions, *flavor, &ipblocks);
        files.push(formatted(format!("{cluster}.rctl"), rules));
        let dir = match flavor {
            Flavor::Varnish => format!("varnish/{cluster}"),
            Flavor::Haproxy => format!("haproxy/{cluster}"),
        };
        out.push(OutRuleset { dir, files });
    }
    // Every ipblock and pattern, used or not, so that nothing is lost
    // (as Varnish translates the patterns).
    if !(ipblocks.is_empty() && patterns.is_empty()) {
        let mut files = ctx.ipblocks(&ipblocks, None);
        files.extend(ctx.patterns(&patterns, Flavor::Varnish, None));
        out.push(OutRuleset {
            dir: "objects".into(),
            files,
        });
    }
    out
}

/// A file of patterns or rules, as `rctl fmt` writes it. (Ipblock files
/// are written in that form directly: formatting them parses every CIDR
/// again, most of the time a large block takes.)
fn formatted(name: String, text: String) -> OutFile {
    OutFile {
        text: format_rctl(&name, &text),
        name,
    }
}

/// `rctl fmt` of generated text (unchanged if it does not parse, which
/// `rctl check` then reports).
fn format_rctl(name: &str, text: &str) -> String {
    let src = rctl_compiler::source::SourceFile::new(name.into(), text.to_string());
    let mut d = Diagnostics::default();
    let file = rctl_compiler::parse::parse_file(&src, 0, &Default::default(), &mut d);
    if d.has_errors() {
        return text.to_string();
    }
    rctl_compiler::fmt::format_file(&file, &src)
}

impl Ctx<'_> {
    /// One file per ipblock scope. A bad CIDR is an error (requestctl's
    /// conftool drops it with a log line; rctl does not shrink a block
    /// quietly), or with `--lossy` a warning and left out.
    fn ipblocks(
        &mut self,
        ipblocks: &BTreeMap<String, &Object>,
        only: Option<&BTreeSet<String>>,
    ) -> Vec<OutFile> {
        let mut by_scope: BTreeMap<&str, String> = BTreeMap::new();
        for (slug, o) in ipblocks {
            if only.is_some_and(|s| !s.contains(slug)) {
                continue;
            }
            let Body::Ipblock(b) = &o.body else { continue };
            let text = by_scope.entry(o.tag.as_str()).or_default();
            text.push_str(&comment_lines(&b.comment.v));
            text.push_str(&format!("ipblock {slug} {{\n"));
            if !b.comment.v.is_empty() {
                text.push_str(&format!("  comment {}\n", quote(&one_line(&b.comment.v))));
            }
            for c in &b.cidrs {
                match parse_cidr(c.v.trim()) {
                    Ok(_) => {
                        text.push_str("  ");
                        text.push_str(c.v.trim());
                        text.push('\n');
                    }
                    Err(e) if self.opts.lossy => self.diags.push(
                        Diagnostic::warning(
                            code::IMPORT_CHANGED,
                            format!("invalid CIDR `{}` left out, as requestctl does", c.v),
                        )
                        .primary(c.span, e.reason),
                    ),
                    Err(e) => self.diags.push(
                        Diagnostic::error(code::BAD_CIDR, format!("invalid CIDR `{}`", c.v))
                            .primary(c.span, e.reason)
                            .hint("requestctl drops it from the block with a log line; fix it, or run with --lossy to drop it too"),
                    ),
                }
            }
            text.push_str("}\n\n");
        }
        by_scope
            .into_iter()
            .map(|(scope, mut text)| {
                // One newline at the end, as `rctl fmt` leaves it.
                text.truncate(text.trim_end().len());
                text.push('\n');
                OutFile {
                    name: format!("ipblock-{scope}.rctl"),
                    text,
                }
            })
            .collect()
    }

    /// One file per pattern scope: the patterns this target can translate
    /// (every one the cluster's actions reference must translate).
    fn patterns(
        &mut self,
        patterns: &BTreeMap<String, &Object>,
        flavor: Flavor,
        only: Option<&BTreeSet<String>>,
    ) -> Vec<OutFile> {
        let mut by_scope: BTreeMap<&str, String> = BTreeMap::new();
        for (slug, o) in patterns {
            let Body::Pattern(p) = &o.body else { continue };
            if only.is_some_and(|s| !s.contains(slug)) {
                continue;
            }
            // An unused pattern that does not translate is left out
            // quietly: its errors belong to the target that uses it.
            let t = if only.is_some() {
                self.pattern(p, o.span, slug, flavor)
            } else {
                let kept = std::mem::take(self.diags);
                let t = self.pattern(p, o.span, slug, flavor);
                *self.diags = kept;
                t
            };
            let Some(t) = t else {
                if only.is_none() {
                    self.diags.push(
                        Diagnostic::warning(
                            code::IMPORT_CHANGED,
                            format!("pattern {slug} is left out of objects/: it does not translate (see the errors of the rulesets that use it, or import it on its own)"),
                        )
                        .primary(o.span, "in this file"),
                    );
                }
                continue;
            };
            let text = by_scope.entry(o.tag.as_str()).or_default();
            text.push_str(&format!("pattern {slug} {{\n"));
            if !t.notes.is_empty() {
                text.push_str(&format!("  comment {}\n", quote(&t.notes.join("; "))));
            }
            text.push_str(&format!("  {}\n}}\n\n", t.cond));
        }
        by_scope
            .into_iter()
            .map(|(scope, text)| formatted(format!("pattern-{scope}.rctl"), text))
            .collect()
    }

    /// Parses every action's expression and checks its references; returns
    /// the patterns and the ipblocks they use.
    fn references(
        &mut self,
        actions: &[&Object],
        patterns: &BTreeMap<String, &Object>,
        ipblocks: &BTreeMap<String, &Object>,
    ) -> (BTreeSet<String>, BTreeSet<String>) {
        let (mut used, mut blocks) = (BTreeSet::new(), BTreeSet::new());
        for o in actions {
            let c = common(o);
            let Some(toks) = self.expression(c) else {
                continue;
            };
            for t in toks {
                let (slug, kind, known) = match &t.tok {
                    Tok::Pattern(s) => (s, "pattern", patterns.contains_key(s)),
                    Tok::Ipblock(s) => (s, "ipblock", ipblocks.contains_key(s)),
                    _ => continue,
                };
                if kind == "pattern" {
                    used.insert(slug.clone());
                } else {
                    blocks.insert(slug.clone());
                }
                if !known {
                    let dir = if kind == "pattern" {
                        "request-patterns"
                    } else {
                        "request-ipblocks"
                    };
                    self.diags.push(
                        Diagnostic::error(
                            code::UNKNOWN_REF,
                            format!("the {kind} {slug} is not defined"),
                        )
                        .primary(self.expr_span(c, t.at, t.end), format!("no {dir}/{slug}.yaml"))
                        .hint(format!("requestctl refuses this action too: add {dir}/{slug}.yaml, or fix the name")),
                    );
                }
            }
        }
        (used, blocks)
    }

    fn expression(&mut self, c: &Common) -> Option<Vec<expr::Token>> {
        match expr::parse(&c.expression.v) {
            Ok(t) => Some(t),
            Err(e) => {
                let span = if c.expression.given {
                    self.expr_span(c, e.at, e.end)
                } else {
                    c.expression.span
                };
                self.diags.push(
                    Diagnostic::error(code::SYNTAX, format!("invalid expression: {}", e.message))
                        .primary(span, "here")
                        .hint("requestctl's expressions are pattern@scope/name and ipblock@scope/name joined by AND, OR, AND NOT, OR NOT, with parentheses"),
                );
                None
            }
        }
    }

    /// The span of bytes `at..end` of an action's expression in its file.
    fn expr_span(&self, c: &Common, at: usize, end: usize) -> Span {
        within(self.sources, &c.expression, at, end)
    }

    /// requestctl cannot map overlapping blocks of one scope: HAProxy's
    /// `map_ip` and Varnish's netmapper give an address one block's name,
    /// the most specific, where rctl's sets contain it in each.
    fn overlaps(
        &mut self,
        actions: &[&Object],
        ipblocks: &BTreeMap<String, &Object>,
        flavor: Flavor,
    ) {
        let mut used: BTreeMap<&str, Vec<(&str, PrefixSet, Span)>> = BTreeMap::new();
        for o in actions {
            let c = common(o);
            let Ok(toks) = expr::parse(&c.expression.v) else {
                continue;
            };
            for t in toks {
                let Tok::Ipblock(s) = &t.tok else { continue };
                let Some((slug, b)) = ipblocks.get_key_value(s) else {
                    continue;
                };
                let Body::Ipblock(ib) = &b.body else { continue };
                let scope = b.tag.as_str();
                if flavor == Flavor::Varnish && scope == "abuse" {
                    continue;
                }
                if flavor == Flavor::Varnish && !matches!(scope, "cloud" | "known-clients") {
                    self.diags.push(
                        Diagnostic::warning(
                            code::IMPORT_CHANGED,
                            format!("requestctl's VCL translation refuses ipblock scope `{scope}` (it knows abuse, cloud and known-clients); rctl matches the client address in the block"),
                        )
                        .primary(self.expr_span(c, t.at, t.end), "not deployable with requestctl"),
                    );
                    continue;
                }
                let list = used.entry(scope).or_default();
                if list.iter().any(|x| x.0 == slug.as_str()) {
                    continue;
                }
                let set = PrefixSet::from_cidrs(
                    ib.cidrs
                        .iter()
                        .filter_map(|c| parse_cidr(c.v.trim()).ok().map(|x| x.0)),
                );
                list.push((slug.as_str(), set, self.expr_span(c, t.at, t.end)));
            }
        }
        for (scope, list) in used {
            for (i, a) in list.iter().enumerate() {
                for b in &list[..i] {
                    if a.1.intersects(&b.1) {
                        let how = match flavor {
                            Flavor::Varnish => "netmapper",
                            Flavor::Haproxy => "map_ip",
                        };
                        self.diags.push(
                            Diagnostic::warning(
                                code::IMPORT_CHANGED,
                                format!("ipblocks {} and {} of scope `{scope}` overlap: requestctl's {how} names one of them for an address in both (the most specific), rctl finds it in each", b.0, a.0),
                            )
                            .primary(a.2, "overlaps another block of its scope"),
                        );
                    }
                }
            }
        }
    }
}

/// The span of bytes `at..end` of a scalar's value in its YAML file: exact
/// when the scalar is written as it reads (plain, or quoted without
/// escapes), else the whole scalar.
pub(crate) fn within(sources: &SourceMap, v: &Val<String>, at: usize, end: usize) -> Span {
    let Some(src) = sources.get(v.span.file) else {
        return v.span;
    };
    let raw = src
        .text
        .get(v.span.start as usize..v.span.end as usize)
        .unwrap_or("");
    match raw.find(v.v.as_str()) {
        Some(k) if k <= 1 && !v.v.is_empty() => {
            let s = v.span.start as usize + k;
            let mut at = at.min(v.v.len());
            while !v.v.is_char_boundary(at) {
                at -= 1;
            }
            let mut end = end.max(at + 1).min(v.v.len());
            while !v.v.is_char_boundary(end) {
                end += 1;
            }
            src.span(v.span.file, s + at, s + end)
        }
        _ => v.span,
    }
}

fn common(o: &Object) -> &Common {
    match &o.body {
        Body::Action(a) => &a.common,
        Body::HaproxyAction(h) => &h.common,
        _ => unreachable!("clusters hold actions only"),
    }
}

mod rules;

#[cfg(test)]
mod tests {
    use super::format_rctl;
    use crate::{import_dump_text, Options};

    /// Ipblock files skip the formatter, so they must already be what it
    /// writes: comments of several lines, quotes, backslashes, `#`, IPv6,
    /// empty blocks, several blocks in a scope.
    #[test]
    fn ipblock_files_are_written_as_rctl_fmt_writes_them() {
        let dump = r##"
data: {cidrs: [192.0.2.0/24, "2001:DB8::/32", ' 198.51.100.7/32 '], comment: "two\n  lines # and \"quotes\" \\ here\n"}
metadata: {path: cloud/a, type: ipblock}
---
data: {cidrs: [], comment: ''}
metadata: {path: cloud/b, type: ipblock}
---
data: {cidrs: [10.0.0.0/8], comment: "#hash"}
metadata: {path: abuse/c, type: ipblock}
---
data: {cidrs: [10.1.0.0/16]}
metadata: {path: abuse/d, type: ipblock}
"##;
        let imp = import_dump_text("dump.yaml", dump.into(), &Options::default());
        assert!(!imp.diagnostics.has_errors());
        let files: Vec<_> = imp
            .rulesets
            .iter()
            .flat_map(|r| &r.files)
            .filter(|f| f.name.starts_with("ipblock-"))
            .collect();
        assert_eq!(files.len(), 2);
        for f in files {
            assert_eq!(format_rctl(&f.name, &f.text), f.text, "{}", f.name);
            assert!(f.text.contains("ipblock"), "{}", f.text);
        }
    }
}
