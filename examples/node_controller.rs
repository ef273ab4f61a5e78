//! A per-node controller on the embedded cache (`watchcache::kube`): one routed watch per node,
//! each woken only by changes of pods on its node, reconciling that node's pods from the
//! `spec.nodeName` index.
//!
//! ```sh
//! cargo run --example node_controller -- KUBECONFIG node-0 node-1 node-2
//! ```
//! (a watchcache server works as the API server: point the kubeconfig at its URL.)

use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use watchcache::Selection;
use watchcache::apiserver::client_from_kubeconfig;
use watchcache::kube::{KubeCache, definition_for};

/// What a node's reconcile does: here, report the node's running and pending pods.
fn reconcile(node: &str, pods: &[Arc<Pod>]) {
    let phase = |p: &&Arc<Pod>| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    let running = pods.iter().filter(|p| phase(p) == "Running").count();
    println!(
        "{node}: {} pods, {running} running, {} not yet",
        pods.len(),
        pods.len() - running
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let kubeconfig = args
        .next()
        .ok_or("usage: node_controller KUBECONFIG NODE...")?;
    let nodes: Vec<String> = args.collect();
    let client = client_from_kubeconfig(kubeconfig.as_ref(), None).await?;
    let def = definition_for::<Pod>(&[("spec.nodeName", true)])?;
    let pods: KubeCache<Pod> = KubeCache::start(client, def).await?;
    let mut tasks = Vec::new();
    for node in nodes {
        let pods = pods.clone(); // one cache and one upstream watch, shared
        tasks.push(tokio::spawn(async move {
            let selection = Selection::all().with_fields(&format!("spec.nodeName={node}"))?;
            // Subscribe first, then reconcile the current state: nothing falls in between.
            let mut events = pods.watch(selection).await?;
            reconcile(&node, &pods.by_index("spec.nodeName", &node)?);
            while let Some(ev) = events.next().await {
                let (kind, pod) = ev?;
                println!(
                    "{node}: {kind:?} {}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                );
                reconcile(&node, &pods.by_index("spec.nodeName", &node)?);
            }
            Ok::<(), watchcache::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
