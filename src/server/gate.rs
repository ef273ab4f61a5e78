//! Every request hyper serves (all but `/livez`) passes here first: authentication (401),
//! authorization (403), `--max-requests-inflight` (429), then the handler; the answer is
//! audited when it is a write or a denial (src/server/auth/ has each part). The watch fast path
//! does the same itself (src/server/watch/fast_path.rs).
//!
//! A list or watch is authorized with its field selector parsed here (the Node authorizer reads
//! `spec.nodeName`); the handler parses the query again for the cache. The fast path, where
//! kubelets' watches go, parses once.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::model::Selection;
use crate::server::auth::{Audit, Record, RequestInfo, User};
use crate::server::conn::ConnInfo;
use crate::server::state::AppState;
use crate::server::status::ApiError;

/// Whether a query asks for a watch (`watch=true` in any of Go's boolean spellings).
pub(crate) fn is_watch(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .any(|(k, v)| k == "watch" && matches!(&*v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// What a list or watch selects, for the authorizers (`None` when the selectors do not parse:
/// the handler answers 400 if the request is allowed at all).
fn selection_of(info: &RequestInfo, query: Option<&str>) -> Option<Selection> {
    let r = info.resource.as_ref()?;
    if info.verb != "list" && info.verb != "watch" {
        return None;
    }
    let (mut fields, mut labels) = (String::new(), String::new());
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "fieldSelector" => fields = v.into_owned(),
            "labelSelector" => labels = v.into_owned(),
            _ => {}
        }
    }
    let ns = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
    Selection::parse(ns, &fields, &labels).ok()
}

/// The middleware.
pub(crate) async fn gate(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/livez" {
        return next.run(req).await;
    }
    let started = Instant::now();
    let info = RequestInfo::new(
        req.method().as_str(),
        req.uri().path(),
        is_watch(req.uri().query()),
    );
    let mut user: Option<Arc<User>> = None;
    let resp = match admit(&st, &info, req, &mut user, next).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    let code = resp.status().as_u16();
    if st.auditing() && Audit::wants(&info, code) {
        st.audit.record(&Record {
            user: user.as_deref(),
            info: &info,
            code,
            latency: started.elapsed(),
        });
    }
    resp
}

async fn admit(
    st: &AppState,
    info: &RequestInfo,
    mut req: Request,
    user: &mut Option<Arc<User>>,
    next: Next,
) -> Result<Response, ApiError> {
    // The explicit development listener (`--insecure-listen`, loopback only, never on by
    // default) is kube-apiserver's former insecure port: no authentication or authorization.
    let insecure = req
        .extensions()
        .get::<Arc<ConnInfo>>()
        .is_some_and(|c| c.insecure_listener);
    if let Some(auth) = st.auth.get().filter(|_| !insecure) {
        let cert = req
            .extensions()
            .get::<Arc<ConnInfo>>()
            .and_then(|c| c.client_cert.clone());
        let u = auth
            .authn
            .authenticate(
                cert.as_deref(),
                req.headers()
                    .get(header::AUTHORIZATION)
                    .map(|v| v.as_bytes()),
            )
            .map_err(|e| {
                tracing::debug!(path = %info.path, why = %e.0, "unauthorized");
                ApiError::unauthorized()
            })?;
        *user = Some(Arc::clone(&u));
        let u = crate::server::auth::impersonate::apply(auth, u, req.headers())?;
        *user = Some(Arc::clone(&u));
        let selection = selection_of(info, req.uri().query());
        auth.check(&u, info, selection.as_ref())?;
        req.extensions_mut().insert(u);
    }
    let _permit = if info.is_long_running() {
        None
    } else {
        Some(st.limits.request()?)
    };
    Ok(next.run(req).await)
}
