//! An agent killed at each pinned step of its apply (`RCTL_FAULT`: the
//! process kills itself with SIGKILL there), then started against an etcd
//! that does not answer, then against etcd: before etcd answers it
//! enforces one whole pushed generation, the one its disk and its packet
//! plane say (never a mix), and afterwards it converges; `rctl fleet
//! status` never says it runs what it does not.

use super::*;

/// A pushed generation and how to see it in verdicts.
pub(super) struct Gen<'a> {
    /// The artifact.
    pub file: &'a Path,
    /// Its content hash.
    pub sha: &'a str,
    /// A path it denies.
    pub denied: &'a str,
    /// A path it lets through (the other generation denies it).
    pub allowed: &'a str,
}

impl Gen<'_> {
    /// Generations A and B of `denying(…, "a", "/a")` and `(…, "b", "/b")`
    /// (or rulesets that deny the same paths).
    pub(super) fn pair<'a>(a: &'a (PathBuf, String), b: &'a (PathBuf, String)) -> [Gen<'a>; 2] {
        [
            Gen {
                file: &a.0,
                sha: &a.1,
                denied: "/a",
                allowed: "/b",
            },
            Gen {
                file: &b.0,
                sha: &b.1,
                denied: "/b",
                allowed: "/a",
            },
        ]
    }
}

/// The agent's own steps, as `dataplane/fleet/src/agent/apply.rs` names
/// them.
pub(super) const AGENT_STEPS: [&str; 3] = ["agent-fetched", "agent-prepared", "agent-committed"];

/// A record in the agent's directory (`last-good` or `pending`): its
/// artifact hash, if the file is there.
pub(super) fn on_disk(a: &Agent, name: &str) -> Option<String> {
    let p = a.dir.join("state/agent").join(format!("{name}.json"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).ok()?).ok()?;
    v["sha256"].as_str().map(str::to_string)
}

/// The victim's line in fleet status.
fn line(etcd: &str, host: &str) -> serde_json::Value {
    let v = fleet_status(etcd).1;
    v["hosts"]
        .as_array()
        .and_then(|h| h.iter().find(|x| x["host"] == host).cloned())
        .unwrap_or_default()
}

/// Kills `agents[0]` at `step` while it applies `next` over `now`, and
/// checks what it runs after each restart. `kept` is the generation it
/// must run after the kill (`now` if the step is before its commit
/// point, `next` after); `planes` checks whatever else shows the
/// generation (the packet plane).
#[expect(
    clippy::too_many_arguments,
    reason = "a test driver: each argument is one thing the case varies"
)]
pub(super) fn kill_at(
    etcd: &str,
    nowhere: &str,
    agents: &mut [Agent],
    step: &str,
    now: &Gen,
    next: &Gen,
    kept: &Gen,
    planes: &dyn Fn(&Agent, &Gen),
) {
    // Started with the fault armed, it takes `now` from its disk and
    // etcd (nothing to apply: no fault yet).
    let victim = &mut agents[0];
    victim.fault = Some(step.to_string());
    victim.restart(etcd);
    eventually(
        Duration::from_secs(20),
        || {
            let s = victim.status()["fleet"].clone();
            s["etcd"]["connected"] == true
                && s["state"] == "ok"
                && s["target_sha256"] == now.sha
                && s["generation"] == s["target_generation"]
        },
        || format!("{step}: before the push: {}", victim.status()),
    );
    assert_eq!(victim.serving(), now.sha, "{step}: before the push");

    // The push; the victim dies at the step.
    let o = push(etcd, &[next.file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    let died = loop {
        if let Some(d) = victim.proc.exited() {
            break d;
        }
        assert!(
            Instant::now() < deadline,
            "{step}: the agent is alive\n{}",
            victim.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(died.signal(), Some(9), "{step}: {died:?}");
    // It died in the apply: `pending` (written first) is `next`, and
    // `last-good` still `now` (renamed last).
    assert_eq!(
        on_disk(victim, "pending").as_deref(),
        Some(next.sha),
        "{step}"
    );
    assert_eq!(
        on_disk(victim, "last-good").as_deref(),
        Some(now.sha),
        "{step}"
    );
    // Fleet status: never `ok` on `next`, then `down` once its lease ends.
    eventually(
        Duration::from_secs(15),
        || {
            let l = line(etcd, &victim.host);
            assert!(
                !(l["state"] == "ok" && l["artifact_sha256"] == next.sha),
                "{step}: fleet status says a dead host runs the new generation: {l}"
            );
            l["state"] == "down" && l["live"] == false
        },
        || format!("{step}: {}", line(etcd, &victim.host)),
    );

    // Restarted where etcd does not answer: one whole generation, `kept`,
    // in its verdicts, its own status, its disk and its other planes.
    victim.fault = None;
    victim.restart(nowhere);
    let s = victim.status();
    assert_eq!(victim.serving(), kept.sha, "{step}: {s}");
    assert_eq!(victim.check(kept.denied, "192.0.2.1").status, 403, "{step}");
    assert_eq!(
        victim.check(kept.allowed, "192.0.2.1").status,
        200,
        "{step}"
    );
    assert_ne!(s["fleet"]["etcd"]["connected"], true, "{step}: {s}");
    assert!(
        s["fleet"]["started"]
            .as_str()
            .is_some_and(|n| n.contains("interrupted")),
        "{step}: the interrupted apply is not mentioned: {s}"
    );
    assert_eq!(
        on_disk(victim, "last-good").as_deref(),
        Some(kept.sha),
        "{step}"
    );
    assert_eq!(on_disk(victim, "pending"), None, "{step}");
    planes(victim, kept);
    let l = line(etcd, &victim.host);
    assert!(l["state"] == "down" && l["live"] == false, "{step}: {l}");

    // With etcd: it converges with the others, and fleet status says so.
    victim.restart(etcd);
    converged(etcd, agents, next.sha, next.denied);
    planes(&agents[0], next);
}

/// [`kill_at`] each of `steps` in turn (with whether the new generation
/// is live after a kill there), pushing the generations of `gens`
/// alternately.
pub(super) fn kill_at_each(
    etcd: &str,
    agents: &mut [Agent],
    steps: impl IntoIterator<Item = (&'static str, bool)>,
    gens: &[Gen; 2],
    planes: &dyn Fn(&Agent, &Gen),
) {
    let nowhere = NOWHERE.to_string();
    let (mut now, mut next) = (&gens[0], &gens[1]);
    for (step, switched) in steps {
        let kept = if switched { next } else { now };
        kill_at(etcd, &nowhere, agents, step, now, next, kept, planes);
        std::mem::swap(&mut now, &mut next);
    }
}

#[test]
fn an_agent_killed_at_each_step_of_its_apply_runs_a_whole_generation() {
    if !servers() {
        return;
    }
    let (dir, c) = cluster("fleet-pinned");
    let etcd = c.urls();
    let a = denying(&dir, "a", "/a");
    let b = denying(&dir, "b", "/b");
    assert!(push(&etcd, &[a.0.to_str().unwrap()]).status.success());
    let mut agents = vec![
        Agent::start(&dir, "cp0", "eqiad", &etcd, &[]),
        Agent::start(&dir, "cp1", "eqiad", &etcd, &[]),
    ];
    converged(&etcd, &agents, &a.1, "/a");
    // Without a packet plane nothing outlives the process: a kill at
    // any step before `last-good` is renamed leaves the old generation.
    let steps = AGENT_STEPS.map(|s| (s, false));
    kill_at_each(&etcd, &mut agents, steps, &Gen::pair(&a, &b), &|_, _| {});
}
