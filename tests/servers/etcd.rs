//! etcd: a cluster of members on loopback, each with its own data
//! directory, ports and logs; members can be killed and started again.
//! With [`Tls`], clients talk https and must show a certificate the
//! cluster's CA signed (`--client-cert-auth`); members talk plain http.

use super::pki::Leaf;
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
    tls: Option<Tls>,
}

/// TLS on the client URLs.
#[derive(Clone)]
pub struct Tls {
    /// The CA etcd trusts for client certificates (and that signed its own).
    pub ca: PathBuf,
    /// etcd's certificate.
    pub server: Leaf,
    /// The client certificate `etcdctl` shows.
    pub client: Leaf,
}

impl Cluster {
    /// Starts `n` members in `dir` and waits until they have a leader.
    pub fn start(dir: &Path, n: usize) -> Cluster {
        Cluster::start_with(dir, n, None)
    }

    /// [`Cluster::start`], with clients on https checked by `tls`.
    pub fn start_tls(dir: &Path, n: usize, tls: Tls) -> Cluster {
        Cluster::start_with(dir, n, Some(tls))
    }

    fn start_with(dir: &Path, n: usize, tls: Option<Tls>) -> Cluster {
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
        let mut c = Cluster {
            members,
            initial,
            tls,
        };
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
        let client_url = self.url(i);
        let m = &mut self.members[i];
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", &m.name, "--data-dir"])
            .arg(m.dir.join("data"))
            .args([
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
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
        if let Some(t) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&t.server.cert)
                .arg("--key-file")
                .arg(&t.server.key)
                .arg("--trusted-ca-file")
                .arg(&t.ca)
                .arg("--client-cert-auth");
        }
        m.proc = Some(Proc::spawn(&m.name, &m.dir, cmd));
    }

    /// The client URLs, comma-separated (for `--etcd`).
    pub fn urls(&self) -> String {
        (0..self.members.len())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s client URL.
    pub fn url(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.members[i].client)
    }

    /// `etcdctl` for `endpoints`, with the client certificate under TLS.
    fn etcdctl(&self, endpoints: &str) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3").args(["--endpoints", endpoints]);
        if let Some(t) = &self.tls {
            cmd.arg("--cacert")
                .arg(&t.ca)
                .arg("--cert")
                .arg(&t.client.cert)
                .arg("--key")
                .arg(&t.client.key);
        }
        cmd
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
            let o = self
                .etcdctl(&self.url(i))
                .args([
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
        let mut child = self
            .etcdctl(&self.urls())
            .args(["put", key])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run etcdctl");
        child.stdin.take().unwrap().write_all(value).unwrap();
        assert!(child.wait().unwrap().success(), "etcdctl put {key}");
    }

    /// `etcdctl get KEY`: its value, if it is there (an independent
    /// reader of what rctl wrote).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let o = self
            .etcdctl(&self.urls())
            .args(["get", "--print-value-only", key])
            .output()
            .expect("run etcdctl");
        assert!(
            o.status.success(),
            "etcdctl get {key}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // The value, then a newline; nothing at all for a missing key.
        let mut v = o.stdout;
        v.pop().map(|_| v)
    }

    /// Every member's logs.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .filter_map(|m| m.proc.as_ref().map(Proc::logs))
            .collect()
    }
}

impl Drop for Cluster {
    /// Stops the members and, unless the test failed (its data may tell
    /// why), removes their data: each member's WAL preallocates 64 MB.
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut p) = m.proc.take() {
                p.stop();
            }
            if !std::thread::panicking() {
                let _ = std::fs::remove_dir_all(m.dir.join("data"));
            }
        }
    }
}
