//! What a ruleset needs from the proxy in front of the agent, and what the
//! proxy must be ready to answer: the headers its rules read and the
//! statuses its blocks answer with.

use rctl_compiler::ir::{Action, Atom, Key, Ruleset, StrField, Unit};
use std::collections::BTreeSet;

/// What one ruleset reads and answers, for the request plane.
///
/// Only enabled rules count (disabled ones are never evaluated); `log`
/// and `shadow` rules count for what they read, since the agent tags
/// requests with them, but not for what they answer, since they never
/// enforce. Packet and connection limits belong to the XDP plane and
/// count for neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    /// Lower-case names of the headers conditions and throttle keys read.
    pub headers: BTreeSet<String>,
    /// Statuses `deny` rules answer with.
    pub deny_statuses: BTreeSet<u16>,
    /// Statuses request `throttle` rules answer with.
    pub throttle_statuses: BTreeSet<u16>,
    /// Whether some request rule drops.
    pub drops: bool,
    /// Request rules (enabled, not packet limits).
    pub rules: usize,
}

impl Reads {
    /// Walks every enabled request rule of `rs`.
    pub fn of(rs: &Ruleset) -> Reads {
        let mut r = Reads::default();
        for rule in rs
            .rules
            .iter()
            .filter(|x| x.enabled && !x.is_packet_limit())
        {
            r.rules += 1;
            rule.cond.visit_atoms(&mut |a| {
                if let Some(atom) = rs.atoms.get(a as usize) {
                    if let Some(h) = header_of(atom) {
                        r.headers.insert(h.to_string());
                    }
                }
            });
            match &rule.action {
                Action::Throttle(t) if t.unit == Unit::Requests => {
                    for k in &t.keys {
                        if let Key::Header(h) = k {
                            r.headers.insert(h.to_ascii_lowercase());
                        }
                    }
                    if !rule.shadow {
                        r.throttle_statuses.insert(t.status);
                    }
                }
                Action::Deny { status, .. } if !rule.shadow => {
                    r.deny_statuses.insert(*status);
                }
                Action::Drop if !rule.shadow => r.drops = true,
                _ => {}
            }
        }
        r
    }

    /// Every status a block may answer with, deny's and throttle's.
    pub fn statuses(&self) -> BTreeSet<u16> {
        self.deny_statuses
            .union(&self.throttle_statuses)
            .copied()
            .collect()
    }
}

/// The header an atom reads, if it reads one.
fn header_of(a: &Atom) -> Option<&str> {
    match a {
        Atom::Str {
            field: StrField::Header(h),
            ..
        }
        | Atom::Present(StrField::Header(h)) => Some(h),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(src: &str) -> Reads {
        Reads::of(&crate::test_ruleset(src))
    }

    #[test]
    fn headers_come_from_conditions_presence_tests_and_throttle_keys() {
        let r = reads(
            r#"
rule a { when header("User-Agent") ~* "^curl/" and header("x-a") present deny 418 "tea" }
rule b { when path == "/s" throttle 5 requests per 1m by header("X-Key"), ip status 503 }
rule c { when header("x-off") present enabled false deny }
rule d { shadow when header("x-shadow") == "1" deny 451 }
rule e { when header("x-log") absent log }
rule f { when proto == tcp throttle 10 packets per 1s by ip status 420 }
"#,
        );
        let h: Vec<&str> = r.headers.iter().map(String::as_str).collect();
        assert_eq!(h, ["user-agent", "x-a", "x-key", "x-log", "x-shadow"]);
        assert_eq!(r.deny_statuses.iter().copied().collect::<Vec<_>>(), [418]);
        assert_eq!(
            r.throttle_statuses.iter().copied().collect::<Vec<_>>(),
            [503]
        );
        assert!(!r.drops);
        assert_eq!(r.rules, 4);
    }

    #[test]
    fn drops_and_default_statuses() {
        let r = reads(
            r#"
rule a { when path == "/x" drop }
rule b { when path == "/y" deny }
rule c { when path == "/z" throttle 1 requests per 1s }
"#,
        );
        assert!(r.drops);
        assert_eq!(r.statuses().into_iter().collect::<Vec<_>>(), [403, 429]);
    }
}
