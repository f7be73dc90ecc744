//! The fleet with real servers: a three-member etcd cluster and Redis on
//! loopback, and `rctl agent` processes, each with its own state
//! directory, control socket and check endpoint. What runs where is read
//! three ways: `rctl fleet status --format json`, each agent's own status
//! over its control socket, and the verdicts its check endpoint gives.

mod etcd;
mod hostile;
mod monitor;
mod pinned;
mod redis;
mod tls;
mod xdp;

use crate::agent::{Conn, Resp};
use crate::util::{rctl, tempdir, TempDir};
use rctl_testkit::proc::{free_port, Proc};
use rctl_testkit::servers::etcd::Cluster;
use rctl_testkit::skip::skip_unless;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether etcd, etcdctl and redis-server are installed (a failure under
/// CI). Each is asked its version (`etcd -v`, as `require` runs it, would
/// start a server).
fn servers() -> bool {
    [
        ("etcd", "--version"),
        ("etcdctl", "version"),
        ("redis-server", "--version"),
    ]
    .iter()
    .all(|(p, version)| {
        let found = Command::new(p)
            .arg(version)
            .output()
            .is_ok_and(|o| o.status.success());
        skip_unless(
            found,
            &format!("{p} (apt-get install etcd-server etcd-client redis-server)"),
        )
    })
}

/// Compiles `src` into `dir/NAME.rctlc`; returns its path and the content
/// hash `rctl compile` prints.
fn compile(dir: &Path, name: &str, src: &str) -> (PathBuf, String) {
    let rctl_src = dir.join(format!("{name}.rctl"));
    std::fs::write(&rctl_src, src).unwrap();
    let out = dir.join(format!("{name}.rctlc"));
    let o = rctl(&[
        "compile",
        &rctl_src.display().to_string(),
        "-o",
        &out.display().to_string(),
    ]);
    let text = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "compile: {text}");
    let sha = text
        .split("content sha256 ")
        .nth(1)
        .map(|s| s[..64].to_string())
        .unwrap_or_else(|| panic!("no hash in {text:?}"));
    (out, sha)
}

/// An etcd URL where nothing answers: port 1 on loopback refuses
/// connections (a privileged port no test binds; a port taken from
/// `free_port` and released could be bound by a concurrent test).
const NOWHERE: &str = "http://127.0.0.1:1";

/// A ruleset that denies `path` (so which one runs shows in verdicts).
fn denying(dir: &Path, name: &str, path: &str) -> (PathBuf, String) {
    compile(
        dir,
        name,
        &format!("rule deny_{name} {{\n  when path == \"{path}\"\n  deny\n}}\n"),
    )
}

/// `rctl push ARGS --etcd URLS`.
fn push(etcd: &str, args: &[&str]) -> std::process::Output {
    let mut a = vec!["push"];
    a.extend_from_slice(args);
    a.extend(["--etcd", etcd]);
    rctl(&a)
}

/// `rctl fleet status --format json`: exit success and the document.
fn fleet_status(etcd: &str) -> (bool, serde_json::Value) {
    fleet_status_with(etcd, &[])
}

/// [`fleet_status`] with `extra` flags (TLS).
fn fleet_status_with(etcd: &str, extra: &[&str]) -> (bool, serde_json::Value) {
    let mut a = vec!["fleet", "status", "--etcd", etcd, "--format", "json"];
    a.extend_from_slice(extra);
    let o = rctl(&a);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| {
        panic!(
            "fleet status: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.success(), v)
}

/// A running `rctl agent --no-xdp`.
struct Agent {
    host: String,
    dir: PathBuf,
    http: SocketAddr,
    control: PathBuf,
    args: Vec<String>,
    /// `RCTL_FAULT` for the next start: the step it kills itself at.
    fault: Option<String>,
    proc: Proc,
}

impl Agent {
    /// Starts `rctl agent` as `host` of `site` following `etcd`, its
    /// state in `dir`, plus `extra` flags; waits until it is ready.
    fn start(dir: &Path, host: &str, site: &str, etcd: &str, extra: &[&str]) -> Agent {
        Agent::start_on(dir, host, site, etcd, &["--no-xdp"], extra)
    }

    /// [`Agent::start`] with `plane` (`--no-xdp`, or `--iface IF` and
    /// where its pins go) instead of `--no-xdp`.
    fn start_on(
        dir: &Path,
        host: &str,
        site: &str,
        etcd: &str,
        plane: &[&str],
        extra: &[&str],
    ) -> Agent {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = dir.join(host);
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let control = run.join("agent.sock");
        let mut args: Vec<String> = ["agent"]
            .iter()
            .chain(plane)
            .chain(&[
                "--host",
                host,
                "--site",
                site,
                "--report-ttl",
                "3",
                "--retry",
                "1",
            ])
            .map(|s| s.to_string())
            .collect();
        args.extend([
            "--state-dir".into(),
            dir.join("state").display().to_string(),
            "--run-dir".into(),
            dir.join("rundir").display().to_string(),
            "--http".into(),
            http.to_string(),
            "--control".into(),
            control.display().to_string(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let proc = Self::spawn(&dir, etcd, &args, None);
        let mut a = Agent {
            host: host.to_string(),
            dir,
            http,
            control,
            args,
            fault: None,
            proc,
        };
        a.wait_ready(0);
        a
    }

    fn spawn(dir: &Path, etcd: &str, args: &[String], fault: Option<&str>) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
        cmd.args(args).args(["--etcd", etcd]);
        if let Some(step) = fault {
            cmd.env("RCTL_FAULT", step);
        }
        Proc::spawn("rctl-agent", dir, cmd)
    }

    fn wait_ready(&mut self, before: usize) {
        self.proc
            .wait_ready("rctl agent: ready", Duration::from_secs(30), |p| {
                p.stderr().matches("rctl agent: ready").count() > before
            });
    }

    /// Kills it (SIGKILL) and starts it again following `etcd` (which
    /// may be an address where nothing answers).
    fn restart(&mut self, etcd: &str) {
        self.proc.kill();
        let before = self.proc.stderr().matches("rctl agent: ready").count();
        self.proc = Self::spawn(&self.dir, etcd, &self.args, self.fault.as_deref());
        self.wait_ready(before);
    }

    /// `rctl status --agent SOCK --format json`'s agent status.
    fn status(&self) -> serde_json::Value {
        let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
            .args(["status", "--format", "json", "--agent"])
            .arg(&self.control)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| {
            panic!(
                "status of {}: {}{}",
                self.host,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        });
        v["agent"]["status"].clone()
    }

    /// The artifact hash the agent itself says it serves.
    fn serving(&self) -> String {
        self.status()["artifact_sha256"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// One check of `path` from client `ip`.
    fn check(&self, path: &str, ip: &str) -> Resp {
        Conn::open(self.http)
            .send(
                "GET",
                &format!("/check{path}"),
                &[("X-Real-Ip", ip.as_bytes())],
            )
            .expect("check")
    }
}

/// Waits (at most `timeout`) until `ok()` holds; panics with `what()`.
fn eventually(timeout: Duration, mut ok: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "after {timeout:?}: {}", what());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every agent's own status, fleet status and the verdicts agree that
/// each host runs `sha`; fleet status exits 0 (every host on target).
fn converged(etcd: &str, agents: &[Agent], sha: &str, denied: &str) {
    eventually(
        Duration::from_secs(20),
        || {
            let (ok, v) = fleet_status(etcd);
            ok && v["hosts"].as_array().is_some_and(|h| {
                h.len() == agents.len()
                    && h.iter()
                        .all(|x| x["state"] == "ok" && x["artifact_sha256"] == sha)
            })
        },
        || format!("fleet status: {}", fleet_status(etcd).1),
    );
    for a in agents {
        assert_eq!(a.serving(), sha, "{} serves another artifact", a.host);
        let r = a.check(denied, "192.0.2.1");
        assert_eq!(r.status, 403, "{}: {denied} is not denied: {r:?}", a.host);
    }
}

/// A cluster of three, in a fresh directory.
fn cluster(tag: &str) -> (TempDir, Cluster) {
    let dir = tempdir(tag);
    let c = Cluster::start(&dir.join("etcd"), 3);
    (dir, c)
}
