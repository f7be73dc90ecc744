//! Labs for the tests that need root: network namespaces, veth pairs,
//! bridges and mounts. Each is a guard that undoes what it
//! made when it is dropped, when the test fails as when it passes:
//!
//! - [`Inside`]: the calling thread in another network namespace, back in
//!   the one it was in on drop (as aya's integration tests'
//!   `NetNsGuard`). [`Inside::private`] makes an anonymous namespace for
//!   it: its own loopback with any addresses a test wants (the shipped
//!   rules' real updater and scraper addresses rather than 127.0.0.x,
//!   which they drop as bogons) and ports no other test or program on the
//!   host can take. [`NetNs::enter`] enters a named one.
//! - [`NetNs`]: a named namespace (`ip netns add`), where commands run
//!   with `ip netns exec` and links can be moved; deleted on drop, with
//!   the interfaces in it.
//! - [`Link`]: a veth pair (each end here or in a [`NetNs`]) or a
//!   bridge; deleted on drop.
//! - [`Mount`]: a private bpffs for a test's pins, or a small tmpfs;
//!   unmounted on drop.
//!
//! A namespace moves one thread (`unshare(2)`, `setns(2)`): the processes
//! and threads it starts afterwards inherit it, and an anonymous
//! namespace goes away with the last of them. Guards that hold such
//! processes (a [`Proc`](crate::proc::Proc)) must be dropped before the
//! [`Inside`] that put them there: declared after it, or as struct fields
//! before it.

use crate::proc::{must, sh};
use crate::skip::{root, skip_unless};
use std::ffi::OsStr;
use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::MutexGuard;

/// Whether this process may make namespaces, links and mounts (root); if
/// not, panics under CI and otherwise says the test is skipped.
pub fn available() -> bool {
    skip_unless(root(), "root (a private network namespace)")
}

/// The calling thread inside a network namespace until dropped; then it
/// is back in the namespace it was in before.
pub struct Inside {
    back: File,
    /// `setns` moves one thread: the guard stays on the thread that made
    /// it (not `Send`, as a `MutexGuard`; sharing it is harmless).
    _thread: PhantomData<MutexGuard<'static, ()>>,
}

impl Inside {
    /// Moves the calling thread into a new, anonymous network namespace
    /// whose `lo` is up and holds `addrs` (IPv4 or IPv6, without a prefix
    /// length) besides 127.0.0.1 and ::1.
    pub fn private(addrs: &[&str]) -> Inside {
        let inside = Inside::from("unshare(CLONE_NEWNET)", || {
            // SAFETY: unshare(2) takes a flag word and touches no memory;
            // it changes only this thread's namespace.
            unsafe { libc::unshare(libc::CLONE_NEWNET) }
        });
        must("ip", &["link", "set", "lo", "up"]);
        for a in addrs {
            let len = if a.contains(':') { "128" } else { "32" };
            must("ip", &["addr", "add", &format!("{a}/{len}"), "dev", "lo"]);
        }
        inside
    }

    /// The calling thread in the namespace `move_thread` (`what`: a
    /// system call returning 0 or -1) moves it to.
    fn from(what: &str, move_thread: impl FnOnce() -> i32) -> Inside {
        let back = File::open("/proc/thread-self/ns/net").expect("this thread's namespace");
        let rc = move_thread();
        assert_eq!(rc, 0, "{what}: {}", std::io::Error::last_os_error());
        Inside {
            back,
            _thread: PhantomData,
        }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        // SAFETY: `back` is an open namespace file; setns(2) moves only
        // this thread and touches no memory.
        let rc = unsafe { libc::setns(self.back.as_raw_fd(), libc::CLONE_NEWNET) };
        let e = std::io::Error::last_os_error();
        assert!(rc == 0 || std::thread::panicking(), "setns back: {e}");
    }
}

/// `ip [-n NS] ARGS`, asserting that it succeeds.
fn ip(ns: Option<&str>, args: &[&str]) -> Output {
    let mut all = ns.map_or(vec![], |ns| vec!["-n", ns]);
    all.extend_from_slice(args);
    must("ip", &all)
}

/// A named network namespace (`ip netns add NAME`) with its `lo` up;
/// deleted on drop, with the interfaces in it.
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Makes namespace `name`.
    pub fn new(name: &str) -> NetNs {
        must("ip", &["netns", "add", name]);
        let ns = NetNs { name: name.into() };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `program` run inside (`ip netns exec NAME PROGRAM`); arguments go
    /// after it.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `program ARGS` inside to the end: its output.
    pub fn exec(&self, program: &str, args: &[&str]) -> Output {
        let mut all = vec!["netns", "exec", &self.name, program];
        all.extend_from_slice(args);
        sh("ip", &all)
    }

    /// [`NetNs::exec`], asserting that it succeeds.
    pub fn exec_ok(&self, program: &str, args: &[&str]) -> Output {
        let mut all = vec!["netns", "exec", &self.name, program];
        all.extend_from_slice(args);
        must("ip", &all)
    }

    /// `ip -n NAME ARGS`, asserting that it succeeds.
    pub fn ip(&self, args: &[&str]) -> Output {
        ip(Some(&self.name), args)
    }

    /// Moves the calling thread inside until the guard is dropped.
    pub fn enter(&self) -> Inside {
        let path = format!("/run/netns/{}", self.name);
        let ns = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: `ns` is an open namespace file; setns(2) moves only this
        // thread and touches no memory.
        Inside::from(&path, || unsafe {
            libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET)
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = sh("ip", &["netns", "del", &self.name]);
    }
}

/// An interface made for a test (`ip link add`): a veth pair, or a
/// bridge; deleted on drop (a veth pair goes with either end).
pub struct Link {
    name: String,
    ns: Option<String>,
}

impl Link {
    /// A veth pair `near` – `far`, each end in this thread's namespace
    /// (`None`) or in a [`NetNs`]; both ends up, no addresses.
    pub fn veth(near: &str, near_ns: Option<&NetNs>, far: &str, far_ns: Option<&NetNs>) -> Link {
        let mut args = vec!["link", "add", near];
        args.extend(near_ns.iter().flat_map(|ns| ["netns", ns.name()]));
        args.extend(["type", "veth", "peer", "name", far]);
        args.extend(far_ns.iter().flat_map(|ns| ["netns", ns.name()]));
        ip(None, &args);
        let link = Link {
            name: near.into(),
            ns: near_ns.map(|n| n.name.clone()),
        };
        ip(link.ns.as_deref(), &["link", "set", near, "up"]);
        ip(far_ns.map(NetNs::name), &["link", "set", far, "up"]);
        link
    }

    /// A bridge in this thread's namespace (a driver without native XDP),
    /// down.
    pub fn bridge(name: &str) -> Link {
        ip(None, &["link", "add", name, "type", "bridge"]);
        Link {
            name: name.into(),
            ns: None,
        }
    }

    /// Its name (a veth pair's: the near end's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes it now, asserting that it went.
    pub fn delete(mut self) {
        ip(self.ns.as_deref(), &["link", "del", &self.name]);
        // Nothing left for `Drop` to delete.
        self.name.clear();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if !self.name.is_empty() {
            let mut all = self.ns.as_deref().map_or(vec![], |ns| vec!["-n", ns]);
            all.extend(["link", "del", &self.name]);
            let _ = sh("ip", &all);
        }
    }
}

/// A filesystem mounted for one test, at a directory made for it if
/// missing; unmounted on drop. Derefs to the mount point.
pub struct Mount {
    at: PathBuf,
}

impl Mount {
    /// A private bpffs (pins of the test's own); panics if it cannot.
    pub fn bpffs(at: &Path) -> Mount {
        Mount::new(at, &["-t", "bpf", "bpf"]).unwrap_or_else(|e| panic!("mount bpffs: {e}"))
    }

    /// [`Mount::bpffs`], or `None` if the mount fails (not root).
    pub fn try_bpffs(at: &Path) -> Option<Mount> {
        Mount::new(at, &["-t", "bpf", "bpf"]).ok()
    }

    /// A tmpfs with mount `options` (`size=64k,mode=0755`); panics if it
    /// cannot.
    pub fn tmpfs(at: &Path, options: &str) -> Mount {
        Mount::new(at, &["-t", "tmpfs", "-o", options, "tmpfs"])
            .unwrap_or_else(|e| panic!("mount tmpfs: {e}"))
    }

    fn new(at: &Path, args: &[&str]) -> Result<Mount, String> {
        std::fs::create_dir_all(at).map_err(|e| format!("{}: {e}", at.display()))?;
        let o = Command::new("mount")
            .args(args)
            .arg(at)
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).into_owned());
        }
        Ok(Mount { at: at.into() })
    }
}

impl std::ops::Deref for Mount {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.at
    }
}

impl AsRef<Path> for Mount {
    fn as_ref(&self) -> &Path {
        &self.at
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Lazily if something still holds it busy: detached all the same.
        let umount = |lazy: &[&str]| Command::new("umount").args(lazy).arg(&self.at).output();
        if !umount(&[]).is_ok_and(|o| o.status.success()) {
            let _ = umount(&["-l"]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::TempDir;
    use std::os::unix::fs::MetadataExt as _;

    /// The calling thread's network namespace (its inode).
    fn namespace() -> u64 {
        std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
    }

    #[test]
    fn a_private_namespace_holds_its_addresses_until_the_guard_drops() {
        if !available() {
            return;
        }
        let before = namespace();
        {
            let _inside = Inside::private(&["192.0.2.1", "2001:db8::1"]);
            assert_ne!(namespace(), before);
            let lo = sh("ip", &["-br", "addr", "show", "lo"]);
            let lo = String::from_utf8_lossy(&lo.stdout);
            assert!(lo.contains("UP") || lo.contains("UNKNOWN"), "{lo}");
            assert!(lo.contains("192.0.2.1/32") && lo.contains("2001:db8::1/128"));
        }
        assert_eq!(namespace(), before);
    }

    #[test]
    fn the_guards_undo_what_they_made_when_a_test_fails() {
        if !available() {
            return;
        }
        let id = std::process::id() % 100_000;
        let (ns, near, far) = (
            format!("rctl-kit-{id}"),
            format!("rkt{id}a"),
            format!("rkt{id}b"),
        );
        let dir = TempDir::new("kit-lab");
        let at = dir.join("bpffs");
        let before = namespace();
        let failed = std::panic::catch_unwind(|| {
            let n = NetNs::new(&ns);
            let _link = Link::veth(&near, None, &far, Some(&n));
            let _bpffs = Mount::bpffs(&at);
            let _inside = n.enter();
            assert!(sh("ip", &["link", "show", &far]).status.success());
            panic!("a failing test (on purpose: its guards must undo everything)");
        });
        assert!(failed.is_err());
        assert_eq!(namespace(), before, "the thread is back");
        let list = sh("ip", &["netns", "list"]);
        assert!(!String::from_utf8_lossy(&list.stdout).contains(&ns));
        assert!(!sh("ip", &["link", "show", &near]).status.success());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(&at.display().to_string()), "{mounts}");
    }
}
