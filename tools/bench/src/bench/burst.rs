//! `--burst N`: a fleet reconnecting. N fresh requests (no resourceVersion: each must see every
//! write made before it) sent within one second, half WatchLists of one node's pods (read to
//! their initial-events-end bookmark, as client-go's reflector does), half consistent LISTs of one
//! node's pods. Every one must be served (no 429); the server's shared freshness reads and etcd's
//! own range requests say what the burst cost etcd.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tracing::info;

use super::http::Http;
use super::report::BurstReport;
use super::{BenchConfig, bar};

/// Sends the burst at `url` (the server) and reads etcd's counters at `etcd_url`.
pub(super) async fn run(
    cfg: &BenchConfig,
    clients: &[Http],
    url: &str,
    etcd_url: &str,
) -> BurstReport {
    let n = cfg.burst;
    let reads_before = fresh_reads(&clients[0], url).await;
    let ranges_before = etcd_ranges(etcd_url).await;
    let b = bar(cfg.progress, n as u64, "burst");
    let started = Instant::now();
    let spacing = Duration::from_secs(1).div_f64(n.max(1) as f64);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let node = i % cfg.nodes.max(1);
        let u = if i % 2 == 0 {
            format!(
                "{url}/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=30&fieldSelector=spec.nodeName%3Dnode-{node}"
            )
        } else {
            format!("{url}/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-{node}")
        };
        let http = clients[i % clients.len()].clone();
        let watch = i % 2 == 0;
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let out = one(&http, &u, watch).await;
            b.inc(1);
            (out, t.elapsed())
        }));
        // Paced over one second, as a fleet's reconnects arrive, not all in one instant.
        let due = started + spacing.mul_f64((i + 1) as f64);
        if due > Instant::now() + Duration::from_millis(1) {
            tokio::time::sleep_until(due).await;
        }
    }
    let sent_in = started.elapsed();
    let mut report = BurstReport {
        requests: n,
        sent_in_s: sent_in.as_secs_f64(),
        ..BurstReport::default()
    };
    let mut took = Vec::with_capacity(n);
    for t in tasks {
        match t.await {
            Ok((Ok(()), d)) => {
                report.served += 1;
                took.push(d.as_secs_f64() * 1000.0);
            }
            Ok((Err(429), _)) => report.too_many += 1,
            Ok((Err(_), _)) | Err(_) => report.failed += 1,
        }
    }
    b.finish_and_clear();
    report.all_done_s = started.elapsed().as_secs_f64();
    took.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        took.get(((took.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(f64::NAN)
    };
    report.p50_ms = pct(0.50);
    report.p99_ms = pct(0.99);
    report.fresh_reads = fresh_reads(&clients[0], url)
        .await
        .zip(reads_before)
        .map(|(a, b)| a.saturating_sub(b));
    report.etcd_ranges = etcd_ranges(etcd_url)
        .await
        .zip(ranges_before)
        .map(|(a, b)| a.saturating_sub(b));
    info!(?report, "burst");
    report
}

/// One request: `Ok` when served to its end (a WatchList to its initial-events-end bookmark),
/// else the HTTP status (0 for a transport failure or a stream that ended early).
async fn one(http: &Http, url: &str, watch: bool) -> Result<(), u16> {
    let (status, mut body) = http.get(url).await.map_err(|_| 0u16)?;
    if status != 200 {
        return Err(status);
    }
    let mut seen = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|_| 0u16)?;
        if watch {
            seen.extend_from_slice(&chunk);
            // The end bookmark is the only frame carrying this annotation.
            if memchr::memmem::find(&seen, b"k8s.io/initial-events-end").is_some() {
                return Ok(());
            }
            // Keep only a tail long enough to hold the marker across chunk boundaries.
            if seen.len() > 64 * 1024 {
                seen.drain(..seen.len() - 64);
            }
        }
    }
    if watch { Err(0) } else { Ok(()) }
}

/// The server's `watchcache_fresh_reads_total`, summed over resources.
async fn fresh_reads(http: &Http, url: &str) -> Option<u64> {
    let text = http.text(&format!("{url}/metrics")).await.ok()?;
    super::sum_metric(&text, "watchcache_fresh_reads_total", &[])
}

/// Range requests etcd served (`grpc_server_started_total{grpc_method="Range"}`).
pub(super) async fn etcd_ranges(url: &str) -> Option<u64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|l| {
                l.starts_with("grpc_server_started_total{") && l.contains("grpc_method=\"Range\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn counters_are_summed_over_their_labels() {
        let text = "# HELP x\nwatchcache_fresh_reads_total{resource=\"pods\"} 3\nwatchcache_fresh_reads_total{resource=\"nodes\"} 2\nwatchcache_fresh_reads_totalx 9\n";
        let sum = |labels: &[&str]| {
            super::super::sum_metric(text, "watchcache_fresh_reads_total", labels)
        };
        assert_eq!(sum(&[]), Some(5));
        assert_eq!(sum(&["resource=\"nodes\""]), Some(2));
        assert_eq!(sum(&["resource=\"pods\"", "x=\"y\""]), None);
    }
}
