//! requestctl's YAML, read into a small tree whose every node keeps its
//! span, so that every diagnostic can point into the YAML file.
//!
//! requestctl reads its files with PyYAML's safe loader (YAML 1.1), so plain
//! scalars are resolved as PyYAML does for the types requestctl's schema
//! has: `yes`/`on`/`true` (any of PyYAML's spellings) are booleans, decimal,
//! `0x`, `0o`/`0` and `0b` integers (with `_`) are integers. Quoted scalars
//! are always strings.

use rctl_compiler::diag::{code, Diagnostic};
use rctl_compiler::source::{FileId, SourceFile, Span};
use saphyr_parser::{Event, Parser, ScalarStyle};
use std::collections::HashMap;

/// A YAML node.
#[derive(Debug, Clone)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// Where.
    pub span: Span,
}

/// The kinds of node.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A scalar as written (after YAML's unescaping and folding).
    Scalar {
        /// The text.
        text: String,
        /// Plain (unquoted, not a block scalar): its type is resolved.
        plain: bool,
    },
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<(Node, Node)>),
}

/// A plain scalar's type, as PyYAML's safe loader resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plain {
    /// `~`, `null` or nothing.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// Anything else.
    Str,
}

impl Node {
    /// The scalar's resolved type (`Str` for quoted scalars and
    /// collections are not scalars: `None`).
    pub fn plain(&self) -> Option<Plain> {
        match &self.kind {
            Kind::Scalar { text, plain: true } => Some(resolve(text)),
            Kind::Scalar { .. } => Some(Plain::Str),
            _ => None,
        }
    }

    /// A short description for messages: "a string", "a list", …
    pub fn what(&self) -> &'static str {
        match (&self.kind, self.plain()) {
            (Kind::Seq(_), _) => "a list",
            (Kind::Map(_), _) => "a mapping",
            (_, Some(Plain::Null)) => "null",
            (_, Some(Plain::Bool(_))) => "a boolean",
            (_, Some(Plain::Int(_))) => "a number",
            _ => "a string",
        }
    }
}

/// Resolves a plain scalar as PyYAML 1.1's safe loader does (for null,
/// booleans and integers; floats and timestamps are strings here, which
/// requestctl's schema has no use for).
pub fn resolve(s: &str) -> Plain {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Plain::Null,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Plain::Bool(true)
        }
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Plain::Bool(false)
        }
        _ => {}
    }
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = body.replace('_', "");
    let parsed = if let Some(h) = digits.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(b) = digits.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()
    } else if let Some(o) = digits.strip_prefix("0o") {
        i64::from_str_radix(o, 8).ok()
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8).ok()
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()
    } else {
        None
    };
    match parsed {
        Some(n) if !body.starts_with('_') => Plain::Int(if neg { -n } else { n }),
        _ => Plain::Str,
    }
}

/// Byte offset of a YAML marker (1-based line, 0-based column in
/// characters) in `src`.
fn offset(src: &SourceFile, line: usize, col: usize) -> usize {
    let text = &src.text;
    let mut start = 0usize;
    for _ in 1..line {
        match text[start..].find('\n') {
            Some(n) => start += n + 1,
            None => return text.len(),
        }
    }
    text[start..]
        .char_indices()
        .nth(col)
        .map_or(text.len(), |(i, _)| start + i)
}

struct Builder<'a> {
    src: &'a SourceFile,
    file: FileId,
    /// Open collections: the node so far, and a pending mapping key.
    stack: Vec<(Node, Option<Node>)>,
    anchors: HashMap<usize, Node>,
    /// Anchor ids of the open collections, to record when they close.
    open_anchors: Vec<usize>,
    docs: Vec<Node>,
}

impl Builder<'_> {
    fn span(&self, s: &saphyr_parser::Span) -> Span {
        let a = offset(self.src, s.start.line(), s.start.col());
        let b = offset(self.src, s.end.line(), s.end.col()).max(a);
        self.src.span(self.file, a, b)
    }

    fn add(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some((parent, key)) => match &mut parent.kind {
                Kind::Seq(items) => items.push(node),
                Kind::Map(entries) => match key.take() {
                    None => *key = Some(node),
                    Some(k) => entries.push((k, node)),
                },
                Kind::Scalar { .. } => {}
            },
        }
    }

    fn close(&mut self, end: Span) {
        if let Some((mut node, _)) = self.stack.pop() {
            node.span.end = end.end.max(node.span.start);
            if let Some(a) = self.open_anchors.pop().filter(|&a| a > 0) {
                self.anchors.insert(a, node.clone());
            }
            self.add(node);
        }
    }
}

/// Parses every document of a YAML stream. A syntax error is one
/// diagnostic at its position.
pub fn documents(src: &SourceFile, file: FileId) -> Result<Vec<Node>, Box<Diagnostic>> {
    let mut b = Builder {
        src,
        file,
        stack: Vec::new(),
        anchors: HashMap::new(),
        open_anchors: Vec::new(),
        docs: Vec::new(),
    };
    for ev in Parser::new_from_str(&src.text) {
        let (ev, span) = ev.map_err(|e| {
            let m = e.marker();
            let at = offset(src, m.line(), m.col());
            let end = (at + 1).min(src.text.len()).max(at);
            Box::new(
                Diagnostic::error(code::IMPORT_SHAPE, format!("invalid YAML: {}", e.info()))
                    .primary(src.span(file, at, end), "here")
                    .hint("requestctl's files are YAML mappings of field: value"),
            )
        })?;
        let sp = b.span(&span);
        match ev {
            Event::Scalar(text, style, anchor, _) => {
                let node = Node {
                    kind: Kind::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain,
                    },
                    span: sp,
                };
                if anchor > 0 {
                    b.anchors.insert(anchor, node.clone());
                }
                b.add(node);
            }
            Event::SequenceStart(anchor, _) => {
                b.stack.push((
                    Node {
                        kind: Kind::Seq(Vec::new()),
                        span: sp,
                    },
                    None,
                ));
                b.open_anchors.push(anchor);
            }
            Event::MappingStart(anchor, _) => {
                b.stack.push((
                    Node {
                        kind: Kind::Map(Vec::new()),
                        span: sp,
                    },
                    None,
                ));
                b.open_anchors.push(anchor);
            }
            Event::SequenceEnd | Event::MappingEnd => b.close(sp),
            Event::Alias(id) => {
                let node = b.anchors.get(&id).cloned().map(|mut n| {
                    n.span = sp;
                    n
                });
                match node {
                    Some(n) => b.add(n),
                    None => {
                        return Err(Box::new(
                            Diagnostic::error(code::IMPORT_SHAPE, "YAML alias to no anchor")
                                .primary(sp, "unknown alias"),
                        ))
                    }
                }
            }
            Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd
            | Event::Nothing => {}
        }
    }
    Ok(b.docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_resolve_as_pyyaml_does() {
        assert_eq!(resolve("yes"), Plain::Bool(true));
        assert_eq!(resolve("Off"), Plain::Bool(false));
        assert_eq!(resolve("1_000"), Plain::Int(1000));
        assert_eq!(resolve("0x1f"), Plain::Int(31));
        assert_eq!(resolve("010"), Plain::Int(8));
        assert_eq!(resolve("-5"), Plain::Int(-5));
        assert_eq!(resolve("~"), Plain::Null);
        assert_eq!(resolve("/w/api.php"), Plain::Str);
        assert_eq!(resolve("1.0.0.0/8"), Plain::Str);
        assert_eq!(resolve("_1"), Plain::Str);
    }

    #[test]
    fn nodes_keep_their_positions() {
        let text = "cidrs:\n- 1.0.0.0/8\n- \u{e9}x: 'quoted'\ncomment: Aws\n";
        let src = SourceFile::new("a.yaml".into(), text.into());
        let docs = documents(&src, 0).unwrap();
        let Kind::Map(entries) = &docs[0].kind else {
            panic!()
        };
        let (k, v) = &entries[0];
        assert_eq!(
            src.text[k.span.start as usize..k.span.end as usize].trim(),
            "cidrs"
        );
        let Kind::Seq(items) = &v.kind else { panic!() };
        assert_eq!((items[0].span.line, items[0].span.col), (2, 3));
        let Kind::Map(inner) = &items[1].kind else {
            panic!()
        };
        assert_eq!((inner[0].1.span.line, inner[0].1.span.col), (3, 7));
        assert_eq!(entries[1].1.span.line, 4);
    }

    #[test]
    fn a_syntax_error_has_a_position() {
        let src = SourceFile::new("b.yaml".into(), "a: [1, 2\nb: c\n".into());
        let e = documents(&src, 0).unwrap_err();
        assert!(e.location().is_some());
    }
}
