//! What the client conventions cost on a LIST of 1 000 pods served over loopback HTTP: plain JSON
//! (the stored bytes, spliced), a Table (printer columns evaluated per object) and a
//! PartialObjectMetadataList (each object's metadata re-serialized). The same server, cache and
//! client for every format; the ratios are the conversions' cost.

mod support;

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use watchcache::{Cache, CacheConfig, ResourceDef};
use watchcache_server::{Served, Server, ServerConfig};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const METADATA: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let def = ResourceDef::builtin("pods").unwrap();
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    let objects = support::pods(&probe, 1_000, 100, 0, 1);
    let (cache, _writer) = support::loaded(def, CacheConfig::default(), objects, 1);
    let url = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/v1/pods", listener.local_addr().unwrap());
        let server = Server::new(ServerConfig::default(), [Served::new(cache)]);
        tokio::spawn(server.serve(listener, std::future::pending()));
        url
    });
    let client = Arc::new(reqwest::Client::new());
    let list = |accept: &'static str| {
        let (client, url) = (Arc::clone(&client), url.clone());
        async move {
            let r = client
                .get(&url)
                .header("accept", accept)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap().len()
        }
    };
    for accept in ["application/json", TABLE, METADATA] {
        let bytes = rt.block_on(list(accept));
        eprintln!("{accept}: {bytes} bytes for 1 000 pods");
    }
    let mut g = c.benchmark_group("list_1000_pods_as");
    g.sample_size(30);
    g.bench_function("json", |b| b.iter(|| rt.block_on(list("application/json"))));
    g.bench_function("table", |b| b.iter(|| rt.block_on(list(TABLE))));
    g.bench_function("partial_object_metadata", |b| {
        b.iter(|| rt.block_on(list(METADATA)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
