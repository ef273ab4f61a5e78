//! The contract of the source a cache follows ([`Upstream`]): where consistent reads learn the
//! current revision, and, when the upstream's progress notifications cannot be trusted (etcd before
//! 3.4.31 / 3.5.13), where they read instead. [`RangeReader`] pages through its keys at one
//! revision, for resyncs and for reads served by the upstream.
//!
//! The cache only reads through this contract; feeding the cache is the feeder's job
//! ([`Cache::apply`](crate::Cache::apply), [`Cache::resync`](crate::Cache::resync)), and writes are
//! the [`Writes`](crate::Writes) contract's.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::model::Selection;

/// A boxed future, for the object-safe [`Upstream`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One stored key-value pair as read from the upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawKv {
    /// The full key, e.g. `/registry/pods/ns/name`.
    pub key: String,
    /// The stored bytes.
    pub value: Bytes,
    /// The revision the value was written at.
    pub mod_revision: u64,
}

/// One page of a range read.
#[derive(Debug, Clone, Default)]
pub struct RangePage {
    /// The revision the page was read at.
    pub revision: u64,
    /// Key-value pairs in key order.
    pub kvs: Vec<RawKv>,
    /// Whether more keys follow the last one.
    pub more: bool,
}

/// What [`Upstream::selected`] read: the revision it read at, and the key and revision of each
/// selected object, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selected {
    /// The revision of the read: every write acknowledged before it began is in it.
    pub revision: u64,
    /// (key, revision the object was last written at), by key.
    pub objects: Vec<(String, u64)>,
}

/// A range of one resource's keys, `[from, end)`. `None` bounds are the resource's own: a
/// consistent read narrows its range to what its selection can match (a namespace, one key), so
/// that it never reads the whole resource for one namespace's objects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyRange {
    /// The first key (inclusive); `None`: the start of the resource.
    pub from: Option<String>,
    /// The end (exclusive); `None`: the end of the resource.
    pub end: Option<String>,
}

impl KeyRange {
    /// Every key of the resource.
    pub fn all() -> KeyRange {
        KeyRange::default()
    }

    /// Exactly one key.
    pub fn one(key: &str) -> KeyRange {
        KeyRange {
            from: Some(key.to_owned()),
            end: Some(key_after(key)),
        }
    }

    /// Every key starting with `prefix` (which must start with the resource's prefix).
    pub fn prefixed(prefix: &str) -> KeyRange {
        KeyRange {
            from: Some(prefix.to_owned()),
            end: prefix_end(prefix),
        }
    }

    /// Whether `key` is inside the range.
    pub fn contains(&self, key: &str) -> bool {
        self.from.as_deref().is_none_or(|f| key >= f) && self.end.as_deref().is_none_or(|e| key < e)
    }
}

/// The smallest string above every string starting with `prefix`, if there is one.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        if let Some(next) = char::from_u32(last as u32 + 1) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The source of truth a cache follows (etcd, or [`MemorySource`](crate::MemorySource)).
pub trait Upstream: Send + Sync + 'static {
    /// The upstream's current revision, read linearizably.
    fn current_revision(&self) -> BoxFuture<'_, Result<u64>>;

    /// Asks the upstream to report its progress soon (etcd: a watch progress request). Called every
    /// [`CacheConfig::progress_interval`](crate::CacheConfig::progress_interval) while a read waits
    /// for the cache to catch up.
    fn request_progress(&self) {}

    /// Whether a progress notification at revision R proves the cache has every change up to R.
    /// When not (etcd before 3.4.31 / 3.5.13, etcd#15220 and #17507), consistent reads are served by
    /// [`range`](Upstream::range) instead of by waiting for the cache.
    fn progress_is_reliable(&self) -> bool {
        true
    }

    /// The key and revision of every object `selection` selects, read consistently: how a
    /// consistent read proves the cache fresh on an upstream that has no progress requests to
    /// answer at once (an API server, whose bookmarks come about once a minute; `fresh.rs`).
    /// `None` (the default): this upstream proves freshness by its revision instead.
    ///
    /// `selection` has no shard selector (the upstream's would not be the cache's): the proof
    /// covers every object of its selectors, a superset of what the read serves.
    ///
    /// # Errors
    /// [`Error::Upstream`]; the read then proves freshness by revision.
    fn selected(&self, selection: &Selection) -> Option<BoxFuture<'_, Result<Selected>>> {
        let _ = selection;
        None
    }

    /// Whether the upstream has compacted `revision` away (etcd: a read at it is refused). A
    /// continued LIST whose token names such a revision is answered 410 with a fresh token, as
    /// kube-apiserver answers it, even while the cache's own window could still serve it: the
    /// token expires when the upstream's history does, not when the cache's does (upstream's
    /// conformance test of chunking waits for exactly that). `None` (the default): the upstream
    /// compacts nothing the cache must follow.
    ///
    /// # Errors
    /// [`Error::Upstream`] when it cannot tell; the cache's window then decides.
    fn compacted(&self, revision: u64) -> Option<BoxFuture<'_, Result<bool>>> {
        let _ = revision;
        None
    }

    /// Like [`range`](Upstream::range), without values (they may be left empty): what a freshness
    /// proof reads. By default, a `range`.
    ///
    /// # Errors
    /// As `range`.
    fn range_keys(
        &self,
        revision: Option<u64>,
        keys: KeyRange,
        limit: usize,
    ) -> BoxFuture<'_, Result<RangePage>> {
        self.range(revision, keys, limit)
    }

    /// Reads the resource's keys in `keys` at `revision` (`None`: current, linearizable), at most
    /// `limit` of them.
    ///
    /// # Errors
    /// [`Error::Expired`] when the revision was compacted, [`Error::Upstream`] otherwise.
    fn range(
        &self,
        revision: Option<u64>,
        keys: KeyRange,
        limit: usize,
    ) -> BoxFuture<'_, Result<RangePage>> {
        let _ = (revision, keys, limit);
        Box::pin(async { Err(Error::upstream("this upstream does not serve range reads")) })
    }
}

/// Bytes a page of a range read aims at: the limit of each request is this over the largest
/// entry seen so far (at most the page size given). A count alone is no bound: 10 000 objects of
/// 100 KB are a 1 GB answer, over the client's 512 MiB, and a sync that pages so fails forever
/// (the large resource that never warms of k/k#136950).
pub(super) const PAGE_BYTES: usize = 64 << 20;

/// Entries asked for before any was seen: 500 of etcd's largest values (1.5 MiB by default) are
/// 750 MB, which the upstream answers by returning fewer (`EtcdUpstream` halves a page the
/// client cannot take); of any common size, well under [`PAGE_BYTES`].
const FIRST_PAGE: usize = 500;

/// Where a paged range read is: the revision (fixed by the first page when none was given) and the
/// keys still to read. Owned, so a stream can keep one across polls.
#[derive(Debug, Clone)]
pub struct RangeCursor {
    revision: Option<u64>,
    keys: KeyRange,
    page_size: usize,
    /// The largest entry (key and value) read so far: the next limit is [`PAGE_BYTES`] over it.
    largest: usize,
    done: bool,
}

impl RangeCursor {
    /// Reads `keys` from the start, or after key `after` (exclusive), at `revision` (`None`: the
    /// current one, linearizably), `page_size` keys per request.
    pub fn new(
        revision: Option<u64>,
        keys: KeyRange,
        after: Option<&str>,
        page_size: usize,
    ) -> RangeCursor {
        let mut keys = keys;
        if let Some(after) = after.map(key_after)
            && keys.from.as_deref().is_none_or(|f| after.as_str() > f)
        {
            keys.from = Some(after);
        }
        RangeCursor {
            revision,
            keys,
            page_size: page_size.max(1),
            largest: 0,
            done: false,
        }
    }

    /// The revision the pages are read at, once the first page fixed it.
    pub fn revision(&self) -> Option<u64> {
        self.revision
    }

    /// Whether the last page was read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The next request: (revision, keys, limit), or `None` when done. The limit is the page
    /// size, or fewer so that a page stays about 64 MiB.
    pub fn request(&self) -> Option<(Option<u64>, KeyRange, usize)> {
        let limit = match self.largest {
            0 => self.page_size.min(FIRST_PAGE),
            e => (PAGE_BYTES / e).clamp(1, self.page_size),
        };
        (!self.done).then(|| (self.revision, self.keys.clone(), limit))
    }

    /// Moves past a page that answered [`request`](RangeCursor::request); after an error the
    /// cursor is done.
    pub fn advance(&mut self, page: &Result<RangePage>) {
        match page {
            Ok(p) => {
                self.revision = Some(p.revision);
                for kv in &p.kvs {
                    self.largest = self.largest.max(kv.key.len() + kv.value.len());
                }
                match (p.more, p.kvs.last()) {
                    (true, Some(last)) => self.keys.from = Some(key_after(&last.key)),
                    _ => self.done = true,
                }
            }
            Err(_) => self.done = true,
        }
    }
}

/// Pages through an upstream's keys at one revision: the first page fixes the revision (when none
/// was given), and each page starts just after the previous page's last key.
pub struct RangeReader<'a> {
    upstream: &'a dyn Upstream,
    cursor: RangeCursor,
    keys_only: bool,
}

impl<'a> RangeReader<'a> {
    /// Reads from the start of the resource, or after key `after` (exclusive), at `revision`
    /// (`None`: the current one, linearizably), `page_size` keys per request.
    pub fn new(
        upstream: &'a dyn Upstream,
        revision: Option<u64>,
        after: Option<&str>,
        page_size: usize,
    ) -> RangeReader<'a> {
        RangeReader::within(upstream, revision, KeyRange::all(), after, page_size)
    }

    /// Like [`new`](RangeReader::new), over `keys` only.
    pub fn within(
        upstream: &'a dyn Upstream,
        revision: Option<u64>,
        keys: KeyRange,
        after: Option<&str>,
        page_size: usize,
    ) -> RangeReader<'a> {
        RangeReader {
            upstream,
            cursor: RangeCursor::new(revision, keys, after, page_size),
            keys_only: false,
        }
    }

    /// Reads keys and their revisions only ([`Upstream::range_keys`]).
    pub fn keys_only(mut self) -> RangeReader<'a> {
        self.keys_only = true;
        self
    }

    /// The revision the pages are read at, once the first page fixed it.
    pub fn revision(&self) -> Option<u64> {
        self.cursor.revision()
    }

    /// The next page; `None` after the last one.
    ///
    /// # Errors
    /// The upstream's error ([`Error::Expired`] when the revision was compacted). The reader is
    /// done after an error.
    pub async fn next_page(&mut self) -> Option<Result<RangePage>> {
        let (revision, keys, limit) = self.cursor.request()?;
        let page = if self.keys_only {
            self.upstream.range_keys(revision, keys, limit).await
        } else {
            self.upstream.range(revision, keys, limit).await
        };
        self.cursor.advance(&page);
        Some(page)
    }
}

/// The smallest key after `key`: the key with a NUL byte appended.
fn key_after(key: &str) -> String {
    format!("{key}\u{0}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ranges_hold_exactly_their_keys() {
        let ns = KeyRange::prefixed("/registry/pods/ns/");
        assert!(ns.contains("/registry/pods/ns/a"));
        assert!(!ns.contains("/registry/pods/ns0"));
        assert!(!ns.contains("/registry/pods/nt/a"));
        assert!(!ns.contains("/registry/pods/n"));
        let one = KeyRange::one("/registry/pods/ns/a");
        assert!(one.contains("/registry/pods/ns/a"));
        assert!(!one.contains("/registry/pods/ns/a0"));
        assert!(!one.contains("/registry/pods/ns/ab"));
        assert!(KeyRange::all().contains("anything"));
    }

    #[test]
    fn a_cursor_resumes_after_its_last_key_and_never_before_its_range() {
        let mut c = RangeCursor::new(None, KeyRange::prefixed("/p/ns/"), Some("/p/a"), 2);
        assert_eq!(c.request().unwrap().1.from.as_deref(), Some("/p/ns/"));
        let kv = |k: &str| RawKv {
            key: k.into(),
            value: Bytes::new(),
            mod_revision: 1,
        };
        c.advance(&Ok(RangePage {
            revision: 7,
            kvs: vec![kv("/p/ns/a"), kv("/p/ns/b")],
            more: true,
        }));
        let (rev, keys, limit) = c.request().unwrap();
        assert_eq!(
            (rev, keys.from.as_deref(), limit),
            (Some(7), Some("/p/ns/b\0"), 2)
        );
        c.advance(&Ok(RangePage {
            revision: 7,
            kvs: vec![kv("/p/ns/c")],
            more: false,
        }));
        assert!(c.is_done() && c.request().is_none());
        let inside = RangeCursor::new(None, KeyRange::prefixed("/p/ns/"), Some("/p/ns/x"), 2);
        assert_eq!(
            inside.request().unwrap().1.from.as_deref(),
            Some("/p/ns/x\0")
        );
    }

    #[test]
    fn a_cursors_pages_are_bounded_by_bytes_once_it_has_seen_entries() {
        let mut c = RangeCursor::new(None, KeyRange::all(), None, 10_000);
        assert_eq!(c.request().unwrap().2, FIRST_PAGE);
        let kv = |k: &str, n: usize| RawKv {
            key: k.into(),
            value: Bytes::from(vec![b'x'; n]),
            mod_revision: 1,
        };
        // Small objects: the page size bounds the page.
        c.advance(&Ok(RangePage {
            revision: 7,
            kvs: vec![kv("/a", 2_000)],
            more: true,
        }));
        assert_eq!(c.request().unwrap().2, 10_000);
        // One object of 100 KB: pages of about PAGE_BYTES from then on, never more.
        c.advance(&Ok(RangePage {
            revision: 7,
            kvs: vec![kv("/b", 100_000 - 2)],
            more: true,
        }));
        let limit = c.request().unwrap().2;
        assert_eq!(limit, PAGE_BYTES / 100_000);
        assert!(limit * 100_000 <= PAGE_BYTES);
    }
}
