//! etcd: a cluster of members on loopback, each with its own data
//! directory, ports and logs; members can be killed and started again.
//! With [`Tls`], clients talk https and must show a certificate the
//! cluster's CA signed (`--client-cert-auth`), and members talk to each
//! other the same way (`--peer-client-cert-auth`), as operators run etcd.

use super::pki::Leaf;
use crate::proc::{free_port, Proc};
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

/// TLS on the client and peer URLs.
#[derive(Clone)]
pub struct Tls {
    /// The CA etcd trusts for client certificates (and that signed its own).
    pub ca: PathBuf,
    /// etcd's certificate, for clients and for its peers (it must allow
    /// both serverAuth and clientAuth).
    pub server: Leaf,
    /// The client certificate `etcdctl` shows.
    pub client: Leaf,
}

impl Cluster {
    /// Starts `n` members in `dir` and waits until they have a leader.
    pub fn start(dir: &Path, n: usize) -> Cluster {
        Cluster::start_with(dir, n, None)
    }

    /// [`Cluster::start`], with clients and peers on https checked by
    /// `tls`.
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
        let scheme = if tls.is_some() { "https" } else { "http" };
        let initial = members
            .iter()
            .map(|m| format!("{}={scheme}://{}", m.name, m.peer))
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
        let peer_url = self.peer_url(i);
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
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
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
                .arg("--client-cert-auth")
                .arg("--peer-cert-file")
                .arg(&t.server.cert)
                .arg("--peer-key-file")
                .arg(&t.server.key)
                .arg("--peer-trusted-ca-file")
                .arg(&t.ca)
                .arg("--peer-client-cert-auth");
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

    /// Member `i`'s peer URL.
    fn peer_url(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.members[i].peer)
    }

    /// `etcdctl ARGS -w json` on every member's URL: its answer.
    fn json(&self, args: &[&str]) -> serde_json::Value {
        let o = self
            .etcdctl(&self.urls())
            .args(args)
            .args(["-w", "json"])
            .output()
            .expect("run etcdctl");
        assert!(
            o.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).expect("etcdctl's JSON")
    }

    /// The peer URLs the cluster reports (`etcdctl member list`), sorted.
    pub fn member_peer_urls(&self) -> Vec<String> {
        let v = self.json(&["member", "list"]);
        let mut urls: Vec<String> = v["members"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["peerURLs"].as_array().cloned().unwrap_or_default())
            .filter_map(|u| u.as_str().map(str::to_string))
            .collect();
        urls.sort();
        urls
    }

    /// A TLS handshake with member `i`'s peer port (`openssl s_client`,
    /// checking the member's certificate against the CA), showing the
    /// cluster's own certificate or none: whether the member completes it
    /// and answers a request for its member list.
    pub fn peer_answers(&self, i: usize, with_certificate: bool) -> bool {
        use std::io::Write as _;
        let t = self.tls.as_ref().expect("a TLS cluster");
        let mut cmd = Command::new("timeout");
        cmd.args([
            "10",
            "openssl",
            "s_client",
            "-quiet",
            "-verify_return_error",
        ])
        .arg("-connect")
        .arg(self.members[i].peer.to_string())
        .arg("-CAfile")
        .arg(&t.ca);
        if with_certificate {
            cmd.arg("-cert")
                .arg(&t.server.cert)
                .arg("-key")
                .arg(&t.server.key);
        }
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run openssl s_client");
        // -quiet ignores the end of stdin: the answer is still read.
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin
            .write_all(b"GET /members HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        drop(stdin);
        let o = child.wait_with_output().expect("openssl s_client");
        String::from_utf8_lossy(&o.stdout).starts_with("HTTP/1.1 200")
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

    /// `etcdctl del KEY`.
    pub fn del(&self, key: &str) {
        let o = self
            .etcdctl(&self.urls())
            .args(["del", key])
            .output()
            .expect("run etcdctl");
        assert!(o.status.success(), "etcdctl del {key}");
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

    /// `etcdctl get KEY --rev REV`: the value and mod_revision of `key`
    /// as it was at revision `rev` (0: now).
    pub fn get_at(&self, key: &str, rev: i64) -> Option<(Vec<u8>, i64)> {
        let v = self.json(&["get", "--rev", &rev.to_string(), key]);
        let kv = v["kvs"].as_array()?.first()?;
        let value = kv["value"].as_str().expect("a base64 value");
        Some((
            base64(value),
            kv["mod_revision"].as_i64().expect("mod_revision"),
        ))
    }

    /// The store's revision now.
    pub fn revision(&self) -> i64 {
        self.json(&["get", "/"])["header"]["revision"]
            .as_i64()
            .expect("a revision")
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

/// Standard base64 (etcdctl's JSON values), decoded.
fn base64(s: &str) -> Vec<u8> {
    let digit = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c:?}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(digit).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for q in bytes.chunks(4) {
        let n = q.iter().fold(0u32, |n, &d| n << 6 | u32::from(d)) << (6 * (4 - q.len()));
        out.extend_from_slice(&n.to_be_bytes()[1..q.len()]);
    }
    out
}
