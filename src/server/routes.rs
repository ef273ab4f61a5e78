//! Requests that hyper serves: discovery, and LIST, GET, WATCH and writes on resource paths.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::cache::{Cache, list_parts};
use crate::server::discovery;
use crate::server::metrics;
use crate::server::params::ReadParams;
use crate::server::response::{body_of, gzip_encoded, json_response, wants_gzip};
use crate::server::state::{AppState, segments};
use crate::server::status::ApiError;
use crate::server::watch;
use crate::server::writes;

pub(crate) async fn readyz(State(st): State<Arc<AppState>>) -> Response {
    let not_ready: Vec<&str> = st
        .caches()
        .filter(|c| !c.is_ready())
        .map(|c| c.definition().plural.as_str())
        .collect();
    if not_ready.is_empty() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", not_ready.join(", ")),
        )
            .into_response()
    }
}

pub(crate) async fn metrics_handler(State(st): State<Arc<AppState>>) -> Response {
    let caches: Vec<&Cache> = st.caches().collect();
    let text = metrics::render(&caches, &st.metrics).await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub(crate) async fn api(State(st): State<Arc<AppState>>, req: Request) -> Response {
    match route(&st, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn route(st: &Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_owned();
    let segs = segments(&path);
    let defs: Vec<_> = st.caches().map(Cache::definition).collect();
    let ok_json =
        |v: serde_json::Value| Ok(json_response(StatusCode::OK, Body::from(v.to_string())));
    match segs.as_slice() {
        ["api"] => return ok_json(discovery::core_versions(&defs)),
        ["apis"] => return ok_json(discovery::groups(&defs)),
        ["api", v] => {
            return discovery::resources(&defs, "", v)
                .map_or_else(|| Err(ApiError::no_route(&path)), ok_json);
        }
        ["apis", g, v] => {
            return discovery::resources(&defs, g, v)
                .map_or_else(|| Err(ApiError::no_route(&path)), ok_json);
        }
        _ => {}
    }
    let target = st.resolve(&segs).ok_or_else(|| ApiError::no_route(&path))?;
    let gzip = wants_gzip(&parts.headers);
    let query = parts.uri.query();
    let method = parts.method.clone();
    let (served, ns, name) = (
        target.served,
        target.namespace.as_deref(),
        target.name.as_deref(),
    );
    let cache = &served.cache;
    if method == Method::GET {
        return read(st, cache, ns, name, query, gzip).await;
    }
    let writes = match (&method, name, &served.writes) {
        (&Method::POST, None, Some(w)) | (&Method::PUT | &Method::DELETE, Some(_), Some(w)) => w,
        _ => return Err(ApiError::method_not_allowed(method.as_str(), &path)),
    };
    if method != Method::DELETE {
        check_content_type(&parts.headers)?;
    }
    let body = axum::body::to_bytes(body, st.config.max_body_bytes)
        .await
        .map_err(|_| ApiError::too_large("the request body", st.config.max_body_bytes))?;
    let (code, obj) = match (&method, name) {
        (&Method::POST, _) => (
            StatusCode::CREATED,
            writes::create(cache, &**writes, ns, &body).await?,
        ),
        (&Method::PUT, Some(n)) => (
            StatusCode::OK,
            writes::update(cache, &**writes, ns, n, &body).await?,
        ),
        (_, Some(n)) => (
            StatusCode::OK,
            writes::delete(cache, &**writes, ns, n, &body).await?,
        ),
        (_, None) => return Err(ApiError::method_not_allowed(method.as_str(), &path)),
    };
    Ok(json_response(code, Body::from(obj)))
}

async fn read(
    st: &Arc<AppState>,
    cache: &Cache,
    ns: Option<&str>,
    name: Option<&str>,
    query: Option<&str>,
    gzip: bool,
) -> Result<Response, ApiError> {
    let mut params = ReadParams::parse(query, st.config.max_selector_len)?;
    if params.watch {
        if let Some(n) = name {
            params.watch_one(n);
        }
        let pump = watch::start(st, cache, ns, &params, gzip).await?;
        let resp = json_response(StatusCode::OK, Body::from_stream(watch::body::body(pump)));
        return Ok(if gzip { gzip_encoded(resp) } else { resp });
    }
    if let Some(n) = name {
        let obj = cache.get(ns, n, params.resource_version).await?;
        return Ok(body_of(vec![obj.json().clone()], gzip, StatusCode::OK));
    }
    let started = Instant::now();
    let list = cache.list(&params.list_options(ns)?).await?;
    st.metrics
        .observe_list(&cache.definition().plural, started.elapsed());
    Ok(body_of(
        list_parts(cache.definition(), &list),
        gzip,
        StatusCode::OK,
    ))
}

/// A write body must be JSON: `application/json` (any parameters), or no Content-Type at all, which
/// upstream reads as its first supported type, JSON. Anything else is 415, as upstream: a browser
/// page can send `text/plain` or a form cross-site without a preflight, and must not create objects.
/// (YAML and protobuf bodies are 415 until they are supported.)
fn check_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    let essence = text.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    #[test]
    fn write_bodies_must_be_json() {
        let with = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            check_content_type(&h).map_err(|e| e.code())
        };
        assert!(check_content_type(&HeaderMap::new()).is_ok());
        for ok in ["application/json", "Application/JSON; charset=utf-8"] {
            assert_eq!(with(ok), Ok(()), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
            "",
        ] {
            assert_eq!(with(bad), Err(415), "{bad}");
        }
    }
}
