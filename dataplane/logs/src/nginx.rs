//! nginx's `log_format`: `$variable` and `${variable}` in literal text,
//! with `escape=default` (`\xHH`), `escape=json` or `escape=none`.

use crate::format::Format;
use crate::template::{Escape, Field, Template, Token};
use crate::time::TimeFormat;

/// nginx's predefined `combined` format.
pub const COMBINED: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent""#;

/// The `main` format of nginx.org's packages and official container
/// image: `combined` and the X-Forwarded-For header.
pub const MAIN: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" "$http_x_forwarded_for""#;

/// What a variable is, for the dry run.
pub fn variable(name: &str) -> Field {
    match name {
        "remote_addr" | "realip_remote_addr" => Field::ClientIp,
        "server_addr" => Field::ServerIp,
        "server_port" => Field::ServerPort,
        "time_local" => Field::Time(TimeFormat::Clf),
        "time_iso8601" => Field::Time(TimeFormat::Iso8601),
        "msec" => Field::Time(TimeFormat::EpochSecondsMillis),
        "request" => Field::RequestLine,
        "request_method" => Field::Method,
        "request_uri" => Field::Target,
        "uri" | "document_uri" => Field::Path,
        "args" | "query_string" => Field::Query,
        "is_args" => Field::IsArgs,
        "host" => Field::Host,
        n => match n.strip_prefix("http_") {
            Some(h) if !h.is_empty() => Field::Header(h.replace('_', "-").to_ascii_lowercase()),
            _ => Field::Skip,
        },
    }
}

/// Joins the quoted strings of a `log_format` directive as nginx does
/// (`'…' '…'`); text that is not quoted is taken as it is.
fn unquote(s: &str) -> String {
    let t = s.trim();
    if !t.starts_with('\'') && !t.starts_with('"') {
        return s.to_string();
    }
    let mut out = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            continue;
        }
        while let Some(d) = chars.next() {
            match d {
                '\\' => {
                    if let Some(e) = chars.next() {
                        out.push(e);
                    }
                }
                d if d == c => break,
                d => out.push(d),
            }
        }
    }
    out
}

/// Compiles an nginx `log_format` (optionally starting with `escape=…`).
pub fn compile(name: &str, spec: &str) -> Result<Format, String> {
    let mut spec = spec.trim_start();
    let mut esc = Escape::NginxHex;
    if let Some(rest) = spec.strip_prefix("escape=") {
        let (e, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        esc = match e {
            "default" => Escape::NginxHex,
            "json" => Escape::Json,
            "none" => Escape::None,
            _ => return Err(format!("escape={e}: nginx knows default, json and none")),
        };
        spec = rest;
    }
    let spec = unquote(spec);
    let b = spec.as_bytes();
    let mut tokens = Vec::new();
    let mut lit = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            lit.push(b[i]);
            i += 1;
            continue;
        }
        let (var, next) = if b.get(i + 1) == Some(&b'{') {
            let end = spec[i + 2..]
                .find('}')
                .ok_or("an unclosed ${ in the format")?
                + i
                + 2;
            (&spec[i + 2..end], end + 1)
        } else {
            let len = b[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            (&spec[i + 1..i + 1 + len], i + 1 + len)
        };
        if var.is_empty() {
            lit.push(b'$');
            i += 1;
            continue;
        }
        tokens.push(Token::Lit(std::mem::take(&mut lit)));
        tokens.push(Token::Field(variable(var), esc));
        i = next;
    }
    tokens.push(Token::Lit(lit));
    let mut f = Format::from_template(name, Template::new(tokens), false);
    // `$uri` is decoded and normalised: the target as sent (`url`) only
    // comes from `$request` or `$request_uri`.
    let raw = ["$request", "${request}", "$request_uri", "${request_uri}"];
    if !raw.iter().any(|r| {
        spec.match_indices(r).any(|(i, _)| {
            !spec[i + r.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
    }) {
        f.known.url = false;
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_unquoted() {
        assert_eq!(unquote(r#"'$a "x" ' '$b'"#), r#"$a "x" $b"#);
        assert_eq!(unquote("$a $b"), "$a $b");
    }
}
