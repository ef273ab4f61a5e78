//! `/metrics` in the Prometheus text format (prometheus-client). Gauges and counters are read from
//! each cache's stats at scrape time; the LIST latency histogram lives in the server.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cache::Cache;

/// Labels naming one resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// The plural name.
    pub resource: String,
}

/// Labels of the watcher gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatcherLabels {
    resource: String,
    routing: String,
}

/// Labels of the connection counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    /// `tcp` or `tls`.
    pub transport: &'static str,
    /// `http/1.1` or `h2`.
    pub protocol: &'static str,
}

/// Metrics the server records as requests happen.
#[derive(Clone)]
pub struct ServerMetrics {
    /// LIST latency by resource.
    pub list_seconds: Family<ResourceLabel, Histogram>,
    /// Connections accepted (and not refused), by transport and protocol.
    pub connections: Family<ConnectionLabels, Counter<u64, AtomicU64>>,
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures: Counter<u64, AtomicU64>,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        ServerMetrics {
            list_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
            }),
            connections: Family::default(),
            tls_handshake_failures: Counter::default(),
        }
    }
}

impl ServerMetrics {
    /// Records one LIST.
    pub fn observe_list(&self, resource: &str, took: Duration) {
        self.list_seconds
            .get_or_create(&ResourceLabel {
                resource: resource.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// Records one accepted connection.
    pub(crate) fn count_connection(&self, tls: bool, h2: bool) {
        self.connections
            .get_or_create(&ConnectionLabels {
                transport: if tls { "tls" } else { "tcp" },
                protocol: if h2 { "h2" } else { "http/1.1" },
            })
            .inc();
    }

    /// Records one failed TLS handshake.
    pub(crate) fn count_handshake_failure(&self) {
        self.tls_handshake_failures.inc();
    }
}

/// Renders every metric. The lag gauge compares each cache with its upstream's current revision,
/// read (for all caches at once) with a 1 s timeout; a cache whose upstream does not answer has no
/// lag sample.
pub(crate) async fn render(caches: &[&Cache], server: &ServerMetrics) -> String {
    let upstream_revs = futures_util::future::join_all(caches.iter().map(|c| async move {
        let up = c.upstream()?;
        tokio::time::timeout(Duration::from_secs(1), up.current_revision())
            .await
            .ok()?
            .ok()
    }))
    .await;
    let mut reg = Registry::with_prefix("watchcache");
    let watchers = Family::<WatcherLabels, Gauge>::default();
    let gauge = |name: &str, help: &str, reg: &mut Registry| {
        let f = Family::<ResourceLabel, Gauge>::default();
        reg.register(name, help, f.clone());
        f
    };
    let counter = |name: &str, help: &str, reg: &mut Registry| {
        let f = Family::<ResourceLabel, Counter<u64, AtomicU64>>::default();
        reg.register(name, help, f.clone());
        f
    };
    reg.register(
        "watchers",
        "Open watchers by resource and routing (routed by a trigger, or unrouted)",
        watchers.clone(),
    );
    let received = counter(
        "events_received",
        "Events applied from the upstream",
        &mut reg,
    );
    let dispatched = counter(
        "events_dispatched",
        "Event deliveries queued to watchers",
        &mut reg,
    );
    let parked = counter(
        "watchers_parked",
        "Times a watcher's queue was full and it was parked to catch up from history",
        &mut reg,
    );
    let expired = counter(
        "watchers_expired",
        "Watchers ended with 410 Expired",
        &mut reg,
    );
    let decode_errors = counter(
        "decode_errors",
        "Stored values skipped because they could not be decoded",
        &mut reg,
    );
    let resyncs = counter("resyncs", "Relists after the initial sync", &mut reg);
    let fresh_reads = counter(
        "fresh_reads",
        "Upstream reads that proved consistent reads fresh (shared by the reads waiting at once)",
        &mut reg,
    );
    let rv = gauge("resource_version", "The cache's resourceVersion", &mut reg);
    let lag = gauge(
        "lag_revisions",
        "The upstream's current revision minus the cache's",
        &mut reg,
    );
    let history = gauge("history_events", "Events in the history window", &mut reg);
    let capacity = gauge(
        "history_capacity",
        "Capacity of the history window",
        &mut reg,
    );
    let history_bytes = gauge(
        "history_bytes",
        "Bytes the history window's events hold (what --history-bytes and [history] max_bytes cap)",
        &mut reg,
    );
    let objects = gauge("objects", "Objects in the cache", &mut reg);
    let ready = gauge("ready", "1 when the cache serves reads", &mut reg);
    reg.register(
        "list_duration_seconds",
        "LIST latency",
        server.list_seconds.clone(),
    );
    reg.register(
        "connections",
        "Client connections accepted, by transport (tcp, tls) and protocol (http/1.1, h2)",
        server.connections.clone(),
    );
    reg.register(
        "tls_handshake_failures",
        "TLS handshakes that failed or timed out",
        server.tls_handshake_failures.clone(),
    );
    for (cache, upstream_rev) in caches.iter().zip(upstream_revs) {
        let s = cache.stats();
        let l = ResourceLabel {
            resource: cache.definition().plural.clone(),
        };
        let w = |routing: &str| WatcherLabels {
            resource: l.resource.clone(),
            routing: routing.into(),
        };
        watchers
            .get_or_create(&w("routed"))
            .set(s.routed_watchers as i64);
        watchers
            .get_or_create(&w("unrouted"))
            .set(s.unrouted_watchers as i64);
        received.get_or_create(&l).inc_by(s.events);
        dispatched.get_or_create(&l).inc_by(s.delivered);
        parked.get_or_create(&l).inc_by(s.parked);
        expired.get_or_create(&l).inc_by(s.expired);
        decode_errors.get_or_create(&l).inc_by(s.decode_errors);
        resyncs.get_or_create(&l).inc_by(s.resyncs);
        fresh_reads.get_or_create(&l).inc_by(s.fresh_reads);
        rv.get_or_create(&l).set(s.resource_version as i64);
        if let Some(e) = upstream_rev {
            lag.get_or_create(&l)
                .set(e.saturating_sub(s.resource_version) as i64);
        }
        history.get_or_create(&l).set(s.history_len as i64);
        capacity.get_or_create(&l).set(s.history_capacity as i64);
        history_bytes
            .get_or_create(&l)
            .set(i64::try_from(s.history_bytes).unwrap_or(i64::MAX));
        objects.get_or_create(&l).set(s.objects as i64);
        ready.get_or_create(&l).set(i64::from(s.ready));
    }
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &reg) {
        tracing::warn!(error = %e, "encoding metrics");
    }
    out
}
