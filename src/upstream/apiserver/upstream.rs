//! `ApiUpstream`: the [`Upstream`] of one resource on an API server, for consistent reads. The
//! current resourceVersion is a `limit=1` LIST's (the API server answers it consistently, from
//! etcd or from its own fresh cache); a progress request starts a short probe watch in the
//! follower (see `source.rs`), since the Kubernetes API has no progress requests of its own.

use std::sync::Arc;

use tokio::sync::Notify;

use bytes::Bytes;

use crate::cache::{BoxFuture, Upstream};
use crate::error::{Error, Result};
use crate::model::ResourceDef;
use crate::upstream::apiserver::rest::{Rest, RestError, identity};
use crate::upstream::follow::check::{Truth, TruthEntry, TruthError, TruthPage};

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
                    Error::upstream_from(
                        format_args!(
                            "reading the current resourceVersion of {}",
                            self.rest.collection
                        ),
                        e,
                    )
                })
        })
    }

    fn request_progress(&self) {
        self.progress.notify_one();
    }
}

/// The API server's side of the consistency check (`follow/check.rs`): a paged LIST at exactly
/// the checked resourceVersion (`resourceVersionMatch=Exact`), items keyed as the cache keys them.
pub(crate) struct ApiTruth {
    pub rest: Rest,
    pub def: Arc<ResourceDef>,
    pub page_size: usize,
}

fn truth_error(e: RestError) -> TruthError {
    if e.is_expired() {
        TruthError::Expired(e.to_string())
    } else {
        TruthError::Failed(e.to_string())
    }
}

impl Truth for ApiTruth {
    fn max_page(&self) -> usize {
        self.page_size
    }

    async fn page(
        &mut self,
        n: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> std::result::Result<TruthPage, TruthError> {
        let page = self
            .rest
            .list_exact(n, limit, cursor.as_deref())
            .await
            .map_err(truth_error)?;
        if page.rv != n {
            return Err(TruthError::Failed(format!(
                "a LIST at exactly {n} answered at {}",
                page.rv
            )));
        }
        let mut entries = Vec::with_capacity(page.items.len());
        for raw in page.items {
            let id = identity(&self.def, &raw).map_err(truth_error)?;
            entries.push(TruthEntry {
                key: id.key,
                rv: id.rv,
                value: Some(raw),
            });
        }
        Ok(TruthPage {
            entries,
            next: page.continue_token,
        })
    }

    async fn value_at(
        &mut self,
        _n: u64,
        _key: &str,
    ) -> std::result::Result<Option<Bytes>, TruthError> {
        // Every entry of a LIST carries its object.
        Ok(None)
    }
}
