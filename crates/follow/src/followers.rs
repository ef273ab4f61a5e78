//! `Followers`: the caches of one upstream, one per resource, each fed by its own follower task
//! (the driver of `follow/`), and their common shutdown. What the etcd and API server upstreams
//! share of "connect": the duplicate check, the task per cache, the lookups, the shutdown.
//!
//! The tasks run on the followers' own runtime ([`UpstreamRuntime`]), never on the caller's: a
//! server busy with its clients must not make a follower late for its upstream's time limits.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::check::{self, Relists, Truth};
use crate::runtime::UpstreamRuntime;
use crate::{Follow, Policy, RelistRequests, Source, WatchListUse};
use watchcache::ResourceDef;
use watchcache::{Cache, CacheConfig, CacheWriter};

/// Caches followed on one upstream.
pub struct Followers {
    caches: BTreeMap<String, Cache>,
    tasks: Vec<JoinHandle<()>>,
    shutdown: watch::Sender<bool>,
    /// Resources started and stopped while running (custom resources, as their CRDs come and
    /// go): shared with the upstream's [`DynamicResources`] handle.
    dynamic: Arc<Dynamic>,
    /// Dropped last (after the tasks are awaited, or with them when never shut down).
    runtime: UpstreamRuntime,
}

/// The followers started after connect, each with its own stop.
///
/// Lock order: `running` is a leaf; no await and no cache lock is taken under it (a cache's
/// `close` is called after the entry is taken out).
pub struct Dynamic {
    running: Mutex<DynamicState>,
    handle: tokio::runtime::Handle,
}

#[derive(Default)]
struct DynamicState {
    /// Names of the resources followed since connect: never started again here.
    fixed: BTreeSet<String>,
    running: BTreeMap<String, Running>,
    /// Shut down: nothing starts any more.
    stopped: bool,
}

struct Running {
    cache: Cache,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts the follower of `source` into `writer`'s cache, and its consistency check against
/// `truth` (unless its period is zero), on `spawn`; both stop when `shutdown` turns true.
fn start_tasks<S: Source + 'static, T: Truth>(
    spawn: &dyn Fn(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> JoinHandle<()>,
    source: S,
    writer: CacheWriter,
    policy: Policy,
    watch_list: WatchListUse,
    truth: T,
    shutdown: &watch::Sender<bool>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::with_capacity(2);
    let cache = writer.cache();
    let period = cache
        .definition()
        .consistency_check_period
        .unwrap_or(cache.config().consistency_check_period);
    let relists = (!period.is_zero()).then(|| {
        let (ask, asked) = watch::channel(0);
        let (done_tx, done) = watch::channel(0);
        tasks.push(spawn(Box::pin(check::run(
            writer.cache().clone(),
            truth,
            period,
            Relists { ask, done },
            shutdown.subscribe(),
        ))));
        RelistRequests {
            asked,
            done: done_tx,
        }
    });
    let follow = Follow {
        policy,
        watch_list,
        shutdown: shutdown.subscribe(),
        relists,
    };
    tasks.push(spawn(Box::pin(crate::run(source, writer, follow))));
    tasks
}

impl Followers {
    /// No caches yet, on a runtime of their own (`runtime.rs`).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Followers {
        let runtime = UpstreamRuntime::start();
        Followers {
            caches: BTreeMap::new(),
            tasks: Vec::new(),
            shutdown: watch::Sender::new(false),
            dynamic: Arc::new(Dynamic {
                running: Mutex::new(DynamicState::default()),
                handle: runtime.handle().clone(),
            }),
            runtime,
        }
    }

    /// A new cache for `def`, registered under its resource name.
    ///
    /// # Errors
    /// The resource name, when a cache of that name exists already.
    pub fn add(
        &mut self,
        def: ResourceDef,
        config: &CacheConfig,
    ) -> Result<(Cache, CacheWriter), String> {
        let name = def.resource_name();
        if self.caches.contains_key(&name) {
            return Err(name);
        }
        let (cache, writer) = Cache::new(def, config.clone());
        self.caches.insert(name.clone(), cache.clone());
        self.dynamic.running.lock().fixed.insert(name);
        Ok((cache, writer))
    }

    /// Starts following `source` into the cache of `writer`, on its own task, and checking the
    /// cache against `truth` on another every `consistency_check_period` of its config (unless
    /// zero); the checker asks the follower to relist, it never writes.
    pub fn spawn<S: Source + 'static, T: Truth>(
        &mut self,
        source: S,
        writer: CacheWriter,
        policy: Policy,
        watch_list: WatchListUse,
        truth: T,
    ) {
        let runtime = &self.runtime;
        let tasks = start_tasks(
            &|f| runtime.spawn(f),
            source,
            writer,
            policy,
            watch_list,
            truth,
            &self.shutdown,
        );
        self.tasks.extend(tasks);
    }

    /// The resources started and stopped while running.
    pub fn dynamic(&self) -> &Arc<Dynamic> {
        &self.dynamic
    }

    /// The followers' runtime, where an upstream's client is made so that its tasks run there.
    pub fn runtime(&self) -> &UpstreamRuntime {
        &self.runtime
    }

    /// The cache of a resource, by its definition's name.
    pub fn cache(&self, name: &str) -> Option<&Cache> {
        self.caches.get(name)
    }

    /// Every cache, by name.
    pub fn caches(&self) -> impl Iterator<Item = (&str, &Cache)> {
        self.caches.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// How many caches.
    pub fn len(&self) -> usize {
        self.caches.len()
    }

    /// Whether there is no cache.
    pub fn is_empty(&self) -> bool {
        self.caches.is_empty()
    }

    /// The followed resources' names (the API server upstream's discovery reads them).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.caches.keys().map(String::as_str)
    }

    /// Stops every follower, those started while running too, and waits for them.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        let running = {
            let mut d = self.dynamic.running.lock();
            d.stopped = true;
            std::mem::take(&mut d.running)
        };
        let mut tasks = self.tasks;
        for (_, r) in running {
            r.stop.send_replace(true);
            tasks.extend(r.tasks);
        }
        for t in tasks {
            if let Err(e) = t.await {
                warn!(error = %e, "follower task failed");
            }
        }
    }
}

impl Dynamic {
    /// A new cache for `def`, followed from `parts` (called with the new cache, it gives the
    /// source and the truth of the upstream's choice) until [`stop`](Dynamic::stop).
    ///
    /// # Errors
    /// Why not: a resource of that name is followed already, or the upstream is shut down.
    pub fn start<S: Source + 'static, T: Truth>(
        &self,
        def: ResourceDef,
        config: &CacheConfig,
        policy: Policy,
        watch_list: WatchListUse,
        parts: impl FnOnce(&Cache) -> (S, T),
    ) -> Result<Cache, String> {
        let name = def.resource_name();
        let mut d = self.running.lock();
        if d.stopped {
            return Err("the upstream is shut down".into());
        }
        if d.fixed.contains(&name) || d.running.contains_key(&name) {
            return Err(format!("{name} is followed already"));
        }
        let (cache, writer) = Cache::new(def, config.clone());
        let (source, truth) = parts(&cache);
        let stop = watch::Sender::new(false);
        let handle = &self.handle;
        let tasks = start_tasks(
            &|f| handle.spawn(f),
            source,
            writer,
            policy,
            watch_list,
            truth,
            &stop,
        );
        d.running.insert(
            name,
            Running {
                cache: cache.clone(),
                stop,
                tasks,
            },
        );
        Ok(cache)
    }

    /// Stops following `name` (started by [`start`](Dynamic::start)) and ends its watches (see
    /// [`Cache::close`]); its cache, when it was followed.
    pub fn stop(&self, name: &str) -> Option<Cache> {
        let r = self.running.lock().running.remove(name)?;
        r.stop.send_replace(true);
        r.cache.close();
        // The tasks end on their own at the stop; nothing waits for them here.
        drop(r.tasks);
        Some(r.cache)
    }

    /// Whether `name` was followed since connect (from the definitions given then).
    pub fn is_fixed(&self, name: &str) -> bool {
        self.running.lock().fixed.contains(name)
    }
}
