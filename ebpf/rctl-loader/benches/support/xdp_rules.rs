//! The XDP benchmarks' ruleset: an ipblock of `n` random IPv4 /32s (first
//! octet odd: `| 0x0100_0000`) and `n` IPv6 /64s in 2001:db8::/32 (plus
//! 192.0.2.0/24) dropped on port 443, an allow of 198.51.100.0/24, and
//! with `limited` a packet limit on all TCP that no benchmark reaches.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A xorshift generator: the benchmarks' sources and prefixes.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The rules, and the listed IPv4 and IPv6 prefixes' addresses.
pub fn ruleset(n: usize, limited: bool) -> (String, Vec<Ipv4Addr>, Vec<Ipv6Addr>) {
    let mut r = Rng(0x1234_5678);
    let mut src = String::from("ipblock b/x {\n");
    let (mut v4s, mut v6s) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let a = Ipv4Addr::from(r.next() as u32 | 0x0100_0000);
        let _ = writeln!(src, "  {a}/32");
        let b = Ipv6Addr::from((0x2001_0db8_u128 << 96) | (u128::from(r.next() as u32) << 64));
        let _ = writeln!(src, "  {b}/64");
        v4s.push(a);
        v6s.push(b);
    }
    src += "  192.0.2.0/24\n}\n\
            rule d { when ipblock@b/x and port == 443 drop }\n\
            rule a { when ip in { 198.51.100.0/24 } allow }\n";
    if limited {
        src += "rule t { when proto == tcp throttle 1000000000 packets per 1s by ip }\n";
    }
    (src, v4s, v6s)
}

/// The built XDP object (RCTL_XDP_OBJECT, or the default build path),
/// or `None` (said on stderr) when it is not built; `None` too when the
/// benchmark harness only lists or tests benchmarks.
pub fn object() -> Option<Vec<u8>> {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return None;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = std::env::var("RCTL_XDP_OBJECT")
        .map(std::path::PathBuf::from)
        .unwrap_or(root.join("ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp"));
    let obj = std::fs::read(&path).ok();
    if obj.is_none() {
        eprintln!(
            "no XDP object at {}: build it first (see .ci/test.sh)",
            path.display()
        );
    }
    obj
}

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
