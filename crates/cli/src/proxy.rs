//! Proxy mode's forwarding, on the same kube-rs client the API server upstream follows with:
//! requests stream to the upstream unchanged (kube adds its authentication), and answers stream
//! back, watches included.

use bytes::Bytes;
use http_body_util::BodyExt;
use watchcache::BoxFuture;
use watchcache_server::{Proxy, ProxyBody};

/// Forwards through a kube-rs client.
pub(crate) struct KubeProxy {
    pub client: kube::Client,
}

impl Proxy for KubeProxy {
    fn forward(
        &self,
        req: http::Request<Bytes>,
    ) -> BoxFuture<'static, Result<http::Response<ProxyBody>, String>> {
        let client = self.client.clone();
        Box::pin(async move {
            let uri = req.uri().to_string();
            let res = client
                .send(req.map(kube::client::Body::from))
                .await
                .map_err(|e| format!("{uri}: {e}"))?;
            Ok(res.map(|b| {
                b.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                    .boxed_unsync()
            }))
        })
    }
}
