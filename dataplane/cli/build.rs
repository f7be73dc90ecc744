//! Embeds the XDP object in `rctl` when one has been built, so that
//! `rctl apply` needs nothing else on the host. A plain `cargo build`
//! without the eBPF toolchain still succeeds: `rctl apply` then asks for
//! `--object` (or RCTL_XDP_OBJECT at run time).
//!
//! The object is taken from RCTL_XDP_OBJECT at build time, else from the
//! eBPF crate's release build path.

fn main() {
    let default = "ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp";
    println!("cargo:rerun-if-env-changed=RCTL_XDP_OBJECT");
    println!("cargo:rerun-if-changed={default}");
    let path = std::env::var("RCTL_XDP_OBJECT")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
            format!("{root}/{default}")
        });
    let found = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() > 0);
    if found {
        println!("cargo:rerun-if-changed={path}");
    }
    let code = if found {
        format!("pub const OBJECT: Option<&[u8]> = Some(include_bytes!({path:?}));\n")
    } else {
        "pub const OBJECT: Option<&[u8]> = None;\n".to_string()
    };
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("xdp_object.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}
