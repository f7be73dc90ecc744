//! What a proxy is told about a request: the proxy-facing form of a
//! [`Decision`], the same for every enforcement point (the agent's SPOE
//! and HTTP answers, the nginx module).

use crate::{Decision, Engine, Verdict};

/// What a proxy should do with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// No rule decided: serve it.
    Pass,
    /// An exemption decided: serve it.
    Allow,
    /// Answer with `status` and `reason`.
    Deny,
    /// Answer with `status`, `reason` and `Retry-After`.
    Throttle,
    /// Close the connection without an answer.
    Drop,
}

impl Action {
    /// Every action, in the order of [`Action::index`].
    pub const ALL: [Action; 5] = [
        Action::Pass,
        Action::Allow,
        Action::Deny,
        Action::Throttle,
        Action::Drop,
    ];

    /// Its place in [`Action::ALL`] (for tables of counters).
    pub fn index(self) -> usize {
        match self {
            Action::Pass => 0,
            Action::Allow => 1,
            Action::Deny => 2,
            Action::Throttle => 3,
            Action::Drop => 4,
        }
    }

    /// `pass`, `allow`, `deny`, `throttle` or `drop`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Pass => "pass",
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Throttle => "throttle",
            Action::Drop => "drop",
        }
    }

    /// Whether the proxy must not serve the request.
    pub fn blocks(self) -> bool {
        matches!(self, Action::Deny | Action::Throttle | Action::Drop)
    }
}

/// The answer for one request, as the proxies are told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What to do (always [`Action::Pass`] or [`Action::Allow`] in
    /// whole-ruleset shadow mode).
    pub action: Action,
    /// HTTP status for deny and throttle (0 otherwise).
    pub status: u16,
    /// Reason phrase for deny and throttle ("" otherwise).
    pub reason: String,
    /// Seconds for `Retry-After` (throttle only; 0 otherwise).
    pub retry_after_s: u64,
    /// The deciding rule, if any.
    pub rule: Option<String>,
    /// In whole-ruleset shadow mode, what would have been enforced.
    pub shadowed: Option<Action>,
    /// Names of the `log` and `shadow` rules that matched (requestctl's
    /// `X-Requestctl` tag), in evaluation order.
    pub tags: Vec<String>,
    /// The generation that decided.
    pub generation: u64,
}

impl Outcome {
    /// The answer for `decision`, made by `engine` (whose rules it
    /// names) of generation `generation`; with `shadow` (whole-ruleset
    /// shadow mode) a block becomes a pass that says what it would have
    /// been.
    pub fn of(decision: &Decision, engine: &Engine, generation: u64, shadow: bool) -> Outcome {
        let name = |i: usize| engine.rule(i).name.clone();
        let mut out = of_verdict(&decision.verdict, name);
        out.tags = decision.logged.iter().map(|(i, _)| name(*i)).collect();
        out.generation = generation;
        if shadow && out.action.blocks() {
            let would = out.action;
            out = Outcome {
                action: Action::Pass,
                status: 0,
                reason: String::new(),
                retry_after_s: 0,
                shadowed: Some(would),
                ..out
            };
        }
        out
    }

    /// The status a proxy answers a block with: the verdict's, and 444
    /// (nginx's close-without-answer) for a drop; 0 for what it serves.
    pub fn block_status(&self) -> u16 {
        match self.action {
            Action::Drop => 444,
            a if a.blocks() => self.status,
            _ => 0,
        }
    }
}

/// The proxy-facing form of a verdict.
fn of_verdict(v: &Verdict, name: impl Fn(usize) -> String) -> Outcome {
    let base = Outcome {
        action: Action::Pass,
        status: 0,
        reason: String::new(),
        retry_after_s: 0,
        rule: v.rule().map(&name),
        shadowed: None,
        tags: Vec::new(),
        generation: 0,
    };
    match v {
        Verdict::Pass => base,
        Verdict::Allow { .. } => Outcome {
            action: Action::Allow,
            ..base
        },
        Verdict::Deny { status, reason, .. } => Outcome {
            action: Action::Deny,
            status: *status,
            reason: reason.clone(),
            ..base
        },
        Verdict::Throttle {
            status,
            reason,
            retry_after_s,
            ..
        } => Outcome {
            action: Action::Throttle,
            status: *status,
            reason: reason.clone(),
            retry_after_s: *retry_after_s,
            ..base
        },
        Verdict::Drop { .. } => Outcome {
            action: Action::Drop,
            ..base
        },
    }
}
