//! Crafted artifacts: for every check of the decoder, a payload that fails
//! it and nothing else, with the checksum recomputed, so that the check
//! itself (and not the checksum) must reject it, with its own error kind.
//! Most are made by decoding the v1 fixture, changing the ruleset and
//! encoding it again (which writes a fresh checksum); what the encoder
//! cannot write is made by changing bytes and fixing the checksum by hand.
//! Then: what the compiler refuses so that it never writes such an
//! artifact, and what the data planes do with such a ruleset built in
//! memory, where no decoder stands in front of them.

use rctl_compiler::artifact::{decode, decode_with, encode, sha256};
use rctl_compiler::ir::*;
use rctl_compiler::{ArtifactErrorKind, Invalid, Options, TagOf};
use rctl_dataplane::xdp::{Tables, TablesError};
use rctl_dataplane::{Engine, EngineConfig, EngineError, IndexError, NaiveEngine};

fn golden_bytes() -> Vec<u8> {
    std::fs::read("tests/data/artifact-v1.rctlc").unwrap()
}

fn golden() -> Ruleset {
    decode(&golden_bytes()).unwrap()
}

fn rule<'a>(rs: &'a mut Ruleset, name: &str) -> &'a mut Rule {
    rs.rules.iter_mut().find(|r| r.name == name).unwrap()
}

fn throttle<'a>(rs: &'a mut Ruleset, name: &str) -> &'a mut Throttle {
    match &mut rule(rs, name).action {
        Action::Throttle(t) => t,
        a => panic!("{name} is a {a:?}"),
    }
}

fn atom_where(rs: &Ruleset, f: impl Fn(&Atom) -> bool) -> usize {
    rs.atoms.iter().position(f).unwrap()
}

fn plan<'a>(rs: &'a mut Ruleset, name: &str) -> &'a mut XdpRule {
    let i = rs.rules.iter().position(|r| r.name == name).unwrap();
    rs.plan[i].xdp.as_mut().unwrap()
}

/// The invariant `bytes` break, from the decoder's error.
fn invalid_with(bytes: &[u8], opts: &Options) -> Invalid {
    match decode_with(bytes, opts) {
        Err(e) => match e.kind {
            ArtifactErrorKind::Invalid(what) => {
                assert!(e.offset <= bytes.len(), "{what}");
                what
            }
            other => panic!("expected an invalid artifact, got {other:?}"),
        },
        Ok(_) => panic!("the crafted artifact was accepted"),
    }
}

fn invalid(bytes: &[u8]) -> Invalid {
    invalid_with(bytes, &Options::default())
}

/// Recomputes the payload length and the content hash in the header.
fn fix_checksum(b: &mut [u8]) {
    let len = (b.len() - 56) as u64;
    b[16..24].copy_from_slice(&len.to_le_bytes());
    let hash = sha256(&b[56..]);
    b[24..56].copy_from_slice(&hash);
}

/// Where `needle` starts in `hay`; it must occur exactly once.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    let mut at = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| w == &needle);
    let (i, _) = at.next().expect("marker not found");
    assert!(at.next().is_none(), "marker is not unique");
    i
}

/// A length-prefixed string, as the artifact writes it.
fn wire_str(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// Sets the byte at `at` (checking it held `was`) and fixes the checksum.
fn patch(at: usize, was: u8, now: u8) -> Vec<u8> {
    let mut b = golden_bytes();
    assert_eq!(b[at], was, "the fixture's layout changed");
    b[at] = now;
    fix_checksum(&mut b);
    b
}

/// Where the fields after rule `name`'s name start.
fn after_rule_name(name: &str) -> usize {
    find(&golden_bytes(), &wire_str(name)) + 4 + name.len()
}

/// For each case: change the fixture's ruleset, encode it (with a fresh
/// checksum), and expect the decoder to name the broken invariant.
macro_rules! crafted {
    ($($name:ident: |$rs:ident| $change:expr => $want:pat,)*) => {$(
        #[test]
        fn $name() {
            let mut $rs = golden();
            $change;
            let got = invalid(&encode(&$rs));
            assert!(matches!(got, $want), "got {got:?}");
        }
    )*};
}

#[test]
fn the_fixture_and_every_compiled_ruleset_pass_every_check() {
    assert_eq!(encode(&golden()), golden_bytes());
    let mut files = vec![crate::util::root().join("rules")];
    files.extend(crate::util::corpus_files());
    for f in files {
        let c = rctl_compiler::compile_paths(std::slice::from_ref(&f), &Options::default());
        let rs = c
            .ruleset
            .unwrap_or_else(|| panic!("{} compiles", f.display()));
        assert_eq!(decode(&encode(&rs)).unwrap(), rs, "{}", f.display());
    }
}

// ------------------------------------------------------------ the encoding

#[test]
fn reserved_header_field() {
    let mut b = golden_bytes();
    b[10] = 1;
    assert_eq!(invalid(&b), Invalid::ReservedHeader);
}

#[test]
fn endianness_marker() {
    let mut b = golden_bytes();
    b[12..16].copy_from_slice(&0x0403_0201u32.to_le_bytes());
    assert_eq!(invalid(&b), Invalid::Endianness);
}

#[test]
fn bytes_past_the_declared_length() {
    let mut b = golden_bytes();
    b.push(0);
    assert_eq!(invalid(&b), Invalid::TrailingBytes(1));
}

#[test]
fn trailing_bytes_are_counted_from_the_declared_end() {
    let good = golden_bytes();
    let mut b = good.clone();
    b.extend_from_slice(&[0, 1, 2]);
    let e = decode_with(&b, &Options::default()).unwrap_err();
    assert_eq!(
        e.kind,
        ArtifactErrorKind::Invalid(Invalid::TrailingBytes(3))
    );
    assert_eq!(e.offset, good.len(), "where the declared payload ends");
}

/// A validation error's offset is where the broken item starts: here
/// the rule, whose record begins with its name.
#[test]
fn a_validation_error_points_at_the_item_it_is_about() {
    let mut rs = golden();
    rule(&mut rs, "tools").cond = Cond::Atom(400);
    let b = encode(&rs);
    let e = decode_with(&b, &Options::default()).unwrap_err();
    assert!(matches!(e.kind, ArtifactErrorKind::Invalid(_)), "{e:?}");
    assert_eq!(e.offset, find(&b, &wire_str("tools")), "{e:?}");
}

/// How deep rule `name`'s condition nests (a leaf is 1), without recursion.
fn rule_depth(rs: &Ruleset, name: &str) -> usize {
    let r = rs.rules.iter().find(|r| r.name == name).unwrap();
    let mut c = &r.cond;
    let mut d = 1;
    while let Cond::Not(x) = c {
        c = x;
        d += 1;
    }
    d
}

/// 100,000 `not`s (then `and`s, `or`s) around one predicate, written in the encoding by hand
/// (the encoder would recurse): refused by the decoder's own depth count
/// before anything walks the tree.
#[test]
fn a_chain_of_nots_deeper_than_an_artifact_holds_is_refused_while_reading() {
    let mut rs = golden();
    let atom = rs.atoms.len() as u32 - 1;
    rule(&mut rs, "tools").cond = Cond::Not(Box::new(Cond::Atom(atom)));
    let b = encode(&rs);
    // nodes = 2, then the atom (tag 2) and the not (tag 3).
    let mut one = 2u32.to_le_bytes().to_vec();
    one.push(2);
    one.extend_from_slice(&atom.to_le_bytes());
    one.push(3);
    let at = find(&b, &one);
    let nots = |n: u32| {
        let mut deep = (n + 1).to_le_bytes().to_vec();
        deep.push(2);
        deep.extend_from_slice(&atom.to_le_bytes());
        deep.extend(std::iter::repeat_n(3u8, n as usize));
        let mut c = b[..at].to_vec();
        c.extend_from_slice(&deep);
        c.extend_from_slice(&b[at + one.len()..]);
        fix_checksum(&mut c);
        c
    };
    // As deep as an artifact holds (the atom and 511 nots): read.
    let at_limit = decode(&nots(511)).expect("512 deep is within the limit");
    assert_eq!(rule_depth(&at_limit, "tools"), 512);
    assert_eq!(invalid(&nots(512)), Invalid::CondDepth);
    let n = 100_000u32;
    assert_eq!(invalid(&nots(n)), Invalid::CondDepth);
    // The same depth of one-operand `and`s and `or`s (tags 4 and 5).
    for tag in [4u8, 5] {
        let mut deep = (n + 1).to_le_bytes().to_vec();
        deep.push(2);
        deep.extend_from_slice(&atom.to_le_bytes());
        for _ in 0..n {
            deep.push(tag);
            deep.extend_from_slice(&1u32.to_le_bytes());
        }
        let mut c = b[..at].to_vec();
        c.extend_from_slice(&deep);
        c.extend_from_slice(&b[at + one.len()..]);
        fix_checksum(&mut c);
        assert_eq!(invalid(&c), Invalid::CondDepth, "tag {tag}");
    }
}

#[test]
fn bytes_after_the_plan() {
    let mut b = golden_bytes();
    b.push(0);
    fix_checksum(&mut b);
    assert_eq!(invalid(&b), Invalid::TrailingBytes(1));
}

#[test]
fn a_count_past_the_end() {
    let mut b = golden_bytes();
    b[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
    fix_checksum(&mut b);
    assert_eq!(invalid(&b), Invalid::CountPastEnd(u32::MAX));
}

#[test]
fn a_string_that_is_not_utf8() {
    let at = after_rule_name("off") - 3;
    assert_eq!(invalid(&patch(at, b'o', 0xff)), Invalid::NotUtf8);
}

#[test]
fn a_boolean_byte_that_is_not_0_or_1() {
    // name, priority, seq, no sites, then `enabled` (false).
    let at = after_rule_name("off") + 12;
    assert_eq!(invalid(&patch(at, 0, 2)), Invalid::Bool(2));
}

#[test]
fn an_unknown_field_tag() {
    let at = find(&golden_bytes(), &wire_str("x-token")) - 1;
    assert_eq!(invalid(&patch(at, 5, 9)), Invalid::Tag(TagOf::Field, 9));
}

#[test]
fn an_unknown_operator_tag() {
    let at = find(&golden_bytes(), &wire_str("x-token")) + 11;
    assert_eq!(invalid(&patch(at, 0, 9)), Invalid::Tag(TagOf::Operator, 9));
}

#[test]
fn an_unknown_atom_tag() {
    let at = find(&golden_bytes(), &wire_str("x-token")) - 2;
    assert_eq!(invalid(&patch(at, 0, 9)), Invalid::Tag(TagOf::Atom, 9));
}

#[test]
fn an_unknown_protocol() {
    // Proto [Tcp]: atom tag 4, one protocol, 6.
    let at = find(&golden_bytes(), &[4, 1, 0, 0, 0, 6]) + 5;
    assert_eq!(invalid(&patch(at, 6, 2)), Invalid::Tag(TagOf::Protocol, 2));
}

#[test]
fn an_unknown_condition_tag() {
    // name, priority, seq, sites, enabled, shadow, comment, node count,
    // then the one node: `false`.
    let at = after_rule_name("off") + 22;
    assert_eq!(invalid(&patch(at, 1, 9)), Invalid::Tag(TagOf::Condition, 9));
}

#[test]
fn a_not_without_its_operand() {
    let at = after_rule_name("off") + 22;
    assert_eq!(invalid(&patch(at, 1, 3)), Invalid::CondShape);
}

#[test]
fn an_unknown_action_tag() {
    let at = after_rule_name("off") + 23;
    assert_eq!(invalid(&patch(at, 3, 9)), Invalid::Tag(TagOf::Action, 9));
}

#[test]
fn an_unknown_throttle_unit() {
    // …, one node (`atom 7`, five bytes), action tag, limit, then the unit.
    let at = after_rule_name("syn") + 32;
    assert_eq!(invalid(&patch(at, 2, 9)), Invalid::Tag(TagOf::Unit, 9));
}

#[test]
fn an_unknown_key_tag() {
    let at = find(&golden_bytes(), &wire_str("x-client")) - 1;
    assert_eq!(invalid(&patch(at, 6, 9)), Invalid::Tag(TagOf::Key, 9));
}

#[test]
fn an_unknown_plan_tag() {
    let at = find(&golden_bytes(), &wire_str("disabled")) + 12;
    assert_eq!(invalid(&patch(at, 0, 9)), Invalid::Tag(TagOf::Plan, 9));
}

crafted! {
    a_condition_nested_too_deep: |rs| {
        let r = rule(&mut rs, "tools");
        for _ in 0..600 {
            r.cond = Cond::Not(Box::new(std::mem::replace(&mut r.cond, Cond::True)));
        }
    } => Invalid::CondDepth,
}

// ------------------------------------------------------------ limits

#[test]
fn more_rules_than_the_limit() {
    let opts = Options {
        max_rules: 6,
        ..Options::default()
    };
    assert_eq!(
        invalid_with(&golden_bytes(), &opts),
        Invalid::TooManyRules(7)
    );
    assert!(decode_with(
        &golden_bytes(),
        &Options {
            max_rules: 7,
            ..opts
        }
    )
    .is_ok());
}

#[test]
fn more_regexes_than_the_limit() {
    let opts = Options {
        max_regexes: 0,
        ..Options::default()
    };
    assert_eq!(
        invalid_with(&golden_bytes(), &opts),
        Invalid::TooManyRegexes(1)
    );
}

#[test]
fn more_prefixes_than_the_limit() {
    let opts = Options {
        max_prefixes: 1,
        ..Options::default()
    };
    // t/nets holds two; the inline set is not an ipblock, as in the compiler.
    assert_eq!(
        invalid_with(&golden_bytes(), &opts),
        Invalid::TooManyPrefixes(2)
    );
}

#[test]
fn a_regex_over_the_size_limit() {
    let opts = Options {
        max_regex_bytes: 100,
        ..Options::default()
    };
    assert!(matches!(
        invalid_with(&golden_bytes(), &opts),
        Invalid::Regex(_)
    ));
}

/// Eleven regexes on one header, each within the per-regex limit: the
/// engine's one automaton for the field would be over its own limit, so
/// the engine could not load what the decoder accepted.
#[test]
fn a_field_whose_tests_do_not_fit_one_automaton() {
    let mut rs = golden();
    let field = StrField::Header("user-agent".into());
    for i in 0..11 {
        rs.atoms.push(Atom::Str {
            field: field.clone(),
            op: StrOp::Regex {
                pattern: format!(r"\w{{20}}{i}"),
                ci: false,
            },
        });
    }
    assert_eq!(
        invalid(&encode(&rs)),
        Invalid::FieldScan("header(\"user-agent\")".into())
    );
    rs.atoms.truncate(rs.atoms.len() - 1);
    let rs = decode(&encode(&rs)).expect("ten fit");
    Engine::new(rs, &EngineConfig::default()).expect("and the engine loads them");
}

crafted! {
    an_invalid_regex: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Str { op: StrOp::Regex { .. }, .. }));
        rs.atoms[a] = Atom::Str {
            field: StrField::Header("user-agent".into()),
            op: StrOp::Regex { pattern: "(unclosed".into(), ci: true },
        };
    } => Invalid::Regex(_),
}

// ------------------------------------------------------------ ip sets

crafted! {
    an_ip_set_name_outside_the_grammar: |rs| rs.ipsets[0].name = "t/nets\u{1b}[2J".into()
        => Invalid::IpSetName(_),
    two_ipblocks_with_one_name: |rs| rs.ipsets.push(rs.ipsets[0].clone())
        => Invalid::DuplicateIpSet(_),
    a_prefix_longer_than_the_address: |rs| rs.ipsets[0].prefixes.v4 = vec![(0xc000_0200, 33)]
        => Invalid::PrefixLength(33),
    a_prefix_with_host_bits: |rs| rs.ipsets[0].prefixes.v6[0].0 |= 1
        => Invalid::HostBits,
    prefixes_that_are_not_merged: |rs| {
        // 10.0.0.0/9 and 10.128.0.0/9 are 10.0.0.0/8.
        rs.ipsets[1].prefixes.v4 = vec![(0x0a00_0000, 9), (0x0a80_0000, 9)];
    } => Invalid::PrefixesNotMerged,
    overlapping_prefixes: |rs| rs.ipsets[1].prefixes.v4 = vec![(0x0a00_0000, 8), (0x0a01_0000, 16)]
        => Invalid::PrefixesNotMerged,
}

// ------------------------------------------------------------ predicates

crafted! {
    a_header_name_with_an_escape_sequence: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Present(_)));
        rs.atoms[a] = Atom::Present(StrField::Header("x\u{1b}[31m".into()));
    } => Invalid::HeaderName(_),
    a_header_name_in_upper_case: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Present(_)));
        rs.atoms[a] = Atom::Present(StrField::Header("User-Agent".into()));
    } => Invalid::HeaderName(_),
    a_host_value_in_upper_case: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Str { field: StrField::Host, .. }));
        rs.atoms[a] = Atom::Str { field: StrField::Host, op: StrOp::Eq("Example.org".into()) };
    } => Invalid::HostCase,
    a_case_sensitive_host_regex: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Str { field: StrField::Host, .. }));
        rs.atoms[a] = Atom::Str {
            field: StrField::Host,
            op: StrOp::Regex { pattern: "^example".into(), ci: false },
        };
    } => Invalid::HostCase,
    a_string_set_out_of_order: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Str { op: StrOp::In(_), .. }));
        let Atom::Str { op: StrOp::In(v), .. } = &mut rs.atoms[a] else { unreachable!() };
        v.reverse();
    } => Invalid::StrSetOrder,
    present_on_a_field_that_is_always_there: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Present(_)));
        rs.atoms[a] = Atom::Present(StrField::Method);
    } => Invalid::PresentField,
    an_address_test_on_a_missing_ip_set: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Ip(_)));
        rs.atoms[a] = Atom::Ip(99);
    } => Invalid::MissingIpSet(99),
    a_destination_test_on_a_missing_ip_set: |rs| rs.atoms.push(Atom::DstIp(2))
        => Invalid::MissingIpSet(2),
    a_reversed_port_range: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Port(_)));
        rs.atoms[a] = Atom::Port(vec![(443, 80)]);
    } => Invalid::PortRange,
    port_ranges_that_are_not_merged: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Port(_)));
        rs.atoms[a] = Atom::Port(vec![(80, 80), (81, 90)]);
    } => Invalid::PortsNotMerged,
    protocols_out_of_order: |rs| {
        let a = atom_where(&rs, |a| matches!(a, Atom::Proto(p) if p.len() == 2));
        rs.atoms[a] = Atom::Proto(vec![Proto::Udp, Proto::Tcp]);
    } => Invalid::ProtosNotSorted,
    a_predicate_twice: |rs| rs.atoms.push(rs.atoms[0].clone())
        => Invalid::DuplicateAtom,
}

// ------------------------------------------------------------ rules

crafted! {
    a_rule_name_with_an_escape_sequence: |rs| rule(&mut rs, "tools").name = "tools\u{1b}[2J".into()
        => Invalid::RuleName(_),
    a_rule_name_with_a_space: |rs| rule(&mut rs, "tools").name = "two words".into()
        => Invalid::RuleName(_),
    two_rules_with_one_name: |rs| rule(&mut rs, "tools").name = "exempt".into()
        => Invalid::DuplicateRule(_),
    a_priority_out_of_range: |rs| rule(&mut rs, "off").priority = 1_000_001
        => Invalid::Priority(1_000_001),
    rules_out_of_evaluation_order: |rs| {
        rs.rules.swap(0, 1);
        rs.plan.swap(0, 1);
    } => Invalid::Order,
    a_file_position_out_of_range: |rs| rule(&mut rs, "off").seq = 99
        => Invalid::Seq(99),
    a_file_position_twice: |rs| {
        // Still in order: (priority 1, 0) before (priority 2, 0).
        let seq = rule(&mut rs, "exempt").seq;
        rule(&mut rs, "bogus").seq = seq;
    } => Invalid::Seq(0),
    a_site_name_with_a_bell: |rs| rule(&mut rs, "scrapers").sites = vec!["eqiad\u{7}".into()]
        => Invalid::SiteName(_),
    sites_out_of_order: |rs| rule(&mut rs, "scrapers").sites.reverse()
        => Invalid::Sites,
    a_condition_on_a_missing_predicate: |rs| rule(&mut rs, "tools").cond = Cond::Atom(99)
        => Invalid::MissingAtom(99),
    a_deny_status_out_of_range: |rs| rule(&mut rs, "tools").action = Action::Deny {
        status: 200,
        reason: "OK".into(),
    } => Invalid::Status(200),
    a_deny_reason_with_an_escape_sequence: |rs| rule(&mut rs, "tools").action = Action::Deny {
        status: 403,
        reason: "no\u{1b}[31m".into(),
    } => Invalid::Reason('\u{1b}'),
    a_throttle_status_out_of_range: |rs| throttle(&mut rs, "scrapers").status = 600
        => Invalid::Status(600),
    a_throttle_reason_with_a_line_break: |rs| {
        throttle(&mut rs, "scrapers").reason = "slow down\r\nSet-Cookie: x".into();
    } => Invalid::Reason('\r'),
    a_throttle_reason_with_a_bidi_override: |rs| {
        throttle(&mut rs, "scrapers").reason = "slow \u{202e}nwod".into();
    } => Invalid::Reason('\u{202e}'),
    a_throttle_limit_of_zero: |rs| throttle(&mut rs, "scrapers").limit = 0
        => Invalid::ThrottleZero,
    a_throttle_burst_of_zero: |rs| throttle(&mut rs, "syn").burst = 0
        => Invalid::ThrottleZero,
    a_period_of_u64_max_ms: |rs| throttle(&mut rs, "scrapers").period_ms = u64::MAX
        => Invalid::Period(u64::MAX),
    a_period_of_zero: |rs| throttle(&mut rs, "syn").period_ms = 0
        => Invalid::Period(0),
    a_ban_of_u64_max_ms: |rs| throttle(&mut rs, "scrapers").ban_ms = u64::MAX
        => Invalid::Ban(u64::MAX),
    a_throttle_without_keys: |rs| throttle(&mut rs, "scrapers").keys.clear()
        => Invalid::NoKeys,
    a_throttle_key_twice: |rs| throttle(&mut rs, "scrapers").keys.push(Key::Path)
        => Invalid::DuplicateKey,
    global_with_other_keys: |rs| throttle(&mut rs, "scrapers").keys.push(Key::Global)
        => Invalid::GlobalNotAlone,
    a_packet_limit_keyed_by_host: |rs| throttle(&mut rs, "syn").keys = vec![Key::Host]
        => Invalid::PacketKey,
    a_shared_connection_limit: |rs| throttle(&mut rs, "syn").shared = true
        => Invalid::SharedPackets,
    a_prefix_key_longer_than_the_address: |rs| {
        throttle(&mut rs, "syn").keys = vec![Key::Prefix { v4: 33, v6: 64 }];
    } => Invalid::PrefixKeyLength,
    a_header_key_in_upper_case: |rs| {
        throttle(&mut rs, "scrapers").keys.push(Key::Header("X-Other".into()));
    } => Invalid::KeyHeaderCase,
    a_packet_limit_reading_http_fields: |rs| {
        let http = atom_where(&rs, |a| matches!(a, Atom::Present(_)));
        let r = rule(&mut rs, "syn");
        r.cond = Cond::And(vec![r.cond.clone(), Cond::Atom(http as u32)]);
    } => Invalid::PacketLimitReadsHttp,
    an_origin_outside_the_sources: |rs| rule(&mut rs, "tools").origin.file = "/etc/shadow".into()
        => Invalid::OriginFile(_),
    an_origin_at_line_0: |rs| rule(&mut rs, "tools").origin.line = 0
        => Invalid::OriginPosition,
}

// ------------------------------------------------------------ plans

crafted! {
    fewer_plans_than_rules: |rs| { rs.plan.pop(); }
        => Invalid::PlanCount { plans: 6, rules: 7 },
    an_xdp_term_on_a_missing_predicate: |rs| plan(&mut rs, "bogus").dnf[0][0].0 = 99
        => Invalid::PlanAtom(99),
    an_xdp_term_on_an_http_field: |rs| {
        let http = atom_where(&rs, |a| matches!(a, Atom::Present(_))) as u32;
        plan(&mut rs, "bogus").dnf[0][0].0 = http;
    } => Invalid::PlanAtom(_),
    an_xdp_term_on_a_predicate_its_rule_does_not_read: |rs| {
        // `proto == tcp` is the syn limit's, not the drop's.
        let tcp = atom_where(&rs, |a| *a == Atom::Proto(vec![Proto::Tcp])) as u32;
        plan(&mut rs, "bogus").dnf[0].push((tcp, false));
    } => Invalid::PlanForeignAtom(_),
    an_xdp_drop_for_a_deny: |rs| {
        let i = rs.rules.iter().position(|r| r.name == "tools").unwrap();
        rs.plan[i].xdp = Some(XdpRule { kind: XdpKind::Drop, dnf: vec![vec![]] });
    } => Invalid::PlanKind,
    an_xdp_plan_for_a_shadow_rule: |rs| rule(&mut rs, "bogus").shadow = true
        => Invalid::PlanKind,
    an_xdp_plan_for_a_disabled_rule: |rs| rule(&mut rs, "bogus").enabled = false
        => Invalid::PlanKind,
    an_xdp_allow_for_a_drop: |rs| plan(&mut rs, "bogus").kind = XdpKind::Allow
        => Invalid::PlanKind,
    an_xdp_exempt_for_an_allow_on_addresses_only: |rs| {
        let set = atom_where(&rs, |a| matches!(a, Atom::Ip(_))) as u32;
        rule(&mut rs, "exempt").cond = Cond::Atom(set);
    } => Invalid::PlanKind,
}

#[test]
fn an_xdp_plan_with_more_terms_than_the_limit() {
    let opts = Options {
        max_dnf_terms: 0,
        ..Options::default()
    };
    assert_eq!(invalid_with(&golden_bytes(), &opts), Invalid::PlanTerms(1));
}

// ------------------------------------------------------------ the compiler

fn compile_error(src: &str) -> String {
    let c = rctl_compiler::compile_str("t.rctl", src, &Options::default());
    assert!(c.ruleset.is_none(), "compiled:\n{src}");
    c.diagnostics
        .iter()
        .map(|d| d.render(&c.sources))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The compiler refuses what the decoder would, pointing at the rule: a
/// reason with a carriage return would split an HTTP response's header.
#[test]
fn the_compiler_refuses_a_reason_the_decoder_would() {
    let out = compile_error(
        "rule slow {\n  when path == \"/x\"\n  throttle 1 requests per 1s reason \"a\rSet-Cookie: x\"\n}\n",
    );
    assert!(
        out.contains("error[E0026]: rule `slow`: reason has the control or bidi character U+000D"),
        "{out}"
    );
    assert!(out.contains("t.rctl:1:6"), "{out}");
    let out = compile_error("rule no {\n  when path == \"/x\"\n  deny 403 \"no\u{1b}[2J\"\n}\n");
    assert!(out.contains("U+001B"), "{out}");
}

/// Path normalisation is not idempotent (`%%34%31` is `%41`, and `%41` is
/// `A`), so the decoder cannot require a normalised value to normalise to
/// itself: that would refuse what the compiler wrote.
#[test]
fn a_path_value_normalisation_would_change_again_still_decodes() {
    let c = rctl_compiler::compile_str(
        "t.rctl",
        "rule r {\n  when path == \"/%%34%31\"\n  deny\n}\n",
        &Options::default(),
    );
    let rs = c.ruleset.expect("compiles");
    assert!(rs.atoms.contains(&Atom::Str {
        field: StrField::Path,
        op: StrOp::Eq("/%41".into())
    }));
    assert_eq!(decode(&encode(&rs)).unwrap(), rs);
}

// ------------------------------------------------------------ the data planes

/// A ruleset built in memory, with one index out of range: the fixture
/// with its drop rule's ip set missing.
fn missing_ip_set() -> Ruleset {
    let mut rs = golden();
    let a = atom_where(&rs, |a| matches!(a, Atom::Ip(1)));
    rs.atoms[a] = Atom::Ip(7);
    rs
}

#[test]
fn the_engine_refuses_a_missing_ip_set_when_loading() {
    let e = Engine::new(missing_ip_set(), &EngineConfig::default()).err();
    assert!(
        matches!(
            e,
            Some(EngineError::Index(IndexError::IpSet { set: 7, .. }))
        ),
        "{e:?}"
    );
}

/// The matcher alone (it is public) checks what it looks up: before, it
/// skipped the predicate, which then never held.
#[test]
fn the_matcher_refuses_a_missing_ip_set() {
    let e = rctl_dataplane::matcher::Matcher::new(&missing_ip_set()).err();
    assert!(
        matches!(
            e,
            Some(EngineError::Index(IndexError::IpSet { set: 7, .. }))
        ),
        "{:?}",
        e.map(|e| e.to_string())
    );
}

#[test]
fn the_reference_refuses_a_missing_ip_set_when_loading() {
    let e = NaiveEngine::new(missing_ip_set(), &EngineConfig::default()).err();
    assert!(
        matches!(
            e,
            Some(EngineError::Index(IndexError::IpSet { set: 7, .. }))
        ),
        "{e:?}"
    );
}

#[test]
fn the_xdp_tables_refuse_a_missing_ip_set() {
    let e = Tables::new(&missing_ip_set(), None);
    assert!(
        matches!(e, Err(TablesError::Index(IndexError::IpSet { set: 7, .. }))),
        "{e:?}"
    );
    let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("names ip set 7, which does not exist"),
        "{msg}"
    );
}

#[test]
fn every_evaluator_refuses_a_condition_on_a_missing_predicate() {
    let mut rs = golden();
    rule(&mut rs, "tools").cond = Cond::Or(vec![Cond::Atom(3), Cond::Atom(40)]);
    let want = IndexError::Atom { rule: 4, atom: 40 };
    assert_eq!(
        want.to_string(),
        "rule 4 names predicate 40, which does not exist"
    );
    let config = EngineConfig::default();
    assert!(matches!(Engine::new(rs.clone(), &config), Err(EngineError::Index(e)) if e == want));
    assert!(
        matches!(NaiveEngine::new(rs.clone(), &config), Err(EngineError::Index(e)) if e == want)
    );
    assert_eq!(Tables::new(&rs, None).err(), Some(TablesError::Index(want)));
}

#[test]
fn every_evaluator_refuses_plans_that_do_not_match_the_rules() {
    let mut rs = golden();
    rs.plan.pop();
    let want = IndexError::PlanCount { plans: 6, rules: 7 };
    let config = EngineConfig::default();
    assert!(matches!(Engine::new(rs.clone(), &config), Err(EngineError::Index(e)) if e == want));
    assert!(
        matches!(NaiveEngine::new(rs.clone(), &config), Err(EngineError::Index(e)) if e == want)
    );
    assert_eq!(Tables::new(&rs, None).err(), Some(TablesError::Index(want)));
    let mut rs = golden();
    plan(&mut rs, "bogus").dnf[0][0].0 = 50;
    let want = IndexError::PlanAtom { rule: 1, atom: 50 };
    assert!(matches!(Engine::new(rs.clone(), &config), Err(EngineError::Index(e)) if e == want));
    assert_eq!(Tables::new(&rs, None).err(), Some(TablesError::Index(want)));
}

/// A port predicate over every port lowers in linear time (it was
/// quadratic: 65,536 ports, each looked up in a list of those before it).
#[test]
fn the_xdp_tables_take_every_port() {
    let c = rctl_compiler::compile_str(
        "t.rctl",
        "rule r {\n  when port in { 0-65535 } and proto == udp\n  drop\n}\n",
        &Options::default(),
    );
    let t = Tables::new(&c.ruleset.unwrap(), None).unwrap();
    assert_eq!(t.ports.len(), 65_536);
    assert!(t
        .ports
        .iter()
        .enumerate()
        .all(|(i, &(p, m))| usize::from(p) == i && m == 1));
}
