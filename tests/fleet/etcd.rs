//! Distribution through etcd: push, convergence, rollback, and faults
//! (a chunk corrupted by hand, another format version, the leader killed
//! during a push, a majority stopped, an agent killed while it applies).

use super::*;

/// A cluster, five agents of two sites, and two rulesets A and B
/// (denying /a and /b) compiled; A pushed and running everywhere.
fn fleet_of_five(tag: &str) -> (TempDir, Cluster, Vec<Agent>, [(PathBuf, String); 2]) {
    let (dir, c) = cluster(tag);
    let etcd = c.urls();
    let a = denying(&dir, "a", "/a");
    let b = denying(&dir, "b", "/b");
    let o = push(&etcd, &[&a.0.display().to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let agents: Vec<Agent> = (0..5)
        .map(|i| {
            let site = if i < 3 { "eqiad" } else { "esams" };
            Agent::start(&dir, &format!("cp{i}"), site, &etcd, &[])
        })
        .collect();
    converged(&etcd, &agents, &a.1, "/a");
    (dir, c, agents, [a, b])
}

#[test]
fn push_converges_on_five_agents_and_rolls_back() {
    if !servers() {
        return;
    }
    let (_dir, c, agents, [a, b]) = fleet_of_five("fleet-push");
    let etcd = c.urls();
    let o = push(&etcd, &[&b.0.display().to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    converged(&etcd, &agents, &b.1, "/b");
    for ag in &agents {
        assert_eq!(ag.check("/a", "192.0.2.1").status, 200, "{}", ag.host);
    }
    let o = push(&etcd, &["--rollback"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    converged(&etcd, &agents, &a.1, "/a");
    for ag in &agents {
        assert_eq!(ag.check("/b", "192.0.2.1").status, 200, "{}", ag.host);
    }
}

#[test]
fn a_corrupt_chunk_or_another_format_is_never_applied() {
    if !servers() {
        return;
    }
    let (dir, c, agents, [a, b]) = fleet_of_five("fleet-corrupt");
    let etcd = c.urls();
    // B is pushed and runs, then one byte of its stored chunk is flipped
    // by hand; A goes back in, and a rollback points at the corrupt B.
    assert!(push(&etcd, &[&b.0.display().to_string()]).status.success());
    converged(&etcd, &agents, &b.1, "/b");
    let mut bytes = std::fs::read(&b.0).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    c.put(&format!("/rctl/artifacts/{}/chunk/000000", b.1), &bytes);
    assert!(push(&etcd, &[&a.0.display().to_string()]).status.success());
    converged(&etcd, &agents, &a.1, "/a");
    let o = push(&etcd, &["--rollback"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Every host keeps A, and says why in fleet status (exit 1: none on target).
    eventually(
        Duration::from_secs(20),
        || {
            let (ok, v) = fleet_status(&etcd);
            !ok && v["hosts"].as_array().is_some_and(|h| {
                h.iter().all(|x| {
                    x["state"] == "failed"
                        && x["artifact_sha256"] == a.1.as_str()
                        && x["target_sha256"] == b.1.as_str()
                        && x["last_error"]
                            .as_str()
                            .is_some_and(|e| e.contains("chunk 0 of 1 has SHA-256"))
                })
            })
        },
        || format!("fleet status: {}", fleet_status(&etcd).1),
    );
    for ag in &agents {
        assert_eq!(ag.serving(), a.1, "{} runs the corrupt artifact", ag.host);
        assert_eq!(ag.check("/a", "192.0.2.1").status, 403);
        let s = ag.status();
        assert!(
            s["fleet"]["last_error"].is_string(),
            "{}: no error in its status: {s}",
            ag.host
        );
    }
    // Another format version: rctl push refuses it, and nothing moves.
    let mut other = std::fs::read(&a.0).unwrap();
    let v = version_offset(&other);
    other[v] = other[v].wrapping_add(7);
    let path = dir.join("other-version.rctlc");
    std::fs::write(&path, &other).unwrap();
    let o = push(&etcd, &[&path.display().to_string()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "pushed another format version");
    assert!(err.contains("version"), "{err}");
    for ag in &agents {
        assert_eq!(ag.serving(), a.1, "{}", ag.host);
    }
    // Pushing B again stores its chunks again: every host takes it.
    assert!(push(&etcd, &[&b.0.display().to_string()]).status.success());
    converged(&etcd, &agents, &b.1, "/b");
}

/// Where the artifact's format version sits: right after the magic.
fn version_offset(artifact: &[u8]) -> usize {
    let magic = rctl_compiler::artifact::MAGIC;
    assert!(artifact.starts_with(&magic));
    magic.len()
}

#[test]
fn the_leader_killed_during_a_push_and_a_majority_stopped() {
    if !servers() {
        return;
    }
    let (_dir, mut c, agents, [a, b]) = fleet_of_five("fleet-leader");
    let etcd = c.urls();
    // The push runs while the leader dies: with two members left it goes
    // through (puts retry until a new leader answers), or it fails and
    // nothing switched. Either way every host runs one whole pushed
    // generation, and fleet status says which.
    let leader = c.wait_leader(Duration::from_secs(10));
    let pushing = {
        let (etcd, path) = (etcd.clone(), b.0.display().to_string());
        std::thread::spawn(move || push(&etcd, &[&path]))
    };
    std::thread::sleep(Duration::from_millis(30));
    c.kill(leader);
    let o = pushing.join().unwrap();
    if !o.status.success() {
        eprintln!("push failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    // What the pointer says is what every host must run (a failed push
    // may have switched before its answer was lost).
    let target = fleet_status(&etcd).1["all"]["sha256"].clone();
    assert!(
        !o.status.success() || target == b.1.as_str(),
        "the push succeeded, the pointer says {target}"
    );
    let (sha, denied) = if target == b.1.as_str() {
        (&b.1, "/b")
    } else {
        assert_eq!(target, a.1.as_str());
        (&a.1, "/a")
    };
    converged(&etcd, &agents, sha, denied);
    c.restart(leader);

    // A majority stopped: nothing can be pushed or read, and every host
    // keeps enforcing what it runs.
    let (x, y) = ((leader + 1) % 3, (leader + 2) % 3);
    c.kill(x);
    c.kill(y);
    let o = push(&etcd, &[&a.0.display().to_string()]);
    assert!(!o.status.success(), "pushed without a quorum");
    for ag in &agents {
        assert_eq!(ag.serving(), *sha, "{}", ag.host);
        assert_eq!(ag.check(denied, "192.0.2.1").status, 403, "{}", ag.host);
    }
    c.restart(x);
    c.restart(y);
    c.wait_leader(Duration::from_secs(30));
    let o = push(&etcd, &[&a.0.display().to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    converged(&etcd, &agents, &a.1, "/a");
}

#[test]
fn an_agent_killed_while_it_applies_restarts_on_its_last_good_generation() {
    if !servers() {
        return;
    }
    let (_dir, c, mut agents, [a, b]) = fleet_of_five("fleet-kill");
    let etcd = c.urls();
    // Nothing answers here: the restarted agent must enforce from its disk.
    let nowhere = NOWHERE.to_string();
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..6 {
        let next = if round % 2 == 0 { &b } else { &a };
        let pushing = {
            let (etcd, path) = (etcd.clone(), next.0.display().to_string());
            std::thread::spawn(move || push(&etcd, &[&path]))
        };
        // Kill it at different points of its fetch and apply.
        std::thread::sleep(Duration::from_millis(5 + 15 * round));
        let victim = &mut agents[0];
        victim.restart(&nowhere);
        assert!(pushing.join().unwrap().status.success());
        // Before etcd answers it runs a whole generation that was pushed.
        let runs = victim.serving();
        assert!(runs == a.1 || runs == b.1, "runs {runs}");
        let denied = if runs == a.1 { "/a" } else { "/b" };
        let other = if runs == a.1 { "/b" } else { "/a" };
        assert_eq!(victim.check(denied, "192.0.2.1").status, 403);
        assert_eq!(victim.check(other, "192.0.2.1").status, 200);
        let s = victim.status();
        assert_ne!(s["fleet"]["etcd"]["connected"], true, "{s}");
        seen.insert(runs);
        // Back with etcd, it converges with the others.
        victim.restart(&etcd);
        converged(
            &etcd,
            &agents,
            &next.1,
            if round % 2 == 0 { "/b" } else { "/a" },
        );
    }
    eprintln!("generations found on disk after the kills: {seen:?}");
}

/// Two operators pushing at once with `--keep 1`, so each push's
/// collection deletes what the other's history no longer names, new
/// artifacts and old ones pushed again, in many small chunks: every
/// pointer ever set names a whole artifact for as long as it is set
/// (read back from etcd's history with etcdctl: the last revision before
/// the next pointer holds its metadata and every chunk, which are its
/// file), and an agent following along never fails to fetch one.
#[test]
fn concurrent_pushes_never_point_at_a_collected_artifact() {
    if !servers() {
        return;
    }
    let (dir, c) = cluster("fleet-concurrent");
    let etcd = c.urls();
    let arts: Vec<(PathBuf, String)> = (0..6)
        .map(|i| {
            let rules: String = (0..40)
                .map(|k| format!("rule r{i}_{k} {{\n  when path == \"/{i}/{k}\"\n  deny\n}}\n"))
                .collect();
            compile(&dir, &format!("art{i}"), &rules)
        })
        .collect();
    let first = push(
        &etcd,
        &[&arts[0].0.display().to_string(), "--chunk-size", "512"],
    );
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let agent = Agent::start(&dir, "cp0", "eqiad", &etcd, &[]);
    let pushers: Vec<_> = [[0usize, 1, 2], [3, 4, 5]]
        .into_iter()
        .map(|mine| {
            let (etcd, arts) = (etcd.clone(), arts.clone());
            std::thread::spawn(move || {
                (0..6)
                    .map(|round| {
                        let p = arts[mine[round % 3]].0.display().to_string();
                        push(&etcd, &[&p, "--keep", "1", "--chunk-size", "512"])
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut pushed = 0;
    for p in pushers {
        for o in p.join().unwrap() {
            let err = String::from_utf8_lossy(&o.stderr).to_string();
            // A push may lose to the other a few times in a row and say
            // so; the check below is what matters.
            assert!(o.status.success() || err.contains("push again"), "{err}");
            pushed += usize::from(o.status.success());
        }
    }
    assert!(pushed >= 10, "{pushed} of 12 pushes succeeded");

    // Every pointer, newest first, with the revision it held until.
    let mut until = c.revision();
    let mut at = until;
    let mut pointers = Vec::new();
    while let Some((v, rev)) = c.get_at("/rctl/current", at) {
        let p: serde_json::Value = serde_json::from_slice(&v).unwrap();
        pointers.push((p["sha256"].as_str().unwrap().to_string(), until));
        until = rev - 1;
        at = rev - 1;
    }
    assert!(pointers.len() >= 11, "{} pointers", pointers.len());
    for (sha, until) in &pointers {
        let file = &arts
            .iter()
            .find(|a| &a.1 == sha)
            .expect("a pushed artifact")
            .0;
        let meta = c
            .get_at(&format!("/rctl/artifacts/{sha}/meta"), *until)
            .unwrap_or_else(|| panic!("{sha}: no metadata at revision {until}, still pointed at"))
            .0;
        let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
        let n = meta["chunks"].as_array().expect("chunk list").len();
        assert!(n > 4, "{n} chunks");
        let stored: Vec<u8> = (0..n)
            .flat_map(|i| {
                c.get_at(&format!("/rctl/artifacts/{sha}/chunk/{i:06}"), *until)
                    .unwrap_or_else(|| {
                        panic!("{sha}: chunk {i} missing at revision {until}, still pointed at")
                    })
                    .0
            })
            .collect();
        assert!(
            stored == std::fs::read(file).unwrap(),
            "{sha}: the chunks are its file"
        );
    }
    let last = &pointers[0].0;
    eventually(
        Duration::from_secs(20),
        || &agent.serving() == last,
        || format!("agent: {}", agent.status()),
    );
    let s = agent.status();
    assert_eq!(s["fleet"]["state"], "ok", "{s}");
    assert_eq!(
        s["fleet"]["failures"], 0,
        "the agent failed to fetch a pointed-at artifact: {s}"
    );
}

/// A pointer naming an artifact that is not stored fails on the agent;
/// when an operator then deletes the pointer, the agent has nothing to
/// retry: it keeps enforcing what it runs and goes quiet (it used to
/// retry without pause, rewriting its report in etcd each time).
#[test]
fn a_failed_pointer_deleted_by_hand_leaves_the_agent_quiet() {
    if !servers() {
        return;
    }
    let (dir, c) = cluster("fleet-deleted-pointer");
    let etcd = c.urls();
    let a = denying(&dir, "a", "/a");
    assert!(push(&etcd, &[a.0.to_str().unwrap()]).status.success());
    let agents = vec![Agent::start(&dir, "cp0", "eqiad", &etcd, &[])];
    converged(&etcd, &agents, &a.1, "/a");
    let mut pointer: serde_json::Value =
        serde_json::from_slice(&c.get("/rctl/current").unwrap()).unwrap();
    pointer["sha256"] = "ab".repeat(32).into();
    c.put("/rctl/current", pointer.to_string().as_bytes());
    eventually(
        Duration::from_secs(10),
        || agents[0].status()["fleet"]["state"] == "failed",
        || format!("{}", agents[0].status()),
    );
    c.del("/rctl/current");
    eventually(
        Duration::from_secs(10),
        || agents[0].status()["fleet"]["target_generation"] == 0,
        || format!("{}", agents[0].status()),
    );
    // Past the retry interval (1 s), etcd's revision stays put.
    std::thread::sleep(Duration::from_millis(1_500));
    let before = c.revision();
    std::thread::sleep(Duration::from_secs(3));
    let writes = c.revision() - before;
    assert!(
        writes <= 2,
        "{writes} writes to etcd in 3 s by an idle agent"
    );
    assert_eq!(agents[0].serving(), a.1);
    assert_eq!(agents[0].check("/a", "192.0.2.1").status, 403);
}
