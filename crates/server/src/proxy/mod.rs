//! Proxy mode: every request the server does not answer from a cache (other resources,
//! subresources, discovery, `/version`, ...) goes to an upstream API server through a [`Proxy`],
//! and its answer streams back unchanged. The server knows only this contract; the binary plugs in
//! one built on kube-rs's client (`watchcache serve --upstream-kubeconfig`).
//!
//! Discovery is the upstream's when proxying: it defines a superset of the cached resources, and
//! clients must see the resources that are only proxied. An upstream that cannot be reached is a
//! 503 `ServiceUnavailable` Status, as kube-apiserver's aggregator answers for a dead backend.

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
