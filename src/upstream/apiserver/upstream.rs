//! `ApiUpstream`: the [`Upstream`] of one resource on an API server, for consistent reads. The
//! current resourceVersion is a `limit=1` LIST's (the API server answers it consistently, from
//! etcd or from its own fresh cache); a progress request starts a short probe watch in the
//! follower (see `source.rs`), since the Kubernetes API has no progress requests of its own.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::cache::{BoxFuture, Upstream};
use crate::error::{Error, Result};
use crate::upstream::apiserver::rest::Rest;

/// The [`Upstream`] of one resource followed on an API server.
pub(crate) struct ApiUpstream {
    pub rest: Rest,
    pub progress: Arc<Notify>,
}

impl Upstream for ApiUpstream {
    fn current_revision(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            self.rest
                .list_page(1, None)
                .await
                .map(|p| p.rv)
                .map_err(|e| {
                    Error::Upstream(format!(
                        "reading the current resourceVersion of {}: {e}",
                        self.rest.collection
                    ))
                })
        })
    }

    fn request_progress(&self) {
        self.progress.notify_one();
    }
}
