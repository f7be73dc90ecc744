//! Varnish (`/usr/sbin/varnishd`, Debian's 7.1, with varnish-modules for
//! vsthrottle): `varnishd -C` and a foreground `varnishd -F`, its working
//! directory (`-n`) and storage in its directory, no privilege dropping.

use crate::proc::Proc;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

/// The program.
pub const BIN: &str = "varnishd";

/// Whether varnishd and vmod_vsthrottle are installed (panics under CI
/// if not, else says the test is skipped).
pub fn require() -> bool {
    let vmod = [
        "/usr/lib/x86_64-linux-gnu/varnish/vmods",
        "/usr/lib/varnish/vmods",
    ]
    .iter()
    .any(|d| Path::new(d).join("libvmod_vsthrottle.so").exists());
    crate::skip::require(BIN)
        && crate::skip::skip_unless(vmod, "varnish-modules (apt-get install varnish-modules)")
}

/// `varnishd -C -f VCL`: `Ok(output)` if it compiles the VCL, else
/// `Err(output)`. Its scratch directory goes in `dir`.
pub fn check(vcl: &Path, dir: &Path) -> Result<String, String> {
    let mut cmd = Command::new(BIN);
    cmd.arg("-C")
        .arg("-f")
        .arg(vcl)
        .arg("-n")
        .arg(dir.join("varnish-check"));
    crate::proc::check(cmd).map(|_| String::new())
}

/// A running varnishd.
pub struct Varnish {
    /// The management process (its group holds the cache process).
    pub proc: Proc,
}

impl Varnish {
    /// Checks `vcl`, starts varnishd in the foreground on `listen` and
    /// waits until it accepts connections.
    pub fn start(dir: &Path, vcl: &Path, listen: SocketAddr) -> Varnish {
        if let Err(e) = check(vcl, dir) {
            panic!(
                "varnishd -C refuses {}:\n{e}\n{}",
                vcl.display(),
                std::fs::read_to_string(vcl).unwrap_or_default()
            );
        }
        let mut cmd = Command::new(BIN);
        cmd.arg("-F")
            .args(["-j", "none"])
            .arg("-a")
            .arg(listen.to_string())
            .arg("-f")
            .arg(vcl)
            .arg("-n")
            .arg(dir.join("varnish"))
            .args(["-s", "malloc,16m"])
            .args(["-p", "thread_pools=1", "-p", "thread_pool_min=5"]);
        let mut proc = Proc::spawn("varnishd", dir, cmd);
        proc.wait_port(listen);
        Varnish { proc }
    }
}
