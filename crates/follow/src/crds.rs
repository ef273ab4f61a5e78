//! Custom resources cached live: every CustomResourceDefinition that is `Established` gets a cache
//! and a follower of its own, started when the CRD appears, redefined when it changes, stopped
//! when it goes, with no definition file and no restart.
//!
//! [`sync_crds`] watches the cache of `customresourcedefinitions.apiextensions.k8s.io` and reads
//! each CRD with [`CrdServing::of`]. What it decides reaches the server through a callback
//! ([`ResourceChange`]), so that this layer does not depend on the server's:
//! - a cached CRD's resource is started on the upstream ([`DynamicResources::start`]) and
//!   announced ([`ResourceChange::Serve`]) once its cache is ready; until then its requests go
//!   where requests for unserved resources go (kube-apiserver, with a proxy set);
//! - a CRD whose definition changes (a new storage version, selectable fields, columns, scope)
//!   is withdrawn ([`ResourceChange::Unserve`]), its cache closed (every watch ends, as
//!   kube-apiserver ends them when it tears a CRD's storage down), and started again;
//! - a deleted CRD, or one that can no longer be cached (webhook conversion), is withdrawn and
//!   stopped;
//! - a CRD whose status alone changes keeps its cache.
//!
//! A resource followed from the start (a definition file, or a built-in) is never started here:
//! the file's definition wins.
//!
//! ## Invariants and lock order
//! - For one CRD, announcements alternate Serve, Unserve, Serve…, each Unserve naming the cache
//!   the Serve before it named: the entry's generation is checked under the entries' lock before
//!   a late readiness announces anything.
//! - The entries' mutex is taken before the callback runs (the server's set of resources is
//!   changed under it), never the other way round; nothing awaits under it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use watchcache::{Cache, WatchOptions};
use watchcache::{CrdServing, EventType, ResourceDef, ResourceVersion, Selection};

/// Resources an upstream follows on demand after it connected, each with its own follower.
pub trait DynamicResources: Send + Sync {
    /// Starts following `def`: a new cache, fed by a new follower.
    ///
    /// # Errors
    /// Why not: a resource of that name is followed already, or the upstream is shut down.
    fn start(&self, def: ResourceDef) -> Result<Cache, String>;

    /// Stops following a resource started by [`start`](DynamicResources::start) (by its
    /// [`resource_name`](ResourceDef::resource_name)) and ends its watches (see
    /// [`Cache::close`]); its cache, when it was followed.
    fn stop(&self, name: &str) -> Option<Cache>;

    /// Whether the resource was followed from the start (a definition given at connect), and
    /// so is never started or stopped on demand.
    fn is_fixed(&self, name: &str) -> bool;
}

/// A change of the set of resources served from caches.
#[derive(Debug, Clone)]
pub enum ResourceChange {
    /// Serve this cache, which is ready, at its definition's group, version and plural.
    Serve(Cache),
    /// Serve this cache no more (it is about to be closed).
    Unserve(Cache),
}

/// The running CRD sync; dropping it stops it (the caches it started stay until the upstream
/// shuts down).
#[derive(Debug)]
pub struct CrdSync {
    task: JoinHandle<()>,
}

impl Drop for CrdSync {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts caching the custom resources of every CRD in `crds` (the cache of
/// `customresourcedefinitions.apiextensions.k8s.io`), on `resources`, telling `on_change` what
/// to serve. Runs on the caller's runtime until the returned handle is dropped.
pub fn sync_crds(
    crds: Cache,
    resources: Arc<dyn DynamicResources>,
    on_change: impl Fn(ResourceChange) + Send + Sync + 'static,
) -> CrdSync {
    let sync = Arc::new(Syncer {
        entries: Mutex::new(HashMap::new()),
        resources,
        on_change: Box::new(on_change),
    });
    CrdSync {
        task: tokio::spawn(run(crds, sync)),
    }
}

struct Entry {
    def: ResourceDef,
    cache: Cache,
    /// Announced with [`ResourceChange::Serve`].
    serving: bool,
    generation: u64,
}

struct Syncer {
    /// By CRD name (`plural.group`, the resource's name).
    entries: Mutex<HashMap<String, Entry>>,
    resources: Arc<dyn DynamicResources>,
    on_change: Box<dyn Fn(ResourceChange) + Send + Sync>,
}

/// How long a failed watch of the CRDs waits before the next.
const RETRY: Duration = Duration::from_secs(1);

async fn run(crds: Cache, sync: Arc<Syncer>) {
    let mut generation = 0;
    loop {
        if crds.wait_ready().await.is_err() {
            // The CRD cache's writer is gone: nothing will change any more.
            debug!("the CRD cache stopped: custom resources are no longer synced");
            return;
        }
        let opts =
            WatchOptions::new(Selection::default(), ResourceVersion::Any).send_initial_events(true);
        let mut stream = match crds.watch(opts).await {
            Ok(s) => s,
            Err(e) => {
                debug!(error = %e, "watching CRDs");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        // The CRDs seen before the initial events end: any other entry was deleted meanwhile.
        let mut seen = Some(HashSet::new());
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    debug!(error = %e, "the CRD watch ended: watching again");
                    break;
                }
            };
            if ev.is_initial_events_end() {
                if let Some(seen) = seen.take() {
                    let gone: Vec<String> = sync
                        .entries
                        .lock()
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for name in gone {
                        sync.apply(&name, None, &mut generation);
                    }
                }
                continue;
            }
            let Some(obj) = ev.object() else { continue };
            let name = obj.name().to_owned();
            match ev.kind() {
                EventType::Bookmark => continue,
                EventType::Deleted => sync.apply(&name, None, &mut generation),
                EventType::Added | EventType::Modified => {
                    let crd: serde_json::Value = match serde_json::from_slice(obj.json()) {
                        Ok(v) => v,
                        Err(e) => {
                            warn!(crd = %name, error = %e, "a CRD that is not JSON: its resource is not cached");
                            serde_json::Value::Null
                        }
                    };
                    sync.apply(&name, Some(&crd), &mut generation);
                }
            }
            if let Some(seen) = &mut seen {
                seen.insert(name);
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

impl Syncer {
    /// Brings the CRD `name` to what `crd` (`None`: deleted) asks for.
    fn apply(self: &Arc<Self>, name: &str, crd: Option<&serde_json::Value>, generation: &mut u64) {
        let want = match crd.map(CrdServing::of) {
            Some(CrdServing::Cached(def)) if self.resources.is_fixed(&def.resource_name()) => {
                debug!(crd = %name, "defined by a file: the file's definition is used");
                None
            }
            Some(CrdServing::Cached(def)) => Some(*def),
            Some(CrdServing::Forwarded(why)) => {
                debug!(crd = %name, %why, "not cached: its requests go to kube-apiserver");
                None
            }
            None => None,
        };
        let mut entries = self.entries.lock();
        if entries.get(name).map(|e| &e.def) == want.as_ref() {
            return;
        }
        if let Some(old) = entries.remove(name) {
            if old.serving {
                (self.on_change)(ResourceChange::Unserve(old.cache.clone()));
            }
            self.resources.stop(&old.def.resource_name());
            info!(resource = %name, version = %old.def.version, "custom resource no longer cached: its CRD changed or went");
        }
        let Some(def) = want else { return };
        let version = def.version.clone();
        match self.resources.start(def.clone()) {
            Ok(cache) => {
                *generation += 1;
                let g = *generation;
                entries.insert(
                    name.to_owned(),
                    Entry {
                        def,
                        cache: cache.clone(),
                        serving: false,
                        generation: g,
                    },
                );
                debug!(resource = %name, %version, "caching custom resource");
                let sync = Arc::clone(self);
                let name = name.to_owned();
                tokio::spawn(async move {
                    if cache.wait_ready().await.is_err() {
                        return;
                    }
                    let mut entries = sync.entries.lock();
                    if let Some(e) = entries.get_mut(&name)
                        && e.generation == g
                        && !e.serving
                    {
                        e.serving = true;
                        let def = cache.definition();
                        let version = def.version.clone();
                        let also: Vec<&str> = def
                            .other_versions
                            .iter()
                            .map(|d| d.version.as_str())
                            .collect();
                        let also = also.join(",");
                        (sync.on_change)(ResourceChange::Serve(cache.clone()));
                        info!(resource = %name, %version, %also, "custom resource served from its cache");
                    }
                });
            }
            Err(why) => warn!(resource = %name, %why, "custom resource not cached"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use watchcache::CacheWriter;
    use watchcache::{CacheConfig, MemorySource};

    /// Resources started in process: each cache made ready at once by an empty resync, as a
    /// follower's first sync of an empty prefix would.
    #[derive(Default)]
    struct InProcess {
        running: Mutex<HashMap<String, (Cache, CacheWriter)>>,
        fixed: Vec<String>,
    }

    impl DynamicResources for InProcess {
        fn start(&self, def: ResourceDef) -> Result<Cache, String> {
            let name = def.resource_name();
            let (cache, mut writer) = Cache::new(def, CacheConfig::default());
            writer.resync(1).finish();
            self.running.lock().insert(name, (cache.clone(), writer));
            Ok(cache)
        }

        fn stop(&self, name: &str) -> Option<Cache> {
            let (cache, _writer) = self.running.lock().remove(name)?;
            cache.close();
            Some(cache)
        }

        fn is_fixed(&self, name: &str) -> bool {
            self.fixed.iter().any(|f| f == name)
        }
    }

    fn crd(plural: &str, selectable: &[&str], generation: u64) -> String {
        let fields: Vec<_> = selectable
            .iter()
            .map(|f| json!({"jsonPath": format!(".spec.{f}")}))
            .collect();
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.com"), "generation": generation,
                         "uid": "u1"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": plural, "kind": "Thing"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "selectableFields": fields}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}],
                       "storedVersions": ["v1"], "observedGeneration": generation}
        })
        .to_string()
    }

    fn key(plural: &str) -> String {
        format!("/registry/apiextensions.k8s.io/customresourcedefinitions/{plural}.example.com")
    }

    type Log = Arc<Mutex<Vec<(String, Cache)>>>;

    async fn settle(log: &Log, n: usize) -> Vec<String> {
        for _ in 0..200 {
            if log.lock().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        log.lock().iter().map(|(s, _)| s.clone()).collect()
    }

    #[tokio::test]
    async fn crds_are_served_redefined_and_dropped_as_they_change() {
        let (crds, writer) = Cache::new(
            ResourceDef::builtin("customresourcedefinitions.apiextensions.k8s.io").unwrap(),
            CacheConfig::default(),
        );
        let src = MemorySource::new(writer, 1, []);
        src.put(&key("things"), crd("things", &["color"], 1))
            .unwrap();
        src.put(&key("files"), crd("files", &[], 1)).unwrap();
        let resources = Arc::new(InProcess {
            fixed: vec!["files.example.com".into()],
            ..InProcess::default()
        });
        let log: Log = Arc::default();
        let _sync = sync_crds(crds, resources.clone(), {
            let log = Arc::clone(&log);
            move |change| {
                let (what, cache) = match change {
                    ResourceChange::Serve(c) => ("serve", c),
                    ResourceChange::Unserve(c) => ("unserve", c),
                };
                let d = cache.definition();
                let triggers: Vec<String> = d.indexes.iter().map(|i| i.key.to_string()).collect();
                log.lock().push((
                    format!("{what} {} {}", d.resource_name(), triggers.join(",")),
                    cache,
                ));
            }
        });
        // Served once ready; the file-defined resource is left to its file.
        assert_eq!(
            settle(&log, 1).await,
            ["serve things.example.com spec.color"]
        );
        let first = log.lock()[0].1.clone();
        let mut watch = first
            .watch(WatchOptions::new(
                Selection::default(),
                ResourceVersion::At(1),
            ))
            .await
            .unwrap();

        // A status change keeps the cache.
        let mut status_only: serde_json::Value =
            serde_json::from_str(&crd("things", &["color"], 1)).unwrap();
        status_only["status"]["acceptedNames"] = json!({"plural": "things", "kind": "Thing"});
        src.put(&key("things"), status_only.to_string()).unwrap();
        assert_eq!(settle(&log, 2).await.len(), 1);

        // A new selectable field: withdrawn, its watches ended, served again redefined.
        src.put(&key("things"), crd("things", &["color", "size"], 2))
            .unwrap();
        assert_eq!(
            settle(&log, 3).await[1..],
            [
                "unserve things.example.com spec.color",
                "serve things.example.com spec.color,spec.size"
            ]
        );
        assert!(log.lock()[1].1.same(&first));
        assert!(!log.lock()[2].1.same(&first));
        assert!(watch.next().await.is_none(), "the old cache's watch ends");

        // Deleted: withdrawn and stopped.
        src.delete(&key("things"));
        assert_eq!(
            settle(&log, 4).await[3..],
            ["unserve things.example.com spec.color,spec.size"]
        );
        assert!(resources.running.lock().is_empty());
    }
}
