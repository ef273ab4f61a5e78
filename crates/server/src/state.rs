//! What every request handler shares: the served resources, the configuration, the watch count,
//! the metrics and the shutdown signal; and the resolution of a path to the resource it names.

// Reads outside input (request or etcd data): it must not panic on any of it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::auth::RequestInfo;
use crate::config::ServerConfig;
use crate::http::status::ApiError;
use crate::metrics::{RequestKey, ServerMetrics};
use watchcache::Cache;

/// One resource a server serves: its cache, read from. Writes are not this server's: with a
/// proxy ([`Server::with_proxy`]) they go to the upstream API server; without one they get 405.
/// An embedder writes in code, through its source's [`Writes`](watchcache::Writes)
/// ([`MemorySource`](watchcache::MemorySource), or `apiserver::ApiServerWrites`, feature `apiserver`,
/// to forward to an API server).
///
/// [`Server::with_proxy`]: crate::Server::with_proxy
#[derive(Clone, Debug)]
pub struct Served {
    /// The cache reads and watches are answered from.
    pub cache: Cache,
}

impl Served {
    /// A resource served from `cache`.
    pub fn new(cache: Cache) -> Served {
        Served { cache }
    }
}

/// Where a server is in its life: each phase only ever follows the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    Serving = 0,
    /// Asked to stop: `/readyz` fails, everything else is served (`--shutdown-delay-duration`).
    Delaying = 1,
    /// The listeners are closed and the watches are ending, each with a last bookmark; a new
    /// request on a connection still open is answered 429 with `Retry-After` (and
    /// `Connection: close` on HTTP/1.1).
    Draining = 2,
}

/// The server's [`Phase`], read by every request.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle(std::sync::atomic::AtomicU8);

impl Lifecycle {
    pub(crate) fn phase(&self) -> Phase {
        match self.0.load(std::sync::atomic::Ordering::Acquire) {
            0 => Phase::Serving,
            1 => Phase::Delaying,
            _ => Phase::Draining,
        }
    }

    /// Moves on to `phase` (never back).
    pub(crate) fn enter(&self, phase: Phase) {
        self.0
            .fetch_max(phase as u8, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The resources a server serves: given at start, and changed while it runs
/// ([`ServedResources`]: custom resources come and go with their CRDs). A request reads one
/// snapshot; a change swaps the whole list.
///
/// Lock order: the lock is a leaf, held to clone or swap the list's `Arc`, never across an
/// await or a cache's lock.
#[derive(Debug, Default)]
pub(crate) struct ServedSet {
    list: parking_lot::RwLock<Arc<Vec<Served>>>,
    /// Bumped by every change (what is built from the list, the OpenAPI documents, is rebuilt).
    generation: std::sync::atomic::AtomicU64,
}

impl ServedSet {
    pub(crate) fn new(served: Vec<Served>) -> ServedSet {
        ServedSet {
            list: parking_lot::RwLock::new(Arc::new(served)),
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The resources served now.
    pub(crate) fn snapshot(&self) -> Arc<Vec<Served>> {
        Arc::clone(&self.list.read())
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Serves `served`, in place of what served its group and plural (at any version).
    fn insert(&self, served: Served) {
        let mut list = self.list.write();
        let d = served.cache.definition();
        let mut next: Vec<Served> = list
            .iter()
            .filter(|s| {
                let o = s.cache.definition();
                !(o.group == d.group && o.plural == d.plural)
            })
            .cloned()
            .collect();
        next.push(served);
        *list = Arc::new(next);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Serves `cache` no more; whether it was served.
    fn remove(&self, cache: &Cache) -> bool {
        let mut list = self.list.write();
        let before = list.len();
        let next: Vec<Served> = list
            .iter()
            .filter(|s| !s.cache.same(cache))
            .cloned()
            .collect();
        let removed = next.len() != before;
        if removed {
            *list = Arc::new(next);
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        removed
    }
}

/// A handle on the resources a running server serves ([`Server::resources`]): what a CRD sync
/// changes as custom resources come and go.
///
/// [`Server::resources`]: crate::Server::resources
#[derive(Clone)]
pub struct ServedResources(pub(crate) Arc<AppState>);

impl std::fmt::Debug for ServedResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedResources")
            .field("served", &self.0.served.snapshot().len())
            .finish()
    }
}

impl ServedResources {
    /// Serves `served` from now on, in place of whatever served its group and plural. Requests
    /// already resolved finish where they were; new ones come here.
    pub fn serve(&self, served: Served) {
        self.0.served.insert(served);
    }

    /// Serves `cache` no more: its paths answer as for a resource not served here (forwarded
    /// with a proxy set, else 404). Its watches are the cache's to end ([`Cache::close`]).
    /// Whether it was served.
    pub fn unserve(&self, cache: &Cache) -> bool {
        self.0.served.remove(cache)
    }

    /// The caches served now.
    pub fn caches(&self) -> Vec<Cache> {
        self.0.caches()
    }
}

pub(crate) struct AppState {
    pub served: ServedSet,
    pub config: ServerConfig,
    pub metrics: ServerMetrics,
    /// Set when the server drains: connections waiting for a request close, HTTP/2 ones send
    /// GOAWAY, handshakes stop. Watches end by the wheel's drain, not by this.
    pub shutdown: watch::Receiver<bool>,
    /// Serving, delaying its stop, or draining.
    pub lifecycle: Lifecycle,
    /// Every watch's deadline, and shutdown delivered to every watch (`cache/deadlines.rs`).
    pub deadlines: Arc<watchcache::deadlines::Deadlines>,
    /// Proxy mode: where requests for anything but the cached resources go.
    pub proxy: std::sync::OnceLock<Arc<dyn crate::proxy::Proxy>>,
    /// The OpenAPI documents, built on first request after each change of what is served (they
    /// depend only on that), with the [`ServedSet`] generation they were built at.
    pub openapi: parking_lot::Mutex<Option<(u64, Arc<crate::endpoints::openapi::Documents>)>>,
    /// Authentication and authorization, when configured ([`Server::with_auth`]).
    ///
    /// [`Server::with_auth`]: crate::Server::with_auth
    pub auth: std::sync::OnceLock<Arc<crate::auth::Auth>>,
    /// `--max-requests-inflight` and `--max-watches-per-user`.
    pub limits: crate::auth::Limits,
    /// The audit log.
    pub audit: crate::auth::Audit,
    /// Proxy mode: resources whose consistent reads go to the upstream for now.
    pub stalled: StalledReads,
}

/// Resources whose consistent reads timed out in the cache recently (the upstream's bookmarks
/// did not reach its current resourceVersion): for `STALLED_FOR` after a timeout, their
/// consistent reads go straight to the upstream instead of waiting 3 s each for the same answer.
#[derive(Debug, Default)]
pub(crate) struct StalledReads(std::sync::Mutex<std::collections::HashMap<String, Instant>>);

/// How long a resource's consistent reads go to the upstream after one timed out in the cache.
pub(crate) const STALLED_FOR: Duration = Duration::from_secs(10);

impl StalledReads {
    pub(crate) fn is_stalled(&self, prefix: &str) -> bool {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(prefix).is_some_and(|t| t.elapsed() < STALLED_FOR)
    }

    pub(crate) fn mark(&self, prefix: &str) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.insert(prefix.to_owned(), Instant::now());
    }
}

/// What a resource path names.
pub(crate) struct Target {
    pub served: Served,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The path names the object's `/status` subresource.
    pub status: bool,
    /// The path's version when it is one of the definition's
    /// [`other_versions`](watchcache::ResourceDef::other_versions) (its index there); `None`
    /// for the definition's own.
    pub other_version: Option<usize>,
}

impl Target {
    /// The definition at the path's version: the cache's own, or one of its other versions.
    pub(crate) fn def(&self) -> &watchcache::ResourceDef {
        let d = self.served.cache.definition();
        self.other_version
            .and_then(|i| d.other_versions.get(i))
            .unwrap_or(d)
    }

    /// Whether the path names another version than the cache holds objects at: what goes out is
    /// converted to it ([`json_at_version`](watchcache::wire::version::json_at_version)).
    pub(crate) fn converts_version(&self) -> bool {
        self.other_version.is_some()
    }

    /// Refuses a field selector the path's version does not accept, with its 400, as
    /// kube-apiserver's field label conversion for that version does before anything else. The
    /// cache checks its own (storage) version's labels; another version accepts only labels the
    /// storage version accepts (`CrdServing`), so once they pass here, the cache's pass too.
    ///
    /// # Errors
    /// 400 with the version's message for the first label it does not accept.
    pub(crate) fn check_fields(&self, selection: &watchcache::Selection) -> Result<(), ApiError> {
        if !self.converts_version() {
            return Ok(());
        }
        match &self.def().field_labels {
            Some(labels) => labels
                .convert(&selection.fields)
                .map(drop)
                .map_err(ApiError::bad_request),
            None => Ok(()),
        }
    }
}

impl AppState {
    /// Whether requests are audited: only with an audit file (`--audit-log-path`).
    pub(crate) fn auditing(&self) -> bool {
        self.audit.has_file()
    }

    /// The caches served now.
    pub(crate) fn caches(&self) -> Vec<Cache> {
        self.served
            .snapshot()
            .iter()
            .map(|s| s.cache.clone())
            .collect()
    }

    /// The metrics labels of a request (`server/metrics.rs`): its resource named only when it is
    /// served here.
    pub(crate) fn request_key(&self, info: &RequestInfo) -> RequestKey {
        RequestKey::of(info, self.resolve(&segments(&info.path)).is_some())
    }

    /// The resource a path under `/api/{v}/` or `/apis/{g}/{v}/` names (`segs` are the path's
    /// segments).
    pub(crate) fn resolve(&self, segs: &[&str]) -> Option<Target> {
        let (group, version, rest) = match segs {
            ["api", v, rest @ ..] => ("", *v, rest),
            ["apis", g, v, rest @ ..] => (*g, *v, rest),
            _ => return None,
        };
        let (plural, namespace, name, status) = match rest {
            [r] => (*r, None, None, false),
            [r, n] => (*r, None, Some(*n), false),
            [r, n, "status"] => (*r, None, Some(*n), true),
            ["namespaces", ns, r] => (*r, Some(*ns), None, false),
            ["namespaces", ns, r, n] => (*r, Some(*ns), Some(*n), false),
            ["namespaces", ns, r, n, "status"] => (*r, Some(*ns), Some(*n), true),
            _ => return None,
        };
        let list = self.served.snapshot();
        let (served, other_version) = list.iter().find_map(|s| {
            let d = s.cache.definition();
            if d.group != group || d.plural != plural {
                return None;
            }
            if d.version == version {
                return Some((s, None));
            }
            let i = d.other_versions.iter().position(|o| o.version == version)?;
            Some((s, Some(i)))
        })?;
        let def = served.cache.definition();
        let at = other_version
            .and_then(|i| def.other_versions.get(i))
            .unwrap_or(def);
        // Only a resource with a status subresource upstream (or declared) has `/status`.
        if status && !at.status_subresource {
            return None;
        }
        let namespaced = served.cache.definition().namespaced;
        // A namespaced object is named within its namespace; a cluster-scoped one has none.
        if (namespaced && name.is_some() && namespace.is_none())
            || (!namespaced && namespace.is_some())
        {
            return None;
        }
        let decoded = |seg: Option<&str>| match seg {
            None => Some(None),
            Some(s) => decode_segment(s).map(Some),
        };
        Some(Target {
            served: served.clone(),
            namespace: decoded(namespace)?,
            name: decoded(name)?,
            status,
            other_version,
        })
    }
}

/// A namespace or name segment of a path, percent-decoded (clients escape what they send). An
/// empty segment (`/namespaces//pods`), one that is not UTF-8 once decoded, or one that decodes to
/// something holding a `/` names nothing: `None`, so the path is not found.
fn decode_segment(seg: &str) -> Option<String> {
    let s = percent_encoding::percent_decode_str(seg)
        .decode_utf8()
        .ok()?;
    (!s.is_empty() && !s.contains('/')).then(|| s.into_owned())
}

/// The segments of a request path, without its trailing slash.
pub(crate) fn segments(path: &str) -> Vec<&str> {
    path.trim_end_matches('/').split('/').skip(1).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stalled_resource_is_remembered_per_resource() {
        let s = StalledReads::default();
        assert!(!s.is_stalled("/registry/pods/"));
        s.mark("/registry/pods/");
        assert!(s.is_stalled("/registry/pods/"));
        assert!(!s.is_stalled("/registry/configmaps/"));
    }

    use super::*;

    #[test]
    fn path_segments_are_percent_decoded_and_empty_ones_name_nothing() {
        assert_eq!(decode_segment("web-1").as_deref(), Some("web-1"));
        assert_eq!(decode_segment("a%20b").as_deref(), Some("a b"));
        assert_eq!(decode_segment("h%C3%A9llo").as_deref(), Some("héllo"));
        assert_eq!(decode_segment("a%3Db%2Cc").as_deref(), Some("a=b,c"));
        for none in ["", "a%2Fb", "%FF", "%2f"] {
            assert_eq!(decode_segment(none), None, "{none}");
        }
    }
}
