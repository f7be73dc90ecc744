//! Diagnostics as data: a code, a message, labelled spans and a hint.
//!
//! Nothing here prints on its own; [`Diagnostic::render`] turns one into the
//! rustc-style text the CLI shows (`file:line:col`, the source line, a caret).

use crate::source::{SourceMap, Span};
use std::borrow::Cow;
use std::fmt::Write as _;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The input is rejected.
    Error,
    /// The input is accepted; `--deny-warnings` rejects it.
    Warning,
}

/// Stable diagnostic codes. `rctl` documents each in `compiler/README.md`.
pub mod code {
    /// A syntax error.
    pub const SYNTAX: &str = "E0001";
    /// A file cannot be read.
    pub const IO: &str = "E0002";
    /// A file is not UTF-8.
    pub const NOT_UTF8: &str = "E0003";
    /// An expression nests too deep.
    pub const TOO_DEEP: &str = "E0004";
    /// A directory holds no `.rctl` file.
    pub const NO_SOURCES: &str = "E0005";
    /// A file is over the size limit.
    pub const TOO_LARGE: &str = "E0006";
    /// A path resolves outside the ruleset's roots.
    pub const OUTSIDE_ROOT: &str = "E0007";
    /// A path names a device, FIFO, socket or directory, not a regular file.
    pub const NOT_REGULAR: &str = "E0008";
    /// A name is defined twice.
    pub const DUPLICATE_NAME: &str = "E0010";
    /// A reference names nothing.
    pub const UNKNOWN_REF: &str = "E0011";
    /// Patterns reference each other in a cycle.
    pub const REF_CYCLE: &str = "E0012";
    /// An invalid CIDR.
    pub const BAD_CIDR: &str = "E0020";
    /// An invalid or oversized regex.
    pub const BAD_REGEX: &str = "E0021";
    /// An invalid duration.
    pub const BAD_DURATION: &str = "E0022";
    /// An invalid HTTP status.
    pub const BAD_STATUS: &str = "E0023";
    /// An invalid number, port or priority.
    pub const BAD_NUMBER: &str = "E0024";
    /// An operator or value does not fit the field's type.
    pub const TYPE: &str = "E0025";
    /// An invalid value of another kind.
    pub const BAD_VALUE: &str = "E0026";
    /// A rule has no `when`.
    pub const NO_WHEN: &str = "E0030";
    /// A rule has no action, or more than one.
    pub const ACTION_COUNT: &str = "E0031";
    /// A rule property is given twice.
    pub const DUPLICATE_PROP: &str = "E0032";
    /// An invalid throttle.
    pub const BAD_THROTTLE: &str = "E0033";
    /// A configured limit is exceeded.
    pub const LIMIT: &str = "E0040";
    /// An allow is evaluated after an enforcing rule that can match its traffic.
    pub const EXEMPTION_CONFLICT: &str = "E0050";
    /// Whether an allow wins over an earlier enforcing rule could not be
    /// decided within the analysis budget.
    pub const EXEMPTION_UNDECIDED: &str = "E0051";
    /// An invalid test block.
    pub const BAD_TEST: &str = "E0060";
    /// A requestctl object that cannot be read: YAML syntax, a value of
    /// the wrong type, a file outside requestctl's layout (`rctl import`).
    pub const IMPORT_SHAPE: &str = "E0070";
    /// A requestctl field or value with no rctl equivalent (`rctl import`;
    /// `--lossy` keeps it as a warning and a comment).
    pub const IMPORT_UNSUPPORTED: &str = "E0071";
    /// A CIDR has host bits set.
    pub const HOST_BITS: &str = "W0101";
    /// An object no rule uses.
    pub const UNUSED: &str = "W0102";
    /// A rule that can never decide anything.
    pub const UNREACHABLE: &str = "W0103";
    /// An ipblock with no address.
    pub const EMPTY_SET: &str = "W0104";
    /// An undecided exemption accepted with `allow_undecided`.
    pub const EXEMPTION_UNPROVEN: &str = "W0105";
    /// An imported requestctl object whose meaning in rctl differs from
    /// requestctl's translation; the rule's comment says how.
    pub const IMPORT_CHANGED: &str = "W0106";
}

/// A span with a message: the primary label gets carets, secondary ones dashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What about it; may be empty.
    pub message: String,
    /// The primary label is the one the header's `file:line:col` points at.
    pub primary: bool,
}

/// One finding about the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable code from [`code`].
    pub code: &'static str,
    /// One line saying what is wrong.
    pub message: String,
    /// Spans, the first primary one is the location.
    pub labels: Vec<Label>,
    /// What to do about it.
    pub hint: Option<String>,
    /// Facts that back the finding (a request that shows it, what the
    /// analysis could not decide), one line each.
    pub notes: Vec<String>,
    /// A `test` block that shows the finding, ready to paste into a rule
    /// file (`rctl check --witness` prints it).
    pub witness: Option<String>,
}

impl Diagnostic {
    /// A new error.
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            labels: Vec::new(),
            hint: None,
            notes: Vec::new(),
            witness: None,
        }
    }

    /// A new warning.
    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Self::error(code, message)
        }
    }

    /// Adds the primary label.
    pub fn primary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: message.into(),
            primary: true,
        });
        self
    }

    /// Adds a secondary label.
    pub fn secondary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: message.into(),
            primary: false,
        });
        self
    }

    /// Adds a note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Sets the `test` block that shows the finding.
    pub fn witness(mut self, test: impl Into<String>) -> Self {
        self.witness = Some(test.into());
        self
    }

    /// Sets the hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The primary span, if any.
    pub fn location(&self) -> Option<Span> {
        self.labels
            .iter()
            .find(|l| l.primary)
            .or(self.labels.first())
            .map(|l| l.span)
    }

    /// Renders the diagnostic as plain text, rustc style. Everything taken
    /// from the input (paths, the source line, names in messages) is
    /// [escaped](escape): the text is safe to write to a terminal.
    pub fn render(&self, sources: &SourceMap) -> String {
        let mut out = String::new();
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let _ = writeln!(out, "{sev}[{}]: {}", self.code, escape(&self.message));
        let width = self
            .labels
            .iter()
            .map(|l| l.span.line.to_string().len())
            .max()
            .unwrap_or(1);
        let pad = " ".repeat(width);
        for (i, label) in self.labels.iter().enumerate() {
            let Some(file) = sources.get(label.span.file) else {
                continue;
            };
            let arrow = if i == 0 { "-->" } else { ":::" };
            let _ = writeln!(
                out,
                "{pad}{arrow} {}:{}:{}",
                escape(&file.path.display().to_string()),
                label.span.line,
                label.span.col
            );
            let text = file.line_text(label.span.line);
            // The span's length in characters, up to the end of its line.
            let len = file
                .text
                .get(label.span.start as usize..)
                .map_or(1, |rest| {
                    let on_line = (label.span.end as usize)
                        .saturating_sub(label.span.start as usize)
                        .min(rest.find('\n').unwrap_or(rest.len()));
                    rest.get(..on_line).map_or(1, |s| s.chars().count())
                });
            let shown = show_line(text, label.span.col as usize, len);
            let _ = writeln!(out, "{pad} |");
            let _ = writeln!(out, "{:>width$} | {}", label.span.line, shown.text);
            let mark = if label.primary { "^" } else { "-" };
            let _ = writeln!(
                out,
                "{pad} | {}{} {}",
                " ".repeat(shown.caret_col),
                mark.repeat(shown.caret_len.clamp(1, 120)),
                escape(&label.message)
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "{pad} = note: {}", escape(note));
        }
        if let Some(hint) = &self.hint {
            let _ = writeln!(out, "{pad} = hint: {}", escape(hint));
        }
        out
    }
}

/// Whether `c` must never reach a terminal raw: C0 controls (ESC starts
/// escape sequences, BEL rings, CR overwrites), DEL, C1 controls (CSI), and
/// the bidirectional marks, embeddings, overrides and isolates that make
/// text read differently from what it is (U+061C, U+200E/F, U+202A–E,
/// U+2066–9).
pub fn is_unsafe_char(c: char) -> bool {
    matches!(
        c,
        '\0'..='\x1f'
            | '\x7f'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if is_unsafe_char(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// `s` with every [unsafe](is_unsafe_char) character written as an escape
/// (`\t`, `\n`, `\r`, `\u{1b}`), as Rust's `{:?}` writes them. Borrowed
/// when there is nothing to escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// At most `max` characters of `s`, [escaped](escape), with `…` where it
/// was cut: for quoting input in a message.
pub fn excerpt(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    for c in chars.by_ref().take(max) {
        push_escaped(&mut out, c);
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// A source line as shown under a diagnostic header.
struct Shown {
    text: String,
    /// Displayed characters before the caret.
    caret_col: usize,
    /// Displayed characters the span covers.
    caret_len: usize,
}

/// The line to show: at most [`SHOWN_CHARS`] characters around the caret
/// (a 1 MB line is legal input, and a line of a file that is not what it
/// should be is quoted only that far), `…` where cut, tabs as spaces and
/// unsafe characters escaped. `col` (1-based) and `len` are in characters of
/// `text`; the returned caret is in displayed characters.
fn show_line(text: &str, col: usize, len: usize) -> Shown {
    let caret = col.saturating_sub(1);
    let total = text.chars().count();
    let start = if total <= SHOWN_CHARS {
        0
    } else {
        caret.saturating_sub(SHOWN_BEFORE_CARET)
    };
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let mut width = usize::from(start > 0);
    let (mut caret_col, mut caret_len) = (None, 0);
    for (i, c) in text.chars().enumerate().skip(start).take(SHOWN_CHARS) {
        if i == caret {
            caret_col = Some(width);
        }
        let before = out.len();
        if c == '\t' {
            out.push(' ');
        } else {
            push_escaped(&mut out, c);
        }
        let w = out[before..].chars().count();
        if i >= caret && i < caret + len {
            caret_len += w;
        }
        width += w;
    }
    if start + SHOWN_CHARS < total {
        out.push('…');
    }
    Shown {
        text: out,
        caret_col: caret_col.unwrap_or(width),
        caret_len,
    }
}

/// Most characters of a source line a diagnostic shows.
const SHOWN_CHARS: usize = 80;
/// Characters shown before the caret when a line is cut.
const SHOWN_BEFORE_CARET: usize = 30;

/// An ordered collection of diagnostics for one run.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Adds one.
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// Whether any error was reported.
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.severity == Severity::Error)
    }

    /// Number of errors.
    pub fn error_count(&self) -> usize {
        self.items
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    /// Number of warnings.
    pub fn warning_count(&self) -> usize {
        self.items.len() - self.error_count()
    }

    /// All diagnostics, sorted by file and position (stable for equal keys).
    pub fn sorted(&self) -> Vec<&Diagnostic> {
        let mut v: Vec<&Diagnostic> = self.items.iter().collect();
        v.sort_by_key(|d| d.location().map(|s| (s.file, s.start)));
        v
    }

    /// All diagnostics in the order they were found.
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }

    /// Moves all of `other` in.
    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }
}

/// Edit distance (optimal string alignment: insertions, deletions,
/// substitutions and swaps of neighbours cost one each), for "did you
/// mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

/// The candidate nearest to `word` (case-insensitive), if one is close
/// enough to be what was meant: at most one edit for short words, a
/// third of the word's length for longer ones. For "did you mean" hints.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    let max = (w.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&w, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= max && !c.eq_ignore_ascii_case(word))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// What a duration written in words means in the language: `minute` →
/// `1m`, `30 seconds` → `30s`, `5min` → `5m`; `None` if it is not one.
pub fn duration_in_words(s: &str) -> Option<String> {
    let t = s.trim().to_ascii_lowercase();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n = if n.is_empty() { "1" } else { n };
    let unit = match unit.trim() {
        "millisecond" | "milliseconds" | "msec" | "msecs" => "ms",
        "sec" | "secs" | "second" | "seconds" => "s",
        "min" | "mins" | "minute" | "minutes" => "m",
        "hr" | "hrs" | "hour" | "hours" => "h",
        "day" | "days" => "d",
        "w" | "week" | "weeks" => return n.parse::<u64>().ok().map(|n| format!("{}d", n * 7)),
        _ => return None,
    };
    Some(format!("{n}{unit}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_location_line_caret_code_and_hint() {
        let mut map = SourceMap::new();
        let id = map.add("r.rctl".into(), "rule a {\n  when path == x\n}\n".into());
        let f = map.get(id).unwrap();
        let d = Diagnostic::error(code::TYPE, "bad value")
            .primary(f.span(id, 24, 25), "here")
            .hint("quote it");
        let text = d.render(&map);
        assert!(text.contains("error[E0025]: bad value"), "{text}");
        assert!(text.contains("--> r.rctl:2:16"), "{text}");
        assert!(text.contains("2 |   when path == x"), "{text}");
        assert!(text.contains("  |                ^ here"), "{text}");
        assert!(text.contains("= hint: quote it"), "{text}");
    }

    #[test]
    fn megabyte_line_is_cut_around_the_caret() {
        let mut map = SourceMap::new();
        let mut line = "x".repeat(1_000_000);
        line.push('!');
        let id = map.add("big.rctl".into(), line);
        let f = map.get(id).unwrap();
        let d = Diagnostic::error(code::SYNTAX, "s").primary(f.span(id, 1_000_000, 1_000_001), "");
        let text = d.render(&map);
        assert!(text.len() < 1000);
        let lines: Vec<&str> = text.lines().collect();
        let src = lines.iter().find(|l| l.contains('!')).unwrap();
        let caret = lines.iter().find(|l| l.contains('^')).unwrap();
        assert_eq!(
            src.chars().position(|c| c == '!'),
            caret.chars().position(|c| c == '^')
        );
    }

    /// ESC, BEL, C1 controls and bidi overrides in a path, a source line, a
    /// message, a label or a hint are never rendered raw, and the caret
    /// still points at its character after the escapes widen the line.
    #[test]
    fn control_and_bidi_characters_are_escaped_and_the_caret_still_points() {
        let mut map = SourceMap::new();
        let line = "rule a { when path == \"\x1b[31m\x07\u{202e}\u{9b}\" ! }";
        let id = map.add("e\x1b[2Jvil\u{202e}.rctl".into(), format!("{line}\n"));
        let f = map.get(id).unwrap();
        let bang = line.find('!').unwrap();
        let d = Diagnostic::error(code::SYNTAX, "unexpected `\x1b]0;title\x07`")
            .primary(f.span(id, bang, bang + 1), "here \u{2066}")
            .hint("not \u{85} \u{200f}\r");
        let text = d.render(&map);
        assert!(
            !text.chars().any(|c| is_unsafe_char(c) && c != '\n'),
            "{text:?}"
        );
        assert!(
            text.contains(r#"== "\u{1b}[31m\u{7}\u{202e}\u{9b}" ! }"#),
            "{text}"
        );
        assert!(
            text.contains(r"--> e\u{1b}[2Jvil\u{202e}.rctl:1:"),
            "{text}"
        );
        assert!(text.contains(r"unexpected `\u{1b}]0;title\u{7}`"), "{text}");
        assert!(text.contains(r"^ here \u{2066}"), "{text}");
        assert!(text.contains(r"= hint: not \u{85} \u{200f}\r"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        let src = lines.iter().find(|l| l.contains("rule a")).unwrap();
        let caret = lines.iter().find(|l| l.contains('^')).unwrap();
        assert_eq!(
            src.chars().position(|c| c == '!'),
            caret.chars().position(|c| c == '^')
        );
    }

    /// A line is quoted only so far: a list file that is really something
    /// else (a password file, a binary) shows at most 80 characters a line.
    #[test]
    fn long_lines_are_quoted_only_so_far() {
        let mut map = SourceMap::new();
        let line = format!("{}SECRET{}", "a".repeat(100), "b".repeat(200));
        let id = map.add("l.txt".into(), line.clone());
        let f = map.get(id).unwrap();
        let d = Diagnostic::error(code::BAD_CIDR, "x").primary(f.span(id, 0, line.len()), "");
        let text = d.render(&map);
        let shown = text.lines().find(|l| l.contains("aaa")).unwrap();
        assert!(shown.ends_with('…'), "{shown}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert_eq!(shown.chars().filter(|&c| c == 'a').count(), 80);
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("a\x1bc", 3), r"a\u{1b}c");
        assert_eq!(escape("plain"), Cow::Borrowed("plain"));
    }
}
