//! rctl's nginx module from the command line: `rctl status --nginx-status
//! URL` reads its status page (`rctl_status;`) and grades it, and `rctl
//! apply --nginx-artifact PATH` installs an artifact where its workers
//! watch for it (and, with `--nginx-status`, waits until every worker
//! runs it).

use anyhow::{bail, Context, Result};
use rctl_agent::health::{Health, Level};
use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

/// What `rctl status` learned of the module.
pub struct Seen {
    url: String,
    status: Result<Value, String>,
}

/// The page at `url` (`http://HOST:PORT/PATH`), as JSON.
fn fetch(url: &str) -> Result<Value, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("expected http://HOST:PORT/PATH (the location with rctl_status;)")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.take(4 << 20)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(format!("answered {status:?}"));
    }
    serde_json::from_str(body).map_err(|e| format!("not the module's status page: {e}"))
}

impl Seen {
    /// Asks the status page at `url`.
    pub fn ask(url: &str) -> Seen {
        Seen {
            url: url.to_string(),
            status: fetch(url),
        }
    }

    /// Grades what the page says: not answering is unknown; no worker
    /// with an artifact is critical (every request goes unchecked);
    /// workers on different artifacts, or requests the module let
    /// through unchecked (its own errors, counted since nginx started),
    /// are warnings.
    pub fn judge(&self, h: &mut Health) {
        let url = &self.url;
        let s = match &self.status {
            Ok(s) => s,
            Err(e) => {
                return h.add(
                    Level::Unknown,
                    format!("rctl's nginx module at {url} did not answer: {e}"),
                )
            }
        };
        let shas = self.artifacts();
        if shas.is_empty() {
            h.add(
                Level::Critical,
                format!("no worker of rctl's nginx module at {url} runs an artifact"),
            );
        } else if shas.iter().any(|a| *a != shas[0]) {
            h.add(
                Level::Warning,
                format!(
                    "the workers of rctl's nginx module at {url} run different artifacts \
                     (a switch under way, or one could not load it: see nginx's error log)"
                ),
            );
        }
        let unchecked: Vec<(String, u64)> = s["unchecked"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, n)| Some((k.clone(), n.as_u64()?)))
                    .filter(|(_, n)| *n > 0)
                    .collect()
            })
            .unwrap_or_default();
        let total: u64 = unchecked.iter().map(|(_, n)| n).sum();
        h.figure("nginx_module_unchecked", total);
        if total > 0 {
            let why: Vec<String> = unchecked.iter().map(|(k, n)| format!("{n} {k}")).collect();
            h.add(
                Level::Warning,
                format!(
                    "rctl's nginx module at {url} failed open since nginx started ({})",
                    why.join(", ")
                ),
            );
        }
    }

    /// What an OK line says of it.
    pub fn summary(&self) -> String {
        let shas = self.artifacts();
        format!(
            "rctl's nginx module runs artifact {} in {} workers",
            shas.first().map_or("-", |s| crate::common::short(s)),
            shas.len()
        )
    }

    /// The JSON form: `{"url", "serving", "status"|"error"}`.
    pub fn json(&self) -> Value {
        match &self.status {
            Ok(s) => serde_json::json!({"url": self.url, "serving": true, "status": s}),
            Err(e) => serde_json::json!({"url": self.url, "serving": false, "error": e}),
        }
    }

    /// The text form.
    pub fn text(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let s = match &self.status {
            Ok(s) => s,
            Err(e) => {
                return writeln!(
                    out,
                    "nginx module at {}: NOT ANSWERING: {}",
                    self.url,
                    crate::term::text(e)
                );
            }
        };
        let workers = s["workers"].as_array().cloned().unwrap_or_default();
        let mut runs: Vec<String> = workers
            .iter()
            .map(|w| {
                format!(
                    "generation {}, artifact {} ({} rules)",
                    w["generation"],
                    crate::common::short(w["artifact_sha256"].as_str().unwrap_or_default()),
                    w["rules"]
                )
            })
            .collect();
        runs.dedup();
        writeln!(
            out,
            "nginx module at {}: {} workers, {}",
            self.url,
            workers.len(),
            runs.join("; ")
        )?;
        let list = |v: &Value| {
            v.as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, n)| format!("{k} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        writeln!(
            out,
            "  requests: {}; shadowed {}",
            list(&s["requests"]),
            s["shadowed"]
        )?;
        writeln!(out, "  unchecked (served): {}", list(&s["unchecked"]))?;
        let z = &s["zone"];
        writeln!(
            out,
            "  zone: {} slots, {} live, {} banned, {} evicted, {} not counted (full)",
            z["slots"], z["live"], z["banned"], z["evicted"], z["full"]
        )
    }

    /// The artifact hashes its workers run.
    fn artifacts(&self) -> Vec<String> {
        let Ok(s) = &self.status else {
            return Vec::new();
        };
        s["workers"]
            .as_array()
            .map(|w| {
                w.iter()
                    .filter_map(|w| w["artifact_sha256"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `rctl apply --nginx-artifact PATH`: checks that `bytes` decode, then
/// puts them at `path` in one rename (workers never read half a file);
/// with `status`, waits until every worker runs them. An error when
/// nothing was installed; `Ok(false)` (said on stderr) when it was, but
/// not every worker runs it after 30 s.
pub fn install(bytes: &[u8], path: &Path, status: Option<&str>) -> Result<bool> {
    use rctl_compiler::artifact;
    artifact::decode(bytes).context("not installed for nginx")?;
    let sha =
        artifact::hex(&artifact::content_hash(bytes).unwrap_or_else(|| artifact::sha256(bytes)));
    if path.file_name().is_none() {
        bail!("--nginx-artifact: give a file path");
    }
    rctl_os::fs::write_atomic(path, bytes)
        .with_context(|| format!("installing {}", path.display()))?;
    let mut line = format!(
        "nginx module: artifact {} installed at {}",
        crate::common::short(&sha),
        path.display()
    );
    if let Some(url) = status {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = Seen::ask(url);
            let shas = seen.artifacts();
            if !shas.is_empty() && shas.iter().all(|s| *s == sha) {
                line.push_str(&format!("; all {} workers run it", shas.len()));
                break;
            }
            if Instant::now() > deadline {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "rctl: error: {}, but after 30 s not every worker at {} runs it (nginx's \
                     error log says why)",
                    crate::term::text(&line),
                    crate::term::text(url)
                );
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    } else {
        line.push_str("; workers switch at their next look (rctl_watch, 1 s)");
    }
    let _ = writeln!(std::io::stdout().lock(), "{}", crate::term::text(&line));
    Ok(true)
}
