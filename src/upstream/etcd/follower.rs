//! One resource's follower: the single etcd watch behind a cache.
//!
//! It lists the prefix in pages at one revision, then watches from the next revision with
//! `prev_kv` and progress notifications. A break it can resume (connection lost, etcd restarted,
//! leader lost) is resumed from the last applied revision with no relist; a compaction that
//! cancels the watch triggers a resync, whose difference reaches watchers as ordinary events.
//!
//! etcd's history being replaced (wiped, or restored from a backup, on the same URL) shows as its
//! revision going backwards or its cluster id changing: resuming from our revision would follow a
//! different history. Then every watcher gets 410 Expired ([`Cache::reset`]) and the follower
//! relists.
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
    Client, EventType as EtcdEventType, GetOptions, WatchOptions as EtcdWatchOptions, WatchResponse,
};
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};

use crate::cache::{Cache, Change, RangeReader};
use crate::upstream::etcd::EtcdConfig;
use crate::upstream::etcd::backoff::Backoff;
use crate::upstream::etcd::range::{EtcdUpstream, MAX_RESPONSE_BYTES, REQUEST_TIMEOUT};
use crate::upstream::outage::Outage;

/// Why a watch ended.
enum Broken {
    /// etcd compacted past our position: relist.
    Compacted(u64),
    /// etcd's history was replaced: expire every watcher and relist.
    Replaced(String),
    /// A resumable failure.
    Failed(String),
    Shutdown,
}

/// How etcd's history shows it was replaced.
#[derive(Debug, Clone, Copy, thiserror::Error)]
enum Divergence {
    #[error("etcd's cluster id changed from {known:x} to {now:x}")]
    Cluster { known: u64, now: u64 },
    #[error("etcd's revision {rev} is below the applied revision {applied}")]
    Revision { rev: u64, applied: u64 },
}

pub(crate) struct Follower {
    pub cache: Cache,
    /// Range reads of the resource, shared with the cache's consistent reads.
    pub upstream: Arc<EtcdUpstream>,
    pub client: Client,
    pub config: EtcdConfig,
    pub progress: Arc<Notify>,
    pub reliable: bool,
    pub shutdown: watch::Receiver<bool>,
    /// The etcd cluster id seen on the watch, once known.
    pub cluster: Option<u64>,
}

impl Follower {
    fn prefix(&self) -> &str {
        &self.cache.definition().prefix
    }

    pub async fn run(mut self) {
        let mut outage = Outage::new(
            self.cache.clone(),
            "etcd",
            self.config.unavailable_grace,
            Backoff::new(self.config.backoff_initial, self.config.backoff_max),
        );
        let mut applied: Option<u64> = None;
        loop {
            if *self.shutdown.borrow() {
                return;
            }
            let rev = match applied {
                Some(r) => r,
                None => match self.sync().await {
                    Ok(r) => r,
                    Err(e) => {
                        outage.failed(&e);
                        if outage.pause(&mut self.shutdown).await {
                            return;
                        }
                        continue;
                    }
                },
            };
            applied = Some(rev);
            match self.follow(&mut applied, &mut outage).await {
                Broken::Shutdown => return,
                Broken::Compacted(at) => {
                    warn!(resource = %self.cache.definition().plural, compacted = at, from = rev, "watch position compacted; resyncing");
                    applied = None;
                }
                Broken::Replaced(why) => {
                    self.cache.reset(why);
                    self.cluster = None;
                    applied = None;
                }
                Broken::Failed(e) => {
                    outage.failed(&e);
                    if outage.pause(&mut self.shutdown).await {
                        return;
                    }
                }
            }
        }
    }

    /// Lists the prefix page by page at one revision into a resync of the cache.
    async fn sync(&mut self) -> Result<u64, String> {
        let started = Instant::now();
        let plural = self.cache.definition().plural.clone();
        let mut reader = RangeReader::new(&*self.upstream, None, None, self.config.page_size);
        let mut resync = None;
        while let Some(page) = reader.next_page().await {
            let page = page.map_err(|e| e.to_string())?;
            let cached = self.cache.resource_version();
            if resync.is_none() && page.revision < cached {
                // A linearizable read below what we applied: etcd's history was replaced.
                self.cache.reset(format!(
                    "etcd's revision {} is below the cache's revision {cached}",
                    page.revision
                ));
            }
            let resync = resync.get_or_insert_with(|| self.cache.resync(page.revision));
            resync.add_page(page.kvs.iter().filter_map(|kv| {
                self.cache
                    .decode_or_skip(&kv.key, &kv.value, kv.mod_revision)
            }));
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            info!(resource = %plural, objects = resync.listed(), rate = (resync.listed() as f64 / secs).round(), revision = page.revision, "syncing");
        }
        let (Some(resync), Some(rev)) = (resync, reader.revision()) else {
            return Err("the range read returned no page".into());
        };
        let out = resync.finish();
        info!(resource = %plural, listed = out.listed, added = out.added, modified = out.modified, deleted = out.deleted, revision = rev, took = ?started.elapsed(), "synced");
        Ok(rev)
    }

    /// Runs the watch from `applied + 1` until it breaks.
    async fn follow(&mut self, applied: &mut Option<u64>, outage: &mut Outage) -> Broken {
        let Some(from) = *applied else {
            return Broken::Failed("not synced".into());
        };
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
            Ok(Err(e)) => return Broken::Failed(format!("watch: {e}")),
            Err(_) => return Broken::Failed("watch: timed out".into()),
        };
        let mut last_message = tokio::time::Instant::now();
        loop {
            let probe_at = last_message + self.config.idle_probe;
            tokio::select! {
                _ = self.shutdown.changed() => return Broken::Shutdown,
                _ = self.progress.notified() => {
                    if let Err(e) = stream.request_progress().await {
                        return Broken::Failed(format!("progress request: {e}"));
                    }
                }
                _ = tokio::time::sleep_until(probe_at) => {
                    // A silent watch may be a dead connection or a cluster without a leader: ask.
                    let mut kv = self.client.kv_client();
                    let probe = kv.get(self.prefix().to_owned(), Some(GetOptions::new().with_count_only()));
                    match tokio::time::timeout(REQUEST_TIMEOUT, probe).await {
                        Ok(Ok(r)) => {
                            // The probe is linearizable: no confirmation needed.
                            if let Some(d) = self.replaced(r.header(), from, *applied) {
                                return Broken::Replaced(d.to_string());
                            }
                            last_message = tokio::time::Instant::now();
                        }
                        Ok(Err(e)) => return Broken::Failed(format!("probe: {e}")),
                        Err(_) => return Broken::Failed("probe: timed out".into()),
                    }
                }
                msg = stream.message() => {
                    last_message = tokio::time::Instant::now();
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => return Broken::Failed("watch stream closed by etcd".into()),
                        Err(e) => return Broken::Failed(format!("watch: {e}")),
                    };
                    if resp.canceled() {
                        if resp.compact_revision() > 0 {
                            return Broken::Compacted(resp.compact_revision() as u64);
                        }
                        return Broken::Failed(format!("watch canceled: {}", resp.cancel_reason()));
                    }
                    if let Some(d) = self.replaced(resp.header(), from, *applied)
                        && let Some(why) = self.confirm(d).await
                    {
                        return Broken::Replaced(why);
                    }
                    if resp.created() {
                        debug!(resource = %self.cache.definition().plural, from = from + 1, "etcd watch created");
                        outage.recovered();
                        continue;
                    }
                    self.apply(&resp, applied);
                }
            }
        }
    }

    /// Whether a response header shows that etcd's history was replaced: a cluster id other than
    /// the one seen before, or a revision below what was applied (a watch from `from + 1` cannot be
    /// served by an etcd whose revision is below `from`).
    fn replaced(
        &mut self,
        header: Option<&etcd_client::ResponseHeader>,
        from: u64,
        applied: Option<u64>,
    ) -> Option<Divergence> {
        let h = header?;
        let id = h.cluster_id();
        match self.cluster {
            Some(known) if id != 0 && id != known => {
                return Some(Divergence::Cluster { known, now: id });
            }
            None if id != 0 => self.cluster = Some(id),
            _ => {}
        }
        let rev = h.revision() as u64;
        let applied = applied.unwrap_or(from).max(from);
        (rev > 0 && rev < applied).then_some(Divergence::Revision { rev, applied })
    }

    /// Confirms a revision below the applied one with a linearizable read, which waits until the
    /// member has applied everything committed: a lagging member may answer below what another
    /// member applied. A cluster id change needs no confirmation.
    async fn confirm(&self, d: Divergence) -> Option<String> {
        let Divergence::Revision { applied, .. } = d else {
            return Some(d.to_string());
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
        (rev < applied).then(|| Divergence::Revision { rev, applied }.to_string())
    }

    /// Applies one watch response: its events grouped by revision, or a progress notification.
    fn apply(&self, resp: &WatchResponse, applied: &mut Option<u64>) {
        let events = resp.events();
        if events.is_empty() {
            // Progress. Only trusted on etcd versions that order it after pending events.
            if self.reliable
                && let Some(h) = resp.header()
            {
                let rev = h.revision() as u64;
                self.cache.progress(rev);
                *applied = Some(applied.map_or(rev, |a| a.max(rev)));
            }
            return;
        }
        let rev_of = |e: &etcd_client::Event| e.kv().map_or(0, |kv| kv.mod_revision() as u64);
        // One etcd transaction is one revision: its events are applied as one batch.
        for batch in events.chunk_by(|a, b| rev_of(a) == rev_of(b)) {
            let Some(rev) = batch.first().map(rev_of) else {
                continue;
            };
            if applied.is_some_and(|a| rev <= a) {
                debug!(rev, "skipping an already applied revision");
                continue;
            }
            let changes: Vec<Change> = batch.iter().filter_map(|e| self.change(e, rev)).collect();
            if let Err(e) = self.cache.apply(rev, changes) {
                warn!(error = %e, "out-of-order event from etcd; skipped");
                continue;
            }
            *applied = Some(rev);
        }
    }

    fn change(&self, ev: &etcd_client::Event, rev: u64) -> Option<Change> {
        let kv = ev.kv()?;
        let Ok(key) = std::str::from_utf8(kv.key()) else {
            warn!(key = ?kv.key(), "skipping a key that is not UTF-8");
            return None;
        };
        match ev.event_type() {
            EtcdEventType::Delete => Some(Change::Delete(key.to_owned())),
            EtcdEventType::Put => Some(self.cache.change_for_put(key, kv.value(), rev)),
        }
    }
}
