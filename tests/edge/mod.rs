//! rctl in front of real edge proxies: the configuration `rctl emit`
//! writes, checked by `haproxy -c` and `nginx -t` and run in Debian's
//! HAProxy 2.6 and nginx 1.22 on loopback (see `rctl_testkit::servers`), with
//! `rctl serve` beside them. Outcomes are counted from the proxies' own
//! logs, never from rctl's counters.
//!
//! - `emit`: every shipped, incident, fixture and corpus ruleset's
//!   configuration passes the programs' own checks; output is
//!   deterministic; with no agent at all, traffic is served (fail open)
//!   and counted as unchecked.
//! - `nginx_heads`: large heads through nginx are checked by the agent,
//!   and every answer of the agent that is not a verdict fails open.
//! - `wiring`: the client's address from a trusted header, and a
//!   ruleset the proxy's configuration is stale for, refused by `rctl
//!   apply` and shown by `rctl status`.
//! - `module`: rctl's nginx module in nginx (`rctl emit nginx
//!   --module`): every emitted configuration passes `nginx -t`, one key's
//!   limit holds across two workers, reloads and a new artifact under
//!   load fail no request, hostile requests are answered.
//! - `differential`: HAProxy, Varnish and HAProxy with the agent, each
//!   configured by `rctl emit`, answer every request of the corpus,
//!   shipped and hostile rulesets as `rctl eval` decides it.

mod differential;
pub mod emit;
mod incidents;
mod lifecycle;
mod module;
mod monitoring;
mod nginx_heads;
mod parity;
pub(crate) mod stack;
mod suggest;
mod tap;
mod top;
mod wiring;

use crate::util::root;
use rctl_testkit::servers::{haproxy, nginx};
use rctl_testkit::skip::require;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs rctl and asserts it succeeds; returns stdout and stderr.
pub fn rctl_ok(args: &[&str]) -> (String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(args)
        .output()
        .expect("run rctl");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "rctl {args:?} failed:\n{err}");
    (out, err)
}

/// `rctl emit haproxy-spoe RULES -o DIR/haproxy-rctl flags...`; returns
/// that directory.
pub fn emit_haproxy(rules: &Path, dir: &Path, flags: &[&str]) -> PathBuf {
    emit("haproxy-spoe", rules, &dir.join("haproxy-rctl"), flags)
}

/// `rctl emit nginx RULES -o DIR/nginx-rctl flags...`; returns that
/// directory.
pub fn emit_nginx(rules: &Path, dir: &Path, flags: &[&str]) -> PathBuf {
    emit("nginx", rules, &dir.join("nginx-rctl"), flags)
}

fn emit(target: &str, rules: &Path, out: &Path, flags: &[&str]) -> PathBuf {
    let mut args = vec!["emit", target, path(rules), "-o", path(out)];
    args.extend(flags);
    rctl_ok(&args);
    out.to_path_buf()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// A whole haproxy.cfg: the base sections, a frontend on `bind` holding
/// the emitted frontend lines, and the backend `app` at `app`.
pub fn haproxy_config(dir: &Path, emitted: &Path, bind: SocketAddr, app: SocketAddr) -> String {
    let lines = std::fs::read_to_string(emitted.join("rctl-frontend.cfg")).unwrap();
    format!(
        "{}frontend fe
    bind {bind}
{lines}    default_backend app

backend app
    server app1 {app}
",
        haproxy::base(dir)
    )
}

/// `haproxy -c` on [`haproxy_config`] with the emitted backends file.
pub fn haproxy_check(dir: &Path, emitted: &Path) -> Result<String, String> {
    let cfg = dir.join("haproxy-check.cfg");
    let addr = "127.0.0.1:1".parse().unwrap();
    std::fs::write(&cfg, haproxy_config(dir, emitted, addr, addr)).unwrap();
    let out = haproxy::check(&[cfg, emitted.join("rctl-backends.cfg")])?;
    // Accepted with warnings is not good enough for an operator.
    if out.contains("[WARNING]") {
        return Err(out);
    }
    Ok(out)
}

/// The origin: an nginx server block on `app` answering every request
/// with 200 and logging it to `DIR/app.log` as `CLIENT METHOD URI STATUS
/// "X-Requestctl"`, the client from `X-Forwarded-For`.
pub fn origin(dir: &Path, app: SocketAddr) -> String {
    format!(
        "    log_format app '$http_x_forwarded_for $request_method $request_uri $status \"$http_x_requestctl\"';
    server {{
        listen {app};
        access_log {}/app.log app;
        location / {{
            return 200 \"app\n\";
        }}
    }}
",
        dir.display()
    )
}

/// The second log of the front of [`nginx_http`], `front-full.log`: the
/// fields `rctl suggest --log` reads (millisecond time, Host, the
/// headers normal clients are told by), in nginx's syntax (as
/// `--log-format nginx:FORMAT` takes it).
pub const FULL_LOG: &str = "$msec $remote_addr \"$host\" \"$request\" $status \"$http_user_agent\" \"$http_accept_language\" \"$http_cache_control\"";

/// The `http` block of an nginx whose server on `front` asks the agent
/// (the emitted files), logs in the `rctl` format to `front.log` (and
/// [`FULL_LOG`] to `front-full.log`), and
/// proxies to its second server, the [`origin`] on `app`.
pub fn nginx_http(dir: &Path, emitted: &Path, front: SocketAddr, app: SocketAddr) -> String {
    let (d, e) = (dir.display(), emitted.display());
    format!(
        "    include {e}/rctl-http.conf;
    log_format full '{FULL_LOG}';
    server {{
        listen {front};
        access_log {d}/front.log rctl;
        access_log {d}/front-full.log full;
        include {e}/rctl-server.conf;
        proxy_set_header X-Forwarded-For $remote_addr;
        location / {{
            proxy_pass http://{app};
        }}
    }}
{}",
        origin(dir, app)
    )
}

/// `nginx -t` on an nginx.conf made of [`nginx_http`].
pub fn nginx_check(dir: &Path, emitted: &Path) -> Result<String, String> {
    let addr = |p| SocketAddr::from(([127, 0, 0, 1], p));
    let conf = nginx::conf(dir, 1, &nginx_http(dir, emitted, addr(1), addr(2)));
    std::fs::write(dir.join("nginx-check.conf"), conf).unwrap();
    let out = nginx::check(dir, "nginx-check.conf")?;
    if out.contains("[warn]") {
        return Err(out);
    }
    Ok(out)
}

/// Whether HAProxy and nginx are installed (else the test is skipped,
/// except under CI).
pub fn have_proxies() -> bool {
    require(haproxy::BIN) && require(nginx::BIN)
}

/// The shipped rules directory.
pub fn shipped() -> PathBuf {
    root().join("rules")
}
