//! When a test may skip: never under CI. Elsewhere a test that needs what
//! this machine lacks (root, a program, the built XDP object) returns
//! early and says so where the test output shows it:
//! `SKIPPED <test>: needs <what>`. Under CI the same test fails instead,
//! so a missing program is never mistaken for a pass.

use std::process::{Command, Stdio};

/// Whether the tests run under CI: the `CI` variable is set to anything
/// but nothing, `0` or `false` (CI services set `CI=true`).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Whether this process runs as root (effective user id 0).
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `program` can be run (`program -v` starts); if not, panics
/// under CI and otherwise says the test is skipped.
pub fn require(program: &str) -> bool {
    let found = Command::new(program)
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    skip_unless(
        found,
        &format!("{program} is installed (apt-get install {program})"),
    )
}

/// `ok`, after saying the test is skipped if not; under CI a test must
/// never be skipped: panics instead.
pub fn skip_unless(ok: bool, needs: &str) -> bool {
    if !ok {
        assert!(!in_ci(), "under CI: needs {needs}");
        skipped(needs);
    }
    ok
}

/// Says that the running test skips (all or part of) its checks, where
/// the test output shows it: libtest has no runtime skip and reports a
/// test that returned early as `ok`, and it hides what a passing test
/// prints with `eprintln!`, so this writes to the process's stderr
/// directly, as `SKIPPED <test>: needs <needs>`. Callers check [`in_ci`]
/// first (see [`skip_unless`]): under CI nothing may be skipped.
pub fn skipped(needs: &str) {
    use std::io::Write as _;
    let name = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {name}: needs {needs}");
}
