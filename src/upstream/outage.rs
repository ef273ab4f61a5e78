//! A follower's view of its upstream's availability, shared by the etcd and API server followers:
//! how long the upstream has been unreachable, the retry backoff, and the cache's readiness (ready
//! through a grace period of unavailability, not ready after it, ready again when the watch is
//! back).

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::cache::Cache;
use crate::upstream::backoff::Backoff;

/// Whether the upstream answers.
#[derive(Debug, Clone, Copy)]
enum Link {
    Up,
    Down { since: Instant },
}

/// The availability state of one follower's upstream.
pub(crate) struct Outage {
    cache: Cache,
    /// The upstream's name in logs and not-ready reasons ("etcd", "API server").
    upstream: &'static str,
    grace: Duration,
    backoff: Backoff,
    link: Link,
}

impl Outage {
    pub fn new(cache: Cache, upstream: &'static str, grace: Duration, backoff: Backoff) -> Outage {
        Outage {
            cache,
            upstream,
            grace,
            backoff,
            link: Link::Up,
        }
    }

    fn plural(&self) -> &str {
        &self.cache.definition().plural
    }

    /// A failure: the outage starts now unless it already had; past the grace period the cache
    /// is not ready.
    pub fn failed(&mut self, why: &str) {
        let since = match self.link {
            Link::Down { since } => since,
            Link::Up => Instant::now(),
        };
        self.link = Link::Down { since };
        warn!(resource = %self.plural(), error = %why, down_for = ?since.elapsed(), "{} unavailable; retrying", self.upstream);
        self.check_grace(since, why);
    }

    fn check_grace(&self, since: Instant, why: &str) {
        if since.elapsed() >= self.grace && self.cache.is_ready() {
            warn!(resource = %self.plural(), grace = ?self.grace, "{} unavailable past the grace period; not ready", self.upstream);
            self.cache.set_not_ready(format!(
                "{} unavailable for {:?}: {why}",
                self.upstream,
                since.elapsed()
            ));
        }
    }

    /// The watch is back: the backoff restarts and the cache is ready again.
    pub fn recovered(&mut self) {
        if let Link::Down { since } = self.link {
            info!(resource = %self.plural(), after = ?since.elapsed(), "{} watch resumed", self.upstream);
        }
        self.link = Link::Up;
        self.backoff.reset();
        if !self.cache.is_ready() {
            self.cache.set_ready();
        }
    }

    /// Sleeps the next backoff delay, marking the cache not ready if the grace period runs out
    /// meanwhile. Returns whether shutdown was requested.
    pub async fn pause(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        let until = tokio::time::Instant::now() + self.backoff.next_delay();
        loop {
            let tick = tokio::time::sleep_until(
                until.min(tokio::time::Instant::now() + Duration::from_millis(500)),
            );
            tokio::select! {
                _ = shutdown.changed() => return true,
                _ = tick => {}
            }
            if let Link::Down { since } = self.link {
                self.check_grace(since, "no connection");
            }
            if tokio::time::Instant::now() >= until {
                return *shutdown.borrow();
            }
        }
    }
}
