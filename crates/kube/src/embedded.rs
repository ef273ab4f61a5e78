//! The embedded cache for controllers (`watchcache_kube`): an indexed, trigger-routed cache of
//! one resource type built from a kube-rs [`Client`](kube::Client), read in process.
//!
//! It is the API server upstream ([`ApiServerCaches`]) with one resource, plus typed reads:
//! objects are kept as the cache keeps them (compact JSON, attributes extracted once, bitmaps per
//! index value) and decoded into `K` when first read, once per object version: every later read
//! (a `get`, an index lookup, a watch event) shares the same `Arc<K>`, as kube-rs's `Store` does. Watches are the cache's own routed watches:
//! a watch pinned to a trigger value (`spec.nodeName=node-7`) costs nothing for events on other
//! values, however many subscribers there are.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use watchcache_kube::{KubeCache, definition_for};
//! use watchcache::Selection;
//!
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let def = definition_for::<Pod>(&[("spec.nodeName", true), ("label:app", false)])?;
//! let pods: KubeCache<Pod> = KubeCache::start(client, def).await?;
//! let on_node = pods.by_index("spec.nodeName", "node-7")?;
//! let mut events = pods
//!     .watch(Selection::all().with_fields("spec.nodeName=node-7")?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Dynamic: any resource the server serves, found by kube-rs's discovery, as
//! [`DynamicObject`](kube::core::DynamicObject)s.
//!
//! ```no_run
//! use kube::core::{DynamicObject, GroupVersionKind};
//! use kube::discovery::{Scope, pinned_kind};
//! use watchcache_kube::{KubeCache, definition_for_api_resource};
//!
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let gvk = GroupVersionKind::gvk("apps", "v1", "Deployment");
//! let (resource, caps) = pinned_kind(&client, &gvk).await?;
//! let def = definition_for_api_resource(
//!     &resource,
//!     caps.scope == Scope::Namespaced,
//!     &[("label:team", true)],
//! )?;
//! let deployments: KubeCache<DynamicObject> = KubeCache::start(client, def).await?;
//! let of_team = deployments.by_index("label:team", "payments")?;
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::sync::Arc;

use parking_lot::Mutex;

use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;

use crate::{ApiServerCaches, ApiServerConfig};
use watchcache::{Cache, CacheConfig, ListOptions, WatchOptions};
use watchcache::{Cause, Error, Result};
use watchcache::{EventType, Object, ResourceDef, ResourceVersion, Selection};

/// How often a start that waits says so.
const WAITING_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A definition for a typed kube resource, with these indexes (`(field path or label:KEY,
/// trigger)`). The key prefix is only the cache's internal key space (`/{group}/{plural}/`).
///
/// # Errors
/// [`Error::BadRequest`] naming what is invalid in the indexes.
pub fn definition_for<K>(indexes: &[(&str, bool)]) -> Result<ResourceDef>
where
    K: kube::Resource<DynamicType = ()>,
    K::Scope: 'static,
{
    let namespaced = std::any::TypeId::of::<K::Scope>()
        == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>();
    definition(
        &K::group(&()),
        &K::version(&()),
        &K::kind(&()),
        &K::plural(&()),
        namespaced,
        indexes,
    )
}

/// A definition for a resource known only at run time, e.g. found by kube-rs's discovery
/// (`kube::discovery::pinned_kind`), to cache it as [`DynamicObject`](kube::core::DynamicObject)s;
/// `namespaced` from the discovery's scope. Indexes as in [`definition_for`].
///
/// # Errors
/// [`Error::BadRequest`] naming what is invalid in the indexes or the resource's names.
pub fn definition_for_api_resource(
    resource: &kube::core::ApiResource,
    namespaced: bool,
    indexes: &[(&str, bool)],
) -> Result<ResourceDef> {
    definition(
        &resource.group,
        &resource.version,
        &resource.kind,
        &resource.plural,
        namespaced,
        indexes,
    )
}

fn definition(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    indexes: &[(&str, bool)],
) -> Result<ResourceDef> {
    let mut toml = format!(
        "kind = {}\nplural = {}\ngroup = {}\nversion = {}\nprefix = {}\nnamespaced = {namespaced}\n",
        toml_string(kind),
        toml_string(plural),
        toml_string(group),
        toml_string(version),
        toml_string(&format!("/{group}/{plural}/")),
    );
    for (index, trigger) in indexes {
        let (key, value) = match index.strip_prefix("label:") {
            Some(l) => ("label", l),
            None => ("field", *index),
        };
        toml.push_str(&format!(
            "[[index]]\n{key} = {}\ntrigger = {trigger}\n",
            toml_string(value)
        ));
    }
    ResourceDef::parse(&format!("{plural}.{group}"), &toml).map_err(Error::bad_request_from)
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// An indexed, routed cache of `K` fed from an API server (see the module docs). Clones share one
/// cache and one follower (hand one to each task, as kube-rs's `Store`); dropping the last clone
/// stops following the server.
pub struct KubeCache<K> {
    /// The follower, shared by the clones; taken by [`shutdown`](KubeCache::shutdown).
    caches: Arc<Mutex<Option<ApiServerCaches>>>,
    cache: Cache,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for KubeCache<K> {
    fn clone(&self) -> Self {
        KubeCache {
            caches: Arc::clone(&self.caches),
            cache: self.cache.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for KubeCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCache")
            .field("resource", &self.cache.definition().plural)
            .finish()
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> KubeCache<K> {
    /// Follows `def`'s resource through `client` and waits for the first sync, however long it
    /// takes: while it waits, a warning every 10 s says for how long, and the follower logs its
    /// failures (at most once per 10 s, with a count). [`start_within`](KubeCache::start_within)
    /// bounds the wait.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an invalid configuration.
    pub async fn start(client: kube::Client, def: ResourceDef) -> Result<KubeCache<K>> {
        Self::start_with(
            client,
            def,
            ApiServerConfig::default(),
            CacheConfig::default(),
        )
        .await
    }

    /// [`start`](KubeCache::start), giving up after `limit`: the follower is stopped and the
    /// answer is [`Error::NotReady`], saying what the cache waits for (an API server that does
    /// not answer, a resource it does not serve).
    ///
    /// # Errors
    /// [`Error::NotReady`] past `limit`; [`Error::BadRequest`] for an invalid configuration.
    pub async fn start_within(
        client: kube::Client,
        def: ResourceDef,
        limit: std::time::Duration,
    ) -> Result<KubeCache<K>> {
        Self::start_bounded(
            client,
            def,
            ApiServerConfig::default(),
            CacheConfig::default(),
            Some(limit),
        )
        .await
    }

    /// [`start`](KubeCache::start) with explicit configurations.
    ///
    /// # Errors
    /// As [`start`](KubeCache::start).
    pub async fn start_with(
        client: kube::Client,
        def: ResourceDef,
        config: ApiServerConfig,
        cache_config: CacheConfig,
    ) -> Result<KubeCache<K>> {
        Self::start_bounded(client, def, config, cache_config, None).await
    }

    async fn start_bounded(
        client: kube::Client,
        def: ResourceDef,
        config: ApiServerConfig,
        cache_config: CacheConfig,
        limit: Option<std::time::Duration>,
    ) -> Result<KubeCache<K>> {
        let plural = def.plural.clone();
        let caches = ApiServerCaches::connect(client, config, vec![def], cache_config)
            .map_err(Error::bad_request_from)?;
        let Some(cache) = caches.cache(&plural).cloned() else {
            return Err(Error::bad_request(format!("no cache for {plural}")));
        };
        let started = tokio::time::Instant::now();
        tracing::debug!(resource = %plural, "waiting for the first sync");
        let waiting = cache.clone();
        let ready = waiting.wait_ready();
        tokio::pin!(ready);
        loop {
            let next = started.elapsed() + WAITING_LOG_EVERY;
            let wake = match limit {
                Some(l) if l <= next => started + l,
                _ => started + next,
            };
            tokio::select! {
                r = &mut ready => {
                    r?;
                    break;
                }
                () = tokio::time::sleep_until(wake) => {}
            }
            let waited = started.elapsed();
            if limit.is_some_and(|l| waited >= l) {
                let why = if cache.is_absent() {
                    "the API server does not serve the resource"
                } else {
                    "the first sync has not finished (the follower's warnings say why)"
                };
                caches.shutdown().await;
                return Err(Error::NotReady {
                    resource: plural,
                    why: format!("{why} after {waited:?}"),
                    retry_after: std::time::Duration::from_secs(1),
                });
            }
            tracing::warn!(resource = %plural, ?waited, "still waiting for the first sync");
        }
        tracing::debug!(resource = %plural, took = ?started.elapsed(), "synced");
        Ok(KubeCache {
            caches: Arc::new(Mutex::new(Some(caches))),
            cache,
            _kind: PhantomData,
        })
    }

    /// The untyped cache: LIST with selectors and pages, GET, WATCH with every option, stats.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// One object as the cache holds it now (no wait for the server), if present.
    ///
    /// # Errors
    /// [`Error::Decode`] (its source is serde_json's error) when the stored JSON does not decode as `K`.
    pub async fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<Arc<K>>> {
        match self.cache.get(namespace, name, ResourceVersion::Any).await {
            Ok(o) => decode(&o).map(Some),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every object now, sorted by namespace and name (a reflector store's `state()`).
    ///
    /// # Errors
    /// [`Error::Decode`] when an object does not decode as `K`.
    pub async fn state(&self) -> Result<Vec<Arc<K>>> {
        let mut opts = ListOptions::all();
        opts.resource_version = ResourceVersion::Any;
        let list = self.cache.list(&opts).await?;
        list.items.iter().map(decode).collect()
    }

    /// The objects whose index `index` has `value`, from the index's bitmap (no scan).
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an unknown index, [`Error::Decode`] for an object that does not decode as `K`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>> {
        self.cache
            .lookup(index, value)?
            .iter()
            .map(decode)
            .collect()
    }

    /// A routed in-process watch of the objects `selection` matches, from now on: each event as
    /// its type and the typed object (DELETED: its last state). Bookmarks are not included.
    ///
    /// # Errors
    /// The cache's errors for the selection.
    pub async fn watch(
        &self,
        selection: Selection,
    ) -> Result<impl Stream<Item = Result<(EventType, Arc<K>)>> + Send + Unpin + use<K>> {
        let stream = self
            .cache
            // From the cache's revision: the changes after now, no initial ADDED events.
            .watch(WatchOptions::new(
                selection,
                ResourceVersion::At(self.cache.resource_version().max(1)),
            ))
            .await?;
        // A ready future keeps the stream Unpin, so callers can `.next()` it in place.
        Ok(stream.filter_map(|ev| {
            std::future::ready(match ev {
                Ok(ev) if ev.kind() == EventType::Bookmark => None,
                Ok(ev) => Some(ev.object().map_or_else(
                    || Err(Error::upstream("an event without an object")),
                    |o| decode(o).map(|k| (ev.kind(), k)),
                )),
                Err(e) => Some(Err(e)),
            })
        }))
    }

    /// The watch as kube-runtime's watcher yields it, for `reflector`, `WatchStreamExt` and
    /// `Controller::for_stream`: `Init`, an `InitApply` for each object `selection` matches now,
    /// `InitDone`, then `Apply` and `Delete` as they happen (routed: a selection on a trigger
    /// value is woken only by its own changes). The objects are clones of the shared decoded
    /// ones (nothing is decoded again). A watcher that falls out of the history window ends with
    /// `WatchError` (410 Expired): restart it, as kube-runtime's watcher restarts a list.
    ///
    /// # Errors
    /// The cache's errors for the selection (not ready: 429).
    pub async fn events(
        &self,
        selection: Selection,
    ) -> Result<
        impl Stream<Item = kube::runtime::watcher::Result<kube::runtime::watcher::Event<K>>>
        + Send
        + Unpin
        + use<K>,
    >
    where
        K: Clone,
    {
        use kube::runtime::watcher::{Error as WatchError, Event};
        let stream = self
            .cache
            .watch(
                // The state from the cache as it stands (no wait for the server), then changes.
                WatchOptions::new(selection, ResourceVersion::Any)
                    .send_initial_events(true)
                    .with_bookmarks(),
            )
            .await?;
        let status = |e: Error| {
            WatchError::WatchError(
                kube::core::Status::failure(&e.to_string(), e.reason())
                    .with_code(e.code())
                    .boxed(),
            )
        };
        let mut initial = true;
        let events = stream.filter_map(move |ev| {
            let out = match ev {
                Err(e) => Some(Err(status(e))),
                Ok(ev) if ev.is_initial_events_end() => {
                    initial = false;
                    Some(Ok(Event::InitDone))
                }
                Ok(ev) if ev.kind() == EventType::Bookmark => None,
                Ok(ev) => match ev.object().map(decode::<K>) {
                    None => Some(Err(status(Error::upstream("an event without an object")))),
                    Some(Err(e)) => Some(Err(status(e))),
                    Some(Ok(k)) => {
                        let k = K::clone(&k);
                        Some(Ok(match ev.kind() {
                            EventType::Deleted => Event::Delete(k),
                            _ if initial => Event::InitApply(k),
                            _ => Event::Apply(k),
                        }))
                    }
                },
            };
            std::future::ready(out)
        });
        Ok(futures_util::stream::once(std::future::ready(Ok(Event::Init))).chain(events))
    }

    /// Stops following the server (for every clone: the cache keeps what it holds, and is no
    /// longer updated) and waits for the follower.
    pub async fn shutdown(self) {
        let caches = self.caches.lock().take();
        if let Some(c) = caches {
            c.shutdown().await;
        }
    }
}

/// `o` as `K`: decoded on its first read, shared after.
fn decode<K: DeserializeOwned + Send + Sync + 'static>(o: &Object) -> Result<Arc<K>> {
    o.typed(|o| {
        serde_json::from_slice(&o.json_unkept()).map_err(|e| Error::Decode {
            key: o.key().to_owned(),
            type_name: std::any::type_name::<K>(),
            cause: Cause::new(e),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn definitions_come_from_a_discovered_resource() {
        let ar = kube::core::ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let d = definition_for_api_resource(&ar, false, &[("label:team", true)]).unwrap();
        assert_eq!(
            (
                d.group.as_str(),
                d.kind.as_str(),
                d.plural.as_str(),
                d.namespaced
            ),
            ("example.com", "Widget", "widgets", false)
        );
        assert_eq!(d.prefix, "/example.com/widgets/");
        // A name that would break out of its TOML string stays a (rejected) name.
        let bad = kube::core::ApiResource {
            plural: "w\"\nnamespaced = true".into(),
            ..ar
        };
        assert!(definition_for_api_resource(&bad, false, &[]).is_err());
    }

    /// Every read of one object version shares one decoded `K`; a new version decodes anew.
    #[test]
    fn an_object_version_is_decoded_once_and_shared() {
        let (cache, _writer) = Cache::new(
            definition_for::<Pod>(&[("spec.nodeName", true)]).unwrap(),
            CacheConfig::default(),
        );
        let json = |node: &str| {
            format!(
                r#"{{"metadata":{{"name":"a","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#
            )
        };
        let v1 = cache
            .decode("//pods/ns/a", json("n1").as_bytes(), 2)
            .unwrap();
        let a: Arc<Pod> = decode(&v1).unwrap();
        let b: Arc<Pod> = decode(&v1.clone()).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the second read shares the first's");
        assert_eq!(a.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let v2 = cache
            .decode("//pods/ns/a", json("n2").as_bytes(), 3)
            .unwrap();
        let c: Arc<Pod> = decode(&v2).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.spec.as_ref().unwrap().node_name.as_deref(), Some("n2"));
        // Another type is decoded, not mistaken for the kept one.
        let other: Arc<Node> = decode(&v1).unwrap();
        assert_eq!(other.metadata.name.as_deref(), Some("a"));
        // An object that does not decode as the type: an error, each time.
        let bad = cache
            .decode("//pods/ns/a", br#"{"metadata":{"name":"a","namespace":"ns"},"spec":{"nodeName":"n1","containers":"no"}}"#, 4)
            .unwrap();
        let e = decode::<Pod>(&bad).unwrap_err();
        assert!(
            matches!(&e, Error::Decode { key, type_name, .. } if key == "//pods/ns/a" && type_name.ends_with("::Pod")),
            "{e:?}"
        );
        assert_eq!(e.code(), 500, "the type is wrong, not the request");
        // The caller can reach serde's own error, with its position.
        let cause = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<serde_json::Error>())
            .expect("serde_json's error as the source");
        assert!(cause.is_data(), "{cause}");
        assert!(decode::<Pod>(&bad).is_err());
    }

    #[test]
    fn definitions_come_from_the_type() {
        let d = definition_for::<Pod>(&[("spec.nodeName", true), ("label:app", false)]).unwrap();
        assert_eq!(
            (
                d.group.as_str(),
                d.version.as_str(),
                d.kind.as_str(),
                d.plural.as_str()
            ),
            ("", "v1", "Pod", "pods")
        );
        assert!(d.namespaced);
        assert_eq!(d.indexes.len(), 2);
        assert!(!definition_for::<Node>(&[]).unwrap().namespaced);
        assert!(definition_for::<Pod>(&[("label:bad key", false)]).is_err());
    }
}
