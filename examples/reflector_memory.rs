//! Memory per object: the same pods held by a watchcache `Cache` (what `watchcache_kube` keeps)
//! or by kube-rs's reflector `Store`, measured as the process's resident set growth, one holder
//! per process run.
//!
//! ```sh
//! cargo run --release --example reflector_memory -- watchcache 100000
//! cargo run --release --example reflector_memory -- reflector 100000
//! ```

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use watchcache::{Cache, CacheConfig, ResourceDef};

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn pod_json(i: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"pod-{i}","namespace":"ns-{}","uid":"6f1c2d3e-0000-4000-8000-{i:0>12}","resourceVersion":"{}","creationTimestamp":"2026-11-21T10:00:00Z","labels":{{"app":"app-{}","pod-template-hash":"7c9b8d6f5"}}}},"spec":{{"nodeName":"node-{}","containers":[{{"name":"main","image":"registry.example/app:1.2.3","resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}}}},"ports":[{{"containerPort":8080,"protocol":"TCP"}}]}}],"restartPolicy":"Always","serviceAccountName":"default"}},"status":{{"phase":"Running","podIP":"10.0.0.1","hostIP":"192.0.2.1","conditions":[{{"type":"Ready","status":"True"}}]}}}}"#,
        i % 100,
        i + 2,
        i % 100,
        i % 1000
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "watchcache".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let before = rss();
    match which.as_str() {
        "reflector" => {
            let mut writer: Writer<Pod> = Writer::default();
            for i in 0..n {
                let p: Pod = serde_json::from_str(&pod_json(i)).unwrap();
                writer.apply_watcher_event(&watcher::Event::Apply(p));
            }
            let store = writer.as_reader();
            report(&which, n, before, store.len());
        }
        _ => {
            let def = ResourceDef::builtin("pods").unwrap();
            let (cache, mut writer) = Cache::new(def.clone(), CacheConfig::default());
            let mut resync = writer.resync(n as u64 + 2);
            let mut page = Vec::with_capacity(1000);
            for i in 0..n {
                let key = format!("/registry/pods/ns-{}/pod-{i}", i % 100);
                page.push(
                    cache
                        .decode(&key, pod_json(i).as_bytes(), i as u64 + 2)
                        .unwrap(),
                );
                if page.len() == 1000 {
                    resync.add_page(page.drain(..));
                }
            }
            resync.add_page(page);
            resync.finish();
            report(&which, n, before, cache.stats().objects);
        }
    }
}

fn report(which: &str, n: usize, before: usize, held: usize) {
    assert_eq!(held, n);
    let grew = rss().saturating_sub(before);
    println!(
        "{which}: {n} pods, RSS +{} MiB, {} B per object",
        grew >> 20,
        grew / n
    );
}
