//! Writes go through to the resource's upstream ([`Writes`]): create, update and delete, with
//! `metadata.resourceVersion` (the upstream's mod revision) as the precondition. Bodies are checked
//! here; stored bytes never carry a resourceVersion, and the cache sees every write through its
//! source like any other change.

// Reads outside input (request or etcd data): it must not panic on any of it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use std::time::SystemTime;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::cache::Cache;
use crate::model::ResourceDef;
use crate::model::labels;
use crate::model::names::{self, NameRule};
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

/// Upstream's metadata rules, every broken one a cause naming its field (422 Invalid): the name by
/// the resource's rule, the namespace a DNS label, label keys qualified names and values short
/// names. Label values that are not strings are a malformed body (400), as upstream's decoder
/// refuses them.
fn validate_meta(def: &ResourceDef, obj: &Map<String, Value>) -> Result<(), ApiError> {
    let Some(Value::Object(meta)) = obj.get("metadata") else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    let name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
    const INVALID: &str = "FieldValueInvalid";
    let mut causes = Vec::new();
    let quoted = |v: &str| serde_json::to_string(v).unwrap_or_default();
    if let Err(errs) = NameRule::for_resource(&def.group, &def.plural).validate(name) {
        for e in errs {
            causes.push((
                INVALID,
                "metadata.name".to_owned(),
                format!("Invalid value: {}: {e}", quoted(name)),
            ));
        }
    }
    if let Some(ns) = meta.get("namespace").and_then(Value::as_str)
        && let Err(errs) = names::validate_namespace(ns)
    {
        for e in errs {
            causes.push((
                INVALID,
                "metadata.namespace".to_owned(),
                format!("Invalid value: {}: {e}", quoted(ns)),
            ));
        }
    }
    match meta.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(labels)) => {
            for (k, v) in labels {
                let Value::String(v) = v else {
                    return Err(ApiError::bad_request(format!(
                        "metadata.labels[{}] must be a string, not {v}",
                        quoted(k)
                    )));
                };
                if let Err(e) = labels::validate_key(k) {
                    causes.push((INVALID, "metadata.labels".to_owned(), e));
                }
                if let Err(e) = labels::validate_value(v) {
                    causes.push((
                        INVALID,
                        format!("metadata.labels[{}]", quoted(k)),
                        format!("Invalid value: {}: {e}", quoted(v)),
                    ));
                }
            }
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "metadata.labels must be an object, not {other}"
            )));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&def.kind, name, causes))
    }
}

/// The bytes to store for `obj`, refused unless the cache would decode them exactly as ingest
/// will: nothing is stored that the cache would then skip (and the client be answered 500).
fn encode_checked(cache: &Cache, key: &str, obj: &Map<String, Value>) -> Result<Bytes, ApiError> {
    let stored = Bytes::from(serde_json::to_vec(obj).map_err(internal)?);
    cache
        .decode(key, &stored, 1)
        .map_err(|e| ApiError::bad_request(format!("the object cannot be stored: {}", e.reason)))?;
    Ok(stored)
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
    validate_meta(def, &obj)?;
    let name = name_of(&obj);
    let meta = meta_mut(&mut obj);
    meta.entry("uid")
        .or_insert_with(|| Value::String(new_uid()));
    meta.entry("creationTimestamp").or_insert_with(|| {
        Value::String(humantime::format_rfc3339_seconds(SystemTime::now()).to_string())
    });
    let key = def.key_for(namespace, &name);
    let stored = encode_checked(cache, &key, &obj)?;
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
    validate_meta(def, &obj)?;
    let key = def.key_for(namespace, name);
    let current = writes
        .get(&key)
        .await
        .map_err(|e| write_failed(e, def, name))?
        .ok_or_else(|| not_found(def, name))?;
    if precondition.is_some_and(|p| p != current.mod_revision) {
        return Err(ApiError::conflict(&def.plural, name));
    }
    // Identity fields the client left out are kept from the stored object.
    if let Ok(Value::Object(old)) = serde_json::from_slice::<Value>(&current.value)
        && let Some(Value::Object(old_meta)) = old.get("metadata")
    {
        let meta = meta_mut(&mut obj);
        for field in ["uid", "creationTimestamp"] {
            if let (false, Some(v)) = (meta.contains_key(field), old_meta.get(field)) {
                meta.insert(field.into(), v.clone());
            }
        }
    }
    let stored = encode_checked(cache, &key, &obj)?;
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
    match cache.decode(&key, &prev, rev) {
        Ok(o) => Ok(o.json().clone()),
        // Deleting a value the cache could not decode is how it gets cleaned up: the delete
        // happened, so it succeeds, answered as upstream answers deletes without an object.
        Err(e) => {
            tracing::warn!(key, error = %e, "deleted a value that was not a valid object");
            Ok(Bytes::from(
                serde_json::json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {"name": name, "kind": def.plural},
                })
                .to_string(),
            ))
        }
    }
}

/// A random RFC 4122 version 4 UUID, as the API server assigns to new objects: 122 random bits,
/// the version nibble 4 and the variant bits `10`.
fn new_uid() -> String {
    let r = fastrand::u128(..);
    let v = (r & !(0xf << 76) & !(0b11 << 62)) | (0x4 << 76) | (0b10 << 62);
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_rfc_4122_version_4() {
        for _ in 0..1000 {
            let u = new_uid();
            let parts: Vec<&str> = u.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12],
                "{u}"
            );
            assert!(u.chars().all(|c| c == '-' || c.is_ascii_hexdigit()), "{u}");
            assert!(parts[2].starts_with('4'), "version 4: {u}");
            assert!(
                matches!(parts[3].chars().next(), Some('8' | '9' | 'a' | 'b')),
                "variant 10: {u}"
            );
        }
    }
}
