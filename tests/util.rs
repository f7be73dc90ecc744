//! Helpers shared by the integration tests.

use rctl_compiler::{compile_str, Compilation, Options};
use rctl_dataplane::{Decision, Engine, EngineConfig, NaiveEngine, Request, Verdict};
pub use rctl_testkit::proc::TempDir;
use rctl_testkit::servers::serve::Serve;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// Compiles a source string.
pub fn compile(src: &str) -> Compilation {
    compile_str("t.rctl", src, &Options::default())
}

/// Compiles and asserts there are no errors; returns an engine.
pub fn engine(src: &str) -> Both {
    engine_at(src, None)
}

/// Like [`engine`], for one site.
pub fn engine_at(src: &str, site: Option<&str>) -> Both {
    let c = compile(src);
    let rendered: Vec<String> = c.diagnostics.iter().map(|d| d.render(&c.sources)).collect();
    let rs = c
        .ruleset
        .unwrap_or_else(|| panic!("does not compile:\n{}", rendered.join("\n")));
    let config = EngineConfig {
        site: site.map(String::from),
        ..Default::default()
    };
    Both {
        fast: Engine::new(rs.clone(), &config).expect("engine"),
        naive: NaiveEngine::new(rs, &config).expect("naive"),
    }
}

/// (code, line, col) of every diagnostic, in source order.
pub fn codes(src: &str) -> Vec<(&'static str, u32, u32)> {
    let c = compile(src);
    c.diagnostics
        .sorted()
        .iter()
        .map(|d| {
            let s = d.location().unwrap_or_default();
            (d.code, s.line, s.col)
        })
        .collect()
}

/// A request builder with sensible defaults.
pub struct Req {
    pub method: &'static str,
    pub host: &'static str,
    pub target: String,
    pub headers: Vec<(&'static str, String)>,
    pub ip: IpAddr,
    pub dst: Option<IpAddr>,
    pub port: u16,
    pub t_ms: u64,
}

impl Req {
    pub fn get(target: &str) -> Req {
        Req {
            method: "GET",
            host: "example.org",
            target: target.into(),
            headers: Vec::new(),
            ip: "198.51.100.1".parse().unwrap(),
            dst: None,
            port: 443,
            t_ms: 0,
        }
    }
    pub fn ip(mut self, ip: &str) -> Req {
        self.ip = ip.parse().unwrap();
        self
    }
    pub fn dst(mut self, ip: &str) -> Req {
        self.dst = Some(ip.parse().unwrap());
        self
    }
    pub fn header(mut self, n: &'static str, v: &str) -> Req {
        self.headers.push((n, v.into()));
        self
    }
    pub fn method(mut self, m: &'static str) -> Req {
        self.method = m;
        self
    }
    pub fn host(mut self, h: &'static str) -> Req {
        self.host = h;
        self
    }
    pub fn at(mut self, ms: u64) -> Req {
        self.t_ms = ms;
        self
    }
    /// Decides and shows the verdict.
    pub fn run(&self, e: &Both) -> String {
        let v = self.decide(e).verdict;
        show(e, &v)
    }
    pub fn request<'a>(&'a self, hs: &'a [(&'a [u8], &'a [u8])]) -> Request<'a> {
        Request {
            method: self.method.as_bytes(),
            host: self.host.as_bytes(),
            target: self.target.as_bytes(),
            headers: hs,
            ip: self.ip,
            dst: self.dst,
            port: self.port,
            time_ns: 1_000_000_000_000 + self.t_ms * 1_000_000,
        }
    }
    pub fn decide(&self, e: &Both) -> Decision {
        let hs: Vec<(&[u8], &[u8])> = self
            .headers
            .iter()
            .map(|(a, b)| (a.as_bytes(), b.as_bytes()))
            .collect();
        e.decide_request(&self.request(&hs))
    }
}

/// The compiled engine and the reference evaluator on the same ruleset:
/// every decision is made by both, and they must agree.
pub struct Both {
    pub fast: Engine,
    pub naive: NaiveEngine,
}

impl Both {
    pub fn decide_request(&self, r: &Request<'_>) -> Decision {
        let d = self.fast.decide_request(r);
        assert_eq!(
            d,
            self.naive.decide_request(r),
            "compiled engine and reference disagree on {r:?}"
        );
        d
    }
    pub fn decide_packet(&self, p: &rctl_dataplane::Packet) -> Decision {
        let d = self.fast.decide_packet(p);
        assert_eq!(
            d,
            self.naive.decide_packet(p),
            "compiled engine and reference disagree on {p:?}"
        );
        d
    }
    pub fn rule(&self, i: usize) -> &rctl_compiler::ir::Rule {
        self.fast.rule(i)
    }
}

/// "pass" or "kind:rule" for a verdict.
pub fn show(e: &Both, v: &Verdict) -> String {
    match v.rule() {
        Some(i) => format!("{}:{}", v.kind(), e.rule(i).name),
        None => v.kind().to_string(),
    }
}

/// Decides a packet and shows the verdict.
pub fn pkt(e: &Both, p: &rctl_dataplane::Packet) -> String {
    let v = e.decide_packet(p).verdict;
    show(e, &v)
}

/// A fresh, empty temporary directory, removed with what is in it when
/// the guard is dropped.
pub fn tempdir(tag: &str) -> TempDir {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "rctl-test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir::adopt(d)
}

/// Runs the rctl binary.
pub fn rctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(args)
        .output()
        .expect("run rctl")
}

/// `rctl serve` from this package's binary, as [`Serve::start`] starts
/// it.
pub fn serve(dir: &Path, artifact: &Path, http: SocketAddr, extra: &[&str]) -> Serve {
    Serve::start(
        dir,
        artifact,
        http,
        extra,
        Command::new(env!("CARGO_BIN_EXE_rctl")),
    )
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The decision corpus: every `tests/corpus/*.rctl`, sorted.
pub fn corpus_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/corpus"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rctl"))
        .collect();
    files.sort();
    files
}
