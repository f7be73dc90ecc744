//! Graceful shutdown, as mini-redis does it: one [`Trigger`] fires, every
//! listener and connection holds a [`Shutdown`] and sees it; listeners
//! stop accepting, connections finish the request in hand, and the server
//! waits for them ([`Tasks`]) before it exits.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Fires the shutdown (dropping it fires it too).
#[derive(Debug)]
pub struct Trigger {
    tx: watch::Sender<bool>,
}

/// What a listener or connection watches to learn that the agent stops.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// A trigger and the first watcher of it.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
}

impl Trigger {
    /// Tells every [`Shutdown`] to stop.
    pub fn fire(&self) {
        let _ = self.tx.send(true);
    }
}

impl Drop for Trigger {
    fn drop(&mut self) {
        self.fire();
    }
}

impl Shutdown {
    /// Whether the shutdown has fired.
    pub fn is_fired(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until the shutdown fires (at once if it has).
    pub async fn fired(&mut self) {
        // An error means the trigger is gone, which fires it too.
        let _ = self.rx.wait_for(|fired| *fired).await;
    }
}

/// The connections of one listener, so that it can wait for them to
/// finish (drain) when it stops.
#[derive(Debug, Default)]
pub struct Tasks {
    set: JoinSet<()>,
}

impl Tasks {
    /// Runs `task` as one of them; finished ones are reaped as new ones
    /// start, so the set stays as large as what is in flight.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        while self.set.try_join_next().is_some() {}
        self.set.spawn(task);
    }

    /// How many are running.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether none is running.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Waits for every task to finish, at most `grace`; then aborts the
    /// rest. Returns how many had to be aborted.
    pub async fn drain(mut self, grace: Duration) -> usize {
        let all = async { while self.set.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, all).await.is_ok() {
            return 0;
        }
        let left = self.set.len();
        self.set.shutdown().await;
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_watcher_sees_the_trigger_and_drain_waits_then_aborts() {
        let (trigger, shutdown) = channel();
        let mut tasks = Tasks::default();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3u64 {
            let mut s = shutdown.clone();
            let done = done_tx.clone();
            tasks.spawn(async move {
                s.fired().await;
                // Finishing the work in hand takes a moment.
                tokio::time::sleep(Duration::from_millis(20 * i)).await;
                let _ = done.send(i);
            });
        }
        tasks.spawn(async { std::future::pending::<()>().await });
        assert!(!shutdown.is_fired());
        drop(trigger);
        assert!(shutdown.is_fired());
        assert_eq!(tasks.drain(Duration::from_millis(500)).await, 1);
        let mut seen: Vec<u64> = (0..3).filter_map(|_| done_rx.try_recv().ok()).collect();
        seen.sort_unstable();
        assert_eq!(
            seen,
            [0, 1, 2],
            "each finished its work before the drain ended"
        );
    }
}
