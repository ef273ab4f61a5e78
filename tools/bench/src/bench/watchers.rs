//! Opening the watchers of a run, and measuring what idle ones cost the server.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::ProgressBar;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::load::{self, Counters, Recorder};
use super::procstat;
use super::stack::Stack;
use super::{BenchConfig, TlsMode, WATCHERS_PER_H2_CONNECTION};

/// Opens `total` watchers with `spawn(i)`, paced so the server's accept queue keeps up, and waits
/// (at most 120 s) until each has connected or failed.
pub(super) async fn open_watchers(
    total: usize,
    counters: &Counters,
    bar: &ProgressBar,
    mut spawn: impl FnMut(usize) -> tokio::task::JoinHandle<()>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        tasks.push(spawn(i));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done =
            counters.connected.load(Ordering::Relaxed) + counters.failed.load(Ordering::Relaxed);
        bar.set_position(done as u64);
        if done >= total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tasks
}

/// Resident memory per idle watcher: the server's RSS before and after opening as many idle
/// watches as the run will (selecting nodes and labels no pod has), closed again afterwards.
pub(super) async fn idle_watcher_rss(
    cfg: &BenchConfig,
    stack: &Stack,
    url: &str,
    pid: u32,
) -> Option<f64> {
    let total = cfg.watchers + cfg.unrouted;
    let before = procstat::rss_bytes(pid)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let counters = Arc::new(Counters::default());
    let per_client = match cfg.tls {
        Some(TlsMode::H2) => WATCHERS_PER_H2_CONNECTION,
        _ => total.max(1),
    };
    let http: Vec<_> = (0..total.div_ceil(per_client).max(1))
        .map(|_| stack.http_client())
        .collect();
    let tasks = open_watchers(total, &counters, &ProgressBar::hidden(), |i| {
        let selector = if i < cfg.watchers {
            format!("&fieldSelector=spec.nodeName%3Didle-{i}")
        } else {
            "&labelSelector=idle%3Dyes".to_owned()
        };
        let u = format!("{url}/api/v1/pods?watch=1&resourceVersion=0{selector}");
        let rec = Arc::new(Recorder::default());
        tokio::spawn(load::http_watcher(
            http[i / per_client].clone(),
            u,
            load::WatchWire::Json,
            rec,
            Arc::clone(&counters),
            stop_rx.clone(),
        ))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = procstat::rss_bytes(pid)?;
    if stop_tx.send(true).is_err() {
        warn!("idle watchers already gone");
    }
    for t in tasks {
        let _ = t.await;
    }
    let opened = counters
        .connected
        .load(std::sync::atomic::Ordering::Relaxed);
    info!(
        before,
        after,
        watchers = total,
        opened,
        "idle watchers measured"
    );
    // Missing, not 0, when none opened or the RSS did not grow.
    (opened > 0 && after > before).then(|| (after - before) as f64 / opened as f64)
}
