//! The agent behind real HAProxy 2.6 (the independent peer): HAProxy's
//! `filter spoe` sends `rctl-req` for each request, and its `http-request`
//! rules act on the variables the agent sets. What happened is read from
//! the HTTP answers, the backend's own record and HAProxy's log, never
//! from the agent's counters.
//!
//! The HAProxy side here is the minimal config that acts on the vars (the
//! full one is `rctl emit haproxy-spoe`'s). Findings against HAProxy 2.6.12
//! (Debian), which the tests pin down:
//! - `deny_status`/`status` take a constant: one `http-request return` per
//!   status the ruleset uses, selected on `var(txn.rctl.status)`.
//! - The variables need no `option force-set-var` as long as the config
//!   names each `txn.rctl.*` somewhere (here: the log-format).

#[expect(
    dead_code,
    reason = "shared with the other SPOP tests: real HAProxy is the peer here, not `Peer`"
)]
mod spop_support;

use rctl_agent::spop::data::Value;
use rctl_agent::spop::frame::{parse, Body, Frame, FrameType, Limits, Parsed};
use rctl_agent::spop::Config;
use rctl_testkit::proc::{free_port, TempDir};
use rctl_testkit::servers::haproxy::{self, Haproxy};
use rctl_testkit::skip::require;
use spop_support::wire::*;
use spop_support::*;
use std::collections::BTreeMap;

const DROP_RULES: &str = "rule gone { when path == \"/drop\" drop }\n";

/// haproxy.cfg: a frontend with the SPOE filter in front of `backend`,
/// the SPOE backend pointing at `agent` (a HAProxy server address).
fn config(front: u16, backend: u16, agent: &str, spoe_conf: &str, agent_opts: &str) -> String {
    // One thread: with several, HAProxy closes a connection to a server
    // at `maxconn` after every frame (flt_spoe.c's close_asap).
    let threads = if agent_opts.contains("maxconn") {
        "nbthread 1"
    } else {
        ""
    };
    format!(
        r#"global
    log stdout format raw local0 info
    {threads}

defaults
    mode http
    log global
    timeout connect 2s
    timeout client 10s
    timeout server 10s
    option dontlognull

frontend fe
    bind 127.0.0.1:{front}
    log-format "rctl-log %HM %HU %ST action=%[var(txn.rctl.action)] status=%[var(txn.rctl.status)] reason=%[var(txn.rctl.reason)] retry=%[var(txn.rctl.retry_after)] rule=%[var(txn.rctl.rule)] tags=%[var(txn.rctl.tags)] gen=%[var(txn.rctl.generation)] err=%[var(txn.rctl.error)]"
    filter spoe engine rctl config {spoe_conf}
    http-request silent-drop if {{ var(txn.rctl.action) -m str drop }}
    http-request return status 429 content-type text/plain lf-string "%[var(txn.rctl.reason)]" hdr Retry-After "%[var(txn.rctl.retry_after)]" if {{ var(txn.rctl.action) -m str throttle }} {{ var(txn.rctl.status) -m int 429 }}
    http-request return status 403 content-type text/plain lf-string "%[var(txn.rctl.reason)]" if {{ var(txn.rctl.action) -m str deny }} {{ var(txn.rctl.status) -m int 403 }}
    http-request return status 451 content-type text/plain lf-string "%[var(txn.rctl.reason)]" if {{ var(txn.rctl.action) -m str deny }} {{ var(txn.rctl.status) -m int 451 }}
    http-response set-header X-Requestctl "%[var(txn.rctl.tags)]" if {{ var(txn.rctl.tags) -m found }}
    default_backend web

backend web
    server web 127.0.0.1:{backend}

backend spoe-rctl
    mode tcp
    timeout connect 2s
    timeout server 3m
    option spop-check
    server agent {agent} check inter 500ms {agent_opts}
"#
    )
}

/// spoe.conf: the agent and the message, as ISSUE11.md fixes them.
fn spoe(processing: &str) -> String {
    spoe_with(processing, "no option send-frag-payload")
}

/// [`spoe`] with other agent options than `no option send-frag-payload`.
fn spoe_with(processing: &str, options: &str) -> String {
    format!(
        r#"[rctl]
spoe-agent rctl-agent
    messages rctl-req
    option var-prefix rctl
    option continue-on-error
    option set-on-error error
    {options}
    timeout hello 2s
    timeout idle 2m
    timeout processing {processing}
    use-backend spoe-rctl
    log global

spoe-message rctl-req
    args method=method host=req.hdr(host) target=pathq src=src dst=dst dst_port=dst_port h.user-agent=req.fhdr(user-agent)
    event on-frontend-http-request
"#
    )
}

/// HAProxy in front of a recording backend, the agent behind it: on its
/// unix socket, or with `relay` through a [`Tee`] on TCP. Dropped in
/// field order: HAProxy first.
struct Stack {
    h: Haproxy,
    agent: Agent,
    backend: Backend,
    tee: Option<Tee>,
    front: u16,
    _dir: TempDir,
}

/// Starts a [`Stack`]; `server_opts` go on HAProxy's agent server line.
fn stack(
    name: &str,
    rules: &str,
    agent: Config,
    relay: bool,
    server_opts: &str,
    spoe_text: &str,
) -> Option<Stack> {
    if !require(haproxy::BIN) {
        return None;
    }
    let dir = TempDir::new(name);
    let sock = dir.join("run/spoe.sock");
    let agent = Agent::start(&format!("unix:{}", sock.display()), rules, agent);
    let tee = relay.then(|| Tee::start(sock.clone()));
    let server = match &tee {
        Some(t) => format!("127.0.0.1:{}", t.port),
        None => format!("unix@{}", sock.display()),
    };
    let backend = Backend::start();
    let front = free_port();
    let spoe_conf = dir.join("spoe.conf");
    std::fs::write(&spoe_conf, spoe_text).unwrap();
    let spoe_conf = spoe_conf.display().to_string();
    let cfg = config(front, backend.port, &server, &spoe_conf, server_opts);
    let h = Haproxy::start(&dir, &cfg, &[], &[([127, 0, 0, 1], front).into()]);
    Some(Stack {
        h,
        agent,
        backend,
        tee,
        front,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_enforces_the_agents_verdicts_over_a_unix_socket() {
    let rules = format!("{RULES}{DROP_RULES}");
    let Some(st) = stack(
        "spop-haproxy",
        &rules,
        Config::default(),
        false,
        "",
        &spoe("1s"),
    ) else {
        return;
    };
    let Stack {
        h,
        agent,
        backend,
        front,
        ..
    } = &st;
    let front = *front;

    // Denied by the User-Agent: 403 with the rule's reason.
    let a = get(front, "/x", &[("User-Agent", "bot/1")]);
    assert_eq!(
        (a.status, a.body.as_str()),
        (403, "no bots"),
        "{a:?}\n{}",
        h.output()
    );
    h.wait_line(&[
        "GET /x",
        " 403 ",
        "action=deny",
        "status=403",
        "reason=no bots",
        "rule=bots",
        "gen=1",
    ]);
    // Denied by the path, with another status.
    let a = get(front, "/bad/page?q=1", &[("User-Agent", "curl/8")]);
    assert_eq!((a.status, a.body.as_str()), (451, "bad path"));
    // Throttled: the first passes, the second gets 429 and Retry-After.
    let a = get(front, "/s", &[]);
    assert_eq!((a.status, a.body.as_str()), (200, "backend"));
    let a = get(front, "/s", &[]);
    assert_eq!(a.status, 429, "{a:?}");
    let retry: u64 = a
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    h.wait_line(&[
        "GET /s",
        " 429 ",
        "action=throttle",
        "status=429",
        &format!("retry={retry}"),
        "rule=slow",
    ]);
    // Logged only: served, tagged.
    let a = get(front, "/w", &[("User-Agent", "curl/8")]);
    assert_eq!((a.status, a.header("x-requestctl")), (200, Some("watch")));
    h.wait_line(&["GET /w", " 200 ", "action=pass", "tags=watch"]);
    // Passing: served; the log shows the pass.
    let a = get(front, "/ok", &[("User-Agent", "Mozilla/5.0")]);
    assert_eq!((a.status, a.body.as_str()), (200, "backend"));
    let line = h.wait_line(&["GET /ok", " 200 ", "action=pass"]);
    assert!(
        line.contains("rule= ") || line.contains("rule=-"),
        "pass sets no rule: {line}"
    );
    // Dropped: no answer at all (silent-drop leaves the client waiting).
    let a = get_within(front, "/drop", &[], std::time::Duration::from_secs(1));
    assert_eq!((a.status, a.body.as_str()), (0, ""), "{a:?}");

    // The backend saw exactly the requests that passed.
    assert_eq!(
        backend.request_lines(),
        ["GET /s HTTP/1.1", "GET /w HTTP/1.1", "GET /ok HTTP/1.1"]
    );
    // HAProxy's health checks (HELLO with healthcheck) were answered: the
    // agent server is up, and no peer was refused.
    assert!(!h.output().contains("is DOWN"), "{}", h.output());
    assert_eq!(agent.recorder.failures(), vec![], "{}", h.output());
}

/// The frames in a recorded byte stream, as (type, stream-id, frame-id,
/// the frame's bytes with its length).
fn frames(bytes: &[u8]) -> Vec<(FrameType, u64, u64, Vec<u8>)> {
    let limits = Limits::default();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match parse(&bytes[at..], &limits) {
            Ok(Parsed::Frame(f, used)) => {
                out.push((
                    f.frame_type,
                    f.stream_id,
                    f.frame_id,
                    bytes[at..at + used].to_vec(),
                ));
                at += used;
            }
            Ok(Parsed::Incomplete { .. }) => panic!("a recorded stream ends inside a frame"),
            Err(e) => panic!("HAProxy sent a frame the codec refuses: {e}"),
        }
    }
    out
}

/// The types of the whole frames at the start of `bytes`.
fn frames_prefix(bytes: &[u8]) -> Vec<FrameType> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Ok(Parsed::Frame(f, used)) = parse(&bytes[at..], &Limits::default()) {
        out.push(f.frame_type);
        at += used;
    }
    out
}

fn parsed(bytes: &[u8]) -> Frame<'_> {
    match parse(bytes, &Limits::default()) {
        Ok(Parsed::Frame(f, _)) => f,
        r => panic!("{r:?}"),
    }
}

/// HAProxy's own frames, recorded on the wire, are what the codec and
/// ISSUE11.md's argument table expect; every NOTIFY gets exactly one ACK
/// with its ids on its connection under concurrent load; a soft stop
/// sends HAPROXY-DISCONNECT, answered with AGENT-DISCONNECT status 0.
/// With `RCTL_SPOP_SEEDS=DIR` the frames are saved there as fuzz seeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxys_frames_on_the_wire_match_the_codec_under_concurrent_load() {
    // One connection to the agent at most: HAProxy must pipeline.
    let Some(mut st) = stack(
        "spop-haproxy-tee",
        RULES,
        Config::default(),
        true,
        "maxconn 1",
        &spoe("1s"),
    ) else {
        return;
    };
    let Stack {
        h,
        agent,
        backend,
        tee,
        front,
        ..
    } = &mut st;
    let (front, tee) = (*front, tee.as_ref().unwrap());

    // 20 clients at once, 15 requests each: bots denied, others served.
    let clients: Vec<_> = (0..20)
        .map(|c| {
            std::thread::spawn(move || {
                (0..15)
                    .map(|i| {
                        let bot = (c + i) % 3 == 0;
                        let ua = if bot { "bot/9" } else { "Mozilla/5.0" };
                        let headers: &[(&str, &str)] = if i % 5 == 4 {
                            &[]
                        } else {
                            &[("User-Agent", ua)]
                        };
                        let a = get(front, &format!("/c{c}/r{i}"), headers);
                        let want = if bot && i % 5 != 4 { 403 } else { 200 };
                        assert_eq!(a.status, want, "client {c} request {i}: {a:?}");
                        want
                    })
                    .filter(|&s| s == 200)
                    .count()
            })
        })
        .collect();
    let served: usize = clients.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(backend.request_lines().len(), served);
    h.soft_stop();
    // The agent answers the HAPROXY-DISCONNECT.
    let t0 = std::time::Instant::now();
    let recorded = loop {
        let r = tee.recorded();
        let done = r.iter().all(|c| {
            let f = frames(&c.from_haproxy);
            f.first().map(|x| x.0) != Some(FrameType::HaproxyHello)
                || parsed(&f[0].3).kv().unwrap().get(b"healthcheck").is_some()
                || frames(&c.from_agent).last().map(|x| x.0) == Some(FrameType::AgentDisconnect)
        });
        if done || t0.elapsed() > std::time::Duration::from_secs(10) {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };

    let seeds = std::env::var_os("RCTL_SPOP_SEEDS").map(std::path::PathBuf::from);
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut notifies = 0;
    let mut pipelined = 0;
    for (n, c) in recorded.iter().enumerate() {
        let sent = frames(&c.from_haproxy);
        let got = frames(&c.from_agent);
        let Some(first) = sent.first() else { continue };
        assert_eq!(first.0, FrameType::HaproxyHello);
        let hello = parsed(&first.3);
        let kv = hello.kv().unwrap();
        assert_eq!(kv.get(b"supported-versions"), Some(Value::String(b"2.0")));
        assert_eq!(kv.get(b"max-frame-size"), Some(Value::Uint32(16380)));
        assert_eq!(got.first().map(|x| x.0), Some(FrameType::AgentHello));
        let check = kv.get(b"healthcheck") == Some(Value::Bool(true));
        // A health check's HELLO offers no capabilities (HAProxy builds it
        // without an agent: spoe_prepare_healthcheck_request).
        let caps: &[u8] = if check { b"" } else { b"pipelining,async" };
        assert_eq!(kv.get(b"capabilities"), Some(Value::String(caps)));
        *kinds
            .entry(if check { "healthcheck" } else { "hello" })
            .or_default() += 1;
        let mut acks: Vec<(u64, u64)> = got
            .iter()
            .filter(|x| x.0 == FrameType::Ack)
            .map(|x| (x.1, x.2))
            .collect();
        let mut ids = Vec::new();
        for (i, (t, sid, fid, bytes)) in sent.iter().enumerate().skip(1) {
            assert!(!check, "frames after a health check's HELLO");
            match t {
                FrameType::Notify => {
                    notifies += 1;
                    ids.push((*sid, *fid));
                    let f = parsed(bytes);
                    let Body::Messages(m) = &f.body else { panic!() };
                    let msgs: Vec<_> = m.iter().collect();
                    assert_eq!(msgs.len(), 1);
                    assert_eq!(msgs[0].name, b"rctl-req");
                    let args: BTreeMap<&[u8], Value<'_>> = msgs[0].args.iter().collect();
                    assert_eq!(args[&b"method"[..]], Value::String(b"GET"));
                    assert_eq!(args[&b"host"[..]], Value::String(b"query.example.org"));
                    assert!(
                        matches!(args[&b"target"[..]], Value::String(t) if t.starts_with(b"/c"))
                    );
                    assert_eq!(args[&b"src"[..]], Value::Ipv4([127, 0, 0, 1].into()));
                    assert_eq!(args[&b"dst"[..]], Value::Ipv4([127, 0, 0, 1].into()));
                    assert_eq!(args[&b"dst_port"[..]], Value::Int64(i64::from(front)));
                    // An absent header is a NULL.
                    assert!(matches!(
                        args[&b"h.user-agent"[..]],
                        Value::String(_) | Value::Null
                    ));
                    *kinds
                        .entry(if args[&b"h.user-agent"[..]] == Value::Null {
                            "notify-null"
                        } else {
                            "notify"
                        })
                        .or_default() += 1;
                }
                FrameType::HaproxyDisconnect => {
                    assert_eq!(i, sent.len() - 1, "frames after HAPROXY-DISCONNECT");
                    let items = parsed(bytes);
                    assert!(items.kv().unwrap().get(b"status-code").is_some());
                    assert_eq!(got.last().map(|x| x.0), Some(FrameType::AgentDisconnect));
                    let reply = parsed(&got.last().unwrap().3);
                    assert_eq!(
                        reply.kv().unwrap().get(b"status-code"),
                        Some(Value::Uint32(0))
                    );
                    *kinds.entry("disconnect").or_default() += 1;
                }
                t => panic!("HAProxy sent {t:?}"),
            }
            if let Some(d) = &seeds {
                let name = format!("haproxy-{n}-{i}-{t:?}.bin").to_lowercase();
                std::fs::write(d.join(name), bytes).unwrap();
            }
        }
        if let Some(d) = &seeds {
            std::fs::write(d.join(format!("haproxy-{n}-0-hello.bin")), &first.3).unwrap();
        }
        let count =
            |t: FrameType| move |b: &[u8]| frames_prefix(b).iter().filter(|x| **x == t).count();
        pipelined =
            pipelined.max(c.max_outstanding(count(FrameType::Notify), count(FrameType::Ack)));
        ids.sort();
        acks.sort();
        assert_eq!(
            ids, acks,
            "every NOTIFY acked once with its ids, on its connection"
        );
    }
    eprintln!(
        "frames seen: {kinds:?} over {} connections; at most {pipelined} NOTIFYs awaiting their ACK",
        recorded.len()
    );
    assert!(pipelined > 1, "HAProxy never pipelined");
    assert_eq!(notifies, 300, "{kinds:?}");
    for k in [
        "hello",
        "healthcheck",
        "notify",
        "notify-null",
        "disconnect",
    ] {
        assert!(kinds.contains_key(k), "no {k} frame seen: {kinds:?}");
    }
    assert_eq!(agent.recorder.failures(), vec![]);
}

/// Why the agent does not announce `async` by default: the agent's
/// connection is lost with a NOTIFY in flight (the relay drops the frame
/// and closes both sides). Without async HAProxy fails that request's
/// check at once (error 257: 256 + I/O error) and serves it unchecked;
/// with async it leaves it waiting for `timeout processing` (error 1),
/// because another connection of the thread might still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_fails_open_at_once_without_async_but_waits_with_it() {
    for announce_async in [false, true] {
        let config = Config {
            announce_async,
            ..Config::default()
        };
        let name = format!("spop-haproxy-async-{announce_async}");
        let Some(st) = stack(&name, RULES, config, true, "", &spoe("3s")) else {
            return;
        };
        let (h, front, tee) = (&st.h, st.front, st.tee.as_ref().unwrap());
        // A first request sets the connection up and is decided.
        let a = get(front, "/bad", &[]);
        assert_eq!(a.status, 451, "{a:?}\n{}", h.output());
        // The next NOTIFY is lost with its connection.
        tee.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        let t0 = std::time::Instant::now();
        let a = get(front, "/bad", &[]);
        let took = t0.elapsed();
        assert_eq!(
            (a.status, a.body.as_str()),
            (200, "backend"),
            "fails open: {a:?}"
        );
        assert!(
            !tee.cut.load(std::sync::atomic::Ordering::SeqCst),
            "the relay cut nothing"
        );
        if announce_async {
            assert!(
                took >= std::time::Duration::from_millis(2900),
                "async: {took:?}"
            );
            h.wait_line(&["GET /bad", " 200 ", "err=1"]);
        } else {
            assert!(
                took < std::time::Duration::from_millis(1500),
                "no async: {took:?}"
            );
            h.wait_line(&["GET /bad", " 200 ", "err=257"]);
        }
        eprintln!("announce async {announce_async}: the request with its check lost took {took:?}");
    }
}

/// A request too big for one frame (a 600-byte User-Agent with
/// `max-frame-size 256`): with `no option send-frag-payload` HAProxy fails
/// only that request's check (error 3) and serves it at once; with the
/// default, HAProxy refuses to fragment toward an agent that did not
/// announce fragmentation, disconnects (status 10) and the request waits
/// for `timeout processing` (error 1). The agent never sees a fragment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_frame_size_fails_open_and_needs_no_send_frag_payload() {
    let ua = format!("bot/{}", "x".repeat(600));
    for (options, err, slow) in [
        (
            "no option send-frag-payload\n    max-frame-size 256",
            "err=3",
            false,
        ),
        ("max-frame-size 256", "err=1", true),
    ] {
        let name = format!("spop-haproxy-frag-{slow}");
        let spoe_text = spoe_with("1s", options);
        let Some(st) = stack(&name, RULES, Config::default(), false, "", &spoe_text) else {
            return;
        };
        let (h, front, agent) = (&st.h, st.front, &st.agent);
        // A small request is decided (a bot: denied).
        assert_eq!(
            get(front, "/x", &[("User-Agent", "bot/1")]).status,
            403,
            "{}",
            h.output()
        );
        let t0 = std::time::Instant::now();
        let a = get(front, "/x", &[("User-Agent", &ua)]);
        let took = t0.elapsed();
        assert_eq!(
            (a.status, a.body.as_str()),
            (200, "backend"),
            "unchecked, served: {a:?}"
        );
        h.wait_line(&["GET /x", " 200 ", "action=-", err]);
        if slow {
            assert!(took >= std::time::Duration::from_millis(900), "{took:?}");
        } else {
            assert!(took < std::time::Duration::from_millis(500), "{took:?}");
        }
        assert!(
            !agent
                .recorder
                .failures()
                .iter()
                .any(|(_, d)| d.contains("fragment")),
            "HAProxy sent a fragment: {:?}",
            agent.recorder.failures()
        );
    }
}
