//! The values an operator gives that go into a proxy's configuration,
//! checked before anything is written: one function per kind of value,
//! used by every emitter, each refusing with an [`Error`] that names the
//! option.
//!
//! Each kind is held to what every target can write without quoting, so
//! that no value can end a word, a line or an argument list early, start
//! a comment, or be read as a flag: a space would let `unix:/x disabled`
//! add a keyword to HAProxy's `server` line, `#` comment out the rest of
//! it, `,` or `)` end a converter's argument list (`map_ip(DIR/…)`), `;`,
//! `{` or `}` end an nginx directive.

use crate::{Agent, Error, ErrorKind};

/// The flag of agent addresses.
pub const AGENT: &str = "--agent";

/// The punctuation [`path`] allows besides letters and digits.
pub const PATH_PUNCTUATION: &str = "-_./+@:";

/// The longest unix socket path (`sun_path` holds 108 bytes with the
/// terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Whether `b` may appear in an HTTP header name (RFC 9110 `tchar`).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A path or directory (`--config-dir`, a unix socket): not empty,
/// letters, digits and [`PATH_PUNCTUATION`] only.
pub fn path<'a>(option: &'static str, s: &'a str) -> Result<&'a str, Error> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || PATH_PUNCTUATION.as_bytes().contains(&b))
    {
        Ok(s)
    } else {
        Err(Error::new(option, ErrorKind::Path(s.to_string())))
    }
}

/// An agent address: a unix socket's path must be absolute, a [`path`],
/// and fit a socket address.
pub fn agent(option: &'static str, a: &Agent) -> Result<(), Error> {
    let Agent::Unix(p) = a else {
        return Ok(());
    };
    let bad = || Error::new(option, ErrorKind::Agent(a.to_string()));
    let s = p.to_str().ok_or_else(bad)?;
    if !s.starts_with('/') || s.len() > MAX_SOCKET_PATH || path(option, s).is_err() {
        return Err(bad());
    }
    Ok(())
}

/// A section's name (`--backend`): not empty, letters, digits and `-_.:`
/// (HAProxy's proxy names).
pub fn name<'a>(option: &'static str, s: &'a str) -> Result<&'a str, Error> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    {
        Ok(s)
    } else {
        Err(Error::new(option, ErrorKind::Name(s.to_string())))
    }
}

/// A header name (`--header`, `--client-ip-header`): an HTTP token;
/// returned in lower case. Each target then writes it its own way (and
/// may refuse names it cannot write).
pub fn header(option: &'static str, s: &str) -> Result<String, Error> {
    if !s.is_empty() && s.bytes().all(is_tchar) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(Error::new(option, ErrorKind::HeaderName(s.to_string())))
    }
}

/// A header the client's address is taken from (`--client-ip-header`):
/// letters, digits, `-` and `_` only, so that it goes into a sample
/// fetch's argument and an nginx variable's name as it is.
pub fn client_ip_header(option: &'static str, s: &str) -> Result<String, Error> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(Error::new(option, ErrorKind::HeaderName(s.to_string())))
    }
}

/// [`client_ip_header`] of `--client-ip-header` when one is given.
pub fn client_ip_header_flag(s: Option<&str>) -> Result<Option<String>, Error> {
    s.map(|h| client_ip_header("--client-ip-header", h))
        .transpose()
}

/// A backend's host (`--backend HOST:PORT`): an IP address, or a DNS name
/// of letters, digits, `-` and `.`.
pub fn host<'a>(option: &'static str, s: &'a str) -> Result<&'a str, Error> {
    let dns = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if dns || s.parse::<std::net::IpAddr>().is_ok() {
        Ok(s)
    } else {
        Err(Error::new(option, ErrorKind::Host(s.to_string())))
    }
}

/// A site (`--site`): a name of the rule language (letters, digits and
/// `-_.`). It selects rules and is written nowhere, but a name no rule
/// can carry would silently select only the rules for every site.
pub fn site<'a>(option: &'static str, s: &'a str) -> Result<&'a str, Error> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        Ok(s)
    } else {
        Err(Error::new(option, ErrorKind::Site(s.to_string())))
    }
}

/// Text for the files' comments (what the configuration was written
/// for): no control character, so that it cannot start a line of its own.
pub fn text<'a>(option: &'static str, s: &'a str) -> Result<&'a str, Error> {
    if s.chars().any(char::is_control) {
        Err(Error::new(option, ErrorKind::Text(s.to_string())))
    } else {
        Ok(s)
    }
}

/// A timeout in milliseconds (`--timeout-ms`): 1 to 60,000.
pub fn timeout(option: &'static str, ms: u64) -> Result<u64, Error> {
    if (1..=60_000).contains(&ms) {
        Ok(ms)
    } else {
        Err(Error::new(option, ErrorKind::Timeout(ms)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_would_change_a_configuration_are_refused_with_their_flag() {
        for bad in [
            "unix:/run/rctl/spoe.sock disabled #",
            "unix:/run/rctl/a;b",
            "unix:/run/rctl/a}",
            "unix:relative",
            "unix:/x,y",
            "unix:/x\"",
            "tcp:localhost:1",
            "1.2.3.4",
            "",
        ] {
            let e = Agent::parse(bad).unwrap_err();
            assert_eq!(e.option(), "--agent", "{bad}");
            assert!(e.to_string().starts_with("--agent: "), "{e}");
        }
        let long = format!("unix:/{}", "a".repeat(MAX_SOCKET_PATH));
        assert!(Agent::parse(&long).is_err());
        let fits = format!("unix:/{}", "a".repeat(MAX_SOCKET_PATH - 1));
        assert!(Agent::parse(&fits).is_ok());
        for ok in ["unix:/run/rctl/spoe.sock", "tcp:127.0.0.1:9000", "[::1]:9"] {
            assert!(Agent::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "/x),ipmask(0) -m found #",
            "/etc/haproxy/rctl dir",
            "/a'b",
            "/a$b",
            "/a\\b",
            "",
        ] {
            let e = path("--config-dir", bad).unwrap_err();
            assert!(e.to_string().starts_with("--config-dir: "), "{e}");
        }
        assert_eq!(
            path("--config-dir", "/etc/haproxy/rctl"),
            Ok("/etc/haproxy/rctl")
        );
        for bad in ["a b", "a/b", "a#", ""] {
            assert!(name("--backend", bad).is_err(), "{bad}");
        }
        for bad in ["X Y", "a:b", "a(b)", "", "é"] {
            assert!(header("--client-ip-header", bad).is_err(), "{bad}");
        }
        assert_eq!(header("--header", "X-Client-IP").unwrap(), "x-client-ip");
        for bad in ["a b", "\"x", "-x.example", "a..b", ""] {
            assert!(host("--backend", bad).is_err(), "{bad}");
        }
        for ok in ["127.0.0.1", "::1", "app-1.example.org"] {
            assert!(host("--backend", ok).is_ok(), "{ok}");
        }
        assert!(site("--site", "eqiad").is_ok());
        assert!(site("--site", "a b").is_err());
        assert!(text("source", "a\nglobal").is_err());
        assert!(timeout("--timeout-ms", 0).is_err());
        assert!(timeout("--timeout-ms", 60_001).is_err());
    }
}
