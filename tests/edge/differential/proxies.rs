//! The three proxies of the differential test, each configured by `rctl
//! emit` for one ruleset, listening on 127.0.0.1:443 in the test's own
//! network namespace, answering `200` itself to what the rules let
//! through (no backend: its own opinions on methods would get in the
//! way), and taking the client's address from `X-Client-IP`:
//!
//! - `emit haproxy` (`--client-ip-header X-Client-IP`): the frontend
//!   lines and sections as written; a reset clears its stick tables
//!   (`clear table` on the stats socket);
//! - `emit vcl` (`X-Client-IP` by default): the rules file included by a
//!   VCL of the test's own whose `vcl_recv` calls `rctl_recv` then
//!   answers `synth(200)`. vsthrottle has no way to forget a key, so each
//!   key the rules write is prefixed with the request's
//!   `X-Rctl-Test-Epoch` header, and a reset moves to a new epoch;
//! - `emit haproxy-spoe` with `rctl serve --spoe`: the frontend lines as
//!   written, after `tcp-request content set-src` (the SPOE message is
//!   sent before `http-request` rules run, so this is where the address
//!   must be set). A request the agent did not check is answered `599`
//!   (`txn.rctl.error` set), so that failing open can never pass for a
//!   verdict. A reset applies the ruleset again with its throttle rules
//!   renamed (`rctl apply`): a renamed rule starts with empty buckets.

use super::super::rctl_ok;
use super::requests::{send, Req};
use crate::util::serve;
use rctl_compiler::ir::{Action, Ruleset};
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::haproxy::{self, Haproxy};
use rctl_testkit::servers::serve::Serve;
use rctl_testkit::servers::varnish::Varnish;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where every front listens (in the test's namespace).
pub const FRONT: &str = "127.0.0.1:443";

/// Which emitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `rctl emit haproxy`.
    Haproxy,
    /// `rctl emit vcl`.
    Vcl,
    /// `rctl emit haproxy-spoe` and `rctl serve`.
    Spoe,
}

/// What runs for each kind (the agent boxed: it is the largest part).
enum Running {
    Haproxy {
        hap: Haproxy,
        tables: Vec<String>,
    },
    Vcl {
        v: Varnish,
        epoch: u32,
    },
    Spoe {
        _serve: Box<Serve>,
        hap: Haproxy,
        control: PathBuf,
        epoch: u32,
    },
}

/// A running proxy for one ruleset.
pub struct Proxy {
    running: Running,
    rs: Ruleset,
    dir: PathBuf,
    /// The rules `rctl emit` left out, with why.
    pub skipped: Vec<(String, String)>,
}

/// `rctl emit TARGET` with `flags`, into `out`; the rules it left out.
fn emit(target: &str, source: &Path, out: &Path, flags: &[&str]) -> Vec<(String, String)> {
    let mut args = vec![
        "emit",
        target,
        source.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend(flags);
    let (_, err) = rctl_ok(&args);
    err.lines()
        .filter_map(|l| l.strip_prefix("rctl: warning: rule "))
        .filter_map(|l| l.split_once(" left out: "))
        .map(|(r, why)| (r.to_string(), why.to_string()))
        .collect()
}

/// The `defaults` and a backend answering 200 to what gets through.
fn tail() -> &'static str {
    "    default_backend ok\n\nbackend ok\n    http-request return status 200 content-type text/plain string ok\n"
}

impl Proxy {
    /// Starts `kind` for the ruleset `source` (compiled: `rs`; as an
    /// artifact: `art`) in `dir`.
    pub fn start(kind: Kind, source: &Path, art: &Path, rs: &Ruleset, dir: &Path) -> Proxy {
        std::fs::create_dir_all(dir).unwrap();
        let front: SocketAddr = FRONT.parse().unwrap();
        let out = dir.join("emitted");
        let (running, skipped) = match kind {
            Kind::Haproxy => {
                let skipped = emit(
                    "haproxy",
                    source,
                    &out,
                    &["--skip-unsupported", "--client-ip-header", "X-Client-IP"],
                );
                let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
                let sections = read(rctl_emit::haproxy::SECTIONS_FILE);
                let lines: String = read(rctl_emit::haproxy::FRONTEND_FILE)
                    .lines()
                    .map(|l| format!("    {l}\n"))
                    .collect();
                let tables = sections
                    .lines()
                    .filter_map(|l| l.strip_prefix("backend "))
                    .map(str::to_string)
                    .collect();
                let config = format!(
                    "{}{sections}\nfrontend fe\n    bind {front}\n{lines}{}",
                    haproxy::base(dir),
                    tail()
                );
                let hap = Haproxy::start(dir, &config, &[], &[front]);
                (Running::Haproxy { hap, tables }, skipped)
            }
            Kind::Vcl => {
                let skipped = emit("vcl", source, &out, &["--skip-unsupported"]);
                let rules = out.join(rctl_emit::vcl::RULES_FILE);
                let text = std::fs::read_to_string(&rules).unwrap();
                let keyed = text.replace(
                    "vsthrottle.is_denied(",
                    "vsthrottle.is_denied(req.http.X-Rctl-Test-Epoch + ",
                );
                assert_eq!(
                    keyed.matches("X-Rctl-Test-Epoch").count(),
                    text.matches("vsthrottle.is_denied(").count()
                );
                std::fs::write(&rules, keyed).unwrap();
                let main = dir.join("test.vcl");
                std::fs::write(
                    &main,
                    format!(
                        "vcl 4.1;\n\ninclude \"{}\";\n\nbackend default none;\n\nsub vcl_recv {{\n    call rctl_recv;\n    return (synth(200, \"ok\"));\n}}\n\nsub vcl_synth {{\n    call rctl_synth;\n}}\n",
                        rules.display()
                    ),
                )
                .unwrap();
                let v = Varnish::start(dir, &main, front);
                (Running::Vcl { v, epoch: 0 }, skipped)
            }
            Kind::Spoe => {
                let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
                let serve = serve(dir, art, http, &[]);
                let agent = format!("unix:{}", serve.spoe.display());
                emit(
                    "haproxy-spoe",
                    art,
                    &out,
                    &["--agent", &agent, "--timeout-ms", "2000"],
                );
                let lines = std::fs::read_to_string(out.join("rctl-frontend.cfg")).unwrap();
                let config = format!(
                    "{}frontend fe\n    bind {front}\n    tcp-request content set-src req.hdr_ip(X-Client-IP,1) if {{ req.hdr_ip(X-Client-IP,1) -m found }}\n{lines}    http-request return status 599 content-type text/plain string unchecked if {{ var(txn.rctl.error) -m found }}\n{}",
                    haproxy::base(dir),
                    tail()
                );
                let hap = Haproxy::start(dir, &config, &[out.join("rctl-backends.cfg")], &[front]);
                let control = serve.control.clone();
                (
                    Running::Spoe {
                        _serve: Box::new(serve),
                        hap,
                        control,
                        epoch: 0,
                    },
                    Vec::new(),
                )
            }
        };
        let p = Proxy {
            running,
            rs: rs.clone(),
            dir: dir.to_path_buf(),
            skipped,
        };
        p.wait_ready();
        p
    }

    /// Until a plain request is answered (for SPOE: checked by the agent).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let probe = Req {
            method: "GET".into(),
            target: "/rctl-probe".into(),
            headers: vec![("Host".into(), "probe.example".into())],
            ip: "192.0.2.1".parse().unwrap(),
        };
        loop {
            let st = self.send(&probe);
            if st != "599" && st != "refused" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not ready: {st}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `r` (with the epoch header for Varnish).
    pub fn send(&self, r: &Req) -> String {
        let extra = match &self.running {
            Running::Vcl { epoch, .. } => {
                vec![("X-Rctl-Test-Epoch".to_string(), format!("e{epoch}:"))]
            }
            _ => vec![],
        };
        // HAProxy's silent-drop never answers: the wait is its verdict.
        send(
            FRONT.parse().unwrap(),
            &r.wire(&extra),
            Duration::from_millis(1200),
        )
    }

    /// Forgets every throttle's state.
    pub fn reset(&mut self) {
        match &mut self.running {
            Running::Haproxy { hap, tables } => {
                for t in tables.iter() {
                    let answer = hap.command(&format!("clear table {t}"));
                    assert!(answer.trim().is_empty(), "clear table {t}: {answer}");
                }
            }
            Running::Vcl { epoch, .. } => *epoch += 1,
            Running::Spoe { control, epoch, .. } => {
                *epoch += 1;
                let mut rs = self.rs.clone();
                for r in &mut rs.rules {
                    if matches!(r.action, Action::Throttle(_)) {
                        r.name = format!("{}_e{epoch}", r.name);
                    }
                }
                let art = self.dir.join(format!("epoch-{epoch}.rctlc"));
                std::fs::write(&art, rctl_compiler::artifact::encode(&rs)).unwrap();
                rctl_ok(&[
                    "apply",
                    art.to_str().unwrap(),
                    "--agent",
                    control.to_str().unwrap(),
                ]);
            }
        }
    }

    /// The logs, for failure messages.
    pub fn logs(&self) -> String {
        match &self.running {
            Running::Haproxy { hap, .. } | Running::Spoe { hap, .. } => hap.proc.logs(),
            Running::Vcl { v, .. } => v.proc.logs(),
        }
    }
}
