//! Range reads of one resource prefix: the paged list of a (re)sync, and the [`Upstream`] that
//! consistent reads consult.
// Reads outside input (requests or stored values): no panicking access (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{GetOptions, KvClient};
use tokio::sync::Notify;

use super::encryption::Transformer;
use watchcache::{BoxFuture, KeyRange, RangePage, RawKv, Upstream};
use watchcache::{Error, Result};

/// The end of the key range `[prefix, end)` holding every key with the prefix.
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Largest etcd response the cache accepts. A list page of 10 000 objects of a few KB each is tens of
/// MB, far over gRPC's default 4 MiB (kube-apiserver allows 2 GiB).
pub(crate) const MAX_RESPONSE_BYTES: usize = 512 * 1024 * 1024;

/// How long a unary etcd request may take before it counts as failed.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn upstream_error(e: etcd_client::Error, requested: Option<u64>) -> Error {
    if let etcd_client::Error::GRpcStatus(s) = &e
        && s.message().contains("required revision has been compacted")
    {
        let requested = requested.unwrap_or_default();
        return Error::Expired {
            requested,
            oldest: requested + 1,
        };
    }
    Error::upstream_from("", e)
}

/// An answer larger than [`MAX_RESPONSE_BYTES`], refused by the client.
fn is_too_large(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("message length too large"))
}

fn is_future_revision(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("required revision is a future revision"))
}

/// etcd's current revision, from a count-only read of one key (the prefix itself).
async fn current_revision(kv: &mut KvClient, key: &str) -> Result<u64> {
    let resp = tokio::time::timeout(
        REQUEST_TIMEOUT,
        kv.get(key, Some(GetOptions::new().with_count_only())),
    )
    .await
    .map_err(|_| Error::upstream("etcd revision read timed out"))?
    .map_err(|e| Error::upstream_from("", e))?;
    Ok(resp.header().map_or(0, |h| h.revision() as u64))
}

/// One page of `keys` (bounded by `[prefix, prefix end)`) at `revision` (0: current,
/// linearizable), with or without values.
pub(crate) async fn read_page(
    kv: &mut KvClient,
    prefix: &str,
    revision: Option<u64>,
    keys: KeyRange,
    limit: usize,
    keys_only: bool,
) -> Result<RangePage> {
    let given_end = keys.end.clone();
    let end = keys
        .end
        .map_or_else(|| prefix_end(prefix), String::into_bytes);
    let mut opts = GetOptions::new()
        .with_range(end)
        .with_limit(limit as i64)
        .with_revision(revision.unwrap_or(0) as i64);
    if keys_only {
        opts = opts.with_keys_only();
    }
    let start = keys.from.unwrap_or_else(|| prefix.to_owned());
    let resp = match tokio::time::timeout(REQUEST_TIMEOUT, kv.get(start.clone(), Some(opts)))
        .await
        .map_err(|_| {
            Error::upstream(format!(
                "etcd range read timed out after {REQUEST_TIMEOUT:?}"
            ))
        })? {
        Ok(resp) => resp,
        // More than the client takes (objects larger than the cursor has seen): the same page,
        // an eighth as many entries; the caller continues after the last one returned.
        Err(e) if limit > 1 && is_too_large(&e) => {
            let keys = KeyRange {
                from: Some(start),
                end: given_end,
            };
            return Box::pin(read_page(
                kv,
                prefix,
                revision,
                keys,
                (limit / 8).max(1),
                keys_only,
            ))
            .await;
        }
        // A revision etcd has not reached (a forged or foreign continue token): what the cache
        // answers for a resourceVersion it has not reached, 504 with Retry-After, never etcd's text.
        Err(e) if is_future_revision(&e) => {
            let current = current_revision(kv, prefix).await.unwrap_or_default();
            return Err(Error::TooLargeResourceVersion {
                requested: revision.unwrap_or_default(),
                current,
            });
        }
        Err(e) => return Err(upstream_error(e, revision)),
    };
    let rev = resp.header().map_or(0, |h| h.revision() as u64);
    let more = resp.more();
    let kvs = resp
        .kvs()
        .iter()
        .filter_map(|kv| {
            let key = std::str::from_utf8(kv.key()).ok()?.to_owned();
            Some(RawKv {
                key,
                value: Bytes::copy_from_slice(kv.value()),
                mod_revision: kv.mod_revision() as u64,
            })
        })
        .collect();
    Ok(RangePage {
        revision: revision.unwrap_or(rev),
        kvs,
        more,
    })
}

/// The [`Upstream`] of one resource on etcd.
pub(crate) struct EtcdUpstream {
    pub kv: KvClient,
    pub prefix: String,
    /// Wakes the resource's watch task to send a progress request.
    pub progress: Arc<Notify>,
    pub reliable: bool,
    /// Encryption at rest for this resource, if configured.
    pub transformer: Option<Arc<Transformer>>,
}

impl Upstream for EtcdUpstream {
    fn current_revision(&self) -> BoxFuture<'_, Result<u64>> {
        let mut kv = self.kv.clone();
        let key = self.prefix.clone();
        // A linearizable read of one key (the prefix itself): O(1) in etcd, and its header carries
        // the store's current revision.
        Box::pin(async move { current_revision(&mut kv, &key).await })
    }

    fn request_progress(&self) {
        self.progress.notify_one();
    }

    fn compacted(&self, revision: u64) -> Option<BoxFuture<'_, Result<bool>>> {
        let mut kv = self.kv.clone();
        let key = self.prefix.clone();
        // One key (the prefix itself) at that revision: O(1), refused once compacted.
        Some(Box::pin(async move {
            let opts = GetOptions::new()
                .with_count_only()
                .with_revision(i64::try_from(revision).unwrap_or(i64::MAX));
            match tokio::time::timeout(REQUEST_TIMEOUT, kv.get(key, Some(opts))).await {
                Err(_) => Err(Error::upstream("etcd compaction read timed out")),
                Ok(Ok(_)) => Ok(false),
                Ok(Err(e)) => match upstream_error(e, Some(revision)) {
                    Error::Expired { .. } => Ok(true),
                    other => Err(other),
                },
            }
        }))
    }

    fn progress_is_reliable(&self) -> bool {
        self.reliable
    }

    fn range(
        &self,
        revision: Option<u64>,
        keys: KeyRange,
        limit: usize,
    ) -> BoxFuture<'_, Result<RangePage>> {
        let mut kv = self.kv.clone();
        Box::pin(
            async move { read_page(&mut kv, &self.prefix, revision, keys, limit, false).await },
        )
    }

    fn range_keys(
        &self,
        revision: Option<u64>,
        keys: KeyRange,
        limit: usize,
    ) -> BoxFuture<'_, Result<RangePage>> {
        let mut kv = self.kv.clone();
        Box::pin(async move { read_page(&mut kv, &self.prefix, revision, keys, limit, true).await })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix() {
        assert_eq!(super::prefix_end("/registry/pods/"), b"/registry/pods0");
        assert_eq!(super::prefix_end("a\u{7f}"), b"a\x80");
    }
}
