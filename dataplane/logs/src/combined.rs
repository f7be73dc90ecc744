//! nginx's `combined` format, read by a parser written for its one shape.
//!
//! Most nginx logs are `combined`. The template reader reads every format
//! by walking its tokens, and on this one spent about as much on the walk
//! (which token comes next, what ends the field, the closure per field)
//! as on the bytes. This reader makes the same searches in the same
//! order with the format's literals written into it, and gives up
//! (`None`) on a line of any other shape, which the template then reads,
//! and reports if it is bad. Each search below finds what the template's
//! finds: where the template looks for the first occurrence of a literal
//! such as `" "`, this reader looks for the first occurrence of the
//! literal's first byte and gives up unless the rest of the literal
//! follows it, so the two ends agree whenever this reader goes on. A test
//! and a fuzz target compare the records of the two readers line by line.

use crate::bytes::find_byte;
use crate::format::{parse_ip, request_line};
use crate::record::{HeaderValue, Record};
use crate::template::{unescape, Escape, Field, Token};
use crate::time::TimeFormat;

/// The reader of one format whose template is nginx's `combined` with
/// the default escaping: the header indexes its two headers have.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Combined {
    referer: u16,
    user_agent: u16,
}

impl Combined {
    /// The reader for a template of these `tokens` (with the format's
    /// header `names`), if the template is nginx's `combined`
    /// (`$remote_addr - $remote_user [$time_local] "$request" $status
    /// $body_bytes_sent "$http_referer" "$http_user_agent"`) with nginx's
    /// default escaping.
    pub(crate) fn new(tokens: &[Token], names: &[String]) -> Option<Combined> {
        let [t0, l0, t1, l1, t2, l2, t3, l3, t4, l4, t5, l5, t6, l6, t7, l7] = tokens else {
            return None;
        };
        let lit = |t: &Token, s: &[u8]| matches!(t, Token::Lit(l) if l == s);
        let field = |t: &Token, f: &Field| matches!(t, Token::Field(g, _) if g == f);
        let hex = |t: &Token, f: &Field| matches!(t, Token::Field(g, Escape::NginxHex) if g == f);
        let header = |h: &str| names.iter().position(|n| n == h).map(|i| i as u16);
        let shape = field(t0, &Field::ClientIp)
            && lit(l0, b" - ")
            && field(t1, &Field::Skip)
            && lit(l1, b" [")
            && field(t2, &Field::Time(TimeFormat::Clf))
            && lit(l2, b"] \"")
            && hex(t3, &Field::RequestLine)
            && lit(l3, b"\" ")
            && field(t4, &Field::Skip)
            && lit(l4, b" ")
            && field(t5, &Field::Skip)
            && lit(l5, b" \"")
            && hex(t6, &Field::Header("referer".into()))
            && lit(l6, b"\" \"")
            && hex(t7, &Field::Header("user-agent".into()))
            && lit(l7, b"\"");
        if !shape {
            return None;
        }
        Some(Combined {
            referer: header("referer")?,
            user_agent: header("user-agent")?,
        })
    }

    /// Reads `body` (found at offset `at` of its line) into `rec` and
    /// `arena`, both empty, as the template reads it; `None` if the line
    /// is of another shape or does not parse (what was written is then to
    /// be cleared, and the line read by the template).
    pub(crate) fn parse(
        &self,
        body: &[u8],
        at: usize,
        rec: &mut Record,
        arena: &mut Vec<u8>,
    ) -> Option<()> {
        // `ADDR - `: the template's first ` - ` is at the first space, or
        // this reader gives up.
        let e = until(body, 0, b" - ")?;
        rec.ip = parse_ip(&body[..e]);
        // `USER [`, `TIME] "`
        let t = until(body, e + 3, b" [")? + 2;
        let e = until(body, t, b"] \"")?;
        (rec.time_ns, rec.resolution_ns) = rec.last_time.parse(TimeFormat::Clf, &body[t..e])?;
        // `REQUEST" `: nginx writes a `"` in a value as `\x22`.
        let r = e + 3;
        // The values from here on have nothing to decode unless the rest
        // of the line holds a backslash: one search instead of one per
        // value.
        let esc = match memchr::memchr(b'\\', &body[r..]) {
            Some(_) => Escape::NginxHex,
            None => Escape::None,
        };
        let e = until(body, r, b"\" ")?;
        request_line(&body[r..e], at + r, esc, rec, arena).ok()?;
        // `STATUS `: three digits.
        let s = e + 2;
        match body.get(s..s + 4)? {
            [a, b, c, b' '] if a.is_ascii_digit() && b.is_ascii_digit() && c.is_ascii_digit() => {}
            _ => return None,
        }
        // `BYTES "`, `REFERER" "`
        let f = until(body, s + 4, b" \"")? + 2;
        let e = until(body, f, b"\" \"")?;
        header(rec, arena, self.referer, &body[f..e], at + f, esc);
        // `USER-AGENT"`, its quote the line's last byte.
        let a = e + 3;
        let e = until(body, a, b"\"")?;
        if e + 1 != body.len() {
            return None;
        }
        header(rec, arena, self.user_agent, &body[a..e], at + a, esc);
        Some(())
    }
}

/// Where a field from `from` ends: at the first `end[0]` after it, if
/// the rest of `end` follows (then the first occurrence of `end`, where
/// the template ends the field).
// Always inlined: `end` is then a constant, and its comparison a few
// byte compares rather than a call to `memcmp`.
#[inline(always)]
fn until(body: &[u8], from: usize, end: &[u8]) -> Option<usize> {
    let e = from + find_byte(body.get(from..)?, end[0])?;
    (body.get(e + 1..e + end.len())? == &end[1..]).then_some(e)
}

/// A header's value, at `p` of the line, unless it is absent (`-`).
#[inline]
fn header(rec: &mut Record, arena: &mut Vec<u8>, name: u16, v: &[u8], p: usize, esc: Escape) {
    if v.is_empty() || v == b"-" {
        return;
    }
    let value = unescape(v, p, esc, arena);
    rec.headers.push(HeaderValue { name, value });
}

#[cfg(test)]
mod tests {
    use crate::detect::{by_name, Spec};
    use crate::record::Record;
    use crate::Format;

    /// What a reading gave: the outcome, and every field of the record
    /// as values.
    fn read(f: &Format, line: &[u8]) -> String {
        let (mut rec, mut arena) = (Record::default(), Vec::new());
        let r = f.parse(line, &mut rec, &mut arena);
        let g =
            |s: crate::template::Span| String::from_utf8_lossy(s.get(line, &arena)).into_owned();
        let headers: Vec<_> = rec.headers.iter().map(|h| (h.name, g(h.value))).collect();
        format!(
            "{r:?} {} {} {:?} {:?} {:?} {} {} {} {:?} {:?} {headers:?} {:?} {:?} {}",
            rec.time_ns,
            rec.resolution_ns,
            rec.ip,
            rec.dst,
            rec.port,
            g(rec.method),
            g(rec.host),
            g(rec.target),
            rec.path.map(g),
            rec.query.map(g),
            rec.cut,
            rec.millis,
            rec.unnamed_captures,
        )
    }

    /// Lines as nginx writes them (escapes, IPv6, an empty request, an
    /// absolute URL, no referer), every prefix of them, and every line
    /// with one of a dozen bytes inserted or substituted at each place: the
    /// reader written for the format gives what the template gives, line
    /// for line, bad lines and their errors included.
    #[test]
    fn reads_every_line_as_the_template_does() {
        let fast = by_name("nginx-combined", &Spec::default()).unwrap();
        assert!(fast.combined.is_some());
        let slow = fast.template_only();
        assert!(slow.combined.is_none());
        let lines: [&[u8]; 6] = [
            br#"203.0.113.9 - - [01/Dec/2026:13:33:48 +0000] "GET /w/api.php?action=purge&x=%22y%22 HTTP/1.1" 200 3 "http://r/1" "quote\x22back\x5Cslash""#,
            br#"2001:db8::7 - bob [01/Dec/2026:13:33:49 +0100] "POST http://h.example/a?b HTTP/2.0" 404 0 "-" "curl/8.0""#,
            br#"::ffff:198.51.100.2 - - [01/Dec/2026:13:33:50 -0500] "-" 400 0 "-" "-""#,
            br#"198.51.100.2 - - [01/Dec/2026:13:33:50 +0000] "\x16\x03\x01" 400 157 "" """#,
            br#"10.0.0.1 - - [01/Dec/2026:13:33:51 +0000] "GET / HTTP/1.1" 200 612 "https://w.example/wiki/A" "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/121.0""#,
            br#"10.0.0.1 - - [31/Dec/2026:23:59:59 +0000] "GET /x\x5C HTTP/1.0" 301 - "-" "a\"b""#,
        ];
        let bytes = [
            b'"', b' ', b'\\', b']', b'[', b'-', b'x', b'2', b':', b'?', 0xff, 0,
        ];
        let mut n = 0;
        let mut check = |line: &[u8]| {
            assert_eq!(
                read(&fast, line),
                read(&slow, line),
                "{}",
                String::from_utf8_lossy(line)
            );
            n += 1;
        };
        for line in lines {
            check(line);
            for i in 0..=line.len() {
                check(&line[..i]);
                for &b in &bytes {
                    let mut l = line.to_vec();
                    l.insert(i, b);
                    check(&l);
                    if i < line.len() {
                        l.remove(i);
                        l[i] = b;
                        check(&l);
                    }
                }
            }
        }
        assert!(n > 10_000);
        // The good lines are read by the reader written for them, not
        // handed to the template (the comparison above is not of the
        // template with itself).
        let (mut rec, mut arena) = (Record::default(), Vec::new());
        let c = fast.combined.unwrap();
        let mut read = 0;
        for line in lines {
            rec.clear();
            arena.clear();
            if slow.parse(line, &mut rec, &mut arena).is_ok() {
                rec.clear();
                arena.clear();
                assert!(c.parse(line, 0, &mut rec, &mut arena).is_some());
                read += 1;
            }
        }
        assert_eq!(read, 3);
    }
}
