//! Proxy mode's request path: which requests stay local, and forwarding the others through the
//! server's [`Proxy`] with their answers streamed back.

use crate::server::proxy::{HOP_BY_HOP, Proxy};
use crate::server::state::AppState;
use crate::server::status::ApiError;
use axum::http;
use axum::response::IntoResponse;

/// Whether a request path is answered locally when a proxy is set: only the cached resources'
/// own paths (no subresources, no discovery).
pub(crate) fn is_local(st: &AppState, segs: &[&str]) -> bool {
    // Subresources (`/status`) are the upstream's in proxy mode, as everything not cached.
    st.resolve(segs).is_some_and(|t| !t.status)
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
