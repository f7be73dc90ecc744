//! The agent's recent traffic by key, for `rctl top`: every decided
//! request counted in a bounded window ([`rctl_top::Window`]) by address,
//! /24 or /48, User-Agent and its family, and path template, with its
//! verdict; read through the control socket (`{"op":"top"}`).

use crate::judge::{Fields, Generation, Observer, Outcome};
use rctl_dataplane::Decision;
use rctl_top::{Top, Window};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The window's length: what `rctl top --window` can ask for at most.
pub const WINDOW_S: u64 = 60;

/// Keys kept per kind and second.
pub const CAPACITY: usize = 256;

/// The counters, shared by every listener.
pub struct TopCounts {
    window: Mutex<Window>,
}

impl Default for TopCounts {
    fn default() -> Self {
        TopCounts {
            window: Mutex::new(Window::new(WINDOW_S, CAPACITY)),
        }
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl TopCounts {
    /// The heaviest `n` keys of each kind over the last `seconds`
    /// (at most [`WINDOW_S`]).
    pub fn top(&self, seconds: u64, n: usize) -> Top {
        let now = now_s();
        // Copied under the lock, merged outside it: the listeners count
        // on meanwhile.
        let recent = {
            let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
            w.recent(now, seconds)
        };
        recent.top_over(now, seconds, n)
    }
}

impl Observer for TopCounts {
    fn decided(&self, _: &Generation, f: &Fields<'_>, _: &Outcome, d: &Decision, _: Duration) {
        let r = f.request(0);
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.add(now_s(), &r, d.verdict.kind());
    }

    fn failed(&self, _: &'static str, _: &str) {}
}
