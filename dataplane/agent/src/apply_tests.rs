//! The two-phase apply with fake planes that fail at a chosen step, and
//! the in-process session against a real [`Control`].

use super::*;
use crate::control::{build, ControlConfig};
use crate::judge::Judge;
use crate::metrics::Metrics;
use rctl_dataplane::carry::Carry;
use std::cell::RefCell;
use std::rc::Rc;

/// The calls the fakes saw, in order.
type Log = Rc<RefCell<Vec<String>>>;

fn io(message: &str) -> ControlError {
    ControlError {
        kind: ControlErrorKind::Io,
        message: message.into(),
    }
}

fn no(message: &str) -> ControlError {
    ControlError {
        kind: ControlErrorKind::Refused,
        message: message.into(),
    }
}

/// An agent at generation 6 whose steps fail as told.
struct FakeAgent {
    log: Log,
    prepare: Option<ControlError>,
    commit: Option<ControlError>,
    abort: Option<ControlError>,
    /// What the prepare says of the proxies' configuration.
    stale: Vec<String>,
}

impl FakeAgent {
    fn new(log: &Log) -> FakeAgent {
        FakeAgent {
            log: Rc::clone(log),
            prepare: None,
            commit: None,
            abort: None,
            stale: Vec::new(),
        }
    }
}

fn prepared() -> Prepared {
    Prepared {
        id: "p1".into(),
        generation: 7,
        artifact_sha256: "ab".repeat(32),
        rules: 3,
        carried: Carry::default(),
        prepare_ms: 1,
        warnings: Vec::new(),
        stale_proxies: Vec::new(),
    }
}

impl HttpPlane for FakeAgent {
    fn prepare(&mut self, artifact: &[u8], site: Option<&str>) -> Result<Prepared, ControlError> {
        self.log.borrow_mut().push(format!(
            "prepare {} {}",
            artifact.len(),
            site.unwrap_or("-")
        ));
        let stale = self.stale.clone();
        self.prepare.take().map_or_else(
            || {
                Ok(Prepared {
                    stale_proxies: stale,
                    ..prepared()
                })
            },
            Err,
        )
    }

    fn commit(&mut self, id: &str) -> Result<Committed, ControlError> {
        self.log.borrow_mut().push(format!("commit {id}"));
        match self.commit.take() {
            Some(e) => Err(e),
            None => Ok(Committed {
                generation: 7,
                artifact_sha256: "ab".repeat(32),
                replaced: 6,
                carried: None,
            }),
        }
    }

    fn abort(&mut self, id: &str) -> Result<(), ControlError> {
        self.log.borrow_mut().push(format!("abort {id}"));
        self.abort.take().map_or(Ok(()), Err)
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.log.borrow_mut().push("agent closed".into());
    }
}

/// A packet plane that switches (with `incomplete` steps) or fails.
struct FakeXdp {
    log: Log,
    fail: Option<&'static str>,
    incomplete: Vec<String>,
}

impl FakeXdp {
    fn new(log: &Log) -> FakeXdp {
        FakeXdp {
            log: Rc::clone(log),
            fail: None,
            incomplete: Vec::new(),
        }
    }
}

impl PacketPlane for FakeXdp {
    type Report = &'static str;
    type Error = &'static str;

    fn switch(
        &mut self,
        artifact: &[u8],
        site: Option<&str>,
    ) -> Result<Switched<&'static str>, &'static str> {
        self.log
            .borrow_mut()
            .push(format!("switch {} {}", artifact.len(), site.unwrap_or("-")));
        match self.fail {
            Some(e) => Err(e),
            None => Ok(Switched {
                report: "gen-9 on eth0",
                incomplete: self.incomplete.clone(),
            }),
        }
    }
}

type Outcome = Result<Applied<&'static str>, ApplyError<&'static str, &'static str>>;

fn run(agent: Option<FakeAgent>, xdp: Option<FakeXdp>) -> Outcome {
    Apply::new(b"artifact", Some("eqiad"), agent, xdp).run()
}

fn calls(log: &Log) -> Vec<String> {
    log.borrow().clone()
}

#[test]
fn both_planes_prepare_switch_commit_in_that_order() {
    let log = Log::default();
    let a = run(Some(FakeAgent::new(&log)), Some(FakeXdp::new(&log))).unwrap();
    assert_eq!(
        calls(&log),
        [
            "prepare 8 eqiad",
            "switch 8 eqiad",
            "commit p1",
            "agent closed"
        ]
    );
    let agent = a.agent.unwrap();
    assert_eq!(
        (agent.prepared.id.as_str(), agent.committed.replaced),
        ("p1", 6)
    );
    assert_eq!(a.packet.unwrap().report, "gen-9 on eth0");
}

#[test]
fn a_failed_prepare_touches_nothing_else() {
    let log = Log::default();
    let mut agent = FakeAgent::new(&log);
    agent.prepare = Some(no("not prepared (generation 6 keeps serving): bad"));
    let e = run(Some(agent), Some(FakeXdp::new(&log))).unwrap_err();
    assert_eq!(calls(&log), ["prepare 8 eqiad", "agent closed"]);
    assert!(matches!(&e, ApplyError::Prepare(c) if c.message.contains("keeps serving")));
    assert!(!e.switched());
}

#[test]
fn a_failed_switch_aborts_the_prepare_and_both_planes_keep_their_generation() {
    let log = Log::default();
    let mut xdp = FakeXdp::new(&log);
    xdp.fail = Some("no interface eth9");
    let e = run(Some(FakeAgent::new(&log)), Some(xdp)).unwrap_err();
    assert_eq!(
        calls(&log),
        [
            "prepare 8 eqiad",
            "switch 8 eqiad",
            "abort p1",
            "agent closed"
        ]
    );
    assert_eq!(
        e,
        ApplyError::Packet {
            error: "no interface eth9",
            agent: Some(AgentKept {
                generation: 6,
                abort_failed: None
            })
        }
    );
    assert!(!e.switched());
    assert_eq!(
        e.to_string(),
        "the packet plane: no interface eth9 (both planes keep their generation)"
    );
}

#[test]
fn a_failed_abort_is_reported_and_the_connection_is_closed_before_run_returns() {
    let log = Log::default();
    let mut xdp = FakeXdp::new(&log);
    xdp.fail = Some("no interface eth9");
    let mut agent = FakeAgent::new(&log);
    agent.abort = Some(io("the agent at /run/rctl/agent.sock: broken pipe"));
    let e = run(Some(agent), Some(xdp)).unwrap_err();
    // Closed: the agent drops the prepare it could not be told to abort.
    assert_eq!(calls(&log).last().map(String::as_str), Some("agent closed"));
    let ApplyError::Packet {
        agent: Some(kept), ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(kept.generation, 6);
    assert_eq!(
        kept.abort_failed.as_ref().map(|a| a.kind),
        Some(ControlErrorKind::Io)
    );
    assert!(e.to_string().contains("could not be aborted"), "{e}");
}

#[test]
fn an_incomplete_switch_is_a_switch_the_agent_commits_after() {
    let log = Log::default();
    let mut xdp = FakeXdp::new(&log);
    xdp.incomplete = vec!["installing the artifact: not a directory".into()];
    let a = run(Some(FakeAgent::new(&log)), Some(xdp)).unwrap();
    assert!(calls(&log).contains(&"commit p1".to_string()));
    assert_eq!(a.incomplete(), ["installing the artifact: not a directory"]);
    assert!(a.agent.is_some());
}

#[test]
fn a_failed_commit_after_the_switch_says_the_planes_differ_and_aborts_nothing() {
    let log = Log::default();
    let mut agent = FakeAgent::new(&log);
    agent.commit = Some(no("prepare p1 expired"));
    let e = run(Some(agent), Some(FakeXdp::new(&log))).unwrap_err();
    assert_eq!(
        calls(&log),
        [
            "prepare 8 eqiad",
            "switch 8 eqiad",
            "commit p1",
            "agent closed"
        ]
    );
    assert!(e.switched() && !e.commit_uncertain());
    let ApplyError::Commit {
        prepared, switched, ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(prepared.id, "p1");
    assert_eq!(switched.as_ref().map(|s| s.report), Some("gen-9 on eth0"));
    assert_eq!(
        e.to_string(),
        "the packet plane runs the new generation, but the agent did not commit it (prepare \
         p1 expired): it keeps its generation"
    );
}

#[test]
fn a_commit_whose_answer_was_lost_is_not_claimed_either_way() {
    let log = Log::default();
    let mut agent = FakeAgent::new(&log);
    agent.commit = Some(io("the agent at /s: timed out"));
    let e = run(Some(agent), Some(FakeXdp::new(&log))).unwrap_err();
    assert!(e.switched() && e.commit_uncertain());
    assert!(e.to_string().contains("is not known"), "{e}");
    assert!(!e.to_string().contains("keeps its generation"), "{e}");
}

#[test]
fn a_failed_commit_without_a_packet_plane_changed_nothing() {
    let log = Log::default();
    let mut agent = FakeAgent::new(&log);
    agent.commit = Some(no("generation 8 came into force after prepare p1"));
    let e = run(Some(agent), None).unwrap_err();
    assert_eq!(
        calls(&log),
        ["prepare 8 eqiad", "commit p1", "agent closed"]
    );
    assert!(!e.switched());
    assert_eq!(
        e.to_string(),
        "the agent did not commit it: generation 8 came into force after prepare p1"
    );
}

#[test]
fn the_packet_plane_alone_switches_or_keeps_its_generation() {
    let log = Log::default();
    let a = run(None, Some(FakeXdp::new(&log))).unwrap();
    assert!(a.agent.is_none() && a.incomplete().is_empty());
    let mut xdp = FakeXdp::new(&log);
    xdp.fail = Some("no bpffs");
    let e = run(None, Some(xdp)).unwrap_err();
    assert_eq!(
        e,
        ApplyError::Packet {
            error: "no bpffs",
            agent: None
        }
    );
    assert_eq!(calls(&log), ["switch 8 eqiad", "switch 8 eqiad"]);
    assert_eq!(run(None, None).unwrap_err(), ApplyError::NoPlane);
}

const V1: &str = r#"rule slow { when path == "/s" throttle 1 requests per 1m burst 1 by ip }"#;
const V2: &str = r#"rule extra { when path == "/x" deny 403 "new" }"#;

fn artifact(src: &str) -> Vec<u8> {
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    rctl_compiler::artifact::encode(&c.ruleset.expect("compiles"))
}

/// A control (no socket) over a judge at generation 1 of V1.
fn control() -> (Arc<Judge>, Arc<Control>) {
    let (g, _, _) = build(&artifact(V1), None, 1000, 1, None).unwrap();
    let judge = Arc::new(Judge::new(g, false));
    let metrics = Arc::new(Metrics::new(Arc::clone(&judge)));
    let config = ControlConfig {
        site: None,
        max_keys_per_limiter: 1000,
        prepare_ttl: Duration::from_secs(60),
        listeners: Vec::new(),
    };
    let control = Control::new(Arc::clone(&judge), metrics, None, config);
    (judge, Arc::new(control))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_session_prepares_commits_and_its_drop_releases_what_it_prepared() {
    let rt = runtime();
    let (judge, control) = control();
    let (v1, v2) = (artifact(V1), artifact(V2));
    // Dropped with a prepare pending: the next session is not kept
    // waiting for the prepare's TTL.
    let mut s = Session::new(Arc::clone(&control), rt.handle().clone());
    let p = s.prepare(&v2, None).unwrap();
    assert_eq!(p.generation, 2);
    assert_eq!(control.status()["pending"]["id"], p.id.as_str());
    let mut other = Session::new(Arc::clone(&control), rt.handle().clone());
    let busy = other.prepare(&v2, None).unwrap_err();
    assert_eq!(busy.kind, ControlErrorKind::Refused);
    assert!(busy.message.contains("another prepare"), "{busy}");
    drop(s);
    assert!(control.status()["pending"].is_null());
    // Abort, then a commit of what was aborted is refused.
    let p = other.prepare(&v2, None).unwrap();
    other.abort(&p.id).unwrap();
    assert!(other.commit(&p.id).is_err());
    assert_eq!(judge.current().number, 1);
    // A whole apply through it.
    let a = Apply::<_, FakeXdp>::new(&v2, None, Some(other), None)
        .run()
        .unwrap();
    let agent = a.agent.unwrap();
    assert_eq!(
        (agent.committed.generation, agent.committed.replaced),
        (2, 1)
    );
    assert_eq!(judge.current().number, 2);
    // A failed prepare is a refusal, and changes nothing.
    let mut s = Session::new(Arc::clone(&control), rt.handle().clone());
    let e = s.prepare(&v1[..v1.len() - 1], None).unwrap_err();
    assert_eq!(e.kind, ControlErrorKind::Refused);
    assert!(e.message.contains("generation 2 keeps serving"), "{e}");
}

#[test]
fn a_stale_proxy_refuses_the_apply_before_any_plane_switches_only_when_asked() {
    let log = Log::default();
    let mut agent = FakeAgent::new(&log);
    agent.stale = vec!["the haproxy configuration has no line for status 418".into()];
    let e = Apply::new(b"artifact", None, Some(agent), Some(FakeXdp::new(&log)))
        .refuse_stale_proxies()
        .run()
        .unwrap_err();
    assert_eq!(calls(&log), ["prepare 8 -", "abort p1", "agent closed"]);
    assert!(matches!(&e, ApplyError::StaleProxy { stale, abort_failed: None } if stale.len() == 1));
    assert!(e.to_string().contains("status 418; nothing changed"), "{e}");
    assert!(!e.switched());

    let log = Log::default();
    let mut agent = FakeAgent::new(&log);
    agent.stale = vec!["the nginx configuration has no line for status 418".into()];
    let done = run(Some(agent), Some(FakeXdp::new(&log))).unwrap();
    assert_eq!(
        calls(&log),
        [
            "prepare 8 eqiad",
            "switch 8 eqiad",
            "commit p1",
            "agent closed"
        ]
    );
    assert_eq!(done.agent.unwrap().prepared.stale_proxies.len(), 1);
}
