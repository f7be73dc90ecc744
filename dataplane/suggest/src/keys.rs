//! The keys heavy clients are found by: address and prefix, User-Agent
//! family, path template, query shape.

use std::net::IpAddr;

/// A User-Agent's family: its first product token, lower-cased, with its
/// version stripped (`python-requests/2.31.0` is `python-requests`);
/// browsers are one family each (`Firefox`, `Chrome`, `Safari`), empty
/// User-Agents `-`.
pub fn ua_family(ua: &[u8]) -> String {
    let ua = String::from_utf8_lossy(ua);
    let ua = ua.trim();
    if ua.is_empty() {
        return "-".into();
    }
    if ua.starts_with("Mozilla/5.0") {
        for b in ["Edg/", "Firefox/", "Chrome/", "Safari/"] {
            if ua.contains(b) {
                return format!("browser:{}", b.trim_end_matches('/').to_lowercase());
            }
        }
    }
    let first = ua
        .split(|c: char| c == '/' || c.is_whitespace() || c == '(' || c == ';')
        .next()
        .unwrap_or(ua);
    first.to_lowercase()
}

/// The User-Agent family's prefix as the rule language matches it: the
/// product token the User-Agent starts with, and its `/` (or the whole
/// User-Agent when it has none). A User-Agent that starts with
/// `Mozilla/` is its own family: every browser and many bots send that
/// token, so it tells nothing apart.
pub fn ua_prefix(ua: &[u8]) -> String {
    String::from_utf8_lossy(family_prefix(ua)).into_owned()
}

/// [`ua_prefix`] as bytes of `ua`.
pub fn family_prefix(ua: &[u8]) -> &[u8] {
    if ua.starts_with(b"Mozilla/") {
        return ua;
    }
    match ua.iter().position(|&b| b == b'/') {
        Some(i) => &ua[..=i],
        None => ua,
    }
}

/// A path's template: each segment that is an id (digits, a long hex
/// run, a UUID) becomes `*`; the rest is kept, so `/wiki/Special:Random`
/// and `/api/rest_v1/page/html/Paris` stay themselves and
/// `/w/123/edit` is `/w/*/edit`.
pub fn path_template(path: &[u8]) -> String {
    let mut out = Vec::with_capacity(path.len());
    template_into(path, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// [`path_template`] of `path`, appended to `out` as bytes.
pub fn template_into(path: &[u8], out: &mut Vec<u8>) {
    for (i, seg) in path.split(|&b| b == b'/').enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        if is_id(seg) {
            out.push(b'*');
        } else {
            out.extend_from_slice(seg);
        }
    }
}

/// Whether a path segment is an id: digits with at most two letters
/// before them and an extension after (`123`, `Q42`, `Q42.json`), or a
/// long hex run or UUID.
pub fn is_id(seg: &[u8]) -> bool {
    let stem = seg.split(|&b| b == b'.').next().unwrap_or(seg);
    let letters = stem.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    let digits = &stem[letters..];
    let numbered = letters <= 2 && !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
    let hex = seg.len() >= 12 && seg.iter().all(|&b| b.is_ascii_hexdigit() || b == b'-');
    numbered || hex
}

/// Most parameter names a query shape has.
pub const SHAPE_NAMES: usize = 8;

/// A query's shape: its parameter names, sorted, deduplicated, joined
/// by `&` (`query=a&format=json&query=b` is `format&query`).
pub fn query_shape(query: &[u8]) -> String {
    let mut out = Vec::new();
    shape_into(query, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes `query`'s shape ([`query_shape`]) into `out` and tells whether
/// it is one a rule can test as it is: between one and [`SHAPE_NAMES`]
/// names, each of letters, digits, `_`, `-`, `.` or `:` (so that
/// `query("NAME") present` reads the same name), at most 32 bytes.
pub fn shape_into(query: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let mut names: [&[u8]; SHAPE_NAMES] = [&[]; SHAPE_NAMES];
    let mut n = 0;
    let mut plain = true;
    for pair in query.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let name = pair.split(|&b| b == b'=').next().unwrap_or(pair);
        plain &= !name.is_empty()
            && name.len() <= 32
            && name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
        if names[..n].contains(&name) {
            continue;
        }
        if n == SHAPE_NAMES {
            return false;
        }
        names[n] = name;
        n += 1;
    }
    let names = &mut names[..n];
    names.sort_unstable();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(name);
    }
    plain && n > 0
}

/// The /24 of an IPv4 address, the /48 of an IPv6 one: its network
/// address.
pub fn network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) & 0xffff_ff00).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & !((1u128 << 80) - 1)).into()),
    }
}

/// The /24 of an IPv4 address, the /48 of an IPv6 one, as CIDR text.
pub fn prefix(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            format!("{}.{}.{}.0/24", o[0], o[1], o[2])
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_templates_shapes_and_prefixes() {
        assert_eq!(ua_family(b"python-requests/2.31.0"), "python-requests");
        assert_eq!(ua_prefix(b"python-requests/2.31.0"), "python-requests/");
        let bot = b"Mozilla/5.0 (compatible; ExampleBot/1.0)";
        assert_eq!(family_prefix(bot), bot);
        assert_eq!(
            ua_family(b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"),
            "browser:firefox"
        );
        assert_eq!(ua_family(b""), "-");
        assert_eq!(path_template(b"/w/123/edit"), "/w/*/edit");
        assert_eq!(path_template(b"/sparql"), "/sparql");
        assert_eq!(path_template(b"/x/0123456789abcdef"), "/x/*");
        assert_eq!(
            path_template(b"/wiki/Special:EntityData/Q42.json"),
            "/wiki/Special:EntityData/*"
        );
        assert_eq!(
            path_template(b"/api/rest_v1/page/html/Paris"),
            "/api/rest_v1/page/html/Paris"
        );
        assert_eq!(query_shape(b"query=a&format=json&query=b"), "format&query");
        let mut b = Vec::new();
        assert!(shape_into(b"page=X&action=parse&format=json&page", &mut b));
        assert_eq!(b, b"action&format&page");
        assert!(!shape_into(b"", &mut b));
        assert!(!shape_into(b"a%20b=1", &mut b));
        assert!(!shape_into(b"a&b&c&d&e&f&g&h&i", &mut b));
        assert!(shape_into(b"a&b&c&d&e&f&g&h&a", &mut b));
        assert_eq!(prefix("185.220.101.7".parse().unwrap()), "185.220.101.0/24");
        let net = network("2001:db8:5:1::7".parse().unwrap());
        assert_eq!(net, "2001:db8:5::".parse::<IpAddr>().unwrap());
        assert_eq!(prefix(net), "2001:db8:5::/48");
        assert_eq!(
            prefix("2001:db8:5:1::7".parse().unwrap()),
            "2001:db8:5::/48"
        );
    }
}
