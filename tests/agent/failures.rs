//! `rctl apply` when a step after the agent's prepare fails: a fake agent
//! on a control socket answers the prepare and then refuses, or hangs up
//! on, the commit or the abort, and records what it was asked. What the
//! command says, its exit code, and which steps it took are checked; for
//! the commit refused after the packet plane switched, on a real
//! interface (root, the built XDP object; never skipped under CI).

use super::*;
use std::os::unix::net::UnixListener;

/// How the fake agent answers a step.
#[derive(Clone, Copy)]
enum Answer {
    Ok,
    /// `{"ok":false,"error":…}`.
    Refuse(&'static str),
    /// Closes the connection without an answer.
    HangUp,
}

/// A fake agent's control socket; what it was asked, as it was asked
/// (`closed` when the connection ended).
struct FakeAgent {
    socket: PathBuf,
    asked: std::thread::JoinHandle<Vec<String>>,
}

impl FakeAgent {
    /// Listens in a private directory of `dir`: prepares as generation 2
    /// (replacing 1), answers the commit and the abort as told. Serves
    /// one connection.
    fn start(dir: &Path, commit: Answer, abort: Answer) -> FakeAgent {
        use std::os::unix::fs::PermissionsExt as _;
        let run = dir.join("fake-run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = run.join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let asked = std::thread::spawn(move || {
            let mut asked = Vec::new();
            let Ok((stream, _)) = listener.accept() else {
                return asked;
            };
            let mut w = stream.try_clone().unwrap();
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let req: serde_json::Value = serde_json::from_str(&line).unwrap();
                let op = req["op"].as_str().unwrap_or("?").to_string();
                asked.push(op.clone());
                let answer = match (op.as_str(), commit, abort) {
                    ("prepare", ..) => Answer::Ok,
                    ("commit", a, _) | ("abort", _, a) => a,
                    _ => Answer::Refuse("not a step of an apply"),
                };
                let reply = match (op.as_str(), answer) {
                    (_, Answer::HangUp) => break,
                    (_, Answer::Refuse(e)) => serde_json::json!({"ok": false, "error": e}),
                    ("prepare", Answer::Ok) => serde_json::json!({
                        "ok": true, "id": "fake1", "generation": 2,
                        "artifact_sha256": "ab".repeat(32), "rules": 1,
                        "carried": {"carried": [], "fresh": []}, "prepare_ms": 1,
                        "warnings": [],
                    }),
                    ("commit", Answer::Ok) => serde_json::json!({
                        "ok": true, "generation": 2, "artifact_sha256": "ab".repeat(32),
                        "replaced": 1,
                    }),
                    (_, Answer::Ok) => serde_json::json!({"ok": true}),
                };
                if writeln!(w, "{reply}").is_err() {
                    break;
                }
            }
            asked.push("closed".into());
            asked
        });
        FakeAgent { socket, asked }
    }

    /// What it was asked (once the command has ended).
    fn asked(self) -> Vec<String> {
        self.asked.join().unwrap()
    }
}

fn rctl_with(args: &[&str], agent: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(args)
        .arg("--agent")
        .arg(agent)
        .output()
        .unwrap()
}

/// `--iface` on an interface that does not exist, with state
/// directories of the test's own: the packet plane's switch fails.
fn failing_xdp<'a>(dir: &Path, artifact: &'a str, object: &'a str) -> Vec<String> {
    let mut v: Vec<String> = [
        "apply",
        artifact,
        "--iface",
        "rctl-none0",
        "--object",
        object,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (flag, sub) in [
        ("--run-dir", "xdp-run"),
        ("--state-dir", "xdp-state"),
        ("--bpffs", "no-bpffs"),
    ] {
        v.extend([flag.to_string(), dir.join(sub).display().to_string()]);
    }
    v
}

#[test]
fn agent_a_failed_abort_after_a_failed_xdp_apply_says_the_agent_drops_the_prepare() {
    let dir = tempdir("agent-abort-fails");
    let v2 = compile(&dir, "v2", "");
    let fake = FakeAgent::start(&dir, Answer::Ok, Answer::Refuse("no pending prepare fake1"));
    let v2s = v2.to_str().unwrap();
    let args = failing_xdp(&dir, v2s, v2s);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = rctl_with(&args, &fake.socket);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "not applied (the agent's prepare could not be aborted (no pending prepare \
             fake1); it keeps its generation and drops the prepare when this connection closes)"
        ),
        "{err}"
    );
    // Prepared, aborted, never committed; the connection closed.
    assert_eq!(fake.asked(), ["prepare", "abort", "closed"]);
}

#[test]
fn agent_an_xdp_object_that_cannot_be_read_is_refused_before_the_agent_prepares() {
    let dir = tempdir("agent-no-object");
    let v2 = compile(&dir, "v2", "");
    let fake = FakeAgent::start(&dir, Answer::Ok, Answer::Ok);
    let missing = dir.join("no-such-object");
    let args = failing_xdp(&dir, v2.to_str().unwrap(), missing.to_str().unwrap());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = rctl_with(&args, &fake.socket);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not applied: reading the XDP object"), "{err}");
    assert_eq!(fake.asked(), ["closed"], "the agent was asked nothing");
}

#[test]
fn agent_a_refused_commit_without_a_packet_plane_changes_nothing() {
    let dir = tempdir("agent-commit-refused");
    let v2 = compile(&dir, "v2", "");
    let fake = FakeAgent::start(&dir, Answer::Refuse("prepare fake1 expired"), Answer::Ok);
    let o = rctl_with(&["apply", v2.to_str().unwrap()], &fake.socket);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "not applied: the agent at {}: prepare fake1 expired",
            fake.socket.display()
        )),
        "{err}"
    );
    assert_eq!(fake.asked(), ["prepare", "commit", "closed"]);
}

#[test]
fn agent_a_commit_whose_answer_is_lost_is_claimed_neither_way() {
    let dir = tempdir("agent-commit-lost");
    let v2 = compile(&dir, "v2", "");
    let fake = FakeAgent::start(&dir, Answer::HangUp, Answer::Ok);
    let o = rctl_with(&["apply", v2.to_str().unwrap()], &fake.socket);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    // It may have committed: not "not applied", and not a success.
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("may or may not have committed it") && err.contains("rctl status"),
        "{err}"
    );
    assert!(!err.contains("not applied"), "{err}");
    assert_eq!(fake.asked(), ["prepare", "commit", "closed"]);
}

#[test]
fn agent_a_commit_refused_after_the_xdp_switch_says_which_plane_runs_what() {
    let Some(object) = rctl_testkit::xdp::object_path() else {
        return;
    };
    let dir = tempdir("agent-commit-after-xdp");
    let v2 = compile(&dir, "v2", "");
    let veth = super::planes::Veth::new(&dir);
    let fake = FakeAgent::start(&dir, Answer::Refuse("prepare fake1 expired"), Answer::Ok);
    let (run, state) = (dir.join("run"), dir.join("state"));
    let host = [
        "--bpffs",
        veth.bpffs.to_str().unwrap(),
        "--run-dir",
        run.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let mut args = vec![
        "apply",
        v2.to_str().unwrap(),
        "--iface",
        &veth.near,
        "--mode",
        "skb",
        "--object",
        object.to_str().unwrap(),
    ];
    args.extend_from_slice(&host);
    let o = rctl_with(&args, &fake.socket);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    // The packet plane switched (exit 1, not 2), the agent did not.
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        out.contains(&format!("attached to {} (skb mode", veth.near)),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "the packet plane runs the new generation, but the agent at {} did not commit it \
             (prepare fake1 expired): it keeps its generation; apply again",
            fake.socket.display()
        )),
        "{err}"
    );
    // Not aborted: the agent drops a prepare it cannot commit.
    assert_eq!(fake.asked(), ["prepare", "commit", "closed"]);
    let mut st = vec!["status", "--iface", veth.near.as_str(), "--format", "json"];
    st.extend_from_slice(&host);
    let o = crate::util::rctl(&st);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sha = rctl_compiler::artifact::hex(
        &rctl_compiler::artifact::content_hash(&std::fs::read(&v2).unwrap()).unwrap(),
    );
    assert_eq!(v["interfaces"][0]["attached"]["artifact_sha256"], sha);
    let mut detach = vec!["detach", "--iface", veth.near.as_str()];
    detach.extend_from_slice(&host);
    assert!(crate::util::rctl(&detach).status.success());
}
