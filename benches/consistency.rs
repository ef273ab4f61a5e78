//! The consistency check of 100 000 pods against a real etcd (etcd from PATH, on loopback): the
//! cache's (key, revision) pairs at its revision read in pages of 10 000 under its read lock, etcd's
//! read keys-only at that revision in pages of 10 000, and the two merged. What one periodic check
//! costs, every 5 minutes per resource.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use etcd_client::{Client, Txn, TxnOp};
use watchcache::{CacheConfig, ResourceDef};
use watchcache_etcd::{EtcdCaches, EtcdConfig, LocalEtcd};

const PODS: usize = 100_000;

fn pod(i: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"pod-{i:06}","namespace":"ns-{}","uid":"{i:08x}-0000-4000-8000-000000000000","labels":{{"app":"web-{}"}}}},"spec":{{"nodeName":"node-{}","containers":[{{"name":"c","image":"registry.k8s.io/pause:3.10"}}]}},"status":{{"phase":"Running","podIP":"10.0.{}.{}"}}}}"#,
        i % 100,
        i % 50,
        i % 1000,
        (i / 256) % 256,
        i % 256
    )
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (etcd, caches) = rt.block_on(async {
        let etcd = LocalEtcd::start(dir.path()).await.unwrap();
        let mut client = Client::connect([etcd.url()], None).await.unwrap();
        for chunk in (0..PODS).collect::<Vec<_>>().chunks(100) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|i| {
                    TxnOp::put(
                        format!("/registry/pods/ns-{}/pod-{i:06}", i % 100),
                        pod(*i),
                        None,
                    )
                })
                .collect();
            client.txn(Txn::new().and_then(ops)).await.unwrap();
        }
        let caches = EtcdCaches::connect(
            EtcdConfig::new([etcd.url()]),
            vec![ResourceDef::builtin("pods").unwrap()],
            CacheConfig::default().consistency_check_period(Duration::ZERO),
        )
        .await
        .unwrap();
        let pods = caches.cache("pods").unwrap();
        tokio::time::timeout(Duration::from_secs(120), pods.wait_ready())
            .await
            .unwrap()
            .unwrap();
        (etcd, caches)
    });
    let (_, out) = rt.block_on(caches.check_now("pods")).unwrap();
    assert!(out.consistent() && out.cached == PODS as u64, "{out:?}");
    let mut g = c.benchmark_group("consistency_check");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("100k_pods_etcd", |b| {
        b.iter(|| rt.block_on(caches.check_now("pods")).unwrap());
    });
    g.finish();
    rt.block_on(caches.shutdown());
    drop(etcd);
}

criterion_group!(benches, bench);
criterion_main!(benches);
