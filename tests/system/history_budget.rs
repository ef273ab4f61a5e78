//! The history byte budget, end to end: `watchcache serve --history-bytes 16Mi` on a real etcd,
//! one ConfigMap rewritten 120 times with 1 MB of data. Without a budget the count-sized window
//! would keep every one of those events (it starts at 100 and doubles while they are fresh), over
//! 100 MB; with it, the server's RSS grows by about the budget, the `history_bytes` metric stays
//! under it, and a watch from before the kept events gets 410 Expired, never silence.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::Client;
use serde_json::Value;
use watchcache_etcd::free_port;

const BUDGET: u64 = 16 << 20;
const MB: usize = 1 << 20;

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The resident set of a process, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    kb * 1024
}

fn configmap(i: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big","namespace":"default","uid":"0b9a0c1e-0000-4000-8000-000000000001"}},"data":{{"n":"{i}","pad":"{}"}}}}"#,
        // Each revision's bytes differ, as real rewrites do.
        char::from(b'a' + (i % 26) as u8).to_string().repeat(MB)
    )
}

async fn metric(c: &Client, base: &str, name: &str) -> Option<u64> {
    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.contains(name) && l.contains("resource=\"configmaps\"") && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits until the server's ConfigMap is at `rv`.
async fn wait_rv(c: &Client, base: &str, rv: i64) {
    for _ in 0..600 {
        if let Ok(r) = c
            .get(format!("{base}/api/v1/namespaces/default/configmaps/big"))
            .send()
            .await
            && let Ok(v) = r.json::<Value>().await
            && v["metadata"]["resourceVersion"].as_str() == Some(&rv.to_string())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server did not reach revision {rv}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_byte_budget_bounds_the_servers_memory_and_expires_watchers_behind_it() {
    let etcd = support::etcd::etcd().await;
    let url = etcd.server.url();
    let mut kv = support::etcd::client(std::slice::from_ref(&url)).await;
    let key = "/registry/configmaps/default/big";
    let first = support::etcd::put_retry(&mut kv, key, configmap(0)).await;

    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args(["serve", "--etcd", &url, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--resources", "configmaps", "--history-bytes", "16Mi"])
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let server = Serve(child);
    let pid = server.0.id();
    let base = format!("http://127.0.0.1:{port}");
    let c = Client::new();
    wait_rv(&c, &base, first).await;
    // The server turned transparent huge pages off for itself (the default, `heap.rs`); kernels
    // since 5.0 show it in `THP_enabled`.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    if let Some(thp) = status.lines().find_map(|l| l.strip_prefix("THP_enabled:")) {
        assert_eq!(thp.trim(), "0", "the server's transparent huge pages");
    }

    // Warm up: a few events through the window, so the baseline includes the allocator's and
    // the etcd watch's steady buffers for 1 MB values.
    let mut last = first;
    for i in 1..=4 {
        last = support::etcd::put_retry(&mut kv, key, configmap(i)).await;
    }
    wait_rv(&c, &base, last).await;
    let before = rss_bytes(pid);
    let watch_from = last;

    for i in 5..125 {
        last = support::etcd::put_retry(&mut kv, key, configmap(i)).await;
    }
    wait_rv(&c, &base, last).await;
    // Let the allocator settle what the ingest of the last events freed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_bytes(pid);
    let held = metric(&c, &base, "history_bytes").await.unwrap();
    let events = metric(&c, &base, "history_events").await.unwrap();
    let grew = after.saturating_sub(before);
    eprintln!(
        "RSS {} MiB -> {} MiB (+{} MiB); window {events} events, {} MiB",
        before >> 20,
        after >> 20,
        grew >> 20,
        held >> 20
    );
    assert!(held <= BUDGET, "the window holds {held} bytes");
    assert!(held > BUDGET / 2, "the window fills up to the budget");
    assert!(
        (10..=16).contains(&events),
        "about 16 events of 1 MB fit: {events}"
    );
    // 120 events of 1 MB went through; the window keeps about 16 of them. What grows beyond the
    // budget is the allocator's slack and transient ingest buffers, well under the 100+ MB the
    // window would hold without a budget.
    assert!(
        grew < BUDGET + (24 << 20),
        "RSS grew by {} MiB with a 16 MiB budget",
        grew >> 20
    );

    // A watch from before the kept events: 410 Expired, as an ERROR event.
    let r = c
        .get(format!(
            "{base}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={watch_from}&timeoutSeconds=5"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    let first_line: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    assert_eq!(first_line["type"], "ERROR", "{first_line}");
    assert_eq!(first_line["object"]["code"], 410);
    assert_eq!(first_line["object"]["reason"], "Expired");
    // A watch from within the window replays what it holds.
    let r = c
        .get(format!(
            "{base}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}&timeoutSeconds=2",
            last - 3
        ))
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    let kinds: Vec<String> = body
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["type"].to_string())
        .collect();
    assert_eq!(
        kinds, ["\"MODIFIED\""; 3],
        "the last three revisions replay"
    );
    drop(server);
}
