//! Limits and defaults of the server.

use std::time::Duration;

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
    /// Most open client connections; a connection beyond it is answered 503 with Retry-After and
    /// closed. Above `max_watchers` by default, so watches meet their own limit (429) first.
    pub max_connections: usize,
    /// Most connections at once that have not sent their first request head yet, counted from
    /// the accept (on TLS the handshake is part of it); a connection beyond it is refused as one
    /// beyond `max_connections`. Each holds a file descriptor and asks for nothing: without a
    /// bound, clients that connect and stay silent take every descriptor until the header read
    /// timeout. 0: no limit. Default: 62 500, a quarter of the default `max_connections` (the
    /// CLI's default is also at most half the open-file limit).
    pub max_idle_connections: usize,
    /// Most such connections from one source address (0: no limit). Default: 15 625, a quarter
    /// of the default `max_idle_connections` (the CLI's: a quarter of its bound, at least 256),
    /// so that one address cannot take more than a quarter of the budget from the others, while
    /// a client opening hundreds of watches at once is served. Clients behind one NAT or proxy
    /// share an address: raise it there.
    pub max_idle_connections_per_address: usize,
    /// How long a client has to send a whole request head, from its first byte wait on (an
    /// absolute deadline, like Go's `ReadHeaderTimeout`: trickling bytes does not extend it).
    /// On TLS, the handshake has the same deadline from the accept, and an HTTP/2 client must send
    /// its first bytes within it after the handshake.
    pub header_read_timeout: Duration,
    /// `--max-requests-inflight`: most non-watch requests in progress at once; more get 429
    /// with Retry-After (0: no limit, the library's default; the CLI's is upstream's 400).
    pub max_requests_inflight: usize,
    /// `--max-watches-per-user`: most concurrent watches of one authenticated user; more get
    /// 429 (0: no limit). Only counted when authentication is configured.
    pub max_watches_per_user: usize,
    /// `--audit-log-path`: where audit lines are appended as JSON; without it nothing is audited.
    pub audit_log_path: Option<std::path::PathBuf>,
    /// `--request-timeout`: how long a request that is not long-running (not a watch) may take,
    /// reading its body included; past it the answer is 504 Timeout (upstream's default: 60 s).
    pub request_timeout: Duration,
    /// With a proxy: a GET of one object without a resourceVersion (a consistent read) goes to
    /// the proxy's upstream instead of waiting for the cache to show it fresh. For proxy mode,
    /// where the cache proves freshness with a LIST at the upstream and then waits for the
    /// upstream's next bookmark (seconds): one GET costs the upstream what that LIST costs, and
    /// kube-apiserver itself answers such a GET from etcd, not from its cache.
    pub forward_consistent_gets: bool,
    /// A TLS 1.3 HTTP/1.1 connection whose first request is a watch keeps only its sending key
    /// once the watch streams (`server/transport/sealed.rs`): about 0.9 KB instead of rustls' 10 KB per
    /// idle watch; the connection then closes when the watch ends.
    pub tls_watch_hand_down: bool,
    /// `--shutdown-delay-duration`: once asked to stop, how long the server keeps serving
    /// everything while `/readyz` fails, so that load balancers take it out first (upstream's
    /// default: none).
    pub shutdown_delay: Duration,
    /// `--shutdown-watch-termination-grace-period`: after the delay, how long the open watches
    /// are given to end, each with a last bookmark: their ends are spread over it, so their
    /// clients resume on other replicas a few at a time (upstream's default: none, every watch
    /// ends at once).
    pub shutdown_watch_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_body_bytes: 3 * 1024 * 1024,
            max_selector_len: 4096,
            max_watchers: 200_000,
            default_watch_timeout: (Duration::from_secs(1800), Duration::from_secs(3600)),
            max_connections: 250_000,
            max_idle_connections: 250_000 / 4,
            max_idle_connections_per_address: 62_500 / 4,
            header_read_timeout: Duration::from_secs(30),
            max_requests_inflight: 0,
            max_watches_per_user: 0,
            audit_log_path: None,
            request_timeout: Duration::from_secs(60),
            forward_consistent_gets: false,
            tls_watch_hand_down: true,
            shutdown_delay: Duration::ZERO,
            shutdown_watch_grace: Duration::ZERO,
        }
    }
}
