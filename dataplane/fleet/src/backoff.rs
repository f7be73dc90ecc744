//! Reconnection delays, shared by the watcher, the reporter and the
//! Redis sync.

use std::time::{Duration, Instant};
use tokio::sync::watch::Receiver;

/// Reconnection delays: 100 ms doubling to 5 s, each with up to 50%
/// jitter, so a fleet does not reconnect in step.
pub struct Backoff(Duration);

impl Backoff {
    pub fn new() -> Backoff {
        Backoff(Duration::from_millis(100))
    }

    pub fn reset(&mut self) {
        self.0 = Duration::from_millis(100);
    }

    /// The next delay.
    pub fn next(&mut self) -> Duration {
        use std::hash::BuildHasher as _;
        let d = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        let jitter = std::hash::RandomState::new().hash_one(Instant::now()) % 1000;
        d + d * u32::try_from(jitter).unwrap_or(0) / 2000
    }
}

/// Sleeps `d`, or less if `stop` fires; whether it fired.
pub async fn sleep_or_stop(d: Duration, stop: &mut Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}
