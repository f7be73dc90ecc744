//! The built XDP object, for the tests and benchmarks that load it, and
//! the XDP benchmarks' ruleset.
//!
//! The object is built apart from the workspace (`ebpf/rctl-xdp`, see
//! `.ci/test.sh`); `RCTL_XDP_OBJECT` names it, or it is looked for where
//! that build leaves it.

use crate::skip::{in_ci, root, skipped};
use crate::Rng;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// Where the built XDP object is: `RCTL_XDP_OBJECT`, or the release build
/// of `ebpf/rctl-xdp` for `bpfel-unknown-none`.
pub fn object_file() -> PathBuf {
    std::env::var_os("RCTL_XDP_OBJECT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp")
        })
}

/// The built XDP object's path, if this process can load it (root);
/// under CI both are required (a failure), elsewhere the test is said to
/// be skipped.
pub fn object_path() -> Option<PathBuf> {
    let (root, path) = (root(), object_file());
    let built = path.is_file();
    if in_ci() {
        assert!(root, "XDP tests must run as root in CI");
        assert!(
            built,
            "the XDP object must be built in CI: {}",
            path.display()
        );
    }
    if !root || !built {
        skipped(&format!(
            "root (is {root}) and the XDP object {} (built: {built})",
            path.display()
        ));
        return None;
    }
    Some(path)
}

/// The bytes of [`object_path`]'s object, if there is one.
pub fn object() -> Option<Vec<u8>> {
    object_path().map(|p| std::fs::read(p).expect("read the XDP object"))
}

/// For a benchmark: the built XDP object, or `None` (said on stderr) when
/// it is not built; `None` too when the benchmark harness only lists or
/// tests benchmarks.
pub fn bench_object() -> Option<Vec<u8>> {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return None;
    }
    let path = object_file();
    let obj = std::fs::read(&path).ok();
    if obj.is_none() {
        eprintln!(
            "no XDP object at {}: build it first (see .ci/test.sh)",
            path.display()
        );
    }
    obj
}

/// The XDP benchmarks' ruleset: an ipblock of `n` random IPv4 /32s (first
/// octet odd: `| 0x0100_0000`) and `n` IPv6 /64s in 2001:db8::/32 (plus
/// 192.0.2.0/24) dropped on port 443, an allow of 198.51.100.0/24, and
/// with `limited` a packet limit on all TCP that no benchmark reaches.
/// Returns the rules, and the listed IPv4 and IPv6 prefixes' addresses.
pub fn bench_ruleset(n: usize, limited: bool) -> (String, Vec<Ipv4Addr>, Vec<Ipv6Addr>) {
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
