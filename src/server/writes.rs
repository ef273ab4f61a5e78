//! Writes go through to the resource's upstream ([`Writes`]): create, update and delete, with
//! `metadata.resourceVersion` (the upstream's mod revision) as the precondition. Bodies are checked
//! here; stored bytes never carry a resourceVersion, and the cache sees every write through its
//! source like any other change.

use std::time::SystemTime;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::cache::Cache;
use crate::model::ResourceDef;
use crate::server::status::ApiError;
use crate::upstream::{WriteError, Writes};

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(500, "InternalError", e.to_string())
}

/// The answer to a write the upstream refused or failed.
fn write_failed(e: WriteError, def: &ResourceDef, name: &str) -> ApiError {
    match e {
        WriteError::AlreadyExists => ApiError::already_exists(&def.plural, name),
        WriteError::NotFound => not_found(def, name),
        WriteError::Conflict => ApiError::conflict(&def.plural, name),
        WriteError::Timeout => ApiError::new(504, "Timeout", "the upstream did not answer in time"),
        WriteError::Upstream(m) => internal(m),
    }
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
fn take_precondition(obj: &mut Map<String, Value>) -> Result<Option<u64>, ApiError> {
    match meta_mut(obj).remove("resourceVersion") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => s.parse::<u64>().map(Some).map_err(|_| {
            ApiError::bad_request(format!("invalid metadata.resourceVersion \"{s}\""))
        }),
        Some(other) => Err(ApiError::bad_request(format!(
            "metadata.resourceVersion must be a string, not {other}"
        ))),
    }
}

/// The stored object at `rev`, encoded by the cache (so it carries `metadata.resourceVersion`).
fn respond(cache: &Cache, key: &str, stored: &[u8], rev: u64) -> Result<Bytes, ApiError> {
    cache
        .decode(key, stored, rev)
        .map(|o| o.json().clone())
        .map_err(internal)
}

/// POST: create; 409 AlreadyExists if the key exists.
pub async fn create(
    cache: &Cache,
    writes: &dyn Writes,
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
    let stored = Bytes::from(serde_json::to_vec(&obj).map_err(internal)?);
    let rev = writes
        .create(&key, stored.clone())
        .await
        .map_err(|e| write_failed(e, def, &name))?;
    respond(cache, &key, &stored, rev)
}

fn not_found(def: &ResourceDef, name: &str) -> ApiError {
    ApiError::from(crate::Error::NotFound {
        kind: def.plural.clone(),
        name: name.to_owned(),
    })
}

/// PUT: update an existing object; `metadata.resourceVersion`, when given, must equal the stored
/// mod revision (409 Conflict otherwise).
pub async fn update(
    cache: &Cache,
    writes: &dyn Writes,
    namespace: Option<&str>,
    name: &str,
    body: &[u8],
) -> Result<Bytes, ApiError> {
    let def = cache.definition();
    let mut obj = parse_object(def, body, namespace, Some(name))?;
    let precondition = take_precondition(&mut obj)?;
    let key = def.key_for(namespace, name);
    let current = writes
        .get(&key)
        .await
        .map_err(|e| write_failed(e, def, name))?
        .ok_or_else(|| not_found(def, name))?;
    if precondition.is_some_and(|p| p != current.mod_revision) {
        return Err(ApiError::conflict(&def.plural, name));
    }
    // Identity fields the client left out are kept from the stored object (JSON, or protobuf as
    // kube-apiserver stores built-ins).
    if let Ok(Value::Object(old)) = cache
        .decode(&key, &current.value, current.mod_revision)
        .map(|o| o.to_value())
        && let Some(Value::Object(old_meta)) = old.get("metadata")
    {
        let meta = meta_mut(&mut obj);
        for field in ["uid", "creationTimestamp"] {
            if let (false, Some(v)) = (meta.contains_key(field), old_meta.get(field)) {
                meta.insert(field.into(), v.clone());
            }
        }
    }
    let stored = Bytes::from(serde_json::to_vec(&obj).map_err(internal)?);
    // Changed between the read and the write: deleted (404) or modified (409).
    let rev = writes
        .replace(&key, stored.clone(), current.mod_revision)
        .await
        .map_err(|e| write_failed(e, def, name))?;
    respond(cache, &key, &stored, rev)
}

/// DELETE: remove an object, with an optional `preconditions.resourceVersion` in the body's
/// DeleteOptions. Answers the last state at the deletion's revision.
pub async fn delete(
    cache: &Cache,
    writes: &dyn Writes,
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
            Some(Value::String(s)) => Some(s.parse::<u64>().map_err(|_| {
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
    let (rev, prev) = writes
        .delete(&key, precondition)
        .await
        .map_err(|e| write_failed(e, def, name))?;
    respond(cache, &key, &prev, rev)
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
