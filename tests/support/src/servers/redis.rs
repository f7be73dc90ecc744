//! Redis: one server on loopback without persistence, which can be
//! stopped and started again on the same port; with a password, or TLS
//! only, when a test asks.

use crate::proc::{free_port, Proc};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A Redis server (while `proc` is set).
pub struct Redis {
    /// Where it listens.
    pub addr: SocketAddr,
    dir: PathBuf,
    /// The process, while it runs.
    pub proc: Option<Proc>,
    /// Its `requirepass`, if any.
    pub password: Option<String>,
    /// Its certificate and key, if it speaks TLS only.
    pub tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

impl Redis {
    /// Starts one in `dir` and waits until it listens.
    pub fn start(dir: &Path) -> Redis {
        Redis::start_with(dir, None, None)
    }

    /// [`Redis::start`] with a password, and TLS only (the CA, the
    /// server's certificate and its key: no client certificate asked).
    pub fn start_with(
        dir: &Path,
        password: Option<&str>,
        tls: Option<(PathBuf, PathBuf, PathBuf)>,
    ) -> Redis {
        std::fs::create_dir_all(dir).unwrap();
        let mut r = Redis {
            addr: ([127, 0, 0, 1], free_port()).into(),
            dir: dir.to_path_buf(),
            proc: None,
            password: password.map(str::to_string),
            tls,
        };
        r.restart();
        r
    }

    /// Its URL (for `--redis`), with the password if it has one.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.password {
            Some(p) => format!("{scheme}://:{p}@{}", self.addr),
            None => format!("{scheme}://{}", self.addr),
        }
    }

    /// `redis-cli ARGS` against it; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.addr.port().to_string()]);
        if let Some(p) = &self.password {
            cmd.args(["--no-auth-warning", "-a", p]);
        }
        if let Some((ca, _, _)) = &self.tls {
            cmd.arg("--tls").arg("--cacert").arg(ca);
        }
        let o = cmd.args(args).output().expect("run redis-cli");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Stops it (SIGKILL: nothing is saved anyway).
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Starts it (again) on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        let mut cmd = Command::new("redis-server");
        let port = self.addr.port().to_string();
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir);
        match &self.tls {
            None => {
                cmd.args(["--port", &port]);
            }
            Some((ca, cert, key)) => {
                cmd.args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port,
                    "--tls-auth-clients",
                    "no",
                ])
                .arg("--tls-ca-cert-file")
                .arg(ca)
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key);
            }
        }
        if let Some(p) = &self.password {
            cmd.args(["--requirepass", p]);
        }
        let mut p = Proc::spawn("redis", &self.dir, cmd);
        p.wait_port(self.addr);
        self.proc = Some(p);
    }
}
