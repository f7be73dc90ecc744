//! Concurrent applies, a kill at every step, tampered metadata, a
//! recreated interface, a failed install after the switch.

use super::*;
use std::process::Stdio;

#[test]
fn concurrent_applies_on_one_interface_take_turns() {
    let Some(lab) = lab(1) else { return };
    let (v1, v2) = (lab.compile("v1", V1), lab.compile("v2", V2));
    let i = lab.iface().to_string();
    lab.apply_ok(&v1);
    lab.ban(&i, BANNED);
    let rounds = 4;
    for _ in 0..rounds {
        let children: Vec<_> = [&v1, &v2]
            .into_iter()
            .map(|a| {
                lab.cmd(&lab.apply_args(a, &i))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // A status while they run sees the state between them: enforcing,
        // nothing left over, the ban in place.
        let st = lab.enforcing(&i);
        assert_eq!(st["problems"], serde_json::json!([]), "{st}");
        assert_eq!(st["buckets_banned"], 1, "{st}");
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "a concurrent apply: {}",
                text(&o.stderr)
            );
            assert!(
                !text(&o.stderr).contains("not carried"),
                "{}",
                text(&o.stderr)
            );
        }
        let st = lab.enforcing(&i);
        assert_eq!(st["buckets_banned"], 1, "the ban carries: {st}");
        let g = st["attached"]["generation"].as_u64().unwrap();
        assert_eq!(lab.gens(&i), vec![format!("gen-{g}")]);
        assert_eq!(
            lab.kernel_prog(&i),
            st["link"]["prog_id"].as_u64(),
            "status names the program the kernel runs"
        );
    }
    let st = lab.enforcing(&i);
    assert_eq!(st["attached"]["generation"], 1 + 2 * rounds);
}

/// The steps an apply can be killed at, in order; `commit` is the first
/// step after the switch.
const APPLY_STEPS: [&str; 8] = [
    "apply-locked",
    "apply-pinning",
    "apply-pinned",
    "apply-staged",
    "apply-switched",
    "apply-installed",
    "apply-recorded",
    "apply-retired",
];
const COMMIT: usize = 4;
const DETACH_STEPS: [&str; 3] = ["detach-locked", "detach-unlinked", "detach-unpinned"];

/// Runs `args` with the fault hook at `step`: the process must die of
/// SIGKILL there.
fn killed_at(lab: &Lab, args: &[&str], step: &str) {
    use std::os::unix::process::ExitStatusExt;
    let o = lab.cmd(args).env("RCTL_FAULT", step).output().unwrap();
    assert_eq!(
        o.status.signal(),
        Some(9),
        "{args:?} with RCTL_FAULT={step}: {:?} {}",
        o.status,
        text(&o.stderr)
    );
}

/// What status says matches what the kernel runs (per iproute2):
/// enforcing `want_hash`'s artifact, or nothing. Returns the status.
fn truthful(lab: &Lab, iface: &str, want_hash: Option<&str>) -> Option<serde_json::Value> {
    let kernel = lab.kernel_prog(iface);
    let (o, v) = lab.status(iface);
    match want_hash {
        Some(h) => {
            let state = graded(&o);
            assert!(
                state == "OK" || state == "WARNING",
                "{} {}",
                text(&o.stdout),
                text(&o.stderr)
            );
            let v = v.unwrap();
            assert_eq!(v["enforcing"], true, "{v}");
            assert_eq!(v["attached"]["artifact_sha256"], h, "{v}");
            assert_eq!(v["link"]["prog_id"].as_u64(), kernel, "{v}");
            Some(v)
        }
        None => {
            assert_eq!(kernel, None, "the kernel runs nothing");
            assert!(!o.status.success(), "status must not say enforcing");
            assert!(matches!(graded(&o).as_str(), "" | "CRITICAL"), "{v:?}");
            match &v {
                Some(v) => assert_eq!(v["enforcing"], false, "{v}"),
                None => assert!(text(&o.stderr).contains("nothing attached")),
            }
            v
        }
    }
}

fn hash(a: &Path) -> String {
    let b = std::fs::read(a).unwrap();
    rctl_compiler::artifact::hex(&rctl_compiler::artifact::content_hash(&b).unwrap())
}

/// Nothing of `iface` is left in the state directories.
fn nothing_left(lab: &Lab, iface: &str) {
    let left: Vec<String> = lab
        .leftovers()
        .into_iter()
        .filter(|p| p.contains(iface))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn a_kill_at_every_step_leaves_a_state_the_next_command_repairs() {
    let Some(lab) = lab(1) else { return };
    let (v1, v2) = (lab.compile("v1", V1), lab.compile("v2", V2));
    let (h1, h2) = (hash(&v1), hash(&v2));
    let i = lab.iface().to_string();
    let detach = ["detach", "--iface", i.as_str()];
    // A first attach killed at each step: enforcing from the commit point
    // on, nothing before; the next apply or detach repairs.
    for (n, step) in APPLY_STEPS.iter().enumerate() {
        killed_at(&lab, &lab.apply_args(&v1, &i), step);
        truthful(&lab, &i, (n >= COMMIT).then_some(h1.as_str()));
        if n % 2 == 0 {
            lab.apply_ok(&v1);
            truthful(&lab, &i, Some(&h1));
        }
        let o = lab.rctl(&detach);
        assert!(
            o.status.success() || text(&o.stderr).contains("nothing attached"),
            "after {step}: {}",
            text(&o.stderr)
        );
        truthful(&lab, &i, None);
        nothing_left(&lab, &i);
    }
    // A re-apply killed at each step: the old generation runs before the
    // commit point, the new one from it on, and the ban holds either way;
    // the next apply finishes the job and carries the ban.
    lab.apply_ok(&v1);
    lab.ban(&i, BANNED);
    let mut running = h1.clone();
    for (n, step) in APPLY_STEPS.iter().enumerate() {
        let (next, h) = if n % 2 == 0 { (&v2, &h2) } else { (&v1, &h1) };
        killed_at(&lab, &lab.apply_args(next, &i), step);
        let want = if n >= COMMIT { h } else { &running };
        let st = truthful(&lab, &i, Some(want)).unwrap();
        assert_eq!(st["buckets_banned"], 1, "after a kill at {step}: {st}");
        let out = lab.apply_ok(next);
        assert!(out.contains("replaced on"), "{out}");
        running = h.clone();
        let st = truthful(&lab, &i, Some(h)).unwrap();
        assert_eq!(st["buckets_banned"], 1, "after a kill at {step}: {st}");
        assert_eq!(st["metadata"], "recorded", "{st}");
        assert_eq!(st["problems"], serde_json::json!([]), "{st}");
        let g = st["attached"]["generation"].as_u64().unwrap();
        assert_eq!(lab.gens(&i), vec![format!("gen-{g}")], "after {step}");
        assert_eq!(
            std::fs::read(lab.state_dir().join(&i).join("active.rctlc")).unwrap(),
            std::fs::read(next).unwrap()
        );
        let meta = std::fs::read(lab.run_dir().join(format!("{i}.json"))).unwrap();
        let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
        assert_eq!(meta["generation"], g, "the recorded metadata is current");
    }
    // A detach killed at each step: enforcing until the link is unpinned,
    // then not; the next detach removes everything.
    for step in DETACH_STEPS {
        killed_at(&lab, &detach, step);
        if step == "detach-locked" {
            truthful(&lab, &i, Some(&running));
        } else {
            truthful(&lab, &i, None);
        }
        let o = lab.rctl(&detach);
        assert!(o.status.success(), "after {step}: {}", text(&o.stderr));
        truthful(&lab, &i, None);
        nothing_left(&lab, &i);
        lab.apply_ok(&v1);
        running = h1.clone();
    }
}

/// A change to the metadata file's text.
type Tamper = fn(&str) -> String;

#[test]
fn tampered_metadata_is_rebuilt_from_the_pins() {
    let Some(lab) = lab(1) else { return };
    let (v1, v2) = (lab.compile("v1", V1), lab.compile("v2", V2));
    let i = lab.iface().to_string();
    let meta = lab.run_dir().join(format!("{i}.json"));
    fn json(s: &str, f: fn(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
        f(&mut v);
        v.to_string()
    }
    let tamperings: [(&str, Tamper); 7] = [
        ("truncated", |s| s[..s.len() / 2].to_string()),
        ("empty", |_| String::new()),
        ("not an object", |_| "[1, 2]".into()),
        ("a short hash", |s| {
            json(s, |v| v["artifact_sha256"] = "ab12".into())
        }),
        ("generation u64::MAX", |s| {
            json(s, |v| v["generation"] = u64::MAX.into())
        }),
        ("a wrong mode", |s| json(s, |v| v["mode"] = "turbo".into())),
        ("limiters that are no rules", |s| {
            json(s, |v| {
                v["rules"] = serde_json::json!(["x"]);
                v["limiters"] = serde_json::json!(["x", "y"]);
            })
        }),
    ];
    lab.apply_ok(&v1);
    lab.ban(&i, BANNED);
    let mut running = (&v1, vec!["flood", "blocked"]);
    for (n, (what, tamper)) in tamperings.iter().enumerate() {
        let good = std::fs::read_to_string(&meta).unwrap();
        let g = serde_json::from_str::<serde_json::Value>(&good).unwrap()["generation"].clone();
        let bad = tamper(&good);
        std::fs::write(&meta, &bad).unwrap();
        // status: the truth, rebuilt, with a warning; the file untouched.
        // A rebuilt metadata file is a warning (exit 1).
        let (o, v) = lab.status(&i);
        assert_eq!(graded(&o), "WARNING", "{what}: {}", text(&o.stderr));
        let v = v.unwrap();
        assert_eq!(v["metadata"], "rebuilt", "{what}: {v}");
        assert_eq!(v["attached"]["generation"], g, "{what}: {v}");
        assert_eq!(v["attached"]["artifact_sha256"], hash(running.0), "{what}");
        assert_eq!(
            v["attached"]["rules"],
            serde_json::json!(running.1),
            "{what}"
        );
        assert_eq!(v["buckets_banned"], 1, "{what}: {v}");
        assert!(text(&o.stderr).contains("warning"), "{what}");
        let o = lab.rctl(&["status", "--iface", &i]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", text(&o.stderr));
        assert_eq!(std::fs::read_to_string(&meta).unwrap(), bad);
        // apply: carries the ban, records the metadata afresh.
        let next = if n % 2 == 0 {
            (&v2, vec!["flood", "blocked", "later"])
        } else {
            (&v1, vec!["flood", "blocked"])
        };
        let o = lab.apply_on(next.0, &i);
        assert!(o.status.success(), "{what}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("warning"), "{what}");
        let st = lab.enforcing(&i);
        assert_eq!(st["metadata"], "recorded", "{what}");
        assert_eq!(st["buckets_banned"], 1, "{what}: the ban carries: {st}");
        running = next;
    }
    // The live generation's pins removed: the kernel still runs it, status
    // says so (and that it cannot read it), and an apply replaces it.
    let g = lab.enforcing(&i)["attached"]["generation"]
        .as_u64()
        .unwrap();
    let live = lab.pins(&i).join(format!("gen-{g}"));
    for e in std::fs::read_dir(&live).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    std::fs::remove_dir(&live).unwrap();
    let st = lab.enforcing(&i);
    assert!(
        st["problems"]
            .to_string()
            .contains("none of the pinned generations"),
        "{st}"
    );
    assert_eq!(st["link"]["prog_id"].as_u64(), lab.kernel_prog(&i));
    let o = lab.apply_on(&v1, &i);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("replaced on"));
    let st = lab.enforcing(&i);
    assert_eq!(st["problems"], serde_json::json!([]), "{st}");
    // detach works on tampered metadata too, and leaves nothing.
    std::fs::write(&meta, "{").unwrap();
    let o = lab.rctl(&["detach", "--iface", &i]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(lab.kernel_prog(&i), None);
    nothing_left(&lab, &i);
}

#[test]
fn a_recreated_interface_is_reported_and_attached_afresh() {
    let Some(lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    let i = lab.iface().to_string();
    lab.apply_ok(&v1);
    lab.ban(&i, BANNED);
    lab.ns.ip(&["link", "del", &i]);
    let (o, v) = lab.status(&i);
    assert_eq!(graded(&o), "CRITICAL", "status must not say enforcing");
    let v = v.expect("status JSON");
    assert_eq!(v["enforcing"], false, "{v}");
    lab.add_iface(&i);
    let (o, v) = lab.status(&i);
    assert_eq!(graded(&o), "CRITICAL");
    let v = v.unwrap();
    assert_eq!(v["enforcing"], false, "{v}");
    let why = v["problems"].to_string();
    assert!(why.contains("deleted") && why.contains("rctl apply"), "{v}");
    assert!(text(&lab.rctl(&["status", "--iface", &i]).stdout).contains("NOT ENFORCING"));
    // An apply killed once it has unpinned the dead link: still not
    // enforcing, and the next apply attaches afresh, carrying the ban.
    killed_at(&lab, &lab.apply_args(&v1, &i), "apply-unlinked");
    truthful(&lab, &i, None);
    let out = lab.apply_ok(&v1);
    assert!(out.contains("attached to"), "{out}");
    let st = lab.enforcing(&i);
    assert_eq!(st["link"]["prog_id"].as_u64(), lab.kernel_prog(&i));
    assert_eq!(st["buckets_banned"], 1, "{st}");
    assert_eq!(st["problems"], serde_json::json!([]), "{st}");
    assert_eq!(lab.gens(&i).len(), 1);
}

#[test]
fn an_install_failure_after_the_switch_says_what_is_live() {
    let Some(lab) = lab(1) else { return };
    let (v1, v2) = (lab.compile("v1", V1), lab.compile("v2", V2));
    let i = lab.iface().to_string();
    lab.apply_ok(&v1);
    // The installed artifact's place is taken by a directory (at the
    // shared path of old and at the interface's own).
    for p in [
        lab.state_dir().join("active.rctlc"),
        lab.state_dir().join(&i).join("active.rctlc"),
    ] {
        let _ = std::fs::remove_file(&p);
        std::fs::create_dir_all(p.join("in-the-way")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let o = lab.apply_on(&v2, &i);
    let e = text(&o.stderr);
    assert!(!o.status.success());
    assert!(!e.contains("not applied"), "{e}");
    assert!(
        e.contains("generation 2 is live") && e.contains("active.rctlc"),
        "{e}"
    );
    let st = lab.enforcing(&i);
    assert_eq!(st["attached"]["artifact_sha256"], hash(&v2));
    assert_eq!(st["attached"]["generation"], 2);
    // Cleared, the next apply installs it.
    std::fs::remove_dir_all(lab.state_dir().join(&i).join("active.rctlc")).unwrap();
    lab.apply_ok(&v2);
    assert_eq!(
        std::fs::read(lab.state_dir().join(&i).join("active.rctlc")).unwrap(),
        std::fs::read(&v2).unwrap()
    );
}
