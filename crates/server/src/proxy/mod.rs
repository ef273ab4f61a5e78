//! Proxy mode: every request the server does not answer from a cache (other resources,
//! subresources, discovery, `/version`, ...) goes to an upstream API server through a [`Proxy`],
//! and its answer streams back unchanged. The server knows only this contract; the binary plugs in
//! one built on kube-rs's client (`watchcache serve --upstream-kubeconfig`).
//!
//! Discovery is the upstream's when proxying: it defines a superset of the cached resources, and
//! clients must see the resources that are only proxied. An upstream that cannot be reached is a
//! 503 `ServiceUnavailable` Status, as kube-apiserver's aggregator answers for a dead backend.
//!
//! `forward.rs`: which requests stay local, and forwarding the others.
//!
//! Layer: above `auth/` (a forwarded request carries its client's identity), `metrics.rs`,
//! `http/` and `transport/`, which it may import; below `watch/` and `endpoints/`.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::http;
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;

use watchcache::BoxFuture;

pub(crate) mod forward;

/// A streamed response body from the upstream.
pub type ProxyBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Forwards requests to an upstream API server.
pub trait Proxy: Send + Sync + 'static {
    /// Sends `req` (path and query relative to the upstream's base URL; the body already read)
    /// and returns its answer, whose body streams.
    ///
    /// # Errors
    /// Why the upstream could not be reached (answered as 503).
    fn forward(
        &self,
        req: http::Request<Bytes>,
    ) -> BoxFuture<'static, Result<http::Response<ProxyBody>, String>>;
}

/// Headers that belong to one hop and are not forwarded either way.
pub(crate) const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
];

/// What proxy mode needs: the proxy (set once, before serving), and which resources'
/// consistent reads go up for now. What stays local is a served resource's read
/// ([`forward::local_read`], given the served set).
pub(crate) struct ProxyContext {
    /// Proxy mode: where requests for anything but the cached resources go.
    pub(crate) proxy: OnceLock<Arc<dyn Proxy>>,
    /// Resources whose consistent reads go to the upstream for now.
    pub(crate) stalled: StalledReads,
    /// `--max-body-bytes`: a forwarded upgrade's body is read here.
    pub(crate) max_body_bytes: usize,
    /// `ServerConfig::forward_consistent_gets`.
    pub(crate) forward_consistent_gets: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_resource_is_remembered_per_resource() {
        let s = StalledReads::default();
        assert!(!s.is_stalled("/registry/pods/"));
        s.mark("/registry/pods/");
        assert!(s.is_stalled("/registry/pods/"));
        assert!(!s.is_stalled("/registry/configmaps/"));
    }
}
