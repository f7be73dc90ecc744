//! The state `rctl apply / status / log / detach` keep, tested as a hostile
//! user or a tired operator would try it: umask, planted symlinks, loose
//! permissions, concurrent applies, a `kill -9` at every step, tampered
//! metadata, a deleted interface, path-like interface names, closed
//! pipes. Needs root and the built XDP object; under CI it never skips.
//!
//! Each lab is a network namespace of its own with veth pairs (both ends
//! inside it, no addresses, no traffic), a private bpffs and private state directories;
//! rctl runs inside the namespace (`ip netns exec`). Bans are made by
//! running frames through the live program with BPF_PROG_TEST_RUN, and
//! what the kernel runs is read back with iproute2 (`ip link`), not from
//! rctl.
//!
//! - `files`: permissions, temporary files, names, one artifact per
//!   interface, failed applies, privileges;
//! - `crash`: concurrent applies, a kill at every step, tampered metadata,
//!   a recreated interface, a failed install after the switch;
//! - `output`: closed pipes, rules past the counter table, `--site`.

use crate::netns::{as_nobody, compile_in};
use crate::util::*;
use rctl_compiler::ir::Proto;
use rctl_testkit::frame::frame;
use rctl_testkit::lab::{Mount, NetNs};
use rctl_testkit::proc::{sh, TempDir};
use rctl_testkit::xdp::object_path;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

mod crash;
mod files;
mod output;

/// A rate limit that bans a source on its second UDP packet, and a drop.
pub const V1: &str = r#"
rule flood {
  when proto == udp
  throttle 1 packets per 1h burst 1 by ip ban 1h
}

rule blocked {
  when ip in { 192.0.2.66/32 }
  drop
}
"#;

/// V1 with one more drop rule (the same limiter, so its buckets carry).
pub const V2: &str = r#"
rule flood {
  when proto == udp
  throttle 1 packets per 1h burst 1 by ip ban 1h
}

rule blocked {
  when ip in { 192.0.2.66/32, 192.0.2.67/32 }
  drop
}

rule later {
  when ip in { 198.51.100.0/24 } and proto == tcp
  drop
}
"#;

pub const BANNED: &str = "192.0.2.9";

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// A namespace with veth pairs, a private bpffs and state
/// directories; removed on drop (in this order, after a detach).
pub struct Lab {
    pub ns: NetNs,
    pub ifaces: Vec<String>,
    pub bpffs: Mount,
    pub dir: TempDir,
    pub object: PathBuf,
}

impl Lab {
    pub fn new(object: &Path, ifaces: usize) -> Lab {
        static N: AtomicU32 = AtomicU32::new(0);
        let ns = format!(
            "rctl-hs-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tempdir("host-state");
        let bpffs = Mount::bpffs(&dir.join("bpffs"));
        let lab = Lab {
            ns: NetNs::new(&ns),
            ifaces: (0..ifaces).map(|i| format!("hs{i}")).collect(),
            bpffs,
            dir,
            object: object.to_path_buf(),
        };
        for i in &lab.ifaces {
            lab.add_iface(i);
        }
        lab
    }

    /// A veth pair inside the namespace (`NAME` and `NAMEp`), or a bridge
    /// (no native XDP) when the name ends in `br`.
    pub fn add_iface(&self, name: &str) {
        let peer = format!("{name}p");
        let mut args = vec!["link", "add", name, "type"];
        if name.ends_with("br") {
            args.push("bridge");
        } else {
            args.extend_from_slice(&["veth", "peer", "name", &peer]);
        }
        self.ns.ip(&args);
        self.ns.ip(&["link", "set", name, "up"]);
    }

    pub fn iface(&self) -> &str {
        &self.ifaces[0]
    }

    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub fn pins(&self, iface: &str) -> PathBuf {
        self.bpffs.join("rctl").join(iface)
    }

    pub fn host_args(&self) -> Vec<String> {
        crate::netns::host_args(&self.bpffs, &self.dir)
    }

    /// rctl inside the namespace, with this lab's state directories.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.ns.command(env!("CARGO_BIN_EXE_rctl"));
        c.args(args).args(self.host_args());
        c
    }

    pub fn rctl(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run rctl")
    }

    pub fn compile(&self, name: &str, src: &str) -> PathBuf {
        compile_in(&self.dir, name, src)
    }

    pub fn apply_args<'a>(&'a self, artifact: &'a Path, iface: &'a str) -> Vec<&'a str> {
        vec![
            "apply",
            artifact.to_str().unwrap(),
            "--iface",
            iface,
            "--mode",
            "skb",
            "--object",
            self.object.to_str().unwrap(),
        ]
    }

    pub fn apply_on(&self, artifact: &Path, iface: &str) -> Output {
        self.rctl(&self.apply_args(artifact, iface))
    }

    pub fn apply_ok(&self, artifact: &Path) -> String {
        let o = self.apply_on(artifact, self.iface());
        assert!(o.status.success(), "apply: {}", text(&o.stderr));
        text(&o.stdout)
    }

    /// `rctl status --iface IF --format json`: the output, and the
    /// interface's entry when JSON was printed.
    pub fn status(&self, iface: &str) -> (Output, Option<serde_json::Value>) {
        let o = self.rctl(&["status", "--iface", iface, "--format", "json"]);
        let v = serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .ok()
            .map(|v| v["interfaces"][0].clone());
        (o, v)
    }

    /// The status of an interface rctl enforces on (OK, or WARNING for
    /// a problem it names: exit 0 or 1).
    pub fn enforcing(&self, iface: &str) -> serde_json::Value {
        let (o, v) = self.status(iface);
        let state = graded(&o);
        assert!(
            state == "OK" || state == "WARNING",
            "status: {} {}",
            text(&o.stdout),
            text(&o.stderr)
        );
        let v = v.expect("status JSON");
        assert_eq!(v["enforcing"], true, "{v}");
        v
    }

    /// The XDP program id the kernel runs on `iface`, from iproute2.
    pub fn kernel_prog(&self, iface: &str) -> Option<u64> {
        let o = sh(
            "ip",
            &["-n", self.ns.name(), "-d", "-j", "link", "show", iface],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        v[0]["xdp"]["prog"]["id"]
            .as_u64()
            .or_else(|| v[0]["xdp"]["attached"][0]["prog"]["id"].as_u64())
    }

    pub fn gens(&self, iface: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.pins(iface))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|n| n.starts_with("gen-"))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Runs UDP frames from `src` through the live program of `iface`
    /// until it drops one (the flood rule then bans `src`).
    pub fn ban(&self, iface: &str, src: &str) {
        use aya::programs::{TestRun, TestRunOptions, Xdp};
        use aya_obj::programs::XdpAttachType;
        let st = self.enforcing(iface);
        let g = st["attached"]["generation"].as_u64().unwrap();
        let prog = Xdp::from_pin(
            self.pins(iface).join(format!("gen-{g}")).join("prog"),
            XdpAttachType::Interface,
        )
        .expect("open the live program");
        let f = frame(src.parse().unwrap(), Proto::Udp, 9999, false, false);
        let actions: Vec<u32> = (0..3)
            .map(|_| {
                prog.test_run(TestRunOptions {
                    data_in: Some(&f),
                    repeat: 1,
                    ..TestRunOptions::new()
                })
                .expect("BPF_PROG_TEST_RUN")
                .return_value
            })
            .collect();
        assert_eq!(actions, [2, 1, 1], "pass, then dropped and banned");
        assert_eq!(self.enforcing(iface)["buckets_banned"], 1);
    }

    /// Every file and directory left under the lab's state roots.
    pub fn leftovers(&self) -> Vec<String> {
        fn walk(p: &Path, out: &mut Vec<String>) {
            if let Ok(d) = std::fs::read_dir(p) {
                for e in d.flatten() {
                    out.push(e.path().display().to_string());
                    walk(&e.path(), out);
                }
            }
        }
        let mut out = Vec::new();
        for root in [self.bpffs.to_path_buf(), self.run_dir(), self.state_dir()] {
            walk(&root, &mut out);
        }
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for i in &self.ifaces {
            let _ = self.rctl(&["detach", "--iface", i]);
        }
    }
}

pub fn lab(ifaces: usize) -> Option<Lab> {
    let object = object_path()?;
    Some(Lab::new(&object, ifaces))
}

/// The health state `rctl status --format json` printed, once its exit
/// code is checked to be that state's (0 OK, 1 WARNING, 2 CRITICAL, 3
/// UNKNOWN); "" when it printed no JSON.
pub fn graded(o: &Output) -> String {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) else {
        return String::new();
    };
    let state = v["health"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let code = match state.as_str() {
        "OK" => 0,
        "WARNING" => 1,
        "CRITICAL" => 2,
        _ => 3,
    };
    assert_eq!(o.status.code(), Some(code), "{state}: {}", text(&o.stdout));
    state
}
