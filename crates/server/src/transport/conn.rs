//! What the server knows of a client connection before its first request: the peer's address and,
//! on TLS, the client certificate it presented, already verified by the handshake against
//! `--client-ca-file`. Every request on the connection carries it: hyper's requests as an
//! extension, the watch fast path as an argument.

use std::net::SocketAddr;

use bytes::Bytes;

/// One client connection, as the request handlers see it.
// Read by authentication (x509 client certificates) and the audit log, which build on this.
#[allow(dead_code)]
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnInfo {
    /// The peer's address, when the socket reports it.
    pub(crate) peer: Option<SocketAddr>,
    /// The DER of the client's leaf certificate, verified against the client CA during the TLS
    /// handshake; `None` on plain HTTP or when no certificate was presented.
    pub(crate) client_cert: Option<Bytes>,
    /// Accepted on the plain development listener next to TLS (`Server::with_insecure_listener`,
    /// `--insecure-listen`, loopback only): kube-apiserver's old insecure port, whose requests
    /// were neither authenticated nor authorized.
    pub(crate) insecure_listener: bool,
    /// An HTTP/1.1 connection served by hyper: the clock of the response it is sending
    /// (`deadline.rs`). Unset on HTTP/2 (each stream has its own deadline) and on the watch
    /// fast path.
    pub(crate) clock:
        std::sync::OnceLock<std::sync::Arc<crate::transport::deadline::ResponseClock>>,
}
