//! `rctl apply / status / detach` on a real interface: a veth pair whose
//! far end lives in a network namespace of its own, the program attached
//! in native mode on the near end, and real traffic (ping, TCP, UDP) from
//! the namespace. Needs root and the built XDP object; under CI it never
//! skips. Traffic stays on the veth pair.

use crate::util::*;
use rctl_testkit::lab::{Link, Mount, NetNs};
use rctl_testkit::proc::{must, sh, TempDir};
use rctl_testkit::xdp::object_path;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const NEAR: &str = "10.203.0.1";
/// A second address of the near end: a service address `dst_ip` rules name.
const VIP: &str = "10.203.0.10";
const CLIENT: &str = "10.203.0.2";
const BLOCKED: &str = "10.203.0.66";
const EXEMPT: &str = "10.203.0.77";
const LATER_BLOCKED: &str = "10.203.0.99";

fn rules(extra_blocked: &str) -> String {
    format!(
        r#"
ipblock test/blocked {{
  {BLOCKED}/32
  {extra_blocked}
}}
ipblock test/exempt {{ {EXEMPT}/32 }}

rule exempt {{
  priority 1
  when ipblock@test/exempt
  allow
}}

rule blocked {{
  priority 5
  when ipblock@test/blocked
  drop
}}

rule udp_to_vip {{
  priority 8
  when dst_ip == {VIP} and proto == udp and port != 53
  drop
}}

rule udp_flood {{
  priority 10
  when proto == udp and port in {{ 9999 }}
  throttle 50 packets per 1s burst 10 by ip
}}

rule ping_flood {{
  priority 20
  when proto == icmp
  throttle 20 packets per 1s burst 20 by ip ban 10s
}}
"#
    )
}

/// Writes `src` to `DIR/NAME.rctl` and compiles it to `DIR/NAME.rctlc`.
pub(crate) fn compile_in(dir: &Path, name: &str, src: &str) -> PathBuf {
    let rules = dir.join(format!("{name}.rctl"));
    std::fs::write(&rules, src).unwrap();
    let out = dir.join(format!("{name}.rctlc"));
    let o = rctl(&[
        "compile",
        rules.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// rctl's flags for a host of its own: `--bpffs BPFFS` and the run and
/// state directories under `dir`.
pub(crate) fn host_args(bpffs: &Path, dir: &Path) -> Vec<String> {
    let (run, state) = (dir.join("run"), dir.join("state"));
    [
        ("--bpffs", bpffs),
        ("--run-dir", &run),
        ("--state-dir", &state),
    ]
    .iter()
    .flat_map(|(flag, p)| [flag.to_string(), p.display().to_string()])
    .collect()
}

/// `bin` run as nobody, with no capabilities.
pub(crate) fn as_nobody(bin: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(bin);
    c
}

/// The namespace, the veth pair, a private bpffs and state directories;
/// removed on drop (in this order, after a detach).
struct Lab {
    ns: NetNs,
    _link: Link,
    /// The near end's name.
    near: String,
    bpffs: Mount,
    dir: TempDir,
    object: PathBuf,
}

impl Lab {
    fn new(object: PathBuf) -> Lab {
        let id = std::process::id() % 100_000;
        let (near, far) = (format!("rct{id}a"), format!("rct{id}b"));
        let dir = tempdir("netns");
        let bpffs = Mount::bpffs(&dir.join("bpffs"));
        let ns = NetNs::new(&format!("rctl-test-{id}"));
        let link = Link::veth(&near, None, &far, Some(&ns));
        for a in [NEAR, VIP] {
            must("ip", &["addr", "add", &format!("{a}/24"), "dev", &near]);
        }
        for a in [CLIENT, BLOCKED, EXEMPT, LATER_BLOCKED] {
            ns.ip(&["addr", "add", &format!("{a}/24"), "dev", &far]);
        }
        Lab {
            ns,
            _link: link,
            near,
            bpffs,
            dir,
            object,
        }
    }

    fn exec(&self, cmd: &str, args: &[&str]) -> Output {
        self.ns.exec(cmd, args)
    }

    fn host_args(&self) -> Vec<String> {
        host_args(&self.bpffs, &self.dir)
    }

    fn rctl(&self, args: &[&str]) -> Output {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(self.host_args());
        Command::new(env!("CARGO_BIN_EXE_rctl"))
            .args(&all)
            .output()
            .expect("run rctl")
    }

    fn compile(&self, name: &str, src: &str) -> PathBuf {
        compile_in(&self.dir, name, src)
    }

    fn apply(&self, artifact: &Path) -> String {
        let o = self.rctl(&[
            "apply",
            artifact.to_str().unwrap(),
            "--iface",
            &self.near,
            "--mode",
            "native",
            "--object",
            self.object.to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "apply: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn status(&self) -> serde_json::Value {
        let o = self.rctl(&["status", "--iface", &self.near, "--format", "json"]);
        assert!(
            o.status.success(),
            "status: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status JSON");
        v["interfaces"].clone()
    }

    fn counter(&self, rule: &str) -> u64 {
        self.status()[0]["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["rule"] == rule)
            .and_then(|c| c["packets"].as_u64())
            .unwrap()
    }

    /// Whether `src` gets ping replies from the near end.
    fn ping(&self, src: &str) -> bool {
        self.exec(
            "ping",
            &["-c", "3", "-i", "0.2", "-W", "1", "-I", src, NEAR],
        )
        .status
        .success()
    }

    /// Whether a TCP connection from `src` to `port` carries a message.
    fn tcp(&self, src: &str, port: u16) -> bool {
        let script = "import socket,sys\n\
            s=socket.create_connection((sys.argv[2],int(sys.argv[3])),timeout=1.5,source_address=(sys.argv[1],0))\n\
            s.sendall(b'hello')\n\
            sys.exit(0 if s.recv(5)==b'hello' else 1)\n";
        self.exec("python3", &["-c", script, src, NEAR, &port.to_string()])
            .status
            .success()
    }

    /// Starts sending `n` UDP datagrams from `src` to `port` at `rate` per
    /// second.
    fn udp_flood(&self, src: &str, port: u16, n: u32, rate: u32) -> std::process::Child {
        self.udp_flood_to(src, NEAR, port, n, rate)
    }

    /// As [`Lab::udp_flood`], to `dst`.
    fn udp_flood_to(
        &self,
        src: &str,
        dst: &str,
        port: u16,
        n: u32,
        rate: u32,
    ) -> std::process::Child {
        let script = "import socket,sys,time\n\
            src,dst,port,n,rate=sys.argv[1],sys.argv[2],int(sys.argv[3]),int(sys.argv[4]),float(sys.argv[5])\n\
            s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
            s.bind((src,0))\n\
            t0=time.monotonic()\n\
            for i in range(n):\n\
            \x20   s.sendto(i.to_bytes(4,'big'),(dst,port))\n\
            \x20   if i==0: first=time.monotonic()\n\
            \x20   d=t0+(i+1)/rate-time.monotonic()\n\
            \x20   if d>0: time.sleep(d)\n\
            print(time.monotonic()-first)\n";
        self.ns
            .command("python3")
            .args([
                "-c",
                script,
                src,
                dst,
                &port.to_string(),
                &n.to_string(),
                &rate.to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the UDP sender")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.rctl(&["detach", "--iface", &self.near]);
    }
}

/// Counts datagrams per source address on `sock` until `quiet` passes
/// without one after `until` is done.
fn receive(
    sock: &UdpSocket,
    mut done: impl FnMut() -> bool,
) -> std::collections::HashMap<String, u32> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut counts = std::collections::HashMap::new();
    let mut buf = [0u8; 64];
    let mut idle_since: Option<Instant> = None;
    loop {
        match sock.recv_from(&mut buf) {
            Ok((_, from)) => {
                *counts.entry(from.ip().to_string()).or_insert(0) += 1;
                idle_since = None;
            }
            Err(_) => {
                if done() {
                    let t = *idle_since.get_or_insert_with(Instant::now);
                    if t.elapsed() > Duration::from_millis(300) {
                        return counts;
                    }
                }
            }
        }
    }
}

fn tcp_echo_server() -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind((NEAR, 0)).expect("bind the TCP server");
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        use std::io::{Read, Write};
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut b = [0u8; 5];
            if s.read_exact(&mut b).is_ok() {
                let _ = s.write_all(&b);
            }
            if &b == b"quit!" {
                return;
            }
        }
    });
    (port, h)
}

#[test]
fn apply_status_detach_on_a_veth_pair() {
    let Some(object) = object_path() else { return };
    let lab = Lab::new(object);
    // Before anything is attached, every source gets through.
    assert!(lab.ping(BLOCKED), "the lab itself must pass traffic");

    let v1 = lab.compile("v1", &rules(""));
    let out = lab.apply(&v1);
    assert!(
        out.contains("attached to") && out.contains("native mode"),
        "{out}"
    );
    let st = lab.status();
    assert_eq!(st[0]["attached"]["mode"], "native");
    assert_eq!(st[0]["attached"]["clock"], "tick", "the default clock");
    assert_eq!(st[0]["attached"]["generation"], 1);
    assert_eq!(st[0]["link_pinned"], true);
    let link = sh("ip", &["-details", "link", "show", &lab.near]);
    assert!(
        String::from_utf8_lossy(&link.stdout).contains("xdp"),
        "the interface shows an XDP program"
    );
    // The artifact was installed where consumers look for it.
    assert_eq!(
        std::fs::read(lab.dir.join("state").join(&lab.near).join("active.rctlc")).unwrap(),
        std::fs::read(&v1).unwrap()
    );

    // ping: passes from a plain client, dropped from a blocked source,
    // and the drop rule's counter moves.
    assert!(lab.ping(CLIENT));
    assert!(!lab.ping(BLOCKED), "a blocked source must get no reply");
    assert!(lab.counter("blocked") >= 3, "{}", lab.status());

    // TCP to a real server.
    let (port, server) = tcp_echo_server();
    assert!(lab.tcp(CLIENT, port), "TCP from a plain client");
    assert!(!lab.tcp(BLOCKED, port), "TCP from a blocked source");

    // UDP: a flood at 200 packets/s for 2 s against a limit of 50/s with
    // a burst of 10 gets about 10 + 50 × 2 through; an exempted source
    // sending the same flood at the same time loses nothing.
    let sock = UdpSocket::bind((NEAR, 9999)).expect("bind UDP 9999");
    let mut flood = lab.udp_flood(CLIENT, 9999, 400, 200);
    let mut exempt = lab.udp_flood(EXEMPT, 9999, 400, 200);
    let counts = receive(&sock, || {
        matches!(flood.try_wait(), Ok(Some(_))) && matches!(exempt.try_wait(), Ok(Some(_)))
    });
    let limited = counts.get(CLIENT).copied().unwrap_or(0);
    // GCRA lets the burst through, then 50 a second for as long as the
    // flood lasted: 2 s when the sender keeps its pace. The sender reports
    // the time from its first datagram to its last itself, so that a slow
    // start (python on a loaded machine) does not count as flood time.
    let mut out = String::new();
    std::io::Read::read_to_string(&mut flood.stdout.take().expect("piped"), &mut out).unwrap();
    let took: f64 = out.trim().parse().expect("the sender prints its duration");
    let expected = 10.0 + 50.0 * took;
    eprintln!("UDP flood at 200/s for {took:.2} s against 50/s burst 10: {counts:?}, expected about {expected:.0}");
    assert!(
        f64::from(limited) >= expected * 0.75 && f64::from(limited) <= expected * 1.1 + 5.0,
        "the limit must hold near {expected:.0} of 400: got {limited}"
    );
    assert_eq!(counts.get(EXEMPT).copied(), Some(400), "exempt: {counts:?}");
    assert!(lab.counter("udp_flood") >= 250, "{}", lab.status());
    assert!(lab.counter("exempt") >= 400, "{}", lab.status());
    assert!(lab.status()[0]["buckets_used"].as_u64().unwrap() >= 1);

    // Destination prefixes: the same client's UDP to the service address
    // is dropped, to the other address (and DNS to the service address)
    // it passes.
    let to_vip = UdpSocket::bind((VIP, 5000)).expect("bind UDP VIP:5000");
    let to_near = UdpSocket::bind((NEAR, 5000)).expect("bind UDP 5000");
    let to_dns = UdpSocket::bind((VIP, 53)).expect("bind UDP VIP:53");
    let before = lab.counter("udp_to_vip");
    for (dst, port) in [(VIP, 5000), (NEAR, 5000), (VIP, 53)] {
        let mut s = lab.udp_flood_to(CLIENT, dst, port, 100, 500);
        assert!(s.wait().unwrap().success());
    }
    let mut n = [0u32; 3];
    for (i, sock) in [&to_vip, &to_near, &to_dns].into_iter().enumerate() {
        n[i] = receive(sock, || true).values().sum();
    }
    assert_eq!(n, [0, 100, 100], "received at VIP:5000, NEAR:5000, VIP:53");
    assert_eq!(lab.counter("udp_to_vip") - before, 100, "{}", lab.status());

    // Apply under continuous traffic: two new generations while 3,000
    // datagrams that both rulesets pass flow at 1,000/s; none is lost.
    let v2 = lab.compile("v2", &rules(&format!("{LATER_BLOCKED}/32")));
    let steady = UdpSocket::bind((NEAR, 7777)).expect("bind UDP 7777");
    let mut sender = lab.udp_flood(CLIENT, 7777, 3000, 1000);
    let applier = {
        let (v1, v2) = (v1.clone(), v2.clone());
        let args = lab.host_args();
        let near = lab.near.clone();
        let object = lab.object.clone();
        std::thread::spawn(move || {
            let mut outs = Vec::new();
            for a in [&v2, &v1, &v2] {
                std::thread::sleep(Duration::from_millis(500));
                let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
                    .args(["apply", a.to_str().unwrap(), "--iface", &near])
                    .args(["--object", object.to_str().unwrap()])
                    .args(&args)
                    .output()
                    .unwrap();
                outs.push(o);
            }
            outs
        })
    };
    let counts = receive(&steady, || matches!(sender.try_wait(), Ok(Some(_))));
    for o in applier.join().unwrap() {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("replaced on"));
    }
    assert_eq!(
        counts.get(CLIENT).copied(),
        Some(3000),
        "lost packets during apply"
    );
    let st = lab.status();
    assert_eq!(st[0]["attached"]["generation"], 4);
    // The old generations' pins are gone; only the live one remains.
    let gens: Vec<String> = std::fs::read_dir(lab.bpffs.join("rctl").join(&lab.near))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("gen-"))
        .collect();
    assert_eq!(gens, vec!["gen-4".to_string()]);
    // Generation 4 is v2: the later-blocked source is dropped now.
    assert!(!lab.ping(LATER_BLOCKED));
    assert!(lab.ping(CLIENT));

    // A ping flood gets its source banned: the ban holds in the kernel and
    // `rctl log` reports it, once.
    let log = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(["log", "--iface", &lab.near, "--seconds", "4"])
        .args(lab.host_args())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start rctl log");
    std::thread::sleep(Duration::from_millis(500));
    let _ = lab.exec(
        "ping",
        &[
            "-c", "60", "-i", "0.005", "-W", "1", "-q", "-I", CLIENT, NEAR,
        ],
    );
    assert!(!lab.ping(CLIENT), "a banned source gets no reply");
    assert!(lab.counter("ping_flood") >= 30, "{}", lab.status());
    // A new generation carries the rate-limit state: the ban holds.
    let out = lab.apply(&v1);
    assert!(out.contains("generation 5"), "{out}");
    let carried: u64 = out
        .split(", ")
        .find_map(|p| p.strip_suffix(" rate-limit buckets carried over"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(carried >= 2, "the flood's and the ping's buckets: {out}");
    assert!(!lab.ping(CLIENT), "the ban survives an apply");
    assert!(
        lab.counter("ping_flood") >= 33,
        "counters carry over: {}",
        lab.status()
    );
    assert_eq!(lab.status()[0]["buckets_banned"], 1);
    let out = log.wait_with_output().unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    let bans: Vec<&str> = events.lines().filter(|l| l.contains("ban ")).collect();
    assert_eq!(bans.len(), 1, "{events}");
    assert!(
        bans[0].contains(&format!("source={CLIENT}")) && bans[0].contains("for_ms=10000"),
        "{events}"
    );

    // Detach: traffic flows again, pins and metadata are gone.
    let o = lab.rctl(&["detach", "--iface", &lab.near]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(lab.ping(BLOCKED), "detached: a blocked source passes again");
    assert!(!lab.bpffs.join("rctl").join(&lab.near).exists());
    let link = sh("ip", &["-details", "link", "show", &lab.near]);
    assert!(!String::from_utf8_lossy(&link.stdout).contains("prog/xdp"));
    let o = lab.rctl(&["status", "--iface", &lab.near]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing attached"));

    // Generic (skb) mode enforces the same rules; the mode cannot change
    // in place.
    let apply = |mode: &str| {
        lab.rctl(&[
            "apply",
            v1.to_str().unwrap(),
            "--iface",
            &lab.near,
            "--mode",
            mode,
            "--object",
            lab.object.to_str().unwrap(),
        ])
    };
    let o = apply("skb");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("(skb mode, tick clock)"));
    assert_eq!(lab.status()[0]["attached"]["mode"], "skb");
    assert!(!lab.ping(BLOCKED), "skb mode drops a blocked source");
    assert!(lab.ping(CLIENT));
    let o = apply("native");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot change the mode in place"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(lab.status()[0]["attached"]["mode"], "skb", "still in force");
    // A ban made in an attachment's first generation holds in the next:
    // the seed a generation records for the next to take over is the one
    // its bucket keys were made with.
    let _ = lab.exec(
        "ping",
        &[
            "-c", "60", "-i", "0.005", "-W", "1", "-q", "-I", CLIENT, NEAR,
        ],
    );
    assert!(!lab.ping(CLIENT), "a banned source gets no reply");
    let o = apply("skb");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !lab.ping(CLIENT),
        "the first generation's ban survives an apply"
    );
    let o = lab.rctl(&["detach", "--iface", &lab.near]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Stop the TCP server.
    let _ = std::net::TcpStream::connect((NEAR, port)).and_then(|mut s| {
        use std::io::Write;
        s.write_all(b"quit!")
    });
    let _ = server.join();
}

#[test]
fn apply_explains_what_is_missing() {
    let Some(object) = object_path() else { return };
    let dir = tempdir("apply-errors");
    let artifact = dir.join("r.rctlc");
    let o = rctl(&[
        "compile",
        root().join("rules").to_str().unwrap(),
        "-o",
        artifact.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let run = |args: &[&str]| {
        let mut all = vec![
            "apply",
            artifact.to_str().unwrap(),
            "--object",
            object.to_str().unwrap(),
            "--run-dir",
            "/nonexistent/run",
            "--state-dir",
            "/nonexistent/state",
        ];
        all.extend_from_slice(args);
        let o = rctl(&all);
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // bpffs: a plain directory is not one.
    let plain = dir.join("not-bpffs");
    std::fs::create_dir_all(&plain).unwrap();
    let e = run(&["--iface", "lo", "--bpffs", plain.to_str().unwrap()]);
    assert!(
        e.contains("no bpffs is mounted") && e.contains("mount -t bpf bpf"),
        "{e}"
    );
    // An unknown interface.
    let bpffs = Mount::bpffs(&dir.join("bpffs"));
    let e = run(&["--iface", "nosuch0", "--bpffs", bpffs.to_str().unwrap()]);
    assert!(e.contains("no interface `nosuch0`"), "{e}");
    // Without privileges (as nobody, with no capabilities; the binary is
    // copied where nobody may run it).
    let bin = dir.join("rctl");
    std::fs::copy(env!("CARGO_BIN_EXE_rctl"), &bin).unwrap();
    let o = as_nobody(&bin)
        .args(["apply", artifact.to_str().unwrap(), "--iface", "lo"])
        .args(["--object", object.to_str().unwrap()])
        .args(["--bpffs", bpffs.to_str().unwrap()])
        .output()
        .expect("run setpriv");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("needs root, or CAP_BPF and CAP_NET_ADMIN"),
        "{e}"
    );
    // A driver without native XDP (a bridge): `--mode native` fails and
    // says so; the default falls back to skb mode with a warning.
    let bridge = Link::bridge(&format!("rcd{}", std::process::id() % 100_000));
    let (run_dir, state_dir) = (dir.join("run"), dir.join("state"));
    let host = [
        "--bpffs",
        bpffs.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--state-dir",
        state_dir.to_str().unwrap(),
        "--object",
        object.to_str().unwrap(),
    ];
    let mut args = vec![
        "apply",
        artifact.to_str().unwrap(),
        "--iface",
        bridge.name(),
    ];
    args.extend_from_slice(&host);
    let mut native = args.clone();
    native.extend_from_slice(&["--mode", "native"]);
    let o = rctl(&native);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("native XDP attach failed") && e.contains("--mode skb"),
        "{e}"
    );
    let o = rctl(&args);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains("warning") && e.contains("skb (generic) mode"),
        "{e}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("(skb mode, tick clock)"));
    let mut detach = vec!["detach", "--iface", bridge.name()];
    detach.extend_from_slice(&host[..6]);
    let o = rctl(&detach);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(bridge);
    // An artifact of another format version.
    let mut bytes = std::fs::read(&artifact).unwrap();
    bytes[8] = bytes[8].wrapping_add(7);
    let other = dir.join("other.rctlc");
    std::fs::write(&other, &bytes).unwrap();
    let o = rctl(&[
        "apply",
        other.to_str().unwrap(),
        "--iface",
        "lo",
        "--object",
        object.to_str().unwrap(),
        "--bpffs",
        bpffs.to_str().unwrap(),
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e.contains("format version"), "{e}");
    // Detaching what is not attached.
    let o = rctl(&[
        "detach",
        "--iface",
        "lo",
        "--bpffs",
        bpffs.to_str().unwrap(),
        "--run-dir",
        dir.join("run").to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing attached"));
}
