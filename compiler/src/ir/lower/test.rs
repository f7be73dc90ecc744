//! Lowering of `test` blocks.

use crate::ast::{self, Word};
use crate::diag::{code, Diagnostic};
use crate::ir::Proto;
use crate::lower::Lowerer;
use crate::spec::{Expect, Outcome, Quantity, Replay, Sample, SampleKind, TestCase};
use std::collections::HashSet;
use std::net::IpAddr;

impl Lowerer<'_> {
    pub(crate) fn test(
        &mut self,
        t: &ast::TestDecl,
        rules: &HashSet<&str>,
        sites: &HashSet<&str>,
    ) -> Option<TestCase> {
        let errors = self.diags.error_count();
        let site = t.site.as_ref().map(|w| w.text.clone());
        if let Some(w) = &t.site {
            if !sites.contains(w.text.as_str()) {
                self.test_error(
                    w,
                    "no rule names this site",
                    "a test's site must appear in some rule's `sites { … }`",
                );
            }
        }
        let mut samples = Vec::new();
        let mut total: u64 = 0;
        let mut labels = HashSet::new();
        for s in &t.samples {
            if let Some(sample) = self.sample(s) {
                total += u64::from(sample.count);
                if let Some(l) = &sample.label {
                    labels.insert(l.clone());
                }
                samples.push(sample);
            }
        }
        let mut replays = Vec::new();
        if t.replays.len() > MAX_REPLAYS {
            self.test_error(
                &t.name,
                "too many replay lines",
                &format!("a test has at most {MAX_REPLAYS} `replay` lines; select clients with `ip` instead"),
            );
        }
        for r in t.replays.iter().take(MAX_REPLAYS) {
            if let Some(replay) = self.replay(r) {
                if let Some(l) = &replay.label {
                    labels.insert(l.clone());
                }
                replays.push(replay);
            }
        }
        if let (Some(s), Some(_)) = (t.samples.first(), t.replays.first()) {
            self.diags.push(
                Diagnostic::error(
                    code::BAD_TEST,
                    format!("test \"{}\" both replays traffic and sends samples", t.name.text),
                )
                .primary(s.span, "a sample beside a replay")
                .hint("a test judges one traffic: a real log or capture (`replay`), or written samples; put them in two tests"),
            );
        }
        let before = self.test_samples;
        self.test_samples = before.saturating_add(total);
        let (each, all) = (self.opts.max_test_samples, self.opts.max_total_test_samples);
        if total > each {
            self.diags.push(
                Diagnostic::error(
                    code::LIMIT,
                    format!("test sends {total} samples, more than the limit of {each}"),
                )
                .primary(t.name.span, "too much traffic")
                .hint(format!("a test keeps every decision in memory: at most {each} samples a test, {all} in all; lower the repeat counts or split the test")),
            );
        } else if before <= all && self.test_samples > all {
            self.diags.push(
                Diagnostic::error(
                    code::LIMIT,
                    format!("the tests send more than {all} samples in all"),
                )
                .primary(t.name.span, "the limit is crossed in this test")
                .hint(format!("`rctl test` runs every sample: at most {each} samples a test, {all} in all; lower the repeat counts")),
            );
        }
        if t.samples.is_empty() && t.replays.is_empty() {
            self.diags.push(
                Diagnostic::error(
                    code::BAD_TEST,
                    format!("test \"{}\" sends nothing", t.name.text),
                )
                .primary(t.name.span, "no request or packet")
                .hint("add `request { path \"/\" }`, `packet { ip 192.0.2.1 }` or `replay \"access.log\"`"),
            );
        }
        if t.expects.is_empty() {
            self.diags.push(
                Diagnostic::error(
                    code::BAD_TEST,
                    format!("test \"{}\" expects nothing", t.name.text),
                )
                .primary(t.name.span, "no expect")
                .hint("add `expect all pass` or similar"),
            );
        }
        let mut expects = Vec::new();
        for e in &t.expects {
            let quantity = match e.quantity.text.to_ascii_lowercase().as_str() {
                "all" => Quantity::All,
                "none" => Quantity::None,
                "first" => Quantity::First,
                "last" => Quantity::Last,
                n => match crate::value::parse_count(n, u64::from(u32::MAX)) {
                    Ok(n) => Quantity::Count(n as u32),
                    Err(_) => {
                        self.test_error(
                            &e.quantity,
                            "invalid count",
                            "use all, none, first, last or a number",
                        );
                        continue;
                    }
                },
            };
            let outcome = match e.verdict.text.to_ascii_lowercase().as_str() {
                "pass" => Outcome::Pass,
                "allow" => Outcome::Allow,
                "deny" => Outcome::Deny,
                "throttle" => Outcome::Throttle,
                "drop" => Outcome::Drop,
                _ => Outcome::Logged,
            };
            if let Some(r) = &e.rule {
                if !rules.contains(r.text.as_str()) {
                    let hint = match crate::diag::nearest(&r.text, rules.iter().copied()) {
                        Some(n) => format!("did you mean `{n}`?"),
                        None => {
                            let mut names: Vec<&str> = rules.iter().copied().collect();
                            names.sort_unstable();
                            let shown = names
                                .iter()
                                .take(5)
                                .map(|n| format!("`{n}`"))
                                .collect::<Vec<_>>();
                            format!(
                                "name a rule of this ruleset ({}{})",
                                shown.join(", "),
                                if names.len() > 5 { ", …" } else { "" }
                            )
                        }
                    };
                    self.test_error(r, "unknown rule", &hint);
                }
                if outcome == Outcome::Pass {
                    self.test_error(r, "`pass` has no deciding rule", "drop the `by …`");
                }
            }
            if let Some(l) = &e.label {
                if !labels.contains(&l.text) {
                    self.test_error(
                        l,
                        "no sample has this label",
                        "label a sample or a replay: `request scraper { … }`, `replay scraper \"access.log\" ip 45.83.64.0/24`",
                    );
                }
            }
            expects.push(Expect {
                label: e.label.as_ref().map(|w| w.text.clone()),
                quantity,
                outcome,
                rule: e.rule.as_ref().map(|w| w.text.clone()),
                span: e.span,
            });
        }
        (self.diags.error_count() == errors).then(|| TestCase {
            name: t.name.text.clone(),
            site,
            samples,
            replays,
            expects,
            span: t.span,
        })
    }

    fn replay(&mut self, r: &ast::ReplayDecl) -> Option<Replay> {
        let errors = self.diags.error_count();
        if r.path.text.is_empty() {
            self.test_error(&r.path, "no file named", "write replay \"access.log\"");
        }
        let net =
            r.ip.as_ref()
                .and_then(|w| match crate::cidr::parse_cidr(&w.text) {
                    Ok((crate::cidr::Cidr::V4(n, len), _)) => {
                        Some((IpAddr::from(n.to_be_bytes()), len))
                    }
                    Ok((crate::cidr::Cidr::V6(n, len), _)) => {
                        Some((IpAddr::from(n.to_be_bytes()), len))
                    }
                    Err(e) => {
                        self.test_error(
                            w,
                            &e.reason,
                            "write ip 45.83.64.0/24, ip 2001:db8::/32 or one address",
                        );
                        None
                    }
                });
        for w in &r.repeated {
            self.test_error(
                w,
                "given twice on one replay",
                "keep one `format`, one `captured` and one `ip`",
            );
        }
        let captured = match &r.captured {
            None => Vec::new(),
            Some(w) => match captured_headers(&w.text) {
                Ok(c) => c,
                Err(why) => {
                    self.test_error(
                        w,
                        &why,
                        "write captured \"Host:64,User-Agent:128\": the capture slots' headers in order, each with its `len`",
                    );
                    Vec::new()
                }
            },
        };
        // Relative to the folder of the file the test is in, and read only
        // below the ruleset's roots, as `include` and `file`. A file that
        // is not there yet is `rctl test`'s to report.
        let base = self
            .map
            .get(r.span.file)
            .and_then(|f| f.path.parent().map(std::path::Path::to_path_buf))
            .unwrap_or_default();
        let path = base.join(&r.path.text);
        let path = match self.roots.resolve(&path) {
            Ok(canonical) => canonical,
            Err(crate::files::LoadError::Io(_)) => path,
            Err(e) => {
                let d = e.into_diagnostic(self.map, Some(r.path.span), &path);
                self.diags.push(d);
                return None;
            }
        };
        (self.diags.error_count() == errors).then(|| Replay {
            label: r.label.as_ref().map(|w| w.text.clone()),
            path,
            format: r.format.as_ref().map(|w| w.text.clone()),
            captured,
            net,
            span: r.span,
        })
    }

    fn test_error(&mut self, w: &Word, label: &str, hint: &str) {
        self.diags.push(
            Diagnostic::error(code::BAD_TEST, format!("in test: {label}: `{}`", w.text))
                .primary(w.span, label.to_string())
                .hint(hint.to_string()),
        );
    }

    fn sample(&mut self, s: &ast::SampleDecl) -> Option<Sample> {
        let errors = self.diags.error_count();
        let mut method = "GET".to_string();
        let mut host = "example.org".to_string();
        let mut target = "/".to_string();
        let mut ip: IpAddr = IpAddr::from([192, 0, 2, 1]);
        let mut dst: Option<IpAddr> = None;
        let mut port: u16 = if s.is_packet { 443 } else { 80 };
        let mut proto = Proto::Tcp;
        for (name, value) in &s.fields {
            let n = name.text.to_ascii_lowercase();
            let http_only = matches!(n.as_str(), "method" | "host" | "path");
            if s.is_packet && http_only {
                self.test_error(
                    name,
                    "packets have no HTTP fields",
                    "use a `request { … }` block for method, host and path",
                );
                continue;
            }
            if !s.is_packet && n == "proto" {
                self.test_error(
                    name,
                    "requests are always TCP",
                    "use a `packet { … }` block to choose a protocol",
                );
                continue;
            }
            match n.as_str() {
                "method" => method = value.text.clone(),
                "host" => host = value.text.clone(),
                "path" => {
                    if !value.text.starts_with('/') {
                        self.test_error(
                            value,
                            "a path starts with `/`",
                            "write path \"/sparql?query=…\"",
                        );
                    }
                    target = value.text.clone();
                }
                "ip" => match value.text.parse::<IpAddr>() {
                    Ok(a) => ip = a,
                    Err(_) => self.test_error(
                        value,
                        "not an IP address",
                        "write ip 192.0.2.1 or ip 2001:db8::1",
                    ),
                },
                "dst_ip" => match value.text.parse::<IpAddr>() {
                    Ok(a) => dst = Some(a),
                    Err(_) => self.test_error(
                        value,
                        "not an IP address",
                        "write dst_ip 198.51.100.10 or dst_ip 2001:db8::10",
                    ),
                },
                "port" => match value.text.parse::<u16>() {
                    Ok(p) => port = p,
                    Err(_) => self.test_error(value, "not a port", "a port is 0 to 65535"),
                },
                _ => match value.text.to_ascii_lowercase().as_str() {
                    "tcp" => proto = Proto::Tcp,
                    "udp" => proto = Proto::Udp,
                    "icmp" => proto = Proto::Icmp,
                    _ => self.test_error(value, "unknown protocol", "use tcp, udp or icmp"),
                },
            }
        }
        if s.is_packet && !s.headers.is_empty() {
            self.test_error(
                &s.headers[0].0,
                "packets have no headers",
                "use a `request { … }` block",
            );
        }
        if let (false, Some(span)) = (s.is_packet, s.syn) {
            self.diags.push(
                Diagnostic::error(code::BAD_TEST, "`syn` applies to packets")
                    .primary(span, "in a request block")
                    .hint("use a `packet { … syn }` block"),
            );
        }
        let (count, over_ms) = match &s.repeat {
            None => (1, 0),
            Some((n, over)) => {
                let max = self.opts.max_test_samples.min(u64::from(u32::MAX));
                let count = match crate::value::parse_count(&n.text, max) {
                    Ok(c) if c >= 1 => c as u32,
                    _ => {
                        self.test_error(
                            n,
                            "invalid repeat count",
                            &format!("repeat takes 1 to {max} (the samples a test may send)"),
                        );
                        1
                    }
                };
                let over_ms = match over {
                    Some(w) => crate::value::parse_duration(&w.text).unwrap_or_else(|e| {
                        self.test_error(w, e, &duration_hint(&w.text));
                        0
                    }),
                    None => 0,
                };
                (count, over_ms)
            }
        };
        let start_ms = match &s.at {
            Some(w) => crate::value::parse_duration(&w.text).unwrap_or_else(|e| {
                self.test_error(w, e, &duration_hint(&w.text));
                0
            }),
            None => 0,
        };
        let kind = if s.is_packet {
            SampleKind::Packet {
                proto,
                syn: s.syn.is_some(),
            }
        } else {
            SampleKind::Request {
                method,
                host,
                target,
                headers: s
                    .headers
                    .iter()
                    .map(|(n, v)| (n.text.clone(), v.text.clone()))
                    .collect(),
            }
        };
        (self.diags.error_count() == errors).then(|| Sample {
            label: s.label.as_ref().map(|w| w.text.clone()),
            kind,
            ip,
            dst,
            port,
            count,
            start_ms,
            over_ms,
        })
    }
}

/// `replay` lines a test may have.
const MAX_REPLAYS: usize = 1_000;

/// The hint for a duration that does not read.
fn duration_hint(text: &str) -> String {
    match crate::diag::duration_in_words(text) {
        Some(d) => format!("did you mean `{d}`? durations are like 500ms, 30s, 5m"),
        None => "durations are like 500ms, 30s, 5m".to_string(),
    }
}

/// The captured headers of `captured "H[:LEN],…"`, one slot per item (see
/// [`crate::spec::capture_slot`]), at most 64.
fn captured_headers(text: &str) -> Result<Vec<(String, Option<usize>)>, String> {
    let out = text
        .split(',')
        .map(crate::spec::capture_slot)
        .collect::<Result<Vec<_>, _>>()?;
    if out.len() > 64 {
        return Err(format!("{} capture slots; at most 64", out.len()));
    }
    Ok(out)
}
