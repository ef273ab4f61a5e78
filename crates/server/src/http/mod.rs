//! The Kubernetes API's HTTP vocabulary, shared by every handler: `Status` errors
//! (`status.rs`), query parameters (`params.rs`), content negotiation (`negotiate.rs`), response
//! bodies (`response.rs`), request bodies read by their wire cost (`body.rs`), what a server
//! serves and what a path names (`served.rs`), and the server's phase (`lifecycle.rs`).
//!
//! Layer: above `transport/` (a request body's HTTP/2 framing is counted there), below
//! everything else. It imports `transport/` and `config` only.

pub(crate) mod body;
pub(crate) mod lifecycle;
pub(crate) mod negotiate;
pub(crate) mod params;
pub(crate) mod response;
pub(crate) mod served;
pub(crate) mod status;
