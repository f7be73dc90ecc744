//! nginx in front of `rctl serve --http`, configured by `rctl emit nginx`:
//! large heads a browser can send, and the largest nginx takes with its
//! default buffers, are checked by the agent (not refused, and not turned
//! into a 500); any answer of the agent that is not a verdict lets the
//! request through, logged as unchecked. Outcomes are read from nginx's
//! own access log.

use super::stack::compile;
use super::{emit_nginx, nginx_http};
use crate::util::{serve, tempdir};
use rctl_testkit::proc::free_port;
use rctl_testkit::servers::nginx::{self, Nginx};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One request head (`\n` line ends are nginx's shortest); the status.
fn send(addr: SocketAddr, head: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// `GET TARGET` with `Host: host`, then `lines`, `Connection: close`,
/// each line ended by CRLF.
fn head(target: &str, host: &str, lines: &[String]) -> Vec<u8> {
    head_ending(target, host, lines, "\r\n")
}

/// [`head`] with lines ended by `eol` (nginx also takes a bare LF).
fn head_ending(target: &str, host: &str, lines: &[String], eol: &str) -> Vec<u8> {
    let mut h = format!("GET {target} HTTP/1.1{eol}Host: {host}{eol}");
    for l in lines {
        h.push_str(l);
        h.push_str(eol);
    }
    h.push_str(&format!("Connection: close{eol}{eol}"));
    h.into_bytes()
}

/// A browser's headers, and `extra` after them.
fn browser(extra: &[String]) -> Vec<String> {
    let mut v: Vec<String> = [
        "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language: en-GB,en;q=0.7,fr;q=0.3",
        "Accept-Encoding: gzip, deflate, br, zstd",
        "Referer: https://en.wikipedia.org/wiki/Main_Page",
        "Upgrade-Insecure-Requests: 1",
        "Sec-Fetch-Dest: document",
        "Sec-Fetch-Mode: navigate",
        "Sec-Fetch-Site: same-origin",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend_from_slice(extra);
    v
}

/// `(path, status, check)` of each line of the `rctl` log format.
fn logged(log: &str) -> Vec<(String, u16, String)> {
    log.lines()
        .filter_map(|l| {
            let request = l.split('"').nth(1)?;
            let path = request.split(' ').nth(1)?.to_string();
            let status = l
                .split('"')
                .nth(2)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            let check = l.rsplit_once(" check=")?.1.to_string();
            Some((path, status, check))
        })
        .collect()
}

const RULES: &str = r#"
rule marked {
  when header("x-mark") == "deny-me"
  deny 451 "marked"
}
"#;

#[test]
fn large_heads_through_nginx_are_checked_by_the_agent() {
    if !rctl_testkit::skip::require(nginx::BIN) {
        return;
    }
    let dir = tempdir("nginx-heads");
    let src = dir.join("r.rctl");
    std::fs::write(&src, RULES).unwrap();
    let art = compile(&dir, "r", &[src]);
    let addr = |p| SocketAddr::from(([127, 0, 0, 1], p));
    let agent = serve(&dir, &art, addr(free_port()), &[]);
    let emitted = emit_nginx(&art, &dir, &["--agent", &agent.http.to_string()]);
    let (front, app) = (addr(free_port()), addr(free_port()));
    let ngx = Nginx::start(
        &dir,
        &nginx::conf(&dir, 1, &nginx_http(&dir, &emitted, front, app)),
        &[front, app],
    );
    let cookie = |c: char| format!("Cookie: {c}={}", c.to_string().repeat(7 * 1024));
    let cookies = vec![cookie('a'), cookie('b'), cookie('c')];
    let many: Vec<String> = (0..110).map(|i| format!("X-Client-Hint-{i}: ?0")).collect();
    // Near the largest heads nginx takes with its default buffers (no
    // line over 8 KiB, four of them) and limit of 1,000 header lines (the
    // origin is an nginx too, and gets a few more from the front): a Host
    // of 8,185 bytes (the longest) with two 8,100-byte cookies and 990
    // three-byte headers (with LF line ends, the shortest; about 38,000
    // bytes reach the agent), and 990 headers besides Host and Connection.
    let long_host = "h".repeat(8185);
    let full: Vec<String> = [8100, 8100]
        .iter()
        .map(|n| format!("Cookie:{}", "c".repeat(*n)))
        .chain((0..990).map(|_| "a:".to_string()))
        .collect();
    let tiny: Vec<String> = (0..990).map(|_| "a:".to_string()).collect();
    let mark = |mut v: Vec<String>| {
        v.push("X-Mark: deny-me".into());
        v
    };
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "/cookies",
            head("/cookies", "en.wikipedia.org", &browser(&cookies)),
            200,
        ),
        (
            "/many",
            head("/many", "en.wikipedia.org", &browser(&many)),
            200,
        ),
        ("/full", head_ending("/full", &long_host, &full, "\n"), 200),
        (
            "/tiny",
            head_ending("/tiny", "en.wikipedia.org", &tiny, "\n"),
            200,
        ),
        // Checked, so the rules still decide.
        (
            "/cookies-marked",
            head(
                "/cookies-marked",
                "en.wikipedia.org",
                &mark(browser(&cookies)),
            ),
            451,
        ),
        (
            "/many-marked",
            head("/many-marked", "en.wikipedia.org", &mark(browser(&many))),
            451,
        ),
        (
            "/full-marked",
            head_ending(
                "/full-marked",
                &long_host,
                &mark(full[..full.len() - 10].to_vec()),
                "\n",
            ),
            451,
        ),
    ];
    for (path, h, want) in &cases {
        assert_eq!(
            send(front, h),
            *want,
            "{path}\n{}{}",
            agent.proc.logs(),
            ngx.log("error.log")
        );
    }
    let log = logged(&ngx.log("front.log"));
    let want: Vec<(String, u16, String)> = cases
        .iter()
        .map(|(p, _, st)| {
            let check = if *st == 200 { "200" } else { "403" };
            (p.to_string(), *st, check.to_string())
        })
        .collect();
    assert_eq!(log, want, "{}", ngx.log("error.log"));
    // The origin served the unmarked ones.
    assert_eq!(ngx.log("app.log").lines().count(), 4);
}

/// The statuses a check endpoint could answer that are not verdicts.
const NOT_VERDICTS: [u16; 16] = [
    301, 302, 400, 401, 404, 405, 409, 413, 414, 418, 429, 431, 500, 501, 502, 599,
];

#[test]
fn every_answer_but_a_verdict_lets_the_request_through_nginx_unchecked() {
    if !rctl_testkit::skip::require(nginx::BIN) {
        return;
    }
    let dir = tempdir("nginx-not-verdicts");
    let src = dir.join("r.rctl");
    std::fs::write(&src, RULES).unwrap();
    let art = compile(&dir, "r", &[src]);
    let addr = |p| SocketAddr::from(([127, 0, 0, 1], p));
    // Not the agent: an nginx server answering the status the client
    // asked for in X-Stub-Status (nginx forwards the client's headers).
    let stub = addr(free_port());
    let emitted = emit_nginx(&art, &dir, &["--agent", &stub.to_string()]);
    let (front, app) = (addr(free_port()), addr(free_port()));
    let mut answers = String::new();
    for st in NOT_VERDICTS {
        let text = if (300..400).contains(&st) {
            "http://elsewhere.example/".to_string()
        } else {
            format!("\"{st}\\n\"")
        };
        answers.push_str(&format!(
            "            if ($http_x_stub_status = {st}) {{ return {st} {text}; }}\n"
        ));
    }
    let http = format!(
        "{}    server {{\n        listen {stub};\n        access_log off;\n        location / {{\n{answers}            return 200;\n        }}\n    }}\n",
        nginx_http(&dir, &emitted, front, app)
    );
    let ngx = Nginx::start(&dir, &nginx::conf(&dir, 1, &http), &[front, app, stub]);
    for st in NOT_VERDICTS {
        let h = head(
            &format!("/{st}"),
            "x.example",
            &[format!("X-Stub-Status: {st}")],
        );
        assert_eq!(
            send(front, &h),
            200,
            "the agent's {st}\n{}",
            ngx.log("error.log")
        );
    }
    let log = logged(&ngx.log("front.log"));
    let want: Vec<(String, u16, String)> = NOT_VERDICTS
        .iter()
        .map(|st| (format!("/{st}"), 200, st.to_string()))
        .collect();
    assert_eq!(log, want);
    assert_eq!(ngx.log("app.log").lines().count(), NOT_VERDICTS.len());
}
