//! watchcache's etcd upstream (the crate `watchcache-etcd`): exactly one etcd watch per cached
//! resource, however many clients watch it.
//!
//! [`EtcdCaches::connect`] builds one [`Cache`] per resource definition and one follower task per
//! cache. Each follower lists the resource prefix in pages of 10 000 at one revision, then watches
//! from the next revision with `prev_kv` and progress notifications; it reconnects with capped
//! exponential backoff and jitter, resumes from the last applied revision, resyncs after a
//! compaction, and marks the cache not ready after a grace period without etcd.
//!
//! # Examples
//! ```no_run
//! use watchcache_etcd::{EtcdCaches, EtcdConfig};
//! use watchcache::{CacheConfig, ListOptions, ResourceDef};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let caches = EtcdCaches::connect(
//!     EtcdConfig::new(["http://127.0.0.1:2379"]),
//!     vec![ResourceDef::builtin("pods").unwrap()],
//!     CacheConfig::default(),
//! ).await?;
//! let pods = caches.cache("pods").unwrap();
//! pods.wait_ready().await?;
//! let all = pods.list(&ListOptions::all()).await?;
//! # Ok(()) }
//! ```

mod encryption;
mod local;
mod range;
mod source;
mod truth;
mod version;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tokio::sync::Notify;
use tracing::{debug, error, warn};

pub use encryption::{Encryption, EncryptionError, Transformer};
pub use local::{LocalEtcd, LocalEtcdError, LocalEtcdTls, free_port};
pub use version::progress_is_reliable;

use range::EtcdUpstream;
use source::EtcdSource;
use truth::range_truth;
use watchcache::Cause;
use watchcache::ResourceDef;
use watchcache::{Cache, CacheConfig};
use watchcache_follow::check::RangeTruth;
use watchcache_follow::crds::DynamicResources;
use watchcache_follow::followers::{Dynamic, Followers};
use watchcache_follow::{Policy, WatchListUse};

/// How consistent reads (resourceVersion unset) are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsistentReads {
    /// From the cache on etcd versions whose progress notifications are ordered (3.4.31+, 3.5.13+),
    /// otherwise from an etcd range read at the current revision (as Kubernetes does).
    #[default]
    Auto,
    /// Always from the cache, after waiting for it to reach etcd's current revision. Safe only
    /// where `Auto` would choose it: on older etcd a progress notification may run ahead of an
    /// event, so a read may miss a write and the event be skipped. Forced on such an etcd, it is
    /// logged as an error at connect.
    FromCache,
    /// Always from an etcd range read.
    FromEtcd,
}

impl ConsistentReads {
    /// The names [`FromStr`](std::str::FromStr) accepts, as the CLI spells them.
    pub const NAMES: [&'static str; 3] = ["auto", "cache", "etcd"];
}

impl std::str::FromStr for ConsistentReads {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ConsistentReads::Auto),
            "cache" => Ok(ConsistentReads::FromCache),
            "etcd" => Ok(ConsistentReads::FromEtcd),
            other => Err(format!(
                "unknown consistent-read mode \"{other}\": expected one of {}",
                Self::NAMES.join(", ")
            )),
        }
    }
}

/// Configuration of the etcd upstream.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Keys per list page during a (re)sync (upstream: 10 000).
    pub page_size: usize,
    /// How long etcd may be unavailable (down, or without a leader) before caches are marked not
    /// ready (upstream tolerates 30 s).
    pub unavailable_grace: Duration,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// After this long without any watch message, probe etcd with a linearizable read.
    pub idle_probe: Duration,
    /// How consistent reads are served.
    pub consistent_reads: ConsistentReads,
    /// Client TLS, for `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// Encryption at rest (kube-apiserver's `--encryption-provider-config`): values are decrypted
    /// before decoding.
    pub encryption: Option<Arc<Encryption>>,
}

/// Client TLS towards etcd, as kube-apiserver's `--etcd-cafile`, `--etcd-certfile` and
/// `--etcd-keyfile`: the CA that signed etcd's serving certificate, and the client certificate
/// and key an etcd started with `--client-cert-auth` requires.
#[derive(Debug, Clone, Default)]
pub struct EtcdTls {
    /// PEM CA bundle that verifies etcd's certificate (`None`: the system's roots are not used,
    /// so this is normally set).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub key_file: Option<PathBuf>,
}

impl EtcdTls {
    /// The client TLS options, with the files read now.
    ///
    /// # Errors
    /// [`EtcdError::Tls`] when a file cannot be read, or a certificate comes without its key.
    pub fn options(&self) -> Result<TlsOptions, EtcdError> {
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|e| {
                let (message, cause) = Cause::with_context(p.display(), e);
                EtcdError::Tls {
                    message,
                    cause: Some(cause),
                }
            })
        };
        let mut tls = TlsOptions::new();
        if let Some(ca) = &self.ca_file {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => {
                return Err(EtcdError::Tls {
                    message: "a client certificate and its key go together (--etcd-certfile, --etcd-keyfile)"
                        .into(),
                    cause: None,
                });
            }
        }
        Ok(tls)
    }
}

impl EtcdConfig {
    /// Defaults for these endpoints.
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> EtcdConfig {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            page_size: 10_000,
            unavailable_grace: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            idle_probe: Duration::from_secs(5),
            consistent_reads: ConsistentReads::Auto,
            tls: None,
            encryption: None,
        }
    }

    /// The client's connection options: keep-alives, leader requirement, TLS.
    ///
    /// # Errors
    /// [`EtcdError::Tls`] when the TLS files cannot be read.
    pub fn connect_options(&self) -> Result<ConnectOptions, EtcdError> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(3))
            .with_keep_alive_while_idle(true)
            // Watches are canceled when their member loses the leader, instead of going silent.
            .with_require_leader(true);
        if let Some(tls) = &self.tls {
            opts = opts.with_tls(tls.options()?);
        }
        Ok(opts)
    }
}

/// Why the upstream could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// No endpoints were given.
    #[error("no etcd endpoints given")]
    NoEndpoints,
    /// Two definitions have the same resource name (plural and group).
    #[error("resource {0} is defined twice")]
    Duplicate(String),
    /// The TLS configuration could not be loaded.
    #[error("etcd TLS: {message}")]
    Tls {
        /// What is wrong, with the cause's text.
        message: String,
        /// The I/O error, when a file could not be read.
        #[source]
        cause: Option<Cause>,
    },
    /// The client could not be built.
    #[error("cannot connect to etcd at {endpoints}: {source}")]
    Connect {
        /// The endpoints tried.
        endpoints: String,
        /// The client error.
        #[source]
        source: etcd_client::Error,
    },
}

/// The bytes kube-apiserver stores in etcd for an object given as JSON: a built-in kind in its
/// protobuf (`k8s\0` + `runtime.Unknown`, without `resourceVersion`, a kind stored as another
/// converted), anything else (custom resources, kinds kube-apiserver keeps in JSON) as given. For
/// seeding an etcd that this crate, or kube-apiserver, then reads; encryption at rest is the
/// caller's ([`Transformer::encrypt`]).
///
/// # Errors
/// JSON of a built-in kind its protobuf message cannot hold (a member of the wrong type).
pub fn stored_value(json: &[u8]) -> Result<Vec<u8>, String> {
    Ok(watchcache::protobuf::storage_form(json)?.unwrap_or_else(|| json.to_vec()))
}

/// Caches fed from etcd, one per resource, each with its own single etcd watch.
pub struct EtcdCaches {
    client: Client,
    followers: Followers,
    reliable_progress: bool,
    dynamic: Arc<EtcdDynamic>,
}

/// What a follower of one etcd prefix is made of, besides its cache.
#[derive(Clone)]
struct Parts {
    client: Client,
    config: EtcdConfig,
    reliable: bool,
}

impl Parts {
    /// The source that follows `cache`'s prefix, and the truth its consistency check reads.
    fn of(&self, cache: &Cache) -> (EtcdSource, RangeTruth<EtcdUpstream>) {
        let progress = Arc::new(Notify::new());
        let upstream = self.upstream(cache, Arc::clone(&progress));
        cache.set_upstream(upstream.clone());
        let truth = range_truth(upstream.clone(), self.config.page_size);
        let source = EtcdSource {
            decoder: cache.decoder(),
            cache: cache.clone(),
            upstream,
            client: self.client.clone(),
            config: self.config.clone(),
            progress,
            reliable: self.reliable,
            cluster: None,
        };
        (source, truth)
    }

    /// The range reads of `cache`'s prefix, with its resource's encryption at rest; `progress`
    /// wakes its follower to ask etcd for progress.
    fn upstream(&self, cache: &Cache, progress: Arc<Notify>) -> Arc<EtcdUpstream> {
        Arc::new(EtcdUpstream {
            kv: self
                .client
                .kv_client()
                .max_decoding_message_size(range::MAX_RESPONSE_BYTES),
            prefix: cache.definition().prefix.clone(),
            progress,
            reliable: self.reliable,
            transformer: self
                .config
                .encryption
                .as_ref()
                .and_then(|e| e.for_resource(cache.definition())),
        })
    }
}

/// [`EtcdCaches::dynamic`].
struct EtcdDynamic {
    followers: Arc<Dynamic>,
    parts: Parts,
    policy: Policy,
    cache_config: CacheConfig,
}

impl DynamicResources for EtcdDynamic {
    fn start(&self, def: ResourceDef) -> Result<Cache, String> {
        self.followers.start(
            def,
            &self.cache_config,
            self.policy,
            WatchListUse::Off,
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

impl EtcdCaches {
    /// Connects to etcd and starts following every resource. Returns at once; each cache becomes
    /// ready when its initial sync finishes (see [`Cache::wait_ready`]). Each follower task
    /// holds its cache's [`CacheWriter`](watchcache::CacheWriter).
    ///
    /// # Errors
    /// [`EtcdError`] for no endpoints, duplicate definitions, or a client that cannot be built.
    pub async fn connect(
        config: EtcdConfig,
        defs: Vec<ResourceDef>,
        cache_config: CacheConfig,
    ) -> Result<EtcdCaches, EtcdError> {
        if config.endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        let opts = config.connect_options()?;
        let mut followers = Followers::new();
        // Made on the followers' runtime: the client's channel worker and connections (its
        // keep-alive pings among them) run there, out of reach of the server's load.
        let endpoints = config.endpoints.clone();
        let client = followers
            .runtime()
            .run(async move { Client::connect(&endpoints, Some(opts)).await })
            .await
            .unwrap_or_else(|| {
                Err(etcd_client::Error::Internal(
                    "the followers' runtime stopped".into(),
                ))
            })
            .map_err(|source| EtcdError::Connect {
                endpoints: config.endpoints.join(","),
                source,
            })?;
        let reliable = match config.consistent_reads {
            ConsistentReads::FromCache => {
                if let Err(why) = detect_reliable_progress(&config).await {
                    error!(
                        %why,
                        "consistent reads from the cache were forced on an etcd whose progress notifications may run ahead of its events: a consistent read may miss a write, and the write's event be skipped"
                    );
                }
                true
            }
            ConsistentReads::FromEtcd => false,
            ConsistentReads::Auto => {
                let reliable = detect_reliable_progress(&config).await;
                if let Err(why) = &reliable {
                    warn!(%why, "consistent reads go to etcd range reads");
                }
                reliable.is_ok()
            }
        };
        let policy = Policy {
            upstream: "etcd",
            grace: config.unavailable_grace,
            backoff_initial: config.backoff_initial,
            backoff_max: config.backoff_max,
            // etcd serves every prefix: a sync is never answered "not served".
            absent_retry: config.backoff_max,
        };
        let parts = Parts {
            client: client.clone(),
            config: config.clone(),
            reliable,
        };
        for def in defs {
            let (cache, writer) = followers
                .add(def, &cache_config)
                .map_err(EtcdError::Duplicate)?;
            let (source, truth) = parts.of(&cache);
            followers.spawn(source, writer, policy, WatchListUse::Off, truth);
        }
        debug!(resources = followers.len(), endpoints = %config.endpoints.join(","), reliable_progress = reliable, "following etcd");
        let dynamic = Arc::new(EtcdDynamic {
            followers: Arc::clone(followers.dynamic()),
            parts,
            policy,
            cache_config,
        });
        Ok(EtcdCaches {
            client,
            followers,
            reliable_progress: reliable,
            dynamic,
        })
    }

    /// Resources to follow on this etcd after connect, and to stop following: what
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

    /// The etcd client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether consistent reads are served from the caches (etcd's progress notifications are
    /// trusted) rather than from etcd range reads.
    pub fn reads_from_cache(&self) -> bool {
        self.reliable_progress
    }

    /// Compares the cache of `resource` with etcd now, as the periodic consistency check does,
    /// without counting it or relisting: the revision compared at and what differed. For
    /// benchmarks and tools; the check itself runs every `consistency_check_period`.
    ///
    /// # Errors
    /// An unknown resource, a cache not ready, or etcd failing.
    #[doc(hidden)]
    pub async fn check_now(&self, resource: &str) -> Result<(u64, watchcache::Compared), String> {
        let cache = self
            .cache(resource)
            .ok_or_else(|| format!("no cache of {resource}"))?;
        let upstream = self.dynamic.parts.upstream(cache, Arc::new(Notify::new()));
        let mut truth = range_truth(upstream, 10_000);
        watchcache_follow::check::check_now(cache, &mut truth).await
    }

    /// Stops every follower and waits for them.
    pub async fn shutdown(self) {
        self.followers.shutdown().await;
    }
}

/// Asks every endpoint for its version; progress is reliable only if all that answer are fixed
/// versions (and at least one answers); else why not. An endpoint that does not answer is named
/// as unreachable, never as too old.
async fn detect_reliable_progress(config: &EtcdConfig) -> Result<(), String> {
    let mut versions = Vec::new();
    for ep in &config.endpoints {
        let status = async {
            let opts = config.connect_options().map_err(|e| e.to_string())?;
            let mut c = Client::connect([ep.as_str()], Some(opts))
                .await
                .map_err(|e| e.to_string())?;
            c.status()
                .await
                .map(|s| s.version().to_owned())
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(Duration::from_secs(3), status).await {
            Ok(Ok(v)) => versions.push(v),
            Ok(Err(e)) => {
                warn!(endpoint = %ep, error = %e, "etcd unreachable: its version is unknown")
            }
            Err(_) => {
                warn!(endpoint = %ep, "etcd unreachable: no status within 3 s, its version is unknown")
            }
        }
    }
    if versions.is_empty() {
        return Err(format!(
            "no etcd endpoint answered ({}): its version is unknown",
            config.endpoints.join(",")
        ));
    }
    let old: Vec<&String> = versions
        .iter()
        .filter(|v| !progress_is_reliable(v))
        .collect();
    if !old.is_empty() {
        return Err(format!(
            "etcd {old:?} predates ordered progress notifications (3.4.31 / 3.5.13)"
        ));
    }
    Ok(())
}
