//! Diagnostics as data: a code, a message, labelled spans and a hint.
//!
//! Nothing here prints on its own; [`Diagnostic::render`] turns one into the
//! rustc-style text the CLI shows (`file:line:col`, the source line, a caret).

use crate::source::{SourceMap, Span};
use std::fmt::Write as _;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The input is rejected.
    Error,
    /// The input is accepted; `--deny-warnings` rejects it.
    Warning,
}

/// Stable diagnostic codes. `rctl` documents each in the README.
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

    /// Renders the diagnostic as plain text, rustc style.
    pub fn render(&self, sources: &SourceMap) -> String {
        let mut out = String::new();
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let _ = writeln!(out, "{sev}[{}]: {}", self.code, self.message);
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
                file.path.display(),
                label.span.line,
                label.span.col
            );
            let text = file.line_text(label.span.line);
            let shown = truncate_line(text, label.span.col as usize);
            let _ = writeln!(out, "{pad} |");
            let _ = writeln!(out, "{:>width$} | {}", label.span.line, shown.text);
            let line_end = file
                .text
                .get(label.span.start as usize..)
                .and_then(|rest| rest.find('\n'))
                .map_or(file.text.len(), |n| label.span.start as usize + n);
            let end = (label.span.end as usize).min(line_end);
            let len = file
                .text
                .get(label.span.start as usize..end)
                .map_or(1, |s| s.chars().count())
                .clamp(1, 120);
            let mark = if label.primary { "^" } else { "-" };
            let _ = writeln!(
                out,
                "{pad} | {}{} {}",
                " ".repeat(shown.caret_col),
                mark.repeat(len),
                label.message
            );
        }
        if let Some(hint) = &self.hint {
            let _ = writeln!(out, "{pad} = hint: {hint}");
        }
        out
    }
}

struct Shown {
    text: String,
    caret_col: usize,
}

/// Long lines (a 1 MB line is legal input) are cut around the caret.
fn truncate_line(text: &str, col: usize) -> Shown {
    const MAX: usize = 160;
    let chars = text.chars().count();
    if chars <= MAX {
        return Shown {
            text: text.replace('\t', " "),
            caret_col: col.saturating_sub(1),
        };
    }
    let start = col.saturating_sub(60);
    let body: String = text.chars().skip(start).take(MAX).collect();
    let prefix = if start > 0 { "…" } else { "" };
    Shown {
        text: format!("{prefix}{}…", body.replace('\t', " ")),
        caret_col: col.saturating_sub(1) - start + prefix.chars().count(),
    }
}

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
}
