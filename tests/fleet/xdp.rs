//! Agents with the packet plane: each on the near end of a veth pair
//! whose far end lives in a network namespace of its own, with a private
//! bpffs, state and run directories. Which generation the XDP program
//! runs is read from `rctl status --iface` on the agent's directories and
//! seen in traffic: datagrams from the namespace's addresses to a socket
//! on the near end, counted by that socket (the kernel's view, not
//! rctl's). Needs root and the built XDP object; under CI it never skips.
//! Traffic stays on the veth pairs.

use super::pinned::{kill_at_each, Gen, AGENT_STEPS};
use super::*;
use rctl_testkit::lab::{Link, Mount, NetNs};
use rctl_testkit::proc::must;
use std::collections::BTreeMap;
use std::net::UdpSocket;

/// The far end's addresses (`10.204.K.N`): a plain client, and one
/// address each generation blocks.
const CLIENT: u8 = 2;
const BLOCKED_BY_A: u8 = 66;
const BLOCKED_BY_B: u8 = 99;

/// A veth pair for one agent: `10.204.K.1` on the near end (here, where
/// the agent attaches), the far end in namespace `ns` with the client
/// addresses; a bpffs mounted for the agent's pins. Removed on drop.
struct Veth {
    k: u8,
    /// The near end's name.
    near: String,
    link: Option<Link>,
    ns: NetNs,
    bpffs: Mount,
    object: PathBuf,
}

impl Veth {
    fn new(dir: &Path, k: u8, object: &Path) -> Veth {
        let id = std::process::id() % 10_000;
        let bpffs = Mount::bpffs(&dir.join(format!("bpffs-{k}")));
        let mut v = Veth {
            k,
            near: format!("rf{id}x{k}a"),
            link: None,
            ns: NetNs::new(&format!("rctl-fleet-{id}-{k}")),
            bpffs,
            object: object.to_path_buf(),
        };
        v.link();
        v
    }

    /// Makes the pair and its addresses (again, after [`Veth::unlink`]).
    fn link(&mut self) {
        // The far end's name: the near end's with `b` for `a`.
        let far = format!("{}b", &self.near[..self.near.len() - 1]);
        let link = Link::veth(&self.near, None, &far, Some(&self.ns));
        must(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", self.addr(1)),
                "dev",
                &self.near,
            ],
        );
        for h in [CLIENT, BLOCKED_BY_A, BLOCKED_BY_B] {
            self.ns
                .ip(&["addr", "add", &format!("{}/24", self.addr(h)), "dev", &far]);
        }
        self.link = Some(link);
    }

    /// Removes the pair (as a NIC that is not there yet).
    fn unlink(&mut self) {
        self.link.take().expect("the pair is there").delete();
    }

    fn addr(&self, host: u8) -> String {
        format!("10.204.{}.{host}", self.k)
    }

    /// `rctl agent`'s packet-plane flags for this pair.
    fn plane(&self) -> Vec<String> {
        [
            "--iface",
            &self.near,
            "--bpffs",
            self.bpffs.to_str().unwrap(),
            "--object",
            self.object.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// `rctl status --iface` on `agent`'s directories: the interface's
    /// entry.
    fn status(&self, agent: &Agent) -> serde_json::Value {
        let (run, state) = (agent.dir.join("rundir"), agent.dir.join("state"));
        let o = rctl(&[
            "status",
            "--iface",
            &self.near,
            "--bpffs",
            self.bpffs.to_str().unwrap(),
            "--run-dir",
            run.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--format",
            "json",
        ]);
        // OK, or WARNING for a problem it names (an install to finish).
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
        let want = match v["health"]["state"].as_str() {
            Some("OK") => 0,
            Some("WARNING") => 1,
            other => panic!("{other:?}: {v}"),
        };
        assert_eq!(o.status.code(), Some(want), "{v}");
        v["interfaces"][0].clone()
    }

    /// Sends 20 datagrams from each far-end address to a socket on the
    /// near end; how many the socket received from each.
    fn datagrams(&self) -> BTreeMap<u8, u32> {
        let sock = UdpSocket::bind((self.addr(1), 0)).expect("bind UDP");
        let port = sock.local_addr().unwrap().port().to_string();
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let script = "import socket,sys\n\
            for src in sys.argv[3:]:\n\
            \x20   s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
            \x20   s.bind((src,0))\n\
            \x20   for i in range(20): s.sendto(b'x',(sys.argv[1],int(sys.argv[2])))\n";
        let (near, srcs) = (
            self.addr(1),
            [CLIENT, BLOCKED_BY_A, BLOCKED_BY_B].map(|h| self.addr(h)),
        );
        let mut args = vec!["-c", script, &near, &port];
        args.extend(srcs.iter().map(String::as_str));
        self.ns.exec_ok("python3", &args);
        let mut counts = BTreeMap::from([(CLIENT, 0), (BLOCKED_BY_A, 0), (BLOCKED_BY_B, 0)]);
        let mut buf = [0u8; 16];
        while let Ok((_, from)) = sock.recv_from(&mut buf) {
            let std::net::IpAddr::V4(ip) = from.ip() else {
                continue;
            };
            *counts.entry(ip.octets()[3]).or_insert(0) += 1;
        }
        counts
    }

    /// The packet plane of `agent` runs `gen` (whose blocked address is
    /// `blocked`): status says so, and only that address loses its
    /// datagrams. Returns the XDP generation number.
    fn runs(&self, agent: &Agent, sha: &str, blocked: u8) -> u64 {
        let s = self.status(agent);
        assert_eq!(s["attached"]["artifact_sha256"], sha, "{}: {s}", agent.host);
        assert_eq!(s["enforcing"], true, "{}: {s}", agent.host);
        let counts = self.datagrams();
        eprintln!(
            "{} runs {}: datagrams per source {counts:?}",
            agent.host,
            &sha[..12]
        );
        for (h, n) in &counts {
            let want = if *h == blocked { 0 } else { 20 };
            assert_eq!(*n, want, "{}: from .{h}: {counts:?}", agent.host);
        }
        s["attached"]["generation"].as_u64().unwrap()
    }
}

/// A ruleset for both planes: it denies `path` (HTTP) and drops packets
/// from address `.blocked` of every pair (XDP).
fn both_planes(dir: &Path, name: &str, path: &str, blocked: u8) -> (PathBuf, String) {
    let ips: Vec<String> = (1..=9)
        .map(|k| format!("  10.204.{k}.{blocked}/32"))
        .collect();
    compile(
        dir,
        name,
        &format!(
            "ipblock fleet/{name} {{\n{}\n}}\n\n\
             rule drop_{name} {{\n  when ipblock@fleet/{name}\n  drop\n}}\n\n\
             rule deny_{name} {{\n  when path == \"{path}\"\n  deny\n}}\n",
            ips.join("\n")
        ),
    )
}

/// What XDP-plane address each artifact blocks.
fn blocked_by(sha: &str, a: &str) -> u8 {
    if sha == a {
        BLOCKED_BY_A
    } else {
        BLOCKED_BY_B
    }
}

/// The test directory, the cluster, the XDP object, A and B.
type Setup = (TempDir, Cluster, PathBuf, [(PathBuf, String); 2]);

/// A cluster, and rulesets A and B for both planes, A pushed; `None`
/// (a failure under CI) without etcd, root or the built XDP object.
fn setup(tag: &str) -> Option<Setup> {
    if !servers() {
        return None;
    }
    let object = rctl_testkit::xdp::object_path()?;
    let (dir, c) = cluster(tag);
    let a = both_planes(&dir, "a", "/a", BLOCKED_BY_A);
    let b = both_planes(&dir, "b", "/b", BLOCKED_BY_B);
    assert!(push(&c.urls(), &[a.0.to_str().unwrap()]).status.success());
    Some((dir, c, object, [a, b]))
}

#[test]
fn five_agents_two_with_xdp_on_veth_pairs_converge_and_roll_back() {
    let Some((dir, c, object, [a, b])) = setup("fleet-xdp") else {
        return;
    };
    let etcd = c.urls();
    let pairs = [Veth::new(&dir, 1, &object), Veth::new(&dir, 2, &object)];
    // Before any agent attaches, every address gets through.
    assert!(pairs[0].datagrams().values().all(|n| *n == 20));
    let mut agents: Vec<Agent> = (0..3)
        .map(|i| Agent::start(&dir, &format!("cp{i}"), "eqiad", &etcd, &[]))
        .collect();
    for (i, p) in pairs.iter().enumerate() {
        let plane = p.plane();
        let plane: Vec<&str> = plane.iter().map(String::as_str).collect();
        let host = format!("cp{}", 3 + i);
        agents.push(Agent::start_on(&dir, &host, "esams", &etcd, &plane, &[]));
    }
    converged(&etcd, &agents, &a.1, "/a");
    let xdp = &agents[3..];
    let on = |sha: &str| -> Vec<u64> {
        let (ok, v) = fleet_status(&etcd);
        assert!(ok, "{v}");
        for (p, ag) in pairs.iter().zip(xdp) {
            let line = v["hosts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["host"] == ag.host.as_str())
                .unwrap();
            assert_eq!(line["iface"], p.near.as_str(), "{line}");
        }
        pairs
            .iter()
            .zip(xdp)
            .map(|(p, ag)| p.runs(ag, sha, blocked_by(sha, &a.1)))
            .collect()
    };
    let first = on(&a.1);

    // Push B: both packet planes switch generation, and B's address is
    // the one dropped; roll back: they follow.
    assert!(push(&etcd, &[b.0.to_str().unwrap()]).status.success());
    converged(&etcd, &agents, &b.1, "/b");
    let second = on(&b.1);
    let rollback = push(&etcd, &["--rollback"]);
    assert!(rollback.status.success());
    converged(&etcd, &agents, &a.1, "/a");
    let third = on(&a.1);
    eprintln!("XDP generations: {first:?} -> {second:?} -> {third:?}");
    for i in 0..2 {
        assert!(
            first[i] < second[i] && second[i] < third[i],
            "XDP generations of {}: {first:?} {second:?} {third:?}",
            xdp[i].host
        );
    }
    drop(agents);
}

/// The XDP apply's own steps (ebpf/rctl-loader/src/host/mod.rs), and
/// whether the new generation is live after a kill there (the link
/// switched at `apply-switched`).
const XDP_STEPS: [(&str, bool); 8] = [
    ("apply-locked", false),
    ("apply-pinning", false),
    ("apply-pinned", false),
    ("apply-staged", false),
    ("apply-switched", true),
    ("apply-installed", true),
    ("apply-recorded", true),
    ("apply-retired", true),
];

#[test]
fn an_xdp_agent_killed_at_each_step_of_both_applies_runs_a_whole_generation() {
    let Some((dir, c, object, [a, b])) = setup("fleet-xdp-kill") else {
        return;
    };
    let etcd = c.urls();
    let pair = Veth::new(&dir, 3, &object);
    let plane = pair.plane();
    let plane: Vec<&str> = plane.iter().map(String::as_str).collect();
    let mut agents = vec![
        Agent::start_on(&dir, "cp0", "eqiad", &etcd, &plane, &[]),
        Agent::start(&dir, "cp1", "eqiad", &etcd, &[]),
    ];
    converged(&etcd, &agents, &a.1, "/a");
    pair.runs(&agents[0], &a.1, BLOCKED_BY_A);
    // In time order: the agent prepares, the packet plane switches (its
    // link update is the commit point), the agent commits.
    let steps = AGENT_STEPS[..2]
        .iter()
        .map(|s| (*s, false))
        .chain(XDP_STEPS)
        .chain([(AGENT_STEPS[2], true)]);
    let planes = |ag: &Agent, g: &Gen| {
        pair.runs(ag, g.sha, blocked_by(g.sha, &a.1));
    };
    kill_at_each(&etcd, &mut agents, steps, &Gen::pair(&a, &b), &planes);
    drop(agents);
}

/// An XDP agent whose packet plane cannot be applied when it starts
/// (its interface is not there yet, as a NIC not ready at boot): it
/// serves the HTTP plane from disk but says it is failed, and is `failed`
/// in fleet status once etcd answers; when the interface appears, its
/// next try applies both planes and it is `ok`. (It used to say `ok`
/// with no program attached, and never try again.)
#[test]
fn an_xdp_agent_whose_packet_plane_fails_at_start_says_so_and_recovers() {
    let Some((dir, c, object, [a, _])) = setup("fleet-xdp-start") else {
        return;
    };
    let etcd = c.urls();
    let mut pair = Veth::new(&dir, 4, &object);
    let plane = pair.plane();
    let plane: Vec<&str> = plane.iter().map(String::as_str).collect();
    let mut agent = Agent::start_on(&dir, "cp0", "eqiad", &etcd, &plane, &[]);
    converged(&etcd, std::slice::from_ref(&agent), &a.1, "/a");
    pair.runs(&agent, &a.1, BLOCKED_BY_A);

    // The agent stops and its interface goes (the program with it).
    agent.proc.kill();
    pair.unlink();

    // Started without etcd: HTTP from disk, and the truth about XDP.
    agent.restart(NOWHERE);
    let s = agent.status();
    assert_eq!(agent.serving(), a.1);
    assert_eq!(agent.check("/a", "192.0.2.1").status, 403);
    assert_eq!(s["fleet"]["state"], "failed", "{s}");
    let why = s["fleet"]["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("packet plane"), "{why}");

    // With etcd: failed in fleet status (each try fails again).
    agent.restart(&etcd);
    let host = || fleet_status(&etcd).1["hosts"][0].clone();
    eventually(
        Duration::from_secs(10),
        || host()["state"] == "failed",
        || format!("{}", host()),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(host()["state"], "failed", "{}", host());

    // The interface is back: the next try attaches, both planes run A.
    pair.link();
    converged(&etcd, std::slice::from_ref(&agent), &a.1, "/a");
    pair.runs(&agent, &a.1, BLOCKED_BY_A);
}

/// An XDP agent whose packet plane switches but cannot install the
/// artifact (its place is taken by a directory): both planes run the new
/// generation, and the host says so, but also that it is `failed`, and
/// why, until a try finishes the install. (It used to say `ok` and
/// leave the install undone until the next push.)
#[test]
fn an_xdp_agent_whose_install_fails_after_the_switch_says_so_until_it_is_done() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some((dir, c, object, [a, b])) = setup("fleet-xdp-install") else {
        return;
    };
    let etcd = c.urls();
    let pair = Veth::new(&dir, 5, &object);
    let plane = pair.plane();
    let plane: Vec<&str> = plane.iter().map(String::as_str).collect();
    let agent = Agent::start_on(&dir, "cp0", "eqiad", &etcd, &plane, &[]);
    let one = std::slice::from_ref(&agent);
    converged(&etcd, one, &a.1, "/a");
    pair.runs(&agent, &a.1, BLOCKED_BY_A);

    let active = agent
        .dir
        .join("state")
        .join(&pair.near)
        .join("active.rctlc");
    std::fs::remove_file(&active).unwrap();
    std::fs::create_dir_all(active.join("in-the-way")).unwrap();
    std::fs::set_permissions(&active, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(push(&etcd, &[b.0.to_str().unwrap()]).status.success());
    let fleet = || agent.status()["fleet"].clone();
    eventually(
        Duration::from_secs(20),
        || {
            let f = fleet();
            f["state"] == "failed" && f["generation"] == f["target_generation"]
        },
        || format!("{}", fleet()),
    );
    let f = fleet();
    let why = f["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("applied") && why.contains("installing the artifact"),
        "{f}"
    );
    // Both planes run B meanwhile; fleet status says failed.
    assert_eq!(agent.serving(), b.1);
    pair.runs(&agent, &b.1, BLOCKED_BY_B);
    let (ok, v) = fleet_status(&etcd);
    assert!(!ok, "{v}");
    assert_eq!(v["hosts"][0]["state"], "failed", "{v}");

    // Cleared: a try installs it, and the host is ok.
    std::fs::remove_dir_all(&active).unwrap();
    converged(&etcd, one, &b.1, "/b");
    assert_eq!(
        std::fs::read(&active).unwrap(),
        std::fs::read(&b.0).unwrap()
    );
    pair.runs(&agent, &b.1, BLOCKED_BY_B);
}
