//! The edge proxies with and without rctl, in one run, on this machine:
//!
//! - `haproxy`: HAProxy → nginx (the baseline);
//! - `haproxy+spoe`: HAProxy asking `rctl serve --spoe` (the shipped
//!   rules; configuration from `rctl emit haproxy-spoe`) → nginx;
//! - `haproxy-native`: HAProxy with the shipped rules written natively
//!   (ACLs, `src -f` lists, stick tables tracking request rates, as
//!   requestctl's HAProxy output does) → nginx;
//! - `nginx`: nginx → nginx (the baseline for the next);
//! - `nginx+auth`: nginx `auth_request` to `rctl serve --http`
//!   (`rctl emit nginx`) → nginx.
//!
//! Everything runs in a private network namespace (root), so the
//! client's address is a public one the shipped rules evaluate in full
//! (on 127/8 they would drop everything as bogons). Requests are readers'
//! (`GET /wiki/Main_Page`, a browser User-Agent): every rule is evaluated
//! and none blocks, which is what most traffic costs.
//!
//! Cores: the servers (HAProxy with one thread, the nginx front, the
//! origin, the agent) share CPU 0 and wrk runs alone on CPU 1 (`taskset`),
//! so the agent's work shows as the servers' throughput it takes; with
//! `RCTL_BENCH_PIN=0` nothing is pinned. Each configuration is measured
//! at saturation (wrk, one thread, 32 connections, requests/s and p50/p99
//! latency) and unloaded (one connection: the latency a request pays
//! without queueing), in `RCTL_BENCH_ROUNDS` interleaved rounds (default
//! 3) of `RCTL_BENCH_SECS` seconds (default 8); the table gives medians
//! and ratios against the same round's baseline. The agent's CPU per
//! request is its utime+stime (/proc) over the run divided by the
//! requests wrk completed.
//!
//! With `RCTL_BENCH_RT=1` the one-connection runs (only those) put the
//! servers and wrk at the lowest real-time priority (`chrt -f 1`), so
//! that other jobs on a shared machine do not add their scheduling
//! quanta to the latency measured; saturation runs never do.
//!
//! `cargo bench --bench edge` (as root; needs haproxy, nginx, wrk);
//! `RCTL_BENCH_CONFIGS=nginx,nginx+auth` measures only those.

use rctl_testkit::lab::{self, Inside};
use rctl_testkit::median;
use rctl_testkit::proc::{cpu_seconds, group, tail};
use rctl_testkit::servers::haproxy::{self, Haproxy};
use rctl_testkit::servers::nginx::{self, Nginx};
use rctl_testkit::servers::serve::Serve;
use rctl_testkit::skip::require;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The edge's address (the fronts listen on it) and the client's.
const EDGE: &str = "185.15.59.224";
const ORIGIN: &str = "127.0.0.1:8080";
const AGENT_HTTP: &str = "127.0.0.1:9781";

struct Config {
    name: &'static str,
    port: u16,
    /// The baseline it is compared with.
    baseline: &'static str,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "haproxy",
        port: 8001,
        baseline: "haproxy",
    },
    Config {
        name: "haproxy+spoe",
        port: 8002,
        baseline: "haproxy",
    },
    Config {
        name: "haproxy-native",
        port: 8003,
        baseline: "haproxy",
    },
    Config {
        name: "nginx",
        port: 8005,
        baseline: "nginx",
    },
    Config {
        name: "nginx+auth",
        port: 8004,
        baseline: "nginx",
    },
];

/// One wrk run.
#[derive(Clone, Debug, Default)]
struct Run {
    rps: f64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    requests: f64,
    non_2xx: u64,
    errors: u64,
    agent_cpu_s: f64,
    front_cpu_s: f64,
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `c` is measured: `RCTL_BENCH_CONFIGS` (comma-separated
/// names; a configuration needs its baseline) or all.
fn selected(c: &Config) -> bool {
    match std::env::var("RCTL_BENCH_CONFIGS") {
        Ok(list) => list.split(',').any(|n| n == c.name),
        Err(_) => true,
    }
}

fn pinned() -> bool {
    env("RCTL_BENCH_PIN", 1) == 1
}

/// `cmd` on CPU `cpu` (through taskset) when pinning.
fn on_cpu(cpu: u32, program: &str) -> Command {
    if pinned() {
        let mut c = Command::new("taskset");
        c.args(["-c", &cpu.to_string(), program]);
        c
    } else {
        Command::new(program)
    }
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    if !lab::available() {
        eprintln!("edge bench: needs root (a private network namespace)");
        return;
    }
    for p in ["haproxy", "nginx", "wrk"] {
        if !require(p) {
            return;
        }
    }
    // Left when main returns, after the servers below are stopped.
    let _netns = Inside::private(&[EDGE]);
    let dir = std::env::temp_dir().join(format!("rctl-bench-edge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let artifact = dir.join("shipped.rctlc");
    rctl(&["compile", path(&root.join("rules")), "-o", path(&artifact)]);

    let origin: SocketAddr = ORIGIN.parse().unwrap();
    let origin_dir = sub(&dir, "origin");
    let origin_conf = nginx::conf(
        &origin_dir,
        1,
        &format!("    server {{ listen {origin}; location / {{ return 200 \"ok\\n\"; }} }}\n"),
    );
    let origin_ngx = start_nginx(&origin_dir, &origin_conf, &[origin]);

    let agent_dir = sub(&dir, "agent");
    let agent = Serve::start(
        &agent_dir,
        &artifact,
        AGENT_HTTP.parse().unwrap(),
        &[],
        on_cpu(0, env!("CARGO_BIN_EXE_rctl")),
    );

    let hap_dir = sub(&dir, "haproxy");
    let spoe = format!("unix:{}", agent.spoe.display());
    rctl(&[
        "emit",
        "haproxy-spoe",
        path(&artifact),
        "-o",
        path(&hap_dir.join("emit")),
        "--agent",
        &spoe,
    ]);
    let hap = start_haproxy(&hap_dir, &root, origin);

    let ngx_dir = sub(&dir, "nginx-front");
    rctl(&[
        "emit",
        "nginx",
        path(&artifact),
        "-o",
        path(&ngx_dir.join("emit")),
        "--agent",
        AGENT_HTTP,
    ]);
    let e = ngx_dir.join("emit");
    // Kept-alive connections to the origin, as HAProxy's are.
    let fronts = format!(
        "    include {e}/rctl-http.conf;
    upstream origin {{ server {origin}; keepalive 64; }}
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    server {{ listen {EDGE}:8004; include {e}/rctl-server.conf; location / {{ proxy_pass http://origin; }} }}
    server {{ listen {EDGE}:8005; location / {{ proxy_pass http://origin; }} }}
",
        e = e.display()
    );
    let fronts = nginx::conf(&ngx_dir, 1, &fronts);
    let addr = |p: u16| SocketAddr::new(EDGE.parse().unwrap(), p);
    let fronts_ngx = start_nginx(&ngx_dir, &fronts, &[addr(8004), addr(8005)]);

    let secs = env("RCTL_BENCH_SECS", 8);
    let rounds = env("RCTL_BENCH_ROUNDS", 3);
    let agent_pid = agent.proc.pid();
    let hap_pid = hap.proc.pid();
    let ngx_pids = group(fronts_ngx.proc.pid());
    let front = |c: &Config| -> Vec<u32> {
        if c.name.starts_with("haproxy") {
            vec![hap_pid]
        } else {
            ngx_pids.clone()
        }
    };
    // Warm-up: connections, caches, the limiter's keys.
    for c in CONFIGS.iter().filter(|c| selected(c)) {
        wrk(c.port, 32, 1, agent_pid, &front(c));
    }
    let mut loaded: Vec<Vec<Run>> = vec![Vec::new(); CONFIGS.len()];
    let mut idle: Vec<Vec<Run>> = vec![Vec::new(); CONFIGS.len()];
    for round in 0..rounds {
        for (i, c) in CONFIGS.iter().enumerate().filter(|(_, c)| selected(c)) {
            let r = wrk(c.port, 32, secs, agent_pid, &front(c));
            eprintln!("round {round} {:<15} 32 conns: {r:?}", c.name);
            loaded[i].push(r);
            let mut servers = front(c);
            servers.extend([agent_pid, hap_pid]);
            servers.extend(group(origin_ngx.proc.pid()));
            let rt = realtime(&servers, true);
            let r = wrk_with(c.port, 1, secs.div_ceil(2), agent_pid, &front(c), rt);
            realtime(&servers, false);
            eprintln!("round {round} {:<15}  1 conn:  {r:?}", c.name);
            idle[i].push(r);
        }
    }
    for runs in loaded.iter().chain(&idle) {
        for r in runs {
            assert!(r.non_2xx == 0 && r.errors == 0, "failed requests: {r:?}");
        }
    }
    println!("{}", table(&loaded, &idle, rounds as usize));
    let agent_stats = agent.proc.stderr();
    drop(agent);
    eprintln!("{}", tail(&agent_stats));
    let _ = std::fs::remove_dir_all(&dir);
}

fn sub(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(d.join("tmp")).unwrap();
    d
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn rctl(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_rctl"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "rctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `c` on CPU 0 (when pinning).
fn pin0(c: Command) -> Command {
    let mut p = on_cpu(0, c.get_program().to_str().unwrap());
    p.args(c.get_args());
    p
}

fn start_nginx(dir: &Path, conf: &str, listen: &[SocketAddr]) -> Nginx {
    Nginx::start_with(dir, conf, listen, pin0)
}

fn start_haproxy(dir: &Path, root: &Path, origin: SocketAddr) -> Haproxy {
    let emitted = dir.join("emit");
    let lines = std::fs::read_to_string(emitted.join("rctl-frontend.cfg")).unwrap();
    let native = native_rules(dir, root);
    let cfg = format!(
        "{base}frontend plain
    bind {EDGE}:8001
    default_backend origin

frontend spoe
    bind {EDGE}:8002
{lines}    default_backend origin

frontend native
    bind {EDGE}:8003
{native}    default_backend origin

backend origin
    server o1 {origin}
{tables}",
        base = haproxy::base(dir),
        tables = NATIVE_TABLES,
    );
    let extra = [emitted.join("rctl-backends.cfg")];
    let addr = |p: u16| SocketAddr::new(EDGE.parse().unwrap(), p);
    Haproxy::start_with(
        dir,
        &cfg,
        &extra,
        &[addr(8001), addr(8002), addr(8003)],
        pin0,
    )
}

/// The shipped rules' HTTP part in HAProxy's own terms, as requestctl
/// writes it: ACLs on the same fields, the ipblocks as `src -f` files,
/// request-rate stick tables keyed like the throttles (ban lengths as
/// the tables' expiry).
fn native_rules(dir: &Path, root: &Path) -> String {
    let list = |name: &str, files: &[&str]| {
        let mut out = String::new();
        for f in files {
            let text = std::fs::read_to_string(root.join("rules/lists").join(f)).unwrap();
            for l in text.lines() {
                let p = l.split('#').next().unwrap().trim();
                // HAProxy matches IPv4 sources against IPv4-mapped IPv6
                // patterns: this one would take in every IPv4 client.
                if !p.is_empty() && p != "::ffff:0:0/96" {
                    out.push_str(p);
                    out.push('\n');
                }
            }
        }
        let p = dir.join(name);
        std::fs::write(&p, out).unwrap();
        p.display().to_string()
    };
    let bogons = list("bogons.lst", &["bogons-v4.txt", "bogons-v6.txt"]);
    let cloud = list("cloud.lst", &["aws.txt", "gcp.txt"]);
    format!(
        r#"    acl monitoring src 91.198.174.192/27 2620:0:862:ed1a::/64
    acl bogon src -f {bogons}
    acl cloud src -f {cloud}
    acl updater_net src 208.80.154.224/28 208.80.153.96/28 2620:0:860:101::/64 2620:0:861:102::/64
    acl updater_ua req.fhdr(user-agent,1) -m beg wmf-streaming-updater-consumer/
    acl sparql path /sparql /bigdata/namespace/wdq/sparql /bigdata/namespace/wdq/sparql/
    acl generic_ua req.fhdr(user-agent,1) -m reg -i ^(python-requests|python-urllib|aiohttp|go-http-client|java|okhttp|axios|node-fetch|curl|wget|libwww-perl)[/\ ]
    acl has_ua req.hdr_cnt(user-agent) gt 0
    acl empty_ua req.fhdr(user-agent,1) -m len 0
    acl attack_ua req.fhdr(user-agent,1) -m reg -i (masscan|zgrab|nikto|sqlmap|nuclei|nmap\ scripting\ engine)
    acl wiki_host req.hdr(host),lower,field(1,:) -m end .wikipedia.org
    acl page_content path_beg /api/rest_v1/page/html/ /api/rest_v1/page/summary/ /api/rest_v1/page/mobile-sections/
    acl no_cache req.fhdr(cache-control,1) -m sub no-cache
    acl pragma_no_cache req.fhdr(pragma,1) -m str no-cache
    http-request allow if monitoring
    http-request silent-drop if bogon
    http-request allow if updater_net updater_ua
    http-request track-sc0 src,ipmask(24,64) table st_generic if sparql generic_ua || sparql !has_ua
    http-request deny status 429 content-type text/plain string "Please set a descriptive User-Agent" hdr Retry-After 600 if sparql generic_ua {{ sc0_http_req_rate(st_generic) gt 30 }} || sparql !has_ua {{ sc0_http_req_rate(st_generic) gt 30 }}
    http-request track-sc1 src table st_per_ip if sparql
    http-request deny status 429 content-type text/plain string "Too many SPARQL queries" hdr Retry-After 300 if sparql {{ sc1_http_req_rate(st_per_ip) gt 60 }}
    http-request track-sc2 base32 table st_rerender if wiki_host page_content no_cache || wiki_host page_content pragma_no_cache
    http-request deny status 429 content-type text/plain string "Re-render of this title is rate limited" hdr Retry-After 600 if {{ sc2_http_req_rate(st_rerender) gt 10 }}
    http-request deny status 403 content-type text/plain string "Scanning is not allowed" if attack_ua
    http-request deny status 403 content-type text/plain string "Requests from cloud ranges must send a User-Agent" if cloud !has_ua || cloud empty_ua
"#
    )
}

const NATIVE_TABLES: &str = "
backend st_generic
    stick-table type ipv6 size 1m expire 10m store http_req_rate(1m)

backend st_per_ip
    stick-table type ipv6 size 1m expire 5m store http_req_rate(1m)

backend st_rerender
    stick-table type integer size 1m expire 10m store http_req_rate(1m)
";

/// With `RCTL_BENCH_RT=1`, moves every thread of `pids` to the lowest
/// real-time priority (`on`) or back (`!on`); returns whether it did.
/// Only for the one-connection runs, which leave most of the CPU idle:
/// other jobs on a shared machine then cannot delay a request by a
/// scheduling quantum, which is what their p99 measures otherwise.
fn realtime(pids: &[u32], on: bool) -> bool {
    if env("RCTL_BENCH_RT", 0) != 1 {
        return false;
    }
    for p in pids {
        let policy: &[&str] = if on {
            &["-f", "-p", "1"]
        } else {
            &["-o", "-p", "0"]
        };
        let _ = Command::new("chrt")
            .arg("-a")
            .args(policy)
            .arg(p.to_string())
            .status();
    }
    true
}

/// One wrk run against the front on `port` (whose processes are
/// `front`).
fn wrk(port: u16, conns: u32, secs: u64, agent_pid: u32, front: &[u32]) -> Run {
    wrk_with(port, conns, secs, agent_pid, front, false)
}

/// [`wrk`], itself at the lowest real-time priority if `rt`.
fn wrk_with(port: u16, conns: u32, secs: u64, agent_pid: u32, front: &[u32], rt: bool) -> Run {
    let cpu = || front.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
    let (cpu0, front0) = (cpu_seconds(agent_pid), cpu());
    let mut c = if rt {
        let mut c = Command::new("chrt");
        c.args(["-f", "1"]);
        if pinned() {
            c.args(["taskset", "-c", "1"]);
        }
        c.arg("wrk");
        c
    } else {
        on_cpu(1, "wrk")
    };
    c.args([
        "-t1",
        &format!("-c{conns}"),
        &format!("-d{secs}s"),
        "--latency",
        "-H",
        "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        &format!("http://{EDGE}:{port}/wiki/Main_Page"),
    ]);
    let o = c.output().expect("run wrk");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "wrk: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut r = parse_wrk(&out);
    r.agent_cpu_s = cpu_seconds(agent_pid) - cpu0;
    r.front_cpu_s = cpu() - front0;
    r
}

fn parse_wrk(out: &str) -> Run {
    let mut r = Run::default();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["50%", v] => r.p50_us = micros(v),
            ["90%", v] => r.p90_us = micros(v),
            ["99%", v] => r.p99_us = micros(v),
            ["Requests/sec:", v] => r.rps = v.parse().unwrap_or(0.0),
            [n, "requests", "in", ..] => r.requests = n.parse().unwrap_or(0.0),
            ["Non-2xx", "or", "3xx", "responses:", n] => r.non_2xx = n.parse().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                r.errors = rest
                    .iter()
                    .filter_map(|x| x.trim_end_matches(',').parse::<u64>().ok())
                    .sum()
            }
            _ => {}
        }
    }
    r
}

/// `123.45us`, `1.23ms`, `1.00s` in microseconds.
fn micros(v: &str) -> f64 {
    let (num, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e6)
    } else {
        (v, 1.0)
    };
    num.parse::<f64>().unwrap_or(f64::NAN) * scale
}

fn table(loaded: &[Vec<Run>], idle: &[Vec<Run>], rounds: usize) -> String {
    let index = |name: &str| CONFIGS.iter().position(|c| c.name == name).unwrap();
    let mut s = String::from(
        "| configuration | requests/s (32 conns) | vs baseline | p50 | p99 | unloaded p50 / p90 / p99 | added unloaded, p50 / p99 | front CPU/request | agent CPU/request |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, c) in CONFIGS.iter().enumerate() {
        let b = index(c.baseline);
        if loaded[i].is_empty() || loaded[b].is_empty() {
            continue;
        }
        // Ratios per round against the same round's baseline, then the median.
        let ratio = median(
            (0..rounds)
                .map(|k| loaded[i][k].rps / loaded[b][k].rps)
                .collect(),
        );
        let added = |f: fn(&Run) -> f64| {
            median(
                (0..rounds)
                    .map(|k| f(&idle[i][k]) - f(&idle[b][k]))
                    .collect(),
            )
        };
        let m = |v: &[Run], f: fn(&Run) -> f64| median(v.iter().map(f).collect());
        let cpu = m(&loaded[i], |r| r.agent_cpu_s / r.requests.max(1.0) * 1e6);
        let front = m(&loaded[i], |r| r.front_cpu_s / r.requests.max(1.0) * 1e6);
        s.push_str(&format!(
            "| {} | {:.0} | {:.0}% | {:.0} µs | {:.0} µs | {:.0} / {:.0} / {:.0} µs | {} | {:.1} µs | {} |\n",
            c.name,
            m(&loaded[i], |r| r.rps),
            ratio * 100.0,
            m(&loaded[i], |r| r.p50_us),
            m(&loaded[i], |r| r.p99_us),
            m(&idle[i], |r| r.p50_us),
            m(&idle[i], |r| r.p90_us),
            m(&idle[i], |r| r.p99_us),
            if b == i {
                "—".to_string()
            } else {
                format!(
                    "{:+.0} / {:+.0} µs",
                    added(|r| r.p50_us),
                    added(|r| r.p99_us)
                )
            },
            front,
            if cpu > 0.05 {
                format!("{cpu:.1} µs")
            } else {
                "—".to_string()
            },
        ));
    }
    s
}
