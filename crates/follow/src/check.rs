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
//!   (`ATTEMPTS` times, then it is an `error`, never a `failure`); an upstream value the cache
//!   would skip when following (it does not decode) is no difference.
//! - No lock is held across an await: the cache's side is read page by page (`Cache::entries_at`).
//! - Upstream pages are bounded by bytes, not only by count (`PageBudget`): upstream's checker
//!   read 10 000 whole objects a page, and one page reached 3.1 GB, over gRPC's limit, so the
//!   check failed every time (k/k#138631). Here each page asks for at most
//!   `PAGE_BYTES / e` entries, `e` the largest entry (key, value if carried, and
//!   `ENTRY_OVERHEAD`) read so far in this check or the last, and one entry when none was read
//!   yet; so a page exceeds `PAGE_BYTES` only if it holds an entry larger than every one read
//!   before it (a single entry over the budget is read alone). etcd's side is read keys-only, so
//!   its pages are keys (at most 10 000 of them, `page_size`); the values read are one per
//!   request ([`Truth::value_at`]). The cache's side holds a key and a revision per object, never
//!   a value.
//! - A value the follower left unserved (it did not decode: malformed, or naming another object
//!   than its key, k/k#135115) is recorded by the cache with the revision it was written at
//!   ([`Cache::unserved_at`]); the same key at the same revision upstream is skipped here without
//!   reading it, however many there are, so such values never make a false mismatch, and never a
//!   relist loop. Records the upstream no longer holds are dropped after each check.
//! - Nothing here panics on what the upstream or the cache holds: no unwrap, no indexing.
// Reads outside input (the upstream's keys and values): no panicking access
// (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub use watchcache::consistency::{Comparison, Seen};
use watchcache::{Cache, CheckStatus, Compared, KeyRange, Upstream};

/// Checks started over at a newer revision before one counts as an error.
pub(crate) const ATTEMPTS: usize = 3;

/// Upstream objects the cache lacks whose values are read to see whether they decode (etcd's
/// side is read without values). Past it, lacking objects are differences unread.
pub(crate) const VERIFY_MAX: usize = 64;

/// Bytes of one upstream page the check aims at: gRPC's default message limit, which a client
/// accepts unconfigured (etcd's own default response limit is far above it).
pub(crate) const PAGE_BYTES: usize = 4 * 1024 * 1024;

/// Bytes an entry costs beyond its key and value: etcd's `KeyValue` revisions, version and lease
/// as varints, their tags and the length prefixes (at most 4 × 11 + 10, rounded up).
pub(crate) const ENTRY_OVERHEAD: usize = 64;

/// How many entries the next upstream page may hold: at most `max_count`, and at most `bytes`
/// divided by the largest entry seen (see the module's invariants).
#[derive(Debug, Clone)]
pub(crate) struct PageBudget {
    bytes: usize,
    max_count: usize,
    /// The largest entry of the last check, the first page's estimate.
    last: usize,
    /// The largest entry of this check so far.
    largest: usize,
}

impl PageBudget {
    /// A budget of `bytes` a page, and at most `max_count` entries.
    pub(crate) fn new(bytes: usize, max_count: usize) -> PageBudget {
        PageBudget {
            bytes: bytes.max(1),
            max_count: max_count.max(1),
            last: 0,
            largest: 0,
        }
    }

    /// A check starts: the last one's largest entry is the estimate.
    fn start(&mut self) {
        if self.largest > 0 {
            self.last = self.largest;
        }
        self.largest = 0;
    }

    /// The next page's limit: one entry while nothing is known.
    pub(crate) fn limit(&self) -> usize {
        match self.largest.max(self.last) {
            0 => 1,
            e => (self.bytes / e).clamp(1, self.max_count),
        }
    }

    /// What one entry costs.
    pub(crate) fn entry_bytes(key: &str, value: Option<&Bytes>) -> usize {
        key.len()
            .saturating_add(value.map_or(0, Bytes::len))
            .saturating_add(ENTRY_OVERHEAD)
    }

    fn observe(&mut self, page: &TruthPage) {
        for e in &page.entries {
            self.largest = self
                .largest
                .max(Self::entry_bytes(&e.key, e.value.as_ref()));
        }
    }
}

/// One upstream object at the checked revision.
#[derive(Debug, Clone)]
pub struct TruthEntry {
    /// Its key, as the cache keys it.
    pub key: String,
    /// The revision it was written at (etcd's mod revision, the object's resourceVersion).
    pub rv: u64,
    /// Its value as the cache decodes it (what the source hands the cache: etcd's decrypted),
    /// when the read carried it.
    pub value: Option<Bytes>,
}

/// One page of the upstream's objects.
#[derive(Debug, Clone, Default)]
pub struct TruthPage {
    /// Objects in key order.
    pub entries: Vec<TruthEntry>,
    /// Where the next page starts, if there is one.
    pub next: Option<String>,
}

/// Why an upstream read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TruthError {
    /// The revision is gone upstream (compacted, 410): check again at a newer one.
    Expired(String),
    /// Any other failure.
    Failed(String),
}

/// The upstream's side of the check: its objects at exactly one revision.
pub trait Truth: Send + 'static {
    /// Entries a page holds at most (the byte budget may ask for fewer).
    fn max_page(&self) -> usize;

    /// One page of at most `limit` objects at revision `n`, from `cursor` (`None`: the first
    /// page).
    fn page(
        &mut self,
        n: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> impl Future<Output = Result<TruthPage, TruthError>> + Send;

    /// The value of `key` at revision `n` as the cache decodes it (`None`: no such key), for an
    /// entry read without its value.
    fn value_at(
        &mut self,
        n: u64,
        key: &str,
    ) -> impl Future<Output = Result<Option<Bytes>, TruthError>> + Send;
}

/// An upstream's range reads as the check's truth: keys-only reads of the resource at exactly
/// the checked revision, in pages of at most `page_size`; a value is read only for a key the
/// cache lacks and has no record of skipping, to see whether it decodes, and is made readable
/// first as the source makes what it hands the cache (`plain`: etcd decrypts).
pub struct RangeTruth<U: ?Sized> {
    upstream: Arc<U>,
    page_size: usize,
    plain: Plain,
}

/// A stored value as the cache decodes it, from its key and the value as stored.
pub type Plain = Box<dyn Fn(&str, Bytes) -> Bytes + Send + Sync>;

impl<U: Upstream + ?Sized> RangeTruth<U> {
    /// The truth of `upstream`'s range reads, whose values the cache decodes as stored.
    pub fn new(upstream: Arc<U>, page_size: usize) -> RangeTruth<U> {
        RangeTruth {
            upstream,
            page_size,
            plain: Box::new(|_, v| v),
        }
    }

    /// The same, with each value read made readable by `plain` first.
    #[must_use]
    pub fn with_plain(mut self, plain: Plain) -> RangeTruth<U> {
        self.plain = plain;
        self
    }
}

fn range_error(e: watchcache::Error) -> TruthError {
    match e {
        watchcache::Error::Expired { .. } => TruthError::Expired(e.to_string()),
        other => TruthError::Failed(other.to_string()),
    }
}

impl<U: Upstream + ?Sized + 'static> Truth for RangeTruth<U> {
    fn max_page(&self) -> usize {
        self.page_size
    }

    async fn page(
        &mut self,
        n: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<TruthPage, TruthError> {
        let keys = KeyRange {
            from: cursor,
            end: None,
        };
        let page = self
            .upstream
            .range_keys(Some(n), keys, limit)
            .await
            .map_err(range_error)?;
        let next = page
            .more
            .then(|| page.kvs.last().map(|kv| format!("{}\u{0}", kv.key)))
            .flatten();
        // An upstream whose keys-only read carries values anyway (the trait allows it): kept, so
        // that the budget counts them and no second read is made.
        let plain = &self.plain;
        let entries = page
            .kvs
            .into_iter()
            .map(|kv| {
                let value = (!kv.value.is_empty()).then(|| plain(&kv.key, kv.value));
                TruthEntry {
                    key: kv.key,
                    rv: kv.mod_revision,
                    value,
                }
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
        Ok(page
            .kvs
            .into_iter()
            .next()
            .map(|kv| (self.plain)(&kv.key, kv.value)))
    }
}

/// Asks the follower to relist, and learns when it did.
pub(crate) struct Relists {
    /// Requests: each is one more than the last.
    pub ask: watch::Sender<u64>,
    /// The last request a finished sync answered.
    pub done: watch::Receiver<u64>,
}

/// One check of `cache` now, against `truth`, without counting it or relisting: what the
/// periodic check compares (for benchmarks and operators' tools).
///
/// # Errors
/// Why no comparison was made: not ready, or the upstream failed.
pub async fn check_now<T: Truth>(cache: &Cache, truth: &mut T) -> Result<(u64, Compared), String> {
    let mut budget = PageBudget::new(PAGE_BYTES, truth.max_page());
    check(cache, truth, &mut budget).await.map_err(|e| match e {
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

/// Checks `cache` against `truth` every `period` until shutdown, in pages of at most
/// [`Truth::max_page`] entries and about [`PAGE_BYTES`].
pub(crate) async fn run<T: Truth>(
    cache: Cache,
    mut truth: T,
    period: Duration,
    relists: Relists,
    mut shutdown: watch::Receiver<bool>,
) {
    let plural = cache.definition().plural.clone();
    let group = cache.definition().group.clone();
    let mut budget = PageBudget::new(PAGE_BYTES, truth.max_page());
    loop {
        // Saturating: a period from configuration near `Duration::MAX` must not overflow.
        let jitter = Duration::try_from_secs_f64(period.as_secs_f64() * fastrand::f64() * 0.5)
            .unwrap_or(Duration::ZERO);
        let wait = period.saturating_add(jitter);
        tokio::select! {
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if cache.is_absent() {
            continue;
        }
        let outcome = tokio::select! {
            _ = shutdown.changed() => return,
            o = check(&cache, &mut truth, &mut budget) => o,
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
                relists.ask.send_modify(|g| *g = g.wrapping_add(1));
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
async fn check<T: Truth>(
    cache: &Cache,
    truth: &mut T,
    budget: &mut PageBudget,
) -> Result<(u64, Compared), NotChecked> {
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
        match compare(cache, truth, budget, n, Comparison::new(cached)).await {
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
    budget: &mut PageBudget,
    n: u64,
    mut cmp: Comparison,
) -> Result<Compared, TruthError> {
    let mut cursor = None;
    let mut verified = 0;
    // The keys whose unserved record the upstream confirmed at `n`.
    let mut unserved = hashbrown::HashSet::new();
    budget.start();
    loop {
        let page = truth.page(n, cursor, budget.limit()).await?;
        budget.observe(&page);
        for e in page.entries {
            if cmp.upstream(&e.key, e.rv) != Seen::Absent {
                continue;
            }
            // The value the follower skipped, unchanged since: no difference, and no read.
            if cache.unserved_at(&e.key) == Some(e.rv) {
                cmp.skipped();
                unserved.insert(e.key);
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
            let decodes = value.is_some_and(|v| cache.decode(&e.key, &v, e.rv).is_ok());
            if decodes {
                cmp.missing(&e.key, e.rv);
            } else {
                cmp.skipped();
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => {
                cache.retain_unserved(n, &unserved);
                return Ok(cmp.finish());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use watchcache::CacheConfig;
    use watchcache::ResourceDef;

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
        /// Values read one by one ([`Truth::value_at`]).
        reads: usize,
    }

    impl Truth for Table {
        fn max_page(&self) -> usize {
            1
        }

        async fn page(
            &mut self,
            n: u64,
            cursor: Option<String>,
            _limit: usize,
        ) -> Result<TruthPage, TruthError> {
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
            self.reads += 1;
            Ok(self
                .at
                .iter()
                .find(|(rv, _)| *rv == n)
                .and_then(|(_, o)| o.iter().find(|(k, _, _)| k == key))
                .map(|(_, _, v)| v.clone()))
        }
    }

    async fn cache_at_5() -> (Cache, watchcache::CacheWriter) {
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
            reads: 0,
        };
        let (n, out) = check(&cache, &mut t, &mut PageBudget::new(PAGE_BYTES, 1))
            .await
            .unwrap();
        assert_eq!(n, 5);
        assert!(out.consistent(), "{out:?}");
        assert_eq!((out.upstream, out.cached, out.skipped), (3, 2, 1));
        assert_eq!(t.pages, 3, "paged, one object a page");

        let mut gone = Table {
            at: vec![],
            expire: ATTEMPTS,
            pages: 0,
            reads: 0,
        };
        assert!(
            matches!(
                check(&cache, &mut gone, &mut PageBudget::new(PAGE_BYTES, 1)).await,
                Err(NotChecked::Moved(_))
            ),
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
            reads: 0,
        };
        let (_, out) = check(&cache, &mut t, &mut PageBudget::new(PAGE_BYTES, 1))
            .await
            .unwrap();
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

    /// A pod at `key` whose metadata names pod `names` in namespace ns.
    fn naming(names: &str) -> Bytes {
        Bytes::from(pod(names))
    }

    #[tokio::test]
    async fn values_naming_another_object_are_counted_unserved_and_skipped_unread() {
        let (cache, _writer) = cache_at_5().await;
        // The follower's list meets a value under x naming a: never served (not under x, and not
        // a second a), counted apart, and recorded as unserved at its revision.
        assert!(cache.decode_or_skip(&key("x"), &naming("a"), 3).is_none());
        let e = cache.decode(&key("x"), &naming("a"), 3).unwrap_err();
        assert_eq!(e.names.as_deref(), Some(key("a").as_str()), "{e}");
        let stats = cache.stats();
        assert_eq!((stats.decode_errors, stats.misplaced_values), (1, 1));
        assert_eq!(cache.unserved_at(&key("x")), Some(3));
        // The watch path: a cached key overwritten with a value naming another leaves the cache.
        assert!(matches!(
            cache.change_for_put(&key("b"), &naming("a"), 6),
            watchcache::Change::Delete(k) if k == key("b")
        ));
        assert_eq!(cache.unserved_at(&key("b")), Some(6));
        // A later good value of b, or its deletion, ends the record.
        assert!(
            cache
                .decode_or_skip(&key("b"), pod("b").as_bytes(), 7)
                .is_some()
        );
        assert_eq!(cache.unserved_at(&key("b")), None);
        assert!(cache.decode_or_skip(&key("b"), &naming("a"), 8).is_none());
        cache.change_for_delete(&key("b"));
        assert_eq!(cache.unserved_at(&key("b")), None);

        // More such values than the check would read one by one: each is skipped unread, as
        // the follower skipped it, so there is no false mismatch and no relist loop.
        let mut state = vec![
            (key("a"), 2, Bytes::from(pod("a"))),
            (key("b"), 5, Bytes::from(pod("b"))),
        ];
        for i in 0..2 * VERIFY_MAX {
            let k = key(&format!("m{i:03}"));
            assert!(cache.decode_or_skip(&k, &naming("a"), 4).is_none());
            state.push((k, 4, naming("a")));
        }
        state.sort();
        let mut t = Table {
            at: vec![(5, state.clone())],
            expire: 0,
            pages: 0,
            reads: 0,
        };
        let mut budget = PageBudget::new(PAGE_BYTES, 1);
        let (_, out) = check(&cache, &mut t, &mut budget).await.unwrap();
        assert!(out.consistent(), "{out:?}");
        assert_eq!(out.skipped, 2 * VERIFY_MAX as u64);
        assert_eq!(t.reads, 0, "no value read again");
        // x left etcd (its deletion fell in a relist's gap): its record goes after the check.
        assert_eq!(cache.unserved_at(&key("x")), None);
        assert_eq!(cache.unserved_at(&key("m000")), Some(4));

        // One the follower has no record of (a value written while the check read): read, and
        // skipped since it does not decode; a decodable one would be missing.
        state.push((key("y"), 5, naming("b")));
        state.sort();
        let mut t = Table {
            at: vec![(5, state)],
            expire: 0,
            pages: 0,
            reads: 0,
        };
        let (_, out) = check(&cache, &mut t, &mut budget).await.unwrap();
        assert!(out.consistent(), "{out:?}");
        assert_eq!((t.reads, out.skipped), (1, 2 * VERIFY_MAX as u64 + 1));
        // Counted by the follower's decodes only (x, b twice, the m's): the check counts none.
        assert_eq!(cache.stats().misplaced_values, 2 * VERIFY_MAX as u64 + 3);
    }

    /// An upstream whose keys-only reads carry values (the trait allows it), recording the
    /// entries' sizes of each page it answers.
    struct Heavy {
        rev: u64,
        kvs: Vec<(String, Bytes)>,
        pages: parking_lot::Mutex<Vec<Vec<usize>>>,
    }

    impl Upstream for Heavy {
        fn current_revision(&self) -> watchcache::BoxFuture<'_, watchcache::Result<u64>> {
            let rev = self.rev;
            Box::pin(async move { Ok(rev) })
        }

        fn range(
            &self,
            revision: Option<u64>,
            keys: KeyRange,
            limit: usize,
        ) -> watchcache::BoxFuture<'_, watchcache::Result<watchcache::RangePage>> {
            let within: Vec<_> = self.kvs.iter().filter(|(k, _)| keys.contains(k)).collect();
            let kvs: Vec<watchcache::RawKv> = within
                .iter()
                .take(limit)
                .map(|(k, v)| watchcache::RawKv {
                    key: k.clone(),
                    value: v.clone(),
                    mod_revision: 2,
                })
                .collect();
            self.pages.lock().push(
                kvs.iter()
                    .map(|kv| PageBudget::entry_bytes(&kv.key, Some(&kv.value)))
                    .collect(),
            );
            let page = watchcache::RangePage {
                revision: revision.unwrap_or(self.rev),
                more: within.len() > limit,
                kvs,
            };
            Box::pin(async move { Ok(page) })
        }
    }

    #[tokio::test]
    async fn pages_are_bounded_by_bytes_not_by_count() {
        const BUDGET: usize = 1 << 20;
        let (cache, _writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        // 40 pods of 100 to 300 KB (a 10 000-count page would hold all 8 MB), the largest
        // first, and one of 1.5 MB, over the budget alone, in the middle.
        let mut kvs = Vec::new();
        for i in 0..40usize {
            let name = format!("p{i:02}");
            let pad = if i == 20 {
                1_500_000
            } else {
                300_000 - i * 5_000
            };
            let value = format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","annotations":{{"pad":"{}"}}}}}}"#,
                "x".repeat(pad)
            );
            kvs.push((key(&name), Bytes::from(value)));
        }
        let mut writer = _writer;
        let mut r = writer.resync(5);
        r.add_page(kvs.iter().map(|(k, v)| cache.decode(k, v, 2).unwrap()));
        r.finish();
        let heavy = std::sync::Arc::new(Heavy {
            rev: 5,
            kvs,
            pages: parking_lot::Mutex::new(Vec::new()),
        });
        let mut truth = RangeTruth::new(heavy.clone(), 10_000);
        let mut budget = PageBudget::new(BUDGET, truth.max_page());
        for round in 0..2 {
            let (_, out) = check(&cache, &mut truth, &mut budget).await.unwrap();
            assert!(out.consistent(), "{out:?}");
            assert_eq!(out.upstream, 40);
            let pages = std::mem::take(&mut *heavy.pages.lock());
            let mut largest = 0;
            for (i, p) in pages.iter().enumerate() {
                let bytes: usize = p.iter().sum();
                let page_largest = p.iter().copied().max().unwrap_or(0);
                // Within the budget, or one entry over it alone, or (in the first round only)
                // holding an entry larger than every one before: the 1.5 MB one, read with
                // entries counted by the smaller ones before it.
                assert!(
                    bytes <= BUDGET || p.len() == 1 || (round == 0 && page_largest > largest),
                    "round {round}, page {i}: {bytes} bytes in {} entries",
                    p.len()
                );
                largest = largest.max(page_largest);
            }
            assert_eq!(pages.iter().map(Vec::len).sum::<usize>(), 40);
            // The first round starts with one entry, knowing none; the second with the first
            // round's largest as its estimate.
            assert_eq!(pages.first().map(Vec::len), Some(1));
            assert!(pages.iter().any(|p| p.len() > 1) || round == 1, "{pages:?}");
        }
    }
}
