//! Transport: everything that knows sockets, TLS and HTTP/2 framing. The accept loop's bounds
//! (`accept.rs`), what is known of a connection (`conn.rs`), TLS and its reloads (`tls.rs`), client
//! certificates (`client_cert.rs`, with its DER parser), a TLS watch's sending half (`sealed.rs`),
//! a response's deadline on the wire (`deadline.rs`), and HTTP/2 served with h2 directly
//! (`http2.rs`). The only module that uses the `h2` crate.
//!
//! Layer: the lowest of the jobs (only `config.rs` is below it). It imports no other module of
//! the crate: what it serves is given to it from above, as a [`Service`] (the router, and a
//! watch's pump as a response's [`Chunks`]) that `lib.rs` implements, as hyper's connections
//! take a service.

pub(crate) mod accept;
pub(crate) mod client_cert;
pub(crate) mod conn;
pub(crate) mod deadline;
pub(crate) mod http2;
pub(crate) mod sealed;
pub(crate) mod tls;

pub(crate) use http2::{Chunks, H2Framing, Service};
