//! What a server serves (its [`Served`] resources, changed while it runs) and what a request
//! path names among them ([`ServedSet::resolve`]).

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

use crate::http::status::ApiError;
use watchcache::Cache;

/// One resource a server serves: its cache, read from. Writes are not this server's: with a
/// proxy ([`Server::with_proxy`]) they go to the upstream API server; without one they get 405.
/// An embedder writes in code, through its source's [`Writes`](watchcache::Writes)
/// ([`MemorySource`](watchcache::MemorySource), or `watchcache_kube::ApiServerWrites`,
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
    pub(crate) fn insert(&self, served: Served) {
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
    pub(crate) fn remove(&self, cache: &Cache) -> bool {
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

    /// The caches served now.
    pub(crate) fn caches(&self) -> Vec<Cache> {
        self.snapshot().iter().map(|s| s.cache.clone()).collect()
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
        let list = self.snapshot();
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

/// A handle on the resources a running server serves ([`Server::resources`]): what a CRD sync
/// changes as custom resources come and go.
///
/// [`Server::resources`]: crate::Server::resources
#[derive(Clone)]
pub struct ServedResources(pub(crate) Arc<ServedSet>);

impl std::fmt::Debug for ServedResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedResources")
            .field("served", &self.0.snapshot().len())
            .finish()
    }
}

impl ServedResources {
    /// Serves `served` from now on, in place of whatever served its group and plural. Requests
    /// already resolved finish where they were; new ones come here.
    pub fn serve(&self, served: Served) {
        self.0.insert(served);
    }

    /// Serves `cache` no more: its paths answer as for a resource not served here (forwarded
    /// with a proxy set, else 404). Its watches are the cache's to end ([`Cache::close`]).
    /// Whether it was served.
    pub fn unserve(&self, cache: &Cache) -> bool {
        self.0.remove(cache)
    }

    /// The caches served now.
    pub fn caches(&self) -> Vec<Cache> {
        self.0.caches()
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
