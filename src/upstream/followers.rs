//! `Followers`: the caches of one upstream, one per resource, each fed by its own follower task
//! (the driver of `follow/`), and their common shutdown. What the etcd and API server upstreams
//! share of "connect": the duplicate check, the task per cache, the lookups, the shutdown.
//!
//! The tasks run on the followers' own runtime ([`UpstreamRuntime`]), never on the caller's: a
//! server busy with its clients must not make a follower late for its upstream's time limits.

use std::collections::BTreeMap;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::cache::{Cache, CacheConfig, CacheWriter};
use crate::model::ResourceDef;
use crate::upstream::follow::check::{self, Relists, Truth};
use crate::upstream::follow::{self, Follow, Policy, RelistRequests, Source, WatchListUse};
use crate::upstream::runtime::UpstreamRuntime;

/// Caches followed on one upstream.
pub(crate) struct Followers {
    caches: BTreeMap<String, Cache>,
    tasks: Vec<JoinHandle<()>>,
    shutdown: watch::Sender<bool>,
    /// Dropped last (after the tasks are awaited, or with them when never shut down).
    runtime: UpstreamRuntime,
}

impl Followers {
    pub fn new() -> Followers {
        Followers {
            caches: BTreeMap::new(),
            tasks: Vec::new(),
            shutdown: watch::Sender::new(false),
            runtime: UpstreamRuntime::start(),
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
        self.caches.insert(name, cache.clone());
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
        let cache = writer.cache();
        let period = cache
            .definition()
            .consistency_check_period
            .unwrap_or(cache.config().consistency_check_period);
        let relists = (!period.is_zero()).then(|| {
            let (ask, asked) = watch::channel(0);
            let (done_tx, done) = watch::channel(0);
            self.tasks.push(self.runtime.spawn(check::run(
                writer.cache().clone(),
                truth,
                period,
                Relists { ask, done },
                self.shutdown.subscribe(),
            )));
            RelistRequests {
                asked,
                done: done_tx,
            }
        });
        let follow = Follow {
            policy,
            watch_list,
            shutdown: self.shutdown.subscribe(),
            relists,
        };
        self.tasks
            .push(self.runtime.spawn(follow::run(source, writer, follow)));
    }

    /// The followers' runtime, where an upstream's client is made so that its tasks run there.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub fn runtime(&self) -> &UpstreamRuntime {
        &self.runtime
    }

    pub fn cache(&self, name: &str) -> Option<&Cache> {
        self.caches.get(name)
    }

    pub fn caches(&self) -> impl Iterator<Item = (&str, &Cache)> {
        self.caches.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.caches.len()
    }

    /// The followed resources' names (the API server upstream's discovery reads them).
    #[cfg_attr(not(feature = "apiserver"), allow(dead_code))]
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.caches.keys().map(String::as_str)
    }

    /// Stops every follower and waits for them.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        for t in self.tasks {
            if let Err(e) = t.await {
                warn!(error = %e, "follower task failed");
            }
        }
    }
}
