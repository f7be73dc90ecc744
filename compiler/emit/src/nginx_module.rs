//! nginx (1.22 and later) with rctl's own module (`rctl emit nginx
//! --module`): the engine runs inside nginx's workers, no agent is asked.
//!
//! Three files:
//! - [`LOAD_FILE`], for nginx's main context (Debian: a link in
//!   `/etc/nginx/modules-enabled/`): `load_module`;
//! - [`HTTP_FILE`], for the `http` block: the artifact the module loads
//!   (and watches: a new file there is the workers' new generation), the
//!   shared zone every worker counts throttles in, the `rctl` log format
//!   and, with `--client-ip-header`, the map of the client's address;
//! - [`SERVER_FILE`], for each `server` block rctl protects: `rctl on`
//!   and requestctl's `X-Requestctl` tag for the backend.
//!
//! The module answers blocks itself, with the ruleset's statuses and
//! reasons: no `return` lines are needed, and no configuration goes stale
//! when a ruleset answers with new statuses or reads new headers (the
//! module sees every header as the client sent it).

use crate::{banner, check, Emitted, Error, File};
use rctl_compiler::ir::{Action, Bucket, Ruleset};
use std::fmt::Write as _;

/// The file for nginx's main context.
pub const LOAD_FILE: &str = "rctl-load-module.conf";
/// The file for the `http` block.
pub const HTTP_FILE: &str = "rctl-http.conf";
/// The file for each protected `server` block.
pub const SERVER_FILE: &str = "rctl-server.conf";

/// How to write the module's configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// The artifact the workers load (`rctl apply --nginx-artifact`
    /// installs it there).
    pub artifact: String,
    /// The module's file, as `load_module` takes it (relative to nginx's
    /// prefix, or absolute).
    pub module: String,
    /// The shared zone's size, as nginx writes sizes (`16m`).
    pub zone: String,
    /// What the configuration is for, for the files' headers.
    pub source: String,
    /// Take the client's address from this header's last address, where
    /// it holds one (see [`crate::nginx::Options::client_ip_header`]).
    pub client_ip_header: Option<String>,
}

impl Default for Options {
    /// `/var/lib/rctl/active.rctlc`, `modules/ngx_http_rctl_module.so`,
    /// a 16 MiB zone.
    fn default() -> Options {
        Options {
            artifact: "/var/lib/rctl/active.rctlc".into(),
            module: "modules/ngx_http_rctl_module.so".into(),
            zone: "16m".into(),
            source: "a ruleset".into(),
            client_ip_header: None,
        }
    }
}

/// Writes the three files for `rs`.
pub fn emit(rs: &Ruleset, o: &Options) -> Result<Emitted, Error> {
    let artifact = check::path("--artifact", &o.artifact)?;
    let module = check::path("--module-path", &o.module)?;
    let zone = check::path("--zone", &o.zone)?;
    let source = check::text("source", &o.source)?;
    let client = check::client_ip_header_flag(o.client_ip_header.as_deref())?;
    let mut warnings = Vec::new();
    for r in &rs.rules {
        let Action::Throttle(t) = &r.action else {
            continue;
        };
        if t.bucket == Bucket::Vsthrottle {
            warnings.push(format!(
                "rule {}: `bucket vsthrottle` is counted by each nginx worker on its own (only GCRA buckets live in the shared zone): its limit is per worker",
                r.name
            ));
        } else if t.shared {
            warnings.push(format!(
                "rule {}: `shared` is counted across this host's workers only: the module has no site-wide backend (use `rctl agent` for site-wide limits)",
                r.name
            ));
        }
    }
    let load = banner(
        "#",
        "rctl: load the nginx module; for nginx's main context.",
        source,
        &["Include it at the top level of nginx.conf (Debian: link it into /etc/nginx/modules-enabled/)."],
    ) + &format!("load_module {module};\n");
    let mut http = banner(
        "#",
        "rctl: the ruleset the module runs and its shared zone; for the http block.",
        source,
        &[&format!("Include it once: `include .../{HTTP_FILE};`.")],
    );
    let _ = write!(
        http,
        "# Every worker loads this artifact, and loads it again within a second
# of a new file being renamed over it (`rctl apply --nginx-artifact`).
rctl_artifact {artifact};
# Every throttle's buckets, shared by all workers (24 bytes a key).
rctl_zone {zone};

# `access_log PATH rctl;`: the combined format, then rctl's verdict, the
# deciding rule, the log/shadow rules' tags, and check=: ok decided,
# error:KIND the module failed open (served unchecked), - never asked.
log_format rctl '$remote_addr - $remote_user [$time_local] \"$request\" '
                '$status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" '
                'rctl=$rctl_action rule=$rctl_rule tags=$rctl_tags check=$rctl_check';
"
    );
    let mut server = banner(
        "#",
        "rctl: every request of this server is decided by the module; for each server block.",
        source,
        &[
            &format!("Include it in the server block: `include .../{SERVER_FILE};`. A location"),
            "with its own proxy_set_header must add `proxy_set_header X-Requestctl $rctl_tags;`;",
            "`rctl off;` leaves a location out, `rctl shadow;` decides without enforcing.",
            "The proxy_set_header below replaces the http block's: set `Connection \"\"` again",
            "here if the backend's connections are kept alive.",
        ],
    );
    server.push_str("rctl on;\n");
    if client.is_some() {
        http.push_str(&crate::nginx::client_map(client.as_deref()));
        server.push_str("rctl_client_ip $rctl_client;\n");
    }
    server.push_str("# requestctl's tag for the backend (a client's own is not passed on).\nproxy_set_header X-Requestctl $rctl_tags;\n");
    Ok(Emitted {
        files: vec![
            File {
                name: LOAD_FILE.into(),
                role: "include in nginx's main context (load_module)",
                text: load,
            },
            File {
                name: HTTP_FILE.into(),
                role: "include in the http block",
                text: http,
            },
            File {
                name: SERVER_FILE.into(),
                role: "include in each server block rctl protects",
                text: server,
            },
        ],
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_ruleset as ruleset;

    #[test]
    fn three_files_and_warnings_for_buckets_the_zone_does_not_share() {
        let rs = ruleset(
            r#"
rule a { when path == "/a" throttle 5 requests per 1m bucket vsthrottle }
rule b { when path == "/b" throttle 5 requests per 1m by ip }
"#,
        );
        let e = emit(&rs, &Options::default()).unwrap();
        assert_eq!(e.files.len(), 3);
        assert!(e.files[0]
            .text
            .ends_with("load_module modules/ngx_http_rctl_module.so;\n"));
        assert!(e.files[1]
            .text
            .contains("rctl_artifact /var/lib/rctl/active.rctlc;\n"));
        assert!(e.files[2].text.contains("rctl on;\n"));
        assert!(!e.files[2].text.contains("rctl_client_ip"));
        assert_eq!(e.warnings.len(), 1, "{:?}", e.warnings);
        assert!(e.warnings[0].starts_with("rule a:"));
    }

    #[test]
    fn a_client_header_maps_the_last_address_and_values_are_checked() {
        let rs = ruleset(r#"rule a { when path == "/" deny }"#);
        let o = Options {
            client_ip_header: Some("X-Forwarded-For".into()),
            ..Options::default()
        };
        let e = emit(&rs, &o).unwrap();
        assert!(e.files[1]
            .text
            .contains("map $http_x_forwarded_for $rctl_client"));
        assert!(e.files[2].text.contains("rctl_client_ip $rctl_client;\n"));
        let bad = Options {
            artifact: "/x; rctl off".into(),
            ..Options::default()
        };
        assert_eq!(emit(&rs, &bad).unwrap_err().option(), "--artifact");
    }
}
