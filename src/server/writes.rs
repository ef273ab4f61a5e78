//! Writes go through to etcd: create, update and delete in etcd transactions, with
//! `metadata.resourceVersion` (the etcd mod revision) as the precondition. Stored bytes never carry
//! a resourceVersion; the cache sees every write through its watch like any other change.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use etcd_client::{Compare, CompareOp, KvClient, Txn, TxnOp, TxnOpResponse};
use serde_json::{Map, Value};

use super::status::ApiError;
use crate::cache::Cache;
use crate::definition::ResourceDef;

const ETCD_TIMEOUT: Duration = Duration::from_secs(10);

fn etcd_failed(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(500, "InternalError", format!("etcd: {e}"))
}

/// Parses a request body into a JSON object of this resource, with name and namespace checked
/// against the path.
fn parse_object(
    def: &ResourceDef,
    body: &[u8],
    namespace: Option<&str>,
    path_name: Option<&str>,
) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(mut obj) = v else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "kind \"{kind}\" does not match the resource's kind {}",
            def.kind
        )));
    }
    obj.insert("kind".into(), Value::String(def.kind.clone()));
    obj.insert("apiVersion".into(), Value::String(def.api_version()));
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() || name.len() > 253 || name.contains('/') || name == "." || name == ".." {
        return Err(ApiError::bad_request(format!(
            "metadata.name \"{name}\" is invalid: it must be 1-253 characters without '/'"
        )));
    }
    if let Some(p) = path_name
        && p != name
    {
        return Err(ApiError::bad_request(format!(
            "the name in the body (\"{name}\") does not match the name in the URL (\"{p}\")"
        )));
    }
    match (
        def.namespaced,
        namespace,
        meta.get("namespace").and_then(Value::as_str),
    ) {
        (true, Some(ns), Some(body_ns)) if body_ns != ns => {
            return Err(ApiError::bad_request(format!(
                "the namespace of the object (\"{body_ns}\") does not match the namespace of the request (\"{ns}\")"
            )));
        }
        (true, Some(ns), _) => {
            meta.insert("namespace".into(), Value::String(ns.to_owned()));
        }
        (true, None, _) => {
            return Err(ApiError::bad_request(format!(
                "{} are namespaced: write them under /namespaces/NAMESPACE/",
                def.plural
            )));
        }
        (false, _, _) => {
            meta.remove("namespace");
        }
    }
    Ok(obj)
}

fn meta_mut(obj: &mut Map<String, Value>) -> &mut Map<String, Value> {
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("parse_object ensures metadata is an object"),
    }
}

fn name_of(obj: &Map<String, Value>) -> String {
    obj.get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Takes `metadata.resourceVersion` out of the object (it is never stored) as a precondition.
fn take_precondition(obj: &mut Map<String, Value>) -> Result<Option<i64>, ApiError> {
    match meta_mut(obj).remove("resourceVersion") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => s.parse::<i64>().map(Some).map_err(|_| {
            ApiError::bad_request(format!("invalid metadata.resourceVersion \"{s}\""))
        }),
        Some(other) => Err(ApiError::bad_request(format!(
            "metadata.resourceVersion must be a string, not {other}"
        ))),
    }
}

/// The stored object at `rev`, encoded by the cache (so it carries `metadata.resourceVersion`).
fn respond(cache: &Cache, key: &str, stored: &[u8], rev: i64) -> Result<Bytes, ApiError> {
    cache
        .decode(key, stored, rev as u64)
        .map(|o| o.json().clone())
        .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))
}

async fn txn(kv: &mut KvClient, t: Txn) -> Result<etcd_client::TxnResponse, ApiError> {
    tokio::time::timeout(ETCD_TIMEOUT, kv.txn(t))
        .await
        .map_err(|_| ApiError::new(504, "Timeout", "etcd did not answer in time"))?
        .map_err(etcd_failed)
}

/// POST: create; 409 AlreadyExists if the key exists.
pub async fn create(
    cache: &Cache,
    kv: &mut KvClient,
    namespace: Option<&str>,
    body: &[u8],
) -> Result<Bytes, ApiError> {
    let def = cache.definition();
    let mut obj = parse_object(def, body, namespace, None)?;
    take_precondition(&mut obj)?;
    let name = name_of(&obj);
    let meta = meta_mut(&mut obj);
    meta.entry("uid")
        .or_insert_with(|| Value::String(new_uid()));
    meta.entry("creationTimestamp").or_insert_with(|| {
        Value::String(humantime::format_rfc3339_seconds(SystemTime::now()).to_string())
    });
    let key = def.key_for(namespace, &name);
    let stored = serde_json::to_vec(&obj).map_err(etcd_failed)?;
    let t = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), stored.clone(), None)]);
    let resp = txn(kv, t).await?;
    if !resp.succeeded() {
        return Err(ApiError::already_exists(&def.plural, &name));
    }
    respond(
        cache,
        &key,
        &stored,
        resp.header().map_or(0, |h| h.revision()),
    )
}

/// The current stored value and mod revision of a key.
async fn current(kv: &mut KvClient, key: &str) -> Result<Option<(Vec<u8>, i64)>, ApiError> {
    let resp = tokio::time::timeout(ETCD_TIMEOUT, kv.get(key, None))
        .await
        .map_err(|_| ApiError::new(504, "Timeout", "etcd did not answer in time"))?
        .map_err(etcd_failed)?;
    Ok(resp
        .kvs()
        .first()
        .map(|kv| (kv.value().to_vec(), kv.mod_revision())))
}

fn not_found(def: &ResourceDef, name: &str) -> ApiError {
    ApiError::from(crate::Error::NotFound {
        kind: def.plural.clone(),
        name: name.to_owned(),
    })
}

/// Why a transaction's compare failed: the object is gone (404) or was modified (409).
async fn failed_precondition(
    kv: &mut KvClient,
    def: &ResourceDef,
    key: &str,
    name: &str,
) -> ApiError {
    match current(kv, key).await {
        Ok(None) => not_found(def, name),
        Ok(Some(_)) => ApiError::conflict(&def.plural, name),
        Err(e) => e,
    }
}

/// PUT: update an existing object; `metadata.resourceVersion`, when given, must equal the stored
/// mod revision (409 Conflict otherwise).
pub async fn update(
    cache: &Cache,
    kv: &mut KvClient,
    namespace: Option<&str>,
    name: &str,
    body: &[u8],
) -> Result<Bytes, ApiError> {
    let def = cache.definition();
    let mut obj = parse_object(def, body, namespace, Some(name))?;
    let precondition = take_precondition(&mut obj)?;
    let key = def.key_for(namespace, name);
    let (old, mod_rev) = current(kv, &key)
        .await?
        .ok_or_else(|| not_found(def, name))?;
    if precondition.is_some_and(|p| p != mod_rev) {
        return Err(ApiError::conflict(&def.plural, name));
    }
    // Identity fields the client left out are kept from the stored object.
    if let Ok(Value::Object(old)) = serde_json::from_slice::<Value>(&old)
        && let Some(Value::Object(old_meta)) = old.get("metadata")
    {
        let meta = meta_mut(&mut obj);
        for field in ["uid", "creationTimestamp"] {
            if let (false, Some(v)) = (meta.contains_key(field), old_meta.get(field)) {
                meta.insert(field.into(), v.clone());
            }
        }
    }
    let stored = serde_json::to_vec(&obj).map_err(etcd_failed)?;
    let t = Txn::new()
        .when([Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            mod_rev,
        )])
        .and_then([TxnOp::put(key.clone(), stored.clone(), None)]);
    let resp = txn(kv, t).await?;
    if !resp.succeeded() {
        // Changed between our read and the transaction: deleted (404) or modified (409).
        return Err(failed_precondition(kv, def, &key, name).await);
    }
    respond(
        cache,
        &key,
        &stored,
        resp.header().map_or(0, |h| h.revision()),
    )
}

/// DELETE: remove an object, with an optional `preconditions.resourceVersion` in the body's
/// DeleteOptions. Answers the last state at the deletion's revision.
pub async fn delete(
    cache: &Cache,
    kv: &mut KvClient,
    namespace: Option<&str>,
    name: &str,
    body: &[u8],
) -> Result<Bytes, ApiError> {
    let def = cache.definition();
    let precondition = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let opts: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
        })?;
        match opts.pointer("/preconditions/resourceVersion") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!("invalid preconditions.resourceVersion \"{s}\""))
            })?),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "preconditions.resourceVersion must be a string, not {other}"
                )));
            }
        }
    };
    let key = def.key_for(namespace, name);
    let mut compares = vec![Compare::create_revision(key.clone(), CompareOp::Greater, 0)];
    if let Some(rv) = precondition {
        compares.push(Compare::mod_revision(key.clone(), CompareOp::Equal, rv));
    }
    let t = Txn::new().when(compares).and_then([TxnOp::delete(
        key.clone(),
        Some(etcd_client::DeleteOptions::new().with_prev_key()),
    )]);
    let resp = txn(kv, t).await?;
    if !resp.succeeded() {
        return Err(failed_precondition(kv, def, &key, name).await);
    }
    let rev = resp.header().map_or(0, |h| h.revision());
    let prev = resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Delete(d) => d.prev_kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    });
    match prev {
        Some(v) => respond(cache, &key, &v, rev),
        None => Err(not_found(def, name)),
    }
}

/// A random UUID (version 4 layout), as the API server assigns to new objects.
fn new_uid() -> String {
    let hex = |n: usize| {
        (0..n)
            .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
            .collect::<String>()
    };
    format!("{}-{}-4{}-{}-{}", hex(8), hex(4), hex(3), hex(4), hex(12))
}
