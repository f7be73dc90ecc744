//! Embeds the XDP object in `rctl` when one has been built, so that
//! `rctl apply` needs nothing else on the host, and records what `rctl
//! --version` says of the build: the commit, and the XDP program's build
//! id (the first 16 hex digits of its object's SHA-256). A plain `cargo
//! build` without the eBPF toolchain still succeeds: `rctl apply` then
//! asks for `--object` (or RCTL_XDP_OBJECT at run time).
//!
//! The object is taken from RCTL_XDP_OBJECT at build time, else from the
//! eBPF crate's release build path. The commit is RCTL_COMMIT if set,
//! else what git says, else "unknown".

use sha2::{Digest as _, Sha256};

fn main() {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let default = "ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp";
    println!("cargo:rerun-if-env-changed=RCTL_XDP_OBJECT");
    println!("cargo:rerun-if-env-changed=RCTL_COMMIT");
    println!("cargo:rerun-if-changed={default}");
    for git in [".git/HEAD", ".git/refs/heads"] {
        if std::path::Path::new(&root).join(git).exists() {
            println!("cargo:rerun-if-changed={git}");
        }
    }
    let path = std::env::var("RCTL_XDP_OBJECT")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("{root}/{default}"));
    let object = std::fs::read(&path).ok().filter(|b| !b.is_empty());
    if object.is_some() {
        println!("cargo:rerun-if-changed={path}");
    }
    let (code, build_id) = match &object {
        Some(bytes) => {
            let id: String = Sha256::digest(bytes)[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            (
                format!("pub const OBJECT: Option<&[u8]> = Some(include_bytes!({path:?}));\n"),
                id,
            )
        }
        None => (
            "pub const OBJECT: Option<&[u8]> = None;\n".to_string(),
            "none built in".to_string(),
        ),
    };
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("xdp_object.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
    let commit = std::env::var("RCTL_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let o = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .current_dir(&root)
                .output()
                .ok()?;
            o.status
                .success()
                .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RCTL_COMMIT={commit}");
    println!("cargo:rustc-env=RCTL_XDP_BUILD_ID={build_id}");
}
