//! watchcache's HTTP server (the crate `watchcache-server`): the Kubernetes API's paths,
//! parameters and JSON wire format for a set of [`Served`] resources, so existing clients
//! (kubelet-style watchers, the official Python client, kube-rs, client-go) work unchanged. It
//! depends on the core (`watchcache`: its model, wire and cache, no upstream) and on the caches it
//! is given: any upstream (etcd, a [`MemorySource`](watchcache::MemorySource), another) can be
//! served.
//!
//! - `GET /api/v1/{resource}`, `/api/v1/namespaces/{ns}/{resource}`, `.../{name}`, and the same
//!   under `/apis/{group}/{version}`: LIST, GET and WATCH (`?watch=true`) from the cache.
//! - `POST`, `PUT`, `PATCH`, `DELETE` on the same paths and their subresources: 405. Writes are
//!   kube-apiserver's (its registry and admission): this server forwards them with
//!   [`Server::with_proxy`], and is a read-only cache without it.
//! - `/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`: discovery.
//! - `/metrics`, `/readyz`, `/livez`.
//! - With [`Server::with_proxy`], everything but reads of the served resources (writes, other
//!   resources, subresources, discovery) is forwarded to an upstream API server and streamed back,
//!   with the client's identity as impersonation headers.
//!
//! Organised by job, in layers (lowest first; a module imports only its own folder and those
//! below it: design/architecture.md, "The server crate's modules", checked by
//! `scripts/check-server-layers`):
//!
//! | module | job |
//! |---|---|
//! | `config.rs` | [`ServerConfig`]: limits and defaults |
//! | `transport/` | sockets, TLS, client certificates, HTTP/2 with h2 (the only user of h2): what it serves is given down to it |
//! | `http/` | the API's HTTP vocabulary: `Status` errors, query parameters, negotiation, bodies, the served set and paths, the server's phase |
//! | `metrics.rs` | the metrics registry and `/metrics`' text |
//! | `auth/` | authentication, authorization (RBAC, Node), per-client limits, the audit log; admission on both paths (`filters.rs`) and hyper's gate (`gate.rs`) |
//! | `proxy/` | proxy mode: the [`Proxy`] contract; what stays local, forwarding the rest |
//! | `watch/` | watch responses: start, the one pump loop, frames, the fast path, hyper's body |
//! | `endpoints/` | what the router answers: reads, discovery, OpenAPI, `/readyz`, `/metrics` |
//! | `state.rs` | every job's context, built once |
//! | `lib.rs` | the accept loop, connections, graceful shutdown; the transport's service |
//!
//! # Examples
//! A cache fed in process, served over HTTP (read-only: the process writes through its source):
//! ```no_run
//! use watchcache_server::{Served, Server, ServerConfig};
//! use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef};
//!
//! # async fn run() -> std::io::Result<()> {
//! let (cache, writer) = Cache::new(ResourceDef::builtin("pods").unwrap(), CacheConfig::default());
//! let source = MemorySource::new(writer, 1, []);
//! source.put("/registry/pods/default/a", r#"{"metadata":{"name":"a","namespace":"default"}}"#)
//!     .unwrap();
//! let server = Server::new(ServerConfig::default(), [Served::new(cache)]);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, std::future::pending()).await
//! # }
//! ```

pub mod auth;
mod config;
mod endpoints;
// The property test of shared state over HTTP (reqwest, a dev-dependency, is its client).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
pub(crate) mod http;
mod metrics;
mod proxy;
mod state;
pub(crate) mod transport;
#[cfg(test)]
mod unchanged;
pub(crate) mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::watch as signal;
use tower::Service;
use tracing::{debug, info, warn};

/// Whether the server's HTTP/2 is h2 with watchcache's patch (`vendor/h2`, the crate
/// `watchcache-h2`), which keeps an idle connection's buffers at zero: always `true`, and named
/// so that an embedder can prove it at compile time
/// (`const _: () = assert!(watchcache_server::H2_PATCHED);`, as `tests/embed-crate` does).
pub const H2_PATCHED: bool = transport::http2::H2_PATCHED;

pub use crate::http::served::{Served, ServedResources};
pub use crate::http::status::ApiError;
pub use config::ServerConfig;
pub use metrics::{HeapBytes, ServerMetrics, count_heap_with, mimalloc_block};
pub use proxy::{Proxy, ProxyBody};
pub use transport::tls::{TlsConfig, TlsError};

use crate::http::lifecycle::Phase;
use state::AppState;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use transport::conn::ConnInfo;
use transport::tls::{self, Tls};
use transport::{accept, deadline, http2, sealed};
use watch::fast_path::{self, FirstRequest};

/// A running server's handle: ends every watch stream cleanly when stopped.
pub struct Server {
    state: Arc<AppState>,
    /// Connections: GOAWAY, idle ones closed (`AppState::shutdown`).
    shutdown: signal::Sender<bool>,
    /// The wheel's: every watch still open ends at once.
    stop_watches: signal::Sender<bool>,
    tls: Option<Arc<Tls>>,
    insecure: Option<tokio::net::TcpListener>,
}

/// Most concurrent HTTP/2 streams per connection (kube-apiserver's default).
const H2_MAX_STREAMS: u32 = 100;
/// HTTP/2 receive window per stream: request bodies (forwarded writes, up to 3 MiB) flow in 256 KiB steps,
/// as kube-apiserver's; windows cost memory only while data is in flight.
const H2_STREAM_WINDOW: u32 = 256 * 1024;
/// HTTP/2 receive window of a connection.
const H2_CONN_WINDOW: u32 = 1024 * 1024;
/// Most bytes queued for sending per HTTP/2 stream before its body is no longer polled: a watch
/// whose client does not read stops here and its watcher's own queue takes over.
const H2_SEND_BUF: usize = 64 * 1024;
/// The HPACK dynamic table a client may fill on an HTTP/2 connection (SETTINGS_HEADER_TABLE_SIZE):
/// none. h2 keeps each indexed header as a slice of the read buffer it arrived in (or of its
/// Huffman scratch buffer), so up to 4 KiB of table could pin those buffers for as long as the
/// connection lives (Go's client indexes even each request's `:path`), and the patched h2
/// (vendor/h2) could not free them when idle; without a table a request's headers cost a
/// connection nothing once decoded. What it costs: a client re-sends its
/// headers in full with every request, a few hundred bytes a watch or list.
const H2_HEADER_TABLE: u32 = 0;

/// An HTTP/2 connection's settings (`transport/http2.rs`).
const H2_SETTINGS: http2::Settings = http2::Settings {
    max_streams: H2_MAX_STREAMS,
    stream_window: H2_STREAM_WINDOW,
    conn_window: H2_CONN_WINDOW,
    send_buf: H2_SEND_BUF,
    header_table: H2_HEADER_TABLE,
};

impl Server {
    /// A server for these resources.
    pub fn new(config: ServerConfig, served: impl IntoIterator<Item = Served>) -> Server {
        let (shutdown, rx) = signal::channel(false);
        let (stop_watches, watches_rx) = signal::channel(false);
        let state = AppState::new(config, served.into_iter().collect(), rx, watches_rx);
        Server {
            state: Arc::new(state),
            shutdown,
            stop_watches,
            tls: None,
            insecure: None,
        }
    }

    /// Serves TLS (HTTP/2 or HTTP/1.1 by ALPN) on the listener given to [`Server::serve`], with
    /// the certificate, key and client CA of `config`, reloaded when the files change.
    ///
    /// # Errors
    /// The files do not make a TLS configuration (unreadable, key not matching the certificate).
    pub fn with_tls(mut self, config: TlsConfig) -> Result<Server, TlsError> {
        self.tls = Some(Tls::load(config)?);
        Ok(self)
    }

    /// Also serves plain HTTP/1.1 on `listener` (for development next to a TLS port: bind it to
    /// loopback). Its connections count against the same `max_connections`.
    #[must_use]
    pub fn with_insecure_listener(mut self, listener: tokio::net::TcpListener) -> Server {
        self.insecure = Some(listener);
        self
    }

    /// Proxy mode: every request but reads (GET, LIST, WATCH) of the served resources (writes,
    /// other resources, subresources, discovery, `/version`) goes to `proxy` and streams back
    /// unchanged; 503 when it cannot be reached. Without a proxy the server is read-only: a write
    /// is 405 (writes are kube-apiserver's).
    #[must_use]
    pub fn with_proxy(self, proxy: Arc<dyn Proxy>) -> Server {
        if self.state.proxy.proxy.set(proxy).is_err() {
            warn!("a proxy was already set; keeping the first");
        }
        self
    }

    /// Authentication and authorization: every request (but `/livez`) is authenticated and
    /// authorized by `config`'s methods and modes; without it, nothing is.
    #[must_use]
    pub fn with_auth(self, config: auth::AuthConfig) -> Server {
        let caches: Vec<watchcache::Cache> = self.state.served.caches();
        let a = auth::Auth::new(config, &caches);
        if self.state.auth.auth.set(Arc::new(a)).is_err() {
            warn!("authentication was already set; keeping the first");
        }
        self
    }

    /// The resources this server serves, to change while it runs (custom resources as their
    /// CRDs come and go: `watchcache_follow::crds::sync_crds`).
    pub fn resources(&self) -> ServedResources {
        ServedResources(Arc::clone(&self.state.served))
    }

    /// The axum router.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/livez", get(|| async { "ok" }))
            .route("/readyz", get(endpoints::routes::readyz))
            .route("/metrics", get(endpoints::routes::metrics_handler))
            .fallback(endpoints::routes::api)
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&self.state.auth),
                auth::gate::gate,
            ))
            .with_state(self.state.handlers())
    }

    /// Serves on `listener` until `stop` completes, then stops in three phases
    /// (`server::http::lifecycle::Phase`): for `shutdown_delay` it serves on while `/readyz` fails; then it
    /// closes its listeners, sends GOAWAY on HTTP/2 connections and closes idle ones, and ends
    /// the open watches spread over `shutdown_watch_grace`, each with a last bookmark for its
    /// client to resume from elsewhere (new requests on connections still open get 429); what
    /// is left then ends at once, and the connections get 10 s more to finish. Plain HTTP/1.1,
    /// or TLS with [`Server::with_tls`].
    ///
    /// A connection whose first request is a WATCH is served by the watch fast path, straight from
    /// the socket (or the TLS stream); every other request, and a kept-alive connection after its
    /// watch, is served by hyper's HTTP/1 connection (not the HTTP/1-or-2 auto connection, whose
    /// task is 16 KiB larger; see design/performance.md). A TLS connection that negotiates `h2` is
    /// served by our HTTP/2 driver over h2 (`transport/http2.rs`).
    ///
    /// # Errors
    /// The listener's I/O error.
    pub async fn serve(
        mut self,
        listener: tokio::net::TcpListener,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let addr: Option<SocketAddr> = listener.local_addr().ok();
        debug!(?addr, tls = self.tls.is_some(), "serving");
        let insecure = self.insecure.take();
        if let Some(l) = &insecure {
            debug!(addr = ?l.local_addr().ok(), "serving plain HTTP too");
        }
        if let Some(path) = &self.state.config.audit_log_path {
            self.state
                .auth
                .audit
                .open(path.clone())
                .await
                .map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("--audit-log-path {}: {e}", path.display()),
                    )
                })?;
        }
        if let Some(a) = self.state.auth.auth.get() {
            a.start();
        }
        let router = self.router();
        let graceful = GracefulShutdown::new();
        let mut http = hyper::server::conn::http1::Builder::new();
        // hyper's timeout is one deadline per request head too (set when the head's read starts).
        http.timer(TokioTimer::new())
            .header_read_timeout(self.state.config.header_read_timeout);
        let conns = Connections {
            idle: accept::Idle::new(
                self.state.config.max_idle_connections,
                self.state.config.max_idle_connections_per_address,
            ),
            state: Arc::clone(&self.state),
            router,
            http,
            count: Arc::new(AtomicUsize::new(0)),
        };
        let mut backoff = accept::Backoff::default();
        if let Some(tls) = &self.tls {
            tokio::spawn(Arc::clone(tls).reload_loop(self.state.shutdown.clone()));
        }
        let st = Arc::clone(&self.state);
        let stop = async move {
            stop.await;
            let delay = st.config.shutdown_delay;
            st.lifecycle.enter(Phase::Delaying);
            if !delay.is_zero() {
                info!(
                    ?delay,
                    "stopping: /readyz fails while the load balancers take this server out"
                );
                tokio::time::sleep(delay).await;
            }
        };
        tokio::pin!(stop);
        loop {
            let (accepted, from) = tokio::select! {
                a = listener.accept() => (a, self.tls.as_ref().map(Listener::Tls).unwrap_or(Listener::Plain)),
                a = accept(insecure.as_ref()) => (a, Listener::Insecure),
                _ = &mut stop => break,
            };
            match accepted {
                Ok((tcp, peer)) => {
                    backoff.succeeded();
                    conns.start(tcp, peer, from, &graceful);
                }
                Err(e) => {
                    // Out of file descriptors, typically: the connection stays queued, and
                    // accepting again at once would fail again. Every error pauses (none can make
                    // the loop spin); a timer, so the open connections are served meanwhile.
                    let reason = accept::reason(&e);
                    self.state.metrics.count_accept_error(reason);
                    let failure = backoff.failed(std::time::Instant::now());
                    if let Some(suppressed) = failure.log {
                        warn!(error = %e, reason, pause = ?failure.pause, suppressed, "accept failed: pausing accepts");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(failure.pause) => {}
                        _ = &mut stop => break,
                    }
                }
            }
        }
        // Every cache at its upstream's revision first (a second at most): the drain's
        // bookmarks then carry a revision no older than any replica started before this one
        // drains, so each watch resumes there instead of meeting its window's start (410).
        let caught_up = futures_util::future::join_all(self.state.served.caches().into_iter().map(
            |c| async move {
                tokio::time::timeout(Duration::from_secs(1), c.catch_up())
                    .await
                    .is_ok_and(|r| r.is_ok())
            },
        ))
        .await;
        let behind = caught_up.iter().filter(|ok| !**ok).count();
        if behind > 0 {
            warn!(
                behind,
                "draining with caches behind their upstream: some last bookmarks may be older than another replica's window"
            );
        }
        let grace = self.state.config.shutdown_watch_grace;
        info!(
            watches = self.watchers(),
            ?grace,
            "draining: ending watches, each with a last bookmark"
        );
        self.state.lifecycle.enter(Phase::Draining);
        drop(listener);
        drop(insecure);
        if self.shutdown.send(true).is_err() {
            debug!("no connection was listening for shutdown");
        }
        self.state.deadlines.drain(grace);
        let closing = graceful.shutdown();
        tokio::pin!(closing);
        // The drain's last ends come a tick after the grace period, and a tick late at most.
        let drained = tokio::select! {
            () = &mut closing => true,
            () = tokio::time::sleep(grace + 2 * watchcache::deadlines::TICK) => false,
        };
        if !drained {
            let _ = self.stop_watches.send(true);
            if tokio::time::timeout(Duration::from_secs(10), closing)
                .await
                .is_err()
            {
                warn!("connections still open 10 s after the drain");
            }
        }
        let _ = self.stop_watches.send(true);
        Ok(())
    }

    /// Open watches.
    pub fn watchers(&self) -> usize {
        self.state.auth.limits.watches_open()
    }

    /// The state handlers share, for unit tests of what reads it.
    #[cfg(test)]
    pub(crate) fn state_for_tests(self) -> Arc<AppState> {
        Arc::clone(&self.state)
    }
}

/// The next connection of an optional listener (pending forever without one).
async fn accept(
    listener: Option<&tokio::net::TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Which listener accepted a connection.
#[derive(Clone, Copy)]
enum Listener<'a> {
    /// The main listener, plain HTTP.
    Plain,
    /// The main listener, TLS.
    Tls(&'a Arc<Tls>),
    /// The plain development listener next to TLS.
    Insecure,
}

/// What every connection's task is started with.
struct Connections {
    /// The connections that have not sent their first request yet.
    idle: Arc<accept::Idle>,
    state: Arc<AppState>,
    router: Router,
    http: hyper::server::conn::http1::Builder,
    count: Arc<AtomicUsize>,
}

impl Connections {
    /// Starts serving one accepted connection (or refusing it, over `max_connections` or a bound
    /// of the connections waiting for their first request).
    fn start(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        listener: Listener<'_>,
        graceful: &GracefulShutdown,
    ) {
        let (tls, insecure_listener) = match listener {
            Listener::Plain => (None, false),
            Listener::Tls(tls) => (Some(tls), false),
            Listener::Insecure => (None, true),
        };
        let max = self.state.config.max_connections;
        if self.count.fetch_add(1, Ordering::Relaxed) >= max {
            self.count.fetch_sub(1, Ordering::Relaxed);
            return self.refuse(tcp, peer, tls, accept::Refused::Connections(max));
        }
        let slot = ConnectionSlot(Arc::clone(&self.count));
        // Counted from here until the first request head has arrived (on TLS, the handshake
        // first).
        let idle = match self.idle.acquire(peer.ip()) {
            Ok(idle) => idle,
            Err(why) => {
                drop(slot);
                return self.refuse(tcp, peer, tls, why);
            }
        };
        // Watch events are small writes on long-lived connections: without TCP_NODELAY, Nagle's
        // algorithm and delayed ACKs hold them back.
        if let Err(e) = tcp.set_nodelay(true) {
            debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let (st, router, http, watcher) = (
            Arc::clone(&self.state),
            self.router.clone(),
            self.http.clone(),
            graceful.watcher(),
        );
        match tls {
            // Separate tasks: the plain connection's task does not carry room for TLS's states.
            None => {
                let conn = Arc::new(ConnInfo {
                    peer: Some(peer),
                    client_cert: None,
                    insecure_listener,
                    clock: Default::default(),
                });
                st.metrics.count_connection(false, false);
                tokio::spawn(async move {
                    let _slot = slot;
                    http1(tcp, st, conn, router, http, watcher, Some(idle)).await;
                });
            }
            Some(tls) => {
                let setup = Box::new(TlsConnection {
                    acceptor: tls.acceptor(),
                    http,
                    st,
                    router,
                    watcher,
                    peer,
                    idle,
                });
                // The task holds only pointers: its phases, the handshake and then the serving,
                // are each boxed and freed in turn. (One task with everything inline reserved
                // room for the handshake's state, the builders and the shutdown signal for as
                // long as the connection lived: 1 920 B of every idle TLS connection.)
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Some(serving) = Box::pin(setup.handshake(tcp)).await {
                        serving.await;
                    }
                });
            }
        }
    }

    /// Refuses a connection at its accept: a 503 `Status` with Retry-After, then the close.
    ///
    /// Over TLS, a refused connection is refused after its handshake (bounded by
    /// [`REFUSE_LINGER`]), offering only `http/1.1`, so the client reads a 503 it understands.
    fn refuse(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        tls: Option<&Arc<Tls>>,
        why: accept::Refused,
    ) {
        debug!(%peer, ?why, "refusing a connection");
        self.state.metrics.count_refused_connection(why.label());
        match tls {
            None => {
                tokio::spawn(refuse(tcp, why));
            }
            Some(tls) => {
                let acceptor = tls.refusing_acceptor();
                tokio::spawn(async move {
                    match tokio::time::timeout(REFUSE_LINGER, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => refuse(stream, why).await,
                        _ => {
                            debug!(%peer, "refused TLS connection did not finish its handshake")
                        }
                    }
                });
            }
        }
    }
}

/// What a TLS connection needs until its handshake is done and it is being served.
struct TlsConnection {
    acceptor: tokio_rustls::TlsAcceptor,
    http: hyper::server::conn::http1::Builder,
    st: Arc<AppState>,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
    peer: SocketAddr,
    /// Counts the connection as waiting for its first request, the handshake included.
    idle: accept::IdleSlot,
}

/// A connection being served, boxed.
type Serving = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

impl TlsConnection {
    /// The handshake, within the head's deadline: then the connection's serving (HTTP/2 or
    /// HTTP/1.1 by ALPN), or `None` when the handshake failed or the server is stopping.
    async fn handshake(self: Box<Self>, tcp: tokio::net::TcpStream) -> Option<Serving> {
        let TlsConnection {
            acceptor,
            http,
            st,
            router,
            watcher,
            peer,
            idle,
        } = *self;
        // The handshake counts against the head's deadline: a client that opens TCP and never
        // finishes it does not hold a slot for longer.
        let timeout = st.config.header_read_timeout;
        let mut shutdown = st.shutdown.clone();
        let stream = tokio::select! {
            s = tokio::time::timeout(timeout, acceptor.accept(tcp)) => match s {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    st.metrics.count_handshake_failure();
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return None;
                }
                Err(_) => {
                    st.metrics.count_handshake_failure();
                    debug!(%peer, "TLS handshake timed out");
                    return None;
                }
            },
            _ = shutdown.wait_for(|s| *s) => return None,
        };
        let session = stream.get_ref().1;
        let conn = Arc::new(ConnInfo {
            peer: Some(peer),
            client_cert: tls::client_leaf(session),
            insecure_listener: false,
            clock: Default::default(),
        });
        let is_h2 = tls::is_h2(session);
        st.metrics.count_connection(true, is_h2);
        if is_h2 {
            // h2 has no deadline for the preface: it must come within the time a request head
            // has.
            let io = tls::FirstBytesBy::new(stream, timeout, idle);
            Some(Box::pin(http2::H2Conn::new(
                io,
                H2_SETTINGS,
                H2Service(router),
                conn,
                st.shutdown.clone(),
                watcher,
            )))
        } else {
            Some(Box::pin(http1(
                sealed::TlsIo::Rustls(Box::new(stream)),
                st,
                conn,
                router,
                http,
                watcher,
                Some(idle),
            )))
        }
    }
}

/// A router's answer with a watch's pump made its body (`watch/body.rs`).
type WithBody = futures_util::future::MapOk<
    axum::routing::future::RouteFuture<std::convert::Infallible>,
    fn(axum::response::Response) -> axum::response::Response,
>;

/// The router as our HTTP/2 connections' service: a watch is answered in place, and its pump,
/// taken out of the response, is the stream's body (`transport/http2.rs`).
#[derive(Clone)]
struct H2Service(Router);

impl transport::Service for H2Service {
    type Chunks = watch::pump::WatchPump;
    type Future = axum::routing::future::RouteFuture<std::convert::Infallible>;

    fn call(&self, req: axum::extract::Request) -> Self::Future {
        self.0.clone().call(req)
    }

    fn in_place(&self, req: &axum::extract::Request) -> bool {
        crate::http::params::is_watch(req.uri().query())
    }

    fn chunks(head: &mut ::http::response::Parts) -> Option<watch::pump::WatchPump> {
        let pump = head
            .extensions
            .remove::<watch::body::WatchResponse>()?
            .take()?;
        // The router measured the empty body that stands in for the pump.
        head.headers.remove(::http::header::CONTENT_LENGTH);
        Some(pump)
    }

    fn failed() -> axum::response::Response {
        axum::response::IntoResponse::into_response(ApiError::new(
            500,
            "InternalError",
            "the request's handler failed",
        ))
    }
}

/// hyper's service for one HTTP/1.1 connection: every request carries what is known of the
/// connection; a watch's pump becomes its response's body.
fn service(
    router: Router,
    conn: Arc<ConnInfo>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = WithBody,
> + Clone
+ Send
+ 'static {
    hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(Arc::clone(&conn));
        futures_util::TryFutureExt::map_ok(
            router.clone().call(req),
            watch::body::into_body as fn(_) -> _,
        )
    })
}

/// An HTTP/1.1 connection (plain, or TLS without `h2`): the watch fast path for a first WATCH,
/// then hyper. `idle` counts the connection until its first request head has been read.
async fn http1<S>(
    mut io: S,
    st: Arc<AppState>,
    conn: Arc<ConnInfo>,
    router: Router,
    http: hyper::server::conn::http1::Builder,
    watcher: hyper_util::server::graceful::Watcher,
    idle: Option<accept::IdleSlot>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static + sealed::HandDown,
{
    let prefix = match fast_path::first_request(&mut io, &st.fast_path, &conn, idle).await {
        Ok(FirstRequest::NotAWatch(bytes)) => bytes,
        Ok(FirstRequest::Served {
            rest,
            keep_alive: true,
        }) => rest,
        Ok(FirstRequest::Served {
            keep_alive: false, ..
        }) => {
            // TLS says goodbye with close_notify (a handed-down watch's sending half too).
            let _ = tokio::time::timeout(CLOSE_LINGER, io.shutdown()).await;
            return;
        }
        Ok(FirstRequest::Close) => return,
        Err(e) => return fast_path::log_io(&e),
    };
    let upgrade = st.proxy.proxy.get().is_some() && proxy::forward::wants_upgrade(&prefix);
    let clock = Arc::clone(conn.clock.get_or_init(Default::default));
    let io = fast_path::Rewind::new(prefix, io);
    let service = service(router, conn);
    if upgrade {
        let io = TokioIo::new(io);
        // Relayed exec/attach/port-forward: hyper hands the connection over after the 101, which
        // graceful shutdown cannot watch (see forward.rs).
        if let Err(e) = http.serve_connection(io, service).with_upgrades().await {
            debug!(error = %e, "connection ended with an error");
        }
        return;
    }
    // Boxed (in `Clocked`): the task of an idle fast-path watch then does not carry room for
    // hyper's connection state (about 4 KiB). Clocked: a response not delivered within
    // `--request-timeout` closes the connection (`transport/deadline.rs`).
    let io = TokioIo::new(deadline::ClockedIo::new(io, Arc::clone(&clock)));
    let serving = watcher.watch(http.serve_connection(io, service));
    deadline::Clocked::new(
        async move {
            if let Err(e) = serving.await {
                debug!(error = %e, "connection ended with an error");
            }
        },
        clock,
    )
    .await;
}

/// Counts one open connection for as long as its task lives.
struct ConnectionSlot(Arc<AtomicUsize>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a connection closing after its response is given to take the goodbye.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// How long a refused connection is given to send its request and read the answer.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

/// Answers a connection over a limit with a 503 `Status` and Retry-After, then closes it. The
/// request is read first (briefly, and at most 16 KiB) and the socket drained after the answer, so
/// that closing with unread bytes does not reset the connection before the client reads the 503.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(mut tcp: S, why: accept::Refused) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let e = ApiError::new(503, "ServiceUnavailable", why.message()).with_retry_after(1);
    let body = e.status_json();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut buf = [0u8; 4096];
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + REFUSE_LINGER;
    // The request head, if it comes quickly.
    while read < 16 * 1024 {
        match tokio::time::timeout(Duration::from_millis(100), tcp.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                read += n;
                if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            _ => break,
        }
    }
    let written = async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(&body).await?;
        tcp.shutdown().await
    };
    if let Err(err) = tokio::time::timeout_at(deadline, written)
        .await
        .unwrap_or(Ok(()))
    {
        debug!(error = %err, "refused connection ended early");
        return;
    }
    // Drain until the client closes (or the linger ends), so the close is not a reset.
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
        if n == 0 {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    /// What an idle watch stream holds inline in its connection's set of streams: its h2 handle
    /// (24 B), its pump and a pointer. At 160 B the set's node (64 B more) is a 224-byte block
    /// (it was 256 at 192 B).
    #[test]
    fn a_watch_stream_is_small() {
        let size = std::mem::size_of::<super::transport::http2::Stream<super::H2Service>>();
        assert!(size <= 160, "{size}");
    }
}
