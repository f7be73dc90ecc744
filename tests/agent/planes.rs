//! One `rctl apply` for both planes on a real interface (root, the built
//! XDP object; never skipped under CI): the XDP program attaches to a veth
//! and the agent switches, and `rctl status` shows both.

use super::*;
use rctl_testkit::lab::{Link, Mount};
use rctl_testkit::proc::sh;
use rctl_testkit::xdp::object_path;

/// A veth pair (both ends here) and a private bpffs, removed on drop.
pub(super) struct Veth {
    pub(super) near: String,
    pub(super) bpffs: PathBuf,
    _link: Link,
    _mount: Mount,
}

impl Veth {
    /// A pair of its own (named after the process and a counter, so that
    /// tests running at once do not share one), the bpffs in `dir`.
    pub(super) fn new(dir: &Path) -> Veth {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = std::process::id() % 100_000;
        let (near, far) = (format!("rag{id}x{n}a"), format!("rag{id}x{n}b"));
        let bpffs = dir.join("bpffs");
        let mount = Mount::bpffs(&bpffs);
        // One left by a test run that was killed.
        let _ = sh("ip", &["link", "del", &near]);
        let link = Link::veth(&near, None, &far, None);
        Veth {
            near,
            bpffs,
            _link: link,
            _mount: mount,
        }
    }
}

#[test]
fn agent_one_apply_switches_the_packet_plane_and_the_agent() {
    let Some(object) = object_path() else { return };
    let dir = tempdir("agent-planes");
    let (v1, v2) = (
        compile(&dir, "v1", ""),
        compile(
            &dir,
            "v2",
            r#"rule swap_new { when path == "/swap-new" deny 403 "new" }"#,
        ),
    );
    let veth = Veth::new(&dir);
    let a = Agent::start(&v1, &[]);
    let mut c = a.conn();
    for _ in 0..11 {
        c.send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA))
            .unwrap();
    }
    let (run, state) = (dir.join("run"), dir.join("state"));
    let host = [
        "--bpffs",
        veth.bpffs.to_str().unwrap(),
        "--run-dir",
        run.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let mut args = vec![
        "apply",
        v2.to_str().unwrap(),
        "--iface",
        &veth.near,
        "--mode",
        "skb",
        "--object",
        object.to_str().unwrap(),
    ];
    args.extend_from_slice(&host);
    let o = a.rctl(&args);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains(&format!("attached to {} (skb mode", veth.near)),
        "{out}"
    );
    assert!(out.contains("generation 2 replaced generation 1"), "{out}");
    // Both planes run v2; the agent kept the ban.
    let r = c
        .send("GET", "/check/swap-new", &client("93.184.216.8", READER_UA))
        .unwrap();
    assert_eq!(r.status, 403);
    let r = c
        .send("GET", "/check/sparql", &client("185.220.101.7", SCRAPER_UA))
        .unwrap();
    assert_eq!(r.status, 429);
    let mut st = vec!["status", "--format", "json"];
    st.extend_from_slice(&host);
    let o = a.rctl(&st);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let iface = &v["interfaces"][0];
    assert_eq!(
        (iface["iface"].as_str(), &iface["enforcing"]),
        (Some(veth.near.as_str()), &serde_json::json!(true))
    );
    assert_eq!(
        iface["attached"]["artifact_sha256"], v["agent"]["status"]["artifact_sha256"],
        "both planes run the same artifact"
    );
    assert_eq!(v["agent"]["status"]["generation"], 2);
    let mut detach = vec!["detach", "--iface", veth.near.as_str()];
    detach.extend_from_slice(&host);
    assert!(crate::util::rctl(&detach).status.success());
}
