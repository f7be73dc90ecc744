//! `rctl apply` switching the agent: under load, no request fails and
//! none is judged by a mix of rulesets; bans carry; a failed apply keeps
//! the generation in force.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// The second ruleset: the shipped rules and one more.
const EXTRA: &str = r#"rule swap_new { when path == "/swap-new" deny 403 "new in v2" }"#;

#[test]
fn agent_apply_swaps_under_load_without_a_failed_request_and_bans_carry() {
    let dir = tempdir("agent-swap");
    let (v1, v2) = (compile(&dir, "v1", ""), compile(&dir, "v2", EXTRA));
    let a = Agent::start(&v1, &[]);
    // Ban a scraper's /24 under v1.
    let mut c = a.conn();
    for _ in 0..11 {
        c.send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA))
            .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Each client sends one kind of request and checks every answer; the
    // generation it is told never goes back.
    let kinds: [(&str, &str, &str, &str, u16); 4] = [
        ("GET", "/check/sparql", "185.220.101.8", SCRAPER_UA, 429),
        ("POST", "/check/sparql", UPDATER_IP, UPDATER_UA, 200),
        (
            "GET",
            "/check/wiki/Main_Page",
            "93.184.216.7",
            READER_UA,
            200,
        ),
        ("GET", "/check/swap-new", "93.184.216.8", READER_UA, 0),
    ];
    let workers: Vec<_> = kinds
        .into_iter()
        .map(|(method, target, ip, ua, want)| {
            let (stop, addr) = (Arc::clone(&stop), a.http);
            std::thread::spawn(move || {
                let mut c = Conn::open(addr);
                let (mut n, mut last_gen, mut denied_at) = (0u64, 0u64, None);
                while !stop.load(Ordering::Relaxed) {
                    let r = c
                        .send(method, target, &client(ip, ua))
                        .unwrap_or_else(|e| panic!("{target} from {ip}: request {n} failed: {e}"));
                    let g: u64 = r.header("x-rctl-generation").unwrap().parse().unwrap();
                    assert!(g >= last_gen, "generation {g} after {last_gen}");
                    last_gen = g;
                    if want != 0 {
                        assert_eq!(r.status, want, "{target} from {ip} in generation {g}");
                    } else if r.status == 403 {
                        // The new rule denies from the first v2 answer on,
                        // and only in v2 generations (even numbers here).
                        assert_eq!(g % 2, 0, "v1 denied /swap-new");
                        denied_at.get_or_insert(n);
                    } else {
                        assert_eq!((r.status, g % 2), (200, 1), "v2 passed /swap-new");
                    }
                    n += 1;
                }
                (n, denied_at)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for (i, v) in [&v2, &v1, &v2].into_iter().enumerate() {
        let o = a.rctl(&["apply", v.to_str().unwrap()]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "apply: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.contains(&format!(
                "generation {} replaced generation {}",
                i + 2,
                i + 1
            )),
            "{out}"
        );
        assert!(
            out.contains("carried for 4 rules (wdqs_generic_clients, wdqs_sparql_per_ip, ")
                && out.contains("fresh for 0"),
            "every request throttle rule carries: {out}"
        );
        assert!(
            !out.contains("syn_flood"),
            "a packet limit is the XDP program's: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let (n, _) = w.join().expect("a client saw a failure");
        assert!(n > 20, "only {n} requests");
    }
    // The ban made under generation 1 holds in generation 4.
    let r = c
        .send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA))
        .unwrap();
    assert_eq!((r.status, r.header("x-rctl-generation")), (429, Some("4")));
    let st = a.status();
    assert_eq!(st["generation"], 4);
    assert_eq!(st["counts"]["reloads_ok"], 3);
}

#[test]
fn agent_a_failed_apply_keeps_the_generation_in_force() {
    let dir = tempdir("agent-fail");
    let v1 = compile(&dir, "v1", "");
    let a = Agent::start(&v1, &[]);
    let mut c = a.conn();
    for _ in 0..11 {
        c.send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA))
            .unwrap();
    }
    let mut bytes = std::fs::read(&v1).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    let bad = dir.join("bad.rctlc");
    std::fs::write(&bad, &bytes).unwrap();
    let o = a.rctl(&["apply", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not applied"), "{err}");
    assert!(err.contains("generation 1 keeps serving"), "{err}");
    let r = c
        .send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA))
        .unwrap();
    assert_eq!((r.status, r.header("x-rctl-generation")), (429, Some("1")));
    let st = a.status();
    assert_eq!(
        (
            st["generation"].as_u64(),
            st["counts"]["reloads_failed"].as_u64()
        ),
        (Some(1), Some(1))
    );
    // An agent that is gone: the apply says so, and changes nothing.
    let gone = dir.join("gone.sock");
    let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(["apply", v1.to_str().unwrap(), "--agent"])
        .arg(&gone)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no agent answers"));
}

#[test]
fn agent_status_shows_what_the_agent_runs_and_counts() {
    let dir = tempdir("agent-status");
    let v1 = compile(&dir, "v1", "");
    let a = Agent::start(&v1, &["--site", "eqiad"]);
    let mut c = a.conn();
    for _ in 0..12 {
        c.send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA))
            .unwrap();
    }
    let st = a.status();
    let hash = String::from_utf8_lossy(
        &Command::new(env!("CARGO_BIN_EXE_rctl"))
            .args(["compile", root().join("rules").to_str().unwrap(), "-o"])
            .arg(dir.join("again.rctlc"))
            .output()
            .unwrap()
            .stderr,
    )
    .into_owned();
    assert!(
        hash.contains(st["artifact_sha256"].as_str().unwrap()),
        "{hash} / {st}"
    );
    assert_eq!(st["site"], "eqiad");
    assert_eq!(st["counts"]["requests"]["pass"], 10);
    assert_eq!(st["counts"]["requests"]["throttle"], 2);
    let lim = st["counts"]["limiters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rule"] == "wdqs_generic_clients")
        .unwrap()
        .clone();
    assert_eq!(
        (lim["keys"].as_u64(), lim["banned"].as_u64()),
        (Some(1), Some(1))
    );
    let o = a.rctl(&["status"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("serving: generation 1"), "{text}");
    assert!(
        text.contains("10 pass, 0 allow, 0 deny, 2 throttle, 0 drop"),
        "{text}"
    );
    // Nobody at the socket: not serving, CRITICAL (exit 2).
    let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(["status", "--agent"])
        .arg(a.dir.join("run/none.sock"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stdout).contains("NOT SERVING"));
}

#[test]
fn agent_apply_with_neither_an_agent_nor_an_interface_says_what_to_do() {
    let dir = tempdir("agent-none");
    let v1 = compile(&dir, "v1", "");
    if Path::new(rctl_agent_default()).exists() {
        // An agent runs on this host: the default socket would be used.
        rctl_testkit::skip::skip_unless(false, "no rctl-agent running on this host");
        return;
    }
    let o = crate::util::rctl(&["apply", v1.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("nothing to apply it to") && e.contains("--iface"),
        "{e}"
    );
}

fn rctl_agent_default() -> &'static str {
    "/run/rctl/agent.sock"
}

#[test]
fn agent_a_failed_xdp_apply_aborts_the_agents_prepare() {
    let dir = tempdir("agent-xdp-fail");
    let (v1, v2) = (compile(&dir, "v1", ""), compile(&dir, "v2", EXTRA));
    let a = Agent::start(&v1, &[]);
    // The packet plane cannot be applied (no such interface, and state
    // directories of the test's own): the agent was prepared first, and
    // must keep generation 1 with nothing left pending.
    let run = dir.join("xdp-run");
    let o = a.rctl(&[
        "apply",
        v2.to_str().unwrap(),
        "--iface",
        "rctl-none0",
        "--object",
        v2.to_str().unwrap(),
        "--run-dir",
        run.to_str().unwrap(),
        "--state-dir",
        dir.join("xdp-state").to_str().unwrap(),
        "--bpffs",
        dir.join("no-bpffs").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not applied (the agent keeps generation 1)"),
        "{err}"
    );
    let st = a.status();
    assert_eq!(
        (st["generation"].as_u64(), &st["pending"]),
        (Some(1), &serde_json::Value::Null)
    );
    let mut c = a.conn();
    let r = c
        .send("GET", "/check/swap-new", &client("93.184.216.8", READER_UA))
        .unwrap();
    assert_eq!(r.status, 200, "v2's rule is not in force");
    // The next apply is not kept waiting by a stale prepare.
    let o = a.rctl(&["apply", v2.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = c
        .send("GET", "/check/swap-new", &client("93.184.216.8", READER_UA))
        .unwrap();
    assert_eq!(r.status, 403);
}
