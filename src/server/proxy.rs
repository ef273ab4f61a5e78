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

use crate::cache::BoxFuture;

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

/// Whether a request path is answered locally when a proxy is set: only the cached resources'
/// own paths (no subresources, no discovery).
pub(crate) fn is_local(st: &crate::server::state::AppState, segs: &[&str]) -> bool {
    st.resolve(segs).is_some()
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

/// Forwards one request through the server's proxy and streams the answer back.
pub(crate) async fn forward(
    st: &crate::server::state::AppState,
    proxy: &dyn Proxy,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;

    use crate::server::status::ApiError;

    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, st.config.max_body_bytes).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("the request body could not be read: {e}"),
            )
            .into_response();
        }
    };
    let uri = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let mut out = http::Request::builder().method(parts.method).uri(&uri);
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out = out.header(name, value);
        }
    }
    let out = match out.body(body) {
        Ok(r) => r,
        Err(e) => {
            return ApiError::bad_request(format!("cannot forward {uri}: {e}")).into_response();
        }
    };
    match proxy.forward(out).await {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            let mut r = axum::response::Response::new(axum::body::Body::new(body));
            *r.status_mut() = parts.status;
            for (name, value) in &parts.headers {
                if !HOP_BY_HOP.contains(&name.as_str()) {
                    r.headers_mut().append(name, value.clone());
                }
            }
            r
        }
        Err(why) => {
            tracing::warn!(%uri, error = %why, "upstream unavailable for a proxied request");
            ApiError::new(
                503,
                "ServiceUnavailable",
                format!("the upstream API server is unavailable: {why}"),
            )
            .into_response()
        }
    }
}
