//! `ApiServerWrites`: the [`Writes`] contract carried out by the API server being followed. A key
//! (`prefix[ns/]name`) names the object's REST path; create is a POST, replace a PUT whose
//! `metadata.resourceVersion` is the precondition, delete a DELETE with `preconditions`. The API
//! server's 404/409 answers map to the contract's errors; the cache sees each write when the
//! follower's watch brings it, like every other change.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::Value;

use crate::rest::{Rest, RestError, collection_path, parse_rv, status_error};
use watchcache::BoxFuture;
use watchcache::ResourceDef;
use watchcache::{Stored, WriteError, Writes};

/// Writes through to the API server, for every followed resource.
pub struct ApiServerWrites {
    rest: Rest,
    defs: Vec<Arc<ResourceDef>>,
}

impl std::fmt::Debug for ApiServerWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerWrites")
            .field("resources", &self.defs.len())
            .finish()
    }
}

/// Where a key's object lives on the API server.
struct Located {
    collection: String,
    item: String,
}

impl ApiServerWrites {
    pub(crate) fn new(rest: Rest, defs: Vec<Arc<ResourceDef>>) -> ApiServerWrites {
        ApiServerWrites { rest, defs }
    }

    fn locate(&self, key: &str) -> Result<Located, WriteError> {
        let unknown = || WriteError::upstream(format!("no followed resource has key {key}"));
        let def = self
            .defs
            .iter()
            .filter(|d| key.starts_with(&d.prefix))
            .max_by_key(|d| d.prefix.len())
            .ok_or_else(unknown)?;
        let rest = &key[def.prefix.len()..];
        let (ns, name) = match (def.namespaced, rest.split_once('/')) {
            (true, Some((ns, name))) => (Some(ns), name),
            (false, None) => (None, rest),
            _ => return Err(unknown()),
        };
        let collection = collection_path(def, ns);
        Ok(Located {
            item: format!("{collection}/{}", encode_segment(name)),
            collection,
        })
    }
}

/// Percent-encodes a path segment (names are DNS-like, but a key is not trusted to be).
fn encode_segment(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

fn upstream(e: RestError) -> WriteError {
    match e {
        RestError::Timeout(_) => WriteError::Timeout,
        RestError::Status { code: 504, .. } => WriteError::Timeout,
        RestError::Status { code: 413, .. } => WriteError::TooLarge,
        other => WriteError::upstream_from("", other),
    }
}

/// The error of a refused write.
fn refused(status: StatusCode, body: &[u8]) -> WriteError {
    let e = status_error(status, body);
    match e.code() {
        Some(404) => WriteError::NotFound,
        Some(409) => match &e {
            RestError::Status { reason, .. } if reason == "AlreadyExists" => {
                WriteError::AlreadyExists
            }
            _ => WriteError::Conflict,
        },
        _ => upstream(e),
    }
}

/// The resourceVersion of an answered object.
fn rv_of(body: &[u8]) -> Result<u64, WriteError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| WriteError::upstream_from("the API server answered non-JSON", e))?;
    let s = v
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            WriteError::upstream("the API server's answer has no metadata.resourceVersion")
        })?;
    parse_rv(s).map_err(|e| WriteError::upstream_from("", e))
}

/// `value` with `metadata.resourceVersion` set to `rv`: the API server's optimistic concurrency.
fn with_rv(value: &[u8], rv: u64) -> Result<Bytes, WriteError> {
    let mut v: Value = serde_json::from_slice(value)
        .map_err(|e| WriteError::upstream_from("the value to write is not JSON", e))?;
    let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(WriteError::upstream("the value to write has no metadata"));
    };
    meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    serde_json::to_vec(&v)
        .map(Bytes::from)
        .map_err(|e| WriteError::upstream_from("encoding the value to write", e))
}

impl Writes for ApiServerWrites {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Stored>, WriteError>> {
        Box::pin(async move {
            let at = self.locate(key)?;
            let (status, body) = self
                .rest
                .call(Method::GET, &at.item, None)
                .await
                .map_err(upstream)?;
            if status == StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            let mod_revision = rv_of(&body)?;
            Ok(Some(Stored {
                value: body,
                mod_revision,
            }))
        })
    }

    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, Result<u64, WriteError>> {
        Box::pin(async move {
            let at = self.locate(key)?;
            let (status, body) = self
                .rest
                .call(Method::POST, &at.collection, Some(value))
                .await
                .map_err(upstream)?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            rv_of(&body)
        })
    }

    fn replace<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64, WriteError>> {
        Box::pin(async move {
            let at = self.locate(key)?;
            let body = with_rv(&value, expected)?;
            let (status, body) = self
                .rest
                .call(Method::PUT, &at.item, Some(body))
                .await
                .map_err(upstream)?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            rv_of(&body)
        })
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<(u64, Bytes), WriteError>> {
        // The API server checks the precondition again, atomically with the delete.
        let opts = Bytes::from(match expected {
            Some(rv) => serde_json::json!({
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "preconditions": {"resourceVersion": rv.to_string()},
            })
            .to_string(),
            None => String::new(),
        });
        self.delete_with(key, opts)
    }

    fn deletes_itself(&self) -> bool {
        true
    }

    fn delete_with<'a>(
        &'a self,
        key: &'a str,
        options: Bytes,
    ) -> BoxFuture<'a, Result<(u64, Bytes), WriteError>> {
        Box::pin(async move {
            let at = self.locate(key)?;
            // The last state, in case the API server answers the deletion with a bare Status.
            let before = self.get(key).await?.ok_or(WriteError::NotFound)?;
            if let Ok(v) = serde_json::from_slice::<Value>(&options)
                && let Some(rv) = v
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                && rv.parse::<u64>().ok() != Some(before.mod_revision)
            {
                return Err(WriteError::Conflict);
            }
            let body = (!options.is_empty()).then_some(options);
            let (status, body) = self
                .rest
                .call(Method::DELETE, &at.item, body)
                .await
                .map_err(upstream)?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            let is_status = serde_json::from_slice::<Value>(&body)
                .ok()
                .is_some_and(|v| v.get("kind").and_then(Value::as_str) == Some("Status"));
            if is_status {
                return Ok((before.mod_revision, before.value));
            }
            Ok((rv_of(&body)?, body))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_to_the_contract() {
        let exists = br#"{"kind":"Status","code":409,"reason":"AlreadyExists","message":"x"}"#;
        assert_eq!(
            refused(StatusCode::CONFLICT, exists),
            WriteError::AlreadyExists
        );
        let conflict = br#"{"kind":"Status","code":409,"reason":"Conflict","message":"x"}"#;
        assert_eq!(
            refused(StatusCode::CONFLICT, conflict),
            WriteError::Conflict
        );
        assert_eq!(refused(StatusCode::NOT_FOUND, b""), WriteError::NotFound);
        assert_eq!(
            refused(StatusCode::GATEWAY_TIMEOUT, b""),
            WriteError::Timeout
        );
        assert_eq!(
            refused(StatusCode::PAYLOAD_TOO_LARGE, b""),
            WriteError::TooLarge
        );
    }

    #[test]
    fn the_precondition_is_set_in_the_body() {
        let b = with_rv(br#"{"metadata":{"name":"a","resourceVersion":"1"}}"#, 9).unwrap();
        assert_eq!(
            &b[..],
            br#"{"metadata":{"name":"a","resourceVersion":"9"}}"#
        );
        assert!(with_rv(b"[]", 9).is_err());
        assert!(
            matches!(rv_of(br#"{"metadata":{"resourceVersion":"x"}}"#), Err(WriteError::Upstream { message, .. }) if message.contains("not a decimal"))
        );
    }
}
