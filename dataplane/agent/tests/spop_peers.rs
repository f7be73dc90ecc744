//! The SPOE agent over real sockets: the handshake, decisions, pipelining,
//! and hostile peers. Each hostile peer gets its AGENT-DISCONNECT status
//! and is closed, and the agent goes on serving a new connection.

#[expect(
    dead_code,
    reason = "shared with the other SPOP tests: this one plays HAProxy itself and uses no `wire`"
)]
mod spop_support;

use rctl_agent::spop::data::Value;
use rctl_agent::spop::frame::{Encoder, FrameType};
use rctl_agent::spop::{Config, Limits, Status};
use spop_support::*;
use std::time::Duration;

/// A fresh connection still gets decisions.
async fn still_serves(agent: &Agent) {
    let mut p = agent.connect().await;
    p.handshake().await;
    p.send(&notify(1, 1, b"/bad", b"curl/8")).await;
    match p.recv().await {
        Reply::Ack(1, 1, vars) => assert_eq!(var(&vars, "action"), Some("deny")),
        r => panic!("no ACK after a hostile peer: {r:?}"),
    }
}

/// Expects AGENT-DISCONNECT with `status`, then the close.
async fn refused(p: &mut Peer, status: Status) -> String {
    let msg = match p.recv().await {
        Reply::Disconnect(code, msg) => {
            assert_eq!(code, u64::from(status.code()), "{msg}");
            msg
        }
        r => panic!("expected AGENT-DISCONNECT {status:?}, got {r:?}"),
    };
    assert_eq!(p.recv().await, Reply::Closed);
    msg
}

#[tokio::test]
async fn handshake_negotiates_size_and_capabilities_without_fragmentation() {
    let agent = Agent::tcp(Config {
        limits: Limits {
            max_frame_size: 4096,
            ..Limits::default()
        },
        ..Config::default()
    });
    let mut p = agent.connect().await;
    p.send(&hello(16380, "pipelining, async,fragmentation", false))
        .await;
    let want = |size: &str, caps: &str| {
        Reply::Hello(vec![
            ("version".into(), "2.0".into()),
            ("max-frame-size".into(), size.into()),
            ("capabilities".into(), caps.into()),
        ])
    };
    assert_eq!(p.recv().await, want("4096", "pipelining"));
    // HAProxy's size when it is the smaller; no capability offered, none
    // announced.
    let mut p = agent.connect().await;
    p.send(&hello(300, "", false)).await;
    assert_eq!(p.recv().await, want("300", ""));
    // By default HAProxy's size is echoed up to 65,532 (tune.bufsize
    // 64 KiB); async only when configured.
    let agent = Agent::tcp(Config {
        announce_async: true,
        ..Config::default()
    });
    let mut p = agent.connect().await;
    p.send(&hello(32764, "pipelining,async", false)).await;
    assert_eq!(p.recv().await, want("32764", "pipelining,async"));
}

#[tokio::test]
async fn a_health_check_gets_its_hello_and_the_close() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.send(&hello(16380, "pipelining,async", true)).await;
    assert!(matches!(p.recv().await, Reply::Hello(_)));
    assert_eq!(p.recv().await, Reply::Closed);
    assert!(agent.recorder.failures().is_empty());
}

#[tokio::test]
async fn notify_is_decided_and_acked_with_the_vars_and_ids() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    p.send(&notify(7, 300, b"/x", b"bot/2")).await;
    let Reply::Ack(7, 300, vars) = p.recv().await else {
        panic!("no ACK for stream 7 frame 300")
    };
    assert_eq!(
        vars,
        [
            ("action", "deny"),
            ("status", "403"),
            ("generation", "1"),
            ("rule", "bots"),
            ("reason", "no bots")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    p.send(&notify(8, 1, b"/s", b"curl/8")).await;
    p.send(&notify(8, 2, b"/s", b"curl/8")).await;
    let Reply::Ack(8, 1, first) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&first, "action"), Some("pass"));
    let Reply::Ack(8, 2, second) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&second, "action"), Some("throttle"));
    assert_eq!(var(&second, "status"), Some("429"));
    assert!(var(&second, "retry_after").unwrap().parse::<u64>().unwrap() >= 1);
    p.send(&notify(9, 1, b"/w", b"curl/8")).await;
    let Reply::Ack(9, 1, logged) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&logged, "tags"), Some("watch"));
    let d = agent.recorder.decided.lock().unwrap().clone();
    assert_eq!(d.len(), 4);
    assert!(d
        .iter()
        .all(|(_, _, el)| *el > Duration::ZERO && *el < Duration::from_secs(1)));
}

#[tokio::test]
async fn a_new_generation_decides_the_next_frame_on_the_same_connection() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    p.send(&notify(1, 1, b"/bad", b"x")).await;
    let Reply::Ack(1, 1, vars) = p.recv().await else {
        panic!()
    };
    assert_eq!(
        (var(&vars, "rule"), var(&vars, "generation")),
        (Some("bad"), Some("1"))
    );
    // A ruleset with more rules and patterns: the connection's engine
    // scratch must be remade for it, not reused.
    let next = "rule b { when header(\"user-agent\") ~* \"curl|wget\" log }\n\
                rule a { when path ~ \"^/n[0-9]+$\" deny 410 \"gone\" }\n\
                rule c { when query(\"q\") == \"1\" deny 400 \"q\" }\n";
    agent.judge.install(generation(next, 2));
    p.send(&notify(2, 1, b"/n42", b"curl/8")).await;
    let Reply::Ack(2, 1, vars) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&vars, "rule"), Some("a"));
    assert_eq!(
        (
            var(&vars, "status"),
            var(&vars, "tags"),
            var(&vars, "generation")
        ),
        (Some("410"), Some("b"), Some("2"))
    );
    p.send(&notify(2, 2, b"/bad", b"x")).await;
    let Reply::Ack(2, 2, vars) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&vars, "action"), Some("pass"));
}

#[tokio::test]
async fn pipelined_notifies_in_one_write_are_all_acked_with_their_ids() {
    let agent = Agent::tcp(Config {
        max_in_flight: 16,
        ..Config::default()
    });
    let mut p = agent.connect().await;
    p.handshake().await;
    let mut burst = Vec::new();
    for i in 0..500u64 {
        let target: &[u8] = if i % 2 == 0 { b"/bad" } else { b"/ok" };
        burst.extend(notify(1000 + i, i, target, b"curl/8"));
    }
    p.send(&burst).await;
    for i in 0..500u64 {
        let Reply::Ack(sid, fid, vars) = p.recv().await else {
            panic!()
        };
        assert_eq!((sid, fid), (1000 + i, i));
        let want = if i % 2 == 0 { "deny" } else { "pass" };
        assert_eq!(var(&vars, "action"), Some(want));
    }
}

#[tokio::test]
async fn other_messages_get_an_ack_without_verdict_and_bytes_need_not_be_utf8() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    let f = frame(FrameType::Notify, 3, 4, |e| {
        e.message(b"other", &[(b"src", Value::Ipv4([192, 0, 2, 1].into()))]);
    });
    p.send(&f).await;
    let unset = || vec![("unset action".to_string(), String::new())];
    assert_eq!(p.recv().await, Reply::Ack(3, 4, unset()));
    // Invalid UTF-8 in the target and a header: decided on as bytes.
    p.send(&notify(5, 6, b"/bad\xff\xfe", b"\xc3\x28")).await;
    let Reply::Ack(5, 6, vars) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&vars, "rule"), Some("bad"));
    p.send(&notify(5, 7, b"/\xff", b"bot/\xff")).await;
    let Reply::Ack(5, 7, vars) = p.recv().await else {
        panic!()
    };
    assert_eq!(var(&vars, "rule"), Some("bots"));
    // A rctl-req without src: acked without actions, reported.
    let f = frame(FrameType::Notify, 5, 8, |e| {
        e.message(b"rctl-req", &[(b"target", Value::String(b"/bad"))]);
    });
    p.send(&f).await;
    assert_eq!(p.recv().await, Reply::Ack(5, 8, unset()));
    assert_eq!(agent.recorder.failures()[0].0, "spop-args");
}

#[tokio::test]
async fn haproxy_disconnect_is_answered_with_status_0() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    let f = frame(FrameType::HaproxyDisconnect, 0, 0, |e| {
        e.kv(b"status-code", Value::Uint32(0))
            .kv(b"message", Value::String(b"normal"));
    });
    p.send(&f).await;
    refused(&mut p, Status::Normal).await;
    assert!(agent.recorder.failures().is_empty());
}

#[tokio::test]
async fn notify_before_hello_is_refused_as_invalid() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.send(&notify(1, 1, b"/", b"x")).await;
    let msg = refused(&mut p, Status::Invalid).await;
    assert!(msg.contains("before HAPROXY-HELLO"), "{msg}");
    assert_eq!(agent.recorder.failures()[0].0, "spop-frame");
    still_serves(&agent).await;
}

#[tokio::test]
async fn hello_errors_get_their_own_statuses() {
    let agent = Agent::tcp(Config::default());
    let cases: Vec<(Vec<u8>, Status)> = vec![
        (
            frame(FrameType::HaproxyHello, 0, 0, |e| {
                e.kv(b"supported-versions", Value::String(b"1.0, 3.0"))
                    .kv(b"max-frame-size", Value::Uint32(16380))
                    .kv(b"capabilities", Value::String(b""));
            }),
            Status::BadVersion,
        ),
        (
            frame(FrameType::HaproxyHello, 0, 0, |e| {
                e.kv(b"supported-versions", Value::String(b"2.0"))
                    .kv(b"capabilities", Value::String(b""));
            }),
            Status::NoFrameSize,
        ),
        (hello(255, "", false), Status::BadFrameSize),
        (
            frame(FrameType::HaproxyHello, 0, 0, |e| {
                e.kv(b"max-frame-size", Value::Uint32(16380));
            }),
            Status::NoVersion,
        ),
        (
            frame(FrameType::HaproxyHello, 0, 0, |e| {
                e.kv(b"supported-versions", Value::String(b"2.0"))
                    .kv(b"max-frame-size", Value::Uint32(16380));
            }),
            Status::NoCapabilities,
        ),
    ];
    for (bytes, status) in cases {
        let mut p = agent.connect().await;
        p.send(&bytes).await;
        refused(&mut p, status).await;
    }
    still_serves(&agent).await;
}

#[tokio::test]
async fn a_frame_cut_by_the_peer_closing_is_an_io_error() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    let f = notify(1, 1, b"/", b"x");
    p.send(&f[..f.len() - 3]).await;
    p.half_close().await;
    let msg = refused(&mut p, Status::Io).await;
    assert!(msg.contains("inside a frame"), "{msg}");
    still_serves(&agent).await;
}

#[tokio::test]
async fn a_frame_over_the_negotiated_size_is_refused_from_its_length() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.send(&hello(1024, "pipelining", false)).await;
    assert!(matches!(p.recv().await, Reply::Hello(_)));
    // 1025 bytes announced; only the length is sent.
    p.send(&1025u32.to_be_bytes()).await;
    let msg = refused(&mut p, Status::TooBig).await;
    assert!(msg.contains("1025") && msg.contains("1024"), "{msg}");
    still_serves(&agent).await;
}

#[tokio::test]
async fn unknown_frame_types_and_agent_types_are_refused_as_invalid() {
    let agent = Agent::tcp(Config::default());
    for t in [50u8, FrameType::Ack as u8, FrameType::HaproxyHello as u8] {
        let mut p = agent.connect().await;
        p.handshake().await;
        let mut out = Vec::new();
        Encoder::with_flags(&mut out, t, 1, 0, 0).finish();
        p.send(&out).await;
        refused(&mut p, Status::Invalid).await;
    }
    still_serves(&agent).await;
}

#[tokio::test]
async fn fragments_are_refused_with_status_10() {
    let agent = Agent::tcp(Config::default());
    for (t, flags) in [(3u8, 0u32), (0, 1)] {
        let mut p = agent.connect().await;
        p.handshake().await;
        let mut out = Vec::new();
        let mut e = Encoder::with_flags(&mut out, t, flags, 1, 1);
        e.message(b"rctl-req", &[]);
        e.finish();
        p.send(&out).await;
        refused(&mut p, Status::FragmentationNotSupported).await;
    }
    still_serves(&agent).await;
}

#[tokio::test]
async fn thousands_of_args_are_refused_as_a_resource_limit() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    // 10 messages of 255 args: 2,550 args in 10 KB, over the 1,024 limit.
    let args: Vec<(&[u8], Value<'_>)> = (0..255).map(|_| (&b"h.x"[..], Value::Null)).collect();
    let f = frame(FrameType::Notify, 1, 1, |e| {
        for _ in 0..10 {
            e.message(b"rctl-req", &args);
        }
    });
    assert!(f.len() < 16380);
    p.send(&f).await;
    let msg = refused(&mut p, Status::Resource).await;
    assert!(msg.contains("1024 arguments"), "{msg}");
    assert_eq!(agent.recorder.failures()[0].0, "spop-limit");
    still_serves(&agent).await;
}

#[tokio::test]
async fn a_bad_varint_is_refused_as_invalid_with_its_offset() {
    let agent = Agent::tcp(Config::default());
    let mut p = agent.connect().await;
    p.handshake().await;
    // Type NOTIFY, FIN, then a stream-id of 12 continuation bytes.
    let mut body = vec![3, 0, 0, 0, 1];
    body.extend([0xFF; 12]);
    let mut bad = (body.len() as u32).to_be_bytes().to_vec();
    bad.extend(body);
    p.send(&bad).await;
    let msg = refused(&mut p, Status::Invalid).await;
    assert!(msg.contains("at byte 5") && msg.contains("varint"), "{msg}");
    still_serves(&agent).await;
}

#[tokio::test]
async fn a_peer_stalling_mid_frame_is_timed_out() {
    let agent = Agent::tcp(Config {
        frame_timeout: Duration::from_millis(300),
        ..Config::default()
    });
    let mut p = agent.connect().await;
    p.handshake().await;
    let f = notify(1, 1, b"/", b"x");
    let t0 = std::time::Instant::now();
    p.send(&f[..10]).await;
    let msg = refused(&mut p, Status::Timeout).await;
    assert!(msg.contains("frame timeout"), "{msg}");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert_eq!(agent.recorder.failures()[0].0, "spop-timeout");
    still_serves(&agent).await;
}

#[tokio::test]
async fn a_silent_peer_is_timed_out_at_hello() {
    let agent = Agent::tcp(Config {
        hello_timeout: Duration::from_millis(200),
        ..Config::default()
    });
    let mut p = agent.connect().await;
    refused(&mut p, Status::Timeout).await;
    still_serves(&agent).await;
}

#[tokio::test]
async fn connections_over_the_limit_are_refused_with_status_13() {
    let agent = Agent::tcp_limited(2);
    let mut a = agent.connect().await;
    a.handshake().await;
    let mut b = agent.connect().await;
    b.handshake().await;
    let mut c = agent.connect().await;
    let msg = refused(&mut c, Status::Resource).await;
    assert!(msg.contains("more than 2 connections"), "{msg}");
    drop(a);
    // The slot frees once the agent sees the close.
    let mut ok = false;
    for _ in 0..50 {
        let mut d = agent.connect().await;
        d.send(&hello(16380, "", false)).await;
        if let Reply::Hello(_) = d.recv().await {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "a slot freed by a closed connection is reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_acks_frames_in_flight_then_disconnects_with_status_0() {
    let mut agent = Agent::tcp(Config::default());
    let (tx, rx) = tokio::sync::oneshot::channel();
    *agent.recorder.hold_first.lock().unwrap() = Some((Duration::from_millis(300), tx));
    let mut p = agent.connect().await;
    p.handshake().await;
    let mut burst = Vec::new();
    for i in 0..20 {
        burst.extend(notify(1, i, b"/bad", b"x"));
    }
    p.send(&burst).await;
    // The first decision is under way, the other 19 frames are buffered:
    // shut down now.
    rx.await.unwrap();
    let stopping = tokio::spawn(async move {
        agent.shutdown().await;
        agent
    });
    for i in 0..20 {
        let Reply::Ack(1, fid, _) = p.recv().await else {
            panic!("frame {i} in flight was not acked")
        };
        assert_eq!(fid, i);
    }
    refused(&mut p, Status::Normal).await;
    let agent = stopping.await.unwrap();
    assert!(
        Peer::try_connect(&agent.address).await.is_none(),
        "still accepting after shutdown"
    );
}

#[tokio::test]
async fn a_peer_that_does_not_read_its_acks_is_dropped_after_the_frame_timeout() {
    let dir = rctl_testkit::proc::TempDir::new("spop-unread");
    let addr = format!("unix:{}/spoe.sock", dir.display());
    let config = Config {
        frame_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let agent = Agent::start(&addr, RULES, config);
    let mut p = agent.connect().await;
    p.handshake().await;
    // 20,000 NOTIFYs, never reading an ACK: the agent's writes fill the
    // socket, it stops reading, and the write times out.
    let mut burst = Vec::new();
    for i in 0..20_000u64 {
        burst.extend(notify(i, 1, b"/ok", b"curl/8"));
    }
    let writer = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(10), p.send_all_ignoring_errors(&burst)).await
    });
    let t0 = std::time::Instant::now();
    loop {
        let failures = agent.recorder.failures();
        if let Some((label, detail)) = failures.first() {
            assert_eq!(label, "spop-timeout");
            assert!(detail.contains("write timeout"), "{detail}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the stalled peer was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        writer.await.unwrap().is_ok(),
        "the peer's writes were never released"
    );
    still_serves(&agent).await;
}
