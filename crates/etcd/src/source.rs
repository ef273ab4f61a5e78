//! etcd as a follower's [`Source`]: the sync is range reads of the resource prefix in pages at
//! one revision; the watch is one etcd watch on the prefix (`prev_kv`, progress notifications)
//! from the next revision. The driver (`crates/follow/src/`) does the rest: resume, relist,
//! backoff, readiness.
//!
//! What etcd's breaks mean: a cancel with `compact_revision > 0` is [`Break::Expired`] (relist);
//! an error, a closed stream, another cancel, or a failed probe after `idle_probe` of silence (a
//! dead connection, or a member without a leader: the client requires one) is
//! [`Break::Failed`] (resume from the last applied revision, no relist). etcd's history being
//! replaced (wiped, or restored from a backup, on the same URL) shows as its revision going
//! backwards or its cluster id changing: resuming from our revision would follow a different
//! history, so it is [`Break::Replaced`] (every watcher gets 410 Expired and the cache relists).
//! Each break carries a [`FollowError`] naming what failed (the sync, opening or confirming the
//! watch, the watch, a progress request or probe, a timeout) or what etcd showed (a compaction,
//! another cluster id, a revision behind), with the `etcd_client::Error` as its `source()`.
// Reads outside input (requests or stored values): no panicking access (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

use std::sync::Arc;
use std::time::Instant;

use etcd_client::{
    Client, EventType as EtcdEventType, GetOptions, WatchOptions as EtcdWatchOptions,
    WatchResponse, WatchStream,
};
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};

use crate::EtcdConfig;
use crate::range::{EtcdUpstream, MAX_RESPONSE_BYTES, REQUEST_TIMEOUT};
use watchcache::Cause;
use watchcache::{Cache, CacheWriter, Change, DecodeError, Decoder, RangeReader};
use watchcache_follow::{Break, FollowError, Source, SyncMode, Synced};

/// One resource on etcd.
pub(crate) struct EtcdSource {
    /// The resource's decoder: the source hands the cache decoded objects.
    pub decoder: Decoder,
    /// The cache, as its readers see it: its revision, unserved values.
    pub cache: Cache,
    /// Range reads of the resource, shared with the cache's consistent reads.
    pub upstream: Arc<EtcdUpstream>,
    pub client: Client,
    pub config: EtcdConfig,
    /// Consistent reads that wait ask for a progress request through this.
    pub progress: Arc<Notify>,
    /// Whether progress notifications are ordered after events (and so may move the cache).
    pub reliable: bool,
    /// The etcd cluster id seen on the watch, once known.
    pub cluster: Option<u64>,
}

/// An open etcd watch, and the revision it started after.
pub(crate) struct EtcdWatch {
    stream: WatchStream,
    from: u64,
    /// A first response that was not the creation's (etcd sends the creation first; kept, not
    /// lost, should one ever come before it).
    first: Option<WatchResponse>,
}

impl Source for EtcdSource {
    type Watch = EtcdWatch;
    const NAME: &'static str = "etcd";

    async fn sync(
        &mut self,
        writer: &mut CacheWriter,
        _mode: SyncMode,
        _shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Synced<EtcdWatch>, Break> {
        // The cluster id first: a cache is ready only once it knows its origin, so that every
        // answer it gives carries it (see `Cache::origin`).
        if self.cluster.is_none() {
            let mut kv = self.client.kv_client();
            let probe = kv.get(
                self.prefix().to_owned(),
                Some(GetOptions::new().with_count_only()),
            );
            match tokio::time::timeout(REQUEST_TIMEOUT, probe).await {
                Ok(Ok(r)) => {
                    if let Some(d) = self.replaced(r.header(), 0, 0) {
                        self.cluster = None;
                        return Err(Break::Replaced(d));
                    }
                }
                Ok(Err(e)) => return Err(Break::failed(FollowError::sync(e))),
                Err(_) => {
                    return Err(Break::failed(FollowError::Timeout {
                        what: "reading etcd's cluster id before the sync",
                        after: REQUEST_TIMEOUT,
                    }));
                }
            }
        }
        self.sync_pages(writer)
            .await
            .map(|rv| Synced { rv, watch: None })
            .map_err(Break::failed)
    }

    async fn open(
        &mut self,
        from: u64,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<EtcdWatch, Break> {
        let opts = EtcdWatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(from as i64 + 1);
        let mut watcher = self
            .client
            .watch_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES);
        let mut stream = match tokio::time::timeout(
            REQUEST_TIMEOUT,
            watcher.watch(self.prefix().to_owned(), Some(opts)),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Break::failed(FollowError::open(e))),
            Err(_) => {
                return Err(Break::failed(FollowError::Timeout {
                    what: "opening the watch",
                    after: REQUEST_TIMEOUT,
                }));
            }
        };
        // etcd confirms the watch (or refuses it: compacted) in its first response.
        let first = tokio::select! {
            _ = shutdown.changed() => return Err(Break::Shutdown),
            m = tokio::time::timeout(REQUEST_TIMEOUT, stream.message()) => match m {
                Ok(Ok(Some(r))) => r,
                Ok(Ok(None)) => return Err(Break::failed(FollowError::Closed { upstream: Self::NAME })),
                Ok(Err(e)) => return Err(Break::failed(FollowError::open(e))),
                Err(_) => return Err(Break::failed(FollowError::Timeout {
                    what: "etcd's confirmation of the watch",
                    after: REQUEST_TIMEOUT,
                })),
            },
        };
        if let Some(b) = self.check(&first, from, from).await {
            return Err(b);
        }
        let first = if first.created() {
            debug!(resource = %self.cache.definition().plural, from = from + 1, "etcd watch created");
            None
        } else {
            Some(first)
        };
        Ok(EtcdWatch {
            stream,
            from,
            first,
        })
    }

    async fn follow(
        &mut self,
        mut w: EtcdWatch,
        writer: &mut CacheWriter,
        applied: &mut u64,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Break {
        if let Some(first) = w.first.take() {
            self.apply(&first, writer, applied);
        }
        let mut last_message = tokio::time::Instant::now();
        loop {
            let probe_at = last_message + self.config.idle_probe;
            tokio::select! {
                _ = shutdown.changed() => return Break::Shutdown,
                _ = self.progress.notified() => {
                    if let Err(e) = w.stream.request_progress().await {
                        return Break::failed(FollowError::Progress { cause: Cause::new(e) });
                    }
                }
                _ = tokio::time::sleep_until(probe_at) => {
                    // A silent watch may be a dead connection or a cluster without a leader: ask.
                    let mut kv = self.client.kv_client();
                    let probe = kv.get(self.prefix().to_owned(), Some(GetOptions::new().with_count_only()));
                    match tokio::time::timeout(REQUEST_TIMEOUT, probe).await {
                        Ok(Ok(r)) => {
                            // The probe is linearizable: no confirmation needed.
                            if let Some(d) = self.replaced(r.header(), w.from, *applied) {
                                self.cluster = None;
                                return Break::Replaced(d);
                            }
                            last_message = tokio::time::Instant::now();
                        }
                        Ok(Err(e)) => return Break::failed(FollowError::Probe { cause: Cause::new(e) }),
                        Err(_) => return Break::failed(FollowError::Timeout {
                            what: "the probe of a silent watch",
                            after: REQUEST_TIMEOUT,
                        }),
                    }
                }
                msg = w.stream.message() => {
                    last_message = tokio::time::Instant::now();
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => return Break::failed(FollowError::Closed { upstream: Self::NAME }),
                        Err(e) => return Break::failed(FollowError::watch(e)),
                    };
                    if let Some(b) = self.check(&resp, w.from, *applied).await {
                        return b;
                    }
                    if !resp.created() {
                        self.apply(&resp, writer, applied);
                    }
                }
            }
        }
    }
}

impl EtcdSource {
    fn prefix(&self) -> &str {
        &self.cache.definition().prefix
    }

    /// Lists the prefix page by page at one revision into a resync of the cache.
    async fn sync_pages(&mut self, writer: &mut CacheWriter) -> Result<u64, FollowError> {
        let started = Instant::now();
        let plural = self.cache.definition().plural.clone();
        let mut reader = RangeReader::new(&*self.upstream, None, None, self.config.page_size);
        let Some(first) = reader.next_page().await else {
            return Err(FollowError::Unexpected("the range read returned no page"));
        };
        let first = first.map_err(FollowError::sync)?;
        let cached = self.cache.resource_version();
        if first.revision < cached {
            // A linearizable read below what we applied: etcd's history was replaced.
            let why = FollowError::RevisionBehind {
                rev: first.revision,
                applied: cached,
            };
            writer.reset(why.to_string());
        }
        let mut resync = writer.resync(first.revision);
        let mut page = Some(first);
        while let Some(p) = page {
            resync.add_page(p.kvs.iter().filter_map(|kv| {
                match self.upstream.plain(&kv.key, &kv.value) {
                    Ok(value) => self.cache.decode_or_skip(&kv.key, &value, kv.mod_revision),
                    Err(e) => {
                        self.cache.skip_unreadable(&e, kv.mod_revision);
                        None
                    }
                }
            }));
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            debug!(resource = %plural, objects = resync.listed(), rate = (resync.listed() as f64 / secs).round(), revision = p.revision, "syncing");
            page = match reader.next_page().await {
                Some(p) => Some(p.map_err(FollowError::sync)?),
                None => None,
            };
        }
        let Some(rev) = reader.revision() else {
            return Err(FollowError::Unexpected(
                "the range read returned no revision",
            ));
        };
        let out = resync.finish();
        debug!(resource = %plural, listed = out.listed, added = out.added, modified = out.modified, deleted = out.deleted, revision = rev, took = ?started.elapsed(), "synced");
        Ok(rev)
    }

    /// What a watch response says of the watch, if it ends it: canceled (compacted or not), or
    /// etcd's history replaced.
    async fn check(&mut self, resp: &WatchResponse, from: u64, applied: u64) -> Option<Break> {
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                return Some(Break::Expired(FollowError::Compacted {
                    from,
                    to: resp.compact_revision() as u64,
                }));
            }
            return Some(Break::failed(FollowError::Canceled {
                reason: resp.cancel_reason().to_owned(),
            }));
        }
        let d = self.replaced(resp.header(), from, applied)?;
        let why = self.confirm(d).await?;
        self.cluster = None;
        Some(Break::Replaced(why))
    }

    /// Whether a response header shows that etcd's history was replaced: a cluster id other than
    /// the one seen before ([`FollowError::ClusterChanged`]), or a revision below what was applied
    /// ([`FollowError::RevisionBehind`]: a watch from `from + 1` cannot be served by an etcd whose
    /// revision is below `from`).
    fn replaced(
        &mut self,
        header: Option<&etcd_client::ResponseHeader>,
        from: u64,
        applied: u64,
    ) -> Option<FollowError> {
        let h = header?;
        let id = h.cluster_id();
        match self.cluster {
            Some(known) if id != 0 && id != known => {
                return Some(FollowError::ClusterChanged { known, now: id });
            }
            None if id != 0 => {
                self.cluster = Some(id);
                self.cache.set_origin(id);
            }
            _ => {}
        }
        let rev = h.revision() as u64;
        let applied = applied.max(from);
        (rev > 0 && rev < applied).then_some(FollowError::RevisionBehind { rev, applied })
    }

    /// Confirms a revision below the applied one with a linearizable read, which waits until the
    /// member has applied everything committed: a lagging member may answer below what another
    /// member applied. A cluster id change needs no confirmation.
    async fn confirm(&self, d: FollowError) -> Option<FollowError> {
        let FollowError::RevisionBehind { applied, .. } = d else {
            return Some(d);
        };
        let mut kv = self.client.kv_client();
        let probe = kv.get(
            self.prefix().to_owned(),
            Some(GetOptions::new().with_count_only()),
        );
        let rev = match tokio::time::timeout(REQUEST_TIMEOUT, probe).await {
            Ok(Ok(r)) => r.header().map_or(0, |h| h.revision() as u64),
            _ => return None,
        };
        (rev < applied).then_some(FollowError::RevisionBehind { rev, applied })
    }

    /// Applies one watch response: its events grouped by revision, or a progress notification.
    fn apply(&self, resp: &WatchResponse, writer: &mut CacheWriter, applied: &mut u64) {
        let events = resp.events();
        if events.is_empty() {
            // Progress. Only trusted on etcd versions that order it after pending events.
            if self.reliable
                && let Some(h) = resp.header()
            {
                let rev = h.revision() as u64;
                writer.progress(rev);
                *applied = (*applied).max(rev);
            }
            return;
        }
        let rev_of = |e: &etcd_client::Event| e.kv().map_or(0, |kv| kv.mod_revision() as u64);
        // One etcd transaction is one revision: its events are applied as one batch.
        for batch in events.chunk_by(|a, b| rev_of(a) == rev_of(b)) {
            let Some(rev) = batch.first().map(rev_of) else {
                continue;
            };
            if rev <= *applied {
                debug!(rev, "skipping an already applied revision");
                continue;
            }
            let changes: Vec<Change> = batch.iter().filter_map(|e| self.change(e, rev)).collect();
            if let Err(e) = writer.apply(rev, changes) {
                warn!(error = %e, "out-of-order event from etcd; skipped");
                continue;
            }
            *applied = rev;
        }
    }

    fn change(&self, ev: &etcd_client::Event, rev: u64) -> Option<Change> {
        let kv = ev.kv()?;
        let Ok(key) = std::str::from_utf8(kv.key()) else {
            warn!(key = ?kv.key(), "skipping a key that is not UTF-8");
            return None;
        };
        match ev.event_type() {
            EtcdEventType::Delete => Some(self.cache.change_for_delete(key)),
            EtcdEventType::Put => match self
                .upstream
                .plain(key, kv.value())
                .and_then(|value| self.decoder.decode(key, &value, rev))
            {
                Ok(o) => Some(Change::Put(o)),
                // Unreadable or undecodable: the key leaves the cache (DELETED to watchers),
                // never a stale state kept.
                Err(e) => {
                    self.cache.skip_unreadable(&e, rev);
                    Some(Change::Delete(key.to_owned()))
                }
            },
        }
    }
}

impl EtcdUpstream {
    /// A stored value as the decoder reads it: encryption at rest undone. The source calls it
    /// on every value before it decodes it (the cache never calls back to read one); the
    /// consistency check's reads too (`truth.rs`).
    ///
    /// # Errors
    /// No configured key decrypts the value: the error names the key and the providers tried.
    pub(crate) fn plain<'v>(
        &self,
        key: &str,
        value: &'v [u8],
    ) -> std::result::Result<std::borrow::Cow<'v, [u8]>, DecodeError> {
        match &self.transformer {
            Some(t) => t.decrypt(key, value).map_err(|reason| DecodeError {
                key: key.to_owned(),
                reason,
                names: None,
            }),
            None => Ok(std::borrow::Cow::Borrowed(value)),
        }
    }
}
