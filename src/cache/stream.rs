//! WATCH as a [`Stream`] of typed events.
//!
//! A stream goes through up to two phases:
//! 1. **Initial events** (`sendInitialEvents`, or a legacy watch from resourceVersion unset or `"0"`):
//!    synthetic ADDED events for every matching object of the state at the start revision, read page
//!    by page from the store and its indexes (no O(N) copy per watcher), then for WatchList a BOOKMARK
//!    annotated `k8s.io/initial-events-end: "true"`.
//! 2. **Live**: events from the watcher's queue, history catch-up when it was parked, and periodic
//!    bookmarks when asked for.
//!
//! Events that happen during phase 1 wait in the queue (or, once it is full, in the history window),
//! so nothing is lost or duplicated at the seam.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;

use crate::cache::deadlines::{Deadline, Deadlines};
use crate::cache::state::{Registered, Shared};
use crate::cache::watcher::{Delivery, Feed, Watcher};
use crate::error::Error;
use crate::model::{EventType, Object, ObjectKey, ResourceVersion, Selection};
use crate::wire;

/// Objects per page while streaming initial events.
const INITIAL_PAGE: usize = 256;

/// How long before a served watch's end its last bookmark comes (upstream's `cacheWatcher`:
/// 2 s), so that its client resumes from a recent revision instead of relisting.
const BOOKMARK_BEFORE_END: Duration = Duration::from_secs(2);

/// The most changes a drained watcher still catching up from history is sent in its last chunks
/// (with what was queued for it) before its bookmark. Past it, it ends without one: its client
/// resumes from its last change. Bounds what a drain holds for one slow watcher.
pub(crate) const DRAIN_CATCH_UP: usize = 1024;

/// Options of a WATCH.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    /// Which objects.
    pub selection: Selection,
    /// Where to start: unset (consistent, current), `0` (any), or after revision N.
    pub resource_version: ResourceVersion,
    /// `sendInitialEvents`: `Some(true)` streams the current state first and ends it with an
    /// initial-events-end bookmark; `Some(false)` never does; `None` keeps the legacy behaviour
    /// (initial ADDED events for resourceVersion unset or `"0"`, none for N), the initial events
    /// then ending with that bookmark when bookmarks are allowed, as kube-apiserver 1.35 does.
    pub send_initial_events: Option<bool>,
    /// `allowWatchBookmarks`: periodic BOOKMARK events.
    pub allow_bookmarks: bool,
}

impl WatchOptions {
    /// Watches `selection` from `rv`.
    pub fn new(selection: Selection, rv: ResourceVersion) -> Self {
        WatchOptions {
            selection,
            resource_version: rv,
            ..Self::default()
        }
    }

    /// Asks for periodic bookmarks.
    #[must_use]
    pub fn with_bookmarks(mut self) -> Self {
        self.allow_bookmarks = true;
        self
    }

    /// Sets `sendInitialEvents`.
    #[must_use]
    pub fn send_initial_events(mut self, send: bool) -> Self {
        self.send_initial_events = Some(send);
        self
    }
}

/// One event of a watch.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    kind: EventType,
    rv: u64,
    /// An initial event's object; a change's is its history event's (`change`), read through it.
    object: Option<Object>,
    /// A bookmark's object (JSON); empty for other events, whose encodings are asked of their
    /// object or history event when a format needs them, never before: a protobuf watcher never
    /// makes a protobuf-stored object's JSON.
    bookmark: Bytes,
    initial_events_end: bool,
    /// The history event of a change: its memo of encodings (`wire/encoder.rs`), and a
    /// deletion's JSON at its revision, made once for every watcher.
    change: Option<Arc<crate::cache::history::Event>>,
    /// When the change entered the cache's history (`None`: initial events and bookmarks).
    received: Option<std::time::Instant>,
}

impl WatchEvent {
    /// The event of a delivery, which it takes: its history event moves in, and its object is
    /// read through it (no reference count taken and given back per watcher).
    fn change(d: Delivery) -> WatchEvent {
        let ev = d.event;
        WatchEvent {
            kind: d.kind,
            rv: ev.rv,
            object: None,
            bookmark: Bytes::new(),
            initial_events_end: false,
            received: Some(ev.at),
            change: Some(ev),
        }
    }

    fn initial(o: Object) -> WatchEvent {
        WatchEvent {
            kind: EventType::Added,
            rv: o.resource_version(),
            bookmark: Bytes::new(),
            object: Some(o),
            initial_events_end: false,
            change: None,
            received: None,
        }
    }

    /// When the change entered the cache's history, for dispatch latency: `None` for initial
    /// events (the state, not a change) and bookmarks.
    pub fn received_at(&self) -> Option<std::time::Instant> {
        self.received
    }

    /// ADDED, MODIFIED, DELETED or BOOKMARK.
    pub fn kind(&self) -> EventType {
        self.kind
    }

    /// The event's revision. For a DELETED event this is the deletion's revision, which is also the
    /// `metadata.resourceVersion` in [`WatchEvent::json`].
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The object: the new state, or for DELETED the last state that matched (whose own
    /// [`Object::resource_version`] is the revision it was written at). `None` for bookmarks.
    #[inline]
    pub fn object(&self) -> Option<&Object> {
        match (&self.change, self.kind) {
            (Some(ev), EventType::Deleted) => ev.prev.as_ref(),
            (Some(ev), _) => ev.object.as_ref(),
            (None, _) => self.object.as_ref(),
        }
    }

    /// The event object's JSON as it goes on the wire (shared bytes).
    #[inline]
    pub fn json(&self) -> &Bytes {
        match (self.kind, &self.change) {
            (EventType::Deleted, Some(ev)) => ev.deleted_json(),
            (EventType::Bookmark, _) => &self.bookmark,
            _ => self.object().map_or(&self.bookmark, Object::json),
        }
    }

    /// Whether this bookmark ends the initial events of a WatchList.
    pub fn is_initial_events_end(&self) -> bool {
        self.initial_events_end
    }
}

impl wire::Event for WatchEvent {
    #[inline]
    fn kind(&self) -> EventType {
        self.kind
    }
    #[inline]
    fn resource_version(&self) -> u64 {
        self.rv
    }
    #[inline]
    fn object(&self) -> Option<&Object> {
        WatchEvent::object(self)
    }
    #[inline]
    fn json(&self) -> &Bytes {
        WatchEvent::json(self)
    }
    #[inline]
    fn memo(&self) -> Option<&wire::EventMemo> {
        self.change.as_ref().map(|ev| &ev.memo)
    }
}

/// Where a stream is, unless it is live (sending changes: `WatchStream::phase` is `None`). Boxed:
/// an idle watch is live, and the initial events' page (64 B) or an error (64 B) inline would be
/// carried by every idle watch for its life; one `Option<Box<_>>` is 8 bytes where an enum of
/// two boxes and two empty states took 16.
enum Phase {
    /// Sending the state at the start revision as ADDED events.
    Initial(Initial),
    /// The next item is this error; then the stream ends.
    Failed(Error),
    Done,
}

/// A watch's initial events: the store as of history sequence number `seq` (revision `rv`), read
/// page by page.
pub(crate) struct InitialEvents {
    pub seq: u64,
    pub rv: u64,
    pub end_bookmark: bool,
}

struct Initial {
    /// The history sequence number whose state is listed.
    seq: u64,
    /// The last key read.
    after: Option<ObjectKey>,
    rv: u64,
    page: VecDeque<Object>,
    exhausted: bool,
    end_bookmark: bool,
}

/// A watch: a [`Stream`] of [`WatchEvent`]s, ending after an error (for example 410 Expired).
/// Dropping it unregisters the watcher.
pub struct WatchStream {
    shared: Arc<Shared>,
    watcher: Arc<Watcher>,
    id: u32,
    /// `None`: live.
    phase: Option<Box<Phase>>,
    last_rv: u64,
    /// The watch's one entry in a wheel (`None`: neither an end nor bookmarks): a served
    /// watch's end and its next periodic bookmark in the server's wheel, or an embedded
    /// watch's bookmarks in the cache's (the period is the cache's `bookmark_interval`). ≤ 1 s
    /// late, and no timer of its own per watch (`deadlines.rs`).
    deadline: Option<Deadline>,
}

/// Where and when a served watch ends: the server's wheel (whose shutdown ends it too) and its
/// deadline. Its bookmarks then come from that wheel, in the same entry.
pub struct WatchEnd {
    /// The wheel the watch ends in (the server's).
    pub wheel: Arc<Deadlines>,
    /// When the watch ends (its `timeoutSeconds`).
    pub at: tokio::time::Instant,
}

impl WatchStream {
    pub(crate) fn new(
        shared: Arc<Shared>,
        registered: Registered,
        initial: Option<InitialEvents>,
        bookmark_every: Option<Duration>,
        end: Option<WatchEnd>,
    ) -> WatchStream {
        let Registered {
            watcher,
            id,
            start_rv,
            ..
        } = registered;
        let phase = initial.map(|i| {
            Box::new(Phase::Initial(Initial {
                seq: i.seq,
                after: None,
                rv: i.rv,
                page: VecDeque::new(),
                exhausted: false,
                end_bookmark: i.end_bookmark,
            }))
        });
        let first_bookmark = bookmark_every.map(|d| tokio::time::Instant::now() + d);
        let deadline = match &end {
            Some(end) => Some(end.wheel.deadline(Some(end.at), first_bookmark)),
            None => first_bookmark.map(|at| shared.bookmarks.deadline(None, Some(at))),
        };
        let mut stream = WatchStream {
            shared,
            watcher,
            id,
            phase,
            last_rv: start_rv,
            deadline,
        };
        if let Some(end) = end {
            stream.bookmark_before(end.at);
        }
        stream
    }

    /// Ready once a served watch's end passed or its server is shutting down; otherwise `cx` is
    /// woken when one of them happens. Never ready for a watch without an end (made by
    /// [`Cache::watch`](crate::cache::Cache::watch)), whose reader alone ends it; `cx` is then
    /// not stored.
    pub fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.deadline {
            Some(d) if d.has_end() => d.poll_end(cx),
            _ => Poll::Pending,
        }
    }

    /// Schedules a bookmark 2 s before `deadline` (when bookmarks were asked for), as upstream does
    /// for a watch that the server will end at its timeout: the client can then resume from a recent
    /// revision instead of relisting. A watch that short (a leaf's progress probe: 3 s) gets it
    /// at once: it asks where the cache is, now.
    ///
    /// This moves the next bookmark only. A served watch (one with an end, which the server
    /// makes) has its end's bookmark scheduled from the start and kept after each periodic one:
    /// every period, and once 2 s before the end.
    pub fn bookmark_before(&mut self, deadline: tokio::time::Instant) {
        if let Some(timer) = &mut self.deadline
            && timer.has_bookmarks()
        {
            let now = tokio::time::Instant::now();
            let at = deadline
                .checked_sub(BOOKMARK_BEFORE_END)
                .unwrap_or(deadline);
            if at <= now + Duration::from_secs(1) {
                timer.bookmark_now();
            } else if timer.bookmark_is_after(at) {
                timer.set_bookmark(at);
            }
        }
    }

    /// Whether the watcher is parked (reading from history instead of its queue).
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        matches!(self.watcher.queue.lock().feed, Feed::Parked(_))
    }

    /// Deliveries waiting in the watcher's queue.
    #[cfg(all(test, watchcache_loom))]
    pub(crate) fn queued(&self) -> usize {
        self.watcher.queue.lock().items.len()
    }

    fn bookmark(&self, rv: u64, end: bool) -> WatchEvent {
        WatchEvent {
            kind: EventType::Bookmark,
            rv,
            object: None,
            bookmark: wire::bookmark_object(&self.shared.schema.def, rv, end),
            initial_events_end: end,
            change: None,
            received: None,
        }
    }

    /// The last events of a watch a server's drain ends: the changes already queued for it,
    /// then (when it asked for bookmarks) a bookmark at the cache's revision, so that its client
    /// resumes elsewhere from there rather than from the last change it saw. A watcher still
    /// catching up from history (parked: its client read slowly) is caught up here first, up to
    /// `DRAIN_CATCH_UP` changes, so it gets that bookmark too: otherwise its client would
    /// resume from its last change, which a replica restarted since does not hold (410, a
    /// relist). Empty while its initial events are still being sent: the last event it was sent
    /// is then where it resumes from.
    pub fn drain_tail(&mut self) -> Vec<WatchEvent> {
        if self.phase.is_some() {
            return Vec::new();
        }
        let mut tail: Vec<WatchEvent> = Vec::new();
        let rv = loop {
            let mut q = self.watcher.queue.lock();
            while let Some(d) = q.items.pop_front() {
                tail.push(WatchEvent::change(d));
            }
            match q.feed {
                // Under the queue lock, as in `poll_live`: every change up to it was queued.
                Feed::Live => break Some(self.shared.resource_version()),
                Feed::Parked(_) if tail.len() < DRAIN_CATCH_UP => {
                    drop(q);
                    // Fell out of the window: it resumes from its last change, and gets 410
                    // wherever that is gone too.
                    if self.shared.catch_up(&self.watcher).is_err() {
                        break None;
                    }
                }
                _ => break None,
            }
        };
        if let Some(last) = tail.last() {
            self.last_rv = last.rv;
        }
        if let Some(rv) = rv
            && self.deadline.as_ref().is_some_and(Deadline::has_bookmarks)
            && rv >= self.last_rv
        {
            self.last_rv = rv;
            tail.push(self.bookmark(rv, false));
        }
        tail
    }

    /// The wheel this watch ends in: the server's, for a served watch (`Cache::watch_until`).
    pub fn end_wheel(&self) -> Option<&Arc<Deadlines>> {
        self.deadline
            .as_ref()
            .filter(|d| d.has_end())
            .map(Deadline::wheel)
    }

    /// Reads the next page of initial events into `init.page`.
    fn next_initial_page(&mut self) -> Result<(), Error> {
        let Some(Phase::Initial(init)) = self.phase.as_deref_mut() else {
            return Ok(());
        };
        let page = self
            .shared
            .snapshot_page(
                init.seq,
                &self.watcher.predicate,
                init.after.as_deref(),
                INITIAL_PAGE,
            )
            .map_err(|e| Error::Expired {
                requested: init.rv,
                oldest: e.oldest,
            })?;
        init.exhausted = !page.more;
        init.after = page.items.last().map(Object::key_owned);
        init.page.extend(page.items);
        Ok(())
    }

    fn poll_live(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<WatchEvent, Error>>> {
        loop {
            let bookmark_rv;
            {
                let mut q = self.watcher.queue.lock();
                if let Some(d) = q.items.pop_front() {
                    drop(q);
                    let ev = WatchEvent::change(d);
                    self.last_rv = ev.rv;
                    return Poll::Ready(Some(Ok(ev)));
                }
                if q.feed == Feed::Live {
                    q.waker = Some(cx.waker().clone());
                    // Read under the queue lock: the dispatcher publishes a revision only after it
                    // queued that revision's events, so an empty queue here means all of them are out.
                    bookmark_rv = self.shared.resource_version();
                } else if q.feed == Feed::Ended {
                    drop(q);
                    self.phase = Some(Box::new(Phase::Done));
                    return Poll::Ready(None);
                } else {
                    drop(q);
                    if let Err(e) = self.shared.catch_up(&self.watcher) {
                        self.shared.record_expired();
                        self.phase = Some(Box::new(Phase::Done));
                        return Poll::Ready(Some(Err(Error::Expired {
                            requested: self.last_rv,
                            oldest: e.oldest,
                        })));
                    }
                    continue;
                }
            }
            if let Some(timer) = &mut self.deadline
                && timer.poll_bookmark(cx).is_ready()
            {
                // The next one a period on, or 2 s before a served watch's end if that comes
                // first (as upstream: every period, and once before the end).
                timer.next_bookmark(
                    tokio::time::Instant::now() + self.shared.config.bookmark_interval,
                    BOOKMARK_BEFORE_END,
                );
                // Armed now: the bookmark may be skipped below, and the wheel must wake us for
                // the next one. (A period under a tick is ready again: the next poll sends it.)
                let _ = timer.poll_bookmark(cx);
                if bookmark_rv >= self.last_rv {
                    self.last_rv = bookmark_rv;
                    return Poll::Ready(Some(Ok(self.bookmark(bookmark_rv, false))));
                }
            }
            return Poll::Pending;
        }
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchEvent, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let Some(phase) = this.phase.as_deref_mut() else {
                return this.poll_live(cx);
            };
            match phase {
                Phase::Done => return Poll::Ready(None),
                Phase::Failed(_) => {
                    let Phase::Failed(e) = std::mem::replace(phase, Phase::Done) else {
                        unreachable!()
                    };
                    return Poll::Ready(Some(Err(e)));
                }
                Phase::Initial(init) => {
                    if let Some(o) = init.page.pop_front() {
                        return Poll::Ready(Some(Ok(WatchEvent::initial(o))));
                    }
                    if init.exhausted {
                        let (rv, end) = (init.rv, init.end_bookmark);
                        this.phase = None;
                        this.last_rv = this.last_rv.max(rv);
                        if end {
                            return Poll::Ready(Some(Ok(this.bookmark(rv, true))));
                        }
                        continue;
                    }
                    if let Err(e) = this.next_initial_page() {
                        if let Error::Expired { .. } = e {
                            this.shared.record_expired();
                        }
                        this.phase = Some(Box::new(Phase::Failed(e)));
                    }
                }
            }
        }
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.shared.unregister(self.id);
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("id", &self.id)
            .field("last_rv", &self.last_rv)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::cache::deadlines;
    use crate::cache::{Cache, CacheConfig, WatchOptions};
    use crate::model::{ResourceDef, ResourceVersion};

    fn pod(name: &str, node: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#
        )
    }

    #[tokio::test]
    async fn a_parked_stream_catches_up_in_order_and_rejoins() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default().routed_buffer(2),
        );
        let src = crate::MemorySource::new(writer, 1, []);
        let sel = Selection::all().with_fields("spec.nodeName=n1").unwrap();
        let mut s = cache
            .watch(WatchOptions::new(sel, ResourceVersion::At(1)))
            .await
            .unwrap();
        for _ in 0..10 {
            src.put("/registry/pods/ns/a", pod("a", "n1")).unwrap();
        }
        assert!(s.is_parked());
        let mut rvs = Vec::new();
        for _ in 0..10 {
            rvs.push(s.next().await.unwrap().unwrap().resource_version());
        }
        assert_eq!(rvs, (2..=11).collect::<Vec<_>>());
        assert!(!s.is_parked());
        assert_eq!(cache.stats().parked, 1);
    }

    /// A watch with bookmarks on a ready cache at revision 7, and the source that keeps it alive.
    async fn bookmarked_watch() -> (WatchStream, crate::MemorySource) {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = crate::MemorySource::new(writer, 7, []);
        let s = cache
            .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(7)).with_bookmarks())
            .await
            .unwrap();
        (s, src)
    }

    #[tokio::test(start_paused = true)]
    async fn a_bookmark_comes_two_seconds_before_the_deadline() {
        let (mut s, _src) = bookmarked_watch().await;
        let start = tokio::time::Instant::now();
        s.bookmark_before(start + Duration::from_secs(10));
        let ev = s.next().await.unwrap().unwrap();
        assert_eq!((ev.kind(), ev.resource_version()), (EventType::Bookmark, 7));
        // The cache's wheel: never early, at most a tick late.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(8) && took <= Duration::from_secs(9),
            "{took:?}"
        );
        assert!(!ev.is_initial_events_end());
    }

    /// A drained watch ends with what was queued for it, then a bookmark at the cache's
    /// revision: no change it was due is skipped by resuming from that bookmark elsewhere.
    #[tokio::test]
    async fn a_drained_watch_ends_with_its_queued_changes_then_a_bookmark() {
        let (mut s, src) = bookmarked_watch().await;
        let plain = s.shared.clone();
        for i in 0..3 {
            let name = format!("p{i}");
            src.put(&format!("/registry/pods/ns/{name}"), pod(&name, "n1"))
                .unwrap();
        }
        let first = s.next().await.unwrap().unwrap();
        assert_eq!(first.resource_version(), 8);
        let tail: Vec<_> = s
            .drain_tail()
            .iter()
            .map(|e| (e.kind(), e.resource_version()))
            .collect();
        assert_eq!(
            tail,
            [
                (EventType::Added, 9),
                (EventType::Added, 10),
                (EventType::Bookmark, 10)
            ]
        );
        assert_eq!(plain.resource_version(), 10);
        // Nothing new: the bookmark alone, at the same revision.
        let again: Vec<_> = s.drain_tail().iter().map(|e| e.kind()).collect();
        assert_eq!(again, [EventType::Bookmark]);
    }

    /// A drained watch still catching up from history (its client read slowly) is caught up
    /// first, then gets its bookmark: its client resumes from the cache's revision, not from the
    /// last change it read, which a replica restarted since would not hold.
    #[tokio::test]
    async fn a_drained_watch_that_fell_behind_is_caught_up_then_bookmarked() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default().routed_buffer(2),
        );
        let src = crate::MemorySource::new(writer, 1, []);
        let sel = Selection::all().with_fields("spec.nodeName=n1").unwrap();
        let mut s = cache
            .watch(WatchOptions::new(sel, ResourceVersion::At(1)).with_bookmarks())
            .await
            .unwrap();
        for i in 0..10 {
            let name = format!("p{i}");
            src.put(&format!("/registry/pods/ns/{name}"), pod(&name, "n1"))
                .unwrap();
        }
        assert!(s.is_parked());
        let tail: Vec<_> = s
            .drain_tail()
            .iter()
            .map(|e| (e.kind(), e.resource_version()))
            .collect();
        let mut want: Vec<_> = (2..=11).map(|rv| (EventType::Added, rv)).collect();
        want.push((EventType::Bookmark, 11));
        assert_eq!(tail, want);
        assert!(!s.is_parked());
    }

    /// Further behind than `DRAIN_CATCH_UP`, a drained watch ends without a bookmark: what a
    /// drain holds for one watcher is bounded, and its client resumes from its last change.
    #[tokio::test]
    async fn a_drained_watch_too_far_behind_ends_at_its_last_change() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default().routed_buffer(2),
        );
        let src = crate::MemorySource::new(writer, 1, []);
        let sel = Selection::all().with_fields("spec.nodeName=n1").unwrap();
        let mut s = cache
            .watch(WatchOptions::new(sel, ResourceVersion::At(1)).with_bookmarks())
            .await
            .unwrap();
        for i in 0..DRAIN_CATCH_UP + 10 {
            let name = format!("p{i}");
            src.put(&format!("/registry/pods/ns/{name}"), pod(&name, "n1"))
                .unwrap();
        }
        let tail = s.drain_tail();
        assert!(tail.len() >= DRAIN_CATCH_UP && tail.len() < DRAIN_CATCH_UP + 10);
        assert!(tail.iter().all(|e| e.kind() == EventType::Added));
        let rvs: Vec<u64> = tail.iter().map(WatchEvent::resource_version).collect();
        assert_eq!(
            rvs,
            (2..2 + tail.len() as u64).collect::<Vec<_>>(),
            "in order, none skipped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_watch_gets_its_bookmark_at_once() {
        let (mut s, _src) = bookmarked_watch().await;
        let start = tokio::time::Instant::now();
        s.bookmark_before(start + Duration::from_secs(3));
        let ev = s.next().await.unwrap().unwrap();
        assert_eq!((ev.kind(), ev.resource_version()), (EventType::Bookmark, 7));
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    /// Periodic bookmarks come from the cache's wheel: each a period apart (never early, at most
    /// a tick late), at the revision the cache reached, with no timer of the watch's own; an
    /// event in between does not stop them, and the wheel holds one entry per waiting watch.
    #[tokio::test(start_paused = true)]
    async fn periodic_bookmarks_come_through_the_wheel() {
        let every = Duration::from_secs(5);
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default().bookmark_interval(every),
        );
        let src = crate::MemorySource::new(writer, 7, []);
        let mut streams = Vec::new();
        for _ in 0..3 {
            streams.push(
                cache
                    .watch(
                        WatchOptions::new(Selection::all(), ResourceVersion::At(7))
                            .with_bookmarks(),
                    )
                    .await
                    .unwrap(),
            );
        }
        let plain = cache
            .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(7)))
            .await
            .unwrap();
        let mut last = tokio::time::Instant::now();
        for round in 0..3u64 {
            if round == 1 {
                src.put("/registry/pods/ns/a", pod("a", "n1")).unwrap();
                for s in &mut streams {
                    let ev = s.next().await.unwrap().unwrap();
                    assert_eq!(ev.kind(), EventType::Added);
                }
            }
            for (i, s) in streams.iter_mut().enumerate() {
                let ev = s.next().await.unwrap().unwrap();
                let rv = if round == 0 { 7 } else { 8 };
                assert_eq!(
                    (ev.kind(), ev.resource_version()),
                    (EventType::Bookmark, rv)
                );
                if i == 0 {
                    let took = last.elapsed();
                    assert!(took >= every && took <= every + deadlines::TICK, "{took:?}");
                    last = tokio::time::Instant::now();
                }
            }
            // Each stream re-armed its next bookmark; the watch without bookmarks has none.
            assert_eq!(cache.shared.bookmarks.waiting(), 3);
        }
        drop(streams);
        assert_eq!(cache.shared.bookmarks.waiting(), 0);
        drop(plain);
    }

    /// kube-apiserver 1.35 serves a watch from resourceVersion unset or "0" that names no
    /// sendInitialEvents as a WatchList (its WatchList gate defaults the option): with bookmarks
    /// allowed, the initial events end with the annotated bookmark. Without bookmarks, or from a
    /// revision, there is none.
    #[tokio::test]
    async fn a_legacy_watch_with_bookmarks_ends_its_initial_events_as_upstream() {
        use ResourceVersion::{Any, At, Unset};
        use futures_util::FutureExt;
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = crate::MemorySource::new(writer, 1, []);
        src.put("/registry/pods/ns/a", pod("a", "n1")).unwrap();
        let (added, end) = ((EventType::Added, false), (EventType::Bookmark, true));
        for (rv, bookmarks, want) in [
            (Any, true, vec![added, end]),
            (Unset, true, vec![added, end]),
            (Any, false, vec![added]),
            (Unset, false, vec![added]),
            (At(2), true, vec![]),
        ] {
            let mut opts = WatchOptions::new(Selection::all(), rv);
            opts.allow_bookmarks = bookmarks;
            let mut s = cache.watch(opts).await.unwrap();
            let mut got = Vec::new();
            while let Some(Some(ev)) = s.next().now_or_never() {
                let ev = ev.unwrap();
                got.push((ev.kind(), ev.is_initial_events_end()));
            }
            assert_eq!(got, want, "{rv:?}, bookmarks {bookmarks}");
        }
    }

    #[test]
    fn an_idle_stream_is_small() {
        // Held by every idle watch for its life (design/performance.md, "Bookmarks from the
        // cache's wheel"): the phases boxed (live is none), the bookmark timer a wheel entry.
        assert!(
            std::mem::size_of::<WatchStream>() <= 80,
            "{}",
            std::mem::size_of::<WatchStream>()
        );
    }

    #[tokio::test]
    async fn dropping_a_stream_unregisters_its_watcher() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let _src = crate::MemorySource::new(writer, 1, []);
        let s = cache
            .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
            .await
            .unwrap();
        assert_eq!(cache.stats().unrouted_watchers, 1);
        drop(s);
        assert_eq!(cache.stats().unrouted_watchers, 0);
    }
}
