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

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::cache::Cache;
use crate::model::labels;
use crate::model::names::{self, NameRule};
use crate::model::protobuf::fields::unknown_fields;
use crate::model::{Object, ResourceDef};
use crate::server::deletion::{self, DeleteOptions, Plan};
use crate::server::params::{FieldValidation, WriteParams};
use crate::server::patch::PatchKind;
use crate::server::status::ApiError;
use crate::server::strategy;
use crate::upstream::{Stored, WriteError, Writes};
use crate::wire::ObjectList;

/// Admission of the object a write is about to store, given the stored one for an update: the
/// caller's checks beyond the object's own rules (RBAC's escalation check). Runs on the object as
/// it will be stored, so a PATCH is checked on its result.
pub(crate) type Admit<'a> = &'a AdmitFn<'a>;

/// The function behind [`Admit`].
pub(crate) type AdmitFn<'a> = dyn Fn(&Map<String, Value>, Option<&Map<String, Value>>) -> Result<(), ApiError>
    + Send
    + Sync
    + 'a;

/// How many times a PATCH without a resourceVersion precondition is retried when the object
/// changes between its read and its write (upstream retries too: a patch applies to the latest).
const PATCH_ATTEMPTS: usize = 5;

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
        // Not etcd's gRPC text: what is too large, and which limit.
        WriteError::TooLarge => ApiError::entity_too_large(format!(
            "{} \"{name}\" is larger than the storage takes in one write (etcd's --max-request-bytes, 1.5 MiB by default)",
            def.plural
        )),
        WriteError::Upstream { message, .. } => internal(message),
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
/// names, annotation keys qualified names and all annotations at most 256 KiB. Label and
/// annotation values that are not strings are a malformed body (400), as upstream's decoder
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
    match meta.get("annotations") {
        None | Some(Value::Null) => {}
        Some(Value::Object(annotations)) => {
            let mut total = 0usize;
            for (k, v) in annotations {
                let Value::String(v) = v else {
                    return Err(ApiError::bad_request(format!(
                        "metadata.annotations[{}] must be a string, not {v}",
                        quoted(k)
                    )));
                };
                // Annotation keys follow the label key syntax; values are free text.
                if let Err(e) = labels::validate_key(k) {
                    causes.push((INVALID, "metadata.annotations".to_owned(), e));
                }
                total += k.len() + v.len();
            }
            if total > MAX_ANNOTATIONS_BYTES {
                causes.push((
                    "FieldValueTooLong",
                    "metadata.annotations".to_owned(),
                    format!("Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes"),
                ));
            }
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "metadata.annotations must be an object, not {other}"
            )));
        }
    }
    causes.extend(strategy::validate(def, obj));
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&def.kind, name, causes))
    }
}

/// Upstream's limit on the total size of an object's annotation keys and values
/// (`TotalAnnotationSizeLimitB`).
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The bytes to store for `obj`, refused unless the cache would decode them exactly as ingest
/// will: nothing is stored that the cache would then skip (and the client be answered 500).
fn encode_checked(cache: &Cache, key: &str, obj: &Map<String, Value>) -> Result<Bytes, ApiError> {
    let stored = Bytes::from(serde_json::to_vec(obj).map_err(internal)?);
    cache
        .decode(key, &stored, 1)
        .map_err(|e| ApiError::bad_request(format!("the object cannot be stored: {}", e.reason)))?;
    // A built-in kind goes to etcd in protobuf: an object its message cannot hold is refused
    // here, before anything is written.
    crate::model::protobuf::storage_form(&stored)
        .map_err(|e| ApiError::bad_request(format!("the object cannot be stored: {e}")))?;
    Ok(stored)
}

fn meta_mut(obj: &mut Map<String, Value>) -> &mut Map<String, Value> {
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("parse_object ensures metadata is an object"),
    }
}

/// `metadata.name` of a JSON body, or empty.
pub(crate) fn name_in(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .as_ref()
        .and_then(|v| v.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
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

/// The stored object at `rev`, decoded by the cache (so it carries `metadata.resourceVersion`):
/// a built-in kind as its protobuf storage form reads back, so that the answer is what every
/// later read of it shows.
fn respond(cache: &Cache, key: &str, stored: &[u8], rev: u64) -> Result<Object, ApiError> {
    let pb = crate::model::protobuf::storage_form(stored).map_err(internal)?;
    cache
        .decode(key, pb.as_deref().unwrap_or(stored), rev)
        .map_err(internal)
}

/// What a write answers, in whichever format the client negotiated.
#[derive(Debug)]
pub enum Reply {
    /// The object as stored (with its new resourceVersion), or its last state (a deletion).
    Object(Object),
    /// A `Status` (upstream answers the deletion of most kinds with one), as JSON.
    Status(Bytes),
    /// deletecollection: the deleted objects' last states.
    List(ObjectList),
}

/// A write's answer: the reply, its HTTP code, and what the client is warned of (`Warning`
/// headers).
#[derive(Debug)]
pub struct Written {
    pub reply: Reply,
    /// 200, 201 for a create, 202 for a deletion left pending that asked for
    /// `orphanDependents=false` (as upstream).
    pub code: u16,
    /// Warnings, one per `Warning` header: unknown fields under `fieldValidation=Warn`.
    pub warnings: Vec<String>,
}

impl Written {
    fn object(object: Object, code: u16, warnings: Vec<String>) -> Written {
        Written {
            reply: Reply::Object(object),
            code,
            warnings,
        }
    }
}

/// `fieldValidation` over a write's object: fields its type does not declare are refused
/// (`Strict`: 400 with upstream's strict decoding message), or dropped with a warning each
/// (`Warn`, upstream's default) or silently (`Ignore`), as decoding into the Go type drops them.
fn check_fields(
    def: &ResourceDef,
    obj: &mut Map<String, Value>,
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let strict = validation == FieldValidation::Strict;
    let unknown = unknown_fields(&def.api_version(), &def.kind, obj, !strict);
    if unknown.is_empty() || validation == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let described: Vec<String> = unknown
        .iter()
        .map(|path| format!("unknown field \"{path}\""))
        .collect();
    if strict {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            described.join(", "),
            kind = def.kind,
            version = def.version,
        )));
    }
    Ok(described)
}

/// POST: create; 409 AlreadyExists if the key exists. With `dryRun=All`, checked and answered,
/// not written.
pub async fn create(
    cache: &Cache,
    writes: &dyn Writes,
    namespace: Option<&str>,
    body: &[u8],
    params: &WriteParams,
    admit: Admit<'_>,
) -> Result<Written, ApiError> {
    let def = cache.definition();
    let mut obj = parse_object(def, body, namespace, None)?;
    let warnings = check_fields(def, &mut obj, params.field_validation)?;
    strategy::convert(def, &mut obj)?;
    take_precondition(&mut obj)?;
    generate_name(&mut obj);
    strategy::prepare_for_create(def, &mut obj, new_uid());
    admit(&obj, None)?;
    validate_meta(def, &obj)?;
    let name = name_of(&obj);
    let key = def.key_for(namespace, &name);
    let stored = encode_checked(cache, &key, &obj)?;
    let rev = if params.dry_run {
        0
    } else {
        writes
            .create(&key, stored.clone())
            .await
            .map_err(|e| write_failed(e, def, &name))?
    };
    let body = respond(cache, &key, &stored, rev)?;
    Ok(Written::object(body, 201, warnings))
}

fn not_found(def: &ResourceDef, name: &str) -> ApiError {
    ApiError::from(crate::Error::NotFound {
        kind: def.plural.clone(),
        name: name.to_owned(),
    })
}

/// PUT: update an existing object; `metadata.resourceVersion`, when given, must equal the stored
/// mod revision (409 Conflict otherwise). On `/status` (`status`), only the body's `status` is
/// taken; everything else stays as stored.
#[allow(clippy::too_many_arguments)]
pub async fn update(
    cache: &Cache,
    writes: &dyn Writes,
    namespace: Option<&str>,
    name: &str,
    body: &[u8],
    status: bool,
    params: &WriteParams,
    admit: Admit<'_>,
) -> Result<Written, ApiError> {
    let def = cache.definition();
    let mut obj = parse_object(def, body, namespace, Some(name))?;
    let warnings = check_fields(def, &mut obj, params.field_validation)?;
    strategy::convert(def, &mut obj)?;
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
    // A value the cache cannot read is replaced by a PUT (that is how it gets repaired); there
    // is then nothing to keep from it. A status update needs the rest of the object: 500.
    let old = match stored_object(cache, &key, &current) {
        Ok(old) => old,
        Err(e) if status => return Err(e),
        Err(_) => Map::new(),
    };
    let mut obj = merge_with_stored(def, obj, &old, status)?;
    deletion::before_update(&def.kind, &old, &mut obj)?;
    admit(&obj, Some(&old))?;
    let stored = encode_checked(cache, &key, &obj)?;
    if deletion::deletes_on_update(&old, &obj) {
        let body =
            delete_emptied(cache, writes, &key, &stored, current.mod_revision, params).await?;
        return Ok(Written::object(body, 200, warnings));
    }
    let rev = if params.dry_run {
        current.mod_revision
    } else {
        // Changed between the read and the write: deleted (404) or modified (409).
        writes
            .replace(&key, stored.clone(), current.mod_revision)
            .await
            .map_err(|e| write_failed(e, def, name))?
    };
    let body = respond(cache, &key, &stored, rev)?;
    Ok(Written::object(body, 200, warnings))
}

/// An update that emptied the finalizers of an object being deleted deletes it
/// (`ShouldDeleteDuringUpdate`), if it is still the state read at `rev`; the answer is the
/// object as the update made it, as upstream's `deleteWithoutFinalizers` answers.
async fn delete_emptied(
    cache: &Cache,
    writes: &dyn Writes,
    key: &str,
    stored: &[u8],
    rev: u64,
    params: &WriteParams,
) -> Result<Object, ApiError> {
    let def = cache.definition();
    let name = key.rsplit('/').next().unwrap_or_default();
    if !params.dry_run {
        match writes.delete(key, Some(rev)).await {
            // Deleted by another update that emptied them too: the same outcome.
            Ok(_) | Err(WriteError::NotFound) => {}
            Err(e) => return Err(write_failed(e, def, name)),
        }
    }
    respond(cache, key, stored, rev)
}

/// The stored object as a JSON map, read through the cache's decoder (so a value stored as
/// protobuf, as kube-apiserver stores built-ins, reads as its JSON), without its resourceVersion.
fn stored_object(
    cache: &Cache,
    key: &str,
    current: &Stored,
) -> Result<Map<String, Value>, ApiError> {
    let o = cache
        .decode(key, &current.value, current.mod_revision)
        .map_err(|e| internal(format!("the stored object cannot be read: {e}")))?;
    match serde_json::from_slice::<Value>(o.json()) {
        Ok(Value::Object(mut m)) => {
            if let Some(Value::Object(meta)) = m.get_mut("metadata") {
                meta.remove("resourceVersion");
            }
            // As its type reads it: fields the type does not declare (written by another
            // client straight to etcd) are not the patch's or the update's to keep or report.
            let def = cache.definition();
            unknown_fields(&def.api_version(), &def.kind, &mut m, true);
            Ok(m)
        }
        _ => Err(internal("the stored object is not a JSON object")),
    }
}

/// What an update stores given the stored object: on `/status`, the stored object with the new
/// status; otherwise the new object as the kind's update rules leave it (the stored system fields
/// and status kept, `metadata.generation` bumped when the spec changed: `strategy.rs`).
///
/// # Errors
/// 422 when the update changes a field that cannot change (`metadata.uid`).
fn merge_with_stored(
    def: &ResourceDef,
    mut obj: Map<String, Value>,
    old: &Map<String, Value>,
    status: bool,
) -> Result<Map<String, Value>, ApiError> {
    if status {
        let mut out = old.clone();
        match obj.remove("status") {
            Some(s) => out.insert("status".into(), s),
            None => out.remove("status"),
        };
        if let Some(Value::Object(m)) = out.get_mut("metadata") {
            m.remove("resourceVersion");
        }
        return Ok(out);
    }
    strategy::prepare_for_update(def, &mut obj, old)
        .map_err(|causes| ApiError::invalid(&def.kind, &name_of(&obj), causes))?;
    Ok(obj)
}

/// PATCH: applies a JSON, merge or strategic merge patch to the stored object (or, on `/status`,
/// takes only the patched status) and writes the result with the stored revision as precondition.
/// A `metadata.resourceVersion` the patch sets is a precondition (409 if it differs); without one,
/// a concurrent change is retried against the new state, as upstream does.
#[allow(clippy::too_many_arguments)]
pub async fn patch(
    cache: &Cache,
    writes: &dyn Writes,
    namespace: Option<&str>,
    name: &str,
    kind: PatchKind,
    body: &[u8],
    status: bool,
    params: &WriteParams,
    admit: Admit<'_>,
) -> Result<Written, ApiError> {
    let def = cache.definition();
    let key = def.key_for(namespace, name);
    // Owned once: each attempt's patch is applied off the reactor.
    let body = Bytes::copy_from_slice(body);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let current = writes
            .get(&key)
            .await
            .map_err(|e| write_failed(e, def, name))?
            .ok_or_else(|| not_found(def, name))?;
        let old = stored_object(cache, &key, &current)?;
        // The patch sees the object as clients do: with its resourceVersion.
        let mut target = Value::Object(old.clone());
        if let Some(Value::Object(m)) = target.get_mut("metadata") {
            m.insert(
                "resourceVersion".into(),
                Value::String(current.mod_revision.to_string()),
            );
        }
        let target = kind
            .apply_off_reactor(def.clone(), target, body.clone())
            .await?;
        let patched = serde_json::to_vec(&target).map_err(internal)?;
        let mut obj = parse_object(def, &patched, namespace, Some(name))?;
        let warnings = check_fields(def, &mut obj, params.field_validation)?;
        strategy::convert(def, &mut obj)?;
        let precondition = take_precondition(&mut obj)?;
        if precondition.is_some_and(|p| p != current.mod_revision) {
            return Err(ApiError::conflict(&def.plural, name));
        }
        validate_meta(def, &obj)?;
        let mut obj = merge_with_stored(def, obj, &old, status)?;
        deletion::before_update(&def.kind, &old, &mut obj)?;
        admit(&obj, Some(&old))?;
        let stored = encode_checked(cache, &key, &obj)?;
        if deletion::deletes_on_update(&old, &obj) {
            let body =
                delete_emptied(cache, writes, &key, &stored, current.mod_revision, params).await?;
            return Ok(Written::object(body, 200, warnings));
        }
        if params.dry_run {
            let body = respond(cache, &key, &stored, current.mod_revision)?;
            return Ok(Written::object(body, 200, warnings));
        }
        match writes
            .replace(&key, stored.clone(), current.mod_revision)
            .await
        {
            Ok(rev) => {
                let body = respond(cache, &key, &stored, rev)?;
                return Ok(Written::object(body, 200, warnings));
            }
            Err(WriteError::Conflict) if precondition.is_none() && attempt < PATCH_ATTEMPTS => {
                tracing::debug!(key, attempt, "patch raced another write: retrying");
            }
            Err(e) => return Err(write_failed(e, def, name)),
        }
    }
}

/// DELETE on a collection (deletecollection): deletes every object the query's selectors match in
/// the cache's current state, each as a DELETE with the request's options (one deleted meanwhile
/// is skipped), and answers the `{Kind}List` of their last states. With `dryRun=All`, the list of
/// what would be deleted.
pub async fn delete_collection(
    cache: &Cache,
    writes: &dyn Writes,
    opts: &crate::cache::ListOptions,
    body: &[u8],
    query: Option<&str>,
    params: &WriteParams,
) -> Result<Written, ApiError> {
    let def = cache.definition();
    let options = delete_options(body, query)?;
    let list = cache.list(opts).await?;
    let mut items = Vec::with_capacity(list.items.len());
    let mut rv = list.resource_version;
    for o in &list.items {
        if params.dry_run {
            items.push(o.clone());
            continue;
        }
        let deleted = if writes.deletes_itself() {
            writes
                .delete_with(o.key(), Bytes::from(options.to_json(false)))
                .await
                .map_err(|e| write_failed(e, def, o.name()))
                .and_then(|(rev, body)| respond(cache, o.key(), &body, rev))
                .map(|last| Deleted {
                    last: Some(last),
                    deleted: true,
                })
        } else {
            delete_one(cache, writes, o.key(), o.name(), &options, params).await
        };
        match deleted {
            Ok(Deleted {
                last: Some(last), ..
            }) => {
                rv = rv.max(last.resource_version());
                items.push(last);
            }
            Ok(_) => {}
            Err(e) if e.code() == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Written {
        reply: Reply::List(ObjectList {
            resource_version: rv,
            items,
            continue_token: None,
            remaining_item_count: None,
            shard_info: None,
        }),
        code: 200,
        warnings: Vec::new(),
    })
}

/// The request's `DeleteOptions`: its body, or without one its query.
fn delete_options(body: &[u8], query: Option<&str>) -> Result<DeleteOptions, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::from_query(query)
    } else {
        DeleteOptions::from_json(body)
    }
}

/// The outcome of one DELETE: the object's last state (deleted) or current one (kept, its
/// deletion pending on its grace period or finalizers).
struct Deleted {
    /// `None`: a stored value the cache could not decode was deleted.
    last: Option<Object>,
    deleted: bool,
}

/// DELETE, as upstream's registry (`server/deletion.rs`): a pod bound to a node is deleted
/// gracefully (a deletion timestamp and grace period are written, and the kubelet deletes it
/// again with grace 0), an object with finalizers gets a deletion timestamp and stays until an
/// update empties them, the garbage collector's finalizers are added as `propagationPolicy` or
/// `orphanDependents` ask, and anything else is removed at once. The options come from the body's
/// DeleteOptions or, without a body, the query. Answers, as upstream, the object (its last state
/// when deleted) for resources whose registry returns it and when the deletion is pending, and a
/// `Status` Success otherwise; with `dryRun=All` what would happen, nothing written.
pub async fn delete(
    cache: &Cache,
    writes: &dyn Writes,
    namespace: Option<&str>,
    name: &str,
    body: &[u8],
    query: Option<&str>,
    params: &WriteParams,
) -> Result<Written, ApiError> {
    let def = cache.definition();
    let options = delete_options(body, query)?;
    let key = def.key_for(namespace, name);
    if writes.deletes_itself() {
        // An API server upstream applies the deletion rules itself: the DELETE goes on with its
        // options, and its answer is relayed.
        let (rev, body) = writes
            .delete_with(&key, Bytes::from(options.to_json(params.dry_run)))
            .await
            .map_err(|e| write_failed(e, def, name))?;
        return Ok(Written::object(
            respond(cache, &key, &body, rev)?,
            200,
            Vec::new(),
        ));
    }
    let d = delete_one(cache, writes, &key, name, &options, params).await?;
    let strategy = deletion::Strategy::for_resource(&def.group, &def.plural);
    let code = if !d.deleted && options.orphan_dependents == Some(false) {
        202
    } else {
        200
    };
    let reply = match d.last {
        Some(last) if strategy.returns_object || !d.deleted => Reply::Object(last),
        last => Reply::Status(success_status(def, name, last.as_ref())),
    };
    Ok(Written {
        reply,
        code,
        warnings: Vec::new(),
    })
}

/// Upstream's answer to a deletion of a resource whose registry does not return the object:
/// a `Status` Success naming it (`details.kind` is the resource, as upstream sets it).
fn success_status(def: &ResourceDef, name: &str, obj: Option<&Object>) -> Bytes {
    let uid = obj
        .and_then(|o| o.parse::<Value>().ok())
        .and_then(|v| {
            v.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let group = if def.group.is_empty() {
        String::new()
    } else {
        format!(",\"group\":{}", q(&def.group))
    };
    let uid = if uid.is_empty() {
        String::new()
    } else {
        format!(",\"uid\":{}", q(&uid))
    };
    Bytes::from(format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Success","details":{{"name":{}{group},"kind":{}{uid}}}}}"#,
        q(name),
        q(&def.plural)
    ))
}

/// One DELETE of `key` (see [`delete`]): each step a write conditional on the state it was
/// planned from, planned again when the object changed meanwhile.
async fn delete_one(
    cache: &Cache,
    writes: &dyn Writes,
    key: &str,
    name: &str,
    options: &DeleteOptions,
    params: &WriteParams,
) -> Result<Deleted, ApiError> {
    let def = cache.definition();
    let strategy = deletion::Strategy::for_resource(&def.group, &def.plural);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let retry = attempt < PATCH_ATTEMPTS;
        let current = writes
            .get(key)
            .await
            .map_err(|e| write_failed(e, def, name))?
            .ok_or_else(|| not_found(def, name))?;
        let Ok(obj) = stored_object(cache, key, &current) else {
            return delete_undecodable(cache, writes, key, name, &current, options, params).await;
        };
        let plan = deletion::plan(
            strategy,
            (&def.group, &def.kind),
            &obj,
            current.mod_revision,
            options,
            std::time::SystemTime::now(),
        )?;
        let (object, then_delete) = match plan {
            Plan::Pending => {
                let last = respond(cache, key, &current.value, current.mod_revision)?;
                return Ok(Deleted {
                    last: Some(last),
                    deleted: false,
                });
            }
            Plan::Delete => {
                if params.dry_run {
                    let last = respond(cache, key, &current.value, current.mod_revision)?;
                    return Ok(Deleted {
                        last: Some(last),
                        deleted: true,
                    });
                }
                match writes.delete(key, Some(current.mod_revision)).await {
                    Ok((rev, prev)) => {
                        let last = respond(cache, key, &prev, rev)?;
                        return Ok(Deleted {
                            last: Some(last),
                            deleted: true,
                        });
                    }
                    Err(WriteError::Conflict) if retry => continue,
                    Err(e) => return Err(write_failed(e, def, name)),
                }
            }
            Plan::Update { object, delete } => (object, delete),
        };
        // The deletion's own state: a no-op (deleting again what is being deleted) writes
        // nothing, as upstream's storage skips an update that changes no byte.
        let (stored, rev) = if object == obj {
            (current.value.clone(), current.mod_revision)
        } else {
            let stored = encode_checked(cache, key, &object)?;
            if params.dry_run {
                (stored, current.mod_revision)
            } else {
                match writes
                    .replace(key, stored.clone(), current.mod_revision)
                    .await
                {
                    Ok(rev) => (stored, rev),
                    Err(WriteError::Conflict) if retry => continue,
                    Err(e) => return Err(write_failed(e, def, name)),
                }
            }
        };
        if !then_delete || params.dry_run {
            return Ok(Deleted {
                last: Some(respond(cache, key, &stored, rev)?),
                deleted: then_delete,
            });
        }
        // Grace 0: removed at once, whatever happened since (as upstream, which deletes with
        // only the request's own preconditions); already gone is the same outcome.
        let precondition = options.resource_version.map(|_| rev);
        return match writes.delete(key, precondition).await {
            Ok((rev, prev)) => Ok(Deleted {
                last: Some(respond(cache, key, &prev, rev)?),
                deleted: true,
            }),
            Err(WriteError::NotFound) => Ok(Deleted {
                last: Some(respond(cache, key, &stored, rev)?),
                deleted: true,
            }),
            Err(e) => Err(write_failed(e, def, name)),
        };
    }
}

/// A stored value the cache cannot decode is deleted outright (that is how it gets cleaned up),
/// honouring a resourceVersion precondition; answered as upstream answers deletes without an
/// object.
async fn delete_undecodable(
    cache: &Cache,
    writes: &dyn Writes,
    key: &str,
    name: &str,
    current: &Stored,
    options: &DeleteOptions,
    params: &WriteParams,
) -> Result<Deleted, ApiError> {
    let def = cache.definition();
    if options
        .resource_version
        .is_some_and(|p| p != current.mod_revision)
    {
        return Err(ApiError::conflict(&def.plural, name));
    }
    if params.dry_run {
        return Err(internal("the stored object cannot be read"));
    }
    let (rev, prev) = writes
        .delete(key, Some(current.mod_revision))
        .await
        .map_err(|e| write_failed(e, def, name))?;
    if let Err(e) = cache.decode(key, &prev, rev) {
        tracing::warn!(key, error = %e, "deleted a value that was not a valid object");
    }
    Ok(Deleted {
        last: None,
        deleted: true,
    })
}

/// A random RFC 4122 version 4 UUID, as the API server assigns to new objects: 122 random bits,
/// the version nibble 4 and the variant bits `10`.
/// `metadata.generateName` without a name: the prefix and 5 random characters from upstream's
/// alphabet (`names.SimpleNameGenerator`: no vowels, no confusable digits). The prefix is cut so
/// the name fits 63 characters, as upstream; the result is validated like any name.
fn generate_name(obj: &mut Map<String, Value>) {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let meta = meta_mut(obj);
    let has_name = meta
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let Some(prefix) = meta.get("generateName").and_then(Value::as_str) else {
        return;
    };
    if has_name {
        return;
    }
    let mut name: String = prefix.chars().take(58).collect();
    for _ in 0..5 {
        let i = fastrand::usize(..ALPHABET.len());
        name.push(char::from(ALPHABET.get(i).copied().unwrap_or(b'x')));
    }
    meta.insert("name".into(), Value::String(name));
}

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
    fn generated_names_take_the_prefix_and_five_characters() {
        let mut obj: Map<String, Value> =
            serde_json::from_str(r#"{"metadata":{"generateName":"web-"}}"#).unwrap();
        generate_name(&mut obj);
        let name = name_of(&obj);
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        let mut named: Map<String, Value> =
            serde_json::from_str(r#"{"metadata":{"name":"x","generateName":"web-"}}"#).unwrap();
        generate_name(&mut named);
        assert_eq!(name_of(&named), "x");
        let long = "a".repeat(80);
        let mut obj: Map<String, Value> =
            serde_json::from_str(&format!(r#"{{"metadata":{{"generateName":"{long}"}}}}"#))
                .unwrap();
        generate_name(&mut obj);
        assert_eq!(name_of(&obj).len(), 63);
    }

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
