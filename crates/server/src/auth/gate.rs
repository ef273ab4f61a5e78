//! Every request hyper serves (all but `/livez`) passes here first: admission (`filters.rs`:
//! authentication, impersonation, authorization, the request parsed once), then, for a request
//! that is not long-running, its `--max-requests-inflight` permit taken and its body read into
//! one buffer (`http/body.rs`), all within `--request-timeout`, then the handler; the answer is audited
//! when it is a write or a denial. The watch fast path runs the same admission
//! (crates/server/src/watch/fast_path.rs).
//!
//! Why the permit comes before the body, as in kube-apiserver: the bodies read at once are then
//! at most the server's seats, each at most `--max-body-bytes` on the wire. Read before
//! it, they were bounded only by the connections and their streams (100 a connection). Unlike
//! kube-apiserver, a body that stalls gives its seat back until it goes on
//! ([`with_body_read`]): a client trickling its body holds no seat (issue 20, item 4), only the
//! buffer of what it has sent.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::AuthContext;
use crate::auth::filters::{self, Admission, Incoming};
use crate::http::body;
use crate::http::params::ReadParams;
use crate::http::status::ApiError;
use crate::metrics::RequestKey;
use crate::transport::H2Framing;
use crate::transport::conn::ConnInfo;
use crate::transport::deadline::ResponseDeadline;

/// The query of a read as admission parsed it, handed to the handler (a request extension): the
/// handler serves exactly what was authorized.
#[derive(Clone)]
pub(crate) struct ParsedRead(pub Result<ReadParams, ApiError>);

/// The middleware.
pub(crate) async fn gate(State(cx): State<Arc<AuthContext>>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/livez" {
        return next.run(req).await;
    }
    let started = Instant::now();
    let conn = req
        .extensions()
        .get::<Arc<ConnInfo>>()
        .cloned()
        .unwrap_or_default();
    if let Some(clock) = conn.clock.get() {
        clock.disarm();
    }
    let mut adm = filters::admit(
        &cx,
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
    let key = cx.request_key(&adm.info);
    let resp = match &adm.decision {
        Err(e) => e.clone().into_response(),
        Ok(()) => serve(&cx, &conn, &mut adm, key.clone(), req, next).await,
    };
    let code = resp.status().as_u16();
    adm.audit(&cx, code, started);
    cx.metrics.observe_request(&key, code, started);
    resp
}

/// Serves an admitted request: a long-running one as it comes; any other with its body read
/// and its permit taken first, the whole within `--request-timeout`.
async fn serve(
    cx: &AuthContext,
    conn: &ConnInfo,
    adm: &mut Admission,
    key: RequestKey,
    mut req: Request,
    next: Next,
) -> Response {
    if let Some(u) = &adm.user {
        req.extensions_mut().insert(Arc::clone(u));
    }
    // A watch's handler keeps its labels for `apiserver_longrunning_requests`.
    req.extensions_mut().insert(key);
    if let Some(read) = adm.read.take() {
        req.extensions_mut().insert(ParsedRead(read));
    }
    if adm.is_long_running() {
        return next.run(req).await;
    }
    let deadline = tokio::time::Instant::now() + cx.request_timeout;
    let h2 = req.version() == axum::http::Version::HTTP_2;
    let adm = &*adm;
    let served = async move {
        // The permit first: the bodies being read at once are at most the server's seats, each
        // at most `--max-body-bytes` (read before it, they were bounded by nothing but
        // the connections' streams). A body that stalls gives its seat back until it goes on.
        let mut permit = Some(adm.permit(cx).await?);
        let req = with_body_read(req, cx.max_body_bytes, &mut permit, || adm.permit(cx)).await?;
        Ok::<_, ApiError>(next.run(req).await)
    };
    let resp = match tokio::time::timeout_at(deadline, served).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => e.into_response(),
        Err(_) => {
            tracing::debug!(timeout = ?cx.request_timeout, "request timed out");
            ApiError::request_timeout().into_response()
        }
    };
    // The timeout covers the whole response: its transport ends it at the same deadline
    // (`transport/deadline.rs`).
    if h2 {
        let mut resp = resp;
        resp.extensions_mut().insert(ResponseDeadline(deadline));
        resp
    } else if let Some(clock) = conn.clock.get() {
        resp.map(|body| clock.arm(deadline, body))
    } else {
        resp
    }
}

/// How long a seated body's reader waits for [`STALL_BYTES`] before it gives its seat back.
const STALL_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);
/// What a seated body must bring in each [`STALL_WINDOW`] to keep its seat: 40 KB/s.
const STALL_BYTES: usize = 4 * 1024;

/// The request with its body read whole into one buffer (at most `limit` bytes on the wire:
/// 413 beyond, as upstream; `http/body.rs`), read while it holds a seat (`permit`). A body that brings
/// less than [`STALL_BYTES`] in a [`STALL_WINDOW`] gives the seat back, waits for its next frame
/// without one, and queues again (`retake`) before it reads on: a client trickling its body holds
/// nobody out for longer than a window (issue 20, item 4), and what it holds meanwhile is what it
/// has sent (issue 35, item 1).
async fn with_body_read<P, F>(
    req: Request,
    limit: usize,
    permit: &mut Option<P>,
    retake: impl Fn() -> F,
) -> Result<Request, ApiError>
where
    F: Future<Output = Result<P, ApiError>>,
{
    use hyper::body::Body as _;
    let (mut parts, body) = req.into_parts();
    // Taken out: what follows is one buffer, with no framing left to count.
    let framing = parts.extensions.remove::<H2Framing>();
    if body.is_end_stream() {
        // No body (most reads): no reader, no timer.
        return Ok(Request::from_parts(parts, body));
    }
    let mut reader = body::Reader::new(body, &parts.headers, framing.as_ref(), limit)?;
    loop {
        if permit.is_none() {
            let more = reader.step().await?;
            *permit = Some(retake().await?);
            if !more {
                break;
            }
        }
        let (at, window) = (reader.len(), tokio::time::sleep(STALL_WINDOW));
        tokio::pin!(window);
        let ended = loop {
            tokio::select! {
                biased;
                more = reader.step() => if !more? { break true },
                () = &mut window => break false,
            }
        };
        if ended {
            break;
        }
        if reader.len() - at < STALL_BYTES {
            *permit = None;
        }
    }
    Ok(Request::from_parts(parts, Body::from(reader.finish())))
}
