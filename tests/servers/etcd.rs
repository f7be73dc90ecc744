//! etcd: a cluster of members on loopback, each with its own data
//! directory, ports and logs; members can be killed and started again.

use super::{free_port, Proc};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One member.
pub struct Member {
    /// Its name (`e0`, `e1`, …).
    pub name: String,
    /// Where clients connect.
    pub client: SocketAddr,
    peer: SocketAddr,
    dir: PathBuf,
    /// The process, while it runs.
    pub proc: Option<Proc>,
}

/// A running cluster.
pub struct Cluster {
    /// The members, in order.
    pub members: Vec<Member>,
    initial: String,
}

impl Cluster {
    /// Starts `n` members in `dir` and waits until they have a leader.
    pub fn start(dir: &Path, n: usize) -> Cluster {
        let members: Vec<Member> = (0..n)
            .map(|i| {
                let name = format!("e{i}");
                let d = dir.join(&name);
                std::fs::create_dir_all(&d).unwrap();
                Member {
                    client: ([127, 0, 0, 1], free_port()).into(),
                    peer: ([127, 0, 0, 1], free_port()).into(),
                    name,
                    dir: d,
                    proc: None,
                }
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster { members, initial };
        for i in 0..n {
            c.spawn(i);
        }
        for i in 0..n {
            let addr = c.members[i].client;
            c.members[i].proc.as_mut().unwrap().wait_port(addr);
        }
        c.wait_leader(Duration::from_secs(30));
        c
    }

    fn spawn(&mut self, i: usize) {
        let initial = self.initial.clone();
        let m = &mut self.members[i];
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", &m.name, "--data-dir"])
            .arg(m.dir.join("data"))
            .args([
                "--listen-client-urls",
                &format!("http://{}", m.client),
                "--advertise-client-urls",
                &format!("http://{}", m.client),
                "--listen-peer-urls",
                &format!("http://{}", m.peer),
                "--initial-advertise-peer-urls",
                &format!("http://{}", m.peer),
                "--initial-cluster",
                &initial,
                "--initial-cluster-token",
                "rctl-test",
                // Short timings: a test waits for elections.
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
                "--log-level",
                "warn",
            ]);
        m.proc = Some(Proc::spawn(&m.name, &m.dir, cmd));
    }

    /// The client URLs, comma-separated (for `--etcd`).
    pub fn urls(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `i` (SIGKILL, as a crash).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].proc.take() {
            p.kill();
        }
    }

    /// Starts member `i` again on its data directory.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        let addr = self.members[i].client;
        self.members[i].proc.as_mut().unwrap().wait_port(addr);
    }

    /// `etcdctl endpoint status` of the running members: the index of
    /// the one that says it leads, if any.
    pub fn leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.proc.is_none() {
                continue;
            }
            let o = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args([
                    "--endpoints",
                    &format!("http://{}", m.client),
                    "--command-timeout",
                    "1s",
                    "endpoint",
                    "status",
                    "-w",
                    "json",
                ])
                .output()
                .expect("run etcdctl");
            let v: serde_json::Value = match serde_json::from_slice(&o.stdout) {
                Ok(v) => v,
                Err(_) => continue,
            };
            let s = &v[0]["Status"];
            if s["leader"].is_u64() && s["leader"] == s["header"]["member_id"] {
                return Some(i);
            }
        }
        None
    }

    /// Waits until a member leads.
    pub fn wait_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.leader() {
                return i;
            }
            assert!(
                Instant::now() < deadline,
                "etcd: no leader after {timeout:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcdctl put KEY` with `value` on stdin (binary-safe).
    pub fn put(&self, key: &str, value: &[u8]) {
        use std::io::Write as _;
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.urls(), "put", key])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run etcdctl");
        child.stdin.take().unwrap().write_all(value).unwrap();
        assert!(child.wait().unwrap().success(), "etcdctl put {key}");
    }

    /// Every member's logs.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .filter_map(|m| m.proc.as_ref().map(Proc::logs))
            .collect()
    }
}
