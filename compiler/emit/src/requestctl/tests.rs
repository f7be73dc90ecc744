//! The raw-URL rewrites checked against rctl's own normalisation on
//! generated targets, and the tree's shape on small rulesets.

use super::url::{host_eq, path_literal, path_regex};
use super::*;
use rctl_compiler::ir::value::normalize_path;
use regex_automata::meta::Regex;
use regex_automata::util::syntax;

/// A PCRE pattern as written (bytes, no Unicode), compiled for the test.
fn raw(p: &str) -> Regex {
    Regex::builder()
        .syntax(syntax::Config::new().unicode(false).utf8(false))
        .build(p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Raw targets made of the pieces that normalisation treats differently.
fn targets() -> Vec<String> {
    let pieces = [
        "a", "A", "%61", "%41", "/", "%2F", "%2f", ".", "%2E", "%2e", "b", "%", "%6", "x", "~",
        "%7e", "?q=1", "é", "%C3%A9", "-", "%zz",
    ];
    let mut out = Vec::new();
    let mut seed = 0x2545_f491_u64;
    for len in 1..7 {
        for _ in 0..400 {
            let mut t = String::from("/");
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                t.push_str(pieces[(seed % pieces.len() as u64) as usize]);
            }
            out.push(t);
        }
    }
    for t in [
        "/a/b", "/a/.b", "/a/%2Eb", "/a/x/", "/a/x%2Fy", "/a/%61", "/a.b", "/a%2eb?x", "/a/",
    ] {
        out.push(t.into());
    }
    out
}

fn path_of(target: &str) -> String {
    normalize_path(target.split('?').next().unwrap_or(""))
}

#[test]
fn path_rewrites_match_exactly_what_the_normalised_path_matches() {
    let cases: Vec<(String, Regex)> = vec![
        ("^/a/[^/]+$".into(), Regex::new("^/a/[^/]+$").unwrap()),
        ("^/a/[^/]*/b".into(), Regex::new("^/a/[^/]*/b").unwrap()),
        ("^/a[.]b".into(), Regex::new("^/a[.]b").unwrap()),
        ("^/[ab]+x$".into(), Regex::new("^/[ab]+x$").unwrap()),
        ("^/(a|b)/[^/]+".into(), Regex::new("^/(a|b)/[^/]+").unwrap()),
    ];
    let mut checked = 0;
    for (p, rctl) in &cases {
        let pcre = raw(&path_regex(p, false).unwrap());
        for t in targets() {
            let want = rctl.is_match(path_of(&t).as_bytes());
            assert_eq!(pcre.is_match(t.as_bytes()), want, "{p} on {t:?}");
            checked += usize::from(want);
        }
    }
    for (v, eq) in [("/a.b", true), ("/a/", false), ("/a~", false), ("/a", true)] {
        let pcre = raw(&path_literal(v, eq).unwrap());
        for t in targets() {
            let n = path_of(&t);
            let want = if eq { n == v } else { n.starts_with(v) };
            assert_eq!(pcre.is_match(t.as_bytes()), want, "{v} ({eq}) on {t:?}");
            checked += usize::from(want);
        }
    }
    assert!(checked > 100, "too few matches to mean anything: {checked}");
}

#[test]
fn path_rewrites_refuse_what_they_cannot_write_exactly() {
    for p in ["/a", "^/a/[^/]{2}", "^/a/.", "^/%41", "^/a/[^/]+x"] {
        assert!(path_regex(p, false).is_err(), "{p}");
    }
    assert!(path_regex("^/a", true).is_err());
    assert!(path_literal("/50%", false).is_err());
}

#[test]
fn host_rewrite_matches_the_host_rctl_compares() {
    let strip = |h: &str| -> String {
        let h = if h.starts_with('[') {
            h.find(']').map_or(h, |i| &h[..=i])
        } else {
            match h.rfind(':') {
                Some(i)
                    if !h[..i].contains(':') && h[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    &h[..i]
                }
                _ => h,
            }
        };
        h.to_ascii_lowercase()
    };
    let hosts = [
        "en.wikipedia.org",
        "EN.Wikipedia.org:443",
        "en.wikipedia.org:",
        "en.wikipedia.org:x",
        "en.wikipedia.orgx",
        "xen.wikipedia.org",
        "a:1:en.wikipedia.org",
        "[::1]",
        "[::1]:80",
        "[::1]x",
        "",
        "en.wikipedia.org:80:80",
    ];
    for v in ["en.wikipedia.org", "[::1]"] {
        let re = raw(&host_eq(v).unwrap());
        for h in hosts {
            assert_eq!(re.is_match(h.as_bytes()), strip(h) == v, "{v} on {h:?}");
        }
    }
    assert!(host_eq("a:b").is_err() && host_eq("").is_err());
}

fn tree(src: &str, skip: bool) -> Result<Tree, Error> {
    let rs = crate::test_ruleset(src);
    emit(
        &rs,
        &Options {
            skip_unsupported: skip,
            ..Default::default()
        },
    )
}

#[test]
fn an_allow_is_written_into_the_later_rules() {
    let t = tree(
        "ipblock abuse/bad { 192.0.2.0/24 }\nrule updater {\n  when header(\"user-agent\") == \"updater\"\n  allow\n}\nrule block {\n  when ipblock@abuse/bad\n  deny 403 \"no\"\n}\n",
        false,
    )
    .unwrap();
    let action = &t
        .files
        .iter()
        .find(|f| f.0.ends_with("/block.yaml"))
        .unwrap()
        .1;
    assert!(
        action.contains("expression: 'ipblock@abuse/bad AND NOT pattern@rctl/block-1'"),
        "{action}"
    );
    assert!(t
        .files
        .iter()
        .any(|f| f.0 == "request-ipblocks/abuse/bad.yaml" && f.1.contains("- 192.0.2.0/24")));
    assert!(!t.files.iter().any(|f| f.0.ends_with("/updater.yaml")));
}

#[test]
fn unsupported_rules_are_named_or_skipped() {
    let src = "rule z_first {\n  when method == \"GET\"\n  deny 403 \"x\"\n}\nrule a_second {\n  when method == \"POST\"\n  deny 403 \"y\"\n}\nrule q {\n  when query(\"a\") == \"b\"\n  deny 403 \"q\"\n}\n";
    let Err(Error::Unsupported(why)) = tree(src, false) else {
        panic!("refused");
    };
    let names: Vec<&str> = why.iter().map(|w| w.0.as_str()).collect();
    assert_eq!(names, ["a_second", "q"], "{why:?}");
    assert!(why[0].1.contains("before z_first"), "{why:?}");
    let t = tree(src, true).unwrap();
    assert_eq!(t.skipped.len(), 2);
    assert!(t
        .files
        .iter()
        .any(|f| f.0 == "request-actions/cache-text/z_first.yaml"));
}

#[test]
fn negations_lead_only_after_and_or_or() {
    let t = tree(
        "rule r {\n  when not header(\"a\") present or not header(\"b\") present\n  deny 403 \"x\"\n}\n",
        false,
    )
    .unwrap();
    let action = &t.files.iter().find(|f| f.0.ends_with("/r.yaml")).unwrap().1;
    assert!(
        action.contains(
            "expression: '(pattern@rctl/any AND NOT pattern@rctl/r-1) OR NOT pattern@rctl/r-2'"
        ),
        "{action}"
    );
    assert!(t
        .files
        .iter()
        .any(|f| f.0 == "request-patterns/rctl/any.yaml"));
}
