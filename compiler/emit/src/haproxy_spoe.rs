//! HAProxy (2.6 and later): the SPOE filter asks `rctl serve --spoe` about
//! every request; `http-request` rules act on the variables it sets.
//!
//! Three files:
//! - [`SPOE_FILE`], the SPOE engine `rctl`: the `spoe-agent` (timeouts,
//!   fail-open options) and the `spoe-message rctl-req`, which sends
//!   `method`, `host`, `target` (path and query as sent), `src`, `dst`,
//!   `dst_port` and one `h.<name>` per header the ruleset reads (the
//!   first occurrence, whole; absent headers go as NULL);
//! - [`BACKENDS_FILE`], whole sections to load with one more `-f`: the
//!   agent's backend (`mode tcp`, `option spop-check`, so that a dead
//!   agent is marked down and skipped at once) and the stick table
//!   [`UNCHECKED_TABLE`], which counts unchecked requests per SPOE error
//!   code;
//! - [`FRONTEND_FILE`], lines to paste into each frontend rctl protects:
//!   the `filter spoe` line and the `http-request` rules acting on
//!   `txn.rctl.*`: one `deny` rule per status the ruleset answers with
//!   (`status` must be a literal), `Retry-After` for throttles,
//!   `silent-drop` for drops, the `X-Requestctl` tag, and the counting
//!   of unchecked requests.
//!
//! The options (agent address, backend name, directory, headers, timeout)
//! go through [`crate::check`]: none can add a keyword to a line, comment
//! out its end or end an argument list.
//!
//! Failing open: with `option continue-on-error` and `option set-on-error
//! error`, a request the agent did not answer (down, slower than the
//! processing timeout, protocol error) goes on with `txn.rctl.error` set
//! and no verdict. It is counted in [`UNCHECKED_TABLE`] (`show table
//! rctl-unchecked` on the stats socket: one entry per error code, its
//! `http_req_cnt`), logged in the `option httplog` line as the third
//! captured field, and the SPOE engine logs each failed event.

use crate::coverage::Coverage;
use crate::reads::Reads;
use crate::{banner, check, is_tchar, Agent, Emitted, Error, ErrorKind, File};
use rctl_compiler::ir::Ruleset;
use std::fmt::Write as _;

/// The SPOE engine configuration file.
pub const SPOE_FILE: &str = "spoe-rctl.conf";
/// The backends file (agent backend, unchecked-requests table).
pub const BACKENDS_FILE: &str = "rctl-backends.cfg";
/// The lines for the frontends.
pub const FRONTEND_FILE: &str = "rctl-frontend.cfg";
/// The stick table counting unchecked requests per SPOE error code.
pub const UNCHECKED_TABLE: &str = "rctl-unchecked";
/// The SPOE engine id (`filter spoe engine rctl`).
pub const ENGINE: &str = "rctl";
/// The message the agent decides.
pub const MESSAGE: &str = "rctl-req";
/// The `spoe-message` that tells the agent what this configuration
/// covers ([`Coverage`]), on about one request in 256.
pub const CONFIG_MESSAGE: &str = "rctl-cfg";
/// The longest header name the emitted configuration can hold: each
/// `args` line carries it twice within HAProxy's 2,048-byte lines.
pub const MAX_HEADER_NAME: usize = 900;

/// How to write the HAProxy side.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the agent listens (`rctl serve --spoe`).
    pub agent: Agent,
    /// The agent's backend name in HAProxy.
    pub backend: String,
    /// The directory [`SPOE_FILE`] will be in on the HAProxy host (the
    /// `filter spoe` line names it; HAProxy reads relative paths from its
    /// working directory, so make it absolute).
    pub config_dir: String,
    /// The SPOE `timeout processing`: how long a request may wait for its
    /// verdict before it goes on unchecked, in milliseconds.
    pub timeout_ms: u64,
    /// Headers to send besides those the ruleset reads (lower case; see
    /// [`crate::header_names`]), so that a later ruleset may read them
    /// without a new configuration.
    pub extra_headers: Vec<String>,
    /// What the configuration is for, for the files' headers (for
    /// example the artifact's hash).
    pub source: String,
    /// Take the client's address from this header's last address (as a
    /// TLS terminator or load balancer in front appends it), where the
    /// header holds one; `None`: the connection's peer. Only a proxy in
    /// front that sets the header may be trusted with it: a client that
    /// reaches HAProxy directly can write any address there, and so
    /// choose which limits and blocks apply to it.
    pub client_ip_header: Option<String>,
}

impl Default for Options {
    /// `unix:/run/rctl/spoe.sock`, backend `rctl-agent`, files in
    /// `/etc/haproxy/rctl`, 50 ms, the connection's peer as the client.
    fn default() -> Options {
        Options {
            agent: Agent::Unix("/run/rctl/spoe.sock".into()),
            backend: "rctl-agent".into(),
            config_dir: "/etc/haproxy/rctl".into(),
            timeout_ms: 50,
            extra_headers: Vec::new(),
            source: "a ruleset".into(),
            client_ip_header: None,
        }
    }
}

/// Writes the three files for `rs`.
pub fn emit(rs: &Ruleset, o: &Options) -> Result<Emitted, Error> {
    let reads = Reads::of(rs);
    check::agent(check::AGENT, &o.agent)?;
    let backend = check::name("--backend", &o.backend)?;
    let dir = check::path("--config-dir", o.config_dir.trim_end_matches('/'))?;
    let timeout_ms = check::timeout("--timeout-ms", o.timeout_ms)?;
    let source = check::text("source", &o.source)?;
    let client = check::client_ip_header_flag(o.client_ip_header.as_deref())?;
    let mut extra = Vec::new();
    for h in &o.extra_headers {
        extra.push(check::header("--header", h)?);
    }
    let mut warnings = Vec::new();
    let mut headers = Vec::new();
    for h in reads.headers.iter().chain(&extra) {
        if !h.bytes().all(is_tchar) {
            warnings.push(format!(
                "header({h:?}) is never sent: HAProxy refuses requests whose header names are not HTTP tokens, so rules see it absent"
            ));
        } else if h.len() > MAX_HEADER_NAME {
            let option = if reads.headers.contains(h) {
                "a rule's header(…)"
            } else {
                "--header"
            };
            return Err(Error::new(option, ErrorKind::HeaderTooLong(h.clone())));
        } else if !headers.contains(h) {
            headers.push(h.clone());
        }
    }
    headers.sort();
    Ok(Emitted {
        files: vec![
            File {
                name: SPOE_FILE.into(),
                role: "the SPOE engine; the filter spoe line names it",
                text: spoe_file(
                    source,
                    backend,
                    timeout_ms,
                    &headers,
                    &Coverage::of(&reads, &headers),
                    client.as_deref(),
                ),
            },
            File {
                name: BACKENDS_FILE.into(),
                role: "backend sections: load with one more -f",
                text: backends_file(source, backend, &o.agent),
            },
            File {
                name: FRONTEND_FILE.into(),
                role: "lines for each frontend rctl protects",
                text: frontend_file(source, &format!("{dir}/{SPOE_FILE}"), &reads),
            },
        ],
        warnings,
    })
}

fn spoe_file(
    source: &str,
    backend: &str,
    timeout_ms: u64,
    headers: &[String],
    coverage: &Coverage,
    client: Option<&str>,
) -> String {
    let mut s = banner(
        "#",
        "rctl: the SPOE engine asking `rctl serve --spoe` about each request.",
        source,
        &[
            &format!(
                "Named by the `filter spoe engine {ENGINE} config ...` line of {FRONTEND_FILE}."
            ),
            "Every error lets the request through (fail open) with txn.rctl.error set.",
        ],
    );
    let _ = write!(
        s,
        "[{ENGINE}]
spoe-agent rctl-agent
    messages {MESSAGE} {CONFIG_MESSAGE}
    # Variables are txn.rctl.<name> (the agent's name has a '-').
    option var-prefix rctl
    # On any error, txn.rctl.error holds its code (below 256: HAProxy's,
    # 1 timeout, 2 no agent; 256 + status: the agent's) ...
    option set-on-error error
    # ... and the request goes on unchecked, like every later one.
    option continue-on-error
    # txn.rctl.ptime: milliseconds spent asking.
    option set-process-time ptime
    # A NOTIFY larger than a frame fails that request (error 3) rather
    # than being fragmented to an agent that does not take fragments.
    no option send-frag-payload
    option pipelining
    no option async
    timeout hello 500ms
    timeout idle 30s
    # The longest a request waits for its verdict.
    timeout processing {timeout_ms}ms
    # Bounds reconnection storms when the agent refuses connections.
    maxconnrate 200
    use-backend {backend}
    # Logs each failed event (successes are not logged).
    option dontlog-normal
    log global

spoe-message {MESSAGE}
    # The fields rctl rules read; the agent ignores others.
    args method=method
    args host=req.hdr(host)
    args target=pathq
    args src=src
    args dst=dst
    args dst_port=dst_port
"
    );
    if let Some(h) = client {
        let _ = writeln!(
            s,
            "    # The client the agent judges: the last address of {h} where it\n    # holds one (set by the proxy in front: only it may be trusted with\n    # it), else src.\n    args client=req.hdr_ip({h},-1)"
        );
    }
    if headers.is_empty() {
        s.push_str("    # (the ruleset reads no header)\n");
    } else {
        s.push_str("    # The headers the ruleset reads: the first occurrence, whole.\n");
    }
    for h in headers {
        let _ = writeln!(s, "    args {}", header_arg(h));
    }
    s.push_str("    event on-frontend-http-request\n");
    let _ = write!(
        s,
        "
spoe-message {CONFIG_MESSAGE}
    # What this configuration sends and has deny lines for ({}), so that
    # `rctl apply` can tell when a new ruleset needs it emitted again.
    # About one request in 256 carries it.
    args cfg=str({})
    event on-frontend-http-request if {{ rand(256) -m int 0 }}
",
        coverage.to_text(),
        coverage.to_hex()
    );
    s
}

/// `"h.NAME=req.fhdr(NAME,1)"`, quoted for HAProxy's configuration
/// parser (which expands `$` in double quotes) and its sample-argument
/// parser (which takes `'` as a quote).
fn header_arg(h: &str) -> String {
    let name = h.replace('$', "\\$");
    let arg = name.replace('\'', "\\\\'");
    format!("\"h.{name}=req.fhdr({arg},1)\"")
}

fn backends_file(source: &str, backend: &str, agent: &Agent) -> String {
    let server = match agent {
        Agent::Unix(p) => format!("unix@{}", p.display()),
        Agent::Tcp(a) if a.is_ipv6() => format!("ipv6@{}:{}", a.ip(), a.port()),
        Agent::Tcp(a) => a.to_string(),
    };
    let mut s = banner(
        "#",
        "rctl: the agent's backend and the count of unchecked requests.",
        source,
        &["Whole sections: load this file with one more -f (haproxy -f haproxy.cfg -f rctl-backends.cfg)."],
    );
    let _ = write!(
        s,
        "backend {backend}
    # SPOE needs a TCP backend, even under `defaults` in mode http.
    mode tcp
    timeout connect 500ms
    # Longer than the SPOE `timeout idle`.
    timeout server 3m
    # Health checks speak SPOP (HELLO). A dead agent is marked down at its
    # first failed connection (observe layer4), after which requests skip
    # it at once (error 2) instead of waiting for the processing timeout;
    # it is back within a second of answering checks again.
    option spop-check
    server rctl {server} check inter 1s fastinter 250ms downinter 500ms rise 1 fall 1 observe layer4 error-limit 1 on-error mark-down maxconn 1000

backend {UNCHECKED_TABLE}
    # Requests the agent did not check, one entry per SPOE error code:
    # `show table {UNCHECKED_TABLE}` on the stats socket, or
    # `rctl status --haproxy-socket PATH`.
    stick-table type integer size 512 expire 7d store http_req_cnt,http_req_rate(1m)
"
    );
    s
}

fn frontend_file(source: &str, spoe_path: &str, reads: &Reads) -> String {
    let mut s = banner(
        "#",
        "rctl: lines for each `mode http` frontend rctl protects.",
        source,
        &[
            "Paste them into the frontend, before its own http-request rules; they",
            &format!("need the sections of {BACKENDS_FILE}. `option httplog` logs three"),
            "captured fields for rctl: {action|rule|error}; a custom log-format can",
            "log %[var(txn.rctl.action)], %[var(txn.rctl.rule)], %[var(txn.rctl.tags)],",
            "%[var(txn.rctl.error)] and %[var(txn.rctl.ptime)] instead.",
        ],
    );
    let _ = write!(
        s,
        "    filter spoe engine {ENGINE} config {spoe_path}
    # The tag is rctl's: a client's own is removed.
    http-request del-header X-Requestctl
    # Unchecked requests (fail open): counted per error code.
    http-request track-sc2 var(txn.rctl.error) table {UNCHECKED_TABLE} if {{ var(txn.rctl.error) -m found }}
    http-request capture var(txn.rctl.action) len 8
    http-request capture var(txn.rctl.rule) len 64
    http-request capture var(txn.rctl.error) len 4
"
    );
    let reason = "content-type text/plain lf-string \"%[var(txn.rctl.reason)]\\n\"";
    let retry = "hdr Retry-After \"%[var(txn.rctl.retry_after)]\"";
    if !reads.deny_statuses.is_empty() {
        s.push_str("    # deny: one rule per status the ruleset's deny rules answer with.\n");
    }
    for st in &reads.deny_statuses {
        let _ = writeln!(
            s,
            "    http-request deny status {st} {reason} if {{ var(txn.rctl.action) -m str deny }} {{ var(txn.rctl.status) -m int {st} }}"
        );
    }
    if !reads.throttle_statuses.is_empty() {
        s.push_str("    # throttle: one rule per status, with Retry-After.\n");
    }
    for st in &reads.throttle_statuses {
        let _ = writeln!(
            s,
            "    http-request deny status {st} {reason} {retry} if {{ var(txn.rctl.action) -m str throttle }} {{ var(txn.rctl.status) -m int {st} }}"
        );
    }
    let _ = write!(
        s,
        "    # A status these lines were not written for (the agent now runs a
    # ruleset with other statuses: emit again): still blocked, as 429 or
    # 403, with the ruleset's status in X-Rctl-Status.
    http-request deny status 429 {reason} {retry} hdr X-Rctl-Status \"%[var(txn.rctl.status)]\" if {{ var(txn.rctl.action) -m str throttle }}
    http-request deny status 403 {reason} hdr X-Rctl-Status \"%[var(txn.rctl.status)]\" if {{ var(txn.rctl.action) -m str deny }}
    # drop: close without an answer.
    http-request silent-drop if {{ var(txn.rctl.action) -m str drop }}
    # requestctl's tag: the log and shadow rules the request matched.
    http-request set-header X-Requestctl \"%[var(txn.rctl.tags)]\" if {{ var(txn.rctl.tags) -m found }}
"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_ruleset as ruleset;

    #[test]
    fn header_args_survive_both_of_haproxys_parsers() {
        assert_eq!(
            header_arg("user-agent"),
            r#""h.user-agent=req.fhdr(user-agent,1)""#
        );
        assert_eq!(header_arg("a'b"), r#""h.a'b=req.fhdr(a\\'b,1)""#);
        assert_eq!(header_arg("a$b#c"), r#""h.a\$b#c=req.fhdr(a\$b#c,1)""#);
    }

    #[test]
    fn sends_the_headers_read_and_one_rule_per_status() {
        let rs = ruleset(
            r#"
rule a { when header("User-Agent") ~* "^curl/" deny 418 "tea" }
rule b { when header("cache-control") contains "no-cache" throttle 5 requests per 1m by host, path status 503 }
rule c { when path == "/x" throttle 5 requests per 1m }
rule d { when path == "/d" drop }
"#,
        );
        let o = Options {
            extra_headers: vec!["x-extra".into(), "user-agent".into()],
            ..Options::default()
        };
        let e = emit(&rs, &o).unwrap();
        assert!(e.warnings.is_empty());
        let spoe = &e.files[0].text;
        let args: Vec<&str> = spoe.lines().filter(|l| l.contains("args \"h.")).collect();
        assert_eq!(
            args,
            [
                r#"    args "h.cache-control=req.fhdr(cache-control,1)""#,
                r#"    args "h.user-agent=req.fhdr(user-agent,1)""#,
                r#"    args "h.x-extra=req.fhdr(x-extra,1)""#,
            ]
        );
        let fe = &e.files[2].text;
        let denies: Vec<&str> = fe
            .lines()
            .filter(|l| l.starts_with("    http-request deny status"))
            .map(|l| &l[29..32])
            .collect();
        assert_eq!(denies, ["418", "429", "503", "429", "403"]);
        assert!(fe.contains("-m int 503 }"));
        assert_eq!(e, emit(&rs, &o).unwrap(), "deterministic");
    }

    #[test]
    fn invalid_names_are_errors_and_untransmissible_headers_warnings() {
        let rs = ruleset(r#"rule a { when header("x(y)") present deny }"#);
        let e = emit(&rs, &Options::default()).unwrap();
        assert_eq!(e.warnings.len(), 1, "{:?}", e.warnings);
        assert!(!e.files[0].text.contains("x(y)"));
        let bad = Options {
            backend: "a b".into(),
            ..Options::default()
        };
        assert!(matches!(
            emit(&rs, &bad).unwrap_err().kind(),
            ErrorKind::Name(_)
        ));
        let bad = Options {
            timeout_ms: 0,
            ..Options::default()
        };
        assert!(matches!(
            emit(&rs, &bad).unwrap_err().kind(),
            ErrorKind::Timeout(0)
        ));
    }

    #[test]
    fn agent_addresses() {
        let rs = ruleset(r#"rule a { when path == "/" deny }"#);
        for (agent, server) in [
            (
                "unix:/run/rctl/spoe.sock",
                "server rctl unix@/run/rctl/spoe.sock ",
            ),
            ("tcp:127.0.0.1:9000", "server rctl 127.0.0.1:9000 "),
            ("[::1]:9000", "server rctl ipv6@::1:9000 "),
        ] {
            let o = Options {
                agent: Agent::parse(agent).unwrap(),
                ..Options::default()
            };
            assert!(
                emit(&rs, &o).unwrap().files[1].text.contains(server),
                "{agent}"
            );
        }
        for bad in ["unix:rel", "tcp:localhost:1", "1.2.3.4", ""] {
            assert!(Agent::parse(bad).is_err(), "{bad}");
        }
    }
}
