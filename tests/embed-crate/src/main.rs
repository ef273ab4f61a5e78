//! A per-node pod cache in a controller pinned to Kubernetes 1.33: it only has to build.

use k8s_openapi::api::core::v1::Pod;
use watchcache_kube::{KubeCache, definition_for};

// The embedded server's HTTP/2 is watchcache's h2 (the crate `watchcache-h2`), which reaches an
// embedder through the dependency itself, not through a `[patch]` of watchcache's workspace.
const _: () = assert!(watchcache_server::H2_PATCHED);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = kube::Client::try_default().await?;
    let def = definition_for::<Pod>(&[("spec.nodeName", true)])?;
    let pods: KubeCache<Pod> = KubeCache::start(client, def).await?;
    let on_node = pods.by_index("spec.nodeName", "node-7")?;
    println!("{} pods on node-7", on_node.len());
    Ok(())
}
