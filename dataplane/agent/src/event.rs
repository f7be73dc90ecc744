//! One line an event on stderr, which systemd gives to the journal:
//! `rctl serve: applied generation 8 (artifact 3f2a9c01d4e5, 12 rules),
//! replacing 7`. The name is the program's (`rctl serve`, `rctl agent`),
//! set once at start.

use std::io::Write as _;
use std::sync::OnceLock;

static NAME: OnceLock<String> = OnceLock::new();

/// Names the program in every line from now on (the first name stays).
pub fn set_name(name: &str) {
    let _ = NAME.set(name.to_string());
}

/// The program's name in event lines.
pub fn name() -> &'static str {
    NAME.get().map_or("rctl", String::as_str)
}

/// Writes `what` as one line (its own line breaks become spaces, and
/// control characters are escaped: it may hold an operator's input or a
/// peer's); a closed stderr is ignored.
pub fn line(what: &str) {
    let one: String = what
        .split(['\n', '\r'])
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let safe: String = one
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    let _ = writeln!(std::io::stderr().lock(), "{}: {safe}", name());
}

/// The first 12 hex digits of a hash, as a person reads it.
pub fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hash_is_shortened_where_a_person_reads_it() {
        assert_eq!(super::short(&"ab".repeat(32)), "abababababab");
        assert_eq!(super::short("abc"), "abc");
    }
}
