//! Readiness of a cache: a state that only the writer moves, and waiters woken by a channel when
//! it does (upstream's `pkg/storage/cacher/ready.go`: a state and a condition, not polling).
//!
//! ## Invariants
//! - [`Readiness`] lives in the cache's state, under its one lock (`state.rs`): a resync, a reset
//!   and a watcher's registration read and change it atomically with the store.
//! - Every change of it is published to [`Signal`] while that lock is held, so publications are in
//!   the order of the changes, and a waiter that sees [`Phase::Ready`] sees a cache that was ready.
//!   A resync publishes the cache's revision before its readiness: a woken waiter reads the
//!   revision without the lock, and must not see the one before the sync.
//! - [`Phase::Abandoned`] is published once the writer is gone while the cache was not ready: no
//!   one can make it ready any more, so waiters stop waiting.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::Error;

/// Whether a cache serves reads, and since when it does not.
#[derive(Debug, Clone)]
pub(crate) enum Readiness {
    /// The first resync has not finished.
    InitialSync { since: Instant },
    /// Serving.
    Ready,
    /// Was ready; the upstream has been unavailable since `since`.
    Unavailable { since: Instant, why: String },
    /// The upstream's history was replaced (its revision went backwards: etcd wiped or restored
    /// from a backup). Every watcher was ended with 410 Expired and the store emptied; the next
    /// resync loads the upstream's state silently, at whatever revision it now has, like the first.
    Diverged { since: Instant, why: String },
    /// The upstream does not serve the resource (a custom resource whose CRD it does not have):
    /// it answered its collection with 404. Not ready, but not waited for either (`/readyz`
    /// leaves it out, and proxy mode forwards its requests); the follower keeps asking, and a
    /// finished resync makes it ready as the first one does.
    Absent { since: Instant },
}

impl Readiness {
    /// The phase waiters see.
    fn phase(&self) -> Phase {
        match self {
            Readiness::Ready => Phase::Ready,
            _ => Phase::NotReady,
        }
    }

    /// `Ok` when ready, else [`Error::NotReady`] with upstream's Retry-After for `resource`.
    pub(super) fn check(&self, resource: &str) -> Result<(), Error> {
        let (since, why) = match self {
            Readiness::Ready => return Ok(()),
            Readiness::InitialSync { since } => (*since, "initial sync has not finished".into()),
            Readiness::Absent { since } => (*since, "the upstream does not serve it".into()),
            Readiness::Unavailable { since, why } | Readiness::Diverged { since, why } => {
                (*since, why.clone())
            }
        };
        Err(not_ready(resource, since, why))
    }
}

/// [`Error::NotReady`] for a cache not ready since `since`, with upstream's Retry-After:
/// clamp(e^(0.06 * downtime in s), 1, 30).
fn not_ready(resource: &str, since: Instant, why: String) -> Error {
    let secs = (0.06 * since.elapsed().as_secs_f64())
        .exp()
        .clamp(1.0, 30.0);
    Error::NotReady {
        resource: resource.to_owned(),
        why,
        retry_after: Duration::from_secs(secs.round() as u64),
    }
}

/// What a waiter learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    NotReady,
    Ready,
    /// The writer is gone and the cache is not ready: it never will be.
    Abandoned,
}

/// The channel that wakes readiness waiters.
#[derive(Debug)]
pub(crate) struct Signal {
    tx: watch::Sender<Phase>,
}

impl Signal {
    pub(super) fn new() -> Signal {
        Signal {
            tx: watch::Sender::new(Phase::NotReady),
        }
    }

    /// Publishes `readiness` (called under the state lock, after every change).
    pub(super) fn publish(&self, readiness: &Readiness) {
        let phase = readiness.phase();
        self.tx.send_if_modified(|p| {
            let changed = *p != phase;
            *p = phase;
            changed
        });
    }

    /// The writer is gone: waiters of a cache that is not ready stop waiting.
    pub(super) fn abandon(&self) {
        self.tx.send_if_modified(|p| {
            let changed = *p == Phase::NotReady;
            if changed {
                *p = Phase::Abandoned;
            }
            changed
        });
    }

    /// Whether the cache is ready now.
    pub(super) fn is_ready(&self) -> bool {
        *self.tx.borrow() == Phase::Ready
    }

    /// Waits until the cache is ready, or can never be (`false`).
    pub(super) async fn wait(&self) -> bool {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`, so the wait can only end with a phase.
        matches!(
            rx.wait_for(|p| *p != Phase::NotReady).await.map(|p| *p),
            Ok(Phase::Ready)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn waiters_wake_on_ready_and_stop_when_abandoned() {
        let s = Arc::new(Signal::new());
        let waiter = tokio::spawn({
            let s = Arc::clone(&s);
            async move { s.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        s.publish(&Readiness::InitialSync {
            since: Instant::now(),
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "not ready is no news");
        s.publish(&Readiness::Ready);
        assert!(waiter.await.unwrap());
        assert!(s.is_ready());
        s.abandon();
        assert!(s.is_ready(), "a ready cache stays ready without its writer");
        s.publish(&Readiness::Unavailable {
            since: Instant::now(),
            why: "down".into(),
        });
        let waiter = tokio::spawn({
            let s = Arc::clone(&s);
            async move { s.wait().await }
        });
        tokio::task::yield_now().await;
        s.abandon();
        assert!(!waiter.await.unwrap(), "no writer: never ready");
    }

    #[test]
    fn not_ready_errors_carry_upstreams_retry_after() {
        let since = Instant::now() - Duration::from_secs(60);
        let err = Readiness::Unavailable {
            since,
            why: "etcd is gone".into(),
        }
        .check("pods")
        .unwrap_err();
        assert_eq!(err.code(), 429);
        // e^(0.06 * 60) = 36.6, clamped to 30.
        assert_eq!(err.retry_after(), Some(Duration::from_secs(30)));
        assert!(Readiness::Ready.check("pods").is_ok());
    }
}
