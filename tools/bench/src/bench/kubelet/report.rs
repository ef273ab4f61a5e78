//! The kubelet model's report: per side, the verified pod paths, the connections and watches, and
//! the processes' cost; as JSON and as a table.

use serde::Serialize;

use super::Side;
use super::stages::Stages;
use crate::bench::Latency;
use crate::bench::verify::Tally;

/// One verified path's streams while they are tallied.
#[derive(Default)]
pub(super) struct PathFigures {
    pub watches: usize,
    pub tally: Tally,
    pub latencies: Vec<f64>,
    pub after_ack: Vec<f64>,
    /// The 100 ms windows (by write time) holding a delivery slower than [`SLOW_MS`]: a few
    /// windows say stalls, many say a steady queue.
    pub slow_windows: std::collections::BTreeSet<u64>,
}

/// The delivery time (from the write) counted as slow in [`PathReport::slow`].
pub(super) const SLOW_MS: f64 = 10.0;

impl PathFigures {
    /// Records one delivery: written at `sent_us` (µs on the bench's clock), received `ms` later.
    pub(super) fn slow_window(&mut self, sent_us: u64, ms: f64) {
        if ms > SLOW_MS {
            self.slow_windows.insert(sent_us / 100_000);
        }
    }
}

impl PathFigures {
    pub(super) fn finish(mut self) -> PathReport {
        let slow = self.latencies.iter().filter(|&&l| l > SLOW_MS).count() as u64;
        PathReport {
            slow,
            slow_windows: self.slow_windows.len(),
            watches: self.watches,
            delivered: self.tally.delivered,
            lost: self.tally.lost,
            duplicated: self.tally.duplicated,
            out_of_order: self.tally.out_of_order,
            unexpected: self.tally.unexpected,
            latency_ms: Latency::of(&mut self.latencies),
            after_ack_ms: Latency::of(&mut self.after_ack),
        }
    }
}

/// A pod path's streams checked against etcd's history.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PathReport {
    /// Streams of this path (one per node when the count includes it).
    pub watches: usize,
    /// Changes delivered as expected.
    pub delivered: u64,
    /// Expected changes never delivered.
    pub lost: u64,
    /// Changes delivered more than once.
    pub duplicated: u64,
    /// Changes delivered after a later revision.
    pub out_of_order: u64,
    /// Changes a stream's selector does not match.
    pub unexpected: u64,
    /// Write sent → client received.
    pub latency_ms: Latency,
    /// etcd acknowledged the write → client received (0 when the event came first): the part
    /// the server, the network and the client add.
    pub after_ack_ms: Latency,
    /// Deliveries slower than [`SLOW_MS`] from the write.
    pub slow: u64,
    /// The 100 ms windows of writes those fall in.
    pub slow_windows: usize,
}

/// One side of the run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KubeletReport {
    pub side: Side,
    pub nodes: usize,
    pub watches_per_node: usize,
    /// Churned pods seeded (plus one static pod per node).
    pub pods: usize,
    /// TLS HTTP/2 connections open (one per node).
    pub connections: usize,
    /// Watches answered 200.
    pub watches_opened: usize,
    /// Watches answered 403.
    pub watches_forbidden: usize,
    /// Watches answered otherwise, or not at all.
    pub watches_failed: usize,
    /// 429 answers to watch requests, each retried after 0.8–1.6 s (for at most a minute).
    pub watch_429s: u64,
    /// Frames that were not protobuf watch events.
    pub unreadable_frames: u64,
    /// Streams that broke or carried an ERROR event.
    pub stream_errors: u64,
    /// Events on the other (idle) watches: their initial ADDED events.
    pub other_events: u64,
    /// What node 0 got asking to watch node 1's pods (403 expected).
    pub cross_node_watch_status: Option<u16>,
    pub pod_writes_per_sec: f64,
    /// Pod write sent → etcd acknowledged it: the part no watch server can remove.
    pub etcd_write_ms: Latency,
    /// etcd acknowledged the write → the load tool's own etcd watch of the pods got it: etcd's
    /// watch delivery on this machine, with no server between.
    pub etcd_watch_after_ack_ms: Latency,
    pub lease_writes_per_sec: f64,
    pub duration_s: f64,
    /// How the pods were stored in etcd.
    pub storage: crate::bench::pods::Storage,
    /// The server's own stages for pods over the churn, from its dispatch-latency histogram
    /// (watchcache only).
    pub server_stages: Option<Stages>,
    /// `fieldSelector=spec.nodeName=node-N`.
    pub node_path: PathReport,
    /// `labelSelector=app=app-N`.
    pub label_path: PathReport,
    /// CPU seconds during the churn and delivery.
    pub server_cpu_s: Option<f64>,
    /// At the end of the run.
    pub server_rss_bytes: Option<u64>,
    /// How much of it was transparent huge pages (`AnonHugePages`): watchcache turns them off
    /// unless `--transparent-huge-pages`.
    pub server_huge_page_bytes: Option<u64>,
    /// RSS added per connection (open, no stream yet).
    pub rss_per_connection_bytes: Option<f64>,
    /// RSS added per watch of the first set (open, before the churn): with what the watches'
    /// first use of each object made (its protobuf encoding, kept with it) and their initial
    /// events' buffers.
    pub rss_per_first_watch_bytes: Option<f64>,
    /// RSS added per further idle watch: the same watches opened again on the same connections.
    pub rss_per_watch_bytes: Option<f64>,
    /// The server's live heap in mimalloc's blocks added per further idle watch (`--heap-stats`).
    pub heap_per_watch_bytes: Option<f64>,
    pub etcd_cpu_s: Option<f64>,
    pub etcd_rss_bytes: Option<u64>,
    /// The bench's own CPU seconds (clients and writers), on the same 2 cores.
    pub client_cpu_s: Option<f64>,
    /// The machine's 1-minute load average at the end of the side.
    pub load_average: Option<f64>,
}

impl KubeletReport {
    pub(crate) fn delivered(&self) -> u64 {
        self.node_path.delivered + self.label_path.delivered
    }

    pub(crate) fn lost(&self) -> u64 {
        self.node_path.lost + self.label_path.lost
    }
}

/// The whole run: one report per side, in the order run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KubeletRun {
    pub sides: Vec<KubeletReport>,
}

/// The run as a readable table, a column per side.
pub(crate) fn table(run: &KubeletRun) -> String {
    let s = &run.sides;
    let opt = |v: Option<f64>, scale: f64, digits: usize| {
        v.map_or("-".to_owned(), |v| format!("{:.*}", digits, v / scale))
    };
    let path = |p: &PathReport| {
        format!(
            "{} / {} / {} / {}",
            p.delivered, p.lost, p.duplicated, p.out_of_order
        )
    };
    let lat = |p: &PathReport| {
        format!(
            "{:.1} / {:.1} / {:.1}",
            p.latency_ms.p50, p.latency_ms.p99, p.latency_ms.max
        )
    };
    let stage = |r: &KubeletReport, pick: fn(&Stages) -> &super::stages::Stage| {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v}"));
        r.server_stages.as_ref().map_or("-".to_owned(), |s| {
            let s = pick(s);
            format!("{} / {}", ms(s.p50_le_ms), ms(s.p99_le_ms))
        })
    };
    let rows: Vec<(&str, Vec<String>)> = vec![
        (
            "server",
            s.iter().map(|r| r.side.name().to_owned()).collect(),
        ),
        (
            "nodes x watches",
            s.iter()
                .map(|r| format!("{} x {}", r.nodes, r.watches_per_node))
                .collect(),
        ),
        (
            "pods stored in etcd as",
            s.iter()
                .map(|r| format!("{:?}", r.storage).to_lowercase())
                .collect(),
        ),
        (
            "connections / watches open",
            s.iter()
                .map(|r| format!("{} / {}", r.connections, r.watches_opened))
                .collect(),
        ),
        (
            "watches 403 / failed / 429s",
            s.iter()
                .map(|r| {
                    format!(
                        "{} / {} / {}",
                        r.watches_forbidden, r.watches_failed, r.watch_429s
                    )
                })
                .collect(),
        ),
        (
            "other node's pods",
            s.iter()
                .map(|r| {
                    r.cross_node_watch_status
                        .map_or("-".into(), |c| c.to_string())
                })
                .collect(),
        ),
        (
            "pod / lease writes/s",
            s.iter()
                .map(|r| {
                    format!(
                        "{:.0} / {:.0}",
                        r.pod_writes_per_sec, r.lease_writes_per_sec
                    )
                })
                .collect(),
        ),
        (
            "nodeName: deliv/lost/dup/ooo",
            s.iter().map(|r| path(&r.node_path)).collect(),
        ),
        (
            "nodeName: p50 / p99 / max ms",
            s.iter().map(|r| lat(&r.node_path)).collect(),
        ),
        (
            "nodeName: after etcd ack p50/p99",
            s.iter()
                .map(|r| {
                    format!(
                        "{:.1} / {:.1}",
                        r.node_path.after_ack_ms.p50, r.node_path.after_ack_ms.p99
                    )
                })
                .collect(),
        ),
        (
            "nodeName: over 10 ms / in 100-ms windows",
            s.iter()
                .map(|r| {
                    format!(
                        "{} / {} of {:.0}",
                        r.node_path.slow,
                        r.node_path.slow_windows,
                        r.duration_s * 10.0
                    )
                })
                .collect(),
        ),
        (
            "server: pods queued p50/p99 ≤ ms",
            s.iter().map(|r| stage(r, |s| &s.queued)).collect(),
        ),
        (
            "server: pods written p50/p99 ≤ ms",
            s.iter().map(|r| stage(r, |s| &s.written)).collect(),
        ),
        (
            "etcd write ack p50 / p99 ms",
            s.iter()
                .map(|r| format!("{:.1} / {:.1}", r.etcd_write_ms.p50, r.etcd_write_ms.p99))
                .collect(),
        ),
        (
            "etcd's own watch after ack p50/p99",
            s.iter()
                .map(|r| {
                    format!(
                        "{:.1} / {:.1}",
                        r.etcd_watch_after_ack_ms.p50, r.etcd_watch_after_ack_ms.p99
                    )
                })
                .collect(),
        ),
        (
            "label: deliv/lost/dup/ooo",
            s.iter().map(|r| path(&r.label_path)).collect(),
        ),
        (
            "label: p50 / p99 / max ms",
            s.iter().map(|r| lat(&r.label_path)).collect(),
        ),
        (
            "unexpected / stream errors",
            s.iter()
                .map(|r| {
                    format!(
                        "{} / {}",
                        r.node_path.unexpected + r.label_path.unexpected,
                        r.stream_errors + r.unreadable_frames
                    )
                })
                .collect(),
        ),
        (
            "server CPU s",
            s.iter().map(|r| opt(r.server_cpu_s, 1.0, 2)).collect(),
        ),
        (
            "server RSS MiB",
            s.iter()
                .map(|r| opt(r.server_rss_bytes.map(|v| v as f64), 1048576.0, 1))
                .collect(),
        ),
        (
            "of which huge pages MiB",
            s.iter()
                .map(|r| opt(r.server_huge_page_bytes.map(|v| v as f64), 1048576.0, 1))
                .collect(),
        ),
        (
            "RSS per connection KiB",
            s.iter()
                .map(|r| opt(r.rss_per_connection_bytes, 1024.0, 2))
                .collect(),
        ),
        (
            "RSS per watch, first set KiB",
            s.iter()
                .map(|r| opt(r.rss_per_first_watch_bytes, 1024.0, 2))
                .collect(),
        ),
        (
            "RSS per idle watch KiB",
            s.iter()
                .map(|r| opt(r.rss_per_watch_bytes, 1024.0, 2))
                .collect(),
        ),
        (
            "heap per idle watch KiB",
            s.iter()
                .map(|r| opt(r.heap_per_watch_bytes, 1024.0, 2))
                .collect(),
        ),
        (
            "etcd CPU s",
            s.iter().map(|r| opt(r.etcd_cpu_s, 1.0, 2)).collect(),
        ),
        (
            "load tool CPU s",
            s.iter().map(|r| opt(r.client_cpu_s, 1.0, 2)).collect(),
        ),
        (
            "load average (1 min)",
            s.iter().map(|r| opt(r.load_average, 1.0, 2)).collect(),
        ),
    ];
    let mut out = String::new();
    for (k, vs) in rows {
        out.push_str(&format!("{k:<30}"));
        for v in vs {
            out.push_str(&format!("{v:>28}"));
        }
        out.push('\n');
    }
    out
}
