//! The control protocol against a real socket.

use super::*;
use crate::judge::{Fields, Judge};
use crate::metrics::Metrics;
use std::sync::Arc;

const V1: &str = r#"
rule slow { when path == "/s" throttle 1 requests per 1m burst 1 by ip ban 10m }
rule moved { when path == "/m" throttle 1 requests per 1m burst 1 by ip }
"#;
const V2: &str = r#"
rule slow { when path == "/s" throttle 100 requests per 1m burst 50 by ip ban 1m }
rule moved { when path == "/m" throttle 1 requests per 1m burst 1 by prefix(24, 64) }
rule extra { when path == "/x" deny 403 "new" }
"#;

fn artifact(src: &str) -> Vec<u8> {
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    rctl_compiler::artifact::encode(&c.ruleset.expect("compiles"))
}

/// An agent (judge, metrics, control socket) on its own runtime thread.
struct Agent {
    judge: Arc<Judge>,
    metrics: Arc<Metrics>,
    path: PathBuf,
    dir: PathBuf,
    _trigger: crate::shutdown::Trigger,
}

fn agent(tag: &str, ttl: Duration) -> Agent {
    let dir = std::env::temp_dir().join(format!("rctl-control-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut created = Vec::new();
    rctl_os::fs::ensure_private_dir(&dir, &mut created).unwrap();
    let path = dir.join("agent.sock");
    let (g, _, _) = build(&artifact(V1), None, 1000, 1, None).unwrap();
    let judge = Arc::new(Judge::new(g, false));
    let metrics = Arc::new(Metrics::new(Arc::clone(&judge)));
    let control = Arc::new(Control::new(
        Arc::clone(&judge),
        Arc::clone(&metrics),
        None,
        ControlConfig {
            site: None,
            max_keys_per_limiter: 1000,
            prepare_ttl: ttl,
            listeners: vec!["http tcp:127.0.0.1:1".into()],
        },
    ));
    let (trigger, shutdown) = crate::shutdown::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let p = path.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = crate::listen::Listener::bind(
                &crate::listen::Endpoint::Unix(p),
                &crate::listen::Bind::default(),
            )
            .unwrap();
            ready_tx.send(()).unwrap();
            serve(l, control, shutdown).await;
        });
    });
    ready_rx.recv().unwrap();
    Agent {
        judge,
        metrics,
        path,
        dir,
        _trigger: trigger,
    }
}

impl Agent {
    fn client(&self) -> Client {
        Client::connect(&self.path, Duration::from_secs(30)).unwrap()
    }
    /// The action for a GET of `target` from 192.0.2.1.
    fn hit(&self, target: &str) -> &'static str {
        let f = Fields {
            method: b"GET",
            host: b"example.org",
            target: target.as_bytes(),
            headers: &[],
            ip: "192.0.2.1".parse().unwrap(),
            dst: None,
            port: 443,
        };
        self.judge.decide(&f).0.action.as_str()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn prepare_changes_nothing_commit_swaps_and_the_ban_carries() {
    let a = agent("swap", Duration::from_secs(60));
    assert_eq!(a.hit("/s"), "pass");
    assert_eq!(a.hit("/s"), "throttle");
    let mut c = a.client();
    let p = c.prepare(&artifact(V2), None).unwrap();
    assert_eq!(p.generation, 2);
    assert_eq!(p.rules, 3);
    let carried: Vec<&str> = p.carried.carried.iter().map(|c| c.rule.as_str()).collect();
    assert_eq!(carried, ["slow"]);
    let fresh: Vec<(&str, &str)> = p
        .carried
        .fresh
        .iter()
        .map(|f| (f.rule.as_str(), f.why.describe()))
        .collect();
    assert_eq!(fresh, [("moved", "keys changed")]);
    // Nothing changed yet.
    assert_eq!(a.judge.current().number, 1);
    assert_eq!(a.hit("/x"), "pass");
    assert_eq!(c.status().unwrap().pending.unwrap().id, p.id);
    let done = c.commit(&p.id).unwrap();
    assert_eq!((done.generation, done.replaced), (2, 1));
    assert_eq!(done.artifact_sha256, p.artifact_sha256);
    assert_eq!(a.hit("/x"), "deny");
    // The 10-minute ban made by generation 1 holds in generation 2, whose
    // own limit (100 a minute, burst 50) would have let this through.
    assert_eq!(a.hit("/s"), "throttle");
    let st = c.status().unwrap();
    assert_eq!((st.generation, st.rules, st.pending), (2, 3, None));
    assert_eq!(st.counts.reloads_ok, 1);
    assert_eq!(st.listeners, ["http tcp:127.0.0.1:1"]);
}

#[test]
fn a_failed_prepare_keeps_the_generation_in_force_and_says_why() {
    let a = agent("fail", Duration::from_secs(60));
    let mut c = a.client();
    let mut bad = artifact(V2);
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    let e = c.prepare(&bad, None).unwrap_err();
    assert_eq!(e.kind, ControlErrorKind::Refused);
    assert!(e.message.contains("generation 1 keeps serving"), "{e}");
    let e = c.prepare(b"not an artifact", None).unwrap_err();
    assert!(e.message.contains("not prepared"), "{e}");
    let e = c
        .call(&ControlRequest::Load(Load {
            path: Some("/nonexistent/r.rctlc".into()),
            ..Load::default()
        }))
        .unwrap_err();
    assert!(e.message.contains("/nonexistent/r.rctlc"), "{e}");
    assert_eq!(a.judge.current().number, 1);
    assert_eq!(a.metrics.counts().reloads_failed, 3);
    // Not a request at all: a refusal, and the connection still works.
    let e = c
        .call(&ControlRequest::Commit { id: "nope".into() })
        .unwrap_err();
    assert!(e.message.contains("no pending prepare nope"), "{e}");
    assert_eq!(c.status().unwrap().generation, 1);
}

#[test]
fn one_prepare_at_a_time_dropped_by_abort_disconnect_or_expiry() {
    let a = agent("pending", Duration::from_millis(600));
    let mut first = a.client();
    let p = first.prepare(&artifact(V2), None).unwrap();
    let mut second = a.client();
    let e = second.prepare(&artifact(V2), None).unwrap_err();
    assert!(e.message.contains("another prepare"), "{e}");
    first.abort(&p.id).unwrap();
    assert!(first.commit(&p.id).is_err(), "aborted");
    // The second may prepare now; its disconnect drops it.
    let q = second.prepare(&artifact(V2), None).unwrap();
    drop(second);
    let mut third = a.client();
    let mut waited = 0;
    let r = loop {
        match third.prepare(&artifact(V2), None) {
            Ok(r) => break r,
            Err(e) if waited < 50 => {
                assert!(e.message.contains("another prepare"), "{e}");
                std::thread::sleep(Duration::from_millis(10));
                waited += 1;
            }
            Err(e) => panic!("the disconnect did not drop the prepare: {e}"),
        }
    };
    assert!(third.commit(&q.id).is_err());
    // Expiry: a stuck client's prepare goes after the TTL.
    std::thread::sleep(Duration::from_millis(700));
    let e = third.commit(&r.id).unwrap_err();
    assert!(e.message.contains("expired"), "{e}");
    let mut fourth = a.client();
    let s = fourth.prepare(&artifact(V2), None).unwrap();
    fourth.commit(&s.id).unwrap();
    assert_eq!(a.judge.current().number, 2);
}

#[test]
fn load_is_prepare_and_commit() {
    let a = agent("load", Duration::from_secs(60));
    let mut c = a.client();
    let v = c
        .call(&ControlRequest::Load(Load {
            artifact_hex: Some(to_hex(&artifact(V2))),
            ..Load::default()
        }))
        .unwrap();
    assert_eq!(v["generation"], 2);
    assert_eq!(v["carried"]["carried"][0]["rule"], "slow");
    assert_eq!(a.hit("/x"), "deny");
}

#[test]
fn hex_round_trips_and_refuses_garbage() {
    let b: Vec<u8> = (0..=255).collect();
    assert_eq!(from_hex(&to_hex(&b)).unwrap(), b);
    assert_eq!(from_hex("ABcd").unwrap(), [0xab, 0xcd]);
    assert!(from_hex("abc").is_err());
    assert!(from_hex("zz").is_err());
}

#[test]
fn a_client_refuses_a_socket_in_a_loose_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let a = agent("loose", Duration::from_secs(60));
    std::fs::set_permissions(&a.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Client::connect(&a.path, Duration::from_secs(1))
        .err()
        .unwrap();
    assert!(e.message.contains("chmod 0700"), "{e}");
    std::fs::set_permissions(&a.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = Client::connect(&a.dir.join("none.sock"), Duration::from_secs(1))
        .err()
        .unwrap();
    assert_eq!(e.kind, ControlErrorKind::NotRunning);
}
