//! The periodic consistency check of a followed cache against its upstream (upstream's
//! `DetectCacheInconsistency`, kube-apiserver 1.34+): every period (drawn in `[period,
//! 1.5 × period]`, as upstream's jitter, the first one waited too), the cache's (key, revision)
//! pairs at its revision N are compared with the upstream's at exactly N ([`Truth`]: an etcd
//! range read at N, an API server's LIST with `resourceVersionMatch=Exact`), both paged.
//!
//! A mismatch is counted (`failure`), logged with the first differing keys, and answered by a
//! relist the follower does (`Break::Relist`): it goes through the cache's `Resync`, so the
//! difference reaches watchers as ordinary events, in order, once. The checker then waits for
//! that relist to finish, so the next check sees its result.
//!
//! ## Invariants
//! - The checker never writes the cache: it holds a reader's [`Cache`] and asks the follower,
//!   which owns the one writer, to relist.
//! - No false mismatch: N is a revision the cache has reached; when N leaves the cache's window or
//!   the upstream's (compaction), the check starts over at the cache's new revision
//!   ([`ATTEMPTS`] times, then it is an `error`, never a `failure`); an upstream value the cache
//!   would skip when following (it does not decode) is no difference.
//! - No lock is held across an await: the cache's side is read page by page (`Cache::entries_at`).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::cache::consistency::{Comparison, Seen};
use crate::cache::{Cache, CheckStatus, Compared, KeyRange, Upstream};
use crate::error::Error;

/// Checks started over at a newer revision before one counts as an error.
pub(crate) const ATTEMPTS: usize = 3;

/// Upstream objects the cache lacks whose values are read to see whether they decode (etcd's
/// side is read without values). Past it, lacking objects are differences unread.
pub(crate) const VERIFY_MAX: usize = 64;

/// One upstream object at the checked revision.
#[derive(Debug, Clone)]
pub(crate) struct TruthEntry {
    /// Its key, as the cache keys it.
    pub key: String,
    /// The revision it was written at (etcd's mod revision, the object's resourceVersion).
    pub rv: u64,
    /// Its stored value, when the read carried it.
    pub value: Option<Bytes>,
}

/// One page of the upstream's objects.
#[derive(Debug, Clone, Default)]
pub(crate) struct TruthPage {
    /// Objects in key order.
    pub entries: Vec<TruthEntry>,
    /// Where the next page starts, if there is one.
    pub next: Option<String>,
}

/// Why an upstream read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TruthError {
    /// The revision is gone upstream (compacted, 410): check again at a newer one.
    Expired(String),
    /// Any other failure.
    Failed(String),
}

/// The upstream's side of the check: its objects at exactly one revision.
pub(crate) trait Truth: Send + 'static {
    /// One page of the objects at revision `n`, from `cursor` (`None`: the first page).
    fn page(
        &mut self,
        n: u64,
        cursor: Option<String>,
    ) -> impl Future<Output = Result<TruthPage, TruthError>> + Send;

    /// The stored value of `key` at revision `n` (`None`: no such key), for an entry read
    /// without its value.
    fn value_at(
        &mut self,
        n: u64,
        key: &str,
    ) -> impl Future<Output = Result<Option<Bytes>, TruthError>> + Send;
}

/// Asks the follower to relist, and learns when it did.
pub(crate) struct Relists {
    /// Requests: each is one more than the last.
    pub ask: watch::Sender<u64>,
    /// The last request a finished sync answered.
    pub done: watch::Receiver<u64>,
}

// Used by the etcd upstream only (an embedding built with `apiserver` alone leaves it unused).
/// An [`Upstream`] with range reads (etcd) as the check's side of the truth: keys-only reads of
/// the resource at exactly the checked revision, in pages; a value is read only for a key the
/// cache lacks, to see whether it decodes.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) struct RangeTruth {
    pub upstream: std::sync::Arc<dyn Upstream>,
    pub page_size: usize,
}

#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
fn range_error(e: Error) -> TruthError {
    match e {
        Error::Expired { .. } => TruthError::Expired(e.to_string()),
        other => TruthError::Failed(other.to_string()),
    }
}

impl Truth for RangeTruth {
    async fn page(&mut self, n: u64, cursor: Option<String>) -> Result<TruthPage, TruthError> {
        let keys = KeyRange {
            from: cursor,
            end: None,
        };
        let page = self
            .upstream
            .range_keys(Some(n), keys, self.page_size)
            .await
            .map_err(range_error)?;
        let next = page
            .more
            .then(|| page.kvs.last().map(|kv| format!("{}\u{0}", kv.key)))
            .flatten();
        let entries = page
            .kvs
            .into_iter()
            .map(|kv| TruthEntry {
                key: kv.key,
                rv: kv.mod_revision,
                value: None,
            })
            .collect();
        Ok(TruthPage { entries, next })
    }

    async fn value_at(&mut self, n: u64, key: &str) -> Result<Option<Bytes>, TruthError> {
        let page = self
            .upstream
            .range(Some(n), KeyRange::one(key), 1)
            .await
            .map_err(range_error)?;
        Ok(page.kvs.into_iter().next().map(|kv| kv.value))
    }
}

/// One check of `cache` now, against its upstream's range reads, without counting it or
/// relisting: what the periodic check compares (for benchmarks and operators' tools).
///
/// # Errors
/// Why no comparison was made: no upstream with range reads, not ready, or the upstream failed.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) async fn check_now(cache: &Cache, page_size: usize) -> Result<(u64, Compared), String> {
    let upstream = cache
        .upstream()
        .ok_or_else(|| "the cache has no upstream".to_owned())?;
    let mut truth = RangeTruth {
        upstream,
        page_size,
    };
    check(cache, &mut truth).await.map_err(|e| match e {
        NotChecked::Moved(why) | NotChecked::Failed(why) => why,
    })
}

/// Why one check did not compare.
#[derive(Debug)]
enum NotChecked {
    /// N left a window ([`ATTEMPTS`] times).
    Moved(String),
    /// The upstream failed, or the cache is not ready.
    Failed(String),
}

/// Checks `cache` against `truth` every `period` until shutdown.
pub(crate) async fn run<T: Truth>(
    cache: Cache,
    mut truth: T,
    period: Duration,
    relists: Relists,
    mut shutdown: watch::Receiver<bool>,
) {
    let plural = cache.definition().plural.clone();
    let group = cache.definition().group.clone();
    loop {
        let wait = period + period.mul_f64(fastrand::f64() * 0.5);
        tokio::select! {
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if cache.is_absent() {
            continue;
        }
        let outcome = tokio::select! {
            _ = shutdown.changed() => return,
            o = check(&cache, &mut truth) => o,
        };
        match outcome {
            Ok((n, c)) if c.consistent() => {
                cache.record_check(CheckStatus::Success);
                debug!(resource = %plural, %group, rv = n, objects = c.cached, skipped = c.skipped, "consistency check passed");
            }
            Ok((n, c)) => {
                cache.record_check(CheckStatus::Failure);
                let first: Vec<String> = c.samples.iter().map(ToString::to_string).collect();
                warn!(resource = %plural, %group, rv = n, cached = c.cached, upstream = c.upstream, missing = c.missing, stale = c.stale, ghosts = c.ghosts, first = ?first, "consistency check failed: the cache differs from the upstream; relisting");
                relists.ask.send_modify(|g| *g += 1);
                let want = *relists.ask.borrow();
                let mut done = relists.done.clone();
                tokio::select! {
                    _ = shutdown.changed() => return,
                    r = done.wait_for(|d| *d >= want) => {
                        if r.is_err() {
                            return;
                        }
                        info!(resource = %plural, %group, "relisted after a failed consistency check");
                    }
                }
            }
            Err(NotChecked::Moved(why) | NotChecked::Failed(why)) => {
                cache.record_check(CheckStatus::Error);
                warn!(resource = %plural, %group, error = %why, "consistency check not made");
            }
        }
    }
}

/// One check: the cache at its revision N against the upstream at N, started over at a newer N
/// when N leaves either window.
async fn check<T: Truth>(cache: &Cache, truth: &mut T) -> Result<(u64, Compared), NotChecked> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        cache
            .check_ready()
            .map_err(|e| NotChecked::Failed(e.to_string()))?;
        let n = cache.resource_version();
        let cached = match cache.entries_at(n).await {
            Ok(c) => c,
            Err(e) => {
                last = format!("the cache's revision {n} left its window ({e:?})");
                continue;
            }
        };
        match compare(cache, truth, n, Comparison::new(cached)).await {
            Ok(c) => return Ok((n, c)),
            Err(TruthError::Expired(e)) => last = format!("revision {n} upstream: {e}"),
            Err(TruthError::Failed(e)) => return Err(NotChecked::Failed(e)),
        }
    }
    Err(NotChecked::Moved(last))
}

/// Feeds the upstream's pages at `n` into the comparison.
async fn compare<T: Truth>(
    cache: &Cache,
    truth: &mut T,
    n: u64,
    mut cmp: Comparison,
) -> Result<Compared, TruthError> {
    let mut cursor = None;
    let mut verified = 0;
    loop {
        let page = truth.page(n, cursor).await?;
        for e in page.entries {
            if cmp.upstream(&e.key, e.rv) != Seen::Absent {
                continue;
            }
            if verified >= VERIFY_MAX {
                cmp.missing(&e.key, e.rv);
                continue;
            }
            verified += 1;
            let value = match e.value {
                Some(v) => Some(v),
                None => truth.value_at(n, &e.key).await?,
            };
            // What the follower would do with it: an undecodable value is skipped there too.
            let decodes = value.is_some_and(|v| cache.decode_stored(&e.key, &v, e.rv).is_ok());
            if decodes {
                cmp.missing(&e.key, e.rv);
            } else {
                cmp.skipped();
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(cmp.finish()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::model::ResourceDef;

    fn pod(name: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns"}}}}"#
        )
    }

    fn key(name: &str) -> String {
        format!("/registry/pods/ns/{name}")
    }

    /// An object upstream: key, revision, value.
    type Stored = (String, u64, Bytes);

    /// An upstream's objects by revision, answering from a table: `expire` first reads of a
    /// revision are 410, as a compaction racing the check.
    struct Table {
        at: Vec<(u64, Vec<Stored>)>,
        expire: usize,
        pages: usize,
    }

    impl Truth for Table {
        async fn page(&mut self, n: u64, cursor: Option<String>) -> Result<TruthPage, TruthError> {
            if self.expire > 0 {
                self.expire -= 1;
                return Err(TruthError::Expired(format!("{n} compacted")));
            }
            self.pages += 1;
            let (_, objects) = self
                .at
                .iter()
                .find(|(rv, _)| *rv == n)
                .ok_or_else(|| TruthError::Failed(format!("no state at {n}")))?;
            // One object per page, to cross page boundaries.
            let rest: Vec<_> = objects
                .iter()
                .filter(|(k, _, _)| cursor.as_deref().is_none_or(|c| k.as_str() >= c))
                .collect();
            let entries = rest
                .first()
                .map(|(k, rv, _)| TruthEntry {
                    key: k.clone(),
                    rv: *rv,
                    value: None,
                })
                .into_iter()
                .collect();
            Ok(TruthPage {
                entries,
                next: rest.get(1).map(|(k, _, _)| k.clone()),
            })
        }

        async fn value_at(&mut self, n: u64, key: &str) -> Result<Option<Bytes>, TruthError> {
            Ok(self
                .at
                .iter()
                .find(|(rv, _)| *rv == n)
                .and_then(|(_, o)| o.iter().find(|(k, _, _)| k == key))
                .map(|(_, _, v)| v.clone()))
        }
    }

    async fn cache_at_5() -> (Cache, crate::cache::CacheWriter) {
        let (cache, mut writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let mut r = writer.resync(5);
        r.add_page(
            [("a", 2), ("b", 5)]
                .map(|(n, rv)| cache.decode(&key(n), pod(n).as_bytes(), rv).unwrap()),
        );
        r.finish();
        (cache, writer)
    }

    #[tokio::test]
    async fn a_compacted_revision_is_checked_again_and_an_undecodable_value_is_no_difference() {
        let (cache, _writer) = cache_at_5().await;
        let state = vec![
            (key("a"), 2, Bytes::from(pod("a"))),
            (key("b"), 5, Bytes::from(pod("b"))),
            (key("bad"), 4, Bytes::from_static(b"not an object")),
        ];
        let mut t = Table {
            at: vec![(5, state)],
            expire: 2,
            pages: 0,
        };
        let (n, out) = check(&cache, &mut t).await.unwrap();
        assert_eq!(n, 5);
        assert!(out.consistent(), "{out:?}");
        assert_eq!((out.upstream, out.cached, out.skipped), (3, 2, 1));
        assert_eq!(t.pages, 3, "paged, one object a page");

        let mut gone = Table {
            at: vec![],
            expire: ATTEMPTS,
            pages: 0,
        };
        assert!(
            matches!(check(&cache, &mut gone).await, Err(NotChecked::Moved(_))),
            "compacted every time: an error, never a failure"
        );
    }

    #[tokio::test]
    async fn a_decodable_object_the_cache_lacks_is_missing() {
        let (cache, _writer) = cache_at_5().await;
        let state = vec![
            (key("a"), 2, Bytes::from(pod("a"))),
            (key("b"), 4, Bytes::from(pod("b"))),
            (key("c"), 3, Bytes::from(pod("c"))),
        ];
        let mut t = Table {
            at: vec![(5, state)],
            expire: 0,
            pages: 0,
        };
        let (_, out) = check(&cache, &mut t).await.unwrap();
        assert_eq!((out.missing, out.stale, out.ghosts), (1, 1, 0), "{out:?}");
        assert_eq!(
            out.samples
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                "/registry/pods/ns/b: cached at 5, upstream at 4",
                "/registry/pods/ns/c: missing (upstream at 3)"
            ]
        );
    }
}
