//! HAProxy (`/usr/sbin/haproxy`, Debian's 2.6): `haproxy -c` and a
//! foreground server (`-db`) logging to stdout, with an admin stats
//! socket in its directory (when the configuration asks for one, as
//! [`base`] does). Whether it is installed: [`require`](crate::skip::require)`(BIN)`.

use crate::proc::Proc;
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The program.
pub const BIN: &str = "haproxy";

/// A running HAProxy.
pub struct Haproxy {
    /// The process; its stdout is the traffic log.
    pub proc: Proc,
    /// The admin stats socket.
    pub stats: PathBuf,
}

/// The `global` and `defaults` sections every test configuration starts
/// with: logs to stdout (one `option httplog` line per request, raw), an
/// admin socket at `DIR/admin.sock`, HTTP mode and short timeouts.
///
/// One thread: HAProxy writes a log line to a file descriptor only if no
/// other thread is writing to it at that moment, and otherwise drops the
/// line (`fd_write_frag_line` prefers losing a line to blocking). Tests
/// count these lines against what clients sent, so they cannot have
/// two threads racing: with two, about one run in ten of a 600-request
/// test lost a line.
pub fn base(dir: &Path) -> String {
    format!(
        "global
    nbthread 1
    log stdout format raw local0 info
    stats socket {}/admin.sock mode 600 level admin

defaults
    log global
    mode http
    option httplog
    # Connections that send nothing (readiness checks) are not logged.
    option dontlognull
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    timeout queue 5s

",
        dir.display()
    )
}

/// `haproxy -c -f F...`: `Ok(output)` if it accepts the files, else
/// `Err(output)`.
pub fn check(files: &[PathBuf]) -> Result<String, String> {
    let mut cmd = Command::new(BIN);
    cmd.arg("-c");
    for f in files {
        cmd.arg("-f").arg(f);
    }
    crate::proc::check(cmd)
}

impl Haproxy {
    /// Writes `config` to `DIR/haproxy.cfg`, checks it (with `extra`
    /// files after it), starts HAProxy in the foreground and waits until
    /// every address of `listen` accepts connections.
    pub fn start(dir: &Path, config: &str, extra: &[PathBuf], listen: &[SocketAddr]) -> Haproxy {
        Haproxy::start_with(dir, config, extra, listen, |c| c)
    }

    /// [`Haproxy::start`], running the command `wrap` makes of
    /// HAProxy's (for example under `taskset`).
    pub fn start_with(
        dir: &Path,
        config: &str,
        extra: &[PathBuf],
        listen: &[SocketAddr],
        wrap: impl FnOnce(Command) -> Command,
    ) -> Haproxy {
        let main = dir.join("haproxy.cfg");
        std::fs::write(&main, config).unwrap();
        let mut files = vec![main];
        files.extend(extra.iter().cloned());
        if let Err(e) = check(&files) {
            panic!("haproxy -c refuses the configuration:\n{e}\n{config}");
        }
        let mut cmd = Command::new(BIN);
        cmd.arg("-db");
        for f in &files {
            cmd.arg("-f").arg(f);
        }
        let mut proc = Proc::spawn("haproxy", dir, wrap(cmd));
        for a in listen {
            proc.wait_port(*a);
        }
        Haproxy {
            proc,
            stats: dir.join("admin.sock"),
        }
    }

    /// The traffic log (stdout), once it has stopped growing.
    pub fn log(&self) -> String {
        crate::proc::settled(|| self.proc.stdout())
    }

    /// Everything it wrote so far: stdout (the traffic log), then stderr
    /// (its alerts and warnings, such as a server going down).
    pub fn output(&self) -> String {
        self.proc.stdout() + &self.proc.stderr()
    }

    /// Waits (10 s at most) until a line of its output holds every one of
    /// `parts`; returns that line.
    pub fn wait_line(&self, parts: &[&str]) -> String {
        let t0 = Instant::now();
        loop {
            let text = self.output();
            if let Some(l) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
                return l.to_string();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no log line with {parts:?} in:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A soft stop (SIGUSR1: HAProxy closes its connections, SPOE ones
    /// with HAPROXY-DISCONNECT, and exits); waits 10 s at most for the
    /// exit.
    pub fn soft_stop(&mut self) {
        self.proc.signal("USR1");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if self.proc.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("haproxy did not stop on SIGUSR1\n{}", self.proc.logs());
    }

    /// Runs one command on the stats socket and returns the answer.
    pub fn command(&self, command: &str) -> String {
        let mut s = UnixStream::connect(&self.stats)
            .unwrap_or_else(|e| panic!("{}: {e}", self.stats.display()));
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("{command}\n").as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }
}
