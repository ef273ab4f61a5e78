//! The HTTP server: the Kubernetes API's paths, parameters and JSON wire format for the resources of
//! an [`EtcdCaches`], so existing clients (kubelet-style watchers, the official Python client,
//! kube-rs, client-go) work unchanged.
//!
//! - `GET /api/v1/{resource}`, `/api/v1/namespaces/{ns}/{resource}`, `.../{name}`, and the same
//!   under `/apis/{group}/{version}`: LIST, GET and WATCH (`?watch=true`) from the cache.
//! - `POST`, `PUT`, `DELETE` on the same paths: writes through to etcd with preconditions.
//! - `/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`: discovery.
//! - `/metrics`, `/readyz`, `/livez`.

mod discovery;
mod metrics;
mod params;
mod status;
mod watch_body;
mod watch_conn;
mod writes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use futures_util::stream;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub use metrics::ServerMetrics;
pub use status::ApiError;

use crate::cache::Cache;
use crate::encode::{Frame, list_parts};
use crate::error::Error;
use crate::etcd::EtcdCaches;
use params::ReadParams;
use watch_body::{WatchEvents, WatcherSlot};

/// Limits and defaults of the server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest accepted request body (Kubernetes: 3 MiB).
    pub max_body_bytes: usize,
    /// Longest accepted field or label selector.
    pub max_selector_len: usize,
    /// Most concurrent watches; more get 429.
    pub max_watchers: usize,
    /// A watch without `timeoutSeconds` ends after a random time in this range (upstream: 30–60 min).
    pub default_watch_timeout: (Duration, Duration),
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_body_bytes: 3 * 1024 * 1024,
            max_selector_len: 4096,
            max_watchers: 200_000,
            default_watch_timeout: (Duration::from_secs(1800), Duration::from_secs(3600)),
        }
    }
}

pub(crate) struct AppState {
    caches: Vec<Cache>,
    etcd: etcd_client::Client,
    config: ServerConfig,
    watchers: Arc<AtomicUsize>,
    metrics: ServerMetrics,
    shutdown: watch::Receiver<bool>,
}

/// A running server's handle: ends every watch stream cleanly when stopped.
pub struct Server {
    state: Arc<AppState>,
    shutdown: watch::Sender<bool>,
}

impl Server {
    /// A server for the caches of `upstream`.
    pub fn new(upstream: &EtcdCaches, config: ServerConfig) -> Server {
        let (shutdown, rx) = watch::channel(false);
        let state = AppState {
            caches: upstream.caches().map(|(_, c)| c.clone()).collect(),
            etcd: upstream.client().clone(),
            config,
            watchers: Arc::new(AtomicUsize::new(0)),
            metrics: ServerMetrics::default(),
            shutdown: rx,
        };
        Server {
            state: Arc::new(state),
            shutdown,
        }
    }

    /// The axum router.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/livez", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_handler))
            .fallback(api)
            .with_state(Arc::clone(&self.state))
    }

    /// Serves HTTP/1.1 on `listener` until `stop` completes; then ends every watch and waits (up to
    /// 10 s) for the connections to finish.
    ///
    /// Connections are served by hyper's HTTP/1 connection directly: an idle watch then costs its
    /// buffers and a small task (the HTTP/1-or-2 auto connection's task is 16 KiB larger, which
    /// doubled the memory of an idle watcher; see design/performance.md).
    ///
    /// # Errors
    /// The listener's I/O error.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let addr: Option<SocketAddr> = listener.local_addr().ok();
        info!(?addr, "serving");
        let service = TowerToHyperService::new(self.router());
        let graceful = GracefulShutdown::new();
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30));
        tokio::pin!(stop);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        // Watch events are small writes on long-lived connections: without
                        // TCP_NODELAY, Nagle's algorithm and delayed ACKs hold them back.
                        if let Err(e) = tcp.set_nodelay(true) {
                            debug!(error = %e, "cannot set TCP_NODELAY");
                        }
                        let (st, service, http, watcher) = (Arc::clone(&self.state), service.clone(), http.clone(), graceful.watcher());
                        tokio::spawn(async move {
                            let mut tcp = tcp;
                            let prefix = match watch_conn::first_request(&mut tcp, &st).await {
                                Ok(watch_conn::FirstRequest::NotAWatch(bytes)) => bytes,
                                Ok(watch_conn::FirstRequest::Served { rest, keep_alive: true }) => rest,
                                Ok(watch_conn::FirstRequest::Served { keep_alive: false, .. }) => return,
                                Ok(watch_conn::FirstRequest::Close) => return,
                                Err(e) => return watch_conn::log_io(&e),
                            };
                            let io = TokioIo::new(watch_conn::Rewind::new(prefix, tcp));
                            // Boxed: the task of an idle fast-path watch then does not carry room
                            // for hyper's connection state (about 4 KiB).
                            if let Err(e) = Box::pin(watcher.watch(http.serve_connection(io, service))).await {
                                debug!(error = %e, "connection ended with an error");
                            }
                        });
                    }
                    Err(e) => {
                        // Out of file descriptors, typically: back off instead of spinning.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = &mut stop => break,
            }
        }
        info!("shutting down: ending watches");
        drop(listener);
        if self.shutdown.send(true).is_err() {
            debug!("no watch was listening for shutdown");
        }
        if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown())
            .await
            .is_err()
        {
            warn!("connections still open 10 s after shutdown");
        }
        Ok(())
    }

    /// Open watches.
    pub fn watchers(&self) -> usize {
        self.state.watchers.load(Ordering::Relaxed)
    }
}

async fn readyz(State(st): State<Arc<AppState>>) -> Response {
    let not_ready: Vec<&str> = st
        .caches
        .iter()
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

async fn metrics_handler(State(st): State<Arc<AppState>>) -> Response {
    let mut kv = st.etcd.kv_client();
    let probe = kv.get("/", Some(etcd_client::GetOptions::new().with_count_only()));
    let etcd_rev = tokio::time::timeout(Duration::from_secs(1), probe)
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|r| r.header().map(|h| h.revision() as u64));
    let text = metrics::render(st.caches.iter().map(|c| (c, etcd_rev)), &st.metrics);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn json_response(code: StatusCode, body: Body) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn wants_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .any(|v| wants_gzip_value(v.as_bytes()))
}

/// Whether an Accept-Encoding value accepts gzip.
pub(crate) fn wants_gzip_value(v: &[u8]) -> bool {
    std::str::from_utf8(v).is_ok_and(|v| {
        v.split(',').any(|enc| {
            enc.split(';')
                .next()
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("gzip"))
        })
    })
}

fn gzip_all(parts: &[Bytes]) -> Bytes {
    use std::io::Write;
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    for p in parts {
        gz.write_all(p)
            .unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
    }
    Bytes::from(gz.finish().unwrap_or_default())
}

/// A response body made of shared pieces, gzipped as one when asked.
fn body_of(parts: Vec<Bytes>, gzip: bool, code: StatusCode) -> Response {
    if gzip {
        let mut r = json_response(code, Body::from(gzip_all(&parts)));
        r.headers_mut().insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static("gzip"),
        );
        r
    } else {
        json_response(
            code,
            Body::from_stream(stream::iter(
                parts.into_iter().map(Ok::<_, std::convert::Infallible>),
            )),
        )
    }
}

/// What a resource path names.
pub(crate) struct Target<'a> {
    pub cache: &'a Cache,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// The resource a path under `/api/{v}/` or `/apis/{g}/{v}/` names (`segs` are the path's segments).
pub(crate) fn resolve<'a>(st: &'a AppState, segs: &[&str]) -> Option<Target<'a>> {
    let (group, version, rest) = match segs {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (plural, namespace, name) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, None, Some(*n)),
        ["namespaces", ns, r] => (*r, Some(*ns), None),
        ["namespaces", ns, r, n] => (*r, Some(*ns), Some(*n)),
        _ => return None,
    };
    let cache = st.caches.iter().find(|c| {
        let d = c.definition();
        d.group == group && d.version == version && d.plural == plural
    })?;
    let namespaced = cache.definition().namespaced;
    // A namespaced object is named within its namespace; a cluster-scoped one has none.
    if (namespaced && name.is_some() && namespace.is_none()) || (!namespaced && namespace.is_some())
    {
        return None;
    }
    Some(Target {
        cache,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
    })
}

async fn api(State(st): State<Arc<AppState>>, req: Request) -> Response {
    match route(&st, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn route(st: &Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_owned();
    let segs: Vec<&str> = path.split('/').skip(1).collect();
    let defs: Vec<_> = st.caches.iter().map(Cache::definition).collect();
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
    let target = resolve(st, &segs).ok_or_else(|| ApiError::no_route(&path))?;
    let gzip = wants_gzip(&parts.headers);
    let query = parts.uri.query();
    let method = parts.method.clone();
    let read_body = || async {
        axum::body::to_bytes(body, st.config.max_body_bytes)
            .await
            .map_err(|_| ApiError::too_large("the request body", st.config.max_body_bytes))
    };
    let mut kv = st.etcd.kv_client();
    let (cache, ns, name) = (
        target.cache,
        target.namespace.as_deref(),
        target.name.as_deref(),
    );
    match (&method, name) {
        (&Method::GET, _) => read(st, cache, ns, name, query, gzip).await,
        (&Method::POST, None) => {
            let body = read_body().await?;
            let obj = writes::create(cache, &mut kv, ns, &body).await?;
            Ok(json_response(StatusCode::CREATED, Body::from(obj)))
        }
        (&Method::PUT, Some(n)) => {
            let body = read_body().await?;
            Ok(json_response(
                StatusCode::OK,
                Body::from(writes::update(cache, &mut kv, ns, n, &body).await?),
            ))
        }
        (&Method::DELETE, Some(n)) => {
            let body = read_body().await?;
            Ok(json_response(
                StatusCode::OK,
                Body::from(writes::delete(cache, &mut kv, ns, n, &body).await?),
            ))
        }
        _ => Err(ApiError::method_not_allowed(method.as_str(), &path)),
    }
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
        return watch(st, cache, ns, &params, gzip).await;
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

/// A watch that has started: its events, or the single ERROR frame of a start older than the
/// window (upstream sends that as an event in a 200 stream, not as an HTTP error).
pub(crate) enum Started {
    Events(WatchEvents),
    TooOld(Frame),
}

/// Starts a watch: the concurrent-watcher limit, the deadline, and the cache's watch.
pub(crate) async fn start_watch(
    st: &Arc<AppState>,
    cache: &Cache,
    ns: Option<&str>,
    params: &ReadParams,
) -> Result<Started, ApiError> {
    let limit = st.config.max_watchers;
    if st.watchers.fetch_add(1, Ordering::Relaxed) >= limit {
        st.watchers.fetch_sub(1, Ordering::Relaxed);
        return Err(ApiError::too_many(
            format!("too many watches: the limit is {limit}"),
            1,
        ));
    }
    let slot = WatcherSlot(Arc::clone(&st.watchers));
    let timeout = params.timeout.unwrap_or_else(|| {
        let (lo, hi) = st.config.default_watch_timeout;
        lo + (hi.saturating_sub(lo)).mul_f64(fastrand::f64())
    });
    let deadline = tokio::time::Instant::now() + timeout;
    match cache.watch(params.watch_options(ns)?).await {
        Ok(mut stream) => {
            stream.bookmark_before(deadline);
            Ok(Started::Events(WatchEvents {
                stream,
                deadline,
                _slot: slot,
            }))
        }
        Err(e @ (Error::Expired { .. } | Error::ContinueExpired { .. })) => Ok(Started::TooOld(
            Frame::error(ApiError::from(e).status_json()),
        )),
        Err(e) => Err(e.into()),
    }
}

async fn watch(
    st: &Arc<AppState>,
    cache: &Cache,
    ns: Option<&str>,
    params: &ReadParams,
    gzip: bool,
) -> Result<Response, ApiError> {
    let mut resp = match start_watch(st, cache, ns, params).await? {
        Started::Events(w) => json_response(
            StatusCode::OK,
            Body::from_stream(watch_body::body(w, st.shutdown.clone(), gzip)),
        ),
        Started::TooOld(frame) => return Ok(body_of(frame.parts().to_vec(), gzip, StatusCode::OK)),
    };
    if gzip {
        resp.headers_mut().insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static("gzip"),
        );
    }
    Ok(resp)
}
