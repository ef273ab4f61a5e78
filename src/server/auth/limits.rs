//! Per-client limits, each answered 429 TooManyRequests with Retry-After:
//! `--max-requests-inflight` (non-watch requests in progress at once; 0: no limit), the server's
//! most concurrent watches (`ServerConfig::max_watchers`) and `--max-watches-per-user`
//! (concurrent watches of one authenticated user; 0: no limit). A watch holds one [`WatchSlot`]
//! for both of its limits.
//!
//! A request over the in-flight limit waits for a place, in arrival order, as kube-apiserver's
//! priority and fairness queues it, instead of being refused at once: a fleet reconnecting gets
//! served. It is refused (429) only when [`QUEUED_PER_PLACE`] requests per place already wait, or
//! when no place frees up within its queue wait (a quarter of `--request-timeout`, at most 15 s).
//!
//! Lock order: `watches` only, held for a map update, never across an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::status::ApiError;

/// Requests that may wait per in-flight place (kube-apiserver's default priority level queues
/// 128 × 50 requests for its 400 seats: 16 per seat).
pub const QUEUED_PER_PLACE: usize = 16;

/// The limits' state.
#[derive(Debug)]
pub struct Limits {
    inflight: Option<Arc<Semaphore>>,
    max_inflight: usize,
    /// Requests waiting for an in-flight place now.
    queued: AtomicUsize,
    /// How long a request may wait for one.
    queue_wait: Duration,
    max_watches: usize,
    max_watches_per_user: usize,
    watches: Arc<WatchCounts>,
    /// What the watches of no counted user share (anonymous, or no per-user cap).
    anyone: Arc<UserWatches>,
}

/// One request counted against `--max-requests-inflight` while it lives.
#[derive(Debug)]
pub struct InflightPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

/// Counts a request out of the queue when it leaves it, however it leaves.
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One watch counted against the server's limit and its user's cap while it lives: a pointer to
/// what its user's watches share (8 bytes in every watch: the two counts took 16, a user's map
/// and name 24 before that).
#[derive(Debug)]
pub struct WatchSlot(Arc<UserWatches>);

/// Open watches by user, and the shared handle each of a user's watches holds.
type WatchCounts = Mutex<HashMap<Arc<str>, (usize, Weak<UserWatches>)>>;

/// What a user's watches share: the server's count of watches, and the user's name and the map
/// that counts them (`None`: no counted user).
#[derive(Debug)]
struct UserWatches {
    open: Arc<AtomicUsize>,
    user: Option<(Arc<str>, Arc<WatchCounts>)>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        if let Some((user, counts)) = &self.0.user {
            let mut w = counts.lock();
            if let Some((n, _)) = w.get_mut(user) {
                *n -= 1;
                if *n == 0 {
                    w.remove(user);
                }
            }
        }
    }
}

impl Limits {
    /// Limits of these sizes (0: none, but for `max_watches`); a request waits at most
    /// `queue_wait` for an in-flight place.
    pub fn new(
        max_inflight: usize,
        max_watches: usize,
        max_watches_per_user: usize,
        queue_wait: Duration,
    ) -> Limits {
        Limits {
            inflight: (max_inflight > 0).then(|| Arc::new(Semaphore::new(max_inflight))),
            max_inflight,
            queued: AtomicUsize::new(0),
            queue_wait,
            max_watches,
            max_watches_per_user,
            watches: Arc::default(),
            anyone: Arc::new(UserWatches {
                open: Arc::default(),
                user: None,
            }),
        }
    }

    /// Watches open now.
    pub fn watches_open(&self) -> usize {
        self.anyone.open.load(Ordering::Relaxed)
    }

    /// A slot for one non-watch request, waiting for one (in arrival order) while others hold
    /// them all. A `privileged` requester (`system:masters`) takes one when one is free and is
    /// served without one when none is: upstream's limit always answers its super-admins, so an
    /// operator can still act on a server that others saturate.
    ///
    /// # Errors
    /// 429 with Retry-After 1 when too many wait already, or none frees up within the queue wait.
    pub async fn request(&self, privileged: bool) -> Result<InflightPermit, ApiError> {
        let Some(s) = &self.inflight else {
            return Ok(InflightPermit(None));
        };
        if let Ok(p) = Arc::clone(s).try_acquire_owned() {
            return Ok(InflightPermit(Some(p)));
        }
        if privileged {
            return Ok(InflightPermit(None));
        }
        let refused = |why: &str| {
            ApiError::too_many(
                format!(
                    "Too many requests, please try again later. (the limit of {} requests in flight is reached{why})",
                    self.max_inflight
                ),
                1,
            )
        };
        let queued = self.queued.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.queued);
        if queued >= self.max_inflight.saturating_mul(QUEUED_PER_PLACE) {
            return Err(refused(", and the queue is full"));
        }
        match tokio::time::timeout(self.queue_wait, Arc::clone(s).acquire_owned()).await {
            Ok(Ok(p)) => Ok(InflightPermit(Some(p))),
            _ => Err(refused(&format!(
                ", and none was free within {:?}",
                self.queue_wait
            ))),
        }
    }

    /// A slot for one more watch, of `user` when it is authenticated.
    ///
    /// # Errors
    /// 429 with Retry-After 1 when the server has its most watches open, or the user its cap.
    pub fn watch(&self, user: Option<&str>) -> Result<WatchSlot, ApiError> {
        let open = &self.anyone.open;
        if open.fetch_add(1, Ordering::Relaxed) >= self.max_watches {
            open.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::too_many(
                format!("too many watches: the limit is {}", self.max_watches),
                1,
            ));
        }
        let Some(user) = user.filter(|_| self.max_watches_per_user > 0) else {
            return Ok(WatchSlot(Arc::clone(&self.anyone)));
        };
        let mut w = self.watches.lock();
        let shared = |user: Arc<str>| {
            Arc::new(UserWatches {
                open: Arc::clone(open),
                user: Some((user, Arc::clone(&self.watches))),
            })
        };
        let handle = if let Some((n, handle)) = w.get_mut(user) {
            if *n >= self.max_watches_per_user {
                open.fetch_sub(1, Ordering::Relaxed);
                return Err(ApiError::too_many(
                    format!(
                        "too many watches for user {user:?}: the limit is {}",
                        self.max_watches_per_user
                    ),
                    1,
                ));
            }
            *n += 1;
            // Each of the `n` watches counted holds the handle until it has uncounted itself
            // (under this lock), so it is there; made anew if not, all the same.
            handle.upgrade().unwrap_or_else(|| {
                let h = shared(Arc::from(user));
                *handle = Arc::downgrade(&h);
                h
            })
        } else {
            let name: Arc<str> = Arc::from(user);
            let h = shared(Arc::clone(&name));
            w.insert(name, (1, Arc::downgrade(&h)));
            h
        };
        Ok(WatchSlot(handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn per_user_watch_caps_and_inflight_slots_free_on_drop() {
        let l = Limits::new(1, 5, 2, Duration::from_millis(50));
        let a = l.request(false).await.unwrap();
        let e = l.request(false).await.unwrap_err();
        assert_eq!((e.code(), e.retry_after()), (429, Some(1)));
        assert!(
            l.request(true).await.is_ok(),
            "system:masters is always answered"
        );
        drop(a);
        assert!(l.request(false).await.is_ok());
        let w1 = l.watch(Some("u")).unwrap();
        let _w2 = l.watch(Some("u")).unwrap();
        assert_eq!(l.watch(Some("u")).unwrap_err().code(), 429);
        let v = l.watch(Some("v")).expect("another user has its own cap");
        drop(w1);
        let w3 = l.watch(Some("u")).unwrap();
        assert_eq!(l.watch(Some("u")).unwrap_err().code(), 429);
        assert_eq!(l.watches_open(), 3, "refused watches are not counted");
        // The server's limit (5) counts every watch, anonymous ones too.
        let anon = [l.watch(None).unwrap(), l.watch(None).unwrap()];
        let e = l.watch(None).unwrap_err();
        assert_eq!((e.code(), e.retry_after()), (429, Some(1)));
        assert!(e.message().contains("too many watches: the limit is 5"));
        assert_eq!(l.watch(Some("w")).unwrap_err().code(), 429);
        assert_eq!(l.watches_open(), 5);
        // The user's watches share one handle; the count goes with the last of them.
        drop((_w2, w3, v, anon));
        assert!(l.watches.lock().is_empty(), "no count is left behind");
        assert_eq!(l.watches_open(), 0);
        let _u = l.watch(Some("u")).unwrap();
        assert_eq!(l.watches_open(), 1);
        assert_eq!(std::mem::size_of::<WatchSlot>(), 8);
        let none = Limits::new(0, 1, 0, Duration::ZERO);
        let one = none.watch(Some("u")).expect("no per-user cap");
        assert_eq!(none.watch(Some("u")).unwrap_err().code(), 429);
        drop(one);
        assert!(none.watch(Some("u")).is_ok());
        assert!(none.request(false).await.is_ok());
    }

    /// A burst over the limit waits for places in arrival order instead of being refused; only
    /// what overflows the queue is refused at once.
    #[tokio::test]
    async fn a_burst_waits_for_places_and_only_a_full_queue_refuses() {
        let l = Arc::new(Limits::new(2, 10, 0, Duration::from_secs(5)));
        let held: Vec<_> = [l.request(false).await, l.request(false).await]
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let waiting: Vec<_> = (0..2 * QUEUED_PER_PLACE)
            .map(|_| {
                let l = Arc::clone(&l);
                tokio::spawn(async move { l.request(false).await.map(drop) })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(l.queued.load(Ordering::Acquire), 2 * QUEUED_PER_PLACE);
        let over = l.request(false).await.unwrap_err();
        assert!(
            over.message().contains("the queue is full"),
            "{}",
            over.message()
        );
        drop(held);
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        assert_eq!(l.queued.load(Ordering::Acquire), 0);
    }
}
