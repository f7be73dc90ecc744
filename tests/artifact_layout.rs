//! The stored v1 artifact read by hand: a reader written here from the
//! layout documented in `compiler/src/artifact/mod.rs` (not the crate's
//! decoder), whose fields are checked against the source text of
//! `tests/data/artifact-v1.rctl` and a SHA-256 computed here. The golden
//! file is the encoder's own output; this test says what its bytes mean.

use sha2::{Digest, Sha256};

/// A little-endian cursor over the bytes; every read is bounds-checked by
/// slicing (a short file fails the test with a panic at the read).
struct Bytes<'a> {
    b: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        s
    }
    fn arr<const N: usize>(&mut self) -> [u8; N] {
        self.take(N).try_into().unwrap()
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn flag(&mut self) -> bool {
        match self.u8() {
            0 => false,
            1 => true,
            b => panic!("flag byte {b} at {}", self.at - 1),
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.arr())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.arr())
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.arr())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.arr())
    }
    fn u128(&mut self) -> u128 {
        u128::from_le_bytes(self.arr())
    }
    fn str(&mut self) -> String {
        let n = self.u32() as usize;
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> T) -> Vec<T> {
        (0..self.u32()).map(|_| item(self)).collect()
    }
    fn field(&mut self) -> String {
        match self.u8() {
            0 => "method".into(),
            1 => "host".into(),
            2 => "path".into(),
            3 => "query".into(),
            4 => format!("query({})", self.str()),
            5 => format!("header({})", self.str()),
            t => panic!("field tag {t}"),
        }
    }
}

/// An atom as text.
fn atom(r: &mut Bytes, sets: &[String]) -> String {
    match r.u8() {
        0 => {
            let f = r.field();
            match r.u8() {
                0 => format!("{f} == {:?}", r.str()),
                1 => format!("{f} starts_with {:?}", r.str()),
                2 => format!("{f} ends_with {:?}", r.str()),
                3 => format!("{f} contains {:?}", r.str()),
                4 => {
                    let p = r.str();
                    let ci = r.flag();
                    format!("{f} {} {p:?}", if ci { "~*" } else { "~" })
                }
                5 => format!("{f} in {:?}", r.list(Bytes::str)),
                t => panic!("operator tag {t}"),
            }
        }
        1 => format!("{} present", r.field()),
        2 => format!("ip in {}", sets[r.u32() as usize]),
        5 => format!("dst in {}", sets[r.u32() as usize]),
        3 => format!("port in {:?}", r.list(|r| (r.u16(), r.u16()))),
        4 => format!("proto in {:?}", r.list(Bytes::u8)),
        t => panic!("atom tag {t}"),
    }
}

/// A postfix condition of `nodes` nodes, as infix text.
fn cond(r: &mut Bytes, atoms: &[String]) -> String {
    let nodes = r.u32();
    let mut stack: Vec<String> = Vec::new();
    for _ in 0..nodes {
        let node = match r.u8() {
            0 => "true".into(),
            1 => "false".into(),
            2 => atoms[r.u32() as usize].clone(),
            3 => format!("not ({})", stack.pop().unwrap()),
            t @ (4 | 5) => {
                let n = r.u32() as usize;
                let args = stack.split_off(stack.len() - n);
                format!("({})", args.join(if t == 4 { " and " } else { " or " }))
            }
            t => panic!("condition tag {t}"),
        };
        stack.push(node);
    }
    assert_eq!(stack.len(), 1, "one condition");
    stack.pop().unwrap()
}

fn action(r: &mut Bytes) -> String {
    match r.u8() {
        0 => "allow".into(),
        1 => "log".into(),
        2 => "drop".into(),
        3 => format!("deny {} {:?}", r.u16(), r.str()),
        4 => {
            let (limit, unit, period, burst, ban) = (r.u32(), r.u8(), r.u64(), r.u32(), r.u64());
            let (status, reason) = (r.u16(), r.str());
            let keys = r.list(|r| match r.u8() {
                0 => "global".to_string(),
                1 => "ip".into(),
                2 => format!("prefix({}, {})", r.u8(), r.u8()),
                3 => "host".into(),
                4 => "path".into(),
                5 => "method".into(),
                6 => format!("header({})", r.str()),
                7 => format!("query({})", r.str()),
                t => panic!("key tag {t}"),
            });
            format!(
                "throttle {limit} {} per {period}ms burst {burst} by {} ban {ban}ms status {status} {reason:?}",
                ["requests", "packets", "connections"][usize::from(unit)],
                keys.join(", ")
            )
        }
        t => panic!("action tag {t}"),
    }
}

#[test]
fn the_v1_artifact_read_by_hand_says_what_its_source_says() {
    let b = std::fs::read("tests/data/artifact-v1.rctlc").unwrap();
    let source = std::fs::read("tests/data/artifact-v1.rctl").unwrap();
    let text = String::from_utf8(source.clone()).unwrap();
    let r = &mut Bytes { b: &b, at: 0 };
    // The header.
    assert_eq!(r.take(8), b"RCTLC\0\r\n");
    assert_eq!(r.u16(), 1, "format version");
    assert_eq!(r.u16(), 0, "reserved");
    assert_eq!(r.take(4), [4, 3, 2, 1], "endianness marker 0x01020304, LE");
    assert_eq!(r.u64(), b.len() as u64 - 56, "payload length");
    let hash: [u8; 32] = Sha256::digest(&b[56..]).into();
    assert_eq!(r.arr::<32>(), hash, "content hash");
    // Sources: the one file, with its own SHA-256.
    let sources = r.list(|r| (r.str(), r.arr::<32>()));
    let want: [u8; 32] = Sha256::digest(&source).into();
    assert_eq!(sources.len(), 1);
    assert!(
        sources[0].0.ends_with("artifact-v1.rctl"),
        "{}",
        sources[0].0
    );
    assert_eq!(sources[0].1, want, "the source's SHA-256");
    // Ip sets: the named block and the inline `{ 10.0.0.0/8 }`.
    let sets = r.list(|r| {
        let name = r.str();
        let v4 = r.list(|r| (r.u32(), r.u8()));
        let v6 = r.list(|r| (r.u128(), r.u8()));
        (name, v4, v6)
    });
    let nets = sets.iter().find(|s| s.0 == "t/nets").expect("t/nets");
    assert_eq!(nets.1, [(0xc000_0200, 24)], "192.0.2.0/24");
    assert_eq!(nets.2, [(0x2001_0db8 << 96, 32)], "2001:db8::/32");
    let inline = sets.iter().find(|s| s.0 != "t/nets").expect("inline");
    assert_eq!((&inline.1, inline.2.len()), (&vec![(0x0a00_0000, 8)], 0));
    let set_names: Vec<String> = sets.iter().map(|s| s.0.clone()).collect();
    let atoms = r.list(|r| atom(r, &set_names));
    // Rules, in evaluation order (priority, then source order); `off` is
    // disabled but kept.
    struct Rule {
        name: String,
        priority: i32,
        sites: Vec<String>,
        enabled: bool,
        shadow: bool,
        comment: String,
        cond: String,
        action: String,
        line: u32,
        col: u32,
    }
    let rules = r.list(|r| {
        let (name, priority, _seq) = (r.str(), r.i32(), r.u32());
        let sites = r.list(Bytes::str);
        let (enabled, shadow, comment) = (r.flag(), r.flag(), r.str());
        let cond = cond(r, &atoms);
        let action = action(r);
        let file = r.str();
        assert!(file.ends_with("artifact-v1.rctl"), "{file}");
        let (line, col) = (r.u32(), r.u32());
        Rule {
            name,
            priority,
            sites,
            enabled,
            shadow,
            comment,
            cond,
            action,
            line,
            col,
        }
    });
    let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["exempt", "bogus", "syn", "scrapers", "tools", "watch", "off"]
    );
    for r in &rules {
        // The origin is the rule's name in the source (1-based line and
        // column, after `rule `).
        let at = text
            .lines()
            .position(|l| l.starts_with(&format!("rule {} {{", r.name)))
            .unwrap();
        assert_eq!((r.line, r.col), (at as u32 + 1, 6), "{}", r.name);
    }
    let by = |n: &str| rules.iter().find(|r| r.name == n).unwrap();
    assert_eq!(
        [1, 2, 3].map(|i| by(["exempt", "bogus", "syn"][i - 1]).priority),
        [1, 2, 3]
    );
    assert_eq!(by("scrapers").sites, ["eqiad", "esams"]);
    assert!(rules.iter().all(|r| r.enabled == (r.name != "off")));
    assert!(rules.iter().all(|r| r.shadow == (r.name == "watch")));
    assert_eq!(by("tools").comment, "scanners");
    assert_eq!(by("exempt").action, "allow");
    assert_eq!(by("bogus").action, "drop");
    assert_eq!(
        by("syn").action,
        "throttle 50 connections per 1000ms burst 100 by prefix(24, 64) ban 60000ms status 429 \"Too Many Requests\""
    );
    assert_eq!(
        by("scrapers").action,
        "throttle 60 requests per 60000ms burst 10 by ip, host, path, method, \
         header(x-client), query(title) ban 300000ms status 503 \"slow down\""
    );
    assert_eq!(by("tools").action, "deny 403 \"no\"");
    assert_eq!(by("watch").action, "log");
    assert_eq!(by("off").action, "deny 410 \"Gone\"");
    assert_eq!(by("off").cond, "false");
    assert_eq!(by("syn").cond, "proto in [6]");
    assert_eq!(
        by("exempt").cond,
        "(ip in t/nets and header(x-token) == \"secret\")"
    );
    let bogus = &by("bogus").cond;
    for part in [
        "ip in inline",
        "proto in [6, 17]",
        "port in [(80, 80), (443, 443), (8000, 8080)]",
    ] {
        assert!(bogus.contains(part), "bogus: {bogus} lacks {part}");
    }
    let tools = &by("tools").cond;
    for part in [
        "header(user-agent) contains \"zgrab\"",
        "path starts_with \"/.git\"",
        "host == \"example.org\"",
    ] {
        assert!(tools.contains(part), "tools: {tools} lacks {part}");
    }
    let scrapers = &by("scrapers").cond;
    for part in [
        "header(user-agent) present",
        "path in [\"/sparql\", \"/w/api.php\"]",
        "not (query(format) ends_with \"json\")",
    ] {
        assert!(scrapers.contains(part), "scrapers: {scrapers} lacks {part}");
    }
    // The plan: one entry per rule; the L3/L4 rules in XDP.
    let plan = r.list(|r| {
        let _note = r.str();
        match r.u8() {
            0 => None,
            k => Some((k - 1, r.list(|r| r.list(|r| (r.u32(), r.flag()))))),
        }
    });
    assert_eq!(plan.len(), rules.len());
    let xdp = |n: &str| {
        plan[rules.iter().position(|r| r.name == n).unwrap()]
            .as_ref()
            .map(|(k, dnf)| (*k, dnf.iter().map(Vec::len).collect::<Vec<_>>()))
    };
    assert_eq!(xdp("bogus"), Some((2, vec![3])), "drop: ip, proto, port");
    assert_eq!(xdp("syn"), Some((3, vec![1])), "throttle: proto");
    assert_eq!(xdp("exempt"), Some((1, vec![1])), "exempt: its address");
    for n in ["scrapers", "tools", "watch", "off"] {
        assert_eq!(xdp(n), None, "{n} is not in XDP");
    }
    assert_eq!(r.at, b.len(), "the plan ends the file");
}
