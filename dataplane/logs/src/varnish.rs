//! varnishncsa's formats: its default and any `-F` format.

use crate::format::Format;
use crate::template::{Escape, Field, Template, Token};
use crate::time::TimeFormat;

/// varnishncsa's default format.
pub const DEFAULT: &str = r#"%h %l %u %t "%r" %s %b "%{Referer}i" "%{User-agent}i""#;

/// Compiles a varnishncsa `-F` format.
pub fn compile(name: &str, spec: &str) -> Result<Format, String> {
    let mut tokens = Vec::new();
    let mut lit = Vec::new();
    let mut rest = spec;
    // varnishncsa escapes `"` and `\` and control bytes with backslashes
    // in header values and the request line.
    let esc = Escape::Backslash;
    while let Some(i) = rest.find('%') {
        lit.extend_from_slice(&rest.as_bytes()[..i]);
        rest = &rest[i + 1..];
        if let Some(r) = rest.strip_prefix('%') {
            lit.push(b'%');
            rest = r;
            continue;
        }
        let mut arg = None;
        if let Some(r) = rest.strip_prefix('{') {
            let end = r.find('}').ok_or("an unclosed %{ in the format")?;
            arg = Some(&r[..end]);
            rest = &r[end + 1..];
        }
        let c = rest.chars().next().ok_or("a % at the end of the format")?;
        rest = &rest[c.len_utf8()..];
        let field = match (c, arg) {
            ('h', _) => Field::ClientIp,
            ('t', None) => Field::Time(TimeFormat::Clf),
            ('t', Some("sec")) => Field::Time(TimeFormat::EpochSeconds),
            ('t', Some("msec")) => Field::Time(TimeFormat::EpochMillis),
            ('t', Some("usec")) => Field::Time(TimeFormat::EpochMicros),
            ('r', _) => Field::RequestLine,
            ('m', _) => Field::Method,
            ('U', _) => Field::Path,
            ('q', _) => Field::Query,
            ('i', Some(h)) => Field::Header(h.to_ascii_lowercase()),
            _ => Field::Skip,
        };
        tokens.push(Token::Lit(std::mem::take(&mut lit)));
        tokens.push(Token::Field(field, esc));
    }
    lit.extend_from_slice(rest.as_bytes());
    tokens.push(Token::Lit(lit));
    let mut f = Format::from_template(name, Template::new(tokens), false);
    // `%r` is `METHOD http://HOST/PATH PROTOCOL`, the Host header's value.
    if spec.contains("%r") && !f.known.host {
        f.host_from_request_line();
    }
    Ok(f)
}
