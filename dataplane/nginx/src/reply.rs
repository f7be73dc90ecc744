//! What the module does with an outcome, and the text of its variables:
//! the same statuses, bodies, `Retry-After` and tags as `rctl serve`'s
//! answers through the `auth_request` configuration `rctl emit nginx`
//! writes.

#![forbid(unsafe_code)]

use rctl_dataplane::answer::{Action, Outcome};
use std::net::IpAddr;

/// How a request is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Served: the request goes on to its content.
    Serve,
    /// Closed without an answer (nginx's 444).
    Close,
    /// Answered here.
    Answer {
        /// The status.
        status: u16,
        /// The body: the reason and a newline (text/plain).
        body: String,
        /// `Retry-After` (throttle only).
        retry_after: Option<u64>,
    },
}

impl Reply {
    /// The reply to `o`.
    pub fn of(o: &Outcome) -> Reply {
        match o.action {
            Action::Pass | Action::Allow => Reply::Serve,
            Action::Drop => Reply::Close,
            Action::Deny | Action::Throttle => Reply::Answer {
                status: o.status,
                body: format!("{}\n", o.reason),
                retry_after: (o.action == Action::Throttle).then_some(o.retry_after_s),
            },
        }
    }
}

/// The module's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// `$rctl_action`: pass, allow, deny, throttle or drop.
    Action,
    /// `$rctl_rule`: the deciding rule.
    Rule,
    /// `$rctl_tags`: the `log` and `shadow` rules that matched, comma-separated
    /// (requestctl's `X-Requestctl`).
    Tags,
    /// `$rctl_status`: the status of a block (444 for a drop).
    Status,
    /// `$rctl_reason`: the reason of a block.
    Reason,
    /// `$rctl_retry_after`: seconds, for a throttle.
    RetryAfter,
    /// `$rctl_shadow`: what shadow mode kept from being enforced.
    Shadow,
    /// `$rctl_generation`: the generation that decided.
    Generation,
    /// `$rctl_check`: `ok` when decided, `error:KIND` when the module
    /// failed open.
    Check,
}

/// Every variable with its name (without `$`).
pub const VARS: [(&str, Var); 9] = [
    ("rctl_action", Var::Action),
    ("rctl_rule", Var::Rule),
    ("rctl_tags", Var::Tags),
    ("rctl_status", Var::Status),
    ("rctl_reason", Var::Reason),
    ("rctl_retry_after", Var::RetryAfter),
    ("rctl_shadow", Var::Shadow),
    ("rctl_generation", Var::Generation),
    ("rctl_check", Var::Check),
];

/// What a request's decision left for its variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Decided by the engine.
    Outcome(Outcome),
    /// Not checked: the module failed open (`kind` says why).
    Unchecked(&'static str),
}

impl Decided {
    /// The value of `v` (`None`: not found, logged as `-`).
    pub fn var(&self, v: Var) -> Option<String> {
        let o = match self {
            Decided::Outcome(o) => o,
            Decided::Unchecked(kind) => {
                return (v == Var::Check).then(|| format!("error:{kind}"));
            }
        };
        let some = |s: String| (!s.is_empty()).then_some(s);
        match v {
            Var::Action => Some(o.action.as_str().into()),
            Var::Rule => o.rule.clone(),
            Var::Tags => some(o.tags.join(",")),
            Var::Status => o.action.blocks().then(|| o.block_status().to_string()),
            Var::Reason => some(if o.action.blocks() {
                o.reason.clone()
            } else {
                String::new()
            }),
            Var::RetryAfter => (o.action == Action::Throttle).then(|| o.retry_after_s.to_string()),
            Var::Shadow => o.shadowed.map(|a| a.as_str().into()),
            Var::Generation => Some(o.generation.to_string()),
            Var::Check => Some("ok".into()),
        }
    }
}

/// The client address in `value` (`rctl_client_ip`'s variable): the last
/// of its comma-separated entries, as a proxy in front appends its peer
/// to `X-Forwarded-For`.
pub fn client_ip(value: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(value).ok()?;
    s.rsplit(',').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(action: Action) -> Outcome {
        Outcome {
            action,
            status: 429,
            reason: "slow down".into(),
            retry_after_s: 600,
            rule: Some("r".into()),
            shadowed: None,
            tags: vec!["a".into(), "b".into()],
            generation: 3,
        }
    }

    #[test]
    fn blocks_are_answered_as_the_agents_configuration_answers_them() {
        assert_eq!(
            Reply::of(&outcome(Action::Throttle)),
            Reply::Answer {
                status: 429,
                body: "slow down\n".into(),
                retry_after: Some(600)
            }
        );
        let deny = Outcome {
            status: 403,
            ..outcome(Action::Deny)
        };
        assert!(matches!(
            Reply::of(&deny),
            Reply::Answer {
                status: 403,
                retry_after: None,
                ..
            }
        ));
        assert_eq!(Reply::of(&outcome(Action::Drop)), Reply::Close);
        assert_eq!(Reply::of(&outcome(Action::Allow)), Reply::Serve);
    }

    #[test]
    fn variables_say_what_decided() {
        let d = Decided::Outcome(outcome(Action::Drop));
        assert_eq!(d.var(Var::Status).as_deref(), Some("444"));
        assert_eq!(d.var(Var::Tags).as_deref(), Some("a,b"));
        assert_eq!(d.var(Var::RetryAfter), None);
        assert_eq!(d.var(Var::Check).as_deref(), Some("ok"));
        let p = Decided::Outcome(Outcome {
            tags: vec![],
            ..outcome(Action::Pass)
        });
        assert_eq!(
            (p.var(Var::Status), p.var(Var::Tags), p.var(Var::Reason)),
            (None, None, None)
        );
        let u = Decided::Unchecked("panic");
        assert_eq!(u.var(Var::Check).as_deref(), Some("error:panic"));
        assert_eq!(u.var(Var::Action), None);
    }

    #[test]
    fn the_client_is_the_last_address() {
        assert_eq!(
            client_ip(b"198.51.100.1, 203.0.113.9"),
            "203.0.113.9".parse().ok()
        );
        assert_eq!(client_ip(b" 2001:db8::1 "), "2001:db8::1".parse().ok());
        assert_eq!(client_ip(b"unknown"), None);
        assert_eq!(client_ip(b"\xff"), None);
    }
}
