//! Capped exponential backoff with full jitter, for reconnecting to an upstream (etcd or an API
//! server).

use std::time::Duration;

/// Retry delays: uniformly random in `[0, min(max, initial * 2^attempt)]`, never below 10 ms.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// A backoff starting at `initial` and capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            attempt: 0,
        }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let max = cap(self.initial, self.max, self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        jitter(max)
    }

    /// Back to the first delay, after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// The largest delay of attempt `attempt` (from 0): `min(max, initial * 2^attempt)`. Pure: the
/// follower's state machine computes it, the driver draws the delay with [`jitter`].
pub(crate) fn cap(initial: Duration, max: Duration, attempt: u32) -> Duration {
    initial.saturating_mul(1u32 << attempt.min(20)).min(max)
}

/// Full jitter: a delay drawn uniformly from `[0, max]`, never below 10 ms.
pub(crate) fn jitter(max: Duration) -> Duration {
    max.mul_f64(fastrand::f64()).max(Duration::from_millis(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let delays: Vec<_> = (0..12).map(|_| b.next_delay()).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d <= Duration::from_secs(2) && *d >= Duration::from_millis(10))
        );
        assert!(delays[0] <= Duration::from_millis(100));
        assert!(
            delays[8..].iter().any(|d| *d > Duration::from_millis(200)),
            "{delays:?}"
        );
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
