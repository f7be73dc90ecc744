//! Permissions, temporary files, interface names, one artifact per
//! interface, failed applies, privileges.

use super::*;

#[test]
fn state_is_private_whatever_the_umask() {
    let Some(lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .args([
            "ip",
            "netns",
            "exec",
            lab.ns.name(),
            env!("CARGO_BIN_EXE_rctl"),
        ])
        .args(lab.apply_args(&v1, lab.iface()))
        .args(lab.host_args());
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let i = lab.iface();
    let dirs = [
        lab.run_dir(),
        lab.state_dir(),
        lab.state_dir().join(i),
        lab.bpffs.join("rctl"),
        lab.pins(i),
        lab.pins(i).join("gen-1"),
    ];
    for d in &dirs {
        assert_eq!(mode_of(d), 0o700, "{}", d.display());
    }
    let files = [
        lab.run_dir().join(format!("{i}.json")),
        lab.state_dir().join(i).join("active.rctlc"),
    ];
    for f in &files {
        assert_eq!(mode_of(f), 0o600, "{}", f.display());
    }
    // Whatever else rctl keeps there is private too.
    for p in lab.leftovers() {
        let m = mode_of(Path::new(&p));
        assert_eq!(m & 0o077, 0, "{p}: mode {m:o}");
    }
}

#[test]
fn loose_state_directories_are_refused_with_the_fix() {
    let Some(lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    lab.apply_ok(&v1);
    let i = lab.iface().to_string();
    let prog = lab.kernel_prog(&i).expect("attached");
    let verbs: Vec<Vec<String>> = vec![
        lab.apply_args(&v1, &i)
            .into_iter()
            .map(String::from)
            .collect(),
        vec!["status".into(), "--iface".into(), i.clone()],
        vec!["detach".into(), "--iface".into(), i.clone()],
    ];
    let refused = |what: &Path, fix: &str| {
        for v in &verbs {
            let args: Vec<&str> = v.iter().map(String::as_str).collect();
            let o = lab.rctl(&args);
            let e = text(&o.stderr);
            assert!(
                !o.status.success(),
                "{args:?} in a loose {}",
                what.display()
            );
            assert!(
                e.contains(&what.display().to_string()) && e.contains(fix),
                "{args:?}: {e}"
            );
        }
        // Nothing changed: the same program runs.
        assert_eq!(lab.kernel_prog(&i), Some(prog));
    };
    let set =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    for (d, m) in [
        (lab.run_dir(), 0o777),
        (lab.state_dir(), 0o770),
        (lab.bpffs.join("rctl"), 0o757),
        (lab.state_dir().join(&i), 0o722),
    ] {
        set(&d, m);
        refused(&d, "chmod");
        set(&d, 0o700);
    }
    // Owned by someone else.
    std::os::unix::fs::chown(lab.run_dir(), Some(65534), None).unwrap();
    refused(&lab.run_dir(), "chown");
    std::os::unix::fs::chown(lab.run_dir(), Some(0), None).unwrap();
    // A parent others may write to (without the sticky bit /tmp has).
    set(&lab.dir, 0o777);
    refused(&lab.dir, "chmod");
    set(&lab.dir, 0o755);
    // Fixed: everything works again.
    lab.enforcing(&i);
    let o = lab.rctl(&["detach", "--iface", &i]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn planted_symlinks_at_temporary_names_are_not_followed() {
    let Some(lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    let i = lab.iface();
    // rctl runs as pid 1 of a new pid namespace, so a name made from its
    // pid is known in advance; every temporary name rctl ever used is
    // planted, pointing at root-only files.
    let victim = lab.dir.join("victim");
    std::fs::write(&victim, "root only\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    for d in [lab.run_dir(), lab.state_dir(), lab.state_dir().join(i)] {
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    for pid in 1..4 {
        for name in [
            lab.run_dir().join(format!(".{i}.json.tmp.{pid}")),
            lab.state_dir().join(format!(".active.rctlc.tmp.{pid}")),
            lab.state_dir()
                .join(i)
                .join(format!(".active.rctlc.tmp.{pid}")),
        ] {
            std::os::unix::fs::symlink(&victim, name).unwrap();
        }
    }
    let o = Command::new("unshare")
        .args(["--pid", "--fork", "ip", "netns", "exec", lab.ns.name()])
        .arg(env!("CARGO_BIN_EXE_rctl"))
        .args(lab.apply_args(&v1, i))
        .args(lab.host_args())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&victim).unwrap(), b"root only\n");
    lab.enforcing(i);
}

#[test]
fn interface_names_are_checked_before_they_become_paths() {
    let Some(lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    // What `detach --iface ../../../../tmp/x` used to delete: the
    // metadata beside it and the files in the directories below it.
    let victim = lab.dir.join("victim");
    std::fs::create_dir_all(victim.join("x/sub")).unwrap();
    std::fs::write(victim.join("x/sub/file"), "keep").unwrap();
    let meta = serde_json::json!({
        "iface": "x", "mode": "skb", "generation": 1, "artifact_sha256": "00",
        "site": null, "rules": [], "prefixes": [0, 0], "terms": 0, "applied_unix": 0
    });
    std::fs::write(victim.join("x.json"), meta.to_string()).unwrap();
    let up = "../".repeat(lab.run_dir().components().count() + 2);
    let traversal = format!("{up}{}", victim.join("x").display());
    let long = "x".repeat(16);
    let names = [
        traversal.as_str(),
        "",
        ".",
        "..",
        "a/b",
        "a b",
        "a:1",
        "a\tb",
        long.as_str(),
    ];
    for name in names {
        let v1s = v1.to_str().unwrap();
        let verbs: [Vec<&str>; 4] = [
            vec!["apply", v1s, "--iface", name, "--mode", "skb"],
            vec!["status", "--iface", name],
            vec!["log", "--iface", name, "--seconds", "0"],
            vec!["detach", "--iface", name],
        ];
        for args in verbs {
            let o = lab.rctl(&args);
            let e = text(&o.stderr);
            assert!(!o.status.success(), "{args:?}");
            assert!(e.contains("invalid interface name"), "{args:?}: {e}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(victim.join("x/sub/file")).unwrap(),
        "keep"
    );
    assert!(victim.join("x.json").exists());
}

#[test]
fn each_interface_has_its_own_installed_artifact() {
    let Some(lab) = lab(2) else { return };
    let (v1, v2) = (lab.compile("v1", V1), lab.compile("v2", V2));
    let (a, b) = (lab.ifaces[0].clone(), lab.ifaces[1].clone());
    for (iface, art) in [(&a, &v1), (&b, &v2)] {
        let o = lab.apply_on(art, iface);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let path = lab.state_dir().join(iface).join("active.rctlc");
        assert!(text(&o.stdout).contains(&path.display().to_string()));
    }
    for (iface, art) in [(&a, &v1), (&b, &v2)] {
        let path = lab.state_dir().join(iface).join("active.rctlc");
        assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(art).unwrap());
        let st = lab.enforcing(iface);
        assert_eq!(st["artifact"], path.display().to_string());
    }
    // Detaching one leaves the other's.
    let o = lab.rctl(&["detach", "--iface", &a]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!lab.state_dir().join(&a).exists());
    assert_eq!(
        std::fs::read(lab.state_dir().join(&b).join("active.rctlc")).unwrap(),
        std::fs::read(&v2).unwrap()
    );
}

#[test]
fn kernel_errors_keep_their_errno_and_a_failed_apply_leaves_nothing() {
    let Some(lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    let i = lab.iface().to_string();
    lab.apply_ok(&v1);
    // A second rctl with state of its own finds the interface taken.
    let other = lab.dir.join("other");
    let bpffs = Mount::bpffs(&other.join("bpffs"));
    let o = lab
        .ns
        .command(env!("CARGO_BIN_EXE_rctl"))
        .args(lab.apply_args(&v1, &i))
        .args(["--bpffs", bpffs.to_str().unwrap()])
        .args(["--run-dir", other.join("run").to_str().unwrap()])
        .args(["--state-dir", other.join("state").to_str().unwrap()])
        .output()
        .unwrap();
    let e = text(&o.stderr);
    // (A new bpffs holds the kernel's `maps.debug` and `progs.debug`.)
    let in_bpffs: Vec<_> = std::fs::read_dir(&bpffs)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".debug"))
        .collect();
    drop(bpffs);
    assert!(!o.status.success());
    assert!(e.contains("EBUSY"), "{e}");
    assert!(in_bpffs.is_empty(), "{in_bpffs:?}");
    let mut left: Vec<String> = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["bpffs"], "a failed apply leaves nothing behind");
    lab.enforcing(&i);
}

#[test]
fn unprivileged_status_says_it_needs_root() {
    let Some(lab) = lab(1) else { return };
    let v1 = lab.compile("v1", V1);
    lab.apply_ok(&v1);
    let bin = lab.dir.join("rctl");
    std::fs::copy(env!("CARGO_BIN_EXE_rctl"), &bin).unwrap();
    std::fs::set_permissions(&lab.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for args in [
        vec!["status"],
        vec!["status", "--iface", lab.iface()],
        vec!["log", "--iface", lab.iface(), "--seconds", "0"],
        vec!["detach", "--iface", lab.iface()],
    ] {
        let o = as_nobody(&bin)
            .args(&args)
            .args(lab.host_args())
            .output()
            .expect("run setpriv");
        let e = text(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {}", text(&o.stdout));
        assert!(e.contains("needs root"), "{args:?}: {e}");
    }
}
