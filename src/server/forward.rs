//! Proxy mode's request path: which requests stay local, and forwarding the others through the
//! server's [`Proxy`] with their answers streamed back. With authentication on, a forwarded
//! request carries its client's identity as impersonation headers (and not the client's own
//! credentials), so the upstream authorizes the client, not the proxy.

use crate::server::auth::{User, impersonate};
use crate::server::proxy::{HOP_BY_HOP, Proxy};
use crate::server::state::AppState;
use crate::server::status::ApiError;
use axum::http;
use axum::response::IntoResponse;

/// Whether a request is answered locally when a proxy is set: only reads (GET, LIST, WATCH) of
/// the cached resources' own paths (no subresources, no discovery). Writes, even of cached
/// resources, are the upstream's: it runs admission, defaulting, server-side apply and dry-run,
/// and sees the client's identity by impersonation; the cache sees the write when its watch
/// brings it, as any other change.
pub(crate) fn is_local(st: &AppState, method: &http::Method, segs: &[&str]) -> bool {
    (method == http::Method::GET || method == http::Method::HEAD)
        // Subresources (`/status`) are the upstream's in proxy mode, as everything not cached.
        && st.resolve(segs).is_some_and(|t| !t.status)
}

/// Forwards one request through the server's proxy and streams the answer back.
pub(crate) async fn forward(
    st: &AppState,
    proxy: &dyn Proxy,
    req: axum::extract::Request,
) -> axum::response::Response {
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
        // The client's credentials were for this server, and any impersonation it asked for
        // was applied here: the upstream sees the proxy's credentials and, below, the identity
        // this server authenticated (and authorized) for the request.
        if !HOP_BY_HOP.contains(&name.as_str())
            && name != http::header::AUTHORIZATION
            && !name.as_str().starts_with("impersonate-")
        {
            out = out.header(name, value);
        }
    }
    if let Some(user) = parts.extensions.get::<std::sync::Arc<User>>() {
        for (name, value) in impersonate::headers_for(user) {
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
