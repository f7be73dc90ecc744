//! HAProxy's stats socket, as `rctl status --haproxy-socket PATH` reads
//! it: what HAProxy counted of the requests the agent did not check, from
//! the stick table `rctl emit haproxy-spoe` writes (one entry per SPOE
//! error code, with its request count and rate).
//!
//! ```
//! use rctl_agent::haproxy_stats::parse_table;
//! let answer = "# table: t, type: integer, size:512, used:1\n\
//!     0x5593: key=2 use=0 exp=604799900 http_req_cnt=3 http_req_rate(60000)=1\n\n";
//! let v = parse_table(answer, "t").unwrap();
//! assert_eq!((v[0].error, v[0].requests), (2, 3));
//! assert_eq!(v[0].meaning, "no connection to the agent (down)");
//! ```

use std::fmt;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one answer may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

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

/// Why the table could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum StatsError {
    /// The socket could not be reached, written or read.
    Socket {
        /// The stats socket.
        socket: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// HAProxy answered, but not with the table (it has no such table:
    /// its configuration lacks what `rctl emit haproxy-spoe` writes).
    NoTable {
        /// The table asked for.
        table: String,
        /// The first line of HAProxy's answer.
        said: String,
    },
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatsError::Socket { socket, error } => write!(
                f,
                "{}: {error}: give the path of a `stats socket` line of HAProxy's global section",
                socket.display()
            ),
            StatsError::NoTable { table, said } => write!(
                f,
                "HAProxy says {said:?} to `show table {table}`: load the backends file \
                 `rctl emit haproxy-spoe` writes (haproxy -f ... -f rctl-backends.cfg)"
            ),
        }
    }
}

impl std::error::Error for StatsError {}

/// Asks the stats socket at `socket` for `table`'s entries, sorted by
/// error code.
pub fn unchecked(socket: &Path, table: &str) -> Result<Vec<Unchecked>, StatsError> {
    let answer = query(socket, &format!("show table {table}"))?;
    parse_table(&answer, table)
}

/// Sends one command to the stats socket; the whole answer.
pub fn query(socket: &Path, command: &str) -> Result<String, StatsError> {
    let fail = |error| StatsError::Socket {
        socket: socket.to_path_buf(),
        error,
    };
    let mut s = UnixStream::connect(socket).map_err(fail)?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(fail)?;
    s.write_all(format!("{command}\n").as_bytes())
        .map_err(fail)?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(fail)?;
    Ok(answer)
}

/// The entries of a `show table` answer for `table`, sorted by error
/// code. Lines that are not entries, and fields of an entry other than
/// the key and the two counters, are ignored; an entry without a numeric
/// key is left out.
pub fn parse_table(answer: &str, table: &str) -> Result<Vec<Unchecked>, StatsError> {
    if !answer.starts_with("# table: ") {
        return Err(StatsError::NoTable {
            table: table.to_string(),
            said: answer.lines().next().unwrap_or("no answer").to_string(),
        });
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
pub fn meaning(code: u64) -> String {
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

    const TABLE: &str = "rctl-unchecked";

    #[test]
    fn reads_haproxys_answer() {
        // As HAProxy 2.6.12 answers, after requests with the agent down
        // and one whose agent connection dropped.
        let answer = "# table: rctl-unchecked, type: integer, size:512, used:2\n\
            0x55936eb90930: key=257 use=0 exp=604799900 http_req_cnt=1 http_req_rate(60000)=1\n\
            0x55936eb90a10: key=2 use=0 exp=604799900 http_req_cnt=3 http_req_rate(60000)=3\n\n";
        let v = parse_table(answer, TABLE).unwrap();
        assert_eq!(
            v.iter()
                .map(|u| (u.error, u.requests, u.per_minute))
                .collect::<Vec<_>>(),
            [(2, 3, 3), (257, 1, 1)]
        );
        assert_eq!(v[1].meaning, "agent connection failed: I/O error");
        let empty = "# table: rctl-unchecked, type: integer, size:512, used:0\n\n";
        assert_eq!(parse_table(empty, TABLE).unwrap(), vec![]);
    }

    #[test]
    fn an_answer_without_the_table_says_what_to_load() {
        let e = parse_table("No such table\n\n", TABLE).unwrap_err();
        assert!(
            matches!(&e, StatsError::NoTable { table, said } if table == TABLE && said == "No such table")
        );
        let text = e.to_string();
        assert!(
            text.contains("\"No such table\"") && text.contains("rctl-backends.cfg"),
            "{text}"
        );
        let e = parse_table("", TABLE).unwrap_err();
        assert!(e.to_string().contains("\"no answer\""), "{e}");
    }

    #[test]
    fn entries_missing_fields_are_read_as_far_as_they_go() {
        let answer = "# table: rctl-unchecked, type: integer, size:512, used:3\n\
            0x1: key=3 use=0 exp=1\n\
            0x2: key=junk http_req_cnt=9\n\
            not an entry key=4\n\
            0x3: use=0 key=261 http_req_rate(60000)=7 http_req_cnt=12\n";
        let v = parse_table(answer, TABLE).unwrap();
        assert_eq!(
            v,
            [
                Unchecked {
                    error: 3,
                    meaning: "request too large for one SPOE frame".into(),
                    requests: 0,
                    per_minute: 0,
                },
                Unchecked {
                    error: 261,
                    meaning: "agent connection failed: version value not found".into(),
                    requests: 12,
                    per_minute: 7,
                },
            ]
        );
    }

    #[test]
    fn every_code_has_a_meaning() {
        assert_eq!(meaning(0), "unknown SPOE error");
        assert_eq!(meaning(5), "interrupted");
        assert_eq!(
            meaning(256 + 13),
            "agent connection failed: resource allocation error"
        );
        assert_eq!(meaning(256 + 14), "agent connection failed: status 14");
        assert_eq!(meaning(100), "unknown SPOE error");
    }

    #[test]
    fn a_socket_nobody_listens_on_is_a_socket_error() {
        let p = std::env::temp_dir().join(format!("rctl-no-haproxy-{}.sock", std::process::id()));
        let e = unchecked(&p, TABLE).unwrap_err();
        assert!(matches!(&e, StatsError::Socket { socket, .. } if *socket == p));
        assert!(e.to_string().contains("stats socket"), "{e}");
    }

    #[test]
    fn one_command_is_sent_and_the_whole_answer_read() {
        use std::io::{BufRead as _, BufReader};
        let p = std::env::temp_dir().join(format!("rctl-haproxy-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let l = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            let mut s = s;
            s.write_all(b"# table: rctl-unchecked, type: integer, size:512, used:1\n")
                .unwrap();
            s.write_all(b"0x9: key=1 http_req_cnt=4 http_req_rate(60000)=2\n\n")
                .unwrap();
            line
        });
        let v = unchecked(&p, TABLE).unwrap();
        assert_eq!(server.join().unwrap(), "show table rctl-unchecked\n");
        assert_eq!((v[0].error, v[0].requests, v[0].per_minute), (1, 4, 2));
        let _ = std::fs::remove_file(&p);
    }
}
