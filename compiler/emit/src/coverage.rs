//! What an emitted proxy configuration covers: the headers it sends the
//! agent and the statuses it has a block line for. The configuration tells
//! the agent (HAProxy: an occasional `rctl-cfg` SPOE message; nginx: a
//! header on each check), so that `rctl apply` can say when a new ruleset
//! reads a header the proxy does not send, or answers with a status it
//! has no line for: a configuration that must be emitted again.
//!
//! The text form is `v1;h=NAME,NAME;s=STATUS,STATUS` (names lower case,
//! both lists sorted; `h=*` for a proxy that forwards every header, as
//! nginx does), written in hex where the proxy's configuration cannot hold
//! commas (HAProxy's `str()` sample).

use crate::reads::Reads;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// What a configuration covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Whether every header reaches the agent (nginx forwards them all).
    pub all_headers: bool,
    /// Headers sent to the agent (lower case), when not all are.
    pub headers: BTreeSet<String>,
    /// Statuses with a block line of their own.
    pub statuses: BTreeSet<u16>,
}

impl Coverage {
    /// What a configuration that sends `headers` and has lines for the
    /// statuses `reads` answers with covers.
    pub fn of(reads: &Reads, headers: &[String]) -> Coverage {
        Coverage {
            all_headers: false,
            headers: headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
            statuses: reads.statuses(),
        }
    }

    /// What a configuration that forwards every header and has lines for
    /// the statuses `reads` answers with covers.
    pub fn every_header(reads: &Reads) -> Coverage {
        Coverage {
            all_headers: true,
            headers: BTreeSet::new(),
            statuses: reads.statuses(),
        }
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        let h: Vec<&str> = self.headers.iter().map(String::as_str).collect();
        let s: Vec<String> = self.statuses.iter().map(u16::to_string).collect();
        let h = if self.all_headers {
            "*".to_string()
        } else {
            h.join(",")
        };
        format!("v1;h={h};s={}", s.join(","))
    }

    /// The text form, in lower-case hex.
    pub fn to_hex(&self) -> String {
        let mut out = String::new();
        for b in self.to_text().bytes() {
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    /// Reads the text form (`None` if it is not one this build writes).
    pub fn parse(text: &str) -> Option<Coverage> {
        let rest = text.strip_prefix("v1;h=")?;
        let (h, s) = rest.split_once(";s=")?;
        let all_headers = h == "*";
        let h = if all_headers { "" } else { h };
        let headers = h
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| (x.bytes().all(crate::is_tchar)).then(|| x.to_ascii_lowercase()))
            .collect::<Option<BTreeSet<String>>>()?;
        let statuses = s
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse::<u16>().ok())
            .collect::<Option<BTreeSet<u16>>>()?;
        Some(Coverage {
            all_headers,
            headers,
            statuses,
        })
    }

    /// Reads the hex form.
    pub fn parse_hex(hex: &[u8]) -> Option<Coverage> {
        if hex.len() % 2 == 1 || hex.len() > 16 * 1024 {
            return None;
        }
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let bytes = hex
            .chunks(2)
            .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
            .collect::<Option<Vec<u8>>>()?;
        Coverage::parse(std::str::from_utf8(&bytes).ok()?)
    }

    /// What `needs` asks of a proxy that this configuration lacks: the
    /// headers it does not send and the statuses it has no line for.
    pub fn missing(&self, needs: &Reads) -> (Vec<String>, Vec<u16>) {
        let headers = needs
            .headers
            .iter()
            .filter(|h| !self.all_headers && !self.headers.contains(*h))
            .cloned()
            .collect();
        let statuses = needs
            .statuses()
            .into_iter()
            .filter(|s| !self.statuses.contains(s))
            .collect();
        (headers, statuses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_and_hex_forms_read_back_and_say_what_is_missing() {
        let old = Reads::of(&crate::test_ruleset(
            r#"rule a { when header("User-Agent") ~* "^curl" deny 403 }"#,
        ));
        let c = Coverage::of(&old, &["user-agent".into(), "X-Extra".into()]);
        assert_eq!(c.to_text(), "v1;h=user-agent,x-extra;s=403");
        assert_eq!(Coverage::parse(&c.to_text()), Some(c.clone()));
        assert_eq!(Coverage::parse_hex(c.to_hex().as_bytes()), Some(c.clone()));
        let new = Reads::of(&crate::test_ruleset(
            r#"
rule a { when header("user-agent") ~* "^curl" deny 403 }
rule b { when header("x-extra") present and header("x-new") present deny 451 }
rule c { when path == "/t" throttle 1 requests per 1s }
"#,
        ));
        assert_eq!(c.missing(&new), (vec!["x-new".to_string()], vec![429, 451]));
        assert_eq!(c.missing(&old), (vec![], vec![]));
        for bad in ["", "v2;h=;s=", "v1;h=a b;s=1", "v1;h=a;s=x", "v1;h=a"] {
            assert_eq!(Coverage::parse(bad), None, "{bad}");
        }
        assert_eq!(Coverage::parse_hex(b"7"), None);
        assert_eq!(Coverage::parse_hex(b"zz"), None);
        assert_eq!(Coverage::parse("v1;h=;s="), Some(Coverage::default()));
        let nginx = Coverage::every_header(&old);
        assert_eq!(nginx.to_text(), "v1;h=*;s=403");
        assert_eq!(Coverage::parse(&nginx.to_text()), Some(nginx.clone()));
        assert_eq!(nginx.missing(&new), (vec![], vec![429, 451]));
    }
}
