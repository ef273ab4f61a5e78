//! The bench's report: per-mode figures, cache/direct ratios, and the table printed at the end.

use serde::Serialize;

/// End-to-end latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl Latency {
    /// The percentiles of these samples (sorted in place).
    pub(crate) fn of(samples: &mut [f64]) -> Latency {
        samples.sort_by(f64::total_cmp);
        Latency {
            p50: super::verify::percentile(samples, 50.0),
            p90: super::verify::percentile(samples, 90.0),
            p99: super::verify::percentile(samples, 99.0),
            max: samples.last().copied().unwrap_or(0.0),
        }
    }
}

/// Server process figures (absent when the server was not started by the bench).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ServerStats {
    /// Resident memory at the end of the run.
    pub rss_bytes: Option<u64>,
    /// CPU seconds during the churn and delivery.
    pub cpu_s: Option<f64>,
    /// Resident memory added per idle watcher (measured before the churn).
    pub rss_per_watcher_bytes: Option<f64>,
    /// Connections the server accepted, by transport and protocol (its
    /// `watchcache_connections_total`), e.g. `tls h2 4, tcp http/1.1 2`.
    pub connections: Option<String>,
}

/// etcd process figures.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct EtcdStats {
    /// Resident memory at the end of the run (local etcd only).
    pub rss_bytes: Option<u64>,
    /// CPU seconds during the churn and delivery (local etcd only).
    pub cpu_s: Option<f64>,
    /// Watches open on etcd during the churn (`etcd_debugging_mvcc_watcher_total`).
    pub watchers: Option<u64>,
}

/// The result of one mode.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ModeReport {
    /// `cache` or `direct-etcd`.
    pub mode: String,
    /// Per-node watchers.
    pub watchers: usize,
    /// Unrouted watchers.
    pub unrouted_watchers: usize,
    /// Pods seeded.
    pub pods: usize,
    /// Achieved write rate.
    pub writes_per_sec: f64,
    /// Churn duration.
    pub duration_s: f64,
    /// Write sent → watcher received.
    pub latency_ms: Latency,
    /// Write sent → etcd acknowledged it: the part of the latency the cache cannot remove.
    pub etcd_write_ms: Latency,
    /// etcd acknowledged the write → watcher received it (0 when the event arrived first): the
    /// part the cache and the network add.
    pub after_ack_ms: Latency,
    /// Events delivered as expected.
    pub delivered: u64,
    /// Expected events never delivered.
    pub lost: u64,
    /// Events delivered more than once.
    pub duplicated: u64,
    /// Events delivered after a later revision.
    pub out_of_order: u64,
    /// Events a watcher received that its selector does not match.
    pub unexpected: u64,
    /// Watchers that failed to connect or whose stream broke.
    pub watcher_errors: u64,
    /// CPU seconds of the load tool itself (writer and watchers) during the churn and delivery: it
    /// shares the machine with etcd and the server.
    pub client_cpu_s: Option<f64>,
    /// Server figures.
    pub server: ServerStats,
    /// etcd figures.
    pub etcd: EtcdStats,
    /// The burst of fresh requests (`--burst`), when asked for.
    pub burst: Option<BurstReport>,
}

/// What a burst of fresh requests (`--burst N`) got.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct BurstReport {
    /// Requests sent: half WatchLists, half consistent LISTs, each of one node's pods.
    pub requests: usize,
    /// How long sending them took.
    pub sent_in_s: f64,
    /// Served to their end (a WatchList to its initial-events-end bookmark).
    pub served: usize,
    /// Answered 429.
    pub too_many: usize,
    /// Failed otherwise.
    pub failed: usize,
    /// From the first request sent to the last one served.
    pub all_done_s: f64,
    /// Each served request, from sent to served: median.
    pub p50_ms: f64,
    /// And 99th percentile.
    pub p99_ms: f64,
    /// The server's upstream reads that proved the requests fresh.
    pub fresh_reads: Option<u64>,
    /// Range requests etcd served meanwhile (the server's, and the bench's own few).
    pub etcd_ranges: Option<u64>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum Report {
    /// One mode.
    One(Box<ModeReport>),
    /// Both modes, with cache / direct ratios.
    Both {
        /// Through the cache.
        cache: Box<ModeReport>,
        /// One etcd watch per watcher.
        direct: Box<ModeReport>,
        /// cache / direct.
        ratios: Ratios,
    },
}

/// Cache-mode figures divided by direct-mode ones.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Ratios {
    /// etcd CPU seconds.
    pub etcd_cpu_s: Option<f64>,
    /// etcd watches.
    pub etcd_watchers: Option<f64>,
    /// p99 latency.
    pub latency_p99: f64,
    /// Achieved write rate.
    pub writes_per_sec: f64,
    /// Delivered events.
    pub delivered: f64,
}

/// The report as a readable table.
pub(crate) fn table(report: &Report) -> String {
    let modes: Vec<&ModeReport> = match report {
        Report::One(m) => vec![&**m],
        Report::Both { cache, direct, .. } => vec![&**cache, &**direct],
    };
    let opt = |v: Option<f64>, scale: f64, digits: usize| {
        v.map_or("-".to_owned(), |v| format!("{:.*}", digits, v / scale))
    };
    let mut rows: Vec<(String, Vec<String>)> = vec![
        (
            "mode".into(),
            modes.iter().map(|m| m.mode.clone()).collect(),
        ),
        (
            "watchers (routed + unrouted)".into(),
            modes
                .iter()
                .map(|m| format!("{} + {}", m.watchers, m.unrouted_watchers))
                .collect(),
        ),
        (
            "pods".into(),
            modes.iter().map(|m| m.pods.to_string()).collect(),
        ),
        (
            "writes/s achieved".into(),
            modes
                .iter()
                .map(|m| format!("{:.0}", m.writes_per_sec))
                .collect(),
        ),
        (
            "etcd write ack p50 / p99 ms".into(),
            modes
                .iter()
                .map(|m| format!("{:.1} / {:.1}", m.etcd_write_ms.p50, m.etcd_write_ms.p99))
                .collect(),
        ),
        (
            "after etcd ack p50 / p99 ms".into(),
            modes
                .iter()
                .map(|m| format!("{:.1} / {:.1}", m.after_ack_ms.p50, m.after_ack_ms.p99))
                .collect(),
        ),
        (
            "latency p50 / p90 / p99 / max ms".into(),
            modes
                .iter()
                .map(|m| {
                    format!(
                        "{:.1} / {:.1} / {:.1} / {:.1}",
                        m.latency_ms.p50, m.latency_ms.p90, m.latency_ms.p99, m.latency_ms.max
                    )
                })
                .collect(),
        ),
        (
            "delivered".into(),
            modes.iter().map(|m| m.delivered.to_string()).collect(),
        ),
        (
            "burst: served / 429 / failed of N".into(),
            modes
                .iter()
                .map(|m| {
                    m.burst.as_ref().map_or("-".to_owned(), |b| {
                        format!(
                            "{} / {} / {} of {}",
                            b.served, b.too_many, b.failed, b.requests
                        )
                    })
                })
                .collect(),
        ),
        (
            "burst: p50 / p99 ms, all done s".into(),
            modes
                .iter()
                .map(|m| {
                    m.burst.as_ref().map_or("-".to_owned(), |b| {
                        format!("{:.1} / {:.1}, {:.2}", b.p50_ms, b.p99_ms, b.all_done_s)
                    })
                })
                .collect(),
        ),
        (
            "burst: fresh reads / etcd ranges".into(),
            modes
                .iter()
                .map(|m| {
                    m.burst.as_ref().map_or("-".to_owned(), |b| {
                        format!(
                            "{} / {}",
                            opt(b.fresh_reads.map(|v| v as f64), 1.0, 0),
                            opt(b.etcd_ranges.map(|v| v as f64), 1.0, 0)
                        )
                    })
                })
                .collect(),
        ),
        (
            "lost / duplicated / out of order".into(),
            modes
                .iter()
                .map(|m| format!("{} / {} / {}", m.lost, m.duplicated, m.out_of_order))
                .collect(),
        ),
        (
            "unexpected / watcher errors".into(),
            modes
                .iter()
                .map(|m| format!("{} / {}", m.unexpected, m.watcher_errors))
                .collect(),
        ),
        (
            "server RSS MiB".into(),
            modes
                .iter()
                .map(|m| opt(m.server.rss_bytes.map(|v| v as f64), 1048576.0, 1))
                .collect(),
        ),
        (
            "server CPU s".into(),
            modes.iter().map(|m| opt(m.server.cpu_s, 1.0, 2)).collect(),
        ),
        (
            "server RSS per idle watcher B".into(),
            modes
                .iter()
                .map(|m| opt(m.server.rss_per_watcher_bytes, 1.0, 0))
                .collect(),
        ),
        (
            "server connections".into(),
            modes
                .iter()
                .map(|m| m.server.connections.clone().unwrap_or_else(|| "-".into()))
                .collect(),
        ),
        (
            "load tool CPU s".into(),
            modes.iter().map(|m| opt(m.client_cpu_s, 1.0, 2)).collect(),
        ),
        (
            "etcd RSS MiB".into(),
            modes
                .iter()
                .map(|m| opt(m.etcd.rss_bytes.map(|v| v as f64), 1048576.0, 1))
                .collect(),
        ),
        (
            "etcd CPU s".into(),
            modes.iter().map(|m| opt(m.etcd.cpu_s, 1.0, 2)).collect(),
        ),
        (
            "etcd watches".into(),
            modes
                .iter()
                .map(|m| m.etcd.watchers.map_or("-".into(), |w| w.to_string()))
                .collect(),
        ),
    ];
    if let Report::Both { ratios, .. } = report {
        rows.push((
            "etcd CPU cache/direct".into(),
            vec![opt(ratios.etcd_cpu_s, 1.0, 4), String::new()],
        ));
        rows.push((
            "p99 latency cache/direct".into(),
            vec![format!("{:.3}", ratios.latency_p99), String::new()],
        ));
    }
    let mut out = String::new();
    for (k, vs) in rows {
        out.push_str(&format!("{k:<34}"));
        for v in vs {
            out.push_str(&format!("{v:>32}"));
        }
        out.push('\n');
    }
    out
}
