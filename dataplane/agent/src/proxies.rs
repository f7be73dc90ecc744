//! What the proxies in front say their configuration covers
//! (`rctl_emit::coverage`): HAProxy on an occasional `rctl-cfg` SPOE
//! message, nginx on each check request (`X-Rctl-Config`). Against it,
//! a ruleset that reads a header the proxy does not send, or answers with
//! a status it has no line for, needs the proxy's configuration emitted
//! again: `rctl apply` says so before it commits, and `rctl status` and
//! the metrics say so of the ruleset in force.

use rctl_compiler::ir::{Action, Atom, Key, Ruleset, StrField};
use rctl_emit::coverage::Coverage;
use rctl_emit::reads::Reads;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// A proxy's kind, as the agent hears from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proxy {
    /// HAProxy, over SPOE.
    Haproxy,
    /// nginx, over the HTTP check endpoint.
    Nginx,
}

impl Proxy {
    /// Its name in messages and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Proxy::Haproxy => "haproxy",
            Proxy::Nginx => "nginx",
        }
    }
}

#[derive(Debug, Clone)]
struct Seen {
    coverage: Coverage,
    at_unix: u64,
}

/// What each proxy said last.
#[derive(Debug, Default)]
pub struct Proxies {
    seen: Mutex<BTreeMap<Proxy, Seen>>,
    /// A hash of the text each proxy sent last (0: none yet), so that a
    /// repeat costs a hash and a load, not a lock.
    last: [AtomicU64; 2],
}

/// A proxy's configuration against a ruleset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyStatus {
    /// The proxy.
    pub proxy: Proxy,
    /// When it last said what its configuration covers (unix seconds).
    pub seen_unix: u64,
    /// What the ruleset needs that the configuration lacks, one sentence
    /// each (empty: the configuration is up to date).
    pub stale: Vec<String>,
}

fn quick_hash(b: &[u8]) -> u64 {
    // A fixed key: this only tells a repeat from a change.
    let mut h =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
    h.write(b);
    h.finish() | 1
}

impl Proxies {
    /// Records what `proxy` says it covers (`text` in the text form, or
    /// `hex` of it for HAProxy); a text that is not a coverage is ignored.
    pub fn saw(&self, proxy: Proxy, text: &[u8], hex: bool) {
        let i = proxy as usize;
        let h = quick_hash(text);
        if self.last[i].load(Relaxed) == h {
            return;
        }
        let coverage = if hex {
            Coverage::parse_hex(text)
        } else {
            std::str::from_utf8(text).ok().and_then(Coverage::parse)
        };
        let Some(coverage) = coverage else { return };
        self.last[i].store(h, Relaxed);
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).insert(
            proxy,
            Seen {
                coverage,
                at_unix: crate::now_unix(),
            },
        );
    }

    /// The headers every proxy heard from sends the agent (`None`: every
    /// header, as nginx's configuration sends them); with no proxy heard
    /// from yet, those `rs` reads, which is what a configuration emitted
    /// for it sends.
    pub fn headers_sent(&self, rs: &Ruleset) -> Option<std::collections::BTreeSet<String>> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.is_empty() {
            return Some(Reads::of(rs).headers);
        }
        let mut sent: Option<std::collections::BTreeSet<String>> = None;
        for s in seen.values().filter(|s| !s.coverage.all_headers) {
            sent = Some(match sent {
                None => s.coverage.headers.clone(),
                Some(h) => h.intersection(&s.coverage.headers).cloned().collect(),
            });
        }
        sent
    }

    /// Every proxy heard from, against `rs`.
    pub fn against(&self, rs: &Ruleset) -> Vec<ProxyStatus> {
        let needs = Reads::of(rs);
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        seen.into_iter()
            .map(|(proxy, s)| {
                let (headers, statuses) = s.coverage.missing(&needs);
                let mut stale = Vec::new();
                for h in headers {
                    stale.push(format!(
                        "the {} configuration does not send header({h:?}), which {} read{}",
                        proxy.as_str(),
                        names(&readers(rs, &h)),
                        if readers(rs, &h).len() == 1 { "s" } else { "" }
                    ));
                }
                for st in statuses {
                    stale.push(format!(
                        "the {} configuration has no line for status {st}, which {} answer{} with (it answers 403 or 429 instead)",
                        proxy.as_str(),
                        names(&answering(rs, st)),
                        if answering(rs, st).len() == 1 { "s" } else { "" }
                    ));
                }
                ProxyStatus {
                    proxy,
                    seen_unix: s.at_unix,
                    stale,
                }
            })
            .collect()
    }
}

fn names(rules: &[String]) -> String {
    match rules {
        [] => "a rule".into(),
        [one] => format!("rule {one}"),
        many => format!("rules {}", many.join(", ")),
    }
}

/// The enabled request rules that read header `h`.
fn readers(rs: &Ruleset, h: &str) -> Vec<String> {
    let reads_it = |a: &Atom| {
        matches!(a,
            Atom::Str { field: StrField::Header(x), .. } | Atom::Present(StrField::Header(x))
                if x.eq_ignore_ascii_case(h))
    };
    rs.rules
        .iter()
        .filter(|r| r.enabled && !r.is_packet_limit())
        .filter(|r| {
            let mut hit = false;
            r.cond.visit_atoms(&mut |i| {
                hit |= rs.atoms.get(i as usize).is_some_and(reads_it);
            });
            let keyed = matches!(&r.action, Action::Throttle(t)
                if t.keys.iter().any(|k| matches!(k, Key::Header(x) if x.eq_ignore_ascii_case(h))));
            hit || keyed
        })
        .map(|r| r.name.clone())
        .collect()
}

/// The enforcing request rules that answer with `status`.
fn answering(rs: &Ruleset, status: u16) -> Vec<String> {
    rs.rules
        .iter()
        .filter(|r| r.enabled && !r.shadow && !r.is_packet_limit())
        .filter(|r| match &r.action {
            Action::Deny { status: s, .. } => *s == status,
            Action::Throttle(t) => t.status == status,
            _ => false,
        })
        .map(|r| r.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ruleset(src: &str) -> Ruleset {
        rctl_compiler::compile_str("t.rctl", src, &Default::default())
            .ruleset
            .expect("compiles")
    }

    #[test]
    fn a_new_header_and_a_new_status_make_the_configuration_stale() {
        let old = ruleset(r#"rule a { when header("user-agent") ~* "^curl" deny 403 }"#);
        let p = Proxies::default();
        let c = Coverage::of(&Reads::of(&old), &["user-agent".into()]);
        p.saw(Proxy::Haproxy, c.to_hex().as_bytes(), true);
        p.saw(Proxy::Nginx, b"not a coverage", false);
        assert!(p.against(&old)[0].stale.is_empty());
        assert_eq!(
            p.against(&old).len(),
            1,
            "garbage from nginx is not a proxy"
        );
        let new = ruleset(
            r#"
rule a { when header("user-agent") ~* "^curl" deny 403 }
rule b { when header("x-new") present deny 451 "new" }
"#,
        );
        let s = &p.against(&new)[0];
        assert_eq!(s.proxy, Proxy::Haproxy);
        assert_eq!(
            s.stale,
            [
                "the haproxy configuration does not send header(\"x-new\"), which rule b reads",
                "the haproxy configuration has no line for status 451, which rule b answers with (it answers 403 or 429 instead)"
            ]
        );
        // nginx sends every header: only the status is missing.
        p.saw(
            Proxy::Nginx,
            Coverage::every_header(&Reads::of(&old))
                .to_text()
                .as_bytes(),
            false,
        );
        let n = p.against(&new);
        assert_eq!(n[1].proxy, Proxy::Nginx);
        assert_eq!(n[1].stale.len(), 1, "{:?}", n[1].stale);
    }
}
