//! `rctl tap` against the real agent's HTTP check endpoint: every
//! request decided while the tap is open is one line, in order, with the
//! fields it was decided on; a fifth tap at once, an agent that is not
//! there, and flags that cannot go together are refused, saying why.

use super::*;

const UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

fn rctl_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rctl"));
    c.args(args);
    c
}

/// `rctl ARGS`, started; returns once its tap is open.
fn tapping(dir: &Path, name: &str, args: &[&str]) -> Proc {
    let mut p = Proc::spawn(name, dir, rctl_cmd(args));
    p.wait_ready("the tap open", Duration::from_secs(20), |p| {
        p.stderr().contains("rctl: tapping the agent at")
    });
    p
}

fn wait(p: &mut Proc) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = p.exited() {
            return s;
        }
        assert!(Instant::now() < deadline, "{}", p.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn agent_tap_writes_every_request_in_order_and_refuses_clearly() {
    let dir = tempdir("agent-tap");
    let art = compile(&dir, "tap", "");
    let a = Agent::start(&art, &[]);
    let control = a.control.display().to_string();
    let out = dir.join("tap.jsonl");
    let o = out.to_str().unwrap();
    let mut tap = tapping(
        &dir,
        "tap",
        &["tap", "--agent", &control, "--for", "5s", "-o", o],
    );
    // Three more open at once; a fifth is refused.
    let mut more: Vec<Proc> = (0..3)
        .map(|i| {
            tapping(
                &dir,
                &format!("tap{i}"),
                &["tap", "--agent", &control, "--for", "5s", "-o", "/dev/null"],
            )
        })
        .collect();
    let fifth = a.rctl(&["tap", "--for", "1s"]);
    let err = String::from_utf8_lossy(&fifth.stderr);
    assert!(!fifth.status.success(), "{err}");
    assert!(err.contains("4 taps are open already"), "{err}");
    // A reader that goes away frees its tap at once, not at its end.
    let mut gone = more.pop().unwrap();
    gone.kill();
    let mut tries = 0;
    while !a
        .rctl(&["tap", "--for", "1s", "-o", "/dev/null"])
        .status
        .success()
    {
        tries += 1;
        assert!(tries < 20, "the killed reader's tap is still open");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Requests, each from its own address; one User-Agent with a
    // bidirectional override (HTTP has no controls in header values),
    // one path that is not UTF-8.
    let mut c = a.conn();
    let mut sent = Vec::new();
    for i in 0..60u32 {
        let ip = format!("93.184.216.{}", 1 + i % 50);
        let (target, ua): (Vec<u8>, Vec<u8>) = match i % 4 {
            0 => (format!("/wiki/Q{i}").into_bytes(), UA.into()),
            1 => (
                format!("/sparql?query=SELECT%20{i}").into_bytes(),
                b"python-requests/2.31.0".to_vec(),
            ),
            2 => (b"/w/\xff?x=1".to_vec(), "bad\u{202e}/1".as_bytes().to_vec()),
            _ => (format!("/a?b={i}?c").into_bytes(), UA.into()),
        };
        let t = [&b"/check"[..], &target].concat();
        let t = String::from_utf8_lossy(&t).replace('\u{fffd}', "%FF");
        let hdrs: [(&str, &[u8]); 3] = [
            ("X-Rctl-Client-Ip", ip.as_bytes()),
            ("X-Rctl-Target", &target),
            ("User-Agent", &ua),
        ];
        let r = c.send("GET", &t, &hdrs).unwrap();
        assert!(
            r.status == 200 || r.status == 403 || r.status == 429,
            "{r:?}"
        );
        sent.push((ip, target, ua));
    }
    assert!(wait(&mut tap).success(), "{}", tap.logs());
    for p in &mut more {
        assert!(wait(p).success(), "{}", p.logs());
    }
    let err = tap.stderr();
    assert!(
        err.contains("60 requests") && err.contains(" 0 lost"),
        "{err}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), sent.len(), "{text}");
    for (l, (ip, target, ua)) in lines.iter().zip(&sent) {
        assert_eq!(l["ip"], ip.as_str(), "{l}");
        assert_eq!(l["http_method"], "GET", "{l}");
        assert_eq!(l["uri_host"], "agent.test", "{l}");
        let target = String::from_utf8_lossy(target);
        let (path, query) = match target.find('?') {
            Some(q) => target.split_at(q),
            None => (&target[..], ""),
        };
        assert_eq!(
            (l["uri_path"].as_str(), l["uri_query"].as_str()),
            (Some(path), Some(query)),
            "{l}"
        );
        assert_eq!(l["user_agent"], String::from_utf8_lossy(ua).as_ref(), "{l}");
    }
    // The override is escaped as the matched-request log escapes it.
    assert!(text.contains(r#""user_agent":"bad\u202e/1""#), "{text}");
    // The file is a webrequest log.
    let rules = root().join("rules");
    let d = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .arg("dry-run")
        .arg(&rules)
        .args(["--log", o, "--log-format", "webrequest", "--format", "json"])
        .output()
        .unwrap();
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let d: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(d["totals"]["captured_requests"], 60, "{}", d["totals"]);
    assert_eq!(d["totals"]["requests"], 60, "{}", d["totals"]);
    assert_eq!(
        d["inputs"][0]["bad_lines"].as_u64().unwrap_or(0),
        0,
        "{}",
        d["inputs"]
    );

    // What cannot be done is refused, saying what to do.
    let r = rules.to_str().unwrap();
    let refused = |args: &[&str], says: &str| {
        let o = rctl_cmd(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    let gone = dir.join("run/none.sock");
    let g = gone.to_str().unwrap();
    refused(&["tap", "--agent", g, "--for", "1s"], "start the agent");
    refused(
        &["dry-run", r, "--agent", g, "--for", "1s"],
        "start the agent",
    );
    refused(
        &["suggest", r, "--agent", g, "--for", "1s"],
        "start the agent",
    );
    refused(
        &["tap", "--agent", &control, "--for", "0s"],
        "not a duration",
    );
    refused(&["dry-run", r, "--agent", &control], "--for");
    refused(
        &["dry-run", r, "--agent", &control, "--for", "1s", "--follow"],
        "--follow a log as it grows: use one",
    );
    refused(
        &[
            "dry-run",
            r,
            "--agent",
            &control,
            "--for",
            "1s",
            "--sampled",
            "128",
        ],
        "not a sample",
    );
}
