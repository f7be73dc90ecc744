//! Hostile neighbours: what an unprivileged local user (`nobody`, through
//! `setpriv`) can do to a running `rctl serve`, and what a full disk, a
//! planted symbolic link or logrotate's SIGHUP do to it. Each test runs
//! the real binary, the attacker as a real process of another user, and
//! judges from the outside: what the attacker could connect to, the
//! statuses real clients got through real proxies, the log file's bytes.

use crate::edge::{emit_haproxy, emit_nginx, haproxy_config, nginx_http, origin};
use crate::util::{rctl, serve, tempdir};
use rctl_testkit::lab::{self, Mount};
use rctl_testkit::proc::{free_port, Proc};
use rctl_testkit::servers::haproxy::Haproxy;
use rctl_testkit::servers::nginx::{self, Nginx};
use rctl_testkit::servers::serve::Serve;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A ruleset that denies `/bad` with 451 and logs `/logged`.
const RULES: &str = r#"
rule bad { when path == "/bad" deny 451 "bad" }
rule watch { when path starts_with "/logged" log }
"#;

fn compiled(dir: &Path) -> PathBuf {
    let src = dir.join("r.rctl");
    std::fs::write(&src, RULES).unwrap();
    let out = dir.join("r.rctlc");
    let o = rctl(&[
        "compile",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `python3 -c SCRIPT ARGS…` as nobody (uid and gid 65534, no groups),
/// with Debian's python (one nobody may run).
fn as_nobody(script: &str, args: &[&str]) -> Command {
    let mut c = crate::netns::as_nobody(Path::new("/usr/bin/python3"));
    c.arg("-c").arg(script).args(args);
    c
}

/// Connects to a unix socket in a loop until told to stop (its stdin
/// closes); prints how many connections succeeded and what the agent
/// answered the first one that did.
const CONNECT_SPIN: &str = r#"
import socket, sys, threading
path = sys.argv[1]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
ok, first = 0, ""
print("spinning", flush=True)
while not stop.is_set():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        ok += 1
        if not first:
            s.sendall(b'{"op":"status"}\n')
            s.settimeout(2)
            first = s.recv(4096).decode(errors="replace")
    except OSError:
        pass
    finally:
        s.close()
print(ok)
print(first.strip())
"#;

/// Sends one control request as nobody; prints the answer (or the error).
const CONTROL_REQUEST: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    try:
        s.sendall(sys.argv[2].encode() + b"\n")
    except OSError:
        pass  # refused and closed already: the refusal is still to read
    s.settimeout(5)
    print(s.recv(65536).decode(errors="replace").strip())
except OSError as e:
    print("error:", e)
"#;

/// Opens N connections to an SPOE agent over TCP, each with a
/// HAPROXY-HELLO, and holds them idle until its stdin closes; prints how
/// many got an AGENT-HELLO back.
const SPOE_HOLD: &str = r#"
import socket, struct, sys, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def varint(i):
    if i < 240: return bytes([i])
    out = [(i | 240) & 255]; i = (i - 240) >> 4
    while i >= 128:
        out.append((i | 128) & 255); i = (i - 128) >> 7
    out.append(i); return bytes(out)
def s(b): return varint(len(b)) + b
kv = (s(b"supported-versions") + bytes([8]) + s(b"2.0")
      + s(b"max-frame-size") + bytes([3]) + varint(16380)
      + s(b"capabilities") + bytes([8]) + s(b""))
frame = bytes([1]) + struct.pack(">I", 1) + varint(0) + varint(0) + kv
hello = struct.pack(">I", len(frame)) + frame
held, hellos = [], 0
for _ in range(n):
    c = socket.socket()
    try:
        c.connect((host, port)); c.sendall(hello)
        c.settimeout(2)
        head = c.recv(5)
        if len(head) == 5 and head[4] == 101:
            hellos += 1
        held.append(c)
    except OSError:
        c.close()
print(hellos, flush=True)
sys.stdin.read()
"#;

/// Keeps N idle connections to a TCP address open, opening a new one as
/// soon as the agent closes one, until its stdin closes.
const TCP_FLOOD: &str = r#"
import socket, sys, resource, selectors, threading
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
sel = selectors.DefaultSelector()
def open_one():
    c = socket.socket()
    try:
        c.connect((host, port)); c.setblocking(False); sel.register(c, selectors.EVENT_READ)
    except OSError:
        c.close()
for _ in range(n): open_one()
print("open", len(sel.get_map()), flush=True)
reopened = 0
while not stop.is_set():
    for key, _ in sel.select(timeout=0.05):
        c = key.fileobj
        try:
            data = c.recv(1024)
        except OSError:
            data = b""
        if not data:
            sel.unregister(c); c.close(); open_one(); reopened += 1
print(reopened)
"#;

/// A process that runs until its stdin is closed.
struct Held {
    child: std::process::Child,
}

impl Held {
    fn start(mut cmd: Command) -> Held {
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the attacker");
        Held { child }
    }

    /// Its first line of output (waits for it).
    fn first_line(&mut self) -> String {
        use std::io::BufRead as _;
        let out = self.child.stdout.as_mut().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// Closes its stdin and returns what it printed (after what
    /// [`Held::first_line`] read).
    fn finish(mut self) -> String {
        use std::io::Read as _;
        drop(self.child.stdin.take());
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut out);
        }
        let _ = self.child.wait();
        out
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rctl serve` started `times` times, each under umask 000 with the
/// control socket in a root-owned 0755 folder, while nobody spins on
/// connect(): nobody never gets a connection.
#[test]
fn neighbours_the_control_socket_is_never_reachable_by_others_even_under_umask_000() {
    if !lab::available() {
        return;
    }
    let dir = tempdir("neighbours-umask");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    let run = dir.join("run");
    std::fs::create_dir(&run).unwrap();
    chmod(&run, 0o755);
    let sock = run.join("agent.sock");
    let mut spin = Held::start(as_nobody(CONNECT_SPIN, &[sock.to_str().unwrap()]));
    assert_eq!(spin.first_line(), "spinning");
    let t0 = Instant::now();
    for i in 0..30 {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!(
            "umask 000; exec {} serve --artifact {} --control {}",
            env!("CARGO_BIN_EXE_rctl"),
            art.display(),
            sock.display()
        ));
        let d = dir.join(format!("start{i}"));
        std::fs::create_dir(&d).unwrap();
        let mut p = Proc::spawn("rctl-serve", &d, cmd);
        p.wait_ready("rctl serve: ready", Duration::from_secs(20), |p| {
            p.stderr().contains("rctl serve: ready")
        });
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the control socket's mode");
        p.stop();
    }
    let out = spin.finish();
    let connects: u64 = out
        .lines()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(u64::MAX);
    assert_eq!(
        connects,
        0,
        "nobody connected to the control socket {connects} times in 30 starts ({:?}): {out}",
        t0.elapsed()
    );
}

/// With the control socket's file opened to everyone by mistake, nobody
/// still cannot swap, disable or read the ruleset: the agent checks who
/// is connecting (SO_PEERCRED).
#[test]
fn neighbours_a_peer_the_control_socket_does_not_trust_can_neither_load_nor_read() {
    if !lab::available() {
        return;
    }
    let dir = tempdir("neighbours-peercred");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    // An artifact that allows everything, where nobody can read it.
    let evil_src = dir.join("evil.rctl");
    std::fs::write(&evil_src, "rule nothing { when false deny }\n").unwrap();
    let evil = dir.join("evil.rctlc");
    assert!(rctl(&[
        "compile",
        evil_src.to_str().unwrap(),
        "-o",
        evil.to_str().unwrap()
    ])
    .status
    .success());
    chmod(&evil, 0o644);
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let agent = serve(&dir, &art, http, &[]);
    // The mistake: the folder and the socket opened up.
    chmod(&dir.join("run"), 0o755);
    chmod(&agent.control, 0o666);
    for req in [
        format!(r#"{{"op":"load","path":"{}"}}"#, evil.display()),
        r#"{"op":"status"}"#.to_string(),
    ] {
        let o = as_nobody(CONTROL_REQUEST, &[agent.control.to_str().unwrap(), &req])
            .output()
            .unwrap();
        let answer = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            answer.contains("\"ok\":false") && answer.contains("uid 65534"),
            "{req}: {answer}"
        );
        assert!(
            !answer.contains("artifact_sha256"),
            "status leaked: {answer}"
        );
    }
    // Still the first generation, still denying.
    let o = rctl(&[
        "status",
        "--format",
        "json",
        "--agent",
        agent.control.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["agent"]["status"]["generation"], 1, "{v}");
    let refused = v["agent"]["status"]["counts"]["errors"]["control-peer"].as_u64();
    assert_eq!(refused, Some(2), "{v}");
    assert_eq!(check(http, "/bad"), 403);
}

/// One check through the agent's HTTP endpoint in nginx mode: 403 when
/// blocked, 200 when not.
fn check(http: SocketAddr, target: &str) -> u16 {
    crate::edge::emit::get(
        http,
        "/check/nginx",
        &[("X-Rctl-Target", target), ("X-Rctl-Client-Ip", "192.0.2.7")],
    )
}

/// nobody holds 1,100 idle SPOE connections after HELLO on the agent's
/// TCP listener; then HAProxy starts: its requests are still checked
/// (the agent keeps slots for trusted peers and caps each untrusted one).
#[test]
fn neighbours_an_idle_spoe_flood_from_nobody_leaves_haproxy_checked() {
    if !lab::available() || !crate::edge::have_proxies() {
        return;
    }
    let dir = tempdir("neighbours-spoe");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    let spoe = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let spoe_flag = format!("tcp:{spoe}");
    let agent = serve(&dir, &art, http, &["--spoe", &spoe_flag]);
    let mut flood = Held::start(as_nobody(
        SPOE_HOLD,
        &["127.0.0.1", &spoe.port().to_string(), "1100"],
    ));
    let hellos: u64 = flood.first_line().parse().unwrap();
    assert!(
        (1..=256).contains(&hellos),
        "nobody got {hellos} SPOE sessions (at most 256 per untrusted peer)"
    );
    // The claim is that every request is checked, not how fast: a
    // deadline of a second keeps a loaded machine's scheduling out of it.
    // A starved agent misses any deadline, and so does a connection whose
    // SYN found the accept queue full (its retransmission waits 1 s).
    let emitted = emit_haproxy(
        &dir.join("r.rctl"),
        &dir,
        &["--agent", &spoe_flag, "--timeout-ms", "1000"],
    );
    let app = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let front = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let app_dir = dir.join("app");
    std::fs::create_dir(&app_dir).unwrap();
    let _ngx = Nginx::start(
        &app_dir,
        &nginx::conf(&app_dir, 1, &origin(&app_dir, app)),
        &[app],
    );
    let _hap = Haproxy::start(
        &dir,
        &haproxy_config(&dir, &emitted, front, app),
        &[emitted.join("rctl-backends.cfg")],
        &[front],
    );
    let statuses: Vec<u16> = (0..40)
        .map(|_| crate::edge::emit::get(front, "/bad", &[]))
        .collect();
    let denied = statuses.iter().filter(|&&s| s == 451).count();
    let out = flood.finish();
    assert_eq!(
        denied,
        40,
        "{statuses:?}\nflood: {out}\n{}",
        agent.proc.stderr()
    );
}

/// nobody keeps 1,100 connections open on the HTTP check endpoint,
/// opening a new one whenever the agent closes one; nginx (its workers as
/// www-data, a trusted peer) still gets every check answered in time.
#[test]
fn neighbours_a_reconnecting_http_flood_from_nobody_leaves_nginx_checked() {
    if !lab::available() || !crate::edge::have_proxies() {
        return;
    }
    let dir = tempdir("neighbours-http");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let agent = serve(&dir, &art, http, &["--trust-peer", "www-data"]);
    let mut flood = Held::start(as_nobody(
        TCP_FLOOD,
        &["127.0.0.1", &http.port().to_string(), "1100"],
    ));
    let open = flood.first_line();
    assert!(open.starts_with("open "), "the flood did not start: {open}");
    // Every check answered, not how fast: see the SPOE flood above.
    let agent_flag = http.to_string();
    let emitted = emit_nginx(
        &dir.join("r.rctl"),
        &dir,
        &["--agent", &agent_flag, "--timeout-ms", "1000"],
    );
    let front = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let app = SocketAddr::from(([127, 0, 0, 1], free_port()));
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let conf = format!(
        "user www-data;\n{}",
        nginx::conf(&dir, 1, &nginx_http(&dir, &emitted, front, app))
    );
    let ngx = Nginx::start(&dir, &conf, &[front, app]);
    let statuses: Vec<u16> = (0..100)
        .map(|_| crate::edge::emit::get(front, "/bad", &[]))
        .collect();
    let out = flood.finish();
    let log = ngx.log("front.log");
    let unchecked = log.lines().filter(|l| !l.ends_with(" check=403")).count();
    assert_eq!(
        (statuses.iter().filter(|&&s| s == 451).count(), unchecked),
        (100, 0),
        "{statuses:?}\n{log}\nflood reopened: {out}\n{}",
        agent.proc.stderr()
    );
}

/// logrotate's `mv` then `kill -HUP`: the agent keeps running and writes
/// on into a new file at the path; SIGTERM still ends it cleanly.
#[test]
fn neighbours_sighup_reopens_the_log_and_never_ends_the_agent() {
    let dir = tempdir("neighbours-hup");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut agent = serve(&dir, &art, http, &["--log-summary", "1"]);
    for i in 0..3 {
        assert_eq!(check(http, &format!("/logged/before/{i}")), 200);
    }
    let rotated = dir.join("matched.log.1");
    eventually(|| read(&agent.log).lines().count() >= 3);
    std::fs::rename(&agent.log, &rotated).unwrap();
    agent.proc.signal("HUP");
    // The reopen happens at the writer's next turn.
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        agent.proc.running(),
        "SIGHUP ended the agent: {}",
        agent.proc.stderr()
    );
    for i in 0..4 {
        assert_eq!(check(http, &format!("/logged/after/{i}")), 200);
    }
    eventually(|| read(&agent.log).lines().count() >= 4);
    let (old, new) = (read(&rotated), read(&agent.log));
    assert_eq!(old.matches("/logged/before/").count(), 3, "{old}");
    assert!(!old.contains("/logged/after/"), "{old}");
    assert_eq!(new.matches("/logged/after/").count(), 4, "{new}");
    agent.proc.signal("TERM");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = agent.proc.exited() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "SIGTERM did not end it"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}: {}", agent.proc.stderr());
    assert!(
        !agent.control.exists() && !agent.spoe.exists(),
        "socket files left"
    );
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn eventually(mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A symbolic link planted at the log's path, or a folder others may
/// write, stops the start with why; the link's target is untouched.
#[test]
fn neighbours_the_log_is_never_written_through_a_link_or_in_a_shared_folder() {
    let dir = tempdir("neighbours-link");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    let secret = dir.join("secret");
    std::fs::write(&secret, "root only\n").unwrap();
    chmod(&secret, 0o600);
    let link = dir.join("matched.log");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let start = |log: &Path| {
        Command::new(env!("CARGO_BIN_EXE_rctl"))
            .args(["serve", "--no-control", "--artifact"])
            .arg(&art)
            .arg("--log")
            .arg(log)
            .output()
            .unwrap()
    };
    let o = start(&link);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(read(&secret), "root only\n");
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let o = start(&shared.join("matched.log"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("writable by group or others"),
        "{err}"
    );
}

/// The log on a disk that fills up: the lines that did not fit are
/// counted as failed, never as written, and once there is room again the
/// file holds only whole lines.
#[test]
fn neighbours_a_full_disk_tears_no_line_and_counts_the_lost_ones() {
    if !lab::available() {
        return;
    }
    let dir = tempdir("neighbours-disk");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    // A tmpfs of 64 KiB.
    let disk = Mount::tmpfs(&dir.join("logs"), "size=64k,mode=0755");
    // Most of the disk taken: the log fills the rest within a few lines.
    let filler = disk.join("filler");
    std::fs::write(&filler, vec![b'x'; 48 * 1024]).unwrap();
    let log = disk.join("m.log");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log_flag = log.display().to_string();
    let agent = serve(
        &dir,
        &art,
        http,
        &[
            "--log",
            &log_flag,
            "--log-rate",
            "100000",
            "--log-burst",
            "100000",
        ],
    );
    let long = "x".repeat(300);
    let send = |from: usize, n: usize| {
        for i in from..from + n {
            assert_eq!(check(http, &format!("/logged/{i}/{long}")), 200);
        }
    };
    send(0, 400);
    let totals = |a: &Serve| {
        let o = rctl(&[
            "status",
            "--format",
            "json",
            "--agent",
            a.control.to_str().unwrap(),
        ]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["agent"]["status"]["log"].clone()
    };
    let settled = |n: u64| {
        move |t: &serde_json::Value| {
            t["written"].as_u64().unwrap_or(0) + t["failed"].as_u64().unwrap_or(0) >= n
        }
    };
    // Every line of the 400 written or lost before there is room again.
    eventually(|| settled(400)(&totals(&agent)));
    assert!(
        totals(&agent)["failed"].as_u64().unwrap_or(0) > 0,
        "the disk never filled"
    );
    // Room again.
    std::fs::remove_file(&filler).unwrap();
    send(400, 20);
    eventually(|| settled(420)(&totals(&agent)));
    let t = totals(&agent);
    let text = read(&log);
    assert!(text.ends_with('\n'), "the file ends in a torn line");
    let mut lines = 0;
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l)
            .unwrap_or_else(|e| panic!("a torn line in the log ({e}): {l:?}"));
        if v.get("target").is_some() {
            lines += 1;
        }
    }
    assert_eq!(t["written"].as_u64(), Some(lines), "{t}");
    for i in 400..420 {
        assert!(
            text.contains(&format!("/logged/{i}/")),
            "line {i} is missing"
        );
    }
    assert!(
        text.contains("/logged/419/"),
        "lines after the disk had room again are written: {t}\n{}",
        &text[text.len().saturating_sub(2000)..]
    );
    assert_eq!(
        t["written"].as_u64().unwrap() + t["failed"].as_u64().unwrap(),
        420,
        "{t}"
    );
}

/// nginx (workers as www-data) asks the agent over a unix socket of
/// group www-data, mode 0660: its requests are checked, and nobody cannot
/// even open the socket.
#[test]
fn neighbours_nginx_reaches_the_agent_over_a_socket_only_its_group_may_open() {
    if !lab::available() || !crate::edge::have_proxies() {
        return;
    }
    let dir = tempdir("neighbours-unix-http");
    chmod(&dir, 0o755);
    let art = compiled(&dir);
    let unused = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let sock = run.join("http.sock");
    let flag = format!("unix:{}", sock.display());
    let agent = serve(
        &dir,
        &art,
        unused,
        &["--http", &flag, "--http-group", "www-data"],
    );
    assert!(
        agent
            .proc
            .stderr()
            .contains(&format!("listening: http {flag}")),
        "{}",
        agent.proc.stderr()
    );
    let md = std::fs::metadata(&sock).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(md.mode() & 0o777, 0o660);
    assert_eq!(Some(md.gid()), rctl_os::users::group_id("www-data").ok());
    chmod(&run, 0o755);
    let o = as_nobody(
        CONTROL_REQUEST,
        &[sock.to_str().unwrap(), "GET / HTTP/1.0\r\n"],
    )
    .output()
    .unwrap();
    let answer = String::from_utf8_lossy(&o.stdout);
    assert!(
        answer.contains("Permission denied"),
        "nobody connected: {answer}"
    );
    let emitted = emit_nginx(&dir.join("r.rctl"), &dir, &["--agent", &flag]);
    let front = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let app = SocketAddr::from(([127, 0, 0, 1], free_port()));
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let conf = format!(
        "user www-data;\n{}",
        nginx::conf(&dir, 2, &nginx_http(&dir, &emitted, front, app))
    );
    let ngx = Nginx::start(&dir, &conf, &[front, app]);
    for path in ["/bad", "/fine"] {
        for _ in 0..10 {
            let want = if path == "/bad" { 451 } else { 200 };
            assert_eq!(crate::edge::emit::get(front, path, &[]), want, "{path}");
        }
    }
    let log = ngx.log("front.log");
    let checked = log
        .lines()
        .filter(|l| l.ends_with(" check=403") || l.ends_with(" check=200"))
        .count();
    assert_eq!(checked, 20, "{log}");
}
