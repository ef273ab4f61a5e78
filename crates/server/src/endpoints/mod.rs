//! What hyper's requests are answered with once admitted: the API's reads and WATCH from the
//! caches, with proxy mode's hand-off (`routes.rs`), discovery and `/version`
//! (`discovery.rs`), the OpenAPI documents (`openapi.rs`), `/readyz` and `/metrics`.
//!
//! Layer: the top of the handlers. It may import every module below it (`watch/`, `proxy/`,
//! `auth/`, `metrics`, `http/`, `transport/`, `config`); only `state` and `lib.rs`, which wire
//! the server, import it.

pub(crate) mod discovery;
pub(crate) mod openapi;
pub(crate) mod routes;

use std::sync::Arc;

use crate::auth::AuthContext;
use crate::http::lifecycle::Lifecycle;
use crate::http::served::ServedSet;
use crate::metrics::ServerMetrics;
use crate::proxy::ProxyContext;
use crate::watch::WatchContext;

/// What the API's handler needs (`routes::api`): the served resources and what reads them, the
/// watches' start, and proxy mode's hand-off.
pub(crate) struct ApiContext {
    pub(crate) served: Arc<ServedSet>,
    pub(crate) metrics: Arc<ServerMetrics>,
    /// The OpenAPI documents, built on first request after each change of what is served (they
    /// depend only on that), with the [`ServedSet`] generation they were built at.
    pub(crate) openapi: parking_lot::Mutex<Option<(u64, Arc<openapi::Documents>)>>,
    /// `--max-selector-len`, for a read served without the gate (which parses it otherwise).
    pub(crate) max_selector_len: usize,
    pub(crate) watches: Arc<WatchContext>,
    pub(crate) proxy: Arc<ProxyContext>,
}

/// What the server's own endpoints read (`/readyz`, `/metrics`): its phase, its caches, the
/// authorizer's readiness and the limits' use, its metrics.
pub(crate) struct HealthContext {
    pub(crate) lifecycle: Arc<Lifecycle>,
    pub(crate) served: Arc<ServedSet>,
    pub(crate) auth: Arc<AuthContext>,
    pub(crate) metrics: Arc<ServerMetrics>,
}
