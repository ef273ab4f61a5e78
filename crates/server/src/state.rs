//! The server's state, cut by job: each handler takes the context of its job
//! (`auth::AuthContext`, `watch::WatchContext`, `watch::fast_path::FastPathContext`,
//! `proxy::ProxyContext`, `endpoints::ApiContext` and `endpoints::HealthContext`), and this is
//! where they are built and what holds them. What several jobs share (the served resources, the
//! metrics, the limits, the server's phase) is one `Arc` in each context that reads it.
//!
//! Layer: above every job (it builds their contexts); only `lib.rs` imports it.

use std::sync::Arc;

use axum::extract::FromRef;
use tokio::sync::watch;

use crate::auth::{Audit, AuthContext, Limits};
use crate::config::ServerConfig;
use crate::endpoints::{ApiContext, HealthContext};
use crate::http::lifecycle::Lifecycle;
use crate::http::served::{Served, ServedSet};
use crate::metrics::ServerMetrics;
use crate::proxy::ProxyContext;
use crate::watch::WatchContext;
use crate::watch::fast_path::FastPathContext;

/// Every context, and what the server itself reads (`lib.rs`: the accept loop and the stop).
pub(crate) struct AppState {
    pub(crate) config: ServerConfig,
    pub(crate) served: Arc<ServedSet>,
    pub(crate) metrics: Arc<ServerMetrics>,
    /// Serving, delaying its stop, or draining.
    pub(crate) lifecycle: Arc<Lifecycle>,
    /// Set when the server drains: connections waiting for a request close, HTTP/2 ones send
    /// GOAWAY, handshakes stop. Watches end by the wheel's drain, not by this.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Every watch's deadline, and shutdown delivered to every watch (`cache/deadlines.rs`).
    pub(crate) deadlines: Arc<watchcache::deadlines::Deadlines>,
    pub(crate) auth: Arc<AuthContext>,
    pub(crate) proxy: Arc<ProxyContext>,
    pub(crate) api: Arc<ApiContext>,
    pub(crate) health: Arc<HealthContext>,
    pub(crate) fast_path: Arc<FastPathContext>,
}

impl AppState {
    /// The state of a server for `served` with `config`; `shutdown` closes its connections,
    /// `stop_watches` ends every watch at once.
    pub(crate) fn new(
        config: ServerConfig,
        served: Vec<Served>,
        shutdown: watch::Receiver<bool>,
        stop_watches: watch::Receiver<bool>,
    ) -> AppState {
        // kube-apiserver's queue wait: a quarter of the request timeout, at most 15 s.
        let queue_wait = (config.request_timeout / 4).min(std::time::Duration::from_secs(15));
        let limits = Arc::new(Limits::new(
            config.max_requests_inflight,
            config.max_watchers,
            config.max_watches_per_user,
            queue_wait,
        ));
        let served = Arc::new(ServedSet::new(served));
        let metrics = Arc::new(ServerMetrics::default());
        let lifecycle = Arc::new(Lifecycle::default());
        let deadlines =
            watchcache::deadlines::Deadlines::new(Some(stop_watches), watchcache::deadlines::TICK);
        let auth = Arc::new(AuthContext {
            auth: std::sync::OnceLock::new(),
            limits: Arc::clone(&limits),
            audit: Audit::default(),
            lifecycle: Arc::clone(&lifecycle),
            served: Arc::clone(&served),
            metrics: Arc::clone(&metrics),
            max_selector_len: config.max_selector_len,
            max_body_bytes: config.max_body_bytes,
            request_timeout: config.request_timeout,
        });
        let watches = Arc::new(WatchContext {
            limits,
            deadlines: Arc::clone(&deadlines),
            metrics: Arc::clone(&metrics),
            default_timeout: config.default_watch_timeout,
        });
        let proxy = Arc::new(ProxyContext {
            proxy: std::sync::OnceLock::new(),
            stalled: Default::default(),
            max_body_bytes: config.max_body_bytes,
            forward_consistent_gets: config.forward_consistent_gets,
        });
        let api = Arc::new(ApiContext {
            served: Arc::clone(&served),
            metrics: Arc::clone(&metrics),
            openapi: parking_lot::Mutex::new(None),
            max_selector_len: config.max_selector_len,
            watches: Arc::clone(&watches),
            proxy: Arc::clone(&proxy),
        });
        let health = Arc::new(HealthContext {
            lifecycle: Arc::clone(&lifecycle),
            served: Arc::clone(&served),
            auth: Arc::clone(&auth),
            metrics: Arc::clone(&metrics),
        });
        let fast_path = Arc::new(FastPathContext {
            auth: Arc::clone(&auth),
            watches,
            proxy: Arc::clone(&proxy),
            served: Arc::clone(&served),
            shutdown: shutdown.clone(),
            header_read_timeout: config.header_read_timeout,
            tls_watch_hand_down: config.tls_watch_hand_down,
        });
        AppState {
            config,
            served,
            metrics,
            lifecycle,
            shutdown,
            deadlines,
            auth,
            proxy,
            api,
            health,
            fast_path,
        }
    }
}

/// The router's state: what its handlers take their job's context from (axum's `FromRef`).
#[derive(Clone)]
pub(crate) struct Handlers {
    api: Arc<ApiContext>,
    health: Arc<HealthContext>,
}

impl AppState {
    /// The router's state.
    pub(crate) fn handlers(&self) -> Handlers {
        Handlers {
            api: Arc::clone(&self.api),
            health: Arc::clone(&self.health),
        }
    }
}

impl FromRef<Handlers> for Arc<ApiContext> {
    fn from_ref(h: &Handlers) -> Self {
        Arc::clone(&h.api)
    }
}

impl FromRef<Handlers> for Arc<HealthContext> {
    fn from_ref(h: &Handlers) -> Self {
        Arc::clone(&h.health)
    }
}
