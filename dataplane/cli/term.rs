//! What reaches a terminal. Names and values come from rule files,
//! artifacts and captured traffic; ESC, BEL, other controls and bidi
//! overrides among them are shown as escapes, never written raw.

use rctl_compiler::diag::{escape, is_unsafe_char};
use std::borrow::Cow;

fn unsafe_but_newline(c: char) -> bool {
    c != '\n' && is_unsafe_char(c)
}

/// Text with every unsafe character escaped (`\u{1b}`); newlines stay.
pub fn text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_but_newline) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(s.split('\n').map(escape).collect::<Vec<_>>().join("\n"))
}

/// JSON text with the unsafe characters serde_json leaves raw (DEL, C1
/// controls, bidi marks) written as `\uXXXX`: the same JSON value, safe to
/// show. They can only occur inside strings, where the escape is valid.
pub fn json(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_but_newline) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_but_newline(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_lines_and_escapes_the_rest() {
        assert_eq!(text("a\nb"), "a\nb");
        assert_eq!(
            text("r\x1b[31m\x07\n\u{202e}x\r"),
            "r\\u{1b}[31m\\u{7}\n\\u{202e}x\\r"
        );
    }

    #[test]
    fn json_escapes_mean_the_same_value() {
        let v = serde_json::json!({ "name": "a\u{7f}\u{9b}\u{202e}\u{2069}b\x1b" });
        let raw = serde_json::to_string_pretty(&v).unwrap();
        let safe = json(&raw);
        assert!(!safe.chars().any(unsafe_but_newline), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v);
    }
}
