//! A kubelet-style demo of the library: one pods cache, one routed watcher per node, an unrouted
//! controller, and churn from the in-memory source. Prints what each kind of watcher received and
//! the cache's counters.
//!
//! `cargo run --release --example kubelets -- [NODES] [PODS] [WRITES]`

use futures_util::{FutureExt, StreamExt};
use tracing::info;
use watchcache::{
    Cache, CacheConfig, ListOptions, MemorySource, ResourceDef, ResourceVersion, Selection,
    WatchOptions,
};

fn pod(name: &str, node: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","labels":{{"app":"demo"}}}},"spec":{{"nodeName":"{node}"}}}}"#
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (nodes, pods, writes) = (arg(1, 1000), arg(2, 10_000), arg(3, 100_000));
    let (cache, writer) = Cache::new(
        ResourceDef::builtin("pods").ok_or("no pods definition")?,
        CacheConfig::default(),
    );
    let src = MemorySource::new(writer, 1, []);
    let mut kubelets = Vec::new();
    for n in 0..nodes {
        let sel = Selection::all().with_fields(&format!("spec.nodeName=node-{n}"))?;
        kubelets.push(
            cache
                .watch(WatchOptions::new(sel, ResourceVersion::At(1)))
                .await?,
        );
    }
    let mut controller = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
        .await?;
    info!(nodes, pods, writes, "watchers registered; writing");
    let start = std::time::Instant::now();
    let (mut to_kubelets, mut to_controller) = (0u64, 0u64);
    for i in 0..writes {
        let (name, node) = (
            format!("pod-{}", i % pods),
            format!("node-{}", (i * 7) % nodes),
        );
        src.put(&format!("/registry/pods/default/{name}"), pod(&name, &node))?;
        if i % 1000 == 999 || i + 1 == writes {
            for k in &mut kubelets {
                while let Some(Some(ev)) = k.next().now_or_never() {
                    ev?;
                    to_kubelets += 1;
                }
            }
            while let Some(Some(ev)) = controller.next().now_or_never() {
                ev?;
                to_controller += 1;
            }
        }
    }
    let elapsed = start.elapsed();
    let list = cache
        .list(&ListOptions::all().select(Selection::all().with_fields("spec.nodeName=node-7")?))
        .await?;
    info!(
        ?elapsed,
        per_write_us = elapsed.as_secs_f64() * 1e6 / writes as f64,
        to_kubelets,
        to_controller,
        node7_pods = list.items.len(),
        "done"
    );
    info!(stats = ?cache.stats(), "cache");
    Ok(())
}
