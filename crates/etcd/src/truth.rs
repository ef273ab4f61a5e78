//! etcd's side of the consistency check (`watchcache_follow::check`): the follower's range
//! truth over the resource's upstream, each value read decrypted first, as the source decrypts
//! what it hands the cache.

use std::sync::Arc;

use bytes::Bytes;
use watchcache_follow::check::RangeTruth;

use crate::range::EtcdUpstream;

/// etcd's range reads of one resource, in pages of at most `page_size`, as the check's truth.
pub(crate) fn range_truth(
    upstream: Arc<EtcdUpstream>,
    page_size: usize,
) -> RangeTruth<EtcdUpstream> {
    let decrypting = Arc::clone(&upstream);
    RangeTruth::new(upstream, page_size).with_plain(Box::new(move |key, value: Bytes| {
        // A value no configured key decrypts is handed on as stored: it does not decode either,
        // so the check counts it skipped, as the source skipped it.
        match decrypting.plain(key, &value) {
            Ok(std::borrow::Cow::Owned(plain)) => Bytes::from(plain),
            Ok(std::borrow::Cow::Borrowed(_)) | Err(_) => value,
        }
    }))
}
