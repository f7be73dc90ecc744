//! The unix-socket listener: modes, stale sockets, what is refused, and
//! serving over it.

#[expect(
    dead_code,
    reason = "shared with the other SPOP tests: this one uses the agent and a peer, not the rest"
)]
mod spop_support;

use rctl_agent::spop::{Config, ErrorKind, Listener};
use rctl_testkit::proc::TempDir;
use spop_support::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

fn unsafe_path(addr: &str) -> String {
    match Listener::bind(addr) {
        Err(e) => {
            assert!(matches!(e.kind(), ErrorKind::UnsafePath(_)), "{e}");
            e.to_string()
        }
        Ok(_) => panic!("{addr} was accepted"),
    }
}

#[tokio::test]
async fn serves_on_a_0600_socket_in_a_new_0700_folder_and_removes_it_on_shutdown() {
    let t = TempDir::new("spop-serve");
    let sock = t.join("run/rctl/spoe.sock");
    let mut agent = Agent::start(
        &format!("unix:{}", sock.display()),
        RULES,
        Config::default(),
    );
    assert_eq!(mode(&t.join("run/rctl")), 0o700);
    assert_eq!(mode(&sock), 0o600);
    let mut p = agent.connect().await;
    p.handshake().await;
    p.send(&notify(4, 2, b"/bad", b"x")).await;
    let Reply::Ack(4, 2, vars) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&vars, "status"), Some("451"));
    agent.shutdown().await;
    assert!(!sock.exists(), "the socket file outlived the agent");
}

#[tokio::test]
async fn a_stale_socket_is_replaced_but_a_live_one_is_refused() {
    let t = TempDir::new("spop-stale");
    let sock = t.join("spoe.sock");
    let addr = format!("unix:{}", sock.display());
    // A socket whose listener died (std does not remove the file).
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let agent = Agent::start(&addr, RULES, Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    // Now a live agent holds it.
    let msg = unsafe_path(&addr);
    assert!(msg.contains("another process is listening"), "{msg}");
    drop(p);
}

#[test]
fn other_files_and_shared_folders_are_refused() {
    let t = TempDir::new("spop-refuse");
    let file = t.join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let msg = unsafe_path(&format!("unix:{}", file.display()));
    assert!(msg.contains("not a socket"), "{msg}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    let shared = t.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let msg = unsafe_path(&format!("unix:{}/spoe.sock", shared.display()));
    assert!(msg.contains("writable by group or others"), "{msg}");
    match Listener::bind("udp:1.2.3.4:5") {
        Err(e) => assert!(matches!(e.kind(), ErrorKind::BadAddress(_))),
        Ok(_) => panic!("udp accepted"),
    }
}
