//! Shared by the SPOP tests: a judge from rule text, an observer that
//! records, a peer that speaks SPOP over a real socket, and a running
//! agent that stops on drop; in [`wire`], what surrounds HAProxy.

pub mod wire;

use rctl_agent::judge::{Fields, Generation, Judge, Observer, Outcome};
use rctl_agent::spop::data::Value;
use rctl_agent::spop::frame::{parse, Body, Encoder, FrameType, Limits, Parsed};
use rctl_agent::spop::{serve_with, Config, Listener};
use rctl_dataplane::{Decision, Engine, EngineConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The ruleset most tests run.
pub const RULES: &str = r#"
rule bots { when header("user-agent") starts_with "bot/" deny 403 "no bots" }
rule bad { when path starts_with "/bad" deny 451 "bad path" }
rule watch { when path == "/w" log }
rule slow { when path == "/s" throttle 1 requests per 1m burst 1 by ip }
"#;

/// A judge for `src`.
pub fn judge(src: &str) -> Arc<Judge> {
    Arc::new(Judge::new(generation(src, 1), false))
}

/// Generation `number` of the rules `src`.
pub fn generation(src: &str, number: u64) -> Generation {
    let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
    let rs = c.ruleset.expect("rules compile");
    let engine = Engine::new(rs, &EngineConfig::default()).expect("engine");
    Generation {
        engine,
        sha256: String::new(),
        number,
        installed_unix: 0,
    }
}

/// Records what the agent reports.
#[derive(Default)]
pub struct Recorder {
    /// (action, target, elapsed) per decision.
    pub decided: Mutex<Vec<(String, Vec<u8>, Duration)>>,
    /// (label, detail) per failure.
    pub failed: Mutex<Vec<(String, String)>>,
    /// Sleep this long in the first decision (to hold frames in flight).
    pub hold_first: Mutex<Option<(Duration, tokio::sync::oneshot::Sender<()>)>>,
}

impl Observer for Recorder {
    fn decided(
        &self,
        _: &Generation,
        f: &Fields<'_>,
        o: &Outcome,
        _: &Decision,
        elapsed: Duration,
    ) {
        if let Some((d, tx)) = self.hold_first.lock().unwrap().take() {
            let _ = tx.send(());
            std::thread::sleep(d);
        }
        self.decided.lock().unwrap().push((
            o.action.as_str().to_string(),
            f.target.to_vec(),
            elapsed,
        ));
    }
    fn failed(&self, kind: &'static str, detail: &str) {
        self.failed
            .lock()
            .unwrap()
            .push((kind.to_string(), detail.to_string()));
    }
}

impl Recorder {
    pub fn failures(&self) -> Vec<(String, String)> {
        self.failed.lock().unwrap().clone()
    }
}

/// An agent serving on a background task; stops when dropped.
pub struct Agent {
    pub address: String,
    pub judge: Arc<Judge>,
    pub recorder: Arc<Recorder>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<Result<(), rctl_agent::spop::SpopError>>>,
}

impl Agent {
    pub fn start(addr: &str, rules: &str, config: Config) -> Agent {
        Agent::serve(Listener::bind(addr).expect("bind"), rules, config)
    }

    /// On TCP, with at most `total` connections.
    pub fn tcp_limited(total: usize) -> Agent {
        let bind = rctl_agent::listen::Bind {
            limits: rctl_agent::peers::PeerLimits {
                total,
                per_peer: total,
                reserved: 0,
            },
            ..Default::default()
        };
        let ep = rctl_agent::listen::Endpoint::parse("tcp:127.0.0.1:0").unwrap();
        let l = Listener::bind_with(&ep, &bind).expect("bind");
        Agent::serve(l, RULES, Config::default())
    }

    fn serve(listener: Listener, rules: &str, config: Config) -> Agent {
        let address = listener.address();
        let recorder = Arc::new(Recorder::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let judge = judge(rules);
        let task = tokio::spawn(serve_with(
            listener,
            judge.clone(),
            recorder.clone(),
            config,
            async move {
                let _ = rx.await;
            },
        ));
        Agent {
            address,
            judge,
            recorder,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub fn tcp(config: Config) -> Agent {
        Agent::start("tcp:127.0.0.1:0", RULES, config)
    }

    /// Asks for a graceful shutdown and waits for serve() to return.
    pub async fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("serve returns after shutdown")
                .unwrap()
                .unwrap();
        }
    }

    pub async fn connect(&self) -> Peer {
        Peer::connect(&self.address).await
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// What the agent sent, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Hello(Vec<(String, String)>),
    Disconnect(u64, String),
    Ack(u64, u64, Vec<(String, String)>),
    /// The agent closed the connection.
    Closed,
}

fn show(v: Value<'_>) -> String {
    match v {
        Value::String(s) | Value::Binary(s) => String::from_utf8_lossy(s).into_owned(),
        Value::Int32(i) => i.to_string(),
        Value::Int64(i) => i.to_string(),
        Value::Uint32(i) => i.to_string(),
        Value::Uint64(i) => i.to_string(),
        v => format!("{v:?}"),
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A peer playing HAProxy.
pub struct Peer {
    io: Box<dyn Io>,
    buf: Vec<u8>,
}

/// Builds one frame with the codec's encoder.
pub fn frame(t: FrameType, sid: u64, fid: u64, f: impl FnOnce(&mut Encoder<'_>)) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out, t, sid, fid);
    f(&mut e);
    e.finish();
    out
}

/// A HAPROXY-HELLO as HAProxy 2.6 sends it.
pub fn hello(max: u32, caps: &str, healthcheck: bool) -> Vec<u8> {
    frame(FrameType::HaproxyHello, 0, 0, |e| {
        e.kv(b"supported-versions", Value::String(b"2.0"))
            .kv(b"max-frame-size", Value::Uint32(max))
            .kv(b"capabilities", Value::String(caps.as_bytes()));
        if healthcheck {
            e.kv(b"healthcheck", Value::Bool(true));
        }
    })
}

/// A NOTIFY with one `rctl-req`.
pub fn notify(sid: u64, fid: u64, target: &[u8], ua: &[u8]) -> Vec<u8> {
    frame(FrameType::Notify, sid, fid, |e| {
        e.message(
            b"rctl-req",
            &[
                (b"method", Value::String(b"GET")),
                (b"host", Value::String(b"query.example.org")),
                (b"target", Value::String(target)),
                (b"src", Value::Ipv4([192, 0, 2, 7].into())),
                (b"dst_port", Value::Int64(443)),
                (b"h.user-agent", Value::String(ua)),
                (b"h.cache-control", Value::Null),
            ],
        );
    })
}

impl Peer {
    pub async fn connect(addr: &str) -> Peer {
        Peer::try_connect(addr).await.expect("connect")
    }

    /// A connection, if the address accepts one.
    pub async fn try_connect(addr: &str) -> Option<Peer> {
        let io: Box<dyn Io> = if let Some(p) = addr.strip_prefix("unix:") {
            Box::new(tokio::net::UnixStream::connect(p).await.ok()?)
        } else {
            let a = addr.strip_prefix("tcp:")?;
            Box::new(tokio::net::TcpStream::connect(a).await.ok()?)
        };
        let buf = Vec::new();
        Some(Peer { io, buf })
    }

    /// Writes `bytes` until done or the agent closes.
    pub async fn send_all_ignoring_errors(&mut self, bytes: &[u8]) {
        let _ = self.io.write_all(bytes).await;
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.expect("send");
    }

    /// Closes the write side (the agent reads end of stream).
    pub async fn half_close(&mut self) {
        self.io.shutdown().await.expect("shutdown");
    }

    /// The next frame the agent sent, within 10 s.
    pub async fn recv(&mut self) -> Reply {
        tokio::time::timeout(Duration::from_secs(10), self.recv_inner())
            .await
            .expect("the agent answers within 10 s")
    }

    async fn recv_inner(&mut self) -> Reply {
        let limits = Limits::default();
        loop {
            match parse(&self.buf, &limits).expect("the agent's frame parses") {
                Parsed::Frame(f, used) => {
                    let kv = |f: &rctl_agent::spop::frame::Frame<'_>| -> Vec<(String, String)> {
                        f.kv()
                            .unwrap()
                            .iter()
                            .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), show(v)))
                            .collect()
                    };
                    let r = match (f.frame_type, &f.body) {
                        (FrameType::AgentHello, _) => Reply::Hello(kv(&f)),
                        (FrameType::AgentDisconnect, _) => {
                            let items = kv(&f);
                            let get = |k: &str| {
                                items
                                    .iter()
                                    .find(|(n, _)| n == k)
                                    .map(|(_, v)| v.clone())
                                    .unwrap()
                            };
                            Reply::Disconnect(get("status-code").parse().unwrap(), get("message"))
                        }
                        (FrameType::Ack, Body::Actions(a)) => Reply::Ack(
                            f.stream_id,
                            f.frame_id,
                            a.iter()
                                .map(|a| match a {
                                    rctl_agent::spop::frame::Action::SetVar {
                                        name, value, ..
                                    } => (String::from_utf8_lossy(name).into_owned(), show(value)),
                                    rctl_agent::spop::frame::Action::UnsetVar { name, .. } => (
                                        format!("unset {}", String::from_utf8_lossy(name)),
                                        String::new(),
                                    ),
                                })
                                .collect(),
                        ),
                        (t, _) => panic!("the agent sent a frame of type {t:?}"),
                    };
                    self.buf.drain(..used);
                    return r;
                }
                Parsed::Incomplete { .. } => {
                    let mut chunk = [0u8; 4096];
                    match self.io.read(&mut chunk).await {
                        Ok(0) | Err(_) => return Reply::Closed,
                        Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                    }
                }
            }
        }
    }

    /// Sends a HELLO and checks the AGENT-HELLO.
    pub async fn handshake(&mut self) {
        self.send(&hello(16380, "pipelining,async", false)).await;
        match self.recv().await {
            Reply::Hello(_) => {}
            r => panic!("no AGENT-HELLO: {r:?}"),
        }
    }
}

/// The value of `name` in an ACK's vars.
pub fn var<'a>(vars: &'a [(String, String)], name: &str) -> Option<&'a str> {
    vars.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}
