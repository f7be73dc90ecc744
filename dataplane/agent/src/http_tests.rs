//! The check endpoint's request fields and answers, without sockets.

use super::*;
use crate::byrule::tests::generation;
use crate::judge::NoObserver;
use std::sync::Mutex;

const RULES: &str = r#"
rule watch { when path starts_with "/w" log }
rule bots { when header("user-agent") starts_with "bot/" deny 451 "no bots" }
rule gone { when path == "/gone" drop }
rule slow { when path == "/s" and ip == 192.0.2.9 throttle 1 requests per 1m burst 1 by ip }
rule api_post { when method == "POST" and host == "api.example.org" and path == "/api" and dst_ip == 198.51.100.1 and port == 8443 deny 403 "post" }
"#;

fn judge() -> Judge {
    Judge::new(generation(RULES, 4), false)
}

/// Records failures by kind.
#[derive(Default)]
struct Failures(Mutex<Vec<&'static str>>);

impl Observer for Failures {
    fn decided(
        &self,
        _: &crate::judge::Generation,
        _: &Fields<'_>,
        _: &Outcome,
        _: &rctl_dataplane::Decision,
        _: Duration,
    ) {
    }
    fn failed(&self, kind: &'static str, _: &str) {
        self.0.lock().unwrap().push(kind);
    }
}

fn ask(j: &Judge, uri: &str, headers: &[(&str, &[u8])], obs: &dyn Observer) -> Answer {
    let mut h = HeaderMap::new();
    for (n, v) in headers {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_bytes(v).unwrap(),
        );
    }
    check_parts(&hyper::Method::GET, &uri.parse().unwrap(), &h, j, obs)
}

fn hdr<'a>(a: &'a Answer, n: &str) -> Option<&'a str> {
    a.headers().get(n).map(|v| v.to_str().unwrap())
}

const CLIENT: (&str, &[u8]) = ("x-rctl-client-ip", b"192.0.2.9");

#[test]
fn envoy_gets_the_verdicts_status_and_the_original_path_from_its_prefix() {
    let j = judge();
    let a = ask(
        &j,
        "/check/x",
        &[CLIENT, ("user-agent", b"bot/1")],
        &NoObserver,
    );
    assert_eq!(a.status(), 451);
    assert_eq!(hdr(&a, "x-rctl-action"), Some("deny"));
    assert_eq!(hdr(&a, "x-rctl-reason"), Some("no bots"));
    assert_eq!(hdr(&a, "x-rctl-rule"), Some("bots"));
    assert_eq!(hdr(&a, "x-rctl-generation"), Some("4"));
    // The target follows /check: /s is throttled after its burst.
    let ok = ask(&j, "/check/s?x=1", &[CLIENT], &NoObserver);
    assert_eq!(ok.status(), 200);
    let t = ask(&j, "/check/s", &[CLIENT], &NoObserver);
    assert_eq!(t.status(), 429);
    assert_eq!(hdr(&t, "x-rctl-action"), Some("throttle"));
    let retry: u64 = hdr(&t, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Drop cannot be done by Envoy: a 403 saying drop.
    let d = ask(&j, "/check/gone", &[CLIENT], &NoObserver);
    assert_eq!(
        (d.status().as_u16(), hdr(&d, "x-rctl-action")),
        (403, Some("drop"))
    );
}

#[test]
fn nginx_gets_403_for_every_block_with_the_status_in_a_header() {
    let j = judge();
    let t = [
        CLIENT,
        ("x-rctl-target", b"/w/1" as &[u8]),
        ("user-agent", b"bot/2"),
    ];
    let a = ask(&j, "/check/nginx", &t, &NoObserver);
    assert_eq!(a.status(), 403);
    assert_eq!(hdr(&a, "x-rctl-status"), Some("451"));
    assert_eq!(hdr(&a, "x-requestctl"), Some("watch"));
    let d = ask(
        &j,
        "/check",
        &[
            CLIENT,
            ("x-rctl-mode", b"nginx"),
            ("x-rctl-target", b"/gone"),
        ],
        &NoObserver,
    );
    assert_eq!(
        (d.status().as_u16(), hdr(&d, "x-rctl-status")),
        (403, Some("444"))
    );
    let p = ask(
        &j,
        "/check/nginx",
        &[CLIENT, ("x-rctl-target", b"/w")],
        &NoObserver,
    );
    assert_eq!(p.status(), 200);
    assert_eq!(hdr(&p, "x-rctl-action"), Some("pass"));
    assert_eq!(hdr(&p, "x-requestctl"), Some("watch"));
}

#[test]
fn every_field_can_be_named_by_header() {
    let j = judge();
    let all: [(&str, &[u8]); 6] = [
        CLIENT,
        ("x-rctl-method", b"POST"),
        ("x-rctl-host", b"api.example.org"),
        ("x-rctl-target", b"/api"),
        ("x-rctl-dst-ip", b"198.51.100.1"),
        ("x-rctl-port", b"8443"),
    ];
    assert_eq!(ask(&j, "/check", &all, &NoObserver).status(), 403);
    for i in 1..all.len() {
        let mut less = all.to_vec();
        less.remove(i);
        let a = ask(&j, "/check", &less, &NoObserver);
        assert_eq!(a.status(), 200, "without {}", all[i].0);
    }
}

#[test]
fn the_client_comes_from_x_real_ip_or_the_last_forwarded_for() {
    let j = judge();
    let slow = |h: &[(&str, &[u8])]| {
        let j2 = judge();
        ask(&j2, "/check/s", h, &NoObserver);
        ask(&j2, "/check/s", h, &NoObserver).status().as_u16()
    };
    assert_eq!(slow(&[("x-real-ip", b"192.0.2.9")]), 429);
    assert_eq!(
        slow(&[("x-forwarded-for", b"203.0.113.1, 192.0.2.9")]),
        429,
        "the last entry is the client"
    );
    assert_eq!(
        slow(&[("x-forwarded-for", b"192.0.2.9, 203.0.113.1")]),
        200,
        "an entry the client wrote itself is not trusted"
    );
    let _ = j;
}

#[test]
fn hostile_or_incomplete_requests_get_a_clear_400_and_are_counted() {
    let j = judge();
    let f = Failures::default();
    for (uri, h, says) in [
        ("/check/x", vec![], "no client address"),
        (
            "/check/x",
            vec![("x-rctl-client-ip", b"\xff\xfe" as &[u8])],
            "X-Rctl-Client-Ip: not an IP",
        ),
        (
            "/check/x",
            vec![("x-rctl-client-ip", b"1.2.3.4.5")],
            "not an IP",
        ),
        (
            "/check/x",
            vec![CLIENT, ("x-rctl-port", b"99999")],
            "X-Rctl-Port: not a port",
        ),
        (
            "/check/x",
            vec![CLIENT, ("x-rctl-dst-ip", b"nope")],
            "X-Rctl-Dst-Ip",
        ),
        (
            "/check/x",
            vec![("x-forwarded-for", b"a, b")],
            "X-Forwarded-For",
        ),
        ("/check/nginx", vec![CLIENT], "no target"),
        (
            "/check",
            vec![CLIENT, ("x-rctl-mode", b"apache")],
            "X-Rctl-Mode",
        ),
    ] {
        let a = ask(&j, uri, &h, &f);
        assert_eq!(a.status(), 400, "{h:?}");
        let e = hdr(&a, "x-rctl-error").unwrap();
        assert!(e.contains(says), "{e} / {says}");
    }
    // Bytes that are not UTF-8 in ordinary headers and the target are
    // decided on as bytes.
    let a = ask(
        &j,
        "/check/nginx",
        &[
            CLIENT,
            ("x-rctl-target", b"/w\xff"),
            ("user-agent", b"bot/\xff"),
        ],
        &f,
    );
    assert_eq!(a.status(), 403);
    assert_eq!(ask(&j, "/other", &[CLIENT], &f).status(), 404);
    let kinds = f.0.lock().unwrap().clone();
    assert_eq!(kinds.iter().filter(|k| **k == "http-request").count(), 8);
    assert_eq!(kinds.last(), Some(&"http-path"));
}

#[test]
fn shadow_mode_answers_200_and_says_what_it_kept_back() {
    let j = Judge::new(generation(RULES, 1), true);
    let a = ask(
        &j,
        "/check/x",
        &[CLIENT, ("user-agent", b"bot/1")],
        &NoObserver,
    );
    assert_eq!(a.status(), 200);
    assert_eq!(hdr(&a, "x-rctl-shadow"), Some("deny"));
    assert_eq!(hdr(&a, "x-rctl-rule"), Some("bots"));
}

#[test]
fn reasons_that_a_header_cannot_hold_are_cleaned_not_fatal() {
    let mut h = HeaderMap::new();
    set(&mut h, "x-rctl-reason", "bad\u{7}é\nreason");
    assert_eq!(h["x-rctl-reason"], "bad???reason");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_bound_are_closed_and_served_again_once_one_closes() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let bind = crate::listen::Bind {
        limits: crate::peers::PeerLimits {
            total: 1,
            per_peer: 1,
            reserved: 0,
        },
        ..crate::listen::Bind::default()
    };
    let l = crate::listen::Listener::bind(
        &crate::listen::Endpoint::Tcp("127.0.0.1:0".parse().unwrap()),
        &bind,
    )
    .unwrap();
    let crate::listen::Endpoint::Tcp(addr) = l.endpoint() else {
        panic!()
    };
    let (trigger, shutdown) = crate::shutdown::channel();
    let server = tokio::spawn(serve(
        l,
        Arc::new(judge()),
        Arc::new(NoObserver),
        Limits::default(),
        shutdown,
    ));
    async fn ask(s: &mut tokio::net::TcpStream) -> std::io::Result<[u8; 12]> {
        let req = b"GET /check/x HTTP/1.1\r\nHost: a\r\nX-Rctl-Client-Ip: 192.0.2.1\r\n\r\n";
        s.write_all(req).await?;
        let mut b = [0u8; 12];
        s.read_exact(&mut b).await.map(|_| b)
    }
    let mut a = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_eq!(&ask(&mut a).await.unwrap(), b"HTTP/1.1 200");
    // A second connection is closed without an answer while the first
    // holds the only slot.
    let mut b = tokio::net::TcpStream::connect(addr).await.unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(5), ask(&mut b)).await;
    assert!(
        matches!(refused, Ok(Err(_))),
        "a second connection was served past the bound"
    );
    drop(a);
    let mut served = false;
    for _ in 0..100 {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        if let Ok(Ok(b)) = tokio::time::timeout(Duration::from_secs(5), ask(&mut c)).await {
            assert_eq!(&b, b"HTTP/1.1 200");
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "a slot freed by a closed connection is reused");
    trigger.fire();
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("drained")
        .unwrap();
}
