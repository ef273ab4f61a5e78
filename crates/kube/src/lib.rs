//! watchcache's Kubernetes API server upstream (the crate `watchcache-kube`): one watch per cached
//! resource on an API server, or on another watchcache (both speak the same API), however many
//! clients watch the cache.
//!
//! [`ApiServerCaches::connect`] builds one [`Cache`] per resource definition and one follower task
//! per cache. Each follower syncs by WatchList when the server does it (else by a paginated LIST),
//! watches with bookmarks from the synced resourceVersion, resumes from the last applied one after
//! a break (capped exponential backoff, full jitter), relists and resyncs by difference after 410
//! Expired, and marks the cache not ready after a grace period without the server.
//! resourceVersions are u64: the API server's must be comparable integers (etcd revisions).
//!
//! The connection is kube-rs's client: kubeconfig, contexts, TLS and authentication are its own
//! ([`client_from_kubeconfig`]). Objects are read as raw JSON and decoded once by the cache.
//!
//! ## For controller authors: [`KubeCache`]
//! `KubeCache<K>` follows one resource through a kube-rs client
//! and is read in process, typed: index lookups without a scan, routed watches (a watch pinned
//! to `spec.nodeName=node-7` costs nothing for other nodes' events), a Store-like reader whose
//! `Arc<K>`s are decoded once per object version, and an event stream for kube-runtime's
//! `reflector` and `Controller::for_stream`. `KubeCache::start_within` bounds the first sync.
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::Pod;
//! use watchcache_kube::{KubeCache, definition_for};
//!
//! let def = definition_for::<Pod>(&[("spec.nodeName", true), ("label:app", false)])?;
//! let pods: KubeCache<Pod> =
//!     KubeCache::start_within(client, def, std::time::Duration::from_secs(30)).await?;
//! let on_node_7 = pods.by_index("spec.nodeName", "node-7")?;
//! # Ok(()) }
//! ```
//!
//! ## Caches of an API server: [`ApiServerCaches`]
//! ```no_run
//! use watchcache_kube::{ApiServerCaches, ApiServerConfig, client_from_kubeconfig};
//! use watchcache::{CacheConfig, ListOptions, ResourceDef};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = client_from_kubeconfig("kubeconfig.yaml".as_ref(), None).await?;
//! let caches = ApiServerCaches::connect(
//!     client,
//!     ApiServerConfig::default(),
//!     vec![ResourceDef::builtin("pods").unwrap()],
//!     CacheConfig::default(),
//! )?;
//! let pods = caches.cache("pods").unwrap();
//! pods.wait_ready().await?;
//! let all = pods.list(&ListOptions::all()).await?;
//! # Ok(()) }
//! ```

mod embedded;
mod rest;
mod source;
mod upstream;
mod writes;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{debug, warn};

pub use embedded::{KubeCache, definition_for, definition_for_api_resource};
pub use rest::RestError;
pub use writes::ApiServerWrites;

use rest::{Rest, WireChoice};
use source::ApiSource;
use upstream::{ApiTruth, ApiUpstream};
use watchcache::Cause;
use watchcache::ResourceDef;
use watchcache::{Cache, CacheConfig};
use watchcache_follow::crds::DynamicResources;
use watchcache_follow::followers::{Dynamic, Followers};
use watchcache_follow::{Policy, WatchListUse};

/// How a follower reads the full state (at start and after 410 Expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialList {
    /// WatchList. Any failure of it falls back to LIST then watch for that sync, as client-go's
    /// reflector does; for good when the server refuses it (a status other than 410 and 429, such
    /// as kube-apiserver's 500 on an etcd without progress requests) or ends the watch without
    /// the initial-events-end bookmark.
    #[default]
    Auto,
    /// WatchList only.
    WatchList,
    /// A paginated LIST, then a watch from its resourceVersion.
    List,
}

/// Configuration of the API server upstream.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Items per LIST page when listing (500 to 10 000; client-go pages by 500).
    pub page_size: usize,
    /// WatchList or LIST.
    pub initial_list: InitialList,
    /// How long the server may be unavailable before caches are marked not ready (as for etcd:
    /// upstream tolerates 30 s).
    pub unavailable_grace: Duration,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// A watch's `timeoutSeconds` before jitter (up to +50 %); it is then reopened from the last
    /// resourceVersion. client-go uses 5 to 10 minutes.
    pub watch_timeout: Duration,
    /// How long one request (a LIST page, a write, opening a watch) may take.
    pub request_timeout: Duration,
    /// A watch with no frame at all for this long is taken for a dead connection and resumed.
    /// Servers send a bookmark about every minute to watches that allow them.
    pub idle_timeout: Duration,
    /// How often a resource the server does not serve (404: a CRD not installed) is asked for
    /// again; a CRD installed later is picked up within this.
    pub absent_retry: Duration,
    /// Read the watches and LISTs of built-in kinds in protobuf (what kube-controller-manager
    /// and kubelets speak), from a server whose `/version` is not newer than the Kubernetes
    /// version whose messages this build knows (1.35): the server sends its stored bytes as they
    /// are, and the follower reads only the identity before the cache's decode, so a listed
    /// object is stored in protobuf as a watched one is. Custom resources and newer servers are
    /// read in JSON.
    pub protobuf_watch: bool,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        ApiServerConfig {
            page_size: 5000,
            initial_list: InitialList::Auto,
            unavailable_grace: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            watch_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(150),
            absent_retry: Duration::from_secs(5),
            protobuf_watch: true,
        }
    }
}

/// Why the upstream could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiServerError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
        /// kube-rs' error.
        #[source]
        cause: Cause,
    },
    /// Two definitions have the same resource name (plural and group).
    #[error("resource {0} is defined twice")]
    Duplicate(String),
    /// A setting is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// A kube-rs client from a kubeconfig file and an optional context (default: its current one).
///
/// # Errors
/// [`ApiServerError::Kubeconfig`] when the file cannot be read, the context is unknown, or the
/// client cannot be built (TLS, authentication).
pub async fn client_from_kubeconfig(
    path: &Path,
    context: Option<&str>,
) -> Result<kube::Client, ApiServerError> {
    let err = |cause: Cause| ApiServerError::Kubeconfig {
        path: path.display().to_string(),
        message: cause.to_string(),
        cause,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| err(Cause::new(e)))?;
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| err(Cause::new(e)))?;
    // kube-rs retries 429, 503 and 504 by itself (with backoff, for minutes). Not here: a proxy
    // answers the upstream's 429/503/504 as they are, for its client to retry with the
    // upstream's Retry-After, and the followers have their own backoff and readiness.
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| err(Cause::new(e)))
}

/// The definitions the API server serves, and those it does not (its discovery has no such
/// resource in that group version, or no such group version): a cache of a resource the server
/// lacks could never become ready, and requests for it are proxied anyway (to the server's 404).
/// A server whose discovery cannot be read (down, or forbidding it) is taken to serve them all.
pub async fn served_by(
    client: &kube::Client,
    defs: Vec<ResourceDef>,
) -> (Vec<ResourceDef>, Vec<ResourceDef>) {
    let mut resources: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    for d in &defs {
        let gv = d.api_version();
        if resources.contains_key(&gv) {
            continue;
        }
        let list = if d.group.is_empty() {
            client.list_core_api_resources(&d.version).await
        } else {
            client.list_api_group_resources(&gv).await
        };
        let names = match list {
            Ok(l) => Some(l.resources.into_iter().map(|r| r.name).collect()),
            Err(kube::Error::Api(e)) if e.code == 404 => Some(Vec::new()),
            Err(e) => {
                warn!(group_version = %gv, error = %e, "upstream discovery unreadable; following its resources anyway");
                None
            }
        };
        resources.insert(gv, names);
    }
    defs.into_iter()
        .partition(|d| match resources.get(&d.api_version()) {
            Some(Some(names)) => names.contains(&d.plural),
            _ => true,
        })
}

/// Caches fed from an API server, one per resource, each with its own single watch.
pub struct ApiServerCaches {
    client: kube::Client,
    followers: Followers,
    writes: Arc<ApiServerWrites>,
    dynamic: Arc<ApiDynamic>,
}

/// What a follower of one resource of the API server is made of, besides its cache.
#[derive(Clone)]
struct Parts {
    client: kube::Client,
    config: ApiServerConfig,
    wire: Option<WireChoice>,
}

impl Parts {
    /// The source that follows `cache`'s resource, and the truth its consistency check reads.
    fn of(&self, cache: &Cache) -> (ApiSource, ApiTruth) {
        let def = cache.definition();
        let rest = Rest::new(
            self.client.clone(),
            def,
            self.config.request_timeout,
            self.wire.clone(),
        );
        let progress = Arc::new(Notify::new());
        cache.set_upstream(Arc::new(ApiUpstream {
            rest: rest.clone(),
            def: Arc::new(def.clone()),
            progress: Arc::clone(&progress),
        }));
        let truth = ApiTruth {
            rest: rest.clone(),
            def: Arc::new(def.clone()),
            page_size: self.config.page_size,
        };
        let source = ApiSource {
            decoder: cache.decoder(),
            cache: cache.clone(),
            rest,
            config: self.config.clone(),
            progress,
        };
        (source, truth)
    }
}

/// [`ApiServerCaches::dynamic`].
struct ApiDynamic {
    followers: Arc<Dynamic>,
    parts: Parts,
    policy: Policy,
    watch_list: WatchListUse,
    cache_config: CacheConfig,
}

impl DynamicResources for ApiDynamic {
    fn start(&self, def: ResourceDef) -> Result<Cache, String> {
        self.followers.start(
            def,
            &self.cache_config,
            self.policy,
            self.watch_list,
            |cache| self.parts.of(cache),
        )
    }

    fn stop(&self, name: &str) -> Option<Cache> {
        self.followers.stop(name)
    }

    fn is_fixed(&self, name: &str) -> bool {
        self.followers.is_fixed(name)
    }
}

impl std::fmt::Debug for ApiServerCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerCaches")
            .field("resources", &self.followers.names().collect::<Vec<_>>())
            .finish()
    }
}

impl ApiServerCaches {
    /// Starts following every resource through `client`. Returns at once (inside a Tokio
    /// runtime); each cache becomes ready when its initial sync finishes (see
    /// [`Cache::wait_ready`]).
    ///
    /// # Errors
    /// [`ApiServerError`] for duplicate definitions or a page size out of range.
    pub fn connect(
        client: kube::Client,
        config: ApiServerConfig,
        defs: Vec<ResourceDef>,
        cache_config: CacheConfig,
    ) -> Result<ApiServerCaches, ApiServerError> {
        if !(500..=10_000).contains(&config.page_size) {
            return Err(ApiServerError::Config(format!(
                "page_size {} is outside 500..=10000",
                config.page_size
            )));
        }
        let policy = Policy {
            upstream: "API server",
            grace: config.unavailable_grace,
            backoff_initial: config.backoff_initial,
            backoff_max: config.backoff_max,
            absent_retry: config.absent_retry,
        };
        let watch_list = match config.initial_list {
            InitialList::Auto => WatchListUse::Try,
            InitialList::WatchList => WatchListUse::Only,
            InitialList::List => WatchListUse::Off,
        };
        let mut followers = Followers::new();
        let mut all_defs = Vec::new();
        // One `/version` for all the resources.
        let wire = config.protobuf_watch.then(WireChoice::default);
        let parts = Parts {
            client: client.clone(),
            config: config.clone(),
            wire,
        };
        for def in defs {
            all_defs.push(Arc::new(def.clone()));
            let (cache, writer) = followers
                .add(def, &cache_config)
                .map_err(ApiServerError::Duplicate)?;
            let (source, truth) = parts.of(&cache);
            followers.spawn(source, writer, policy, watch_list, truth);
        }
        let writes = Arc::new(ApiServerWrites::new(
            Rest {
                client: client.clone(),
                collection: String::new(),
                timeout: config.request_timeout,
                protobuf: None,
                type_meta: "".into(),
            },
            all_defs,
        ));
        debug!(resources = followers.len(), "following an API server");
        let dynamic = Arc::new(ApiDynamic {
            followers: Arc::clone(followers.dynamic()),
            parts,
            policy,
            watch_list,
            cache_config,
        });
        Ok(ApiServerCaches {
            client,
            followers,
            writes,
            dynamic,
        })
    }

    /// Resources to follow on this API server after connect, and to stop following: what
    /// [`sync_crds`](watchcache_follow::crds::sync_crds) starts for each custom resource.
    pub fn dynamic(&self) -> Arc<dyn DynamicResources> {
        self.dynamic.clone()
    }

    /// The cache of a resource, by its name: the plural for the core group (`pods`), else
    /// `plural.group` (`deployments.apps`), as [`ResourceDef::resource_name`] writes it.
    pub fn cache(&self, plural: &str) -> Option<&Cache> {
        self.followers.cache(plural)
    }

    /// Every cache, by resource name.
    pub fn caches(&self) -> impl Iterator<Item = (&str, &Cache)> {
        self.followers.caches()
    }

    /// The kube-rs client the caches follow through (e.g. to proxy other requests with).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Writes through to the API server, for every followed resource.
    pub fn writes(&self) -> Arc<ApiServerWrites> {
        Arc::clone(&self.writes)
    }

    /// Stops every follower and waits for them.
    pub async fn shutdown(self) {
        self.followers.shutdown().await;
    }
}
