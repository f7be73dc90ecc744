//! Finding the agent's control socket, for `rctl apply` and `rctl
//! status`. A leaf.

use rctl_agent::control::DEFAULT_SOCKET;
use std::path::PathBuf;
use std::time::Duration;

/// How long rctl waits for one answer of the agent (a prepare of a large
/// ruleset takes seconds).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// The agent's control socket, and whether it was named: `--agent`, else
/// the default when it exists.
pub fn find(flag: Option<PathBuf>) -> Option<(PathBuf, bool)> {
    match flag {
        Some(p) => Some((p, true)),
        None => {
            let p = PathBuf::from(DEFAULT_SOCKET);
            std::fs::symlink_metadata(&p).is_ok().then_some((p, false))
        }
    }
}
