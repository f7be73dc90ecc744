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
    // Only digits, letters (for `0x`, `0b`, `0o`) and `_` can make an
    // integer: anything else (a CIDR, a path) is a string, found without
    // allocating.
    if !body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Plain::Str;
    }
    let digits: std::borrow::Cow<'_, str> = if body.contains('_') {
        body.replace('_', "").into()
    } else {
        body.into()
    };
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

/// Bounds on what one YAML stream may make the reader build. A stream
/// that would pass one is refused with the position where it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest scalar, in bytes (as unescaped): requestctl's longest are
    /// regexes and expressions, far shorter.
    pub max_scalar_bytes: usize,
    /// Deepest nesting of collections (a requestctl object is at most
    /// four deep: a dump document, `data`, `cidrs`, an item).
    pub max_depth: usize,
    /// Most nodes (scalars and collections, aliases' copies included) in
    /// the stream: each costs about a hundred bytes of memory.
    pub max_nodes: usize,
    /// Fixed part of the alias budget, in nodes; with the stream's size in
    /// bytes added, the most nodes that aliases may copy in all (each alias
    /// copies its anchor's subtree; keeping an anchored collection counts
    /// once too).
    pub alias_nodes_floor: usize,
    /// Whatever the stream's size, aliases copy at most this many nodes.
    pub alias_nodes_cap: usize,
    /// Fixed part of the alias budget in scalar bytes (the stream's size
    /// is added), as for nodes.
    pub alias_bytes_floor: usize,
    /// Whatever the stream's size, aliases copy at most this many bytes.
    pub alias_bytes_cap: usize,
}

impl Default for Limits {
    /// 1 MiB scalars, 64 levels, two million nodes (a 10 MB ipblock has
    /// 550,000); aliases copy at most 10,000 nodes and
    /// 1 MiB plus one node and one byte for each byte of the stream, and
    /// never more than a million nodes and 64 MiB.
    fn default() -> Self {
        Limits {
            max_scalar_bytes: 1 << 20,
            max_depth: 64,
            max_nodes: 2_000_000,
            alias_nodes_floor: 10_000,
            alias_nodes_cap: 1_000_000,
            alias_bytes_floor: 1 << 20,
            alias_bytes_cap: 64 << 20,
        }
    }
}

/// What a subtree holds, for the alias budget.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: usize,
    bytes: usize,
}

impl Size {
    fn add(&mut self, o: Size) {
        self.nodes = self.nodes.saturating_add(o.nodes);
        self.bytes = self.bytes.saturating_add(o.bytes);
    }
}

/// An open collection.
struct Frame {
    node: Node,
    /// A mapping's key waiting for its value.
    key: Option<Node>,
    /// The anchor id to record it under when it closes (0: none).
    anchor: usize,
    size: Size,
}

struct Builder<'a> {
    src: &'a SourceFile,
    file: FileId,
    limits: Limits,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Node, Size)>,
    docs: Vec<Node>,
    /// What aliases (and anchored collections) have copied so far, and
    /// what they may.
    copied: Size,
    budget: Size,
    /// Nodes built so far.
    nodes: usize,
}

/// Why a stream is refused.
type Refusal = Box<Diagnostic>;

impl Builder<'_> {
    /// Byte offset of a parser's marker (1-based line, 0-based column in
    /// characters), and its 1-based line and column, in constant time.
    fn locate(&self, m: &saphyr_parser::Marker) -> (usize, u32, u32) {
        let line = u32::try_from(m.line()).unwrap_or(u32::MAX);
        let col = u32::try_from(m.col().saturating_add(1)).unwrap_or(u32::MAX);
        self.src.locate(line, col)
    }

    fn offset(&self, m: &saphyr_parser::Marker) -> usize {
        self.locate(m).0
    }

    fn span(&self, s: &saphyr_parser::Span) -> Span {
        let (a, line, col) = self.locate(&s.start);
        let b = self.offset(&s.end).max(a);
        Span {
            file: self.file,
            start: a as u32,
            end: b as u32,
            line,
            col,
        }
    }

    fn add(&mut self, node: Node, size: Size) {
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(f) => {
                f.size.add(size);
                match &mut f.node.kind {
                    Kind::Seq(items) => items.push(node),
                    Kind::Map(entries) => match f.key.take() {
                        None => f.key = Some(node),
                        Some(k) => entries.push((k, node)),
                    },
                    Kind::Scalar { .. } => {}
                }
            }
        }
    }

    /// Counts `n` more nodes built, against [`Limits::max_nodes`].
    fn build(&mut self, n: usize, at: Span) -> Result<(), Refusal> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes <= self.limits.max_nodes {
            return Ok(());
        }
        Err(Box::new(
            Diagnostic::error(
                code::LIMIT,
                format!(
                    "this file holds more than {} YAML values, lists and mappings",
                    self.limits.max_nodes
                ),
            )
            .primary(at, "the one past the limit")
            .hint("requestctl's objects are far smaller; split a larger ipblock into several"),
        ))
    }

    fn open(&mut self, kind: Kind, span: Span, anchor: usize) -> Result<(), Refusal> {
        self.build(1, span)?;
        if self.stack.len() >= self.limits.max_depth {
            return Err(Box::new(
                Diagnostic::error(
                    code::LIMIT,
                    format!(
                        "YAML nested more than {} collections deep",
                        self.limits.max_depth
                    ),
                )
                .primary(span, "this one is too deep")
                .hint("requestctl's objects are flat mappings; this is not one"),
            ));
        }
        self.stack.push(Frame {
            node: Node { kind, span },
            key: None,
            anchor,
            size: Size { nodes: 1, bytes: 0 },
        });
        Ok(())
    }

    fn close(&mut self, end: Span) -> Result<(), Refusal> {
        if let Some(mut f) = self.stack.pop() {
            f.node.span.end = end.end.max(f.node.span.start);
            if f.anchor > 0 {
                self.copy(f.size, f.node.span)?;
                self.anchors.insert(f.anchor, (f.node.clone(), f.size));
            }
            self.add(f.node, f.size);
        }
        Ok(())
    }

    /// Charges a copy of `size` to the alias budget.
    fn copy(&mut self, size: Size, at: Span) -> Result<(), Refusal> {
        self.copied.add(size);
        if self.copied.nodes <= self.budget.nodes && self.copied.bytes <= self.budget.bytes {
            return Ok(());
        }
        Err(Box::new(
            Diagnostic::error(
                code::LIMIT,
                format!(
                    "YAML aliases expand past the limit of {} nodes and {} bytes for this file",
                    self.budget.nodes, self.budget.bytes
                ),
            )
            .primary(at, "expanding this passes it")
            .note(
                "each alias copies its anchor's whole subtree, so nested aliases grow \
                 exponentially (an \"alias bomb\")",
            )
            .hint("write the values out instead of using anchors and aliases"),
        ))
    }
}

/// Parses every document of a YAML stream, within `limits`. A syntax
/// error, or a limit passed, is one diagnostic at its position.
pub fn documents(
    src: &SourceFile,
    file: FileId,
    limits: &Limits,
) -> Result<Vec<Node>, Box<Diagnostic>> {
    let len = src.text.len();
    let mut b = Builder {
        src,
        file,
        limits: *limits,
        stack: Vec::new(),
        anchors: HashMap::new(),
        docs: Vec::new(),
        copied: Size::default(),
        nodes: 0,
        budget: Size {
            nodes: limits
                .alias_nodes_floor
                .saturating_add(len)
                .min(limits.alias_nodes_cap),
            bytes: limits
                .alias_bytes_floor
                .saturating_add(len)
                .min(limits.alias_bytes_cap),
        },
    };
    for ev in Parser::new_from_str(&src.text) {
        let (ev, span) = ev.map_err(|e| {
            let at = b.offset(e.marker());
            let end = (at + 1).min(len).max(at);
            let end = (end..=len)
                .find(|&i| src.text.is_char_boundary(i))
                .unwrap_or(len);
            Box::new(
                Diagnostic::error(code::IMPORT_SHAPE, format!("invalid YAML: {}", e.info()))
                    .primary(src.span(file, at, end), "here")
                    .hint("requestctl's files are YAML mappings of field: value"),
            )
        })?;
        let sp = b.span(&span);
        match ev {
            Event::Scalar(text, style, anchor, _) => {
                if text.len() > limits.max_scalar_bytes {
                    return Err(Box::new(
                        Diagnostic::error(
                            code::LIMIT,
                            format!(
                                "a YAML scalar of {} bytes, over the limit of {} bytes",
                                text.len(),
                                limits.max_scalar_bytes
                            ),
                        )
                        .primary(sp, "this value")
                        .hint("requestctl's values are names, CIDRs, regexes and expressions; this is not one"),
                    ));
                }
                b.build(1, sp)?;
                let size = Size {
                    nodes: 1,
                    bytes: text.len(),
                };
                let node = Node {
                    kind: Kind::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain,
                    },
                    span: sp,
                };
                if anchor > 0 {
                    b.copy(size, sp)?;
                    b.anchors.insert(anchor, (node.clone(), size));
                }
                b.add(node, size);
            }
            Event::SequenceStart(anchor, _) => b.open(Kind::Seq(Vec::new()), sp, anchor)?,
            Event::MappingStart(anchor, _) => b.open(Kind::Map(Vec::new()), sp, anchor)?,
            Event::SequenceEnd | Event::MappingEnd => b.close(sp)?,
            Event::Alias(id) => {
                let Some(&(_, size)) = b.anchors.get(&id) else {
                    return Err(Box::new(
                        Diagnostic::error(code::IMPORT_SHAPE, "YAML alias to no anchor")
                            .primary(sp, "unknown alias"),
                    ));
                };
                // Charged before copying: a refused copy is never made.
                b.copy(size, sp)?;
                b.build(size.nodes, sp)?;
                if let Some((n, _)) = b.anchors.get(&id) {
                    let mut n = n.clone();
                    n.span = sp;
                    b.add(n, size);
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

/// How many nodes `docs` hold, collections and scalars (keys included).
pub fn count(docs: &[Node]) -> usize {
    fn one(n: &Node) -> usize {
        1 + match &n.kind {
            Kind::Scalar { .. } => 0,
            Kind::Seq(items) => items.iter().map(one).sum(),
            Kind::Map(entries) => entries.iter().map(|(k, v)| one(k) + one(v)).sum(),
        }
    }
    docs.iter().map(one).sum()
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
        // A sign only in front, as PyYAML's int pattern has it.
        assert_eq!(resolve("0x-5"), Plain::Str);
        assert_eq!(resolve("0-5"), Plain::Str);
        assert_eq!(resolve("-0x_1f"), Plain::Int(-31));
    }

    #[test]
    fn nodes_keep_their_positions() {
        let text = "cidrs:\n- 1.0.0.0/8\n- \u{e9}x: 'quoted'\ncomment: Aws\n";
        let src = SourceFile::new("a.yaml".into(), text.into());
        let docs = documents(&src, 0, &Limits::default()).unwrap();
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
        let e = documents(&src, 0, &Limits::default()).unwrap_err();
        assert!(e.location().is_some());
    }
}
