//! An upstream kind of one's own, followed by watchcache's follower driver (`watchcache-follow`).
//!
//! The upstream here is a changelog kept by another part of the program: a map of keys to JSON
//! objects at a revision, the last few changes, and a channel that announces each change (as a
//! message bus, a database's change stream or a vendor API would). Implementing [`Source`] is
//! all it takes: how to read the full state (`sync`), how to open a watch after a revision
//! (`open`), how to apply the watch's changes (`follow`), and what each way of breaking means
//! ([`Break`]). The driver does the rest, as it does for etcd and kube-apiserver: the initial
//! sync, resuming after a break, relisting when the position left the upstream's window, backoff
//! with jitter, and readiness.
//!
//! `cargo run -p watchcache-follow --example follow_source` prints the events a kubelet-style
//! watcher of node-1 gets, across a break of every watch and a relist.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use watchcache::{
    Cache, CacheConfig, CacheWriter, Change, ResourceDef, ResourceVersion, Selection, WatchOptions,
};
use watchcache_follow::{
    Break, Follow, FollowError, Policy, Source, SyncMode, Synced, WatchListUse,
};

/// Changes the changelog keeps: a watch from before them must relist.
const WINDOW: usize = 4;

/// One change: its revision, its key, and the new value (`None`: deleted).
#[derive(Clone, Debug)]
struct Entry {
    rev: u64,
    key: String,
    value: Option<String>,
}

#[derive(Default)]
struct State {
    rev: u64,
    objects: BTreeMap<String, String>,
    log: VecDeque<Entry>,
}

/// The upstream: the program writes here; watchcache follows it.
#[derive(Clone)]
struct Changelog {
    state: Arc<Mutex<State>>,
    bus: broadcast::Sender<Entry>,
}

impl Changelog {
    fn new() -> Changelog {
        Changelog {
            state: Arc::default(),
            bus: broadcast::channel(64).0,
        }
    }

    fn write(&self, key: &str, value: Option<String>) {
        let mut s = self.state.lock();
        s.rev += 1;
        match &value {
            Some(v) => s.objects.insert(key.to_owned(), v.clone()),
            None => s.objects.remove(key),
        };
        let entry = Entry {
            rev: s.rev,
            key: key.to_owned(),
            value,
        };
        s.log.push_back(entry.clone());
        if s.log.len() > WINDOW {
            s.log.pop_front();
        }
        // No subscriber is no error: nobody follows yet.
        let _ = self.bus.send(entry);
    }

    /// Breaks every open watch, as a restart of the upstream would.
    fn restart_watches(&mut self) {
        self.bus = broadcast::channel(64).0;
    }
}

/// Why the changelog refused: the position left its window.
#[derive(Debug, thiserror::Error)]
#[error("revision {0} is no longer in the changelog")]
struct Gone(u64);

/// The changelog as a [`Source`].
struct ChangelogSource {
    upstream: Arc<Mutex<Changelog>>,
}

/// An open watch: the changes already past `from`, then the bus.
struct ChangelogWatch {
    backlog: Vec<Entry>,
    bus: broadcast::Receiver<Entry>,
}

impl Source for ChangelogSource {
    type Watch = ChangelogWatch;
    const NAME: &'static str = "changelog";

    async fn sync(
        &mut self,
        writer: &mut CacheWriter,
        _mode: SyncMode,
        _shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Synced<ChangelogWatch>, Break> {
        let upstream = self.upstream.lock().clone();
        let s = upstream.state.lock();
        let cache = writer.cache().clone();
        let mut resync = writer.resync(s.rev);
        // A value that does not decode is skipped (and counted by the cache), never fatal.
        resync.add_page(
            s.objects
                .iter()
                .filter_map(|(k, v)| cache.decode(k, v.as_bytes(), s.rev).ok()),
        );
        resync.finish();
        Ok(Synced {
            rv: s.rev,
            watch: None,
        })
    }

    async fn open(
        &mut self,
        from: u64,
        _shutdown: &mut watch::Receiver<bool>,
    ) -> Result<ChangelogWatch, Break> {
        let upstream = self.upstream.lock().clone();
        let s = upstream.state.lock();
        // Subscribed under the lock: no change falls between the backlog and the bus.
        let bus = upstream.bus.subscribe();
        let oldest = s.log.front().map_or(s.rev + 1, |e| e.rev);
        if from + 1 < oldest {
            return Err(Break::Expired(FollowError::open(Gone(from))));
        }
        let backlog = s.log.iter().filter(|e| e.rev > from).cloned().collect();
        Ok(ChangelogWatch { backlog, bus })
    }

    async fn follow(
        &mut self,
        mut w: ChangelogWatch,
        writer: &mut CacheWriter,
        applied: &mut u64,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Break {
        let mut backlog = std::mem::take(&mut w.backlog).into_iter();
        loop {
            let entry = match backlog.next() {
                Some(e) => e,
                None => tokio::select! {
                    _ = shutdown.changed() => return Break::Shutdown,
                    got = w.bus.recv() => match got {
                        Ok(e) => e,
                        // Resumes from `applied`: the driver reopens after a backoff.
                        Err(e) => return Break::failed(FollowError::watch(e)),
                    },
                },
            };
            // The backlog and the bus can hold the same change once: applied once.
            if entry.rev <= *applied {
                continue;
            }
            let change = match entry.value {
                Some(v) => match writer.cache().decode(&entry.key, v.as_bytes(), entry.rev) {
                    Ok(obj) => Change::Put(obj),
                    Err(e) => return Break::Relist(FollowError::decode(e)),
                },
                None => Change::Delete(entry.key),
            };
            if let Err(e) = writer.apply(entry.rev, [change]) {
                return Break::Relist(FollowError::decode(e));
            }
            *applied = entry.rev;
        }
    }
}

fn pod(name: &str, node: &str, phase: &str) -> Option<String> {
    Some(format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"nodeName":"{node}"}},"status":{{"phase":"{phase}"}}}}"#
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let upstream = Arc::new(Mutex::new(Changelog::new()));
    let write = |key: &str, value| {
        let u = upstream.lock().clone();
        u.write(&format!("/registry/pods/default/{key}"), value)
    };
    write("a", pod("a", "node-1", "Pending"));
    write("b", pod("b", "node-2", "Pending"));

    let (cache, writer) = Cache::new(
        ResourceDef::builtin("pods").ok_or("pods is built in")?,
        CacheConfig::default(),
    );
    let (stop, shutdown) = watch::channel(false);
    let follow = Follow {
        policy: Policy {
            upstream: ChangelogSource::NAME,
            grace: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            absent_retry: Duration::from_secs(5),
        },
        watch_list: WatchListUse::Off,
        shutdown,
        relists: None,
    };
    let source = ChangelogSource {
        upstream: upstream.clone(),
    };
    let follower = tokio::spawn(watchcache_follow::run(source, writer, follow));
    cache.wait_ready().await?;

    // A kubelet's watch: node-1's pods only, from the synced state.
    let node1 = Selection::all().with_fields("spec.nodeName=node-1")?;
    let at = ResourceVersion::At(cache.resource_version());
    let mut events = cache.watch(WatchOptions::new(node1, at)).await?;

    write("a", pod("a", "node-1", "Running"));
    write("c", pod("c", "node-1", "Pending"));
    // Every watch of the changelog breaks, and more changes than its window are made before
    // the follower reopens: it relists. The cache resyncs by difference, so the watcher gets
    // each object's net change since its last event: no gap, no duplicate, no 410.
    upstream.lock().restart_watches();
    for phase in ["Running", "Succeeded", "Failed", "Unknown", "Running"] {
        write("c", pod("c", "node-1", phase));
    }
    write("b", None);
    write("a", None);

    let mut seen = 0;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), events.next()).await? {
        let ev = ev?;
        let Some(obj) = ev.object() else { continue };
        let phase = obj.parse::<serde_json::Value>()?["status"]["phase"].clone();
        println!(
            "{:?} {} {phase} at {}",
            ev.kind(),
            obj.name(),
            ev.resource_version()
        );
        seen += 1;
        if obj.name() == "a" && ev.kind() == watchcache::EventType::Deleted {
            break;
        }
    }
    println!(
        "{seen} events for node-1; the cache is at revision {}",
        cache.resource_version()
    );
    stop.send_replace(true);
    follower.await?;
    Ok(())
}
