//! Per-client limits, each answered 429 TooManyRequests with Retry-After:
//! `--max-requests-inflight` (non-watch requests in progress at once; 0: no limit) and
//! `--max-watches-per-user` (concurrent watches of one authenticated user; 0: no limit).
//!
//! Lock order: `watches` only, held for a map update, never across an await.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::status::ApiError;

/// The limits' state.
#[derive(Debug)]
pub struct Limits {
    inflight: Option<Arc<Semaphore>>,
    max_inflight: usize,
    max_watches_per_user: usize,
    watches: Arc<Mutex<HashMap<Arc<str>, usize>>>,
}

/// One request counted against `--max-requests-inflight` while it lives.
#[derive(Debug)]
pub struct InflightPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

/// One watch counted against its user's cap while it lives.
#[derive(Debug)]
pub struct UserWatchSlot {
    watches: Arc<Mutex<HashMap<Arc<str>, usize>>>,
    user: Arc<str>,
}

impl Drop for UserWatchSlot {
    fn drop(&mut self) {
        let mut w = self.watches.lock();
        if let Some(n) = w.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.user);
            }
        }
    }
}

impl Limits {
    /// Limits of these sizes (0: none).
    pub fn new(max_inflight: usize, max_watches_per_user: usize) -> Limits {
        Limits {
            inflight: (max_inflight > 0).then(|| Arc::new(Semaphore::new(max_inflight))),
            max_inflight,
            max_watches_per_user,
            watches: Arc::default(),
        }
    }

    /// A slot for one non-watch request. A `privileged` requester (`system:masters`) takes one
    /// when one is free and is served without one when none is: upstream's limit always answers
    /// its super-admins, so an operator can still act on a server that others saturate.
    ///
    /// # Errors
    /// 429 with Retry-After 1 when the limit is reached.
    pub fn request(&self, privileged: bool) -> Result<InflightPermit, ApiError> {
        let Some(s) = &self.inflight else {
            return Ok(InflightPermit(None));
        };
        match Arc::clone(s).try_acquire_owned() {
            Ok(p) => Ok(InflightPermit(Some(p))),
            Err(_) if privileged => Ok(InflightPermit(None)),
            Err(_) => Err(ApiError::too_many(
                format!(
                    "Too many requests, please try again later. (the limit of {} requests in flight is reached)",
                    self.max_inflight
                ),
                1,
            )),
        }
    }

    /// A slot for one more watch of `user`.
    ///
    /// # Errors
    /// 429 with Retry-After 1 when the user has its cap of watches open.
    pub fn watch(&self, user: &str) -> Result<Option<UserWatchSlot>, ApiError> {
        if self.max_watches_per_user == 0 {
            return Ok(None);
        }
        let mut w = self.watches.lock();
        let key: Arc<str> = match w.get_key_value(user) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(user),
        };
        let n = w.entry(Arc::clone(&key)).or_insert(0);
        if *n >= self.max_watches_per_user {
            return Err(ApiError::too_many(
                format!(
                    "too many watches for user {user:?}: the limit is {}",
                    self.max_watches_per_user
                ),
                1,
            ));
        }
        *n += 1;
        Ok(Some(UserWatchSlot {
            watches: Arc::clone(&self.watches),
            user: key,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_user_watch_caps_and_inflight_slots_free_on_drop() {
        let l = Limits::new(1, 2);
        let a = l.request(false).unwrap();
        let e = l.request(false).unwrap_err();
        assert_eq!((e.code(), e.retry_after()), (429, Some(1)));
        assert!(l.request(true).is_ok(), "system:masters is always answered");
        drop(a);
        assert!(l.request(false).is_ok());
        let w1 = l.watch("u").unwrap();
        let _w2 = l.watch("u").unwrap();
        assert_eq!(l.watch("u").unwrap_err().code(), 429);
        assert!(
            l.watch("v").unwrap().is_some(),
            "another user has its own cap"
        );
        drop(w1);
        assert!(l.watch("u").is_ok());
        let none = Limits::new(0, 0);
        assert!(none.watch("u").unwrap().is_none());
        assert!(none.request(false).is_ok());
    }
}
