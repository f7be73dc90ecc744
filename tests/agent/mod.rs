//! `rctl serve`, the real binary on loopback and unix sockets in temp
//! directories: the HTTP check endpoint's verdicts for the incidents'
//! shapes, `rctl apply` switching it under load (and failing at each step
//! after the agent's prepare, against a fake agent), metrics, the log,
//! and a graceful stop. Outcomes are counted on the client side, with an HTTP
//! client and a Prometheus text parser written here, not rctl's own.

mod endpoint;
mod failures;
mod observe;
mod planes;
mod restart;
mod swap;
mod tap;

use crate::util::{root, tempdir, TempDir};
use rctl_testkit::proc::Proc;
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shipped rules plus `extra` sources, compiled into `dir`.
pub fn compile(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let out = dir.join(format!("{name}.rctlc"));
    let mut args = vec![
        "compile".to_string(),
        root().join("rules").display().to_string(),
    ];
    if !extra.is_empty() {
        let src = dir.join(format!("{name}-extra.rctl"));
        std::fs::write(&src, extra).unwrap();
        args.push(src.display().to_string());
    }
    args.extend(["-o".into(), out.display().to_string()]);
    let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "compile: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A running `rctl serve`.
pub struct Agent {
    proc: Proc,
    pub dir: TempDir,
    pub http: SocketAddr,
    pub metrics: SocketAddr,
    pub control: PathBuf,
}

impl Agent {
    /// Starts `rctl serve --artifact ARTIFACT` with the HTTP endpoint,
    /// metrics and a control socket in a private directory, plus `extra`
    /// flags; waits until it is ready.
    pub fn start(artifact: &Path, extra: &[&str]) -> Agent {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempdir("agent");
        let run = dir.join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        let control = run.join("agent.sock");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rctl"));
        cmd.args(["serve", "--artifact"])
            .arg(artifact)
            .args(["--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
            .arg("--control")
            .arg(&control)
            .args(extra);
        let mut proc = Proc::spawn("rctl-serve", &dir, cmd);
        proc.wait_ready("rctl serve: ready", Duration::from_secs(30), |p| {
            p.stderr().lines().any(|l| l == "rctl serve: ready")
        });
        let stderr = proc.stderr();
        let addr = |prefix: &str| -> SocketAddr {
            let a = stderr.lines().find_map(|l| l.strip_prefix(prefix));
            a.unwrap_or_else(|| panic!("no `{prefix}`"))
                .parse()
                .unwrap()
        };
        Agent {
            http: addr("rctl serve: listening: http tcp:"),
            metrics: addr("rctl serve: listening: metrics tcp:"),
            proc,
            dir,
            control,
        }
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.proc.stderr()
    }

    /// A keep-alive connection to the check endpoint.
    pub fn conn(&self) -> Conn {
        Conn::open(self.http)
    }

    /// Sends SIGTERM and waits (at most 20 s) for it to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.proc.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.proc.exited() {
                return s;
            }
            assert!(Instant::now() < deadline, "no exit 20 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `rctl ARGS` (apply, status) against this agent's control socket.
    pub fn rctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_rctl"))
            .args(args)
            .arg("--agent")
            .arg(&self.control)
            .output()
            .unwrap()
    }

    /// `rctl status --format json`'s agent status.
    pub fn status(&self) -> serde_json::Value {
        // Without --iface, the packet plane is read too; a host without a
        // bpffs (or an unprivileged run) warns about it.
        // Its exit code is its health's: 0 OK, 1 WARNING (shadow mode).
        let o = self.rctl(&["status", "--format", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("status: {e}: {}", String::from_utf8_lossy(&o.stderr)));
        let want = match v["health"]["state"].as_str() {
            Some("OK") => 0,
            Some("WARNING") => 1,
            other => panic!("status {other:?}: {v}"),
        };
        assert_eq!(o.status.code(), Some(want), "{v}");
        assert_eq!(v["agent"]["serving"], true, "{v}");
        v["agent"]["status"].clone()
    }

    /// The scraped metrics, parsed.
    pub fn metrics(&self) -> Metrics {
        let mut c = Conn::open(self.metrics);
        let r = c.send("GET", "/metrics", &[]).expect("scrape");
        assert_eq!(r.status, 200);
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("text/plain; version=0.0.4"),
            "{:?}",
            r.headers
        );
        parse_metrics(std::str::from_utf8(&r.body).unwrap())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.proc.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP/1.1 response as read off the wire.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// A header's value (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A keep-alive HTTP/1.1 connection, written and parsed by hand.
pub struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Conn {
            r: BufReader::new(s),
        }
    }

    /// Writes raw bytes.
    pub fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.r.get_mut().write_all(b)
    }

    /// Sends one request and reads its response.
    pub fn send(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, &[u8])],
    ) -> std::io::Result<Resp> {
        let mut req = format!("{method} {target} HTTP/1.1\r\nHost: agent.test\r\n").into_bytes();
        for (n, v) in headers {
            req.extend_from_slice(n.as_bytes());
            req.extend_from_slice(b": ");
            req.extend_from_slice(v);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"\r\n");
        self.write(&req)?;
        self.read()
    }

    /// Reads one response: status line, headers, a Content-Length body.
    pub fn read(&mut self) -> std::io::Result<Resp> {
        let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let mut line = String::new();
        if self.r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a response",
            ));
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let (Some("HTTP/1.1"), Some(code)) = (parts.next(), parts.next()) else {
            return Err(bad(format!("status line {line:?}")));
        };
        let status: u16 = code.parse().map_err(|_| bad(format!("status {code:?}")))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.r.read_line(&mut line)?;
            let l = line.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                break;
            }
            let (n, v) = l
                .split_once(':')
                .ok_or_else(|| bad(format!("header {l:?}")))?;
            headers.push((n.to_string(), v.trim().to_string()));
        }
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(Ok(0), |(_, v)| v.parse())
            .map_err(|_| bad("content-length".into()))?;
        let mut body = vec![0; len];
        self.r.read_exact(&mut body)?;
        Ok(Resp {
            status,
            headers,
            body,
        })
    }
}

/// Samples by metric name and labels (`name{a="x",b="y"}`, labels sorted).
pub type Metrics = BTreeMap<String, f64>;

/// Parses the Prometheus text exposition format (0.0.4) strictly: every
/// line a `# HELP`, a `# TYPE` before the family's samples, or a sample
/// `name{label="value",…} value` with escaped label values; histogram
/// buckets cumulative up to `+Inf`, which equals `_count`.
pub fn parse_metrics(text: &str) -> Metrics {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Metrics::new();
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            let (kind, name, tail) = (w.next().unwrap(), w.next().unwrap(), w.next());
            assert!(is_name(name), "bad name in {line:?}");
            match kind {
                "HELP" => assert!(tail.is_some(), "{line:?}"),
                "TYPE" => {
                    let t = tail.unwrap();
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "{line:?}"
                    );
                    assert!(
                        types.insert(name.into(), t.into()).is_none(),
                        "two TYPEs: {line:?}"
                    );
                }
                _ => panic!("unknown comment {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, Vec::new()),
            Some((n, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("{line:?}"));
                (n, parse_labels(body, line))
            }
        };
        assert!(is_name(name), "{line:?}");
        let family = types
            .keys()
            .find(|f| {
                name == f.as_str()
                    || (types[*f] == "histogram"
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|s| name == format!("{f}{s}")))
            })
            .unwrap_or_else(|| panic!("sample before its TYPE: {line:?}"));
        let _ = family;
        let mut labels = labels;
        labels.sort();
        let key = if labels.is_empty() {
            name.to_string()
        } else {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            format!("{name}{{{}}}", l.join(","))
        };
        assert!(out.insert(key, value).is_none(), "repeated {line:?}");
    }
    for (f, t) in &types {
        if t != "histogram" {
            continue;
        }
        let mut buckets: Vec<(f64, f64)> = out
            .iter()
            .filter_map(|(k, v)| {
                let le = k.strip_prefix(&format!("{f}_bucket{{le=\""))?;
                let le = le.strip_suffix("\"}")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, *v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{f}: not cumulative"
        );
        let inf = buckets.last().expect("+Inf bucket");
        assert_eq!(inf.0, f64::INFINITY);
        assert_eq!(
            Some(&inf.1),
            out.get(&format!("{f}_count")),
            "{f}: +Inf != count"
        );
    }
    out
}

fn parse_labels(body: &str, line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "{line:?}");
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    c => panic!("bad escape {c:?} in {line:?}"),
                },
                Some('"') => break,
                Some(c) => value.push(c),
                None => panic!("unterminated label in {line:?}"),
            }
        }
        out.push((name, value));
        match chars.next() {
            None => break,
            Some(',') => {}
            c => panic!("{c:?} after a label in {line:?}"),
        }
    }
    out
}

/// `X-Rctl-Client-Ip` and a User-Agent.
pub fn client<'a>(ip: &'a str, ua: &'a str) -> Vec<(&'static str, &'a [u8])> {
    vec![
        ("X-Rctl-Client-Ip", ip.as_bytes()),
        ("User-Agent", ua.as_bytes()),
        ("X-Rctl-Host", b"query.wikidata.org"),
    ]
}

pub const SCRAPER_UA: &str = "python-requests/2.31.0";
pub const UPDATER_UA: &str = "wmf-streaming-updater-consumer/0.3.140 (query-service)";
pub const UPDATER_IP: &str = "208.80.154.230";
pub const READER_UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Firefox/128.0";
