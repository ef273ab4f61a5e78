//! `ApiUpstream`: the [`Upstream`] of one resource on an API server, for consistent reads.
//!
//! A consistent read proves the cache fresh by selection (`cache/fresh.rs`): a consistent LIST
//! of `PartialObjectMetadata`, with the read's own namespace and selectors, names each selected
//! object and its resourceVersion at the list's. It costs the API server what the client's own
//! LIST would, less the objects' bodies, and answers at once: the Kubernetes API has no progress
//! requests, and its bookmarks come about once a minute.
//!
//! Where it cannot (a field label the API server does not know), the current resourceVersion is
//! a `limit=1` LIST's (the API server answers it consistently, from etcd or from its own fresh
//! cache), and a progress request starts a short probe watch in the follower (see `source.rs`).

use std::sync::Arc;

use tokio::sync::Notify;

use bytes::Bytes;

use crate::rest::{Rest, RestError, identity};
use watchcache::{BoxFuture, Selected, Upstream};
use watchcache::{Error, Result};
use watchcache::{ResourceDef, Selection};
use watchcache_follow::check::{Truth, TruthEntry, TruthError, TruthPage};

/// The [`Upstream`] of one resource followed on an API server.
pub(crate) struct ApiUpstream {
    pub rest: Rest,
    pub def: Arc<ResourceDef>,
    pub progress: Arc<Notify>,
}

/// Objects per page of a proof by selection: metadata of about 1 KB to 10 KB each (managed
/// fields included).
const SELECTED_PAGE: usize = 500;

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

    fn compacted(&self, revision: u64) -> Option<BoxFuture<'_, Result<bool>>> {
        Some(Box::pin(async move {
            self.rest.compacted(revision).await.map_err(|e| {
                Error::upstream_from(
                    format_args!("reading {} at revision {revision}", self.rest.collection),
                    e,
                )
            })
        }))
    }

    fn selected(&self, selection: &Selection) -> Option<BoxFuture<'_, Result<Selected>>> {
        let selection = selection.clone();
        Some(Box::pin(async move {
            let failed = |e: RestError| {
                Error::upstream_from(
                    format_args!("reading the selected objects of {}", self.rest.collection),
                    e,
                )
            };
            let mut objects = Vec::new();
            let mut revision = None;
            let mut next: Option<String> = None;
            loop {
                let page = self
                    .rest
                    .list_metadata(&self.def, &selection, SELECTED_PAGE, next.as_deref())
                    .await
                    .map_err(failed)?;
                revision.get_or_insert(page.rv);
                for raw in &page.items {
                    let id = identity(&self.def, raw).map_err(failed)?;
                    objects.push((id.key, id.rv));
                }
                match page.continue_token {
                    Some(c) => next = Some(c),
                    None => break,
                }
            }
            objects.sort_unstable();
            Ok(Selected {
                revision: revision.unwrap_or_default(),
                objects,
            })
        }))
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
