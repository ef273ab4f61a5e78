//! `watchcache-bench` at smoke size, both modes, against real etcd and a real server process: the
//! report has the promised shape and the cache delivers everything exactly once, in order.

use std::process::Command;

#[test]
fn the_bench_runs_at_smoke_size_and_reports_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_watchcache-bench"))
        .args([
            "--nodes",
            "10",
            "--pods",
            "200",
            "--watchers",
            "10",
            "--unrouted",
            "2",
        ])
        .args([
            "--rate",
            "100",
            "--duration",
            "3",
            "--mode",
            "both",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed().as_secs() < 30,
        "smoke size finishes in under 30 s"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("latency p50 / p90 / p99 / max ms") && table.contains("etcd watches"),
        "{table}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for mode in ["cache", "direct"] {
        let m = &report[mode];
        for key in [
            "mode",
            "watchers",
            "unrouted_watchers",
            "pods",
            "writes_per_sec",
            "duration_s",
            "delivered",
            "lost",
            "duplicated",
            "out_of_order",
        ] {
            assert!(!m[key].is_null(), "{mode}.{key} in {m}");
        }
        for key in ["p50", "p90", "p99", "max"] {
            assert!(m["latency_ms"][key].is_number(), "{mode}.latency_ms.{key}");
        }
        for key in ["rss_bytes", "cpu_s", "watchers"] {
            assert!(m["etcd"].get(key).is_some(), "{mode}.etcd.{key}");
        }
        for key in ["rss_bytes", "cpu_s", "rss_per_watcher_bytes"] {
            assert!(m["server"].get(key).is_some(), "{mode}.server.{key}");
        }
        assert_eq!(m["watchers"], 10);
        assert_eq!(
            (m["duplicated"].as_u64(), m["out_of_order"].as_u64()),
            (Some(0), Some(0)),
            "{mode}: {m}"
        );
    }
    let cache = &report["cache"];
    assert!(cache["delivered"].as_u64().unwrap() > 300, "{cache}");
    assert_eq!(cache["lost"], 0, "{cache}");
    assert_eq!(cache["unexpected"], 0);
    assert_eq!(
        cache["etcd"]["watchers"], 1,
        "exactly one etcd watch in cache mode"
    );
    assert_eq!(
        report["direct"]["etcd"]["watchers"], 12,
        "one etcd watch per watcher in direct mode"
    );
    assert!(cache["server"]["rss_per_watcher_bytes"].is_number());
    assert!(report["ratios"]["etcd_cpu_s"].is_number());
    assert!(report["ratios"]["latency_p99"].is_number());
}

/// `--tls`: the same load over TLS, watchers multiplexed on HTTP/2 connections (18 per
/// connection), delivered exactly once; the server counts only TLS h2 connections.
#[test]
fn the_bench_runs_over_tls_with_http2() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_watchcache-bench"))
        .args(["--nodes", "40", "--pods", "200", "--watchers", "40"])
        .args(["--unrouted", "2", "--rate", "100", "--duration", "3"])
        .args(["--mode", "cache", "--tls", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let cache = &report;
    assert_eq!(cache["mode"], "cache");
    assert!(cache["delivered"].as_u64().unwrap() > 300, "{cache}");
    assert_eq!(
        (&cache["lost"], &cache["duplicated"], &cache["out_of_order"]),
        (&0.into(), &0.into(), &0.into()),
        "{cache}"
    );
    let connections = cache["server"]["connections"].as_str().unwrap();
    let h2: u64 = connections
        .strip_prefix("tls h2 ")
        .unwrap_or_else(|| panic!("only TLS h2 connections: {connections}"))
        .parse()
        .unwrap();
    // 42 watchers on 3 connections, twice (the idle measurement, then the run), and a few
    // requests of the tool's own.
    assert!(h2 < 20, "watchers share HTTP/2 connections: {connections}");
}

/// `--model kubelet`: simulated kubelets, each on one TLS HTTP/2 connection with its own node
/// certificate, 18 protobuf watches each, authorized by Node,RBAC; both pod paths delivered
/// exactly once against etcd's history, and a node refused another node's pods. Pods stored in
/// etcd as kube-apiserver stores them (protobuf) and as JSON.
#[test]
fn the_kubelet_model_runs_at_smoke_size() {
    for storage in ["protobuf", "json"] {
        kubelet_model_at_smoke_size(storage);
    }
}

fn kubelet_model_at_smoke_size(storage: &str) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_watchcache-bench"))
        .args(["--model", "kubelet", "--nodes", "20", "--pods", "200"])
        .args(["--rate", "100", "--duration", "3", "--lease-period", "1"])
        .args(["--mode", "cache", "--storage", storage, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let side = &report["sides"][0];
    assert_eq!(side["side"], "watchcache", "{side}");
    assert_eq!(side["connections"], 20, "one connection per node: {side}");
    assert_eq!(
        side["watches_opened"], 360,
        "every node's 18 watches opened and authorized: {side}"
    );
    for key in [
        "watches_forbidden",
        "watches_failed",
        "unreadable_frames",
        "stream_errors",
    ] {
        assert_eq!(side[key], 0, "{key}: {side}");
    }
    assert_eq!(
        side["cross_node_watch_status"], 403,
        "a node may not watch another node's pods"
    );
    for path in ["node_path", "label_path"] {
        let p = &side[path];
        assert_eq!(p["watches"], 20, "{path}: {p}");
        assert!(p["delivered"].as_u64().unwrap() > 50, "{path}: {p}");
        for key in ["lost", "duplicated", "out_of_order", "unexpected"] {
            assert_eq!(p[key], 0, "{path}.{key}: {p}");
        }
        for key in ["p50", "p99"] {
            assert!(p["latency_ms"][key].as_f64().unwrap() > 0.0, "{path}: {p}");
        }
    }
    assert!(
        side["lease_writes_per_sec"].as_f64().unwrap() > 10.0,
        "20 leases renewed every second: {side}"
    );
    assert!(
        side["other_events"].as_u64().unwrap() > 0,
        "idle watches got their objects"
    );
    for key in [
        "server_cpu_s",
        "etcd_cpu_s",
        "rss_per_first_watch_bytes",
        "rss_per_watch_bytes",
    ] {
        assert!(side[key].is_number(), "{key}: {side}");
    }
    // 20 connections are about 300 KB of heap, which the allocator may take from pages it
    // already holds: the RSS then does not grow, and the figure is reported missing (null),
    // never 0. It is a number or missing, never anything else.
    let per_connection = &side["rss_per_connection_bytes"];
    assert!(
        per_connection.is_null() || per_connection.as_f64().is_some_and(|b| b > 0.0),
        "rss_per_connection_bytes: {side}"
    );
    assert_eq!(side["storage"], storage, "{side}");
    // The server's own stages over the churn: each pod revision queued once, and each delivery
    // on either pod path written (so at least the deliveries the client counted).
    let stages = &side["server_stages"];
    assert!(stages["queued"]["count"].as_u64().unwrap() > 50, "{stages}");
    let delivered = side["node_path"]["delivered"].as_u64().unwrap()
        + side["label_path"]["delivered"].as_u64().unwrap();
    assert!(
        stages["written"]["count"].as_u64().unwrap() >= delivered,
        "{stages} against {delivered} delivered"
    );
    assert!(stages["written"]["p99_le_ms"].is_number(), "{stages}");
    // The load tool's own etcd watch saw the churn: its delivery after each write's ack.
    assert!(
        side["etcd_watch_after_ack_ms"]["max"].as_f64().unwrap() > 0.0,
        "{side}"
    );
}

/// `--model catchup` at smoke size, both storages, and with each upstream: the backlog written while
/// the cache is cut off from etcd (or a leaf from its root) reaches every watcher exactly once, in
/// order, and the report has its figures.
#[test]
fn the_catchup_model_runs_at_smoke_size() {
    // (storage, follows, the watchers read, a leaf reads its root)
    for (storage, follow, watch_wire, leaf_wire) in [
        ("protobuf", "etcd", "json", "protobuf"),
        ("json", "etcd", "protobuf", "protobuf"),
        ("protobuf", "root", "protobuf", "protobuf"),
        ("protobuf", "root", "json", "json"),
        ("json", "root-embedded", "json", "protobuf"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("report.json");
        let out = Command::new(env!("CARGO_BIN_EXE_watchcache-bench"))
            .args(["--model", "catchup", "--nodes", "20", "--pods"])
            .args(["200", "--watchers", "20", "--unrouted", "3", "--apps", "5"])
            .args(["--events", "2000", "--storage", storage, "--follow", follow])
            .args(["--watch-wire", watch_wire, "--leaf-wire", leaf_wire])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(
            table.contains("ingest s, first to last backlog revision"),
            "{table}"
        );
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(r["storage"], storage, "{r}");
        assert_eq!(r["follow"], follow, "{r}");
        assert_eq!(
            (&r["watch_wire"], &r["leaf_wire"]),
            (&watch_wire.into(), &leaf_wire.into()),
            "{r}"
        );
        assert_eq!(r["events"], 2000, "{r}");
        // A leaf's root is measured apart; with etcd there is none.
        assert_eq!(r["root_cpu_s"].is_number(), follow != "etcd", "{r}");
        assert_eq!(r["watchers_connected"], 23, "{r}");
        // 2 000 events over 20 nodes and 5 apps: every node watcher and every label watcher has
        // events to see; all of them arrive once, in order, and nothing else does.
        assert!(r["delivered"].as_u64().unwrap() >= 2000, "{r}");
        for k in [
            "lost",
            "duplicated",
            "out_of_order",
            "unexpected",
            "watcher_errors",
        ] {
            assert_eq!(r[k], 0, "{k}: {r}");
        }
        assert!(r["ingest_events_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert!(
            r["catchup_s"].as_f64().unwrap() >= r["ingest_s"].as_f64().unwrap(),
            "{r}"
        );
        let stored = r["stored_bytes_mean"].as_f64().unwrap();
        match storage {
            // The same pods: kube-apiserver's protobuf is smaller than their JSON.
            "protobuf" => assert!((900.0..1700.0).contains(&stored), "{r}"),
            _ => assert!(stored > 1900.0, "{r}"),
        }
    }
}

/// The processes a bench started (etcd, the servers) end with it when it is interrupted: SIGINT
/// drops its futures, and their drops stop the processes, instead of leaving them running.
#[test]
fn an_interrupted_bench_stops_the_processes_it_started() {
    use std::io::{BufRead, BufReader};
    let mut bench = Command::new(env!("CARGO_BIN_EXE_watchcache-bench"))
        .args(["--model", "catchup", "--follow", "root", "--nodes", "20"])
        .args([
            "--pods",
            "200",
            "--watchers",
            "20",
            "--unrouted",
            "3",
            "--apps",
            "5",
        ])
        // Far more than it writes before the interrupt: it is still writing the backlog.
        .args(["--events", "10000000"])
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = bench.stderr.take().unwrap();
    // Drains stderr for the whole run, so the bench never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("watchers open") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(std::time::Duration::from_secs(120))
        .expect("the bench opened its watchers");
    let started = descendants(bench.id());
    // etcd, the root and the leaf.
    assert!(started.len() >= 3, "children: {started:?}");
    let interrupted = Command::new("kill")
        .args(["-INT", &bench.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let status = wait_for(&mut bench, std::time::Duration::from_secs(60));
    assert!(
        !status.success(),
        "an interrupted bench reports failure: {status}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let alive: Vec<u32> = started.iter().copied().filter(|p| running(*p)).collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running after the bench ended: {alive:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Every process below `pid` (`/proc/PID/task/*/children`, recursively).
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for c in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let state = s.rsplit_once(')')?.1.split_whitespace().next()?.to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

fn wait_for(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the interrupted bench did not end within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
