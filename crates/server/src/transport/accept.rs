//! The accept loop's defences against running out of file descriptors (issue 35, C-FDLIMIT).
//!
//! - [`Backoff`]: a failed accept (`EMFILE`, `ENFILE`: no descriptor left for the new socket,
//!   which then stays in the listen queue) is retried after a pause, 10 ms doubling to 1 s and
//!   reset by the next accept, as Go's `net/http` server does (5 ms to 1 s there). The pause is a
//!   timer: the connections already open go on being served meanwhile. It is logged at most once a
//!   second, with how many failures were not logged.
//! - [`Idle`]: connections between their accept and the arrival of their first request head (on
//!   TLS the handshake is part of it, so the count starts at the accept) are bounded in total and
//!   per source address. Each costs a descriptor and gives nothing back until it asks for
//!   something; a client that opens connections and sends nothing would otherwise take every
//!   descriptor for the header read timeout (30 s) and leave none for others. An [`IdleSlot`]
//!   counts one such connection until it is dropped.
//!
//! Lock order: `Idle::by_address` is a leaf, held for one map update (never across an await).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The first pause after a failed accept.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(10);
/// The longest pause: a descriptor freed is used within a second.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one log line about failed accepts per this long.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(1);

/// The pause between failed accepts, and the rate limit of their log line.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    /// The last pause; zero after a successful accept.
    delay: Duration,
    /// When the last line was logged.
    logged: Option<Instant>,
    /// Failures since then that were not logged.
    suppressed: u64,
}

/// What to do after a failed accept.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// How long to wait before accepting again.
    pub(crate) pause: Duration,
    /// `Some(n)`: log this failure, saying that `n` were not logged since the last line.
    pub(crate) log: Option<u64>,
}

impl Backoff {
    /// An accept failed at `now`.
    pub(crate) fn failed(&mut self, now: Instant) -> Failure {
        self.delay = if self.delay.is_zero() {
            BACKOFF_FIRST
        } else {
            (self.delay * 2).min(BACKOFF_MAX)
        };
        let log = match self.logged {
            Some(at) if now.saturating_duration_since(at) < LOG_EVERY => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.logged = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        };
        Failure {
            pause: self.delay,
            log,
        }
    }

    /// An accept succeeded: the next failure pauses briefly again. (The log's rate limit is kept:
    /// failures between successes are still one line a second.)
    pub(crate) fn succeeded(&mut self) {
        self.delay = Duration::ZERO;
    }
}

/// The `reason` label of a failed accept: a fixed set, whatever the error.
pub(crate) fn reason(e: &std::io::Error) -> &'static str {
    // The same numbers on Linux, the BSDs and macOS; std has no `ErrorKind` for them.
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    match e.raw_os_error() {
        Some(EMFILE) => "EMFILE",
        Some(ENFILE) => "ENFILE",
        _ => "other",
    }
}

/// Why a connection was refused at its accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `max_connections` connections are open.
    Connections(usize),
    /// `max_idle_connections` connections are waiting for their first request.
    Idle(usize),
    /// `max_idle_connections_per_address` connections from this address are waiting for their
    /// first request.
    IdlePerAddress(usize),
}

impl Refused {
    /// The `reason` label of `watchcache_connections_refused_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refused::Connections(_) => "max_connections",
            Refused::Idle(_) => "idle",
            Refused::IdlePerAddress(_) => "idle_per_address",
        }
    }

    /// The message of the 503 `Status`.
    pub(crate) fn message(self) -> String {
        match self {
            Refused::Connections(n) => format!("too many open connections: the limit is {n}"),
            Refused::Idle(n) => {
                format!("too many connections waiting for their first request: the limit is {n}")
            }
            Refused::IdlePerAddress(n) => format!(
                "too many connections from this address waiting for their first request: the limit is {n}"
            ),
        }
    }
}

/// The connections waiting for their first request, in total and by source address.
#[derive(Debug)]
pub(crate) struct Idle {
    /// Most in total (0: no limit).
    max: usize,
    /// Most from one address (0: no limit, and no map kept).
    max_per_address: usize,
    total: AtomicUsize,
    by_address: parking_lot::Mutex<HashMap<IpAddr, usize>>,
}

impl Idle {
    /// Counts with these bounds (0: none).
    pub(crate) fn new(max: usize, max_per_address: usize) -> Arc<Idle> {
        Arc::new(Idle {
            max,
            max_per_address,
            total: AtomicUsize::new(0),
            by_address: parking_lot::Mutex::default(),
        })
    }

    /// Counts one more connection from `ip` waiting for its first request, or says which bound it
    /// would break.
    pub(crate) fn acquire(self: &Arc<Self>, ip: IpAddr) -> Result<IdleSlot, Refused> {
        if self.total.fetch_add(1, Ordering::Relaxed) >= self.max && self.max > 0 {
            self.total.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::Idle(self.max));
        }
        // An IPv4 client on a dual-stack socket shows as ::ffff:a.b.c.d: one address either way.
        let ip = ip.to_canonical();
        if self.max_per_address > 0 {
            let mut by_address = self.by_address.lock();
            let n = by_address.entry(ip).or_insert(0);
            if *n >= self.max_per_address {
                drop(by_address);
                self.total.fetch_sub(1, Ordering::Relaxed);
                return Err(Refused::IdlePerAddress(self.max_per_address));
            }
            *n += 1;
        }
        Ok(IdleSlot {
            idle: Arc::clone(self),
            ip,
        })
    }

    /// Connections waiting for their first request now.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }
}

/// One connection counted as waiting for its first request, until dropped (when its first request
/// head has arrived, or it closes).
#[derive(Debug)]
pub(crate) struct IdleSlot {
    idle: Arc<Idle>,
    ip: IpAddr,
}

impl Drop for IdleSlot {
    fn drop(&mut self) {
        if self.idle.max_per_address > 0 {
            let mut by_address = self.idle.by_address.lock();
            if let std::collections::hash_map::Entry::Occupied(mut e) = by_address.entry(self.ip) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    // No entry outlives its address's last idle connection: the map holds at most
                    // as many addresses as there are idle connections.
                    e.remove();
                }
            }
        }
        self.idle.total.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_from_10ms_to_1s_and_a_success_resets_it() {
        let mut b = Backoff::default();
        let t = Instant::now();
        let pauses: Vec<u64> = (0..10)
            .map(|_| b.failed(t).pause.as_millis() as u64)
            .collect();
        assert_eq!(
            pauses,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000],
            "no pause is zero (no spinning) and none is over a second"
        );
        b.succeeded();
        assert_eq!(b.failed(t).pause, BACKOFF_FIRST);
        assert_eq!(b.failed(t).pause, BACKOFF_FIRST * 2);
    }

    #[test]
    fn failures_are_logged_once_a_second_with_the_count_not_logged() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        assert_eq!(b.failed(t0).log, Some(0), "the first is logged");
        for ms in [10, 30, 70, 500, 999] {
            assert_eq!(b.failed(t0 + Duration::from_millis(ms)).log, None, "{ms}");
        }
        // A success between failures does not reopen the log.
        b.succeeded();
        assert_eq!(b.failed(t0 + Duration::from_millis(999)).log, None);
        let t1 = t0 + LOG_EVERY;
        assert_eq!(b.failed(t1).log, Some(6), "six not logged in the second");
        assert_eq!(b.failed(t1 + Duration::from_millis(1)).log, None);
        assert_eq!(
            b.failed(t1 + Duration::from_secs(5)).log,
            Some(1),
            "after a quiet spell, the next is logged at once"
        );
    }

    #[test]
    fn reasons_are_a_fixed_set() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        assert_eq!(reason(&e(24)), "EMFILE");
        assert_eq!(reason(&e(23)), "ENFILE");
        assert_eq!(reason(&e(104)), "other");
        assert_eq!(reason(&std::io::Error::other("x")), "other");
        #[cfg(target_os = "linux")]
        {
            // The numbers are the platform's.
            assert!(
                std::io::Error::from_raw_os_error(24)
                    .to_string()
                    .contains("Too many open files"),
            );
            assert!(
                std::io::Error::from_raw_os_error(23)
                    .to_string()
                    .contains("Too many open files in system"),
            );
        }
    }

    #[test]
    fn idle_connections_are_bounded_per_address_and_in_total() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a6: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let idle = Idle::new(5, 2);
        let a1 = idle.acquire(a).unwrap();
        let _a2 = idle.acquire(a6).unwrap();
        assert_eq!(
            idle.acquire(a).unwrap_err(),
            Refused::IdlePerAddress(2),
            "the IPv4-mapped form is the same address"
        );
        assert_eq!(idle.total(), 2, "a refusal counts nothing");
        let _b1 = idle.acquire(b).unwrap();
        let _b2 = idle.acquire(b).unwrap();
        drop(a1);
        let _a3 = idle.acquire(a).unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        assert_eq!(idle.total(), 4);
        let _c1 = idle.acquire(c).unwrap();
        assert_eq!(idle.acquire(c).unwrap_err(), Refused::Idle(5));
        assert_eq!(idle.total(), 5);
        drop((_a2, _a3, _b1, _b2, _c1));
        assert_eq!(idle.total(), 0);
        assert!(idle.by_address.lock().is_empty(), "no address is kept");
    }

    #[test]
    fn zero_is_no_bound() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let idle = Idle::new(0, 0);
        let slots: Vec<IdleSlot> = (0..1000).map(|_| idle.acquire(a).unwrap()).collect();
        assert_eq!(idle.total(), 1000);
        assert!(idle.by_address.lock().is_empty());
        drop(slots);
        assert_eq!(idle.total(), 0);
    }
}
