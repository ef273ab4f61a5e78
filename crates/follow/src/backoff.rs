//! Capped exponential backoff with full jitter, for reconnecting to an upstream (etcd or an API
//! server). Split in two so that the follower's state machine stays pure: it computes the cap
//! (`cap`), the driver draws the delay (`jitter`).
//!
//! Also the one throttle of repeated upstream warnings ([`Throttle`]): a retry loop that warned
//! at each attempt wrote 1 011 lines in 30 s of etcd being down, and 7 980 for an API server.

use std::time::{Duration, Instant};

/// How often a repeated upstream failure is logged, per resource (per [`Throttle`]).
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// The largest delay of attempt `attempt` (from 0): `min(max, initial * 2^attempt)`.
pub(crate) fn cap(initial: Duration, max: Duration, attempt: u32) -> Duration {
    initial.saturating_mul(1u32 << attempt.min(20)).min(max)
}

/// Full jitter: a delay drawn uniformly from `[0, max]`, never below 10 ms.
pub(crate) fn jitter(max: Duration) -> Duration {
    max.mul_f64(fastrand::f64()).max(Duration::from_millis(10))
}

/// Lets a repeated warning through at most once per period: the first at once, then the first
/// after each period, each with the number of occurrences since the last line let through (the
/// line's own included). One per resource, so each resource's outage stays visible.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    last: Option<Instant>,
    /// Occurrences since the last line, not logged.
    held: u64,
}

impl Throttle {
    /// A throttle letting one line through per `every`.
    pub const fn new(every: Duration) -> Throttle {
        Throttle {
            every,
            last: None,
            held: 0,
        }
    }

    /// One occurrence at `now`: `Some(n)` when it is to be logged, `n` counting it and those held
    /// back since the last line; `None` when it is held back.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        self.held += 1;
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.every => None,
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }

    /// The failures ended: the next one is logged at once. Returns how many were held back
    /// since the last line (for the recovery's line).
    pub(crate) fn reset(&mut self) -> u64 {
        self.last = None;
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_line_through_per_period_with_the_count() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = Throttle::new(Duration::from_secs(10));
        assert_eq!(t.admit(at(0)), Some(1), "the first at once");
        let held: Vec<_> = (1..100).map(|i| t.admit(at(i * 100))).collect();
        assert!(held.iter().all(Option::is_none), "{held:?}");
        assert_eq!(t.admit(at(10_000)), Some(100), "99 held back, and this one");
        assert_eq!(t.admit(at(10_500)), None);
        assert_eq!(t.reset(), 1, "one held back when the failures ended");
        assert_eq!(t.admit(at(11_000)), Some(1), "a new outage logs at once");
        assert_eq!(t.reset(), 0);
    }

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
