//! The fleet's benchmarks, with real servers on this machine:
//!
//! - **convergence**: a three-member etcd cluster and 50 `rctl agent`
//!   processes (`--no-xdp`); each of 10 pushes is timed from the start of
//!   `rctl push` until each host's report in etcd carries the new
//!   generation (read every 2 ms): p50, p99 and max over the hosts'
//!   times, and the slowest push's time until every host reported.
//!   Target: p99 ≤ 1 s.
//! - **accuracy**: Redis and four agents sharing a throttle of N = 50/s
//!   (burst 10) while clients spread over them send 10×N for 5 s; the
//!   admitted total over what one bucket allows (B + N·T, T the time the
//!   load really took; a run whose clients fall behind fails), for sync
//!   intervals of 50, 100 and 500 ms. Target: within 5% at 100 ms.
//!
//! `cargo bench --bench fleet` (needs etcd, etcdctl and redis-server;
//! `RCTL_BENCH_AGENTS` changes the number of agents, `RCTL_BENCH_ONLY`
//! = `convergence` or `accuracy` runs one).

use rctl_testkit::proc::{free_port, Proc};
use rctl_testkit::servers::etcd::Cluster;
use rctl_testkit::servers::redis::Redis;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const RCTL: &str = env!("CARGO_BIN_EXE_rctl");

fn main() {
    let only = std::env::var("RCTL_BENCH_ONLY").unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("rctl-bench-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if only.is_empty() || only == "convergence" {
        convergence(&dir.join("convergence"));
    }
    if only.is_empty() || only == "accuracy" {
        for sync in sync_list() {
            accuracy(&dir.join(format!("accuracy-{sync}")), sync);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn compile(dir: &Path, name: &str, src: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let (rctl_src, out) = (
        dir.join(format!("{name}.rctl")),
        dir.join(format!("{name}.rctlc")),
    );
    std::fs::write(&rctl_src, src).unwrap();
    let o = Command::new(RCTL)
        .arg("compile")
        .arg(&rctl_src)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn push(etcd: &str, artifact: &Path) -> i64 {
    let o = Command::new(RCTL)
        .arg("push")
        .arg(artifact)
        .args(["--etcd", etcd])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.split("generation ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("no generation in {out:?}"))
}

/// `rctl agent --no-xdp` as `host`; returns it and its check endpoint.
fn agent(dir: &Path, host: &str, etcd: &str, extra: &[&str]) -> (Proc, SocketAddr) {
    let d = dir.join(host);
    std::fs::create_dir_all(&d).unwrap();
    let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut cmd = Command::new(RCTL);
    cmd.args([
        "agent", "--no-xdp", "--host", host, "--site", "eqiad", "--etcd", etcd,
    ])
    .arg("--state-dir")
    .arg(d.join("state"))
    .arg("--run-dir")
    .arg(d.join("run"))
    .arg("--control")
    .arg(d.join("run/agent.sock"))
    .args(["--http", &http.to_string()])
    .args(extra);
    let mut p = Proc::spawn("rctl-agent", &d, cmd);
    p.wait_ready("ready", Duration::from_secs(60), |p| {
        p.stderr().contains("rctl agent: ready")
    });
    (p, http)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn convergence(dir: &Path) {
    let n: usize = std::env::var("RCTL_BENCH_AGENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let cluster = Cluster::start(&dir.join("etcd"), 3);
    let etcd = cluster.urls();
    let a = compile(dir, "a", "rule a { when path == \"/a\" deny }\n");
    let b = compile(dir, "b", "rule b { when path == \"/b\" deny }\n");
    push(&etcd, &a);
    let agents: Vec<(Proc, SocketAddr)> = (0..n)
        .map(|i| agent(dir, &format!("cp{i:03}"), &etcd, &[]))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = rctl_fleet::etcd::EtcdConfig::new(std::slice::from_ref(&etcd), "/rctl");
    let layout = config.layout();
    let client = rt.block_on(config.connect()).expect("etcd");
    // Every host's generation, from its report.
    let generations = || {
        rt.block_on(rctl_fleet::status::read(&client, &layout))
            .expect("fleet status")
            .hosts
            .into_iter()
            .filter(|h| h.live)
            .map(|h| (h.host, h.generation))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let wait_all = |g: i64, limit: Duration| {
        let start = Instant::now();
        while generations().values().filter(|&&x| x >= g).count() < n {
            assert!(start.elapsed() < limit, "not converged in {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_all(1, Duration::from_secs(60));
    let mut times = Vec::new();
    let mut slowest_push = Duration::ZERO;
    for round in 0..10 {
        let art = if round % 2 == 0 { &b } else { &a };
        let start = Instant::now();
        let g = push(&etcd, art);
        let mut seen = std::collections::BTreeMap::new();
        while seen.len() < n {
            for (h, gen) in generations() {
                if gen >= g {
                    seen.entry(h).or_insert_with(|| start.elapsed());
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "push {round}: not converged"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let all = *seen.values().max().unwrap();
        slowest_push = slowest_push.max(all);
        times.extend(seen.into_values());
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "convergence, {n} agents, 10 pushes ({} host reports), from the start of rctl push: \
         p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; slowest push until every host reported {:.0} ms",
        times.len(),
        ms(percentile(&times, 0.50)),
        ms(percentile(&times, 0.99)),
        ms(*times.last().unwrap()),
        ms(slowest_push),
    );
    drop(agents);
}

/// One check request on a keep-alive connection: the status code.
///
/// The request goes out in one write: `write!` on the socket writes each
/// piece of the format on its own, and with Nagle's algorithm the pieces
/// after the first wait for the agent's delayed ACK (40 ms), which held
/// each client to ~23 requests a second instead of 125.
fn check(s: &mut BufReader<TcpStream>, path: &str, ip: &str) -> u16 {
    let req = format!("GET /check{path} HTTP/1.1\r\nHost: agent.test\r\nX-Real-Ip: {ip}\r\n\r\n");
    s.get_mut().write_all(req.as_bytes()).unwrap();
    let mut line = String::new();
    s.read_line(&mut line).unwrap();
    let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut len = 0;
    loop {
        line.clear();
        s.read_line(&mut line).unwrap();
        if line.trim_end().is_empty() {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            if n.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    status
}

fn accuracy(dir: &Path, sync_ms: u64) {
    const N: u64 = 50;
    const BURST: u64 = 10;
    const T: u64 = 5;
    const H: usize = 4;
    let cluster = Cluster::start(&dir.join("etcd"), 1);
    let etcd = cluster.urls();
    let redis = Redis::start(&dir.join("redis"));
    let art = compile(
        dir,
        "shared",
        &format!(
            "rule api {{ when path starts_with \"/api/\" \
             throttle {N} requests per 1s burst {BURST} by path shared }}\n"
        ),
    );
    push(&etcd, &art);
    let sync = sync_ms.to_string();
    let agents: Vec<(Proc, SocketAddr)> = (0..H)
        .map(|i| {
            agent(
                dir,
                &format!("cp{i}"),
                &etcd,
                &["--redis", &redis.url(), "--sync-ms", &sync],
            )
        })
        .collect();
    // Every agent runs the ruleset and syncs with Redis, which sees four.
    let start = Instant::now();
    for i in 0..H {
        let sock = dir.join(format!("cp{i}/run/agent.sock"));
        loop {
            let o = Command::new(RCTL)
                .args(["status", "--format", "json", "--agent"])
                .arg(&sock)
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            let s = &v["agent"]["status"];
            let sh = &s["fleet"]["shared"];
            if sh["online"] == true && sh["hosts"] == H as u64 && s["rules"] == 1 {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "not online: {v}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let per_host = 10 * N / H as u64;
    let gap = Duration::from_micros(1_000_000 / per_host);
    let mut runs = Vec::new();
    for run in 0..3 {
        let path = format!("/api/run{run}");
        let began = Instant::now();
        let threads: Vec<_> = agents
            .iter()
            .map(|(_, http)| {
                let (http, path) = (*http, path.clone());
                std::thread::spawn(move || {
                    let tcp = TcpStream::connect(http).unwrap();
                    tcp.set_nodelay(true).unwrap();
                    let mut s = BufReader::new(tcp);
                    let start = Instant::now();
                    let mut ok = 0u64;
                    for k in 0..per_host * T {
                        let at = start + gap * k as u32;
                        if let Some(d) = at.checked_duration_since(Instant::now()) {
                            std::thread::sleep(d);
                        }
                        let ip = format!("198.51.100.{}", 1 + k % 200);
                        match check(&mut s, &path, &ip) {
                            200 => ok += 1,
                            429 => {}
                            other => panic!("status {other}"),
                        }
                    }
                    ok
                })
            })
            .collect();
        let each: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        // What one bucket allows over the time the load really took: the
        // clients fall behind their schedule when the machine is busy,
        // and B + N·T over a longer run is no bound.
        let took = began.elapsed().as_secs_f64();
        let allowed = BURST as f64 + N as f64 * took;
        if std::env::var_os("RCTL_BENCH_VERBOSE").is_some() {
            eprintln!(
                "run {run}: admitted per host {each:?} in {took:.2} s, one bucket allows {allowed:.0}"
            );
        }
        assert!(
            took < T as f64 * 1.2,
            "the clients fell behind: {took:.2} s for {T} s of load"
        );
        let admitted: u64 = each.iter().sum();
        runs.push(admitted as f64 / allowed);
    }
    let mean = runs.iter().sum::<f64>() / runs.len() as f64;
    println!(
        "accuracy, sync {sync_ms} ms, {H} hosts, {N}/s burst {BURST}, 10x offered for {T} s: \
         admitted / allowed = {} (mean {mean:.3})",
        runs.iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    drop(agents);
    drop(redis);
}

/// The sync intervals the accuracy bench runs (`RCTL_BENCH_SYNC=100,500`).
fn sync_list() -> Vec<u64> {
    std::env::var("RCTL_BENCH_SYNC")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![50, 100, 500])
}
