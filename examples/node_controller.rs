//! A per-node controller on the embedded cache (`watchcache_kube`) and kube-runtime: one
//! `Controller` per node, each fed by a routed watch of one shared cache (so woken only by changes
//! of pods on its node), reconciling that node's pods from the `spec.nodeName` index. Reads are
//! shared `Arc<Pod>`s, decoded once per pod version; the cache is `Clone`; readiness is awaited
//! with no fixed timeout.
//!
//! ```sh
//! cargo run --example node_controller -- KUBECONFIG node-0 node-1 node-2
//! ```
//! (a watchcache server works as the API server: point the kubeconfig at its URL.)

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector};
use watchcache::Selection;
use watchcache_kube::client_from_kubeconfig;
use watchcache_kube::{KubeCache, definition_for};

/// A node's name and the shared cache.
type Ctx = (String, KubeCache<Pod>);

/// What a node's reconcile does: here, report the node's running and pending pods.
async fn reconcile(_changed: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, watchcache::Error> {
    let (node, pods) = &*ctx;
    let on_node = pods.by_index("spec.nodeName", node)?; // from the index's bitmap, no scan
    let running = on_node
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    println!(
        "{node}: {} pods, {running} running, {} not yet",
        on_node.len(),
        on_node.len() - running
    );
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Pod>, e: &watchcache::Error, _: Arc<Ctx>) -> Action {
    eprintln!("reconcile failed: {e}");
    Action::requeue(Duration::from_secs(5))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let kubeconfig = args
        .next()
        .ok_or("usage: node_controller KUBECONFIG NODE...")?;
    let client = client_from_kubeconfig(kubeconfig.as_ref(), None).await?;
    let def = definition_for::<Pod>(&[("spec.nodeName", true)])?;
    // One upstream watch for every node; returns once the first sync is in.
    let pods: KubeCache<Pod> = KubeCache::start(client, def).await?;
    let mut controllers = Vec::new();
    for node in args {
        let on_node = Selection::all().with_fields(&format!("spec.nodeName={node}"))?;
        let (store, writer) = reflector::store();
        let trigger = pods
            .events(on_node)
            .await?
            .reflect(writer)
            .applied_objects();
        let ctx = Arc::new((node, pods.clone()));
        controllers.push(tokio::spawn(
            Controller::for_stream(trigger, store)
                .run(reconcile, error_policy, ctx)
                .for_each(|_| std::future::ready(())),
        ));
    }
    for c in controllers {
        c.await?;
    }
    Ok(())
}
