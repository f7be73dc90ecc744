//! nginx (1.22 and later): `auth_request` asks `rctl serve --http` about
//! every request and acts on its answer.
//!
//! Two files:
//! - [`HTTP_FILE`], for the `http` block: the agent's `upstream` (kept-alive
//!   connections, to a TCP address or a unix socket) and a `log_format`
//!   that records rctl's verdict and whether the request was checked;
//! - [`SERVER_FILE`], for each `server` block rctl protects: `auth_request`
//!   with its `auth_request_set` variables, the internal location that
//!   asks the agent (`/check/nginx`, which answers every block with 403
//!   and the verdict in `X-Rctl-*` headers, since `auth_request` only
//!   understands 2xx, 401 and 403), and the named location that answers a
//!   block: one `return` per status the ruleset answers with (nginx's
//!   `return` takes a literal code), with the reason as body and
//!   `Retry-After`; `444` (close without an answer) for drops.
//!
//! Failing open: the agent answers a verdict with `200` (served) or `403`
//! (blocked). Every other answer, and none, lets the request through: the
//! internal location turns each status from 300 to 599 but 403 (the agent
//! down: 502; slow: 504; failing: 500; refusing the check request: 4xx)
//! into a `204` for `auth_request` (which would otherwise answer the
//! client 500); 499 alone cannot be (nginx refuses it in `error_page`),
//! and the agent never answers it. `$rctl_check` keeps what the agent answered: `200`
//! (checked, served), `403` (checked, blocked), any other code (not
//! checked, served); the `rctl` log format logs it.

use crate::reads::Reads;
use crate::{banner, check, Agent, Emitted, Error, File};
use rctl_compiler::ir::Ruleset;
use std::fmt::Write as _;

/// The file for the `http` block.
pub const HTTP_FILE: &str = "rctl-http.conf";
/// The file for each protected `server` block.
pub const SERVER_FILE: &str = "rctl-server.conf";

/// Headers nginx's proxy module replaces or removes on the way to the
/// agent, so that rules reading them see something else through nginx.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "expect",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// How to write the nginx side.
#[derive(Debug, Clone)]
pub struct Options {
    /// The agent's HTTP check endpoint (`rctl serve --http`): a TCP
    /// address, or a unix socket (`server unix:PATH;` in the upstream).
    pub agent: Agent,
    /// How long a request may wait for the agent (connect, send, read),
    /// in milliseconds, before it goes on unchecked.
    pub timeout_ms: u64,
    /// What the configuration is for, for the files' headers.
    pub source: String,
    /// Take the client's address from this header's last address (as a
    /// TLS terminator or load balancer in front appends it), where the
    /// header holds one; `None`: the connection's peer (`$remote_addr`).
    /// Only a proxy in front that sets the header may be trusted with it:
    /// a client that reaches nginx directly can write any address there.
    pub client_ip_header: Option<String>,
}

impl Default for Options {
    /// `unix:/run/rctl/http.sock`, 100 ms.
    fn default() -> Options {
        Options {
            agent: Agent::Unix("/run/rctl/http.sock".into()),
            timeout_ms: 100,
            source: "a ruleset".into(),
            client_ip_header: None,
        }
    }
}

/// Writes the two files for `rs`.
pub fn emit(rs: &Ruleset, o: &Options) -> Result<Emitted, Error> {
    let reads = Reads::of(rs);
    check::agent(check::AGENT, &o.agent)?;
    let server = match &o.agent {
        Agent::Tcp(a) => a.to_string(),
        Agent::Unix(p) => format!("unix:{}", p.display()),
    };
    let timeout_ms = check::timeout("--timeout-ms", o.timeout_ms)?;
    let source = check::text("source", &o.source)?;
    let client = check::client_ip_header_flag(o.client_ip_header.as_deref())?;
    let mut warnings = Vec::new();
    for h in &reads.headers {
        if !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            warnings.push(format!(
                "header({h:?}) never reaches the agent through nginx, which drops header names other than letters, digits and '-' (ignore_invalid_headers, underscores_in_headers): rules see it absent"
            ));
        } else if HOP_HEADERS.contains(&h.as_str()) || h.starts_with("x-rctl-") {
            warnings.push(format!(
                "header({h:?}) does not reach the agent as the client sent it through nginx (nginx or the check endpoint use it)"
            ));
        }
    }
    Ok(Emitted {
        files: vec![
            File {
                name: HTTP_FILE.into(),
                role: "include in the http block",
                text: http_file(source, &server, client.as_deref()),
            },
            File {
                name: SERVER_FILE.into(),
                role: "include in each server block rctl protects",
                text: server_file(source, timeout_ms, &reads),
            },
        ],
        warnings,
    })
}

fn http_file(source: &str, server: &str, client: Option<&str>) -> String {
    let mut s = banner(
        "#",
        "rctl: the agent's check endpoint and a log format; for the http block.",
        source,
        &[&format!("Include it once: `include .../{HTTP_FILE};`.")],
    );
    let _ = write!(
        s,
        "upstream rctl_agent {{
    # rctl serve --http. One server: nginx never marks it down, so
    # requests are checked again as soon as the agent is back.
    server {server};
    keepalive 32;
}}

# `access_log PATH rctl;`: the combined format, then rctl's verdict, the
# deciding rule, the log/shadow rules' tags, and check=: 200 checked and
# served, 403 checked and blocked, any other code not checked (the agent
# down, slow, failing or refusing the check: served), - never asked.
log_format rctl '$remote_addr - $remote_user [$time_local] \"$request\" '
                '$status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" '
                'rctl=$rctl_action rule=$rctl_rule tags=$rctl_tags check=$rctl_check';
"
    );
    s.push_str(&client_map(client));
    s
}

/// The `map` that sets `$rctl_client`, the client rctl judges: the
/// connection's peer, or the last address of `client` (a header a proxy
/// in front sets) where it holds one.
pub(crate) fn client_map(client: Option<&str>) -> String {
    let mut s = String::new();
    s.push_str("\n# The client rctl judges: ");
    match client {
        None => s.push_str("the connection's peer.\nmap $remote_addr $rctl_client {\n    default $remote_addr;\n}\n"),
        Some(h) => {
            let var = h.replace('-', "_");
            let _ = write!(
                s,
                "the last address of {h} where it holds one\n# (set by the proxy in front: only it may be trusted with it), else the\n# connection's peer.\nmap $http_{var} $rctl_client {{\n    \"~(?:^|,)\\s*(?<rctl_last>[0-9a-fA-F.:]+)\\s*$\" $rctl_last;\n    default $remote_addr;\n}}\n"
            );
        }
    }
    s
}

/// `error_page` for every status the agent's answer may have that is
/// not a verdict: 300 to 599, 403 excepted, and 499, which nginx refuses
/// there (its own code for a client that went away).
fn unchecked_error_page() -> String {
    let codes: Vec<String> = (300..=599u16)
        .filter(|&c| c != 403 && c != 499)
        .map(|c| c.to_string())
        .collect();
    let mut s = String::from("    error_page");
    for (i, chunk) in codes.chunks(16).enumerate() {
        if i > 0 {
            s.push_str("\n              ");
        }
        s.push(' ');
        s.push_str(&chunk.join(" "));
    }
    s.push_str("\n               = @rctl_unchecked;\n");
    s
}

fn server_file(source: &str, timeout_ms: u64, reads: &Reads) -> String {
    let coverage = crate::coverage::Coverage::every_header(reads).to_text();
    let unchecked = unchecked_error_page();
    let mut s = banner(
        "#",
        "rctl: every request of this server is asked about; for each server block.",
        source,
        &[
            &format!("Include it in the server block: `include .../{SERVER_FILE};`. Locations"),
            "inherit it, except that a location with its own error_page must add",
            "`error_page 403 = @rctl_block;`, and one with its own proxy_set_header",
            "must add `proxy_set_header X-Requestctl $rctl_tags;`.",
        ],
    );
    let _ = write!(
        s,
        "auth_request /_rctl;
auth_request_set $rctl_check       $upstream_status;
auth_request_set $rctl_action      $upstream_http_x_rctl_action;
auth_request_set $rctl_status      $upstream_http_x_rctl_status;
auth_request_set $rctl_reason      $upstream_http_x_rctl_reason;
auth_request_set $rctl_rule        $upstream_http_x_rctl_rule;
auth_request_set $rctl_retry_after $upstream_http_retry_after;
auth_request_set $rctl_tags        $upstream_http_x_requestctl;
# Blocks come back as 403 with the verdict in headers.
error_page 403 = @rctl_block;
# requestctl's tag for the backend (a client's own is not passed on).
proxy_set_header X-Requestctl $rctl_tags;

location = /_rctl {{
    internal;
    proxy_pass http://rctl_agent/check/nginx;
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    proxy_pass_request_body off;
    proxy_set_header Content-Length \"\";
    # The request as the client sent it; its other headers pass as they are.
    proxy_set_header Host             $http_host;
    proxy_set_header X-Rctl-Method    $request_method;
    proxy_set_header X-Rctl-Host      $http_host;
    proxy_set_header X-Rctl-Target    $request_uri;
    proxy_set_header X-Rctl-Client-Ip $rctl_client;
    proxy_set_header X-Rctl-Dst-Ip    $server_addr;
    proxy_set_header X-Rctl-Port      $server_port;
    proxy_set_header X-Rctl-Mode      nginx;
    # What this configuration covers, so that `rctl apply` can tell when a
    # new ruleset needs it emitted again.
    proxy_set_header X-Rctl-Config    \"{coverage}\";
    proxy_connect_timeout {timeout_ms}ms;
    proxy_send_timeout    {timeout_ms}ms;
    proxy_read_timeout    {timeout_ms}ms;
    # Fail open: every answer but a verdict (200 served, 403 blocked) lets
    # the request through: the agent down (502), slow (504), failing (5xx)
    # or refusing the check request (4xx: too large, malformed) would
    # otherwise be a 500 for the client. $rctl_check keeps the code.
    proxy_intercept_errors on;
{unchecked}}}

location @rctl_unchecked {{
    auth_request off;
    return 204;
}}

location @rctl_block {{
    auth_request off;
    default_type text/plain;
    add_header Retry-After $rctl_retry_after always;
    if ($rctl_action = drop) {{
        return 444;
    }}
"
    );
    for st in reads.statuses() {
        let _ = write!(
            s,
            "    if ($rctl_status = {st}) {{
        return {st} \"$rctl_reason\\n\";
    }}
"
        );
    }
    s.push_str(
        "    # A status these lines were not written for (the agent now runs a
    # ruleset with other statuses: emit again), or a 403 of this server's
    # own: 429 for a throttle, else 403.
    if ($rctl_action = throttle) {
        return 429 \"$rctl_reason\\n\";
    }
    return 403 \"$rctl_reason\\n\";
}
",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_ruleset as ruleset;

    #[test]
    fn one_return_per_status_and_warnings_for_headers_nginx_drops() {
        let rs = ruleset(
            r#"
rule a { when header("x_under") present deny 418 "tea" }
rule b { when header("content-length") == "0" throttle 5 requests per 1m status 503 }
rule c { when header("user-agent") absent deny 403 }
"#,
        );
        let e = emit(&rs, &Options::default()).unwrap();
        let server = &e.files[1].text;
        let returns: Vec<&str> = server
            .lines()
            .filter_map(|l| l.trim().strip_prefix("return "))
            .collect();
        assert_eq!(
            returns,
            [
                "204;",
                "444;",
                "403 \"$rctl_reason\\n\";",
                "418 \"$rctl_reason\\n\";",
                "503 \"$rctl_reason\\n\";",
                "429 \"$rctl_reason\\n\";",
                "403 \"$rctl_reason\\n\";",
            ]
        );
        assert_eq!(e.warnings.len(), 2, "{:?}", e.warnings);
        assert!(e.warnings[0].contains("content-length"));
        assert!(e.warnings[1].contains("x_under"));
        assert!(e.files[0].text.contains("server unix:/run/rctl/http.sock;"));
    }

    #[test]
    fn a_unix_agent_is_the_upstreams_server() {
        let rs = ruleset(r#"rule a { when path == "/" deny }"#);
        let o = Options {
            agent: Agent::parse("unix:/run/rctl/http.sock").unwrap(),
            ..Options::default()
        };
        let e = emit(&rs, &o).unwrap();
        let servers: Vec<&str> = e.files[0]
            .text
            .lines()
            .filter(|l| l.trim_start().starts_with("server "))
            .collect();
        assert_eq!(servers, ["    server unix:/run/rctl/http.sock;"]);
        let v6 = Options {
            agent: Agent::parse("[::1]:9781").unwrap(),
            ..Options::default()
        };
        assert!(emit(&rs, &v6).unwrap().files[0]
            .text
            .contains("    server [::1]:9781;\n"));
        // A path the upstream cannot hold is refused, even when the
        // options were built without Agent::parse.
        let bad = Options {
            agent: Agent::Unix("/run/rctl/http.sock; server 10.0.0.1:80".into()),
            ..Options::default()
        };
        let err = emit(&rs, &bad).unwrap_err();
        assert_eq!(err.option(), "--agent");
    }

    #[test]
    fn every_answer_but_a_verdict_fails_open() {
        let rs = ruleset(r#"rule a { when path == "/" deny }"#);
        let server = &emit(&rs, &Options::default()).unwrap().files[1].text;
        let at = server.find("    error_page 300 ").expect("the error_page");
        let directive = &server[at..at + server[at..].find(';').unwrap()];
        let codes: Vec<u16> = directive
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let want: Vec<u16> = (300..=599).filter(|&c| c != 403 && c != 499).collect();
        assert_eq!(codes, want);
        assert!(directive.ends_with("= @rctl_unchecked"), "{directive}");
        // It is the internal location's, after proxy_intercept_errors.
        let location = &server[server.find("location = /_rctl").unwrap()..];
        assert!(
            location.find("proxy_intercept_errors on;").unwrap()
                < location.find(directive).unwrap()
        );
    }
}
