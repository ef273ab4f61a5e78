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
