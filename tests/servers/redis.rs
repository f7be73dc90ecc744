//! Redis: one server on loopback without persistence, which can be
//! stopped and started again on the same port.

use super::{free_port, Proc};
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
}

impl Redis {
    /// Starts one in `dir` and waits until it listens.
    pub fn start(dir: &Path) -> Redis {
        std::fs::create_dir_all(dir).unwrap();
        let mut r = Redis {
            addr: ([127, 0, 0, 1], free_port()).into(),
            dir: dir.to_path_buf(),
            proc: None,
        };
        r.restart();
        r
    }

    /// Its URL (for `--redis`).
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
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
        cmd.args([
            "--bind",
            "127.0.0.1",
            "--port",
            &self.addr.port().to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&self.dir);
        let mut p = Proc::spawn("redis", &self.dir, cmd);
        p.wait_port(self.addr);
        self.proc = Some(p);
    }
}
