//! The fleet agent's apply with fake planes failing at each step: what
//! its disk keeps, and what its report says.

use super::*;
use rctl_agent::control::ControlErrorKind;
use rctl_dataplane::carry::Carry;
use rctl_testkit::proc::TempDir;
use std::cell::RefCell;
use std::rc::Rc;

type Log = Rc<RefCell<Vec<&'static str>>>;

/// An artifact denying `path`, and its record as generation `generation`.
fn artifact(path: &str, generation: i64) -> (Record, Vec<u8>) {
    let src = format!("rule r {{\n  when path == \"{path}\"\n  deny\n}}\n");
    let c = rctl_compiler::compile_str("t.rctl", &src, &rctl_compiler::Options::default());
    let bytes = rctl_compiler::artifact::encode(&c.ruleset.expect("compiles"));
    let sha = rctl_compiler::artifact::content_hash(&bytes).unwrap();
    let rec = Record {
        generation,
        sha256: rctl_compiler::artifact::hex(&sha),
        applied_unix: 1,
    };
    (rec, bytes)
}

/// A local directory whose `last-good` is generation 1 (denying `/a`),
/// and the guard that removes it.
fn local(tag: &str) -> (Local, TempDir) {
    let d = TempDir::new(&format!("fleet-apply-{tag}"));
    let l = Local::open(&d).unwrap();
    let (rec, bytes) = artifact("/a", 1);
    l.write_pending(&rec, &bytes).unwrap();
    l.promote().unwrap();
    (l, d)
}

fn refused(m: &str) -> ControlError {
    ControlError {
        kind: ControlErrorKind::Refused,
        message: m.into(),
    }
}

#[derive(Default)]
struct Fails {
    prepare: bool,
    switch: bool,
    commit: bool,
    abort: bool,
    incomplete: bool,
}

struct FakeAgent(Log, Rc<Fails>);

impl HttpPlane for FakeAgent {
    fn prepare(&mut self, _: &[u8], _: Option<&str>) -> Result<Prepared, ControlError> {
        self.0.borrow_mut().push("prepare");
        if self.1.prepare {
            return Err(refused("not prepared (generation 4 keeps serving): bad"));
        }
        Ok(Prepared {
            id: "p".into(),
            generation: 5,
            artifact_sha256: String::new(),
            rules: 1,
            carried: Carry::default(),
            prepare_ms: 0,
            warnings: Vec::new(),
            stale_proxies: Vec::new(),
        })
    }

    fn commit(&mut self, _: &str) -> Result<Committed, ControlError> {
        self.0.borrow_mut().push("commit");
        if self.1.commit {
            return Err(refused("prepare p expired"));
        }
        Ok(Committed {
            generation: 5,
            artifact_sha256: String::new(),
            replaced: 4,
            carried: None,
        })
    }

    fn abort(&mut self, _: &str) -> Result<(), ControlError> {
        self.0.borrow_mut().push("abort");
        if self.1.abort {
            return Err(refused("no pending prepare p"));
        }
        Ok(())
    }
}

struct FakeXdp(Log, Rc<Fails>);

impl PacketPlane for FakeXdp {
    type Report = ();
    type Error = String;

    fn switch(&mut self, _: &[u8], _: Option<&str>) -> Result<Switched<()>, String> {
        self.0.borrow_mut().push("switch");
        if self.1.switch {
            return Err("the packet plane on eth9: no interface `eth9`".into());
        }
        let incomplete = if self.1.incomplete {
            vec!["installing the artifact: Is a directory".to_string()]
        } else {
            Vec::new()
        };
        Ok(Switched {
            report: (),
            incomplete,
        })
    }
}

/// Applies generation 2 (denying `/b`) over `last-good` generation 1,
/// with the packet plane if `xdp`; the calls made, the outcome, and what
/// `last-good` and `pending` hold then (their generations).
fn run(
    tag: &str,
    fails: Fails,
    xdp: bool,
) -> (
    Vec<&'static str>,
    Result<Outcome, FleetError>,
    Option<i64>,
    Option<i64>,
) {
    let (l, _dir) = local(tag);
    let (rec, bytes) = artifact("/b", 2);
    let (log, fails) = (Log::default(), Rc::new(fails));
    let agent = FakeAgent(Rc::clone(&log), Rc::clone(&fails));
    let packet = xdp.then(|| FakeXdp(Rc::clone(&log), Rc::clone(&fails)));
    let out = both(&l, &rec, &bytes, None, agent, packet);
    let generation = |name| l.read(name).map(|(r, _)| r.generation);
    let calls = log.borrow().clone();
    (calls, out, generation("last-good"), generation("pending"))
}

#[test]
fn both_planes_switched_make_pending_the_last_good() {
    let (calls, out, good, pending) = run("ok", Fails::default(), true);
    assert_eq!(calls, ["prepare", "switch", "commit"]);
    assert_eq!(out.unwrap(), Outcome::Applied);
    assert_eq!((good, pending), (Some(2), None));
}

#[test]
fn a_failed_prepare_drops_pending_and_touches_no_plane() {
    let fails = Fails {
        prepare: true,
        ..Fails::default()
    };
    let (calls, out, good, pending) = run("prepare", fails, true);
    assert_eq!(calls, ["prepare"]);
    let e = out.unwrap_err();
    assert!(e.message.starts_with("the agent: not prepared"), "{e}");
    assert_eq!((good, pending), (Some(1), None));
}

#[test]
fn a_failed_switch_aborts_the_prepare_and_drops_pending() {
    let fails = Fails {
        switch: true,
        ..Fails::default()
    };
    let (calls, out, good, pending) = run("switch", fails, true);
    assert_eq!(calls, ["prepare", "switch", "abort"]);
    assert_eq!(
        out.unwrap_err().message,
        "the packet plane on eth9: no interface `eth9` (both planes keep their generation)"
    );
    assert_eq!((good, pending), (Some(1), None));
}

#[test]
fn a_failed_abort_after_a_failed_switch_is_reported() {
    let fails = Fails {
        switch: true,
        abort: true,
        ..Fails::default()
    };
    let (calls, out, good, pending) = run("abort", fails, true);
    assert_eq!(calls, ["prepare", "switch", "abort"]);
    let e = out.unwrap_err();
    assert!(
        e.message
            .contains("could not be aborted (no pending prepare p)"),
        "{e}"
    );
    assert_eq!((good, pending), (Some(1), None));
}

#[test]
fn a_failed_commit_after_the_switch_keeps_pending_for_a_restart_to_finish() {
    let fails = Fails {
        commit: true,
        ..Fails::default()
    };
    let (calls, out, good, pending) = run("commit", fails, true);
    // No abort: the agent dropped the prepare it could not commit.
    assert_eq!(calls, ["prepare", "switch", "commit"]);
    let e = out.unwrap_err();
    assert!(
        e.message.contains("did not commit (prepare p expired)")
            && e.message
                .contains("the packet plane runs the new generation"),
        "{e}"
    );
    // The packet plane runs generation 2: a restart promotes `pending`.
    assert_eq!((good, pending), (Some(1), Some(2)));
}

#[test]
fn a_failed_commit_without_a_packet_plane_drops_pending() {
    let fails = Fails {
        commit: true,
        ..Fails::default()
    };
    let (calls, out, good, pending) = run("commit-alone", fails, false);
    assert_eq!(calls, ["prepare", "commit"]);
    assert_eq!(
        out.unwrap_err().message,
        "the agent did not commit (prepare p expired)"
    );
    assert_eq!((good, pending), (Some(1), None));
}

#[test]
fn steps_that_failed_after_the_switch_are_an_incomplete_apply() {
    let fails = Fails {
        incomplete: true,
        ..Fails::default()
    };
    let (calls, out, good, pending) = run("incomplete", fails, true);
    assert_eq!(calls, ["prepare", "switch", "commit"]);
    let Outcome::Incomplete(why) = out.unwrap() else {
        panic!("complete")
    };
    assert!(
        why.contains("installing the artifact: Is a directory") && why.contains("next try"),
        "{why}"
    );
    // Both planes run generation 2: it is the last good one.
    assert_eq!((good, pending), (Some(2), None));
}
