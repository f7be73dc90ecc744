//! etcd as operators run it: https client URLs, and client certificates
//! checked against etcd's CA (`--client-cert-auth`). Push, agents and
//! fleet status work with a good certificate; without one, or with one
//! from another CA, they fail fast and say which certificate to give,
//! while the agents keep enforcing their last good generation.

use super::*;
use rctl_testkit::servers::etcd::Tls;
use rctl_testkit::servers::pki::Ca;
use rctl_testkit::skip::require;

/// `--etcd-ca`, `--etcd-cert`, `--etcd-key` as strings.
fn tls_flags(ca: &Path, cert: &Path, key: &Path) -> Vec<String> {
    [
        ("--etcd-ca", ca),
        ("--etcd-cert", cert),
        ("--etcd-key", key),
    ]
    .iter()
    .flat_map(|(f, p)| [f.to_string(), p.display().to_string()])
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A push that must fail at once (a refused certificate is not an outage
/// to retry for 30 s) with a message holding every one of `says`.
fn refused(etcd: &str, artifact: &Path, flags: &[&str], says: &[&str]) {
    let mut args = vec![artifact.to_str().unwrap()];
    args.extend_from_slice(flags);
    let t = Instant::now();
    let o = push(etcd, &args);
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "pushed with {flags:?}");
    for s in says {
        assert!(err.contains(s), "push with {flags:?}: {s:?} not in {err}");
    }
    assert!(
        took < Duration::from_secs(10),
        "{flags:?}: took {took:?}: {err}"
    );
}

#[test]
fn push_agents_and_fleet_status_over_tls_with_client_certificates() {
    if !servers() || !require("openssl") {
        return;
    }
    let dir = tempdir("fleet-tls");
    let ca = Ca::new(&dir.join("pki"), "etcd");
    let tls = Tls {
        ca: ca.cert.clone(),
        server: ca.loopback_server("etcd-server"),
        client: ca.client("rctl"),
    };
    let other = Ca::new(&dir.join("other-pki"), "other").client("rctl-other");
    let c = Cluster::start_tls(&dir.join("etcd"), 3, tls.clone());
    let etcd = c.urls();
    assert!(etcd.starts_with("https://"), "{etcd}");
    // The members talk TLS to each other too, and check each other's
    // certificates: a peer answers a handshake with the cluster's
    // certificate and refuses one without.
    let peers = c.member_peer_urls();
    assert!(
        peers.len() == 3 && peers.iter().all(|u| u.starts_with("https://")),
        "{peers:?}"
    );
    assert!(
        c.peer_answers(0, true),
        "a peer with the cluster's certificate"
    );
    assert!(!c.peer_answers(0, false), "a peer without a certificate");
    let good = tls_flags(&ca.cert, &tls.client.cert, &tls.client.key);
    let good = strs(&good);
    let a = denying(&dir, "a", "/a");
    let b = denying(&dir, "b", "/b");

    // Push with the client certificate; etcdctl (its own TLS client)
    // reads back what it wrote: the pointer and the artifact's bytes.
    let mut args = vec![a.0.to_str().unwrap()];
    args.extend_from_slice(&good);
    let o = push(&etcd, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pointer: serde_json::Value =
        serde_json::from_slice(&c.get("/rctl/current").expect("no /rctl/current")).unwrap();
    assert_eq!(pointer["sha256"], a.1.as_str());
    let stored = c
        .get(&format!("/rctl/artifacts/{}/chunk/000000", a.1))
        .expect("no chunk");
    assert_eq!(stored, std::fs::read(&a.0).unwrap(), "the stored chunk");

    // Two agents: one given every member, one a single member by IP
    // whose certificate it checks against the name `localhost`.
    let mut one = good.clone();
    one.extend(["--etcd-server-name", "localhost"]);
    let mut agents = vec![
        Agent::start(&dir, "cp0", "eqiad", &etcd, &good),
        Agent::start(&dir, "cp1", "eqiad", &c.url(1), &one),
    ];
    let on = |sha: &str, denied: &str, agents: &[Agent]| {
        eventually(
            Duration::from_secs(20),
            || {
                let (ok, v) = fleet_status_with(&etcd, &good);
                ok && v["hosts"].as_array().is_some_and(|h| {
                    h.len() == 2
                        && h.iter()
                            .all(|x| x["state"] == "ok" && x["artifact_sha256"] == sha)
                })
            },
            || format!("fleet status: {}", fleet_status_with(&etcd, &good).1),
        );
        for ag in agents {
            assert_eq!(ag.serving(), sha, "{}", ag.host);
            assert_eq!(ag.status()["fleet"]["etcd"]["connected"], true);
            assert_eq!(ag.check(denied, "192.0.2.1").status, 403, "{}", ag.host);
        }
    };
    on(&a.1, "/a", &agents);

    // No client certificate, one from another CA, no CA for etcd's own:
    // refused at once, and the error says what to give.
    let cert_hint = ["client certificates", "--etcd-cert", "--trusted-ca-file"];
    let ca_flag = ca.cert.display().to_string();
    refused(&etcd, &b.0, &["--etcd-ca", &ca_flag], &cert_hint);
    refused(&c.url(0), &b.0, &["--etcd-ca", &ca_flag], &cert_hint);
    let foreign = tls_flags(&ca.cert, &other.cert, &other.key);
    refused(&etcd, &b.0, &strs(&foreign), &cert_hint);
    let unverified = tls_flags(&other.cert, &tls.client.cert, &tls.client.key);
    refused(
        &c.url(0),
        &b.0,
        &strs(&unverified),
        &["certificate is not trusted", "--etcd-ca"],
    );
    let o = rctl(&["fleet", "status", "--etcd", &etcd, "--etcd-ca", &ca_flag]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("client certificates"), "fleet status: {err}");
    // Nothing moved (etcdctl says so), and both hosts enforce A.
    let pointer: serde_json::Value =
        serde_json::from_slice(&c.get("/rctl/current").unwrap()).unwrap();
    assert_eq!(pointer["sha256"], a.1.as_str());
    assert!(c.get(&format!("/rctl/artifacts/{}/meta", b.1)).is_none());
    on(&a.1, "/a", &agents);

    // An agent restarted with the other CA's certificate cannot read etcd:
    // it keeps enforcing A from its disk while B is pushed, and says why.
    let cp1 = &mut agents[1];
    let keep = cp1.args.clone();
    for (flag, to) in [("--etcd-cert", &other.cert), ("--etcd-key", &other.key)] {
        let i = cp1.args.iter().position(|a| a == flag).unwrap();
        cp1.args[i + 1] = to.display().to_string();
    }
    cp1.restart(&c.url(1));
    let mut args = vec![b.0.to_str().unwrap()];
    args.extend_from_slice(&good);
    assert!(push(&etcd, &args).status.success());
    eventually(
        Duration::from_secs(20),
        || agents[0].serving() == b.1,
        || format!("cp0 runs {}", agents[0].serving()),
    );
    let cp1 = &mut agents[1];
    eventually(
        Duration::from_secs(10),
        || {
            cp1.status()["fleet"]["etcd"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("client certificates"))
        },
        || format!("cp1: {}", cp1.status()),
    );
    assert_eq!(cp1.serving(), a.1, "cp1 without etcd");
    assert_eq!(cp1.check("/a", "192.0.2.1").status, 403);
    assert_eq!(cp1.check("/b", "192.0.2.1").status, 200);
    assert_ne!(cp1.status()["fleet"]["etcd"]["connected"], true);
    // Fleet status: cp1 is down (it cannot report), A its last known.
    eventually(
        Duration::from_secs(15),
        || {
            let v = fleet_status_with(&etcd, &good).1;
            v["hosts"].as_array().is_some_and(|h| {
                h.iter().any(|x| {
                    x["host"] == "cp1"
                        && x["state"] == "down"
                        && x["live"] == false
                        && x["artifact_sha256"] == a.1.as_str()
                        && x["target_sha256"] == b.1.as_str()
                })
            })
        },
        || format!("fleet status: {}", fleet_status_with(&etcd, &good).1),
    );
    // Given its certificate back, it converges.
    cp1.args = keep;
    cp1.restart(&c.url(1));
    on(&b.1, "/b", &agents);
}
