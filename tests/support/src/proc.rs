//! Child processes for tests: [`Proc`], a server in a process group of its
//! own (so that nginx's workers go with their master) with its stdout and
//! stderr captured to files in its directory, a readiness wait that fails
//! with those logs if the process dies or times out, and a stop in `Drop`
//! (SIGTERM to the group, SIGKILL after 5 s) that runs when a test panics
//! too; and what tests ask of processes and ports around it.
//!
//! Ports come from [`free_port`]: one that binds now, below the kernel's
//! ephemeral range and never handed out twice by one process, so a server
//! stopped for a restart finds its port still free. It is released just
//! before the server binds it (another process could take it in between;
//! the readiness wait then fails with the server's log).

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs a program's configuration check (`haproxy -c`, `nginx -t`):
/// `Ok(output)` if it accepts the configuration, else `Err(output)`.
pub fn check(mut cmd: Command) -> Result<String, String> {
    let o = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    if o.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// A TCP port that was free a moment ago on 127.0.0.1, never handed
/// out before by this process.
///
/// Ports come from below the kernel's ephemeral range (32768 and up on
/// Debian), so neither `bind(0)` nor the source port of an outgoing
/// connection can take one while its server is stopped for a restart.
/// Each test process starts at its own offset, so two test binaries
/// run side by side rarely probe the same ports.
pub fn free_port() -> u16 {
    use std::sync::Mutex;
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: Mutex<Option<u16>> = Mutex::new(None);
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let mut offset = next.unwrap_or((std::process::id() % u32::from(SPAN)) as u16);
    for _ in 0..SPAN {
        let port = LOW + offset;
        offset = (offset + 1) % SPAN;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            *next = Some(offset);
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}

/// Whether something accepts connections at `addr`.
pub fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// A server process and its logs.
pub struct Proc {
    name: String,
    child: Child,
    /// The server's directory (configuration, data, logs).
    pub dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    /// Killed and reaped: its group id may belong to someone else now.
    stopped: bool,
}

impl Proc {
    /// Starts `cmd` as `name`, in a process group of its own, with stdin
    /// closed and stdout/stderr written to `DIR/NAME.stdout|stderr`.
    pub fn spawn(name: &str, dir: &Path, mut cmd: Command) -> Proc {
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        // Appended to, so that a restarted server keeps the earlier lines.
        let open = |p: &Path| {
            File::options()
                .create(true)
                .append(true)
                .open(p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        cmd.stdin(Stdio::null())
            .stdout(open(&stdout))
            .stderr(open(&stderr))
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({cmd:?}): {e}"));
        Proc {
            name: name.to_string(),
            child,
            dir: dir.to_path_buf(),
            stdout,
            stderr,
            stopped: false,
        }
    }

    /// The process id (and process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote on stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// What it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Both logs, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- {} stdout ---\n{}--- {} stderr ---\n{}",
            self.name,
            tail(&self.stdout()),
            self.name,
            tail(&self.stderr())
        )
    }

    /// Waits until `ready()` holds; panics with the logs if the process
    /// exits first or `timeout` passes.
    pub fn wait_ready(
        &mut self,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut(&Proc) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if ready(self) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before {what}\n{}",
                    self.name,
                    self.logs()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready ({what}) after {timeout:?}\n{}",
                self.name,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `addr` accepts connections.
    pub fn wait_port(&mut self, addr: SocketAddr) {
        self.wait_ready(
            &format!("listening on {addr}"),
            Duration::from_secs(20),
            |_| listening(addr),
        );
    }

    /// Sends `signal` (`TERM`, `KILL`, `HUP`, ...) to the whole process
    /// group.
    pub fn signal(&self, signal: &str) {
        if self.stopped {
            return;
        }
        let _ = Command::new("kill")
            .args([
                &format!("-{signal}"),
                "--",
                &format!("-{}", self.child.id()),
            ])
            .stderr(Stdio::null())
            .status();
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How the process ended, if it has (then it counts as stopped: its
    /// group id may belong to someone else now, and is not signalled).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.try_wait().ok().flatten();
        if status.is_some() {
            self.stopped = true;
        }
        status
    }

    /// Kills the group at once (SIGKILL) and reaps the process.
    pub fn kill(&mut self) {
        if !self.stopped {
            self.signal("KILL");
            let _ = self.child.wait();
            self.stopped = true;
        }
    }

    /// SIGTERM to the group, then SIGKILL to what is left of it (at once
    /// if the leader is gone, after 5 s if not); reaps the process.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// User and system CPU seconds process `pid` has used (0 if it is gone).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces), from
    // field 3 on: utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks as f64 / clock_ticks()
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): on a shared
/// machine a benchmark's wall time depends on what else runs, its CPU
/// time much less.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The processes of process group `pgid` (a server and its workers).
pub fn group(pgid: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        // Field 5 is the process group.
        if rest.split_whitespace().nth(2) == Some(&pgid.to_string()) {
            pids.push(pid);
        }
    }
    pids
}

/// What `read` returns once it has stayed the same for 200 ms (at most
/// 5 s): servers log a request after answering it, so a client can be
/// done before the log is.
pub fn settled(read: impl Fn() -> String) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = read();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// The last 60 lines of `s`.
pub fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let from = lines.len().saturating_sub(60);
    lines[from..].iter().map(|l| format!("{l}\n")).collect()
}

/// Runs `cmd ARGS` to the end: its output (panics if it cannot start).
pub fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"))
}

/// Runs `cmd ARGS` and asserts that it succeeds (the failure shows its
/// stderr); its output.
pub fn must(cmd: &str, args: &[&str]) -> Output {
    let o = sh(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A directory of a test's own, removed with what is in it on drop (when
/// the test fails too). Derefs to its path.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory `rctl-NAME-PID` in the system's
    /// temporary directory, mode 0700.
    pub fn new(name: &str) -> TempDir {
        use std::os::unix::fs::PermissionsExt as _;
        let d = std::env::temp_dir().join(format!("rctl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        TempDir(d)
    }

    /// Takes charge of `path`, a directory the caller made: removed on
    /// drop.
    pub fn adopt(path: PathBuf) -> TempDir {
        TempDir(path)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
