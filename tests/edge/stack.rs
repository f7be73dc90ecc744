//! One edge host in a private network namespace: `rctl serve`, an origin
//! (nginx), and HAProxy or nginx in front configured by `rctl emit`;
//! real clients (`client.py`), and the proxies' logs parsed.

use super::{emit_haproxy, emit_nginx, haproxy_config, nginx_http, origin};
use crate::util::{root, serve, tempdir, TempDir};
use rctl_testkit::lab;
use rctl_testkit::servers::haproxy::Haproxy;
use rctl_testkit::servers::nginx::{self, Nginx};
use rctl_testkit::servers::serve::Serve;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The edge's service address, where the front proxy listens (port 80).
pub const EDGE: &str = "185.15.59.224";

/// The end-to-end tests share two cores: one stack at a time, so that
/// the load of one does not make another's agent miss its timeouts.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Holds the end-to-end tests' turn (see [`Stack::start`]) for a test
/// that runs its own servers.
pub fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which proxy is in front.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Front {
    /// HAProxy with SPOE.
    Haproxy,
    /// nginx with auth_request.
    Nginx,
    /// nginx with rctl's module (`rctl emit nginx --module`), two
    /// workers sharing the zone; the agent runs beside it, never asked.
    NginxModule,
}

/// A running edge host.
pub struct Stack {
    /// The agent.
    pub agent: Serve,
    /// The origin, and for [`Front::Nginx`] the front too (a second
    /// server block of the same nginx).
    pub nginx: Nginx,
    /// The front for [`Front::Haproxy`].
    pub haproxy: Option<Haproxy>,
    /// The front's address.
    pub front: SocketAddr,
    /// Which front.
    pub kind: Front,
    /// The test's thread in the stack's network namespace, until the
    /// servers above are stopped.
    _netns: lab::Inside,
    _serial: MutexGuard<'static, ()>,
    /// Its directory (last: removed once its servers have stopped).
    pub dir: TempDir,
}

/// One request as the front proxy logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Client address.
    pub ip: String,
    /// Method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Status sent (HAProxy logs -1 or 0 for a silent drop; nginx 444).
    pub status: i32,
    /// `txn.rctl.action` / `X-Rctl-Action` ("" if unset).
    pub action: String,
    /// The deciding rule ("" if none).
    pub rule: String,
    /// The tags ("" if none).
    pub tags: String,
    /// Whether the agent did not check it (SPOE error set; nginx: the
    /// check request failed).
    pub unchecked: bool,
    /// Why not: the SPOE error code (1 timeout, 2 no agent, 256 + the
    /// agent's status) or the check request's status (502 refused, 504
    /// timed out); "" if checked.
    pub error: String,
    /// The generation that decided (HAProxy only; "" otherwise).
    pub generation: String,
}

/// The log format of the HAProxy frontend in these tests.
const HAPROXY_LOG: &str = "    option forwardfor\n    log-format \"%ci %HM %{+Q}HU %ST rctl=%[var(txn.rctl.action)] rule=%[var(txn.rctl.rule)] tags=%[var(txn.rctl.tags)] err=%[var(txn.rctl.error)] gen=%[var(txn.rctl.generation)]\"\n";

impl Stack {
    /// Moves the test's thread into a new network namespace holding
    /// `addrs` and [`EDGE`] (until the stack is dropped), and
    /// starts the agent on `artifact`, the origin, and `front` in front
    /// (configured by `rctl emit` from `artifact` plus `emit_flags`);
    /// returns once a request has been checked by the agent.
    pub fn start(front: Front, artifact: &Path, addrs: &[&str], emit_flags: &[&str]) -> Stack {
        Stack::start_serving(front, artifact, addrs, emit_flags, &[])
    }

    /// [`Stack::start`], with `serve_flags` given to `rctl serve`.
    pub fn start_serving(
        front: Front,
        artifact: &Path,
        addrs: &[&str],
        emit_flags: &[&str],
        serve_flags: &[&str],
    ) -> Stack {
        let serial = serial();
        let mut all = vec![EDGE];
        all.extend(addrs);
        let netns = lab::Inside::private(&all);
        let dir = tempdir(&format!("edge-{front:?}"));
        let agent_http: SocketAddr = "127.0.0.1:9781".parse().unwrap();
        let app: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let edge: SocketAddr = format!("{EDGE}:80").parse().unwrap();
        let agent = serve(&dir, artifact, agent_http, serve_flags);
        let (nginx, haproxy) = match front {
            Front::Haproxy => {
                let spoe = format!("unix:{}", agent.spoe.display());
                let mut flags = vec!["--agent", spoe.as_str()];
                flags.extend(emit_flags);
                let emitted = emit_haproxy(artifact, &dir, &flags);
                let ngx = Nginx::start(&dir, &nginx::conf(&dir, 1, &origin(&dir, app)), &[app]);
                let cfg = haproxy_config(&dir, &emitted, edge, app).replacen(
                    "    filter spoe",
                    &format!("{HAPROXY_LOG}    filter spoe"),
                    1,
                );
                let extra = [emitted.join("rctl-backends.cfg")];
                let hap = Haproxy::start(&dir, &cfg, &extra, &[edge]);
                (ngx, Some(hap))
            }
            Front::Nginx => {
                let a = agent_http.to_string();
                let mut flags = vec!["--agent", a.as_str()];
                flags.extend(emit_flags);
                let emitted = emit_nginx(artifact, &dir, &flags);
                let http = nginx_http(&dir, &emitted, edge, app);
                let ngx = Nginx::start(&dir, &nginx::conf(&dir, 1, &http), &[edge, app]);
                (ngx, None)
            }
            Front::NginxModule => {
                let module = nginx::module().expect("the nginx module");
                let active = dir.join("active.rctlc");
                std::fs::copy(artifact, &active).unwrap();
                let a = active.display().to_string();
                let mut flags = vec!["--module", "--artifact", a.as_str()];
                // The module asks no agent: its timeout does not apply.
                let mut rest = emit_flags.iter();
                while let Some(f) = rest.next() {
                    if *f == "--timeout-ms" {
                        rest.next();
                    } else {
                        flags.push(f);
                    }
                }
                let emitted = emit_nginx(artifact, &dir, &flags);
                let http = nginx_http(&dir, &emitted, edge, app);
                let ngx = Nginx::start(
                    &dir,
                    &nginx::conf_with_module(&module, &dir, 2, &http),
                    &[edge, app],
                );
                (ngx, None)
            }
        };
        let s = Stack {
            dir,
            agent,
            nginx,
            haproxy,
            front: edge,
            kind: front,
            _netns: netns,
            _serial: serial,
        };
        s.wait_checked(Duration::from_secs(20));
        s
    }

    /// Sends a probe (`GET /rctl-probe`) every 50 ms until one is logged
    /// as checked by the agent.
    pub fn wait_checked(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            super::emit::get(
                self.front,
                "/rctl-probe",
                &[("User-Agent", "probe/1.0 (ops)")],
            );
            let checked = self
                .log()
                .iter()
                .any(|l| l.uri == "/rctl-probe" && !l.unchecked && !l.action.is_empty());
            if checked {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no request checked after {timeout:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every log, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = self.agent.proc.logs();
        s.push_str(&self.nginx.proc.logs());
        s.push_str(&format!(
            "--- nginx error.log ---\n{}",
            rctl_testkit::proc::tail(&self.nginx.log("error.log"))
        ));
        if let Some(h) = &self.haproxy {
            s.push_str(&h.proc.logs());
        }
        s
    }

    /// The front proxy's log, parsed, probes left out.
    pub fn log(&self) -> Vec<Line> {
        let text = match &self.haproxy {
            Some(h) => h.log(),
            None => self.nginx.log("front.log"),
        };
        text.lines()
            .filter_map(|l| match self.kind {
                Front::Haproxy => parse_haproxy(l),
                Front::Nginx | Front::NginxModule => parse_nginx(l),
            })
            .collect()
    }

    /// The origin's log: (client address, method, URI, tag) of each
    /// request it served.
    pub fn served(&self) -> Vec<(String, String, String, String)> {
        self.nginx
            .log("app.log")
            .lines()
            .filter_map(|l| {
                let mut w = l.splitn(5, ' ');
                let ip = w.next()?.to_string();
                let (m, u) = (w.next()?.to_string(), w.next()?.to_string());
                let _status = w.next()?;
                let tag = w.next()?.trim_matches('"').to_string();
                Some((ip, m, u, tag))
            })
            .collect()
    }

    /// Runs `client.py load` with `plan`; see [`Client::load`].
    pub fn load(&self, plan: serde_json::Value) -> serde_json::Value {
        self.client().load(plan)
    }

    /// A client of the front that holds no borrow of the stack (to run
    /// load beside a restart of the agent).
    pub fn client(&self) -> Client {
        Client {
            front: self.front,
            dir: self.dir.to_path_buf(),
        }
    }
}

/// Real clients of a stack's front (`tests/edge/client.py`).
pub struct Client {
    front: SocketAddr,
    dir: PathBuf,
}

impl Client {
    /// Runs `client.py load` with `plan` (the target is filled in) and
    /// returns what each group got.
    pub fn load(&self, mut plan: serde_json::Value) -> serde_json::Value {
        plan["target"] = format!("http://{}", self.front).into();
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.dir.join(format!("plan-{n}.json"));
        std::fs::write(&path, plan.to_string()).unwrap();
        serde_json::from_slice(&client_py("load", &path)).expect("client.py output")
    }
}

/// Runs `tests/edge/client.py COMMAND FILE`; returns its stdout.
pub fn client_py(command: &str, file: &Path) -> Vec<u8> {
    let o = Command::new("python3")
        .arg(root().join("tests/edge/client.py"))
        .arg(command)
        .arg(file)
        .output()
        .expect("run client.py");
    assert!(
        o.status.success(),
        "client.py {command}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

fn field<'a>(l: &'a str, key: &str) -> &'a str {
    l.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .map(|v| if v == "-" { "" } else { v })
        .unwrap_or("")
}

impl Line {
    /// A line with the request's fields, the rest read from `key=value`
    /// words of `l`.
    fn new(l: &str, request: (&str, &str, &str), status: i32, error: &str) -> Line {
        let (ip, method, uri) = request;
        Line {
            ip: ip.into(),
            method: method.into(),
            uri: uri.into(),
            status,
            action: field(l, "rctl=").into(),
            rule: field(l, "rule=").into(),
            tags: field(l, "tags=").into(),
            unchecked: !error.is_empty(),
            error: error.into(),
            generation: field(l, "gen=").into(),
        }
    }
}

/// `IP METHOD "URI" STATUS rctl=… rule=… tags=… err=… gen=…`
fn parse_haproxy(l: &str) -> Option<Line> {
    let mut w = l.split_whitespace();
    let (ip, method) = (w.next()?, w.next()?);
    let uri = w.next()?.trim_matches('"');
    let status = w.next()?.parse().ok()?;
    if !l.contains(" rctl=") {
        return None;
    }
    Some(Line::new(l, (ip, method, uri), status, field(l, "err=")))
}

/// The `rctl` log format of `rctl-http.conf`: combined, then `rctl=…
/// rule=… tags=… check=…`.
fn parse_nginx(l: &str) -> Option<Line> {
    let ip = l.split(' ').next()?;
    let mut q = l.splitn(3, '"');
    let _ = q.next()?;
    let mut r = q.next()?.split(' ');
    let (method, uri) = (r.next()?, r.next()?);
    let status = q.next()?.split_whitespace().next()?.parse().ok()?;
    let check = field(l, "check=");
    // auth_request: the agent's answer (200 served, 403 blocked); the
    // module: ok, or error:KIND when it failed open.
    let error = if check == "200" || check == "403" || check == "ok" {
        ""
    } else {
        check
    };
    // A request never asked about (nginx refused it first) has no check.
    let error = if check.is_empty() { "none" } else { error };
    Some(Line::new(l, (ip, method, uri), status, error))
}

/// Compiles rule sources (files or directories) into `DIR/NAME.rctlc`.
pub fn compile(dir: &Path, name: &str, sources: &[PathBuf]) -> PathBuf {
    let out = dir.join(format!("{name}.rctlc"));
    let mut args = vec!["compile".to_string()];
    args.extend(sources.iter().map(|p| p.display().to_string()));
    args.extend(["-o".into(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::rctl_ok(&args);
    out
}

/// Whether the end-to-end tests can run here (root for the namespace,
/// the proxies installed); under CI they must.
pub fn available() -> bool {
    lab::available() && super::have_proxies()
}

/// [`available`], and rctl's nginx module is built (under CI it must be).
pub fn module_available() -> bool {
    available() && nginx::module().is_some()
}

/// Requests in `lines` matching `f`.
pub fn count(lines: &[Line], f: impl Fn(&Line) -> bool) -> usize {
    lines.iter().filter(|l| f(l)).count()
}
