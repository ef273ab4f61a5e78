//! Capped exponential backoff with full jitter, for reconnecting to an upstream (etcd or an API
//! server). Split in two so that the follower's state machine stays pure: it computes the cap
//! ([`cap`]), the driver draws the delay ([`jitter`]).

use std::time::Duration;

/// The largest delay of attempt `attempt` (from 0): `min(max, initial * 2^attempt)`.
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
    fn grows_to_the_cap_with_jitter() {
        let (initial, max) = (Duration::from_millis(100), Duration::from_secs(2));
        let caps: Vec<_> = (0..40).map(|a| cap(initial, max, a)).collect();
        assert_eq!(caps[0], initial);
        assert_eq!(caps[1], Duration::from_millis(200));
        assert_eq!(caps[4], Duration::from_millis(1600));
        assert!(caps[5..].iter().all(|c| *c == max), "{caps:?}");
        let delays: Vec<_> = (0..200).map(|_| jitter(max)).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d <= max && *d >= Duration::from_millis(10))
        );
        assert!(
            delays.iter().any(|d| *d > Duration::from_millis(200)),
            "{delays:?}"
        );
        assert_eq!(jitter(Duration::ZERO), Duration::from_millis(10));
    }
}
