//! The Debian package as an operator meets it (built by
//! `dataplane/cli/debian/build.sh`, named by `RCTL_DEB`): `dpkg -i`, the
//! files it holds, its units verified by `systemd-analyze verify`, then
//! `rctl serve` started as its unit starts it (the unit's `ExecStart`,
//! capability bounding set and umask, readiness on `NOTIFY_SOCKET`) with
//! the package's `/etc/default/rctl` (its paths moved into the test's
//! directory), Debian's HAProxy as `user haproxy` and nginx as
//! `www-data` in front, the scraper throttled as HAProxy's and nginx's
//! own logs show, the control socket closed to both users, a ban kept
//! across a restart; then `dpkg -r` and `dpkg --purge`.
//!
//! Machine-wide (it installs the package): root only, and never beside
//! another run of itself. The PID 1 of a CI machine is not systemd, so the
//! unit is not started by systemctl: its lines are read and done by hand.

use crate::edge::{haproxy_config, nginx_http};
use crate::util::tempdir;
use rctl_testkit::proc::{free_port, Proc};
use rctl_testkit::servers::{haproxy, haproxy::Haproxy, nginx, nginx::Nginx};
use rctl_testkit::skip::{require, root, skip_unless};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The package's name.
const PACKAGE: &str = "rctl";

/// The rules: 3 requests an hour for each scraper (by address and
/// User-Agent), then 429 for the hour; everyone else passes.
const RULES: &str = r#"
rule scraper {
  when header("user-agent") starts_with "scrapy/"
  throttle 3 requests per 1h burst 3 by ip, header("user-agent") status 429 reason "scraping"
}
"#;

/// The built package, when this run may install it: root and
/// `RCTL_DEB` (under CI both are required).
fn deb() -> Option<PathBuf> {
    if !skip_unless(root(), "root (it installs a package)") {
        return None;
    }
    let deb = std::env::var_os("RCTL_DEB").map(PathBuf::from);
    let ok = deb.as_ref().is_some_and(|d| d.is_file());
    if !skip_unless(
        ok,
        "RCTL_DEB naming the package (bash dataplane/cli/debian/build.sh)",
    ) {
        return None;
    }
    let tools = ["systemd-analyze", "logrotate", "man", "curl", "setpriv"];
    if !(require(haproxy::BIN) && require(nginx::BIN) && tools.iter().all(|t| have(t))) {
        return None;
    }
    deb
}

/// Whether `program` is on PATH (else the test is skipped, except under
/// CI).
fn have(program: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    skip_unless(found, &format!("{program} on PATH"))
}

/// The package installed; purged when dropped, even when the test fails.
struct Installed;

impl Installed {
    fn new(deb: &Path) -> Installed {
        let o = run(Command::new("dpkg").arg("-i").arg(deb));
        assert!(o.status.success(), "dpkg -i: {}", text(&o));
        Installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", PACKAGE]).output();
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("{:?}: {e}", cmd.get_program()))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_package_installs_runs_as_its_unit_behind_haproxy_and_nginx_and_purges_clean() {
    let Some(deb) = deb() else { return };
    let installed = Installed::new(&deb);
    files_are_in_place();
    units_and_snippets_verify();
    let dir = tempdir("package");
    serve_as_the_unit_does(&dir);
    removed_then_purged();
    std::mem::forget(installed);
}

/// The binary, a man page for every subcommand, completions, units,
/// the configuration file (a conffile), logrotate's snippet, copyright.
fn files_are_in_place() {
    let o = run(Command::new("dpkg").args(["-L", PACKAGE]));
    let list = String::from_utf8_lossy(&o.stdout).into_owned();
    let has = |p: &str| list.lines().any(|l| l == p || l == format!("/usr{p}"));
    for p in [
        "/usr/bin/rctl",
        "/usr/share/man/man1/rctl.1.gz",
        "/usr/share/bash-completion/completions/rctl",
        "/usr/share/zsh/vendor-completions/_rctl",
        "/usr/share/fish/vendor_completions.d/rctl.fish",
        "/usr/lib/systemd/system/rctl-serve.service",
        "/usr/lib/systemd/system/rctl-agent.service",
        "/usr/lib/systemd/system/rctl-apply.service",
        "/etc/default/rctl",
        "/etc/logrotate.d/rctl",
        "/usr/share/doc/rctl/copyright",
    ] {
        assert!(has(p), "{p} not in the package:\n{list}");
    }
    // A man page for every subcommand rctl's help lists.
    let help = run(Command::new("/usr/bin/rctl").arg("--help"));
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let commands = help
        .split("Commands:")
        .nth(1)
        .and_then(|s| s.split("Options:").next())
        .unwrap_or_default();
    let mut n = 0;
    for name in commands.lines().filter_map(|l| l.split_whitespace().next()) {
        if name == "help" {
            continue;
        }
        n += 1;
        let page = format!("/usr/share/man/man1/rctl-{name}.1.gz");
        assert!(has(&page), "{page} not in the package");
    }
    assert!(n >= 15, "{commands}");
    let conffiles = run(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", PACKAGE]));
    let conffiles = String::from_utf8_lossy(&conffiles.stdout).into_owned();
    assert!(conffiles.contains("/etc/default/rctl"), "{conffiles}");
    assert!(conffiles.contains("/etc/logrotate.d/rctl"), "{conffiles}");
    // The version says what was built: commit, format, the XDP program in.
    let v = run(Command::new("/usr/bin/rctl").arg("--version"));
    let v = String::from_utf8_lossy(&v.stdout).into_owned();
    assert!(v.contains(env!("CARGO_PKG_VERSION")), "{v}");
    for part in ["commit: ", "artifact format: ", "XDP program: "] {
        let value = v
            .lines()
            .find_map(|l| l.strip_prefix(part))
            .unwrap_or_else(|| panic!("{part}: {v}"));
        assert!(!value.trim().is_empty() && value != "none", "{part}{value}");
    }
    // The binary is stripped: no .symtab section (ELF64 little-endian).
    assert!(!has_section(Path::new("/usr/bin/rctl"), b".symtab"));
    // The man page is man's, the completion bash's.
    let page = run(Command::new("man")
        .args(["-l", "/usr/share/man/man1/rctl-serve.1.gz"])
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100"));
    let page = text(&page);
    assert!(page.contains("--spoe-group"), "{page}");
    let bash = run(Command::new("bash").args([
        "-c",
        "source /usr/share/bash-completion/completions/rctl && complete -p rctl",
    ]));
    assert!(bash.status.success(), "{}", text(&bash));
}

/// Whether the ELF file at `path` has a section called `name`.
fn has_section(path: &Path, name: &[u8]) -> bool {
    let b = std::fs::read(path).unwrap();
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&b[..5], b"\x7fELF\x02", "an ELF64 binary");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let strtab = u64_at(shoff + shstrndx * shentsize + 0x18);
    (0..shnum).any(|i| {
        let at = strtab + u32_at(shoff + i * shentsize);
        b[at..].starts_with(name) && b.get(at + name.len()) == Some(&0)
    })
}

/// `systemd-analyze verify` on the installed units (it reads their
/// binaries and man pages too), and logrotate's dry run of its snippet.
fn units_and_snippets_verify() {
    let units = ["rctl-serve", "rctl-agent", "rctl-apply"]
        .map(|u| format!("/usr/lib/systemd/system/{u}.service"));
    let o = run(Command::new("systemd-analyze").arg("verify").args(&units));
    let out = text(&o);
    assert!(o.status.success(), "systemd-analyze verify: {out}");
    assert!(
        !out.lines().any(|l| l.contains("rctl")),
        "systemd-analyze verify has something to say: {out}"
    );
    let o = run(Command::new("logrotate").args(["-d", "/etc/logrotate.d/rctl"]));
    assert!(o.status.success(), "logrotate -d: {}", text(&o));
    assert!(text(&o).contains("/var/log/rctl/*.jsonl"), "{}", text(&o));
}

/// One `KEY=` line of a unit file.
fn unit_line(unit: &str, key: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
        .to_string()
}

/// The package's `/etc/default/rctl` with its paths in `dir` and its
/// addresses on free ports; the HTTP listener's lines uncommented.
fn test_config(dir: &Path, http: &Path, metrics: SocketAddr) -> String {
    let packaged = std::fs::read_to_string("/etc/default/rctl").unwrap();
    // What the operator keeps: the proxies' groups as packaged.
    assert!(
        packaged.contains("\nRCTL_SPOE_GROUP=haproxy\n"),
        "{packaged}"
    );
    assert!(
        packaged.contains("\n#RCTL_HTTP_GROUP=www-data\n"),
        "{packaged}"
    );
    let d = dir.display();
    let mut out = String::new();
    for line in packaged.lines() {
        let line = match line.split_once('=').map(|(k, _)| k) {
            Some("RCTL_ARTIFACT") => format!("RCTL_ARTIFACT={d}/etc/ruleset.rctlc"),
            Some("RCTL_STATE_DIR") => format!("RCTL_STATE_DIR={d}/state"),
            Some("RCTL_SPOE") => format!("RCTL_SPOE=unix:{d}/run/spoe.sock"),
            Some("#RCTL_HTTP") => format!("RCTL_HTTP=unix:{}", http.display()),
            Some("#RCTL_HTTP_GROUP") => "RCTL_HTTP_GROUP=www-data".to_string(),
            Some("RCTL_METRICS") => format!("RCTL_METRICS={metrics}"),
            Some("RCTL_LOG") => format!("RCTL_LOG={d}/log/matched.jsonl"),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    // The control socket's default is /run/rctl's; this test's is its own.
    out.push_str(&format!("RCTL_CONTROL={d}/run/agent.sock\n"));
    out
}

/// `rctl serve` as rctl-serve.service runs it: its ExecStart, with only
/// the capabilities of its bounding set, its umask, no new privileges,
/// readiness through `NOTIFY_SOCKET`. Returns once it said READY=1.
fn start_as_unit(dir: &Path, notify: &UnixDatagram) -> Proc {
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/rctl-serve.service").unwrap();
    assert_eq!(unit_line(&unit, "Type"), "notify");
    assert_eq!(unit_line(&unit, "Restart"), "always");
    let exec = unit_line(&unit, "ExecStart");
    let caps = unit_line(&unit, "CapabilityBoundingSet");
    let bounding: Vec<String> = caps
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let umask = unit_line(&unit, "UMask");
    let script = format!(
        "umask {umask}; exec setpriv --no-new-privs --inh-caps=-all --bounding-set=-all,{} -- {exec}",
        bounding.join(",")
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("RCTL_CONFIG", dir.join("etc/default-rctl"))
        .env("NOTIFY_SOCKET", dir.join("notify.sock"));
    let mut p = Proc::spawn("rctl-serve", dir, cmd);
    let mut buf = [0u8; 4096];
    loop {
        match notify.recv(&mut buf) {
            Ok(n) if String::from_utf8_lossy(&buf[..n]).contains("READY=1") => break,
            Ok(_) => {}
            Err(e) => panic!("no READY=1 from rctl serve: {e}\n{}", p.logs()),
        }
    }
    assert!(p.running(), "{}", p.logs());
    // Its bounding set is the unit's: CAP_CHOWN (bit 0) alone.
    let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid())).unwrap();
    let bnd = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(bnd, "0000000000000001", "{status}");
    p
}

/// Runs `args` as `user` (with that user's groups).
fn as_user(user: &str, program: &str, args: &[&str]) -> Output {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let gid = passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == user).then(|| f[3].to_string())
        })
        .unwrap_or_else(|| panic!("no user {user}"));
    run(Command::new("setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={gid}"),
            "--init-groups",
            "--",
            program,
        ])
        .args(args))
}

fn gid_of(group: &str) -> u32 {
    let g = std::fs::read_to_string("/etc/group").unwrap();
    g.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == group).then(|| f[2].parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no group {group}"))
}

/// `curl ARGS` as `user`: the status it printed (`%{http_code}`).
fn curl(user: &str, args: &[&str]) -> String {
    let mut all = vec![
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ];
    all.extend(args);
    String::from_utf8_lossy(&as_user(user, "curl", &all).stdout).into_owned()
}

/// GET `target` from `front` with User-Agent `ua`; the status.
fn get(front: SocketAddr, target: &str, ua: &str) -> u16 {
    let url = format!("http://{front}{target}");
    curl("nobody", &["-A", ua, &url]).parse().unwrap_or(0)
}

/// The statuses HAProxy's log (`option httplog`) has for `target`: the
/// field after the timers (`Tq/Tw/Tc/Tr/Ta`).
fn haproxy_statuses(log: &str, target: &str) -> Vec<u16> {
    log.lines()
        .filter(|l| l.contains(&format!(" \"GET {target} HTTP/1.1\"")))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|t| t.matches('/').count() == 4)?;
            w.next()?.parse().ok()
        })
        .collect()
}

/// `/usr/bin/rctl emit TARGET ARTIFACT -o DIR/NAME FLAGS`: that folder.
fn emit(dir: &Path, target: &str, artifact: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let o = run(Command::new("/usr/bin/rctl")
        .args(["emit", target])
        .arg(artifact)
        .arg("-o")
        .arg(&out)
        .args(flags));
    assert!(o.status.success(), "rctl emit {target}: {}", text(&o));
    out
}

/// The statuses nginx's `rctl` access log has for `target`.
fn nginx_statuses(log: &str, target: &str) -> Vec<u16> {
    log.lines()
        .filter(|l| l.contains(&format!("\"GET {target} HTTP/1.1\"")))
        .filter_map(|l| {
            l.splitn(3, '"')
                .nth(2)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

fn serve_as_the_unit_does(dir: &Path) {
    for (d, mode) in [
        ("etc", 0o755),
        ("run", 0o755),
        ("state", 0o700),
        ("log", 0o750),
    ] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        std::fs::set_permissions(dir.join(d), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // The proxies' users reach the run directory (as /run/rctl).
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("etc/scraper.rctl"), RULES).unwrap();
    let artifact = dir.join("etc/ruleset.rctlc");
    let o = run(Command::new("/usr/bin/rctl")
        .arg("compile")
        .arg(dir.join("etc/scraper.rctl"))
        .arg("-o")
        .arg(&artifact));
    assert!(o.status.success(), "{}", text(&o));
    let http = dir.join("run/http.sock");
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    std::fs::write(
        dir.join("etc/default-rctl"),
        test_config(dir, &http, metrics),
    )
    .unwrap();
    let notify = UnixDatagram::bind(dir.join("notify.sock")).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut serve = start_as_unit(dir, &notify);

    // The sockets: SPOE for the haproxy group, HTTP for www-data, the
    // control socket for root alone.
    let spoe = dir.join("run/spoe.sock");
    let control = dir.join("run/agent.sock");
    for (sock, group, mode) in [
        (&spoe, "haproxy", 0o660),
        (&http, "www-data", 0o660),
        (&control, "root", 0o600),
    ] {
        let m = std::fs::metadata(sock).unwrap();
        assert_eq!(m.mode() & 0o777, mode, "{}", sock.display());
        assert_eq!(m.gid(), gid_of(group), "{}", sock.display());
        assert_eq!(m.uid(), 0, "{}", sock.display());
    }
    let c = control.to_str().unwrap();
    for user in ["nobody", "haproxy", "www-data"] {
        // Neither reads the ruleset nor swaps it.
        let o = as_user(
            user,
            "/usr/bin/rctl",
            &["status", "--agent", c, "--format", "json"],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        assert!(
            v["agent"]["status"].get("generation").is_none(),
            "{user}: {}",
            text(&o)
        );
        assert_eq!(v["agent"]["serving"], false, "{user}: {}", text(&o));
        // Nor does a client of its own reach the socket.
        let raw = as_user(user, "curl", &["-s", "--unix-socket", c, "http://agent/"]);
        assert_eq!(
            raw.status.code(),
            Some(7),
            "{user} connected: {}",
            text(&raw)
        );
        let o = as_user(
            user,
            "/usr/bin/rctl",
            &["apply", artifact.to_str().unwrap(), "--agent", c],
        );
        assert!(!o.status.success(), "{user} applied: {}", text(&o));
    }
    // The HTTP socket: www-data may ask, nobody may not.
    let ask = |user: &str, target: &str, ua: &str| {
        let target = format!("X-Rctl-Target: {target}");
        curl(
            user,
            &[
                "--unix-socket",
                http.to_str().unwrap(),
                "-H",
                "X-Rctl-Client-Ip: 127.0.0.1",
                "-H",
                &target,
                "-A",
                ua,
                "http://edge/check",
            ],
        )
    };
    assert_eq!(ask("www-data", "/probe", "probe/1.0"), "200");
    assert_eq!(ask("nobody", "/probe", "probe/1.0"), "000");

    // HAProxy as Debian runs it (user haproxy) and nginx with www-data
    // workers, configured by rctl emit.
    let app = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (hfront, nfront) = (
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        SocketAddr::from(([127, 0, 0, 1], free_port())),
    );
    let agent = format!("unix:{}", spoe.display());
    let emitted = emit(
        dir,
        "haproxy-spoe",
        &artifact,
        "haproxy-rctl",
        &["--agent", &agent],
    );
    let cfg = haproxy_config(dir, &emitted, hfront, app).replacen(
        "global\n",
        "global\n    user haproxy\n    group haproxy\n",
        1,
    );
    let nagent = format!("unix:{}", http.display());
    let nemitted = emit(dir, "nginx", &artifact, "nginx-rctl", &["--agent", &nagent]);
    let nconf = format!(
        "user www-data;\n{}",
        nginx::conf(dir, 1, &nginx_http(dir, &nemitted, nfront, app))
    );
    let mut ngx = Nginx::start(dir, &nconf, &[nfront, app]);
    let mut hap = Haproxy::start(dir, &cfg, &[emitted.join("rctl-backends.cfg")], &[hfront]);
    let ps = run(Command::new("ps").args(["-o", "user=", "-p", &hap.proc.pid().to_string()]));
    assert_eq!(String::from_utf8_lossy(&ps.stdout).trim(), "haproxy");

    let reader = "Mozilla/5.0 (X11; Linux x86_64) reader";
    let scraper = |name: &str| format!("scrapy/2.11 {name}");
    let through = |front: SocketAddr, name: &str| {
        let ua = scraper(name);
        let scraped: Vec<u16> = (0..6)
            .map(|i| get(front, &format!("/{name}/s{i}"), &ua))
            .collect();
        let read: Vec<u16> = (0..6)
            .map(|i| get(front, &format!("/{name}/r{i}"), reader))
            .collect();
        assert_eq!(scraped, [200, 200, 200, 429, 429, 429], "{name}");
        assert_eq!(read, [200; 6], "{name}");
    };
    through(hfront, "via-haproxy");
    through(nfront, "via-nginx");
    // HAProxy's and nginx's own logs say the same.
    let hlog = hap.log();
    let nlog = std::fs::read_to_string(dir.join("front.log")).unwrap_or_default();
    for i in 0..6 {
        let want = if i < 3 { 200 } else { 429 };
        let t = format!("/via-haproxy/s{i}");
        assert_eq!(haproxy_statuses(&hlog, &t), [want], "{t}\n{hlog}");
        let t = format!("/via-haproxy/r{i}");
        assert_eq!(haproxy_statuses(&hlog, &t), [200], "{t}\n{hlog}");
        let t = format!("/via-nginx/s{i}");
        assert_eq!(nginx_statuses(&nlog, &t), [want], "{t}\n{nlog}");
    }

    // A restart (SIGTERM, as systemctl restart sends, then the unit's
    // start): the scrapers' limits are still spent (asked on a fresh
    // connection, as nginx does, so the first answer is the restarted
    // agent's).
    serve.signal("TERM");
    let exited = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        serve.exited()
    });
    assert_eq!(exited.and_then(|s| s.code()), Some(0), "{}", serve.logs());
    let mut serve = start_as_unit(dir, &notify);
    for name in ["via-haproxy", "via-nginx"] {
        assert_eq!(
            ask("www-data", "/after", &scraper(name)),
            "429",
            "{}",
            serve.logs()
        );
    }
    assert_eq!(ask("www-data", "/after", &scraper("new")), "200");
    assert_eq!(get(nfront, "/via-nginx/after", &scraper("via-nginx")), 429);
    hap.proc.stop();
    ngx.proc.stop();
    serve.stop();
}

/// `dpkg -r` keeps the configuration file, `dpkg --purge` removes it.
fn removed_then_purged() {
    let o = run(Command::new("dpkg").args(["-r", PACKAGE]));
    assert!(o.status.success(), "dpkg -r: {}", text(&o));
    assert!(!Path::new("/usr/bin/rctl").exists());
    assert!(!Path::new("/usr/lib/systemd/system/rctl-serve.service").exists());
    assert!(Path::new("/etc/default/rctl").exists(), "a conffile stays");
    let o = run(Command::new("dpkg").args(["--purge", PACKAGE]));
    assert!(o.status.success(), "dpkg --purge: {}", text(&o));
    for p in [
        "/etc/default/rctl",
        "/etc/logrotate.d/rctl",
        "/var/lib/rctl",
    ] {
        assert!(!Path::new(p).exists(), "{p} is left after the purge");
    }
    let o = run(Command::new("dpkg").args(["-s", PACKAGE]));
    assert!(!o.status.success(), "still known to dpkg: {}", text(&o));
}
