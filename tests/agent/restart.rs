//! Bans and buckets across restarts (`rctl serve --state-dir`): a ban
//! made before a SIGTERM, or before a `kill -9` that came one snapshot
//! interval after it, still refuses the client after the next start, for
//! what is left of it; a snapshot that is not rctl's is reported and the
//! agent starts afresh.

use crate::util::{rctl, tempdir};
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::serve::Serve;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const RULES: &str = r#"
rule login { when path == "/login" throttle 1 requests per 1m burst 1 by ip ban 5m }
"#;

fn compiled(dir: &Path) -> std::path::PathBuf {
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

/// One check of `/login` from `ip` (nginx mode): the status the agent
/// means (`X-Rctl-Status`, 200 when it passes) and its Retry-After.
fn login(http: SocketAddr, ip: &str) -> (u16, u64) {
    let r = crate::agent::Conn::open(http)
        .send(
            "GET",
            "/check/nginx",
            &[
                ("X-Rctl-Target", b"/login"),
                ("X-Rctl-Client-Ip", ip.as_bytes()),
            ],
        )
        .expect("answer");
    let status = r
        .header("x-rctl-status")
        .and_then(|s| s.parse().ok())
        .unwrap_or(r.status);
    let retry = r
        .header("retry-after")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, retry)
}

#[test]
fn agent_a_ban_survives_sigterm_and_kill_9_and_a_bad_snapshot_is_ignored() {
    let dir = tempdir("agent-restart");
    let art = compiled(&dir);
    let state = dir.join("state");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let state_flag = state.display().to_string();
    let flags = ["--state-dir", state_flag.as_str(), "--snapshot-every", "1"];
    let mut agent = crate::util::serve(&dir, &art, http, &flags);
    let ip = "203.0.113.40";
    assert_eq!(login(http, ip).0, 200);
    let (status, retry) = login(http, ip);
    assert_eq!((status, retry), (429, 300), "banned for 5 minutes");
    assert_eq!(login(http, "203.0.113.41").0, 200);

    // A restart as systemd does it: SIGTERM, then a new start.
    agent.proc.stop();
    let snapshot = state.join("limits.snapshot");
    assert!(snapshot.exists(), "nothing saved at stop");
    let mut agent = crate::util::serve(&dir, &art, http, &flags);
    let (status, retry) = login(http, ip);
    assert_eq!(status, 429, "the ban was lost at a restart");
    assert!((290..=300).contains(&retry), "Retry-After {retry}");
    // The banned client, and the other one whose bucket had not refilled.
    let s = agent_status(&agent);
    assert_eq!(s["limit_state"]["restored_keys"], 2, "{s}");
    assert_eq!(
        login(http, "203.0.113.41").0,
        429,
        "its bucket came back too"
    );

    // A crash one snapshot interval after a new ban.
    let other = "203.0.113.42";
    assert_eq!(login(http, other).0, 200);
    assert_eq!(login(http, other).0, 429);
    std::thread::sleep(Duration::from_millis(2_200));
    agent.restart();
    assert_eq!(
        login(http, other).0,
        429,
        "the ban made before kill -9 was lost"
    );
    assert_eq!(login(http, ip).0, 429);

    // A snapshot that is not rctl's: reported, and a fresh start.
    agent.proc.stop();
    std::fs::write(&snapshot, b"RCTLLIMS but then nothing a snapshot holds").unwrap();
    let agent = crate::util::serve(&dir, &art, http, &flags);
    let err = agent.proc.stderr();
    assert!(
        err.contains("warning: limit state not restored, starting afresh"),
        "{err}"
    );
    assert_eq!(login(http, ip).0, 200, "a bad snapshot is ignored");
    let s = agent_status(&agent);
    assert!(s["limit_state"]["restore_error"].is_string(), "{s}");
}

fn agent_status(a: &Serve) -> serde_json::Value {
    let o = rctl(&[
        "status",
        "--format",
        "json",
        "--agent",
        a.control.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["agent"]["status"].clone()
}

#[test]
fn agent_a_restart_starts_from_the_artifact_last_applied() {
    let dir = tempdir("agent-restart-artifact");
    let art = compiled(&dir);
    let newer_src = dir.join("newer.rctl");
    std::fs::write(&newer_src, "rule x { when path == \"/x\" deny 451 }\n").unwrap();
    let newer = dir.join("newer.rctlc");
    assert!(rctl(&[
        "compile",
        newer_src.to_str().unwrap(),
        "-o",
        newer.to_str().unwrap()
    ])
    .status
    .success());
    let state = dir.join("state");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let state_flag = state.display().to_string();
    let flags = ["--state-dir", state_flag.as_str()];
    let mut agent = crate::util::serve(&dir, &art, http, &flags);
    let control = agent.control.display().to_string();
    let o = rctl(&["apply", newer.to_str().unwrap(), "--agent", &control]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let x = |http| {
        crate::agent::Conn::open(http)
            .send(
                "GET",
                "/check",
                &[("X-Rctl-Target", b"/x"), ("X-Rctl-Client-Ip", b"192.0.2.1")],
            )
            .expect("answer")
            .status
    };
    assert_eq!(x(http), 451);
    agent.proc.stop();
    // Started again as its unit would, with the first artifact named.
    let agent = crate::util::serve(&dir, &art, http, &flags);
    assert_eq!(x(http), 451, "the restart went back to --artifact");
    assert!(
        agent
            .proc
            .stderr()
            .contains("starting from the artifact last applied"),
        "{}",
        agent.proc.stderr()
    );
}
