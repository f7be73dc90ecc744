//! `rctl emit vcl` and `rctl emit haproxy` checked by the real programs,
//! then run: the test blocks' requests of the shipped rules, the corpus and
//! the imported requestctl fixtures, replayed through a running varnishd
//! and a running HAProxy (each with the emitted configuration, in front of
//! nginx on loopback), each answer's status compared with the engine's
//! verdict on the same requests in the same order: no disagreement
//! allowed, for every rule emit accepts (the engine runs the ruleset
//! without the rules emit refused, which is what the servers run).
//!
//! The round trip: a requestctl tree imported, emitted as VCL, and run
//! beside requestctl's own VCL for the same tree (conftool 5.3.0.1's
//! translate.py and view.py, through tests/requestctl_oracle.py): both
//! varnishd answer every request of the fixture's expectations alike.

use crate::util::*;
use rctl_compiler::ir::Ruleset;
use rctl_compiler::spec::{SampleKind, TestCase};
use rctl_dataplane::{Engine, EngineConfig, Request, Verdict};
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::haproxy::{self, Haproxy};
use rctl_testkit::servers::nginx::{self, Nginx};
use rctl_testkit::servers::varnish::{self, Varnish};
use rctl_testkit::skip::require;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One request as it goes on the wire and to the engine.
pub(crate) struct Wire {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) ip: IpAddr,
    /// The sample's time in its test, milliseconds.
    pub(crate) ms: u64,
}

/// The test blocks' requests, in time order within each test (at most 12
/// copies of a sample).
pub(crate) fn requests(tests: &[TestCase]) -> Vec<Wire> {
    requests_upto(tests, 12)
}

/// The test blocks' requests, in time order within each test, at most
/// `copies` of each sample.
pub(crate) fn requests_upto(tests: &[TestCase], copies: u32) -> Vec<Wire> {
    let mut out = Vec::new();
    for t in tests {
        let mut ev = Vec::new();
        for (si, s) in t.samples.iter().enumerate() {
            for i in 0..s.count.min(copies) {
                ev.push((s.time_of(i), si));
            }
        }
        ev.sort();
        for (ms, si) in ev {
            let s = &t.samples[si];
            let SampleKind::Request {
                method,
                host,
                target,
                headers,
            } = &s.kind
            else {
                continue;
            };
            let mut headers = headers.clone();
            if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
                headers.insert(0, ("Host".into(), host.clone()));
            }
            out.push(Wire {
                method: method.clone(),
                target: target.clone(),
                headers,
                ip: s.ip,
                ms,
            });
        }
    }
    out
}

/// The requests of the dry-run fixture's incidents (tests/fixtures/pcap/
/// incidents.pcap: scrapers, the updater, a re-render loop), in capture
/// order, without the headers about the connection or a body (`send`
/// writes its own `Connection: close` and no body).
fn incident_requests() -> Vec<Wire> {
    let f = std::fs::File::open(root().join("tests/fixtures/pcap/incidents.pcap")).unwrap();
    let (reqs, err) = rctl_dataplane::dryrun::requests_in(std::io::BufReader::new(f));
    assert!(err.is_none(), "{err:?}");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    reqs.iter()
        .map(|r| Wire {
            method: text(r.method()),
            target: text(r.target()),
            headers: r
                .headers()
                .map(|(n, v)| (text(n), text(v)))
                .filter(|(n, _)| {
                    ![
                        "connection",
                        "content-length",
                        "transfer-encoding",
                        "keep-alive",
                    ]
                    .iter()
                    .any(|x| n.eq_ignore_ascii_case(x))
                })
                .collect(),
            ip: r.client.0,
            ms: 0,
        })
        .collect()
}

/// Whether the servers take the request as it is: no bytes outside
/// visible ASCII in the request line or header values (HAProxy answers 400
/// itself), and an upper-case method (nginx, the backend, refuses `get`).
pub(crate) fn sendable(w: &Wire) -> bool {
    let ok = |s: &str| s.bytes().all(|b| (0x20..0x7f).contains(&b));
    ok(&w.target)
        && !w.method.is_empty()
        && w.method.bytes().all(|b| b.is_ascii_uppercase())
        && w.headers.iter().all(|(n, v)| ok(n) && ok(v))
}

/// Sends one request (its client address in X-Client-IP) and returns the
/// status, or "closed" when the connection closes without an answer.
pub(crate) fn send(addr: SocketAddr, w: &Wire) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    // HAProxy's silent-drop never answers: the wait ends the request.
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut req = format!("{} {} HTTP/1.1\r\n", w.method, w.target);
    for (n, v) in &w.headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!(
        "X-Client-IP: {}\r\nConnection: close\r\n\r\n",
        w.ip
    ));
    if s.write_all(req.as_bytes()).is_err() {
        return "closed".into();
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    match text.split_whitespace().nth(1) {
        Some(code) if text.starts_with("HTTP/") => code.to_string(),
        _ => "closed".into(),
    }
}

/// What the engine's verdict looks like on the wire.
fn expected(v: &Verdict) -> String {
    match v {
        Verdict::Pass | Verdict::Allow { .. } => "200".into(),
        Verdict::Deny { status, .. } | Verdict::Throttle { status, .. } => status.to_string(),
        Verdict::Drop { .. } => "closed".into(),
    }
}

/// The engine's answers and the server's, request by request.
pub(crate) fn replay(
    rs: &Ruleset,
    site: Option<&str>,
    front: SocketAddr,
    reqs: &[Wire],
) -> Vec<(String, String, String)> {
    let e = Engine::new(
        rs.clone(),
        &EngineConfig {
            site: site.map(str::to_string),
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    let start = Instant::now();
    let mut out = Vec::new();
    for w in reqs {
        let got = send(front, w);
        let d = decide(
            &e,
            w,
            front,
            1_000_000_000_000 + start.elapsed().as_nanos() as u64,
        );
        out.push((
            format!("{} {} from {}", w.method, w.target, w.ip),
            expected(&d.verdict),
            got,
        ));
    }
    out
}

/// The engine's decision on `w`, sent to `to`, at `time_ns`.
pub(crate) fn decide(
    e: &Engine,
    w: &Wire,
    to: SocketAddr,
    time_ns: u64,
) -> rctl_dataplane::Decision {
    let host = w
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map_or("", |(_, v)| v.as_str());
    let hs: Vec<(&[u8], &[u8])> = w
        .headers
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    e.decide_request(&Request {
        method: w.method.as_bytes(),
        host: host.as_bytes(),
        target: w.target.as_bytes(),
        headers: &hs,
        ip: w.ip,
        dst: Some(to.ip()),
        port: to.port(),
        time_ns,
    })
}

/// The ruleset without the rules emit left out.
pub(crate) fn without(rs: &Ruleset, skipped: &[(String, String)]) -> Ruleset {
    let mut r = rs.clone();
    let keep: Vec<bool> = r
        .rules
        .iter()
        .map(|x| !skipped.iter().any(|s| s.0 == x.name))
        .collect();
    let mut i = 0;
    r.rules.retain(|_| (keep[i], i += 1).0);
    let mut i = 0;
    r.plan.retain(|_| (keep[i], i += 1).0);
    r
}

/// nginx answering 200 to everything.
pub(crate) fn backend(dir: &Path) -> (Nginx, SocketAddr) {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let http = format!("    server {{ listen {addr}; location / {{ return 200 \"ok\\n\"; }} }}");
    (
        Nginx::start(dir, &nginx::conf(dir, 1, &http), &[addr]),
        addr,
    )
}

fn start_varnish(
    dir: &Path,
    rs: &Ruleset,
    site: Option<&str>,
    be: SocketAddr,
) -> (Varnish, SocketAddr, Vec<(String, String)>) {
    let v = rctl_emit::vcl::emit(
        rs,
        &rctl_emit::vcl::Options {
            site: site.map(str::to_string),
            backend: (be.ip().to_string(), be.port()),
            skip_unsupported: true,
            ..Default::default()
        },
    )
    .expect("emit vcl");
    for (name, text) in &v.files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let front: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let main = dir.join(rctl_emit::vcl::MAIN_FILE);
    (Varnish::start(dir, &main, front), front, v.skipped)
}

fn start_haproxy(
    dir: &Path,
    rs: &Ruleset,
    be: SocketAddr,
) -> (Haproxy, SocketAddr, Vec<(String, String)>) {
    let h = rctl_emit::haproxy::emit(
        rs,
        &rctl_emit::haproxy::Options {
            client_ip_header: Some("X-Client-IP".into()),
            config_dir: dir.display().to_string(),
            skip_unsupported: true,
            ..Default::default()
        },
    )
    .expect("emit haproxy");
    let mut front_lines = String::new();
    let mut sections = String::new();
    for (name, text) in &h.files {
        std::fs::write(dir.join(name), text).unwrap();
        if name == rctl_emit::haproxy::FRONTEND_FILE {
            front_lines = text.lines().map(|l| format!("    {l}\n")).collect();
        } else if name == rctl_emit::haproxy::SECTIONS_FILE {
            sections = text.clone();
        }
    }
    let front: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = format!(
        "{}{sections}\nfrontend fe\n    bind {front}\n{front_lines}    default_backend be\n\nbackend be\n    server nginx {be}\n",
        haproxy::base(dir)
    );
    (
        Haproxy::start(dir, &config, &[], &[front]),
        front,
        h.skipped,
    )
}

/// The rulesets the servers run: the shipped rules, the corpus, and the
/// imported requestctl fixtures (with their expectations).
pub(crate) fn rulesets() -> Vec<(String, Ruleset, Vec<TestCase>)> {
    let mut paths: Vec<PathBuf> = vec![root().join("rules"), root().join("tests/fixtures/rules")];
    paths.extend(corpus_files());
    let imported = tempdir("native-import");
    let o = rctl(&[
        "import",
        "requestctl",
        root()
            .join("tests/fixtures/requestctl/tree")
            .to_str()
            .unwrap(),
        "-o",
        imported.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (dir, expect) in [
        ("varnish/cache-text", "varnish-cache-text.rctl"),
        ("haproxy/cache-text", "haproxy-cache-text.rctl"),
    ] {
        let d = imported.join(dir);
        std::fs::copy(
            root().join("tests/fixtures/requestctl/expect").join(expect),
            d.join("zz-expect.rctl"),
        )
        .unwrap();
        paths.push(d);
    }
    paths
        .into_iter()
        .map(|p| {
            let c = rctl_compiler::compile_paths(std::slice::from_ref(&p), &Default::default());
            let rs = c
                .ruleset
                .unwrap_or_else(|| panic!("{} compiles", p.display()));
            (p.display().to_string(), rs, c.tests)
        })
        .collect()
}

#[test]
fn emitted_vcl_and_haproxy_decide_as_rctl_on_every_test_request() {
    if !(varnish::require() && require(haproxy::BIN) && require(nginx::BIN)) {
        return;
    }
    let dir = tempdir("native");
    let (_nginx, be) = backend(&dir);
    let mut compared = (0, 0);
    let (mut emitted, mut total) = ((0, 0), 0);
    let mut disagreements = Vec::new();
    for (i, (name, rs, tests)) in rulesets().into_iter().enumerate() {
        let mut reqs = requests(&tests);
        if name.ends_with("tests/fixtures/rules") {
            // The dry-run fixture's rules: its incidents (the shipped rules
            // drop 127.0.0.0/8, and HAProxy's silent drop answers nothing:
            // each would wait for the read timeout).
            reqs.extend(incident_requests());
        }
        let vdir = dir.join(format!("v{i}"));
        std::fs::create_dir_all(&vdir).unwrap();
        let (varnishd, vfront, vskip) = start_varnish(&vdir, &rs, None, be);
        for (rule, why) in &vskip {
            eprintln!("varnish {name}: left out {rule}: {why}");
        }
        let sendable_reqs: Vec<Wire> = reqs.into_iter().filter(sendable).collect();
        for (what, want, got) in replay(&without(&rs, &vskip), None, vfront, &sendable_reqs) {
            compared.0 += 1;
            if want != got {
                disagreements.push(format!(
                    "varnish {name}: {what}: rctl {want}, varnishd {got}"
                ));
            }
        }
        drop(varnishd);
        let hdir = dir.join(format!("h{i}"));
        std::fs::create_dir_all(&hdir).unwrap();
        let (hap, hfront, hskip) = start_haproxy(&hdir, &rs, be);
        for (rule, why) in &hskip {
            eprintln!("haproxy {name}: left out {rule}: {why}");
        }
        emitted.0 += rs.rules.len() - vskip.len();
        emitted.1 += rs.rules.len() - hskip.len();
        total += rs.rules.len();
        for (what, want, got) in replay(&without(&rs, &hskip), None, hfront, &sendable_reqs) {
            compared.1 += 1;
            if want != got {
                disagreements.push(format!(
                    "haproxy {name}: {what}: rctl {want}, haproxy {got}"
                ));
            }
        }
        drop(hap);
    }
    eprintln!(
        "rules emitted of {total}: varnish {}, haproxy {}; requests compared: varnish {}, haproxy {}; disagreements: {}",
        emitted.0,
        emitted.1,
        compared.0,
        compared.1,
        disagreements.len()
    );
    assert!(
        compared.0 > 200 && compared.1 > 200,
        "too few requests compared: {compared:?}"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}

/// conftool 5.3.0.1's source from PyPI (sdist), or `None` (skipped, and a
/// failure under CI).
pub(crate) fn conftool_source(dir: &Path) -> Option<PathBuf> {
    let ok = std::process::Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "conftool==5.3.0.1",
            "-d",
        ])
        .arg(dir)
        .output()
        .is_ok_and(|o| o.status.success())
        && std::process::Command::new("tar")
            .arg("xzf")
            .arg(dir.join("conftool-5.3.0.1.tar.gz"))
            .arg("-C")
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
    rctl_testkit::skip::skip_unless(
        ok,
        "conftool 5.3.0.1 from PyPI (python3 -m pip download), with python3-sympy and python3-yaml",
    )
    .then(|| dir.join("conftool-5.3.0.1"))
}

#[test]
fn imported_then_emitted_vcl_decides_as_requestctls_own_vcl() {
    if !(varnish::require() && require(nginx::BIN)) {
        return;
    }
    let dir = tempdir("roundtrip");
    let Some(conftool) = conftool_source(&dir) else {
        return;
    };
    let tree = root().join("tests/fixtures/requestctl/tree");
    let (_nginx, be) = backend(&dir);
    // requestctl's own VCL for dc1.
    let oracle = dir.join("requestctl.vcl");
    let o = std::process::Command::new("python3")
        .arg(root().join("tests/requestctl_oracle.py"))
        .arg(&conftool)
        .arg(&tree)
        .arg("dc1")
        .arg(be.port().to_string())
        .arg(&oracle)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let odir = dir.join("oracle");
    std::fs::create_dir_all(&odir).unwrap();
    let ofront: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _theirs = Varnish::start(&odir, &oracle, ofront);
    // rctl's: imported, compiled, emitted for dc1.
    let imported = dir.join("imported");
    let o = rctl(&[
        "import",
        "requestctl",
        tree.to_str().unwrap(),
        "-o",
        imported.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rsdir = imported.join("varnish/cache-text");
    std::fs::copy(
        root().join("tests/fixtures/requestctl/expect/varnish-cache-text.rctl"),
        rsdir.join("zz-expect.rctl"),
    )
    .unwrap();
    let c = rctl_compiler::compile_paths(&[rsdir], &Default::default());
    let rs = c.ruleset.expect("compiles");
    let vdir = dir.join("rctl");
    std::fs::create_dir_all(&vdir).unwrap();
    let (_ours, vfront, skipped) = start_varnish(&vdir, &rs, Some("dc1"), be);
    assert!(skipped.is_empty(), "every imported rule emits: {skipped:?}");
    let reqs: Vec<Wire> = requests(&c.tests).into_iter().filter(sendable).collect();
    assert!(reqs.len() > 30, "{}", reqs.len());
    let start = Instant::now();
    let mut bad = Vec::new();
    for w in &reqs {
        let (a, b) = (send(vfront, w), send(ofront, w));
        if a != b {
            bad.push(format!(
                "{} {} from {}: rctl's VCL {a}, requestctl's {b} (at {:?})",
                w.method,
                w.target,
                w.ip,
                start.elapsed()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} differences:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// `rctl emit vcl|haproxy` (the CLI): rules the target cannot express are
/// named with the reason and refused (exit 1); with --skip-unsupported
/// the files written for the shipped rules, the corpus and the dry-run
/// fixture's rules pass `varnishd -C` and `haproxy -c`.
#[test]
fn rctl_emit_writes_files_the_servers_accept_and_refuses_with_reasons() {
    if !(varnish::require() && require(haproxy::BIN)) {
        return;
    }
    let o = rctl(&["emit", "vcl", root().join("rules").to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("drop_bogons: drop: Varnish answers every request")
            && err.contains("--skip-unsupported"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "nothing written when refused");
    // A bad option is named as the flag, without the rules' hint.
    for target in ["vcl", "haproxy"] {
        let o = rctl(&[
            "emit",
            target,
            root().join("rules").to_str().unwrap(),
            "--skip-unsupported",
            "--client-ip-header",
            "X Y",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("--client-ip-header: header \"X Y\"") && !err.contains("rule(s)"),
            "{err}"
        );
    }
    let dir = tempdir("emit-cli");
    let mut paths: Vec<PathBuf> = vec![root().join("rules"), root().join("tests/fixtures/rules")];
    paths.extend(corpus_files());
    for (i, p) in paths.iter().enumerate() {
        let p = p.to_str().unwrap();
        let v = dir.join(format!("v{i}"));
        let o = rctl(&[
            "emit",
            "vcl",
            p,
            "--skip-unsupported",
            "-o",
            v.to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "{p}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        if let Err(e) = varnish::check(&v.join(rctl_emit::vcl::MAIN_FILE), &v) {
            panic!("varnishd -C refuses the VCL for {p}:\n{e}");
        }
        let h = dir.join(format!("h{i}"));
        let o = rctl(&[
            "emit",
            "haproxy",
            p,
            "--skip-unsupported",
            "-o",
            h.to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "{p}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let front: String = std::fs::read_to_string(h.join(rctl_emit::haproxy::FRONTEND_FILE))
            .unwrap()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect();
        let cfg = h.join("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "{}frontend fe\n    bind 127.0.0.1:{}\n{front}    default_backend be\n\nbackend be\n    server s 127.0.0.1:9\n",
                haproxy::base(&h),
                free_port()
            ),
        )
        .unwrap();
        // The sections first: their global section allows normalize-uri.
        if let Err(e) = haproxy::check(&[h.join(rctl_emit::haproxy::SECTIONS_FILE), cfg]) {
            panic!("haproxy -c refuses the configuration for {p}:\n{e}");
        }
    }
}
