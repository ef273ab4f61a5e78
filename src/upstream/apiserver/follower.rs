//! One resource's follower on a Kubernetes API server: the single watch behind a cache.
//!
//! States (one enum per step, [`Broken`] for how a watch ended):
//! 1. **Sync**: a WatchList (`sendInitialEvents=true`, bookmarks, `NotOlderThan`) whose initial
//!    events end with the `k8s.io/initial-events-end` bookmark, the same response then carrying on
//!    as the live watch; or, when the server does not do WatchList, a paginated consistent LIST
//!    followed by a watch from the list's resourceVersion. Either way the listed state goes through
//!    a [`Resync`](crate::Resync), so a relist reaches watchers as ordinary events.
//! 2. **Watch**: events are applied grouped by resourceVersion (an upstream watchcache sends a
//!    resync's difference as several events at one revision), bookmarks become progress.
//! 3. **Breaks**: a watch that ends at its timeout is reopened at once from the last applied
//!    resourceVersion; a failure is retried with capped exponential backoff and full jitter,
//!    resuming from the same place (no relist); 410 Expired relists. After the grace period
//!    without a watch the cache is marked not ready; the first watch that opens makes it ready.
//!
//! Invariant: `applied` is the cache's revision as this task last set it; every event up to it is
//! in the cache. No lock is held here: the cache's own lock is taken inside `apply`/`progress`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};

use crate::cache::{Cache, Change};
use crate::model::Object;
use crate::upstream::apiserver::rest::{Frame, Rest, RestError, WatchLines, identity, parse_frame};
use crate::upstream::apiserver::{ApiServerConfig, InitialList};
use crate::upstream::backoff::Backoff;
use crate::upstream::outage::Outage;

/// Why a watch ended.
#[derive(Debug)]
enum Broken {
    /// The watch reached its timeout: reopen from the last applied resourceVersion.
    Ended,
    /// 410 Expired: our position left the server's window; relist.
    Expired,
    /// One revision's events arrived split across two reads after the first part was applied; the
    /// cache cannot take a second batch at one revision, so relist (rare: only an upstream
    /// watchcache's resync sends several events at one revision).
    SplitRevision(u64),
    /// A resumable failure.
    Failed(String),
    /// The upstream does not serve the resource (404 on its collection): asked again after
    /// `absent_retry`.
    Absent(String),
    Shutdown,
}

/// How a sync ended.
enum Synced {
    /// A WatchList: its response carries on as the live watch.
    Streaming(u64, WatchLines),
    /// A LIST: watch from this resourceVersion.
    Listed(u64),
}

pub(crate) struct Follower {
    pub cache: Cache,
    pub rest: Rest,
    pub config: ApiServerConfig,
    /// Consistent reads that wait ask for a progress probe through this.
    pub progress: Arc<Notify>,
    pub shutdown: watch::Receiver<bool>,
}

impl Follower {
    fn plural(&self) -> &str {
        &self.cache.definition().plural
    }

    pub async fn run(mut self) {
        let mut outage = Outage::new(
            self.cache.clone(),
            "API server",
            self.config.unavailable_grace,
            Backoff::new(self.config.backoff_initial, self.config.backoff_max),
        );
        let mut applied: Option<u64> = None;
        // Whether to try WatchList; set off for good when the server shows it does not do it.
        let mut watch_list = self.config.initial_list != InitialList::List;
        loop {
            if *self.shutdown.borrow() {
                return;
            }
            let opened = match applied {
                Some(rv) => self.open_watch(rv).await.map(|s| (rv, s)),
                None => match self.sync(&mut watch_list).await {
                    Ok(Synced::Streaming(rv, s)) => Ok((rv, s)),
                    Ok(Synced::Listed(rv)) => {
                        applied = Some(rv);
                        self.open_watch(rv).await.map(|s| (rv, s))
                    }
                    Err(e) => Err(e),
                },
            };
            let broken = match opened {
                Ok((rv, stream)) => {
                    applied = Some(rv);
                    outage.recovered();
                    self.follow(stream, &mut applied).await
                }
                Err(e) if e.is_expired() => Broken::Expired,
                Err(e) if e.code() == Some(404) => Broken::Absent(e.to_string()),
                Err(e) => Broken::Failed(e.to_string()),
            };
            match broken {
                Broken::Shutdown => return,
                Broken::Ended => debug!(resource = %self.plural(), "watch timed out; reopening"),
                Broken::Expired => {
                    warn!(resource = %self.plural(), from = ?applied, "410 Expired from the upstream; relisting");
                    applied = None;
                }
                Broken::SplitRevision(rv) => {
                    warn!(resource = %self.plural(), rv, "one revision's events arrived in two parts; relisting");
                    applied = None;
                }
                Broken::Failed(e) => {
                    outage.failed(&e);
                    if outage.pause(&mut self.shutdown).await {
                        return;
                    }
                }
                Broken::Absent(e) => {
                    if !self.cache.is_absent() {
                        warn!(resource = %self.plural(), error = %e, retry = ?self.config.absent_retry, "the upstream does not serve this resource; not waited for (its requests go to the upstream), asked again");
                    }
                    self.cache.set_absent();
                    applied = None;
                    tokio::select! {
                        () = tokio::time::sleep(self.config.absent_retry) => {}
                        _ = self.shutdown.changed() => return,
                    }
                }
            }
        }
    }

    /// The watch's `timeoutSeconds`: the configured one with up to 50 % jitter, so that many
    /// followers do not reconnect together.
    fn watch_timeout(&self) -> u64 {
        let base = self.config.watch_timeout.as_secs().max(1);
        base + fastrand::u64(0..=base / 2)
    }

    async fn open_watch(&self, from: u64) -> Result<WatchLines, RestError> {
        self.rest
            .watch(Some(from), false, self.watch_timeout())
            .await
    }

    /// The initial sync or a relist: WatchList when the server does it, else a paginated LIST.
    async fn sync(&mut self, watch_list: &mut bool) -> Result<Synced, RestError> {
        if *watch_list {
            match self.sync_watch_list().await {
                Ok(Some(s)) => return Ok(s),
                Ok(None) => {
                    info!(resource = %self.plural(), "the API server does not do WatchList; using LIST then watch");
                    *watch_list = false;
                }
                Err(e)
                    if self.config.initial_list == InitialList::WatchList
                        || *self.shutdown.borrow() =>
                {
                    return Err(e);
                }
                // As client-go's reflector: a WatchList that fails for any reason falls back to
                // LIST then watch for this sync ("making progress is better than deadlocking").
                // kube-apiserver on an etcd without progress requests refuses it with a 500
                // ("the required storage feature RequestWatchProgress is disabled"), every time:
                // a refusal the server chose (any status but 410 and 429) turns it off for good.
                Err(e) => {
                    // 404: the resource is not served (yet); that says nothing of WatchList.
                    let refused = e.code().is_some_and(|c| c != 410 && c != 429 && c != 404);
                    warn!(resource = %self.plural(), error = %e, for_good = refused, "WatchList failed; falling back to LIST then watch");
                    if refused {
                        *watch_list = false;
                    }
                }
            }
        }
        self.sync_list().await.map(Synced::Listed)
    }

    /// A WatchList. `Ok(None)`: the server ended the watch without the initial-events-end
    /// bookmark (it ignored `sendInitialEvents`); an error when it refused or failed.
    async fn sync_watch_list(&mut self) -> Result<Option<Synced>, RestError> {
        let started = Instant::now();
        let timeout = self.watch_timeout();
        let mut stream = self.rest.watch(None, true, timeout).await?;
        let mut objects: Vec<Object> = Vec::new();
        let deadline = tokio::time::Instant::now()
            + Duration::from_secs(timeout)
            + self.config.request_timeout;
        loop {
            let lines = tokio::select! {
                _ = self.shutdown.changed() => return Err(RestError::Transport("shutting down".into())),
                _ = tokio::time::sleep_until(deadline) => return Err(RestError::Timeout(Duration::from_secs(timeout))),
                l = stream.next_lines() => l?,
            };
            if lines.is_empty() {
                return if self.config.initial_list == InitialList::Auto {
                    Ok(None)
                } else {
                    Err(RestError::Malformed(
                        "the WatchList ended without its initial-events-end bookmark".into(),
                    ))
                };
            }
            for (i, line) in lines.iter().enumerate() {
                match parse_frame(line)? {
                    Frame::Put(raw) => {
                        if let Some(o) = self.decode(&raw)? {
                            objects.push(o);
                        }
                    }
                    Frame::Bookmark {
                        rv,
                        initial_end: true,
                    } => {
                        let mut resync = self.cache.resync(rv);
                        let n = objects.len();
                        resync.add_page(objects);
                        let out = resync.finish();
                        info!(resource = %self.plural(), listed = n, added = out.added, modified = out.modified, deleted = out.deleted, revision = rv, took = ?started.elapsed(), "synced by WatchList");
                        let mut applied = Some(rv);
                        // Whatever followed the bookmark in the same read is live.
                        if let Err(b) = self.apply_lines(&lines[i + 1..], &mut applied) {
                            return Err(match b {
                                Broken::Expired => RestError::Status {
                                    code: 410,
                                    reason: "Expired".into(),
                                    message: "right after the initial events".into(),
                                },
                                other => RestError::Transport(format!("{other:?}")),
                            });
                        }
                        return Ok(Some(Synced::Streaming(applied.unwrap_or(rv), stream)));
                    }
                    Frame::Bookmark { .. } => {}
                    Frame::Delete(_) => {
                        return Err(RestError::Malformed(
                            "a DELETED event among WatchList initial events".into(),
                        ));
                    }
                    Frame::Error(e) => return Err(e),
                }
            }
        }
    }

    /// A consistent LIST in pages (each continued page is at the first page's resourceVersion).
    async fn sync_list(&mut self) -> Result<u64, RestError> {
        let started = Instant::now();
        let mut token: Option<String> = None;
        let mut resync = None;
        loop {
            let page = self
                .rest
                .list_page(self.config.page_size, token.as_deref())
                .await?;
            let rv = page.rv;
            let resync = resync.get_or_insert_with(|| (rv, self.cache.resync(rv)));
            let mut objects = Vec::with_capacity(page.items.len());
            for raw in &page.items {
                if let Some(o) = self.decode(raw)? {
                    objects.push(o);
                }
            }
            resync.1.add_page(objects);
            info!(resource = %self.plural(), objects = resync.1.listed(), revision = rv, "syncing");
            token = page.continue_token;
            if token.is_none() {
                break;
            }
        }
        let Some((rv, resync)) = resync else {
            return Err(RestError::Malformed("a LIST returned no page".into()));
        };
        let out = resync.finish();
        info!(resource = %self.plural(), listed = out.listed, added = out.added, modified = out.modified, deleted = out.deleted, revision = rv, took = ?started.elapsed(), "synced by LIST");
        Ok(rv)
    }

    /// Decodes an object at its own resourceVersion. `Ok(None)`: a malformed object, counted and
    /// skipped as the etcd follower does; `Err`: the object has no usable identity (a
    /// non-numeric resourceVersion is an error of the whole upstream, not of one object).
    fn decode(&self, raw: &Bytes) -> Result<Option<Object>, RestError> {
        let id = identity(self.cache.definition(), raw)?;
        Ok(self.cache.decode_or_skip(&id.key, raw, id.rv))
    }

    /// Runs a watch until it breaks. Progress probes run beside it when consistent reads wait.
    async fn follow(&mut self, mut stream: WatchLines, applied: &mut Option<u64>) -> Broken {
        let mut silent_since = tokio::time::Instant::now();
        let mut probe: Option<tokio::task::JoinHandle<()>> = None;
        loop {
            // kube-apiserver and watchcache send a bookmark about every minute to a watch that
            // allows them: a watch silent for longer than `idle_timeout` is a dead connection.
            let dead_at = silent_since + self.config.idle_timeout;
            let lines = tokio::select! {
                _ = self.shutdown.changed() => return Broken::Shutdown,
                _ = tokio::time::sleep_until(dead_at) => return Broken::Failed("the watch went silent".into()),
                _ = self.progress.notified() => {
                    if probe.as_ref().is_none_or(|p| p.is_finished()) {
                        probe = Some(tokio::spawn(probe_progress(self.rest.clone(), self.cache.clone())));
                    }
                    continue;
                }
                l = stream.next_lines() => l,
            };
            silent_since = tokio::time::Instant::now();
            match lines {
                Ok(lines) if lines.is_empty() => return Broken::Ended,
                Ok(lines) => {
                    if let Err(b) = self.apply_lines(&lines, applied) {
                        return b;
                    }
                }
                Err(e) => return Broken::Failed(e.to_string()),
            }
        }
    }

    /// Applies the frames of one read: consecutive events at one resourceVersion as one batch.
    fn apply_lines(&self, lines: &[Bytes], applied: &mut Option<u64>) -> Result<(), Broken> {
        let mut batch: Option<(u64, Vec<Change>)> = None;
        for line in lines {
            let frame = parse_frame(line).map_err(|e| Broken::Failed(e.to_string()))?;
            let (rv, change) = match frame {
                Frame::Put(raw) => {
                    let id = identity(self.cache.definition(), &raw)
                        .map_err(|e| Broken::Failed(e.to_string()))?;
                    let change = self
                        .cache
                        .decode_or_skip(&id.key, &raw, id.rv)
                        .map(Change::Put);
                    (id.rv, change)
                }
                Frame::Delete(raw) => {
                    let id = identity(self.cache.definition(), &raw)
                        .map_err(|e| Broken::Failed(e.to_string()))?;
                    (id.rv, Some(Change::Delete(id.key)))
                }
                Frame::Bookmark { rv, .. } => {
                    self.flush(batch.take(), applied)?;
                    self.cache.progress(rv);
                    *applied = Some(applied.map_or(rv, |a| a.max(rv)));
                    continue;
                }
                Frame::Error(e) if e.is_expired() => return Err(Broken::Expired),
                Frame::Error(e) => return Err(Broken::Failed(format!("watch error: {e}"))),
            };
            match &mut batch {
                Some((brv, changes)) if *brv == rv => changes.extend(change),
                _ => {
                    self.flush(batch.take(), applied)?;
                    batch = Some((rv, change.into_iter().collect()));
                }
            }
        }
        self.flush(batch, applied)
    }

    fn flush(
        &self,
        batch: Option<(u64, Vec<Change>)>,
        applied: &mut Option<u64>,
    ) -> Result<(), Broken> {
        let Some((rv, changes)) = batch else {
            return Ok(());
        };
        match *applied {
            Some(a) if rv == a && self.cache.resource_version() == a => {
                return Err(Broken::SplitRevision(rv));
            }
            Some(a) if rv <= a => {
                debug!(rv, applied = a, "skipping an already applied revision");
                return Ok(());
            }
            _ => {}
        }
        match self.cache.apply(rv, changes) {
            Ok(()) => *applied = Some(rv),
            // The cache is ahead of this task (a progress probe moved it): the change would be
            // lost, so relist rather than skip it.
            Err(e) => {
                warn!(resource = %self.plural(), error = %e, "event at or below the cache's revision");
                return Err(Broken::SplitRevision(rv));
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
/// bookmark's, so the cache may move to it. Events, if any, are left to the main watch.
async fn probe_progress(rest: Rest, cache: Cache) {
    let from = cache.resource_version();
    let mut stream = match rest.watch(Some(from), false, PROBE_TIMEOUT_SECS).await {
        Ok(s) => s,
        Err(e) => {
            debug!(error = %e, "progress probe failed");
            return;
        }
    };
    let mut best = None;
    let read = async {
        loop {
            match stream.next_lines().await {
                Ok(lines) if lines.is_empty() => return,
                Ok(lines) => {
                    for line in &lines {
                        match parse_frame(line) {
                            Ok(Frame::Bookmark { rv, .. }) => best = Some(rv),
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
    if tokio::time::timeout(rest.timeout, read).await.is_err() {
        return;
    }
    if let Some(rv) = best {
        debug!(from, to = rv, "progress probe");
        cache.progress(rv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheConfig, ListOptions};
    use crate::model::ResourceDef;

    /// A follower of a pods cache at revision 1, and the sender that keeps it from shutting down.
    fn follower() -> (Follower, watch::Sender<bool>) {
        let cache = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        cache.resync(1).finish();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let rest = Rest::new(client, cache.definition(), Duration::from_secs(1));
        let (stop, shutdown) = watch::channel(false);
        let f = Follower {
            cache,
            rest,
            config: ApiServerConfig::default(),
            progress: Arc::new(Notify::new()),
            shutdown,
        };
        (f, stop)
    }

    fn frame(kind: &str, name: &str, rv: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"type":"{kind}","object":{{"kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"n1"}}}}}}"#
        ))
    }

    async fn names(f: &Follower) -> Vec<(String, u64)> {
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
        let (f, _stop) = follower();
        let mut applied = Some(1);
        // A watchcache upstream's resync: two events at revision 5 in one read, then one at 6.
        let lines = [
            frame("ADDED", "a", "5"),
            frame("ADDED", "b", "5"),
            frame("MODIFIED", "a", "6"),
        ];
        f.apply_lines(&lines, &mut applied).unwrap();
        assert_eq!(applied, Some(6));
        assert_eq!(f.cache.resource_version(), 6);
        assert_eq!(names(&f).await, vec![("a".into(), 6), ("b".into(), 5)]);
        // The rest of revision 6 in a later read: the cache cannot take it, so relist.
        let late = [frame("ADDED", "c", "6")];
        assert!(matches!(
            f.apply_lines(&late, &mut applied),
            Err(Broken::SplitRevision(6))
        ));
        // Deletions, then a bookmark as progress.
        let lines = [
            frame("DELETED", "b", "7"),
            Bytes::from_static(
                br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}"#,
            ),
        ];
        f.apply_lines(&lines, &mut applied).unwrap();
        assert_eq!((applied, f.cache.resource_version()), (Some(9), 9));
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
        let (mut f, _stop) = follower();
        f.rest = Rest::new(
            kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap(),
            f.cache.definition(),
            Duration::from_secs(2),
        );
        f.config.idle_timeout = Duration::from_millis(300);
        let stream = f.rest.watch(Some(1), false, 60).await.unwrap();
        let mut applied = Some(1);
        let started = Instant::now();
        let broken = tokio::time::timeout(Duration::from_secs(5), f.follow(stream, &mut applied))
            .await
            .expect("the watch breaks by itself");
        assert!(
            matches!(&broken, Broken::Failed(m) if m.contains("silent")),
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
        let cache = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let (_stop, shutdown) = watch::channel(false);
        let f = Follower {
            rest: Rest::new(client, cache.definition(), Duration::from_secs(2)),
            cache: cache.clone(),
            config: ApiServerConfig::default(),
            progress: Arc::new(Notify::new()),
            shutdown,
        };
        let task = tokio::spawn(f.run());
        cache
            .wait_ready(Duration::from_secs(5))
            .await
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
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = Arc::new(AtomicBool::new(false));
        let serving = served.clone();
        let peer = tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let serving = serving.clone();
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
        let cache = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let (_stop, shutdown) = watch::channel(false);
        let f = Follower {
            rest: Rest::new(client, cache.definition(), Duration::from_secs(2)),
            cache: cache.clone(),
            config: ApiServerConfig {
                absent_retry: Duration::from_millis(100),
                initial_list: InitialList::List,
                ..ApiServerConfig::default()
            },
            progress: Arc::new(Notify::new()),
            shutdown,
        };
        let task = tokio::spawn(f.run());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cache.is_absent() {
            assert!(Instant::now() < deadline, "a 404 makes the cache absent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!cache.is_ready());
        // Still absent a while later: asked again, not failed (no grace period runs out).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(cache.is_absent());
        served.store(true, Ordering::SeqCst);
        cache
            .wait_ready(Duration::from_secs(5))
            .await
            .expect("ready once the upstream serves the resource");
        assert!(!cache.is_absent());
        assert_eq!(cache.resource_version(), 5);
        task.abort();
        peer.abort();
    }

    #[tokio::test]
    async fn expired_errors_and_bad_resource_versions_break_the_watch() {
        let (f, _stop) = follower();
        let mut applied = Some(1);
        let gone = Bytes::from_static(
            br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}"#,
        );
        assert!(matches!(
            f.apply_lines(&[gone], &mut applied),
            Err(Broken::Expired)
        ));
        let bad = frame("ADDED", "a", "12abc");
        match f.apply_lines(&[bad], &mut applied) {
            Err(Broken::Failed(m)) => assert!(m.contains("\"12abc\""), "{m}"),
            other => panic!("{other:?}"),
        }
        // Nothing was applied by either.
        assert_eq!((applied, f.cache.resource_version()), (Some(1), 1));
        assert!(names(&f).await.is_empty());
    }
}
