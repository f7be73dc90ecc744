//! Lowering of rule actions: statuses, throttles and their keys,
//! durations.

use crate::ast::{self, ActionDecl, KeyDecl, Word};
use crate::diag::{code, Diagnostic};
use crate::ir::{Action, Bucket, Key, Throttle, Unit};
use crate::lower::{reason_phrase, Lowerer};
use crate::source::Span;

impl Lowerer<'_> {
    pub(crate) fn action(&mut self, a: &ActionDecl, span: Span) -> Option<Action> {
        Some(match a {
            ActionDecl::Allow => Action::Allow,
            ActionDecl::Log => Action::Log,
            ActionDecl::Drop => Action::Drop,
            ActionDecl::Deny(status, reason) => {
                let status = match status {
                    Some(w) => self.status(w, 400)?,
                    None => 403,
                };
                let reason = reason
                    .as_ref()
                    .map_or_else(|| reason_phrase(status).to_string(), |r| r.text.clone());
                if reason.contains(['\n', '\r']) {
                    self.diags.push(
                        Diagnostic::error(code::BAD_VALUE, "a deny reason cannot span lines")
                            .primary(span, "here"),
                    );
                    return None;
                }
                Action::Deny { status, reason }
            }
            ActionDecl::Throttle(t) => Action::Throttle(self.throttle(t, span)?),
        })
    }

    fn status(&mut self, w: &Word, min: u16) -> Option<u16> {
        match crate::value::parse_count(&w.text, 999) {
            Ok(n) if (u64::from(min)..=599).contains(&n) => Some(n as u16),
            _ => {
                self.bad(
                    code::BAD_STATUS,
                    w,
                    "invalid status",
                    &format!("expected an HTTP status from {min} to 599"),
                    "deny and throttle answer with a 4xx or 5xx status, like 403 or 429",
                );
                None
            }
        }
    }

    fn throttle(&mut self, t: &ast::ThrottleDecl, span: Span) -> Option<Throttle> {
        let errors = self.diags.error_count();
        let limit = match crate::value::parse_count(&t.limit.text, u64::from(u32::MAX)) {
            Ok(0) | Err(_) => {
                self.bad(
                    code::BAD_NUMBER,
                    &t.limit,
                    "invalid throttle limit",
                    "expected a whole number above 0",
                    "write `throttle 100 requests per 1m`",
                );
                0
            }
            Ok(n) => n as u32,
        };
        let unit = match t.unit.text.to_ascii_lowercase().as_str() {
            "requests" | "request" => Unit::Requests,
            "packets" | "packet" => Unit::Packets,
            "connections" | "connection" => Unit::Connections,
            _ => {
                self.bad(
                    code::BAD_THROTTLE,
                    &t.unit,
                    "unknown throttle unit",
                    "expected requests, packets or connections",
                    "requests are counted in user space; packets and connections (TCP SYNs) in XDP",
                );
                Unit::Requests
            }
        };
        let period_ms = self.duration(&t.period).unwrap_or(1);
        let burst = match &t.burst {
            None => limit,
            Some(w) => match crate::value::parse_count(&w.text, u64::from(u32::MAX)) {
                Ok(n) if n >= 1 => n as u32,
                _ => {
                    self.bad(
                        code::BAD_NUMBER,
                        w,
                        "invalid burst",
                        "expected a whole number above 0",
                        "burst is the bucket size: how many may arrive at once",
                    );
                    1
                }
            },
        };
        let ban_ms = t
            .ban
            .as_ref()
            .map_or(Some(0), |w| self.duration(w))
            .unwrap_or(0);
        let status = match &t.status {
            Some(w) => self.status(w, 400).unwrap_or(429),
            None => 429,
        };
        let reason = t
            .reason
            .as_ref()
            .map_or_else(|| reason_phrase(status).to_string(), |r| r.text.clone());
        let mut keys: Vec<Key> = Vec::new();
        for k in &t.by {
            let (key, kspan) = match k {
                KeyDecl::Header(w) => (Key::Header(w.text.to_ascii_lowercase()), w.span),
                KeyDecl::Query(w) => (Key::Query(w.text.clone()), w.span),
                KeyDecl::Prefix(a, b, s) => {
                    let v4 = self.prefix_len(a, 32);
                    let v6 = b.as_ref().map_or(Some(64), |b| self.prefix_len(b, 128));
                    match (v4, v6) {
                        (Some(v4), Some(v6)) => (Key::Prefix { v4, v6 }, *s),
                        _ => continue,
                    }
                }
                KeyDecl::Word(w) => {
                    let key = match w.text.to_ascii_lowercase().as_str() {
                        "global" => Key::Global,
                        "server" => Key::Server,
                        "ip" => Key::Ip,
                        "host" => Key::Host,
                        "path" => Key::Path,
                        "method" => Key::Method,
                        _ => {
                            self.bad(code::BAD_THROTTLE, w, "unknown throttle key", "not a key", "keys are global, server, ip, prefix(24, 64), host, path, method, header(\"x\"), query(\"p\")");
                            continue;
                        }
                    };
                    (key, w.span)
                }
            };
            if keys.contains(&key) {
                self.diags.push(
                    Diagnostic::error(code::BAD_THROTTLE, "throttle key given twice")
                        .primary(kspan, "repeated")
                        .hint("remove the repetition"),
                );
                continue;
            }
            if unit != Unit::Requests && !matches!(key, Key::Ip | Key::Prefix { .. }) {
                self.diags.push(
                    Diagnostic::error(code::BAD_THROTTLE, "packet and connection limits are keyed by address")
                        .primary(kspan, "not an address key")
                        .hint("use `by ip` or `by prefix(24, 64)`; the packet plane cannot see HTTP fields"),
                );
                continue;
            }
            keys.push(key);
        }
        for (alone, what) in [
            (
                Key::Global,
                "`global` is one bucket per host; drop it, or use `by host`",
            ),
            (
                Key::Server,
                "`server` is one bucket for every request; drop it or the other keys",
            ),
        ] {
            if keys.len() > 1 && keys.contains(&alone) {
                let s = t.by_span.unwrap_or(span);
                let name = if alone == Key::Global {
                    "global"
                } else {
                    "server"
                };
                self.diags.push(
                    Diagnostic::error(
                        code::BAD_THROTTLE,
                        format!("`{name}` cannot be combined with other keys"),
                    )
                    .primary(s, "here")
                    .hint(what),
                );
            }
        }
        let bucket = match &t.bucket {
            None => Bucket::Gcra,
            Some(w) => match w.text.to_ascii_lowercase().as_str() {
                "gcra" => Bucket::Gcra,
                "vsthrottle" => Bucket::Vsthrottle,
                _ => {
                    self.bad(
                        code::BAD_THROTTLE,
                        w,
                        "unknown bucket",
                        "expected gcra or vsthrottle",
                        "`bucket vsthrottle` admits exactly as requestctl's vsthrottle.is_denied does",
                    );
                    Bucket::Gcra
                }
            },
        };
        if bucket == Bucket::Vsthrottle {
            if unit != Unit::Requests {
                self.bad(
                    code::BAD_THROTTLE,
                    &t.unit,
                    "`bucket vsthrottle` counts requests only",
                    "not requests",
                    "packet and connection limits use the default bucket",
                );
            }
            if let Some(b) = t.burst.as_ref().filter(|_| burst != limit) {
                self.bad(
                    code::BAD_THROTTLE,
                    b,
                    "`bucket vsthrottle` holds exactly `limit` tokens",
                    "burst differs from the limit",
                    "drop `burst`: vsthrottle's bucket size is its limit",
                );
            }
        }
        if keys.is_empty() {
            keys.push(if unit == Unit::Requests {
                Key::Global
            } else {
                Key::Ip
            });
        }
        if let (Some(s), false) = (t.shared, unit == Unit::Requests) {
            self.diags.push(
                Diagnostic::error(code::BAD_THROTTLE, "only request limits can be shared")
                    .primary(s, "packets and connections are counted in XDP, per host")
                    .hint("drop `shared`, or count `requests` (the HTTP plane shares them through Redis)"),
            );
        }
        if let (Some(s), Bucket::Vsthrottle) = (t.shared, bucket) {
            self.diags.push(
                Diagnostic::error(code::BAD_THROTTLE, "a vsthrottle bucket cannot be shared")
                    .primary(span, "both `shared` and `bucket vsthrottle`")
                    .secondary(s, "shared here")
                    .hint("drop `shared` to count vsthrottle's bucket per host, or drop `bucket vsthrottle`: shared limits are GCRA"),
            );
        }
        if self.diags.error_count() > errors {
            return None;
        }
        Some(Throttle {
            limit,
            unit,
            period_ms,
            burst,
            keys,
            ban_ms,
            status,
            reason,
            bucket,
            shared: t.shared.is_some(),
        })
    }

    fn prefix_len(&mut self, w: &Word, max: u64) -> Option<u8> {
        match crate::value::parse_count(w.text.trim_start_matches('/'), max) {
            Ok(n) => Some(n as u8),
            Err(e) => {
                self.bad(
                    code::BAD_NUMBER,
                    w,
                    "invalid prefix length",
                    &e,
                    "prefix(24, 64) groups IPv4 clients by /24 and IPv6 clients by /64",
                );
                None
            }
        }
    }

    pub(crate) fn duration(&mut self, w: &Word) -> Option<u64> {
        match crate::value::parse_duration(&w.text) {
            Ok(0) => {
                self.bad(
                    code::BAD_DURATION,
                    w,
                    "invalid duration",
                    "must be longer than zero",
                    "durations are like 500ms, 30s, 5m, 1h, 1d",
                );
                None
            }
            Ok(ms) => Some(ms),
            Err(e) => {
                let hint = match crate::diag::duration_in_words(&w.text) {
                    Some(d) => {
                        format!("did you mean `{d}`? durations are like 500ms, 30s, 5m, 1h, 1d")
                    }
                    None => "durations are like 500ms, 30s, 5m, 1h, 1d".to_string(),
                };
                self.bad(code::BAD_DURATION, w, "invalid duration", e, &hint);
                None
            }
        }
    }
}
