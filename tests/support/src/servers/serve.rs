//! `rctl serve`: the agent, with its SPOE socket, HTTP check endpoint,
//! control socket and matched-request log in its directory. The binary
//! is the caller's to give (`env!("CARGO_BIN_EXE_rctl")` in the root
//! package's tests and benches).

use crate::proc::Proc;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A running `rctl serve`.
pub struct Serve {
    /// The process.
    pub proc: Proc,
    /// The SPOE unix socket.
    pub spoe: PathBuf,
    /// The HTTP check endpoint.
    pub http: SocketAddr,
    /// The control socket (`rctl apply --agent`, `rctl status --agent`).
    pub control: PathBuf,
    /// The matched-request log.
    pub log: PathBuf,
    program: OsString,
    args: Vec<OsString>,
}

impl Serve {
    /// Starts `rctl serve --artifact ARTIFACT` with `command` (the rctl
    /// binary, or a wrapper such as `taskset -c 0 rctl`, then `rctl
    /// serve`'s arguments after it): SPOE on `DIR/run/spoe.sock`, the
    /// check endpoint on `http`, the control socket on
    /// `DIR/run/agent.sock`, the log in `DIR/matched.log` (the check
    /// endpoint and the log unless `extra` names its own with `--http`,
    /// `--log`) and `extra` flags; waits until it says it is ready.
    pub fn start(
        dir: &Path,
        artifact: &Path,
        http: SocketAddr,
        extra: &[&str],
        command: Command,
    ) -> Serve {
        use std::os::unix::fs::PermissionsExt as _;
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        let (spoe, control, log) = (
            run.join("spoe.sock"),
            run.join("agent.sock"),
            dir.join("matched.log"),
        );
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--artifact".into(),
            artifact.display().to_string(),
            "--spoe".into(),
            format!("unix:{}", spoe.display()),
            "--control".into(),
            control.display().to_string(),
        ];
        // A test that names its own check endpoint keeps it.
        if !extra.contains(&"--http") {
            args.extend(["--http".into(), http.to_string()]);
        }
        // A test that names its own log keeps it.
        let log = match extra.iter().position(|a| *a == "--log") {
            Some(i) => PathBuf::from(extra.get(i + 1).copied().unwrap_or_default()),
            None => {
                args.extend(["--log".into(), log.display().to_string()]);
                log
            }
        };
        args.extend(extra.iter().map(|s| s.to_string()));
        let program = command.get_program().to_os_string();
        let mut args: Vec<OsString> = command
            .get_args()
            .map(OsString::from)
            .chain(args.into_iter().map(OsString::from))
            .collect();
        args.shrink_to_fit();
        let before = ready_lines(dir);
        let proc = spawn(dir, &program, &args);
        let mut s = Serve {
            proc,
            spoe,
            http,
            control,
            log,
            program,
            args,
        };
        s.wait(before);
        s
    }

    fn wait(&mut self, before: usize) {
        self.proc
            .wait_ready("rctl serve: ready", Duration::from_secs(30), |p| {
                p.stderr().matches(READY).count() > before
            });
    }

    /// Kills it (SIGKILL, as a crash would) if it runs, then starts it
    /// again with the same flags; the stale sockets stay, as a crash
    /// leaves them.
    pub fn restart(&mut self) {
        self.proc.kill();
        let dir = self.proc.dir.clone();
        let before = ready_lines(&dir);
        self.proc = spawn(&dir, &self.program, &self.args);
        self.wait(before);
    }
}

const READY: &str = "rctl serve: ready";

fn ready_lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("rctl-serve.stderr"))
        .unwrap_or_default()
        .matches(READY)
        .count()
}

fn spawn(dir: &Path, program: &OsString, args: &[OsString]) -> Proc {
    let mut cmd = Command::new(program);
    cmd.args(args);
    Proc::spawn("rctl-serve", dir, cmd)
}
