//! [`Writes`] on etcd: each write is one transaction whose compare is the precondition, so a write
//! never lands on a state its caller did not see.
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
use etcd_client::{Compare, CompareOp, DeleteOptions, KvClient, Txn, TxnOp, TxnOpResponse};

use super::encryption::Transformer;
use crate::cache::BoxFuture;
use crate::upstream::{Stored, WriteError, Writes};

/// How long one etcd request of a write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes through to etcd (see [`EtcdCaches::writes`](super::EtcdCaches::writes)).
#[derive(Clone)]
pub struct EtcdWrites {
    kv: KvClient,
    /// Encryption at rest by resource prefix: values are stored encrypted with the first
    /// provider, and read back decrypted.
    transformers: Arc<[(String, Arc<Transformer>)]>,
}

impl EtcdWrites {
    pub(crate) fn new(kv: KvClient, transformers: Arc<[(String, Arc<Transformer>)]>) -> EtcdWrites {
        EtcdWrites { kv, transformers }
    }

    fn transformer(&self, key: &str) -> Option<&Transformer> {
        self.transformers
            .iter()
            .filter(|(prefix, _)| key.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, t)| &**t)
    }

    /// The value as etcd stores it: a built-in kind in kube-apiserver's protobuf (`k8s\0` +
    /// `runtime.Unknown`), as kube-apiserver writes it, so that both can share one etcd; custom
    /// resources as the JSON given. Then encrypted with the resource's first provider.
    fn encrypt(&self, key: &str, value: Bytes) -> Result<Vec<u8>, WriteError> {
        let value = match crate::model::protobuf::storage_form(&value) {
            Ok(Some(pb)) => Bytes::from(pb),
            Ok(None) => value,
            Err(e) => {
                return Err(WriteError::upstream(format!(
                    "encoding {key} as protobuf: {e}"
                )));
            }
        };
        match self.transformer(key) {
            None => Ok(value.to_vec()),
            Some(t) => t
                .encrypt(key, &value)
                .map_err(|e| WriteError::upstream(format!("encrypting {key}: {e}"))),
        }
    }

    /// A value read from etcd, decrypted.
    fn decrypt(&self, key: &str, value: &[u8]) -> Result<Bytes, WriteError> {
        match self.transformer(key) {
            None => Ok(Bytes::copy_from_slice(value)),
            Some(t) => t
                .decrypt(key, value)
                .map(|v| Bytes::copy_from_slice(&v))
                .map_err(|e| WriteError::upstream(format!("reading {key}: {e}"))),
        }
    }

    async fn txn(&self, t: Txn) -> Result<etcd_client::TxnResponse, WriteError> {
        let mut kv = self.kv.clone();
        tokio::time::timeout(WRITE_TIMEOUT, kv.txn(t))
            .await
            .map_err(|_| WriteError::Timeout)?
            .map_err(|e| {
                if is_too_large(&e) {
                    WriteError::TooLarge
                } else {
                    WriteError::upstream_from("etcd", e)
                }
            })
    }

    async fn read(&self, key: &str) -> Result<Option<Stored>, WriteError> {
        let mut kv = self.kv.clone();
        let resp = tokio::time::timeout(WRITE_TIMEOUT, kv.get(key, None))
            .await
            .map_err(|_| WriteError::Timeout)?
            .map_err(|e| WriteError::upstream_from("etcd", e))?;
        resp.kvs()
            .first()
            .map(|kv| {
                Ok(Stored {
                    value: self.decrypt(key, kv.value())?,
                    mod_revision: kv.mod_revision() as u64,
                })
            })
            .transpose()
    }

    /// Why a transaction's compare failed: the key is gone, or it changed.
    async fn failed_precondition(&self, key: &str) -> WriteError {
        match self.read(key).await {
            Ok(None) => WriteError::NotFound,
            Ok(Some(_)) => WriteError::Conflict,
            Err(e) => e,
        }
    }
}

/// Whether etcd refused a request for its size: over `--max-request-bytes` (etcd's
/// `ErrGRPCRequestTooLarge`), or over the gRPC message limit that sits 512 KiB above it.
fn is_too_large(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("request is too large")
            || s.message().contains("message larger than max"))
}

fn revision(resp: &etcd_client::TxnResponse) -> u64 {
    resp.header().map_or(0, |h| h.revision() as u64)
}

impl Writes for EtcdWrites {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Stored>, WriteError>> {
        Box::pin(self.read(key))
    }

    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, Result<u64, WriteError>> {
        Box::pin(async move {
            let t = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, self.encrypt(key, value)?, None)]);
            let resp = self.txn(t).await?;
            if !resp.succeeded() {
                return Err(WriteError::AlreadyExists);
            }
            Ok(revision(&resp))
        })
    }

    fn replace<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64, WriteError>> {
        Box::pin(async move {
            let t = Txn::new()
                .when([Compare::mod_revision(
                    key,
                    CompareOp::Equal,
                    expected as i64,
                )])
                .and_then([TxnOp::put(key, self.encrypt(key, value)?, None)]);
            let resp = self.txn(t).await?;
            if !resp.succeeded() {
                return Err(self.failed_precondition(key).await);
            }
            Ok(revision(&resp))
        })
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<(u64, Bytes), WriteError>> {
        Box::pin(async move {
            let mut compares = vec![Compare::create_revision(key, CompareOp::Greater, 0)];
            if let Some(rv) = expected {
                compares.push(Compare::mod_revision(key, CompareOp::Equal, rv as i64));
            }
            let t = Txn::new().when(compares).and_then([TxnOp::delete(
                key,
                Some(DeleteOptions::new().with_prev_key()),
            )]);
            let resp = self.txn(t).await?;
            if !resp.succeeded() {
                return Err(self.failed_precondition(key).await);
            }
            let rev = revision(&resp);
            let prev = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Delete(d) => {
                    d.prev_kvs().first().map(|kv| self.decrypt(key, kv.value()))
                }
                _ => None,
            });
            prev.ok_or(WriteError::NotFound)?.map(|p| (rev, p))
        })
    }
}
