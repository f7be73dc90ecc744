//! `rctl fmt`: canonical formatting. Keywords in lower case, two-space
//! indentation, one property a line, one blank line between items, spaced
//! operators. Items and properties keep their order; strings keep their
//! spelling; every comment is kept (a comment inside a multi-line
//! expression moves to the end of that property's line, or after it).

use crate::ast::*;
use crate::source::SourceFile;

struct Comment {
    offset: u32,
    text: String,
    own_line: bool,
    blank_before: bool,
    blank_after: bool,
}

/// Whether `c` is whitespace to the language (`WHITESPACE` in the
/// grammar, a newline aside): anything else, even what Unicode calls a
/// space (a no-break space, a vertical tab), can be a token, such as an
/// address-list entry, and is never trimmed as blank.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r')
}

/// Whether a line holds nothing but the language's whitespace.
fn is_blank(line: &str) -> bool {
    line.chars().all(|c| is_space(c) || c == '\n')
}

/// Whether the line before (or after) the line holding `at` is blank.
fn blank_line_next_to(text: &str, at: usize, before: bool) -> bool {
    if before {
        let start = text[..at].rfind('\n').map_or(0, |n| n + 1);
        if start == 0 {
            return false;
        }
        let prev_start = text[..start - 1].rfind('\n').map_or(0, |n| n + 1);
        is_blank(&text[prev_start..start - 1])
    } else {
        let Some(end) = text[at..].find('\n').map(|n| at + n + 1) else {
            return false;
        };
        let next_end = text[end..].find('\n').map_or(text.len(), |n| end + n);
        end < text.len() && is_blank(&text[end..next_end])
    }
}

fn comments(text: &str) -> Vec<Comment> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line_has_code) = (0usize, false);
    while i < b.len() {
        match b[i] {
            b'\n' => line_has_code = false,
            b'"' => {
                line_has_code = true;
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'#' => {
                let end = text[i..].find('\n').map_or(text.len(), |n| i + n);
                out.push(Comment {
                    offset: i as u32,
                    text: text[i..end].trim_end_matches(is_space).to_string(),
                    own_line: !line_has_code,
                    blank_before: !line_has_code && blank_line_next_to(text, i, true),
                    blank_after: !line_has_code && blank_line_next_to(text, i, false),
                });
                i = end;
                continue;
            }
            c if !is_space(char::from(c)) => line_has_code = true,
            _ => {}
        }
        i += 1;
    }
    out
}

struct Printer<'a> {
    src: &'a SourceFile,
    comments: Vec<Comment>,
    next: usize,
    lines: Vec<String>,
    indent: usize,
}

impl Printer<'_> {
    fn flush(&mut self, before: u32) {
        while self.next < self.comments.len() && self.comments[self.next].offset < before {
            let c = &self.comments[self.next];
            match (c.own_line, self.lines.last_mut()) {
                (false, Some(last)) if !is_blank(last) => {
                    last.push(' ');
                    last.push_str(&c.text);
                }
                _ => {
                    if c.blank_before && self.lines.last().is_some_and(|l| !is_blank(l)) {
                        self.lines.push(String::new());
                    }
                    self.lines
                        .push(format!("{}{}", "  ".repeat(self.indent), c.text));
                    if c.blank_after {
                        self.lines.push(String::new());
                    }
                }
            }
            self.next += 1;
        }
    }

    fn line(&mut self, at: u32, text: String) {
        self.flush(at);
        self.lines
            .push(format!("{}{}", "  ".repeat(self.indent), text));
    }

    fn close(&mut self, end: u32) {
        self.flush(end.saturating_sub(1));
        self.indent -= 1;
        self.lines.push(format!("{}}}", "  ".repeat(self.indent)));
    }

    fn w(&self, w: &Word) -> String {
        if w.quoted {
            let raw = self
                .src
                .text
                .get(w.span.start as usize..w.span.end as usize)
                .unwrap_or("");
            if raw.starts_with('"') {
                return raw.to_string();
            }
            return format!("\"{}\"", w.text.replace('\\', "\\\\").replace('"', "\\\""));
        }
        w.text.clone()
    }

    fn expr(&self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::Or(v) => v
                .iter()
                .map(|x| self.expr(x))
                .collect::<Vec<_>>()
                .join(" or "),
            ExprKind::And(v) => v
                .iter()
                .map(|x| self.expr(x))
                .collect::<Vec<_>>()
                .join(" and "),
            ExprKind::Not(x) => format!("not {}", self.expr(x)),
            ExprKind::Paren(x) => format!("({})", self.expr(x)),
            ExprKind::PatternRef(w) => format!("pattern@{}", w.text),
            ExprKind::IpblockRef(w) => format!("ipblock@{}", w.text),
            ExprKind::Bool(b) => b.to_string(),
            ExprKind::Cond(c) => {
                let field = match &c.field {
                    Field::Method => "method".to_string(),
                    Field::Host => "host".to_string(),
                    Field::Path => "path".to_string(),
                    Field::Query => "query".to_string(),
                    Field::Url => "url".to_string(),
                    Field::QueryParam(w) => format!("query({})", self.w(w)),
                    Field::Header(w) => format!("header({})", self.w(w)),
                    Field::Ip => "ip".to_string(),
                    Field::DstIp => "dst_ip".to_string(),
                    Field::Port => "port".to_string(),
                    Field::Proto => "proto".to_string(),
                };
                let test = match &c.test {
                    Test::Cmp(op, v) => format!("{} {}", op.as_str(), self.w(v)),
                    Test::Present => "present".to_string(),
                    Test::Absent => "absent".to_string(),
                    Test::In { negated, set } => {
                        let set = match set {
                            SetExpr::Ipblock(w) => format!("ipblock@{}", w.text),
                            SetExpr::Literal(vs, _) => format!(
                                "{{ {} }}",
                                vs.iter().map(|v| self.w(v)).collect::<Vec<_>>().join(", ")
                            ),
                        };
                        format!("{}in {set}", if *negated { "not " } else { "" })
                    }
                };
                format!("{field} {test}")
            }
        }
    }

    fn item(&mut self, item: &Item) {
        let start = item.span().start;
        match item {
            Item::Include(w) => self.line(start, format!("include {}", self.w(w))),
            Item::Ipblock(d) => {
                self.line(start, format!("ipblock {} {{", d.name.text));
                self.indent += 1;
                for e in &d.entries {
                    let (at, text) = match e {
                        IpblockEntry::Cidr(w) => (w.span.start, w.text.clone()),
                        IpblockEntry::File(w) => (w.span.start, format!("file {}", self.w(w))),
                        IpblockEntry::Comment(w) => {
                            (w.span.start, format!("comment {}", self.w(w)))
                        }
                    };
                    self.line(at, text);
                }
                self.close(d.span.end);
            }
            Item::Pattern(d) => {
                self.line(start, format!("pattern {} {{", d.name.text));
                self.indent += 1;
                if let Some(c) = &d.comment {
                    self.line(c.span.start, format!("comment {}", self.w(c)));
                }
                let body = self.expr(&d.body);
                self.line(d.body.span.start, body);
                self.close(d.span.end);
            }
            Item::Rule(d) => {
                self.line(start, format!("rule {} {{", d.name.text));
                self.indent += 1;
                for p in &d.props {
                    let text = self.prop(&p.prop);
                    self.line(p.span.start, text);
                }
                self.close(d.span.end);
            }
            Item::Test(t) => self.test(t),
        }
    }

    fn prop(&self, p: &RuleProp) -> String {
        match p {
            RuleProp::When(e) => format!("when {}", self.expr(e)),
            RuleProp::Priority(w) => format!("priority {}", w.text),
            RuleProp::Sites(ws) => format!(
                "sites {{ {} }}",
                ws.iter()
                    .map(|w| w.text.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .replace("{  }", "{}"),
            RuleProp::Enabled(w) => format!("enabled {}", w.text.to_ascii_lowercase()),
            RuleProp::Shadow => "shadow".into(),
            RuleProp::AllowUndecided => "allow_undecided".into(),
            RuleProp::Comment(w) => format!("comment {}", self.w(w)),
            RuleProp::Action(a) => match a {
                ActionDecl::Allow => "allow".into(),
                ActionDecl::Log => "log".into(),
                ActionDecl::Drop => "drop".into(),
                ActionDecl::Deny(s, r) => {
                    let mut out = "deny".to_string();
                    if let Some(s) = s {
                        out += &format!(" {}", s.text);
                    }
                    if let Some(r) = r {
                        out += &format!(" {}", self.w(r));
                    }
                    out
                }
                ActionDecl::Throttle(t) => {
                    let mut out = format!(
                        "throttle {} {} per {}",
                        t.limit.text,
                        t.unit.text.to_ascii_lowercase(),
                        t.period.text
                    );
                    if let Some(b) = &t.burst {
                        out += &format!(" burst {}", b.text);
                    }
                    if !t.by.is_empty() {
                        let keys: Vec<String> =
                            t.by.iter()
                                .map(|k| match k {
                                    KeyDecl::Word(w) => w.text.to_ascii_lowercase(),
                                    KeyDecl::Header(w) => format!("header({})", self.w(w)),
                                    KeyDecl::Query(w) => format!("query({})", self.w(w)),
                                    KeyDecl::Prefix(a, b, _) => match b {
                                        Some(b) => format!("prefix({}, {})", a.text, b.text),
                                        None => format!("prefix({})", a.text),
                                    },
                                })
                                .collect();
                        out += &format!(" by {}", keys.join(", "));
                    }
                    if let Some(b) = &t.ban {
                        out += &format!(" ban {}", b.text);
                    }
                    if let Some(s) = &t.status {
                        out += &format!(" status {}", s.text);
                    }
                    if let Some(r) = &t.reason {
                        out += &format!(" reason {}", self.w(r));
                    }
                    if let Some(b) = &t.bucket {
                        out += &format!(" bucket {}", b.text.to_ascii_lowercase());
                    }
                    if t.shared.is_some() {
                        out += " shared";
                    }
                    out
                }
            },
        }
    }

    fn test(&mut self, t: &TestDecl) {
        self.line(t.span.start, format!("test {} {{", self.w(&t.name)));
        self.indent += 1;
        // Site, samples and expects keep their relative source order.
        let mut parts: Vec<(u32, usize, usize)> = Vec::new();
        if let Some(s) = &t.site {
            parts.push((s.span.start, 0, 0));
        }
        parts.extend(
            t.samples
                .iter()
                .enumerate()
                .map(|(i, s)| (s.span.start, 1, i)),
        );
        parts.extend(
            t.expects
                .iter()
                .enumerate()
                .map(|(i, e)| (e.span.start, 2, i)),
        );
        parts.extend(
            t.replays
                .iter()
                .enumerate()
                .map(|(i, r)| (r.span.start, 3, i)),
        );
        parts.sort();
        for (at, kind, i) in parts {
            match kind {
                0 => {
                    let s = t.site.as_ref().map_or(String::new(), |w| w.text.clone());
                    self.line(at.saturating_sub(5), format!("site {s}"));
                }
                1 => self.sample(&t.samples[i]),
                3 => {
                    let r = &t.replays[i];
                    let mut out = "replay".to_string();
                    if let Some(l) = &r.label {
                        out += &format!(" {}", l.text);
                    }
                    out += &format!(" {}", self.w(&r.path));
                    if let Some(f) = &r.format {
                        out += &format!(" format {}", self.w(f));
                    }
                    if let Some(c) = &r.captured {
                        out += &format!(" captured {}", self.w(c));
                    }
                    if let Some(ip) = &r.ip {
                        out += &format!(" ip {}", ip.text);
                    }
                    self.line(at, out);
                }
                _ => {
                    let e = &t.expects[i];
                    let mut out = "expect".to_string();
                    if let Some(l) = &e.label {
                        out += &format!(" for {}", l.text);
                    }
                    out += &format!(
                        " {} {}",
                        e.quantity.text.to_ascii_lowercase(),
                        e.verdict.text.to_ascii_lowercase()
                    );
                    if let Some(r) = &e.rule {
                        out += &format!(" by {}", r.text);
                    }
                    self.line(at, out);
                }
            }
        }
        self.close(t.span.end);
    }

    fn sample(&mut self, s: &SampleDecl) {
        let kw = if s.is_packet { "packet" } else { "request" };
        let label = s
            .label
            .as_ref()
            .map_or(String::new(), |l| format!(" {}", l.text));
        self.line(s.span.start, format!("{kw}{label} {{"));
        self.indent += 1;
        let mut parts: Vec<(u32, String)> = Vec::new();
        for (n, v) in &s.fields {
            parts.push((
                n.span.start,
                format!("{} {}", n.text.to_ascii_lowercase(), self.w(v)),
            ));
        }
        for (n, v) in &s.headers {
            parts.push((
                n.span.start.saturating_sub(7),
                format!("header {} {}", self.w(n), self.w(v)),
            ));
        }
        if let Some(sp) = s.syn {
            parts.push((sp.start, "syn".into()));
        }
        if let Some((n, over)) = &s.repeat {
            let o = over
                .as_ref()
                .map_or(String::new(), |w| format!(" over {}", w.text));
            parts.push((
                n.span.start.saturating_sub(7),
                format!("repeat {}{o}", n.text),
            ));
        }
        if let Some(a) = &s.at {
            parts.push((a.span.start.saturating_sub(3), format!("at {}", a.text)));
        }
        parts.sort_by_key(|p| p.0);
        for (at, text) in parts {
            self.line(at, text);
        }
        self.close(s.span.end);
    }
}

/// Formats a parsed file. `src` must be the text `file` was parsed from.
pub fn format_file(file: &File, src: &SourceFile) -> String {
    let mut p = Printer {
        src,
        comments: comments(&src.text),
        next: 0,
        lines: Vec::new(),
        indent: 0,
    };
    for (i, item) in file.items.iter().enumerate() {
        if i > 0 {
            let prev_include = matches!(file.items[i - 1], Item::Include(_));
            if !(prev_include && matches!(item, Item::Include(_))) {
                p.lines.push(String::new());
            }
        }
        p.item(item);
    }
    p.flush(u32::MAX);
    let mut out = String::new();
    let mut blank = true;
    for l in p.lines {
        let empty = is_blank(&l);
        if empty && blank {
            continue;
        }
        out.push_str(l.trim_end_matches(is_space));
        out.push('\n');
        blank = empty;
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}
