//! `rctl fmt`: canonical, idempotent, comment-preserving.

use crate::util::*;
use rctl_compiler::source::SourceMap;

fn format(text: &str) -> String {
    let mut map = SourceMap::new();
    let id = map.add("t.rctl".into(), text.into());
    let src = map.get(id).unwrap();
    let mut d = Default::default();
    let f = rctl_compiler::parse::parse_file(src, id, &Default::default(), &mut d);
    assert!(!d.has_errors());
    rctl_compiler::fmt::format_file(&f, src)
}

const MESSY: &str = "# leading comment

IPBLOCK   cloud/x{10.0.0.0/8,   # trailing
2001:db8::/32}
pattern ua/x {header(\"User-Agent\")~*\"^curl\\\\/\"   OR   HEADER(\"x\") Absent}
rule   r{
    # about the condition
  WHEN  pattern@ua/x  AND NOT(ipblock@cloud/x or ip==192.0.2.1)   # why
      and port in {80,443}
  Throttle 10 Requests per 1m BY ip , header(\"x\") ban 5m
  priority 5 sites{a,b}
}
test \"t\"{request lbl{path \"/\" header \"A\" \"b\" repeat 3 over 1s}
expect for lbl ALL pass}
# trailing comment
";

#[test]
fn canonical_output() {
    let want = "# leading comment

ipblock cloud/x {
  10.0.0.0/8 # trailing
  2001:db8::/32
}

pattern ua/x {
  header(\"User-Agent\") ~* \"^curl\\\\/\" or header(\"x\") absent
}

rule r {
  # about the condition
  when pattern@ua/x and not (ipblock@cloud/x or ip == 192.0.2.1) and port in { 80, 443 } # why
  throttle 10 requests per 1m by ip, header(\"x\") ban 5m
  priority 5
  sites { a, b }
}

test \"t\" {
  request lbl {
    path \"/\"
    header \"A\" \"b\"
    repeat 3 over 1s
  }
  expect for lbl all pass
}
# trailing comment
";
    assert_eq!(format(MESSY), want);
}

#[test]
fn a_replay_is_written_canonically() {
    let src = "test \"day\" {REPLAY   scraper \"logs/day.log\"  IP 45.83.64.0/24 Captured \"Host:64\" format \"nginx-combined\"
expect for scraper all deny}
rule r { when true deny }
";
    let want = "test \"day\" {
  replay scraper \"logs/day.log\" format \"nginx-combined\" captured \"Host:64\" ip 45.83.64.0/24
  expect for scraper all deny
}

rule r {
  when true
  deny
}
";
    assert_eq!(format(src), want);
    assert_eq!(format(want), want);
}

#[test]
fn idempotent_and_meaning_preserving() {
    let once = format(MESSY);
    assert_eq!(format(&once), once);
    let a = compile(MESSY).ruleset.unwrap();
    let b = compile(&once).ruleset.unwrap();
    let shape = |r: &rctl_compiler::ir::Rule| {
        (
            r.name.clone(),
            r.priority,
            r.sites.clone(),
            r.cond.clone(),
            r.action.clone(),
        )
    };
    assert_eq!(
        a.rules.iter().map(shape).collect::<Vec<_>>(),
        b.rules.iter().map(shape).collect::<Vec<_>>()
    );
    assert_eq!(a.atoms, b.atoms);
    assert_eq!(MESSY.matches('#').count(), once.matches('#').count());
    for entry in std::fs::read_dir(root().join("rules")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "rctl") {
            let text = std::fs::read_to_string(&p).unwrap();
            assert_eq!(format(&text), text, "{} is not canonical", p.display());
        }
    }
}

/// Only the language's own whitespace (space, tab, carriage return,
/// newline) is whitespace to the formatter: an address-list entry made
/// of other characters Unicode calls spaces (a no-break space, a
/// vertical tab, an ideographic space) is an entry, kept as it is, not a
/// blank line that the next formatting drops.
#[test]
fn unicode_spaces_are_entries_not_blank_lines() {
    for odd in [
        "\u{a0}", "\u{b}", "\u{c}", "\u{3000}", "\u{85}", "\u{2028}", "x\u{a0}",
    ] {
        let text = format!(
            "ipblock net/a {{\n  comment \"c\"\n  {odd}\n  file \"f.txt\"\n  10.0.0.0/8 {odd}# note\n}}\n\n# {odd}\n\nrule r {{\n  when ipblock@net/a\n  deny 403\n}}\n"
        );
        let once = format(&text);
        assert_eq!(format(&once), once, "{odd:?}");
        assert!(once.contains(&format!("\n  {odd}\n")), "{odd:?}: {once}");
    }
}
