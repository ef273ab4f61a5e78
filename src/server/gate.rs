//! Every request hyper serves (all but `/livez`) passes here first: admission (`filters.rs`:
//! authentication, impersonation, authorization, the request parsed once), then, for a request
//! that is not long-running, its body read whole and its `--max-requests-inflight` permit taken,
//! all within `--request-timeout`, then the handler; the answer is audited when it is a write or a
//! denial. The watch fast path runs the same admission (src/server/watch/fast_path.rs).
//!
//! Why the body is read here: a permit taken before the body arrives is held for as long as the
//! client takes to send it, so four clients trickling bodies held `--max-requests-inflight 4`
//! against everyone (issue 20, item 4). Read first, under the request's deadline, the permit is
//! held only while the request is served, and a stalled body ends at the deadline with upstream's
//! 504.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::server::conn::ConnInfo;
use crate::server::filters::{self, Admission, Incoming};
use crate::server::params::ReadParams;
use crate::server::state::AppState;
use crate::server::status::ApiError;

/// The query of a read as admission parsed it, handed to the handler (a request extension): the
/// handler serves exactly what was authorized.
#[derive(Clone)]
pub(crate) struct ParsedRead(pub Result<ReadParams, ApiError>);

/// The middleware.
pub(crate) async fn gate(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/livez" {
        return next.run(req).await;
    }
    let started = Instant::now();
    let conn = req
        .extensions()
        .get::<Arc<ConnInfo>>()
        .cloned()
        .unwrap_or_default();
    let mut adm = filters::admit(
        &st,
        &Incoming {
            method: req.method().as_str(),
            path: req.uri().path(),
            query: req.uri().query(),
            authorization: req
                .headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
            headers: Some(req.headers()),
            conn: &conn,
        },
    );
    let resp = match &adm.decision {
        Err(e) => e.clone().into_response(),
        Ok(()) => serve(&st, &mut adm, req, next).await,
    };
    adm.audit(&st, resp.status().as_u16(), started);
    resp
}

/// Serves an admitted request: a long-running one as it comes; any other with its body read
/// and its permit taken first, the whole within `--request-timeout`.
async fn serve(st: &AppState, adm: &mut Admission, mut req: Request, next: Next) -> Response {
    if let Some(u) = &adm.user {
        req.extensions_mut().insert(Arc::clone(u));
    }
    if let Some(read) = adm.read.take() {
        req.extensions_mut().insert(ParsedRead(read));
    }
    if adm.is_long_running() {
        return next.run(req).await;
    }
    let adm = &*adm;
    let served = async move {
        let req = with_body_read(req, st.config.max_body_bytes).await?;
        let _permit = adm.permit(st).await?;
        Ok::<_, ApiError>(next.run(req).await)
    };
    match tokio::time::timeout(st.config.request_timeout, served).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => e.into_response(),
        Err(_) => {
            tracing::debug!(timeout = ?st.config.request_timeout, "request timed out");
            ApiError::request_timeout().into_response()
        }
    }
}

/// The request with its body read whole (at most `limit` bytes: 413 beyond, as upstream).
async fn with_body_read(req: Request, limit: usize) -> Result<Request, ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|e| {
        let e = e.into_inner();
        if e.is::<http_body_util::LengthLimitError>() {
            ApiError::too_large(limit)
        } else {
            ApiError::bad_request(format!("the request body could not be read: {e}"))
        }
    })?;
    Ok(Request::from_parts(parts, Body::from(bytes)))
}
