//! `rctl status --haproxy-socket PATH`: what HAProxy counted of the
//! requests the agent did not check, from the `rctl-unchecked` stick
//! table that `rctl emit haproxy-spoe` writes (one entry per SPOE error
//! code, its request count and rate), read on HAProxy's stats socket.

use rctl_emit::haproxy_spoe::UNCHECKED_TABLE;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// One SPOE error code and the requests HAProxy let through with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unchecked {
    /// The value of `txn.rctl.error`.
    pub error: u64,
    /// What it means.
    pub meaning: String,
    /// Requests counted since the entry was created (entries expire after
    /// 7 days without such a request).
    pub requests: u64,
    /// Requests over the last minute.
    pub per_minute: u64,
}

/// What `rctl status` learned from HAProxy.
pub struct Seen {
    socket: PathBuf,
    result: Result<Vec<Unchecked>, String>,
}

impl Seen {
    /// Asks HAProxy's stats socket at `socket` for the table.
    pub fn ask(socket: PathBuf) -> Seen {
        let result = query(&socket, &format!("show table {UNCHECKED_TABLE}"))
            .map_err(|e| {
                format!("{e}: give the path of a `stats socket` line of HAProxy's global section")
            })
            .and_then(|answer| parse(&answer));
        Seen { socket, result }
    }

    /// Whether HAProxy answered with the table.
    pub fn ok(&self) -> bool {
        self.result.is_ok()
    }

    /// The JSON form: `{"socket", "table", "unchecked", "by_error"}` or
    /// `{"socket", "error"}`.
    pub fn json(&self) -> serde_json::Value {
        match &self.result {
            Ok(v) => serde_json::json!({
                "socket": self.socket,
                "table": UNCHECKED_TABLE,
                "unchecked": v.iter().map(|u| u.requests).sum::<u64>(),
                "by_error": v.iter().map(|u| serde_json::json!({
                    "error": u.error,
                    "meaning": u.meaning,
                    "requests": u.requests,
                    "per_minute": u.per_minute,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({"socket": self.socket, "error": e}),
        }
    }

    /// The text form.
    pub fn text(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let sock = self.socket.display();
        match &self.result {
            Err(e) => writeln!(out, "haproxy at {sock}: {}", crate::term::text(e)),
            Ok(v) => {
                let total: u64 = v.iter().map(|u| u.requests).sum();
                writeln!(
                    out,
                    "haproxy at {sock}: {total} requests not checked by the agent (served: fail open)"
                )?;
                for u in v {
                    writeln!(
                        out,
                        "  error {:>3} {:<48} {:>10} requests, {} in the last minute",
                        u.error, u.meaning, u.requests, u.per_minute
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// One command on a stats socket; the whole answer.
fn query(socket: &std::path::Path, command: &str) -> Result<String, String> {
    let fail = |e: std::io::Error| format!("{}: {e}", socket.display());
    let mut s = UnixStream::connect(socket).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    s.write_all(format!("{command}\n").as_bytes())
        .map_err(fail)?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(fail)?;
    Ok(answer)
}

/// The entries of a `show table` answer.
fn parse(answer: &str) -> Result<Vec<Unchecked>, String> {
    if !answer.starts_with("# table: ") {
        let first = answer.lines().next().unwrap_or("no answer");
        return Err(format!(
            "HAProxy says {first:?} to `show table {UNCHECKED_TABLE}`: load the backends file \
             `rctl emit haproxy-spoe` writes (haproxy -f ... -f rctl-backends.cfg)"
        ));
    }
    let mut v: Vec<Unchecked> = answer
        .lines()
        .filter(|l| l.starts_with("0x"))
        .filter_map(|l| {
            let field = |name: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .and_then(|n| n.parse::<u64>().ok())
            };
            let error = field("key=")?;
            Some(Unchecked {
                error,
                meaning: meaning(error),
                requests: field("http_req_cnt=").unwrap_or(0),
                per_minute: field("http_req_rate(60000)=").unwrap_or(0),
            })
        })
        .collect();
    v.sort_by_key(|u| u.error);
    Ok(v)
}

/// What a `txn.rctl.error` value means (HAProxy 2.6's codes).
fn meaning(code: u64) -> String {
    let status = [
        "normal close",
        "I/O error",
        "a timeout occurred",
        "frame is too big",
        "invalid frame received",
        "version value not found",
        "max-frame-size value not found",
        "capabilities value not found",
        "unsupported version",
        "max-frame-size too big or too small",
        "fragmentation not supported",
        "invalid interlaced frames",
        "frame-id not found",
        "resource allocation error",
    ];
    match code {
        1 => "timed out (SPOE timeout processing)".into(),
        2 => "no connection to the agent (down)".into(),
        3 => "request too large for one SPOE frame".into(),
        4 => "fragmented frame aborted".into(),
        5 => "interrupted".into(),
        256.. => match status.get((code - 256) as usize) {
            Some(s) => format!("agent connection failed: {s}"),
            None => format!("agent connection failed: status {}", code - 256),
        },
        _ => "unknown SPOE error".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_haproxys_answer() {
        // As HAProxy 2.6.12 answers, after requests with the agent down
        // and one whose agent connection dropped.
        let answer = "# table: rctl-unchecked, type: integer, size:512, used:2\n\
            0x55936eb90930: key=257 use=0 exp=604799900 http_req_cnt=1 http_req_rate(60000)=1\n\
            0x55936eb90a10: key=2 use=0 exp=604799900 http_req_cnt=3 http_req_rate(60000)=3\n\n";
        let v = parse(answer).unwrap();
        assert_eq!(
            v.iter().map(|u| (u.error, u.requests)).collect::<Vec<_>>(),
            [(2, 3), (257, 1)]
        );
        assert_eq!(v[1].meaning, "agent connection failed: I/O error");
        assert!(parse("No such table\n\n")
            .unwrap_err()
            .contains("rctl-backends.cfg"));
        assert_eq!(
            parse("# table: rctl-unchecked, type: integer, size:512, used:0\n\n"),
            Ok(vec![])
        );
    }
}
