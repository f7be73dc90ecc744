//! `rctl fleet status` as monitoring reads it: the plugin exit codes and
//! the one-line `--check`, for a fleet nobody reports to, a converged
//! one, and one whose host died. The agent's generation is the fleet's.

use super::*;

/// `rctl fleet status --check`: (exit code, the line).
fn check(etcd: &str) -> (i32, String) {
    let o = rctl(&["fleet", "status", "--check", "--etcd", etcd]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(out.lines().count(), 1, "one line: {out:?}");
    (o.status.code().unwrap_or(-1), out.trim_end().to_string())
}

#[test]
fn fleet_status_goes_red_with_no_host_and_with_a_host_down() {
    if !servers() {
        return;
    }
    let dir = tempdir("fleet-monitor");
    let c = Cluster::start(&dir.join("etcd"), 1);
    let etcd = c.urls();

    // Nobody reported: nothing is known to enforce anything.
    let (code, line) = check(&etcd);
    assert_eq!(code, 2, "{line}");
    assert!(
        line.starts_with("RCTL FLEET CRITICAL - no host reported"),
        "{line}"
    );
    let o = rctl(&["fleet", "status", "--etcd", &etcd]);
    assert_eq!(o.status.code(), Some(2));

    let (art, sha) = denying(&dir, "one", "/one");
    assert!(push(&etcd, &[&art.display().to_string()]).status.success());
    let mut a = Agent::start(&dir, "mon1", "eqiad", &etcd, &[]);
    eventually(
        Duration::from_secs(20),
        || check(&etcd).0 == 0,
        || check(&etcd).1,
    );
    let (_, line) = check(&etcd);
    assert_eq!(line, "RCTL FLEET OK - 1 host, on its target | hosts=1 ok=1");
    // One generation number: the agent's own is the fleet's.
    let (_, v) = fleet_status(&etcd);
    let fleet_gen = v["hosts"][0]["generation"].clone();
    assert_eq!(a.status()["generation"], fleet_gen, "{}", a.status());
    assert_eq!(a.serving(), sha);

    // The host dies: once its report's lease ends, it is down.
    a.proc.kill();
    eventually(
        Duration::from_secs(20),
        || check(&etcd).0 == 2,
        || check(&etcd).1,
    );
    let (_, line) = check(&etcd);
    assert!(
        line.starts_with("RCTL FLEET CRITICAL - mon1 is down"),
        "{line}"
    );
    let (ok, v) = fleet_status(&etcd);
    assert!(!ok);
    assert_eq!(v["health"]["state"], "CRITICAL", "{v}");
}
