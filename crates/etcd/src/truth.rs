//! etcd's side of the consistency check (`watchcache_follow::check`): keys-only range reads of
//! the resource at exactly the checked revision; a value is read only for a key the cache lacks
//! and has no record of skipping, to see whether it decodes, and is decrypted here first, as the
//! source decrypts what it hands the cache.

use std::sync::Arc;

use bytes::Bytes;
use watchcache::{Error, KeyRange, Upstream};
use watchcache_follow::check::{Truth, TruthEntry, TruthError, TruthPage};

use crate::range::EtcdUpstream;

/// etcd's range reads of one resource as the check's truth.
pub(crate) struct RangeTruth {
    /// The resource's upstream, read at the checked revision.
    pub upstream: Arc<EtcdUpstream>,
    /// Entries a page holds at most, however small.
    pub page_size: usize,
}

fn range_error(e: Error) -> TruthError {
    match e {
        Error::Expired { .. } => TruthError::Expired(e.to_string()),
        other => TruthError::Failed(other.to_string()),
    }
}

impl Truth for RangeTruth {
    fn max_page(&self) -> usize {
        self.page_size
    }

    async fn page(
        &mut self,
        n: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<TruthPage, TruthError> {
        let keys = KeyRange {
            from: cursor,
            end: None,
        };
        let page = self
            .upstream
            .range_keys(Some(n), keys, limit)
            .await
            .map_err(range_error)?;
        let next = page
            .more
            .then(|| page.kvs.last().map(|kv| format!("{}\u{0}", kv.key)))
            .flatten();
        let entries = page
            .kvs
            .into_iter()
            .map(|kv| TruthEntry {
                key: kv.key,
                rv: kv.mod_revision,
                value: None,
            })
            .collect();
        Ok(TruthPage { entries, next })
    }

    async fn value_at(&mut self, n: u64, key: &str) -> Result<Option<Bytes>, TruthError> {
        let page = self
            .upstream
            .range(Some(n), KeyRange::one(key), 1)
            .await
            .map_err(range_error)?;
        Ok(page.kvs.into_iter().next().map(|kv| {
            // A value no configured key decrypts is handed on as stored: it does not decode
            // either, so the check counts it skipped, as the source skipped it.
            match self.upstream.plain(&kv.key, &kv.value) {
                Ok(std::borrow::Cow::Owned(plain)) => Bytes::from(plain),
                Ok(std::borrow::Cow::Borrowed(_)) | Err(_) => kv.value,
            }
        }))
    }
}
