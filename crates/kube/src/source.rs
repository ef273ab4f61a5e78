//! A Kubernetes API server (or another watchcache) as a follower's [`Source`]: the single watch
//! behind a cache. The driver (`crates/follow/src/`) does the rest: resume, relist, backoff,
//! readiness, and the WatchList fallback.
//!
//! - **Sync**: a WatchList (`sendInitialEvents=true`, bookmarks, `NotOlderThan`) whose initial
//!   events end with the `k8s.io/initial-events-end` bookmark, the same response then carrying on
//!   as the live watch; or a paginated consistent LIST, after which the driver opens a watch from
//!   the list's resourceVersion. Either way the listed state goes through a
//!   [`Resync`](watchcache::Resync), so a relist reaches watchers as ordinary events.
//! - **Watch**: events are applied grouped by resourceVersion (an upstream watchcache sends a
//!   resync's difference as several events at one revision), bookmarks become progress.
//! - **Breaks**: a watch that ends at its timeout is [`Break::Ended`] (reopened at once from the
//!   last applied resourceVersion); 410 Expired is [`Break::Expired`] (relist); one revision's
//!   events split across two reads is [`Break::Relist`]; anything else is [`Break::Failed`] with
//!   the answer's status, if any (the driver resumes after a backoff; a WatchList refused with a
//!   status is not asked again). Each break carries a [`FollowError`] naming what failed (the
//!   sync, opening the watch, the watch, a decode) with the [`RestError`] as its `source()`, or
//!   what the upstream showed (another origin).
//!
//! Invariant: `applied` is the cache's revision as this source last set it; every event up to it
//! is in the cache. A progress probe's answer reaches the cache through this source too: the
//! writer is not shared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};

use crate::ApiServerConfig;
use crate::rest::{Frame, Rest, RestError, WatchFrames, identity};
use watchcache::Object;
use watchcache::{Cache, CacheWriter, Change, Decoder};
use watchcache_follow::{Break, FollowError, Source, SyncMode, Synced};

/// What a failed call means to the follower: 410 is an expired position, 404 a resource the
/// upstream does not serve (a CRD not installed), anything else a failure carrying the answer's
/// status. `what` says what failed ([`FollowError::sync`], [`FollowError::open`], ...), with `e`
/// as its cause.
fn broken(what: fn(RestError) -> FollowError, e: RestError) -> Break {
    let (expired, status) = (e.is_expired(), e.code());
    let error = what(e);
    if expired {
        return Break::Expired(error);
    }
    if status == Some(404) {
        return Break::Absent(error);
    }
    Break::Failed { error, status }
}

/// [`broken`] for a failed sync.
fn sync_broken(e: RestError) -> Break {
    broken(FollowError::sync, e)
}

/// One resource on an API server.
pub(crate) struct ApiSource {
    /// The resource's decoder: a watch event's object reaches the cache decoded.
    pub decoder: Decoder,
    /// The cache, as its readers see it: its revision, decoding a sync's objects.
    pub cache: Cache,
    pub rest: Rest,
    pub config: ApiServerConfig,
    /// Consistent reads that wait ask for a progress probe through this.
    pub progress: Arc<Notify>,
}

impl Source for ApiSource {
    type Watch = WatchFrames;
    const NAME: &'static str = "API server";

    async fn sync(
        &mut self,
        writer: &mut CacheWriter,
        mode: SyncMode,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Synced<WatchFrames>, Break> {
        match mode {
            SyncMode::WatchList => self.sync_watch_list(writer, shutdown).await,
            SyncMode::List => self
                .sync_list(writer)
                .await
                .map(|rv| Synced { rv, watch: None }),
        }
    }

    async fn open(
        &mut self,
        from: u64,
        _shutdown: &mut watch::Receiver<bool>,
    ) -> Result<WatchFrames, Break> {
        let stream = self
            .rest
            .watch(Some(from), false, self.watch_timeout())
            .await
            .map_err(|e| broken(FollowError::open, e))?;
        self.same_origin(stream.origin)?;
        Ok(stream)
    }

    async fn follow(
        &mut self,
        mut stream: WatchFrames,
        writer: &mut CacheWriter,
        applied: &mut u64,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Break {
        let mut silent_since = tokio::time::Instant::now();
        let mut probe: Option<tokio::task::JoinHandle<Option<u64>>> = None;
        loop {
            // kube-apiserver and watchcache send a bookmark about every minute to a watch that
            // allows them: a watch silent for longer than `idle_timeout` is a dead connection.
            let dead_at = silent_since + self.config.idle_timeout;
            let frames = tokio::select! {
                _ = shutdown.changed() => return Break::Shutdown,
                _ = tokio::time::sleep_until(dead_at) => {
                    return Break::failed(FollowError::Silent(self.config.idle_timeout));
                }
                _ = self.progress.notified() => {
                    if probe.as_ref().is_none_or(|p| p.is_finished()) {
                        probe = Some(tokio::spawn(probe_progress(self.rest.clone(), self.cache.clone())));
                    }
                    continue;
                }
                answer = async { probe.as_mut()?.await.ok().flatten() }, if probe.is_some() => {
                    probe = None;
                    if let Some(rv) = answer {
                        writer.progress(rv);
                    }
                    continue;
                }
                f = stream.next_frames() => f,
            };
            silent_since = tokio::time::Instant::now();
            match frames {
                Ok(frames) if frames.is_empty() => return Break::Ended,
                Ok(frames) => {
                    if let Err(b) = self.apply_frames(frames, writer, applied) {
                        return b;
                    }
                }
                Err(e) => return Break::failed(FollowError::watch(e)),
            }
        }
    }
}

impl ApiSource {
    fn plural(&self) -> &str {
        &self.cache.definition().plural
    }

    /// The watch's `timeoutSeconds`: the configured one with up to 50 % jitter, so that many
    /// followers do not reconnect together.
    fn watch_timeout(&self) -> u64 {
        let base = self.config.watch_timeout.as_secs().max(1);
        base + fastrand::u64(0..=base / 2)
    }

    /// A WatchList: its initial events into a resync, then the same response as the watch.
    /// [`Break::NoInitialEventsEnd`] when the server ended the watch without the
    /// initial-events-end bookmark (it ignored `sendInitialEvents`).
    async fn sync_watch_list(
        &mut self,
        writer: &mut CacheWriter,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Synced<WatchFrames>, Break> {
        let started = Instant::now();
        let timeout = self.watch_timeout();
        let mut stream = self
            .rest
            .watch(None, true, timeout)
            .await
            .map_err(sync_broken)?;
        self.same_origin(stream.origin)?;
        let mut objects: Vec<Object> = Vec::new();
        let deadline_after = Duration::from_secs(timeout) + self.config.request_timeout;
        let deadline = tokio::time::Instant::now() + deadline_after;
        loop {
            let frames = tokio::select! {
                _ = shutdown.changed() => return Err(Break::Shutdown),
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(Break::failed(FollowError::Timeout {
                        what: "the WatchList's initial events",
                        after: deadline_after,
                    }));
                }
                f = stream.next_frames() => f.map_err(sync_broken)?,
            };
            if frames.is_empty() {
                return Err(Break::NoInitialEventsEnd);
            }
            let mut frames = frames.into_iter();
            while let Some(frame) = frames.next() {
                match frame {
                    Frame::Put(raw) => {
                        if let Some(o) = self.decode(&raw).map_err(Self::undecodable)? {
                            objects.push(o);
                        }
                    }
                    Frame::Bookmark {
                        rv,
                        initial_end: true,
                    } => {
                        let mut resync = writer.resync(rv);
                        let n = objects.len();
                        resync.add_page(objects);
                        let out = resync.finish();
                        debug!(resource = %self.plural(), listed = n, added = out.added, modified = out.modified, deleted = out.deleted, revision = rv, took = ?started.elapsed(), "synced by WatchList");
                        let mut applied = rv;
                        // Whatever followed the bookmark in the same read is live.
                        self.apply_frames(frames, writer, &mut applied)?;
                        return Ok(Synced {
                            rv: applied,
                            watch: Some(stream),
                        });
                    }
                    Frame::Bookmark { .. } => {}
                    Frame::Delete(_) => {
                        return Err(Break::failed(FollowError::Unexpected(
                            "a DELETED event among WatchList initial events",
                        )));
                    }
                    Frame::Error(e) => return Err(sync_broken(e)),
                }
            }
        }
    }

    /// A consistent LIST in pages (each continued page is at the first page's resourceVersion).
    async fn sync_list(&mut self, writer: &mut CacheWriter) -> Result<u64, Break> {
        let started = Instant::now();
        let first = self
            .rest
            .list_page(self.config.page_size, None)
            .await
            .map_err(sync_broken)?;
        self.same_origin(first.origin)?;
        let rv = first.rv;
        let mut resync = writer.resync(rv);
        let mut page = first;
        loop {
            let mut objects = Vec::with_capacity(page.items.len());
            for raw in &page.items {
                if let Some(o) = self.decode(raw).map_err(Self::undecodable)? {
                    objects.push(o);
                }
            }
            resync.add_page(objects);
            debug!(resource = %self.plural(), objects = resync.listed(), revision = rv, "syncing");
            let Some(token) = page.continue_token.take() else {
                break;
            };
            page = self
                .rest
                .list_page(self.config.page_size, Some(&token))
                .await
                .map_err(sync_broken)?;
            // A continued page from another root (a load balancer between) is not this list's.
            self.same_origin(page.origin)?;
        }
        let out = resync.finish();
        debug!(resource = %self.plural(), listed = out.listed, added = out.added, modified = out.modified, deleted = out.deleted, revision = rv, took = ?started.elapsed(), "synced by LIST");
        Ok(rv)
    }

    /// Checks an answer's origin (`X-Watchcache-Origin`, from an upstream watchcache) against
    /// the cache's: another one means the upstream's revisions now come from another etcd
    /// cluster (a load balancer moved this follower to a root over another etcd), so nothing
    /// read so far can be compared with what comes: [`Break::Replaced`], which ends every
    /// watcher with 410 and relists, as after etcd's history was replaced. The first origin
    /// seen, or the first after that reset, is learned; an upstream that never says one
    /// (kube-apiserver) is taken as it is, one that stops saying it is another origin.
    fn same_origin(&self, seen: Option<u64>) -> Result<(), Break> {
        match (self.cache.origin(), seen) {
            (Some(known), Some(now)) if known != now => {
                Err(Break::Replaced(FollowError::OriginChanged { known, now }))
            }
            // Revisions of a known origin, now from an upstream that names none: nothing says
            // they are the same space.
            (Some(known), None) => Err(Break::Replaced(FollowError::OriginDropped { known })),
            (None, Some(now)) => {
                self.cache.set_origin(now);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// An object of a sync without a usable identity: a failure (no status: it is not the
    /// server's answer to the request, so it says nothing of WatchList).
    fn undecodable(e: RestError) -> Break {
        Break::failed(FollowError::decode(e))
    }

    /// Decodes an object at its own resourceVersion. `Ok(None)`: a malformed object, counted and
    /// skipped as the etcd follower does; `Err`: the object has no usable identity (a
    /// non-numeric resourceVersion is an error of the whole upstream, not of one object).
    fn decode(&self, raw: &Bytes) -> Result<Option<Object>, RestError> {
        let id = identity(self.cache.definition(), raw)?;
        Ok(self.cache.decode_or_skip(&id.key, raw, id.rv))
    }

    /// Applies the frames of one read: consecutive events at one resourceVersion as one batch.
    fn apply_frames(
        &self,
        frames: impl IntoIterator<Item = Frame>,
        writer: &mut CacheWriter,
        applied: &mut u64,
    ) -> Result<(), Break> {
        let mut batch: Option<(u64, Vec<Change>)> = None;
        for frame in frames {
            let (rv, change) = match frame {
                Frame::Put(raw) => {
                    let id = identity(self.cache.definition(), &raw).map_err(Self::undecodable)?;
                    // Decoded here, applied with its batch: a value that does not decode is
                    // counted and left unserved, and the batch goes on without it.
                    let change = match self.decoder.decode(&id.key, &raw, id.rv) {
                        Ok(o) => Some(Change::Put(o)),
                        Err(e) => {
                            self.cache.skip_unreadable(&e, id.rv);
                            None
                        }
                    };
                    (id.rv, change)
                }
                Frame::Delete(raw) => {
                    let id = identity(self.cache.definition(), &raw).map_err(Self::undecodable)?;
                    (id.rv, Some(self.cache.change_for_delete(&id.key)))
                }
                Frame::Bookmark { rv, .. } => {
                    self.flush(batch.take(), writer, applied)?;
                    writer.progress(rv);
                    *applied = (*applied).max(rv);
                    continue;
                }
                Frame::Error(e) if e.is_expired() => {
                    return Err(Break::Expired(FollowError::watch(e)));
                }
                Frame::Error(e) => return Err(Break::failed(FollowError::watch(e))),
            };
            match &mut batch {
                Some((brv, changes)) if *brv == rv => changes.extend(change),
                _ => {
                    self.flush(batch.take(), writer, applied)?;
                    batch = Some((rv, change.into_iter().collect()));
                }
            }
        }
        self.flush(batch, writer, applied)
    }

    fn flush(
        &self,
        batch: Option<(u64, Vec<Change>)>,
        writer: &mut CacheWriter,
        applied: &mut u64,
    ) -> Result<(), Break> {
        let Some((rv, changes)) = batch else {
            return Ok(());
        };
        // One revision's events split across two reads after the first part was applied: the
        // cache cannot take a second batch at one revision, so relist (rare: only an upstream
        // watchcache's resync sends several events at one revision).
        let split = || Break::Relist(FollowError::SplitRevision(rv));
        if rv == *applied && self.cache.resource_version() == *applied {
            return Err(split());
        }
        if rv <= *applied {
            debug!(
                rv,
                applied = *applied,
                "skipping an already applied revision"
            );
            return Ok(());
        }
        match writer.apply(rv, changes) {
            Ok(()) => *applied = rv,
            // The cache is ahead of this source (a progress probe moved it): the change would be
            // lost, so relist rather than skip it.
            Err(e) => {
                warn!(resource = %self.plural(), error = %e, "event at or below the cache's revision");
                return Err(split());
            }
        }
        Ok(())
    }
}

/// How long a progress probe's watch asks to last. kube-apiserver's cacher sends its pre-timeout
/// bookmark 2 s before the deadline and none at all to a watch shorter than that (a 1 s probe
/// got nothing, so reads waited their 3 s and were handed to the upstream): 3 s gets the bookmark
/// after about one second. A watchcache upstream answers a watch this short at once.
const PROBE_TIMEOUT_SECS: u64 = 3;

/// A progress request, as far as the Kubernetes API allows one: a short watch from the cache's
/// revision with bookmarks. The server sends a bookmark before the watch's deadline; if no event
/// came before it, nothing of this resource changed between the cache's revision and the
/// bookmark's, so the cache may move to it (the follower applies the answer). Events, if any,
/// are left to the main watch.
async fn probe_progress(rest: Rest, cache: Cache) -> Option<u64> {
    let from = cache.resource_version();
    let mut stream = match rest.watch(Some(from), false, PROBE_TIMEOUT_SECS).await {
        Ok(s) => s,
        Err(e) => {
            debug!(error = %e, "progress probe failed");
            return None;
        }
    };
    let mut best = None;
    let read = async {
        loop {
            match stream.next_frames().await {
                Ok(frames) if frames.is_empty() => return,
                Ok(frames) => {
                    for frame in frames {
                        match frame {
                            Frame::Bookmark { rv, .. } => best = Some(rv),
                            _ => {
                                best = None;
                                return;
                            }
                        }
                    }
                    // The bookmark is the probe's answer: no need to wait for the deadline.
                    if best.is_some() {
                        return;
                    }
                }
                Err(_) => {
                    best = None;
                    return;
                }
            }
        }
    };
    tokio::time::timeout(rest.timeout, read).await.ok()?;
    if let Some(rv) = best {
        debug!(from, to = rv, "progress probe");
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use watchcache::ResourceDef;
    use watchcache::{CacheConfig, ListOptions};
    use watchcache_follow::{self, Follow, Policy, WatchListUse};

    fn policy() -> Policy {
        Policy {
            upstream: "API server",
            grace: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            absent_retry: Duration::from_millis(100),
        }
    }

    /// The source of a pods cache at revision 1, its writer, and the shutdown channel.
    fn follower() -> (ApiSource, CacheWriter, watch::Sender<bool>) {
        let (cache, mut writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        writer.resync(1).finish();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let rest = Rest::new(client, cache.definition(), Duration::from_secs(1), None);
        let f = ApiSource {
            decoder: cache.decoder(),
            cache,
            rest,
            config: ApiServerConfig::default(),
            progress: Arc::new(Notify::new()),
        };
        (f, writer, watch::Sender::new(false))
    }

    /// A pods cache following the API server at `url` with the driver, its task, and the
    /// sender that keeps it running.
    fn following(
        url: &str,
        watch_list: WatchListUse,
    ) -> (Cache, tokio::task::JoinHandle<()>, watch::Sender<bool>) {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let (stop, shutdown) = watch::channel(false);
        let f = ApiSource {
            decoder: cache.decoder(),
            rest: Rest::new(client, cache.definition(), Duration::from_secs(2), None),
            cache: cache.clone(),
            config: ApiServerConfig::default(),
            progress: Arc::new(Notify::new()),
        };
        let follow = Follow {
            policy: policy(),
            watch_list,
            shutdown,
            relists: None,
        };
        (
            cache,
            tokio::spawn(watchcache_follow::run(f, writer, follow)),
            stop,
        )
    }

    /// What the follower does with one read of JSON lines: parse, then apply.
    fn apply_lines(
        f: &ApiSource,
        lines: &[Bytes],
        w: &mut CacheWriter,
        applied: &mut u64,
    ) -> Result<(), Break> {
        let frames = lines
            .iter()
            .map(crate::rest::parse_frame)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Break::failed(FollowError::decode(e)))?;
        f.apply_frames(frames, w, applied)
    }

    fn frame(kind: &str, name: &str, rv: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"type":"{kind}","object":{{"kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"n1"}}}}}}"#
        ))
    }

    async fn names(f: &ApiSource) -> Vec<(String, u64)> {
        f.cache
            .list(&ListOptions::all())
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| (o.name().to_owned(), o.resource_version()))
            .collect()
    }

    #[tokio::test]
    async fn events_of_one_revision_are_one_batch_and_a_split_one_relists() {
        let (f, mut w, _stop) = follower();
        let mut applied = 1;
        // A watchcache upstream's resync: two events at revision 5 in one read, then one at 6.
        let lines = [
            frame("ADDED", "a", "5"),
            frame("ADDED", "b", "5"),
            frame("MODIFIED", "a", "6"),
        ];
        apply_lines(&f, &lines, &mut w, &mut applied).unwrap();
        assert_eq!(applied, 6);
        assert_eq!(f.cache.resource_version(), 6);
        assert_eq!(names(&f).await, vec![("a".into(), 6), ("b".into(), 5)]);
        // The rest of revision 6 in a later read: the cache cannot take it, so relist.
        let late = [frame("ADDED", "c", "6")];
        assert!(matches!(
            apply_lines(&f, &late, &mut w, &mut applied),
            Err(Break::Relist(FollowError::SplitRevision(6)))
        ));
        // Deletions, then a bookmark as progress.
        let lines = [
            frame("DELETED", "b", "7"),
            Bytes::from_static(
                br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}"#,
            ),
        ];
        apply_lines(&f, &lines, &mut w, &mut applied).unwrap();
        assert_eq!((applied, f.cache.resource_version()), (9, 9));
        assert_eq!(names(&f).await, vec![("a".into(), 6)]);
    }

    /// A peer that answers a watch's head and then says nothing: a connection that died without
    /// closing (a partition). The watch must break after `idle_timeout`, not hang.
    #[tokio::test]
    async fn a_silent_watch_is_broken_after_the_idle_timeout() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let peer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            // Hold the connection open and silent.
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(s);
        });
        let (mut f, mut w, stop) = follower();
        f.rest = Rest::new(
            kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap(),
            f.cache.definition(),
            Duration::from_secs(2),
            None,
        );
        f.config.idle_timeout = Duration::from_millis(300);
        let stream = f.rest.watch(Some(1), false, 60).await.unwrap();
        let mut applied = 1;
        let started = Instant::now();
        let mut shutdown = stop.subscribe();
        let broken = tokio::time::timeout(
            Duration::from_secs(5),
            f.follow(stream, &mut w, &mut applied, &mut shutdown),
        )
        .await
        .expect("the watch breaks by itself");
        assert!(
            matches!(
                &broken,
                Break::Failed {
                    error: FollowError::Silent(_),
                    ..
                }
            ),
            "{broken:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        peer.abort();
    }

    /// kube-apiserver on Debian's etcd 3.4.23 refuses every WatchList with a 500 ("the required
    /// storage feature RequestWatchProgress is disabled"). The follower must fall back to LIST
    /// then watch, as client-go's reflector does, and become ready, not retry the WatchList.
    #[tokio::test]
    async fn a_refused_watch_list_falls_back_to_list_then_watch() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let watch_lists = Arc::new(AtomicUsize::new(0));
        let counted = watch_lists.clone();
        let peer = tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = s.read(&mut buf).await.unwrap();
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let first = head.lines().next().unwrap_or_default().to_owned();
                    if first.contains("sendInitialEvents=true") {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the required storage feature RequestWatchProgress is disabled","reason":"InternalError","code":500}"#;
                        let r = format!(
                            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        s.write_all(r.as_bytes()).await.unwrap();
                    } else if first.contains("watch=true") {
                        let ev = r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"ns","resourceVersion":"6"},"spec":{"nodeName":"n1"}}}"#;
                        let r = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{ev}\n\r\n",
                            ev.len() + 1
                        );
                        s.write_all(r.as_bytes()).await.unwrap();
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    } else {
                        let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"4"},"spec":{"nodeName":"n1"}}]}"#;
                        let r = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        s.write_all(r.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        let (cache, task, _stop) = following(&url, WatchListUse::Try);
        tokio::time::timeout(Duration::from_secs(5), cache.wait_ready())
            .await
            .expect("ready in time")
            .expect("ready after falling back to LIST");
        let deadline = Instant::now() + Duration::from_secs(5);
        while cache.resource_version() < 6 {
            assert!(
                Instant::now() < deadline,
                "the watch after the LIST delivers"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let names: Vec<String> = cache
            .list(&ListOptions::all())
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| o.name().to_owned())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            watch_lists.load(Ordering::SeqCst),
            1,
            "WatchList asked once, then off"
        );
        task.abort();
        peer.abort();
    }

    /// A resource the upstream does not serve (a CRD not installed: 404) is absent, not waited
    /// for; once the upstream serves it (the CRD installed), the follower syncs it and it is ready.
    #[tokio::test]
    async fn a_resource_the_upstream_does_not_serve_is_absent_until_it_does() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = Arc::new(AtomicBool::new(false));
        let serving = served.clone();
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        let peer = tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let serving = serving.clone();
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = s.read(&mut buf).await.unwrap();
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let first = head.lines().next().unwrap_or_default().to_owned();
                    let r = if !serving.load(Ordering::SeqCst) {
                        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#;
                        format!(
                            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    } else if first.contains("watch=true") {
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_owned()
                    } else {
                        let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"4"},"spec":{"nodeName":"n1"}}]}"#;
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    s.write_all(r.as_bytes()).await.unwrap();
                    tokio::time::sleep(Duration::from_secs(30)).await;
                });
            }
        });
        let (cache, task, _stop) = following(&url, WatchListUse::Off);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cache.is_absent() {
            assert!(Instant::now() < deadline, "a 404 makes the cache absent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!cache.is_ready());
        // Still absent a while later: asked again (every 100 ms), not failed (no grace period
        // runs out).
        let before = asked.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert!(cache.is_absent());
        assert!(asked.load(Ordering::SeqCst) > before, "asked again");
        served.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), cache.wait_ready())
            .await
            .expect("ready in time")
            .expect("ready once the upstream serves the resource");
        assert!(!cache.is_absent());
        assert_eq!(cache.resource_version(), 5);
        task.abort();
        peer.abort();
    }

    #[tokio::test]
    async fn expired_errors_and_bad_resource_versions_break_the_watch() {
        let (f, mut w, _stop) = follower();
        let mut applied = 1;
        let gone = Bytes::from_static(
            br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}"#,
        );
        assert!(matches!(
            apply_lines(&f, &[gone], &mut w, &mut applied),
            Err(Break::Expired(_))
        ));
        let bad = frame("ADDED", "a", "12abc");
        match apply_lines(&f, &[bad], &mut w, &mut applied) {
            Err(Break::Failed {
                error: e @ FollowError::Decode { .. },
                status: None,
            }) => {
                assert!(e.to_string().contains("\"12abc\""), "{e}");
                // The source is the decoder's error itself.
                let source =
                    std::error::Error::source(&e).and_then(|s| s.downcast_ref::<RestError>());
                assert!(
                    matches!(source, Some(RestError::NonNumericResourceVersion(_))),
                    "{source:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Nothing was applied by either.
        assert_eq!((applied, f.cache.resource_version()), (1, 1));
        assert!(names(&f).await.is_empty());
    }
}
