//! Requests that hyper serves: discovery, and LIST, GET and WATCH on resource paths; a write gets
//! 405 (without a proxy, this server is read-only).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use bytes::Bytes;

use crate::auth::User;
use crate::auth::gate::ParsedRead;
use crate::endpoints::discovery::{self, Entry};
use crate::endpoints::openapi;
use crate::endpoints::{ApiContext, HealthContext};
use crate::http::lifecycle::Phase;
use crate::http::negotiate::{Answer, Format, FromQuery, Negotiate, watch_encoder};
use crate::http::params::ReadParams;
use crate::http::response::{body_of, gzip_encoded, json_response, wants_gzip};
use crate::http::served::{Target, segments};
use crate::http::status::ApiError;
use crate::metrics::{self, RequestKey};
use crate::proxy::forward;
use crate::watch::{self, Wire};
use tracing::debug;
use watchcache::Cache;
use watchcache::wire::body::Variant;
use watchcache::wire::convert::IncludeObject;

pub(crate) async fn readyz(State(st): State<Arc<HealthContext>>) -> Response {
    // Asked to stop: load balancers take this server out while it still serves (as
    // kube-apiserver's `[-]shutdown failed` check, 500).
    if st.lifecycle.phase() != Phase::Serving {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "not ready: shutting down",
        )
            .into_response();
    }
    let caches = st.served.caches();
    let mut not_ready: Vec<&str> = caches
        .iter()
        // A resource the upstream does not serve is not waited for.
        .filter(|c| !c.is_ready() && !c.is_absent())
        .map(|c| c.definition().plural.as_str())
        .collect();
    if st.auth.auth.get().is_some_and(|a| !a.ready()) {
        not_ready.push("rbac (the authorizer has not read the RBAC caches yet)");
    }
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

pub(crate) async fn metrics_handler(State(st): State<Arc<HealthContext>>) -> Response {
    let caches = st.served.caches();
    let caches: Vec<&Cache> = caches.iter().collect();
    let text = metrics::render(&caches, &st.metrics, st.auth.limits.inflight()).await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub(crate) async fn api(State(st): State<Arc<ApiContext>>, req: Request) -> Response {
    let protobuf_errors = errors_in_protobuf(&st, &req);
    let Some(p) = st.proxy.proxy.get() else {
        return route(&st, req)
            .await
            .unwrap_or_else(|e| e.into_response_as(protobuf_errors));
    };
    let segs = segments(req.uri().path());
    let Some(target) = forward::local_read(&st.served, req.method(), &segs) else {
        return forward::forward(&st.proxy, &**p, req).await;
    };
    // A read the cache could not show fresh in time (504: the upstream's bookmarks did not reach
    // its current resourceVersion, as with a watchcache root on an etcd without reliable progress
    // notifications) is the upstream's to answer, as kube-apiserver hands such reads to etcd; and
    // for a while after, that resource's consistent reads go there at once.
    let prefix = &target.served.cache.definition().prefix;
    let consistent = forward::is_consistent_read(req.uri());
    // So is a consistent GET of one object where the configuration says the upstream answers
    // it as cheaply as the cache could prove itself fresh (proxy mode).
    let upstreams_get = st.proxy.forward_consistent_gets && target.name.is_some();
    if consistent && (upstreams_get || st.proxy.stalled.is_stalled(prefix)) {
        return forward::forward(&st.proxy, &**p, req).await;
    }
    // Local reads are GETs: they have no body to keep. A watch is never handed up: it would hold
    // an upstream watch for its whole life (a fleet of kubelets starting would each hold one);
    // its client retries the 504 as it retries upstream's.
    let again = forward::replay(&req);
    let watch = crate::http::params::is_watch(again.uri().query());
    match route(&st, req).await {
        Ok(r) => r,
        Err(e) if e.code() == 504 && !watch => {
            debug!(resource = %prefix, "a read timed out in the cache; answered by the upstream");
            if consistent {
                st.proxy.stalled.mark(prefix);
            }
            forward::forward(&st.proxy, &**p, again).await
        }
        Err(e) => e.into_response_as(protobuf_errors),
    }
}

/// Whether this request's errors are answered in protobuf: its client prefers protobuf for a
/// built-in resource (kube-apiserver negotiates its `Status` answers like any other).
fn errors_in_protobuf(st: &ApiContext, req: &Request) -> bool {
    let accepts_protobuf = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.as_bytes().windows(8).any(|w| w == b"protobuf"));
    if !accepts_protobuf {
        return false;
    }
    let segs = segments(req.uri().path());
    st.served.resolve(&segs).is_some_and(|t| {
        matches!(
            Format::negotiate_for(
                req.headers(),
                Answer::Written,
                t.served.cache.definition().has_protobuf(),
            ),
            Ok(Format::Protobuf)
        )
    })
}

async fn route(st: &ApiContext, req: Request) -> Result<Response, ApiError> {
    let (mut parts, _body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_owned();
    let segs = segments(&path);
    let served_now = st.served.snapshot();
    let entries: Vec<Entry<'_>> = served_now
        .iter()
        .flat_map(|s| discovery::entries_of(s.cache.definition()))
        .collect();
    let ok_json =
        |v: serde_json::Value| Ok(json_response(StatusCode::OK, Body::from(v.to_string())));
    let discovery_format = || Format::negotiate(&parts.headers, Answer::Discovery);
    match segs.as_slice() {
        ["version"] => return ok_json(discovery::version()),
        ["openapi", ..] => {
            let docs = {
                let generation = st.served.generation();
                let mut built = st.openapi.lock();
                match &*built {
                    Some((g, d)) if *g == generation => Arc::clone(d),
                    _ => {
                        let d = Arc::new(openapi::Documents::build(&entries));
                        *built = Some((generation, Arc::clone(&d)));
                        d
                    }
                }
            };
            let doc = match segs.as_slice() {
                ["openapi", "v2"] => {
                    // kubectl asks for v2 in protobuf only; this server writes it in JSON.
                    Format::negotiate(&parts.headers, Answer::Plain)?;
                    Some(docs.v2.clone())
                }
                ["openapi", "v3"] => Some(docs.v3_index.clone()),
                ["openapi", "v3", rest @ ..] => docs.v3.get(&rest.join("/")).cloned(),
                _ => None,
            };
            return doc.map_or_else(
                || Err(ApiError::no_route(&path)),
                |d| Ok(json_response(StatusCode::OK, Body::from(d))),
            );
        }
        [root @ ("api" | "apis")] => {
            let core = *root == "api";
            return Ok(match discovery_format()? {
                Format::AggregatedDiscovery => typed_response(
                    StatusCode::OK,
                    Format::AggregatedDiscovery,
                    Answer::Discovery,
                    Body::from(discovery::aggregated(&entries, core).to_string()),
                ),
                _ if core => ok_json(discovery::core_versions(&entries))?,
                _ => ok_json(discovery::groups(&entries))?,
            });
        }
        ["api", v] => {
            discovery_format()?;
            return discovery::resources(&entries, "", v)
                .map_or_else(|| Err(ApiError::no_route(&path)), ok_json);
        }
        ["apis", g, v] => {
            discovery_format()?;
            return discovery::resources(&entries, g, v)
                .map_or_else(|| Err(ApiError::no_route(&path)), ok_json);
        }
        _ => {}
    }
    let method = parts.method.clone();
    let reading = method == Method::GET || method == Method::HEAD;
    let target = st
        .served
        .resolve(&segs)
        .ok_or_else(|| ApiError::no_route(&path))?;
    let gzip = wants_gzip(&parts.headers);
    let query = parts.uri.query();
    let cache = &target.served.cache;
    // HEAD is a GET whose body hyper leaves out.
    if reading {
        // The query as admission parsed (and authorized) it; parsed here only when the router
        // is served without the gate.
        let params = match parts.extensions.remove::<ParsedRead>() {
            Some(ParsedRead(p)) => p?,
            None => ReadParams::parse(query, st.max_selector_len)?,
        };
        let user = parts.extensions.get::<Arc<User>>().map(|u| &**u);
        let key = parts.extensions.get::<RequestKey>();
        let origin = cache.origin();
        return read(
            st,
            &target,
            &parts.headers,
            (query, params),
            gzip,
            (user, key),
        )
        .await
        .map(|mut resp| {
            // Revisions of another origin mean nothing here: a cache following this one
            // starts over when it changes (see `Cache::origin`).
            if let Some(o) = origin
                && let Ok(v) = header::HeaderValue::from_str(&format!("{o:016x}"))
            {
                resp.headers_mut().insert(watchcache::ORIGIN_HEADER, v);
            }
            resp
        });
    }
    // Writes are kube-apiserver's (its registry and admission); without one to forward them to
    // (`Server::with_proxy`), this server is a read-only cache of the etcd it reads.
    Err(match method {
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => {
            ApiError::read_only(method.as_str(), &path)
        }
        _ => ApiError::method_not_allowed(method.as_str(), &path),
    })
}

/// A read of what `target` names, from its cache, at the path's version.
async fn read(
    st: &ApiContext,
    target: &Target,
    headers: &axum::http::HeaderMap,
    (query, mut params): (Option<&str>, ReadParams),
    gzip: bool,
    (user, key): (Option<&User>, Option<&RequestKey>),
) -> Result<Response, ApiError> {
    let cache = &target.served.cache;
    let (ns, name) = (target.namespace.as_deref(), target.name.as_deref());
    // Another served version of a CRD than the cache's: its objects go out converted to it.
    let other_version = target.converts_version();
    if target.status && params.watch {
        return Err(ApiError::method_not_allowed(
            "WATCH",
            "a /status subresource",
        ));
    }
    let answer = if params.watch || name.is_some() {
        Answer::Object
    } else {
        Answer::List
    };
    let def = target.def();
    let (format, fields) = Format::negotiate_fields(headers, answer, def.has_protobuf())?;
    let include = IncludeObject::from_query(query)?;
    let variant = Variant {
        format,
        fields,
        include,
        other_version,
    };
    let typed = |r: Response| retype(r, format, answer);
    if params.watch {
        if let Some(n) = name {
            params.watch_one(n);
        }
        let opts = params.watch_options(ns)?;
        target.check_fields(&opts.selection)?;
        let encoder = watch_encoder(def, format, include, fields, other_version, || {
            st.metrics.conversions(&def.plural, format, fields)
        });
        let pump = watch::start(
            &st.watches,
            cache,
            opts,
            params.timeout,
            gzip,
            encoder,
            user,
            key,
        )
        .await?;
        let content_type = pump.content_type();
        // The pump goes out with the head; the transport makes it the body (`watch/body.rs`).
        let mut resp = json_response(StatusCode::OK, Body::empty());
        resp.extensions_mut()
            .insert(watch::body::WatchResponse::new(pump));
        let mut resp = typed(if gzip { gzip_encoded(resp) } else { resp });
        // A protobuf watch names its stream framing (a JSON one, its `as=` conversion: typed).
        if content_type != Wire::Json.content_type() {
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(content_type),
            );
        }
        return Ok(resp);
    }
    if let Some(n) = name {
        let obj = cache.get(ns, n, params.resource_version).await?;
        let parts = variant.object(def, &obj)?;
        st.metrics
            .count_sent(def, false, parts.iter().map(Bytes::len).sum());
        return Ok(typed(body_of(parts, gzip, StatusCode::OK)));
    }
    let started = Instant::now();
    let opts = params.list_options(ns)?;
    target.check_fields(&opts.selection)?;
    let list = cache.list(&opts).await?;
    st.metrics.observe_list(&def.plural, started.elapsed());
    let parts = variant.list(def, &list)?;
    st.metrics
        .count_sent(def, true, parts.iter().map(Bytes::len).sum());
    Ok(typed(body_of(parts, gzip, StatusCode::OK)))
}

/// A response labelled with its format's Content-Type.
fn typed_response(code: StatusCode, format: Format, answer: Answer, body: Body) -> Response {
    retype(json_response(code, body), format, answer)
}

/// Sets the Content-Type of a JSON response to the negotiated format's.
fn retype(mut r: Response, format: Format, answer: Answer) -> Response {
    if format != Format::Json
        && let Ok(v) = header::HeaderValue::from_str(&format.content_type(answer))
    {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}
