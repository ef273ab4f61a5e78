//! Cached objects: decoded once on ingest, with the attributes that indexes and selectors need
//! extracted once, and their JSON encoding produced once.
//!
//! ## Invariants
//! - `json` is compact (no newlines, so a watch stream can frame one event per line) and carries
//!   `metadata.resourceVersion` = `rv` at `json[rv_at..rv_at + rv_len]`. The stored bytes' own
//!   resourceVersion is never trusted: it is dropped on ingest.
//! - An object stored as protobuf keeps the stored bytes with `metadata.resourceVersion` = `rv`
//!   spliced in at decode (what kube-apiserver serves: its protobuf form, shared by every GET,
//!   LIST and watch frame) and makes its JSON on first use, exactly once (`OnceLock`), outside the
//!   cache's lock (consumers ask for it, the commit never does). Everything that encoding reads
//!   was validated at ingest, so making it cannot fail.
//! - `namespace` and `name` agree with the key: `prefix + ns + "/" + name`, or `prefix + name`.
//!   `ns_at == name_at` iff the object is cluster-scoped.
// Reads outside input (requests or stored values): it must not panic on any of it
// (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::panic
    )
)]

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::value::RawValue;

use crate::model::field_memo::FieldMemo;
use crate::model::field_path::{self, FieldPath};
use crate::model::members::{Members, find, members};
use crate::model::packed::Packed;
use crate::model::shard::{ShardKey, fnv1a64};
use crate::model::{Attr, EventType, Schema};
use crate::sync::RwLock;

/// One cached object: cheap to clone (an `Arc`), immutable, `Send + Sync`.
#[derive(Clone)]
pub struct Object(Arc<Inner>);

/// 120 bytes (with feature `typed` too), plus the `Arc`'s 16 (checked by a test): every
/// byte here is paid by every cached object, so what only some objects use lives in [`Lazy`].
struct Inner {
    /// The stored form: the compact JSON (`Form::Json`) or the protobuf value as stored, its
    /// revision spliced in (`Form::Protobuf`).
    stored: Bytes,
    rv: u64,
    /// FNV-1a of `metadata.uid`, read at decode: what a `shardSelector` on the uid routes by.
    uid_hash: u64,
    /// The key, labels (sorted by key) and values of the schema's declared fields, by slot.
    text: Packed,
    /// Byte offset of the namespace inside the key; it runs to the `/` before the name. Equal to
    /// `name_at` for cluster-scoped objects (a namespaced object's namespace is never empty).
    ns_at: u32,
    /// Byte offset of the name inside the key; it runs to the end.
    name_at: u32,
    form: Form,
    /// What is made on first use, boxed together: 16 bytes while nothing is.
    lazy: OnceLock<Box<Lazy>>,
}

/// What an object was decoded from.
#[derive(Clone, Copy)]
enum Form {
    /// JSON, re-encoded compactly at ingest (`stored`); `metadata.resourceVersion`'s digits at
    /// `stored[rv_at..rv_at + rv_len]`.
    Json { rv_at: u32, rv_len: u8 },
    /// kube-apiserver's protobuf (`k8s\0` + `runtime.Unknown`), as stored with the revision
    /// spliced in at decode; its JSON on first use.
    Protobuf,
}

/// The parts of an object made after ingest, if ever: an object no client reads as protobuf,
/// through a typed embedder or with an undeclared field path allocates none of them.
#[derive(Default)]
struct Lazy {
    /// A protobuf-stored object's JSON.
    json: OnceLock<JsonForm>,
    /// The protobuf encoding as served (boxed: 8 bytes until made, in objects only read as JSON).
    pb: OnceLock<Box<Result<PbForm, String>>>,
    /// Values of undeclared field paths that selectors use, each read once.
    memo: FieldMemo,
    /// The object decoded into an embedder's type (`watchcache_kube`: kube-rs's `K`), made on
    /// first read and shared by every later one: decoded once per object version.
    #[cfg(feature = "typed")]
    typed: OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

/// The protobuf encoding as served: `k8s\0` + `runtime.Unknown` with `metadata.resourceVersion`
/// set (for an object stored as protobuf, the stored bytes themselves), and where the object's
/// message is in it (a list's item).
struct PbForm {
    envelope: Bytes,
    raw: (u32, u32),
    /// The heads (stream length, `metav1.WatchEvent` {type, object's length}) of the protobuf watch
    /// frames of an ADDED and of a MODIFIED event carrying this object state, kept for every
    /// delivery after the first. The wire's protobuf encoder makes them (`wire/encoder.rs`): the
    /// model holds the slots, not the format.
    heads: [OnceLock<Bytes>; 2],
}

/// An object's key as an owned value: the object itself, compared, ordered and hashed by its key
/// (a map keyed by objects' keys holds no copy of them).
#[derive(Clone)]
pub(crate) struct ObjectKey(Object);

impl std::ops::Deref for ObjectKey {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.key()
    }
}

impl std::borrow::Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        self.0.key()
    }
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for ObjectKey {}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key().cmp(other.0.key())
    }
}

impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that lookups by `&str` find it.
        self.0.key().hash(state);
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0.key(), f)
    }
}

/// JSON encodings made since start (see [`encode_counts`]).
static JSON_ENCODES: AtomicU64 = AtomicU64::new(0);
/// Protobuf encodings made since start.
static PROTOBUF_ENCODES: AtomicU64 = AtomicU64::new(0);

/// How many object encodings were made since the process started: JSON (from protobuf storage,
/// or a deletion's last state at the deletion's revision) and protobuf (from JSON storage, or a
/// deletion's last state at its revision; an object stored as protobuf is served as stored, its
/// revision spliced in at decode). Each object state and each deletion is encoded at most once
/// per format, whatever the number of watchers and lists it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EncodeCounts {
    /// JSON encodings.
    pub json: u64,
    /// Protobuf encodings.
    pub protobuf: u64,
}

/// The process-wide [`EncodeCounts`].
pub fn encode_counts() -> EncodeCounts {
    EncodeCounts {
        json: JSON_ENCODES.load(Ordering::Relaxed),
        protobuf: PROTOBUF_ENCODES.load(Ordering::Relaxed),
    }
}

fn count_encode(protobuf: bool) {
    let c = if protobuf {
        &PROTOBUF_ENCODES
    } else {
        &JSON_ENCODES
    };
    c.fetch_add(1, Ordering::Relaxed);
}

/// Why an object could not be encoded in a wire format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object {key}: {reason}")]
pub struct EncodeError {
    /// The etcd key.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

/// The JSON encoding, with where its resourceVersion digits are.
struct JsonForm {
    json: Bytes,
    rv_at: u32,
    rv_len: u8,
    /// Where the members after `kind` and `apiVersion` start (0: the object is listed as it is).
    item_at: u32,
}

/// A view of the JSON encoding, stored or made.
#[derive(Clone, Copy)]
struct JsonRef<'a> {
    json: &'a Bytes,
    rv_at: u32,
    rv_len: u8,
    item_at: u32,
}

/// How many times a stored value may be converted on its way to the served form (see
/// `Object::decode_pass`).
const SERVED_PASSES: u8 = 2;

/// Why a stored value could not be cached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object {key}: {reason}")]
pub struct DecodeError {
    /// The etcd key.
    pub key: String,
    /// What is wrong with the value.
    pub reason: String,
    /// The key the value's metadata names, when it is a well-formed object that names another
    /// object than its key (k/k#135115): left unserved, never served under either key.
    pub names: Option<String>,
}

/// Turns a resource's stored values into [`Object`]s: what a source calls on each value it
/// reads, outside any lock, so that it hands its cache decoded objects. Cheap to clone; get one
/// from [`Cache::decoder`](crate::Cache::decoder).
///
/// Besides the resource's declared fields, it reads the undeclared field paths that the
/// cache's live watchers select on (the cache publishes their set when a watcher with a new path
/// arrives), so that evaluating a selector under the cache's lock reads no JSON.
#[derive(Clone)]
pub struct Decoder {
    schema: Arc<Schema>,
    paths: Arc<RwLock<Arc<[FieldPath]>>>,
}

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("resource", &self.schema.def.plural)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    pub(crate) fn new(schema: Arc<Schema>) -> Decoder {
        Decoder {
            schema,
            paths: Arc::new(RwLock::new(Arc::from([]))),
        }
    }

    /// Decodes the value stored at `key` into an object at revision `rv`.
    ///
    /// # Errors
    /// [`DecodeError`] when the value is not a JSON object or a protobuf built-in of the
    /// resource, or its metadata names another object than its key.
    pub fn decode(&self, key: &str, value: &[u8], rv: u64) -> Result<Object, DecodeError> {
        let obj = Object::decode(&self.schema, key, value, rv)?;
        let paths = Arc::clone(&self.paths.read());
        obj.extract_fields(&paths);
        Ok(obj)
    }

    /// Publishes the undeclared paths live selectors use (the cache calls it under its state
    /// lock, so that publications are ordered).
    pub(crate) fn publish_paths(&self, paths: Arc<[FieldPath]>) {
        *self.paths.write() = paths;
    }
}

impl Object {
    pub(crate) fn decode(
        schema: &Schema,
        key: &str,
        value: &[u8],
        rv: u64,
    ) -> Result<Object, DecodeError> {
        Object::decode_pass(schema, key, value, rv, 0)
    }

    /// `decode`, the `pass`th time for this value: a stored value is read as served by at most
    /// [`SERVED_PASSES`] conversions (a v1beta1 CRD becomes v1 JSON, then v1 JSON in Go's
    /// order), and a custom resource is read by its CRD's schema on the first only, as
    /// kube-apiserver decodes a stored value once (a default that its own schema prunes would
    /// otherwise change the object again on each pass).
    fn decode_pass(
        schema: &Schema,
        key: &str,
        value: &[u8],
        rv: u64,
        pass: u8,
    ) -> Result<Object, DecodeError> {
        let fail = |reason: String| DecodeError {
            key: key.to_owned(),
            reason,
            names: None,
        };
        if value.starts_with(crate::model::protobuf::MAGIC) {
            return Object::decode_protobuf(schema, key, value, rv);
        }
        let text = std::str::from_utf8(value).map_err(|e| fail(format!("not UTF-8: {e}")))?;
        let top = members(text).map_err(|e| fail(format!("not a JSON object: {e}")))?;
        // A built-in kind kube-apiserver stores as another version (or kind): read as served.
        if pass < SERVED_PASSES
            && let Some(converted) =
                Object::stored_json_as_served(schema, &top, text, pass).map_err(&fail)?
        {
            return Object::decode_pass(schema, key, &converted, rv, pass + 1);
        }
        check_servable(text).map_err(fail)?;
        let meta_raw = find(&top, "metadata").ok_or_else(|| fail("no metadata".into()))?;
        let meta =
            members(meta_raw.get()).map_err(|e| fail(format!("metadata is not an object: {e}")))?;
        let name = string_member(&meta, "name")
            .map_err(&fail)?
            .unwrap_or_default();
        if name.is_empty() {
            return Err(fail("metadata.name is missing or empty".into()));
        }
        let namespace = string_member(&meta, "namespace")
            .map_err(&fail)?
            .unwrap_or_default();
        let uid_hash = fnv1a64(
            // Not validated here (never was): an odd uid hashes as empty.
            string_member(&meta, "uid")
                .ok()
                .flatten()
                .unwrap_or_default()
                .as_bytes(),
        );
        let def = &schema.def;
        let rest = key
            .strip_prefix(def.prefix.as_str())
            .ok_or_else(|| fail(format!("key is not under {}", def.prefix)))?;
        let expected = if def.namespaced {
            if namespace.is_empty() {
                return Err(fail(
                    "metadata.namespace is missing for a namespaced resource".into(),
                ));
            }
            format!("{namespace}/{name}")
        } else {
            if !namespace.is_empty() {
                return Err(fail(format!(
                    "metadata.namespace \"{namespace}\" set on a cluster-scoped resource"
                )));
            }
            name.to_string()
        };
        if rest != expected {
            let names = format!("{}{expected}", def.prefix);
            return Err(DecodeError {
                names: Some(names.clone()),
                ..fail(format!("key does not match metadata (expected {names})"))
            });
        }
        let labels =
            match find(&meta, "labels") {
                None => std::collections::BTreeMap::new(),
                Some(raw) => serde_json::from_str::<
                    Option<std::collections::BTreeMap<String, String>>,
                >(raw.get())
                .map_err(|e| fail(format!("metadata.labels must map strings to strings: {e}")))?
                .unwrap_or_default(),
            };
        let fields: Vec<Option<String>> = schema
            .fields
            .iter()
            .zip(&schema.field_fallbacks)
            .map(|(p, fb)| {
                let v = field_in_members(&top, p);
                match fb {
                    Some(fb) if v.as_deref().is_none_or(str::is_empty) => {
                        field_in_members(&top, fb).or(v)
                    }
                    _ => v,
                }
            })
            .collect();
        let text = Packed::new(
            key,
            labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            fields
                .iter()
                .enumerate()
                .map(|(i, v)| schema.field_text(i, v.as_deref())),
        )
        .map_err(&fail)?;

        // A custom resource is what kube-apiserver writes from a map: members sorted by key, so
        // the resourceVersion goes where Go's encoding/json puts it. Elsewhere, last.
        let (json, rv_at, rv_len) = encode(&top, &meta, rv, !def.has_protobuf());
        let prefix_len = def.prefix.len() as u32;
        let (ns, name_at) = if def.namespaced {
            let ns_end = prefix_len + namespace.len() as u32;
            ((prefix_len, ns_end), ns_end + 1)
        } else {
            ((prefix_len, prefix_len), prefix_len)
        };
        Ok(Object(Arc::new(Inner {
            stored: json,
            rv,
            uid_hash,
            text,
            ns_at: ns.0,
            name_at,
            form: Form::Json { rv_at, rv_len },
            lazy: OnceLock::new(),
        })))
    }

    /// A JSON value of a built-in kind stored as another type, as the served kind would have
    /// stored it: a v1beta1 CustomResourceDefinition as v1 JSON; JSON of a type a protobuf rule
    /// reads (a core v1 Event for events.k8s.io) as its served protobuf. `None` for anything else
    /// (read as it is).
    fn stored_json_as_served(
        schema: &Schema,
        top: &Members<'_>,
        text: &str,
        pass: u8,
    ) -> Result<Option<Vec<u8>>, String> {
        if !schema.stored_otherwise {
            return Ok(None);
        }
        let def = &schema.def;
        let member =
            |k: &str| find(top, k).and_then(|v| serde_json::from_str::<String>(v.get()).ok());
        let (Some(av), Some(kind)) = (member("apiVersion"), member("kind")) else {
            return Ok(None);
        };
        let want = def.api_version();
        if def.rewrite_api_version {
            // A custom resource stored at another version of its group, under a CRD whose
            // conversion is None: read as this version, only its apiVersion changed.
            let Some(stored) = av
                .split_once('/')
                .and_then(|(g, v)| (g == def.group).then_some(v))
            else {
                return Ok(None);
            };
            if kind != def.kind {
                return Ok(None);
            }
            if pass == 0
                && let Some(schemas) = &def.stored_schemas
                && schemas.changes(text, stored, &def.version)?
            {
                // Pruned and defaulted by the CRD's schema, as kube-apiserver decodes it: a
                // default added since the object was written shows (k/k's "custom resource
                // defaulting ... from storage" conformance spec).
                let mut obj: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(text).map_err(|e| e.to_string())?;
                if schemas.read_stored(&mut obj, stored, &def.version, &want) {
                    let mut out = Vec::with_capacity(text.len() + 64);
                    crate::model::protobuf::write_json_value(
                        &mut out,
                        &serde_json::Value::Object(obj),
                    );
                    if text.ends_with('\n') {
                        out.push(b'\n');
                    }
                    return Ok(Some(out));
                }
            }
            if av == want {
                return Ok(None);
            }
            let at = find(top, "apiVersion")
                .map(|raw| raw.get().as_ptr() as usize - text.as_ptr() as usize)
                .ok_or("no apiVersion")?;
            let old_len = find(top, "apiVersion").map_or(0, |raw| raw.get().len());
            let mut out = Vec::with_capacity(text.len() + want.len());
            out.extend_from_slice(text.as_bytes().get(..at).ok_or("apiVersion out of place")?);
            out.extend_from_slice(
                serde_json::to_string(&want)
                    .map_err(|e| e.to_string())?
                    .as_bytes(),
            );
            out.extend_from_slice(
                text.as_bytes()
                    .get(at + old_len..)
                    .ok_or("apiVersion out of place")?,
            );
            return Ok(Some(out));
        }
        if kind == def.kind && av == want {
            // A kind kube-apiserver stores as JSON (APIService) is read through its Go type,
            // as kube-apiserver reads it: its protobuf message gives Go's member order and
            // omissions.
            let json_stored = crate::model::protobuf::stored::JSON_STORED
                .contains(&(want.as_str(), def.kind.as_str()));
            if json_stored && def.has_protobuf() {
                let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
                return crate::model::protobuf::encode_json(&v).map(Some);
            }
            return Ok(None);
        }
        if (want.as_str(), def.kind.as_str())
            == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            && av == crate::model::crd_storage::V1BETA1
            && kind == def.kind
        {
            return crate::model::crd_storage::v1beta1_to_v1(text).map(Some);
        }
        if crate::model::protobuf::stored::rule((&want, &def.kind), (&av, &kind)).is_none() {
            return Ok(None);
        }
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let pb = crate::model::protobuf::encode_json(&v)?;
        let raw = crate::model::protobuf::raw_range(&pb)
            .and_then(|r| pb.get(r))
            .ok_or("an envelope without its message")?;
        crate::model::protobuf::stored::read_as_served((&want, &def.kind), (&av, &kind), raw)
    }

    /// Decodes kube-apiserver's protobuf storage encoding (`k8s\0` + `runtime.Unknown`): name,
    /// namespace, labels and declared fields are read from the message's bytes, and the JSON
    /// encoding is kube-apiserver's for the same object (see `model/protobuf`).
    fn decode_protobuf(
        schema: &Schema,
        key: &str,
        value: &[u8],
        rv: u64,
    ) -> Result<Object, DecodeError> {
        use crate::model::protobuf::Envelope;
        let fail = |reason: String| DecodeError {
            key: key.to_owned(),
            reason,
            names: None,
        };
        let env = Envelope::parse(value).map_err(&fail)?;
        let def = &schema.def;
        let want_av = if def.group.is_empty() {
            Cow::Borrowed(def.version.as_str())
        } else {
            Cow::Owned(format!("{}/{}", def.group, def.version))
        };
        if env.kind != def.kind || env.api_version != want_av {
            // Stored as another type kube-apiserver serves this resource from (an events.k8s.io
            // Event stored as a core Event, a VolumeAttributesClass in v1beta1): read as served.
            return match crate::model::protobuf::stored::read_as_served(
                (&want_av, &def.kind),
                (env.api_version, env.kind),
                env.raw,
            )
            .map_err(&fail)?
            {
                Some(served) => Object::decode_protobuf(schema, key, &served, rv),
                None => Err(fail(format!(
                    "protobuf envelope holds {} {}, not this resource's {want_av} {}",
                    env.api_version, env.kind, def.kind
                ))),
            };
        }
        let meta = env.meta().map_err(&fail)?;
        if meta.name.is_empty() {
            return Err(fail("metadata.name is missing or empty".into()));
        }
        let (ns, name_at) =
            key_layout(schema, key, meta.name, meta.namespace).map_err(|(reason, names)| {
                DecodeError {
                    names,
                    ..fail(reason)
                }
            })?;
        // Borrowed from `value` where the field is a string as stored: no allocation per field.
        let fields: Vec<Option<Cow<'_, str>>> = schema
            .fields
            .iter()
            .zip(&schema.field_fallbacks)
            .map(|(p, fb)| {
                let v = env.field(p)?;
                match fb {
                    Some(fb) if v.as_deref().is_none_or(str::is_empty) => Ok(env.field(fb)?.or(v)),
                    _ => Ok(v),
                }
            })
            .collect::<Result<_, String>>()
            .map_err(&fail)?;
        env.validate().map_err(&fail)?;
        let text = Packed::new(
            key,
            meta.labels.iter().map(|(k, v)| (&**k, &**v)),
            fields
                .iter()
                .enumerate()
                .map(|(i, v)| schema.field_text(i, v.as_deref())),
        )
        .map_err(&fail)?;
        // The revision spliced in once, here: every protobuf read serves these bytes as they are.
        let (mut stored, _) =
            crate::model::protobuf::with_resource_version(value, rv).map_err(&fail)?;
        // Held for the object's life: no spare capacity (`Bytes` would keep it).
        stored.shrink_to_fit();
        Ok(Object(Arc::new(Inner {
            stored: Bytes::from(stored),
            rv,
            uid_hash: fnv1a64(meta.uid.as_bytes()),
            text,
            ns_at: ns.0,
            name_at,
            form: Form::Protobuf,
            lazy: OnceLock::new(),
        })))
    }

    /// The parts made on first use, made now (empty) if none was yet.
    fn lazy(&self) -> &Lazy {
        self.0.lazy.get_or_init(Box::default)
    }

    /// The JSON encoding, made now if this is its first use.
    #[inline]
    fn form(&self) -> JsonRef<'_> {
        let f = match self.0.form {
            Form::Json { rv_at, rv_len } => {
                return JsonRef {
                    json: &self.0.stored,
                    rv_at,
                    rv_len,
                    item_at: 0,
                };
            }
            Form::Protobuf => self.lazy().json.get_or_init(|| self.make_json()),
        };
        JsonRef {
            json: &f.json,
            rv_at: f.rv_at,
            rv_len: f.rv_len,
            item_at: f.item_at,
        }
    }

    /// A protobuf-stored object's JSON encoding.
    fn make_json(&self) -> JsonForm {
        count_encode(false);
        match crate::model::protobuf::Envelope::parse(&self.0.stored)
            .and_then(|e| e.encode_json(self.0.rv))
        {
            Ok((json, rv_at, rv_len, item_at)) => JsonForm {
                json: Bytes::from(json),
                rv_at,
                rv_len,
                item_at,
            },
            Err(e) => {
                // Unreachable: ingest validated everything the encoding reads. Should it
                // happen, the identity survives and the failure is loud.
                debug_assert!(false, "{}: {e}", self.key());
                tracing::error!(key = self.key(), error = %e, "JSON encoding of a validated protobuf object failed");
                let mut out = Vec::new();
                out.extend_from_slice(b"{\"metadata\":{\"name\":");
                let _ = serde_json::to_writer(&mut out, self.name());
                if let Some(ns) = self.namespace() {
                    out.extend_from_slice(b",\"namespace\":");
                    let _ = serde_json::to_writer(&mut out, ns);
                }
                out.extend_from_slice(b",\"resourceVersion\":\"");
                let rv_at = out.len() as u32;
                let mut digits = itoa::Buffer::new();
                let d = digits.format(self.0.rv);
                out.extend_from_slice(d.as_bytes());
                out.extend_from_slice(b"\"}}");
                JsonForm {
                    json: Bytes::from(out),
                    rv_at,
                    rv_len: d.len() as u8,
                    item_at: 0,
                }
            }
        }
    }

    /// The etcd key.
    pub fn key(&self) -> &str {
        self.0.text.key()
    }

    /// The key as an owned value (this object, ordered and hashed by its key).
    pub(crate) fn key_owned(&self) -> ObjectKey {
        ObjectKey(self.clone())
    }

    /// The namespace, `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        let (a, b) = (self.0.ns_at, self.0.name_at);
        (a != b).then(|| {
            self.key()
                .get(a as usize..b.saturating_sub(1) as usize)
                .unwrap_or_default()
        })
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.key()
            .get(self.0.name_at as usize..)
            .unwrap_or_default()
    }

    /// The 64-bit FNV-1a hash of the field a `shardSelector` names (upstream's
    /// `sharding.HashField`): the uid's is read at decode, the namespace's computed here.
    pub fn shard_hash(&self, key: ShardKey) -> u64 {
        match key {
            ShardKey::Uid => self.0.uid_hash,
            ShardKey::Namespace => fnv1a64(self.namespace().unwrap_or("").as_bytes()),
        }
    }

    /// The revision at which this state was written (its `metadata.resourceVersion`).
    pub fn resource_version(&self) -> u64 {
        self.0.rv
    }

    /// The object's JSON, compact, with `metadata.resourceVersion` set. Shared, never copied.
    /// For an object stored as protobuf it is made on the first call (once).
    #[inline]
    pub fn json(&self) -> &Bytes {
        self.form().json
    }

    /// The object's JSON for a reader that needs it once (an authorizer reading a pod's
    /// references): a protobuf-stored object's JSON is made for this call and not kept, where
    /// [`json`](Object::json) keeps it with the object for as long as the object lives (a
    /// second copy of every pod an authorizer looked at, never served to anyone). Shared when it
    /// exists already (stored as JSON, or made by an earlier `json`).
    pub fn json_unkept(&self) -> Bytes {
        match self.0.form {
            Form::Json { .. } => self.0.stored.clone(),
            Form::Protobuf => match self.0.lazy.get().and_then(|l| l.json.get()) {
                Some(f) => f.json.clone(),
                None => self.make_json().json,
            },
        }
    }

    /// The JSON of this object as an item of a list: built-ins decoded from protobuf leave `kind`
    /// and `apiVersion` out there, as upstream's typed lists do; the item is `{` followed by the
    /// returned bytes (shared, never copied). `None`: the item is [`json`](Object::json) itself.
    pub fn list_item_tail(&self) -> Option<Bytes> {
        let f = self.form();
        (f.item_at > 0).then(|| f.json.slice(f.item_at as usize..))
    }

    /// The stored protobuf value (`k8s\0` + envelope, the revision spliced in), for objects stored
    /// as protobuf.
    pub fn protobuf(&self) -> Option<&Bytes> {
        match self.0.form {
            Form::Json { .. } => None,
            Form::Protobuf => Some(&self.0.stored),
        }
    }

    /// The JSON with `metadata.resourceVersion` replaced, as a DELETED event carries the last state
    /// at the deletion's revision. Splices bytes; never re-encodes.
    pub fn json_at(&self, rv: u64) -> Bytes {
        let form = self.form();
        if rv == self.0.rv {
            return form.json.clone();
        }
        count_encode(false);
        let j = form.json;
        let (a, b) = (
            form.rv_at as usize,
            form.rv_at as usize + form.rv_len as usize,
        );
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(rv).as_bytes();
        let mut out = BytesMut::with_capacity(j.len() + digits.len());
        out.put_slice(j.get(..a).unwrap_or_default());
        out.put_slice(digits);
        out.put_slice(j.get(b..).unwrap_or_default());
        out.freeze()
    }

    /// The protobuf form, made now if this is its first use: for an object stored as protobuf, the
    /// stored bytes (never transcoded; the revision was spliced in at decode), for one stored as
    /// JSON, its transcoding.
    fn pb_form(&self) -> Result<&PbForm, EncodeError> {
        let made = self.lazy().pb.get_or_init(|| {
            Box::new((|| {
                let (envelope, raw) = match self.0.form {
                    Form::Protobuf => {
                        let raw = crate::model::protobuf::raw_range(&self.0.stored)
                            .ok_or("no message in the envelope")?;
                        (self.0.stored.clone(), raw)
                    }
                    Form::Json { .. } => {
                        count_encode(true);
                        let v: serde_json::Value =
                            serde_json::from_slice(&self.0.stored).map_err(|e| e.to_string())?;
                        let env = crate::model::protobuf::encode_json(&v)?;
                        let raw = crate::model::protobuf::raw_range(&env)
                            .ok_or("no message in the envelope")?;
                        (Bytes::from(env), raw)
                    }
                };
                Ok(PbForm {
                    envelope,
                    raw: (raw.start as u32, raw.end as u32),
                    heads: [OnceLock::new(), OnceLock::new()],
                })
            })())
        });
        (**made).as_ref().map_err(|reason| EncodeError {
            key: self.key().to_owned(),
            reason: reason.clone(),
        })
    }

    /// The protobuf encoding kube-apiserver serves for this object (`k8s\0` +
    /// `runtime.Unknown` around its message, `metadata.resourceVersion` set), made on first use,
    /// once, and shared. An object stored as protobuf is never transcoded: this is the stored
    /// value with the revision spliced into its metadata.
    ///
    /// # Errors
    /// An object stored as JSON that its kind's protobuf message cannot hold (a kind without
    /// one, a member of the wrong JSON type).
    pub fn protobuf_wire(&self) -> Result<&Bytes, EncodeError> {
        self.pb_form().map(|f| &f.envelope)
    }

    /// [`protobuf_wire`](Object::protobuf_wire), and the slot of the head of a protobuf watch
    /// frame of `kind` carrying it, kept with this object state (`None` but for ADDED and
    /// MODIFIED): the wire's protobuf encoder fills it on first use and shares it after.
    ///
    /// # Errors
    /// As [`protobuf_wire`](Object::protobuf_wire).
    pub(crate) fn protobuf_with_head(
        &self,
        kind: EventType,
    ) -> Result<(&Bytes, Option<&OnceLock<Bytes>>), EncodeError> {
        let f = self.pb_form()?;
        let slot = match kind {
            EventType::Added => f.heads.first(),
            EventType::Modified => f.heads.get(1),
            _ => None,
        };
        Ok((&f.envelope, slot))
    }

    /// The object's protobuf message alone, as a list's item (shared with
    /// [`protobuf_wire`](Object::protobuf_wire), never copied).
    ///
    /// # Errors
    /// As [`protobuf_wire`](Object::protobuf_wire).
    pub fn protobuf_item(&self) -> Result<Bytes, EncodeError> {
        self.pb_form()
            .map(|f| f.envelope.slice(f.raw.0 as usize..f.raw.1 as usize))
    }

    /// [`protobuf_wire`](Object::protobuf_wire) with `metadata.resourceVersion` = `rv`, as a
    /// DELETED event carries the last state at the deletion's revision: a splice, not a
    /// re-encoding.
    ///
    /// # Errors
    /// As [`protobuf_wire`](Object::protobuf_wire).
    pub fn protobuf_at(&self, rv: u64) -> Result<Bytes, EncodeError> {
        let f = self.pb_form()?;
        if rv == self.0.rv {
            return Ok(f.envelope.clone());
        }
        count_encode(true);
        crate::model::protobuf::with_resource_version(&f.envelope, rv)
            .map(|(b, _)| Bytes::from(b))
            .map_err(|reason| EncodeError {
                key: self.key().to_owned(),
                reason,
            })
    }

    /// A label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.0.text.label(key)
    }

    /// All labels, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.text.labels()
    }

    /// A field's value as a field selector sees it (see [`FieldPath`]): missing fields read as "".
    /// Pre-extracted attributes are free; other paths are read from the JSON.
    pub fn field(&self, path: &FieldPath) -> Option<Cow<'_, str>> {
        match path.as_str() {
            "metadata.name" => Some(Cow::Borrowed(self.name())),
            "metadata.namespace" => Some(Cow::Borrowed(self.namespace().unwrap_or(""))),
            _ => self
                .memo_get(path, false)
                .map(|v| Cow::Owned(v.to_string())),
        }
    }

    /// [`field`](Object::field) without a copy, for predicates. `keep` (dispatch to live
    /// watchers) keeps a value read from the object in its memo for the next watcher.
    pub(crate) fn with_field<R>(
        &self,
        path: &FieldPath,
        keep: bool,
        f: impl FnOnce(Option<&str>) -> R,
    ) -> R {
        match path.as_str() {
            "metadata.name" => f(Some(self.name())),
            "metadata.namespace" => f(Some(self.namespace().unwrap_or(""))),
            _ => f(self.memo_get(path, keep).as_deref()),
        }
    }

    /// An undeclared field path's value: from the memo, or read (and kept when `keep`; a read
    /// that is not kept makes no memo).
    fn memo_get(&self, path: &FieldPath, keep: bool) -> Option<Arc<str>> {
        let read = || self.read_field(path);
        match (self.0.lazy.get(), keep) {
            (Some(l), _) => l.memo.get(path, keep, read),
            (None, true) => self.lazy().memo.get(path, true, read),
            (None, false) => read(),
        }
    }

    /// Reads the undeclared field paths that selectors use now, so that evaluating them later,
    /// under the cache's lock, reads nothing. Called at decode, outside any lock.
    pub(crate) fn extract_fields(&self, paths: &[FieldPath]) {
        if !paths.is_empty() {
            self.lazy().memo.extract(paths, |p| self.read_field(p));
        }
    }

    /// Reads a field path from the object: from the protobuf bytes while the JSON is not made (a
    /// predicate may ask under the cache's lock, where the JSON encoding should not be made), else
    /// from the JSON.
    fn read_field(&self, path: &FieldPath) -> Option<Arc<str>> {
        #[cfg(test)]
        crate::model::field_memo::READS.with(|r| r.set(r.get() + 1));
        if let Form::Protobuf = self.0.form
            && self.0.lazy.get().is_none_or(|l| l.json.get().is_none())
        {
            let env = crate::model::protobuf::Envelope::parse(&self.0.stored).ok()?;
            return env.field(path).ok().flatten().map(|v| Arc::from(&*v));
        }
        let raw: &RawValue = serde_json::from_slice(self.json()).ok()?;
        field_path::extract(raw, path).map(Arc::from)
    }

    /// The JSON parsed into a [`serde_json::Value`], for callers that want a DOM.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_slice(self.json()).unwrap_or(serde_json::Value::Null)
    }

    /// Deserializes the JSON into a typed value (for example a `k8s-openapi` type).
    ///
    /// # Errors
    /// The deserialization error.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(self.json())
    }

    pub(crate) fn attr(&self, a: Attr) -> Option<&str> {
        match a {
            Attr::Namespace => self.namespace(),
            Attr::Name => Some(self.name()),
            Attr::Field(i) => self.0.text.field(i as usize),
            Attr::Label(_) => None,
        }
    }

    /// An attribute, with declared labels resolved through the schema.
    pub(crate) fn attr_in(&self, schema: &Schema, a: Attr) -> Option<&str> {
        match a {
            Attr::Label(i) => self.label(schema.labels.get(i as usize)?),
            _ => self.attr(a),
        }
    }

    /// The size of the object's stored encoding (its protobuf value, or its JSON): fixed for the
    /// object's life, so a store can keep a running total.
    pub fn stored_len(&self) -> usize {
        self.0.stored.len()
    }

    /// Heap bytes this object holds, its JSON included when that is its stored form (what a
    /// history byte budget charges).
    pub fn heap_bytes(&self) -> usize {
        self.overhead_bytes()
            + match self.0.form {
                Form::Json { .. } => self.0.stored.len(),
                Form::Protobuf => 0,
            }
    }

    /// The object decoded as `T` by `make`, once: the first read decodes it and keeps it, later
    /// reads share it. An object read as two different types (two embedded caches over one
    /// cache cannot do that) decodes the second each time.
    ///
    /// # Errors
    /// `make`'s, not kept: the next read tries again.
    #[cfg(feature = "typed")]
    pub fn typed<T, E>(&self, make: impl FnOnce(&Object) -> Result<T, E>) -> Result<Arc<T>, E>
    where
        T: std::any::Any + Send + Sync,
    {
        let typed = &self.lazy().typed;
        if let Some(t) = typed.get() {
            if let Ok(t) = Arc::clone(t).downcast::<T>() {
                return Ok(t);
            }
            return make(self).map(Arc::new);
        }
        let t = Arc::new(make(self)?);
        let kept = typed.get_or_init(|| Arc::clone(&t) as Arc<dyn std::any::Any + Send + Sync>);
        // A racing reader may have kept its own: share that one.
        Ok(Arc::clone(kept).downcast::<T>().unwrap_or(t))
    }

    /// Heap bytes this object holds beyond its JSON, for memory accounting (for an object stored as
    /// protobuf: the stored value, and the JSON once made).
    pub fn overhead_bytes(&self) -> usize {
        let i = &self.0;
        let lazy = i.lazy.get().map(|l| &**l);
        std::mem::size_of::<Inner>()
            + 16 // Arc counts
            + i.text.heap_bytes()
            + match i.form {
                Form::Json { .. } => 0,
                Form::Protobuf => i.stored.len(),
            }
            + lazy.map_or(0, |l| {
                std::mem::size_of::<Lazy>()
                    + l.json.get().map_or(0, |f| f.json.len())
                    + match l.pb.get().map(|b| &**b) {
                        Some(Ok(f)) => {
                            std::mem::size_of::<Result<PbForm, String>>()
                                + match i.form {
                                    Form::Json { .. } => f.envelope.len(),
                                    Form::Protobuf => 0, // the stored bytes, counted above
                                }
                                + f.heads
                                    .iter()
                                    .filter_map(OnceLock::get)
                                    .map(Bytes::len)
                                    .sum::<usize>()
                        }
                        _ => 0,
                    }
            })
    }
}

#[cfg(test)]
impl Object {
    /// Holders of this object state (tests of what keeps it alive).
    pub(crate) fn refs(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("key", &self.key())
            .field("rv", &self.0.rv)
            .finish()
    }
}

impl PartialEq for Object {
    /// Same key, revision and bytes.
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
            && self.0.rv == other.0.rv
            && match (self.protobuf(), other.protobuf()) {
                (Some(a), Some(b)) => a == b,
                _ => self.json() == other.json(),
            }
    }
}

/// Why a key does not fit its object: the reason, and the key the metadata names when the value
/// names another object.
type LayoutError = (String, Option<String>);

/// Where namespace and name are in `key`, after checking that the key is the definition's prefix
/// followed by `namespace/name` (or `name` for cluster-scoped resources). The error is the
/// reason, and the key the metadata names when the value names another object.
fn key_layout(
    schema: &Schema,
    key: &str,
    name: &str,
    namespace: &str,
) -> Result<((u32, u32), u32), LayoutError> {
    let def = &schema.def;
    let rest = key
        .strip_prefix(def.prefix.as_str())
        .ok_or_else(|| (format!("key is not under {}", def.prefix), None))?;
    let ok = if def.namespaced {
        if namespace.is_empty() {
            return Err((
                "metadata.namespace is missing for a namespaced resource".into(),
                None,
            ));
        }
        rest.len() == namespace.len() + 1 + name.len()
            && rest.starts_with(namespace)
            && rest.as_bytes().get(namespace.len()) == Some(&b'/')
            && rest.ends_with(name)
    } else {
        if !namespace.is_empty() {
            return Err((
                format!("metadata.namespace \"{namespace}\" set on a cluster-scoped resource"),
                None,
            ));
        }
        rest == name
    };
    if !ok {
        let expected = if def.namespaced {
            format!("{namespace}/{name}")
        } else {
            name.to_owned()
        };
        let names = format!("{}{expected}", def.prefix);
        return Err((
            format!("key does not match metadata (expected {names})"),
            Some(names),
        ));
    }
    let prefix_len = def.prefix.len() as u32;
    Ok(if def.namespaced {
        let ns_end = prefix_len + namespace.len() as u32;
        ((prefix_len, ns_end), ns_end + 1)
    } else {
        ((prefix_len, prefix_len), prefix_len)
    })
}

fn string_member<'a>(m: &Members<'a>, key: &str) -> Result<Option<String>, String> {
    match find(m, key) {
        None => Ok(None),
        Some(raw) => serde_json::from_str::<Option<String>>(raw.get())
            .map_err(|_| format!("metadata.{key} must be a string")),
    }
}

fn field_in_members(top: &Members<'_>, path: &FieldPath) -> Option<String> {
    let mut segs = path.segments();
    let first = segs.next()?;
    let Some(mut cur) = find(top, first) else {
        return Some(String::new());
    };
    for seg in segs {
        match field_path::child(cur, seg) {
            Some(next) => cur = next,
            None => return Some(String::new()),
        }
    }
    field_path::scalar_text(cur)
}

/// Deepest nesting of objects and arrays a cached object may have. serde_json (so kube-rs) refuses
/// documents nested 128 deep and Python's `json` recurses once per level; a list body and a watch
/// event wrap the object in two more levels, so the margin keeps every served body readable.
pub(crate) const MAX_DEPTH: usize = 100;

/// Checks what serde_json's raw values let through but its own strict parse, and other clients,
/// refuse: unpaired UTF-16 surrogate escapes (`"\ud800"`), nesting deeper than [`MAX_DEPTH`], and
/// numbers out of range (found by `tests/core/fuzz.rs`).
/// `text` is already known to be syntactically valid JSON. One pass; inside strings it jumps from
/// one quote or backslash to the next.
fn check_servable(text: &str) -> Result<(), String> {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("nested deeper than {MAX_DEPTH} levels"));
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' => i = skip_string(b, i + 1)?,
            b'-' | b'0'..=b'9' => {
                let start = i;
                while b
                    .get(i)
                    .is_some_and(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    i += 1;
                }
                check_number(text.get(start..i).unwrap_or_default())?;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// A number serde_json reads back: one that fits in an `i64`/`u64`, or else is a finite `f64`
/// (`1e999` is syntactically JSON, but serde_json, so kube-rs, refuses it, and Go's decoder does too).
fn check_number(num: &str) -> Result<(), String> {
    let integer = !num.contains(['.', 'e', 'E']);
    if integer && (num.parse::<i64>().is_ok() || num.parse::<u64>().is_ok()) {
        return Ok(());
    }
    if num.parse::<f64>().is_ok_and(f64::is_finite) {
        Ok(())
    } else {
        Err(format!("the number {num} is out of range"))
    }
}

const UNPAIRED: &str = "a string holds an unpaired UTF-16 surrogate escape";

/// Skips a string's contents from `i` (just after its opening quote) and returns the index just
/// after its closing quote, checking that surrogate escapes come in high-low pairs.
fn skip_string(b: &[u8], mut i: usize) -> Result<usize, String> {
    loop {
        let Some(off) = b
            .get(i..)
            .and_then(|r| r.iter().position(|&c| c == b'"' || c == b'\\'))
        else {
            return Ok(b.len());
        };
        i += off;
        if b.get(i) == Some(&b'"') {
            return Ok(i + 1);
        }
        // A backslash: a two-byte escape, or `\uXXXX`.
        if b.get(i + 1) != Some(&b'u') {
            i += 2;
            continue;
        }
        match hex4(b, i + 2) {
            Some(0xD800..=0xDBFF) => {
                let low = (b.get(i + 6) == Some(&b'\\') && b.get(i + 7) == Some(&b'u'))
                    .then(|| hex4(b, i + 8))
                    .flatten();
                if !matches!(low, Some(0xDC00..=0xDFFF)) {
                    return Err(UNPAIRED.into());
                }
                i += 12;
            }
            Some(0xDC00..=0xDFFF) => return Err(UNPAIRED.into()),
            _ => i += 6,
        }
    }
}

fn hex4(b: &[u8], at: usize) -> Option<u16> {
    let digits = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
    u16::from_str_radix(digits, 16).ok()
}

/// Writes the object compactly with `metadata.resourceVersion` = `rv`: as the last metadata member,
/// or with `sorted`, before the first member whose key sorts after it (its place among members
/// sorted by key, as kube-apiserver writes a custom resource). Returns the bytes and where the
/// revision's digits are.
fn encode(top: &Members<'_>, meta: &Members<'_>, rv: u64, sorted: bool) -> (Bytes, u32, u8) {
    let size: usize = top
        .iter()
        .map(|(k, v)| k.len() + v.get().len() + 4)
        .sum::<usize>()
        + 48;
    let mut out = Vec::with_capacity(size);
    let mut rv_at = 0;
    let mut rv_len = 0;
    out.push(b'{');
    for (i, (k, v)) in top.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_key(&mut out, k);
        if k == "metadata" {
            out.push(b'{');
            let mut first = true;
            let mut written = false;
            let mut write_rv = |out: &mut Vec<u8>, first: &mut bool| {
                if !*first {
                    out.push(b',');
                }
                *first = false;
                out.extend_from_slice(b"\"resourceVersion\":\"");
                rv_at = out.len() as u32;
                let mut digits = itoa::Buffer::new();
                let d = digits.format(rv);
                rv_len = d.len() as u8;
                out.extend_from_slice(d.as_bytes());
                out.push(b'"');
            };
            for (mk, mv) in meta.iter().filter(|(mk, _)| mk != "resourceVersion") {
                if sorted && !written && mk.as_bytes() > b"resourceVersion".as_slice() {
                    write_rv(&mut out, &mut first);
                    written = true;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                write_key(&mut out, mk);
                write_compact(&mut out, mv.get());
            }
            if !written {
                write_rv(&mut out, &mut first);
            }
            out.push(b'}');
        } else {
            write_compact(&mut out, v.get());
        }
    }
    out.push(b'}');
    (Bytes::from(out), rv_at, rv_len)
}

fn write_key(out: &mut Vec<u8>, k: &str) {
    // Keys are tiny; serde_json's escaping is the reference for what needs escaping.
    serde_json::to_writer(&mut *out, k)
        .unwrap_or_else(|_| unreachable!("writing a str to a Vec cannot fail"));
    out.push(b':');
}

/// Copies a raw JSON value without its insignificant whitespace. Inside valid JSON strings no raw
/// control characters can occur, so every newline, tab or carriage return is whitespace; spaces are
/// only dropped outside strings.
fn write_compact(out: &mut Vec<u8>, raw: &str) {
    let b = raw.as_bytes();
    if !b.iter().any(|c| matches!(c, b' ' | b'\n' | b'\r' | b'\t')) {
        out.extend_from_slice(b);
        return;
    }
    let mut in_str = false;
    let mut escaped = false;
    for &c in b {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_str = false;
            }
        } else if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
            out.push(c);
            in_str = c == b'"';
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::definition::ResourceDef;

    fn pods() -> Schema {
        Schema::new(ResourceDef::builtin("pods").unwrap())
    }

    #[test]
    fn decodes_and_rewrites_the_resource_version() {
        let s = pods();
        let v = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"999","labels":{"app":"web"}},
            "spec":{"nodeName":"n1", "containers":[ {"name":"c"} ]},"status":{"phase":"Running"}}"#;
        let o = Object::decode(&s, "/registry/pods/ns/a", v, 42).unwrap();
        assert_eq!(
            (o.namespace(), o.name(), o.resource_version()),
            (Some("ns"), "a", 42)
        );
        let json = std::str::from_utf8(o.json()).unwrap();
        assert!(!json.contains('\n') && !json.contains("999"), "{json}");
        let val = o.to_value();
        assert_eq!(val["metadata"]["resourceVersion"], "42");
        assert_eq!(val["spec"]["containers"][0]["name"], "c");
        assert_eq!(o.label("app"), Some("web"));
        assert_eq!(o.attr(Attr::Field(0)), Some("n1"));
        assert_eq!(o.attr(Attr::Field(1)), Some("Running"));
        let moved: serde_json::Value = serde_json::from_slice(&o.json_at(1234567)).unwrap();
        assert_eq!(moved["metadata"]["resourceVersion"], "1234567");
        assert_eq!(moved["spec"], val["spec"]);
        assert_eq!(o.field(&FieldPath::parse("spec.containers").unwrap()), None);
        assert_eq!(
            o.field(&FieldPath::parse("status.phase").unwrap()).unwrap(),
            "Running"
        );
    }

    /// The cache key of a pod in protobuf.
    fn pod_key(value: &[u8]) -> String {
        let m = crate::model::protobuf::Envelope::parse(value)
            .unwrap()
            .meta()
            .unwrap();
        format!("/registry/pods/{}/{}", m.namespace, m.name)
    }

    /// kube-apiserver's GET body of a pod at revision 12345, read back (as a leaf reads its
    /// root's watch): served at 12345 it is the same bytes; at another revision, spliced at
    /// decode. Either way the protobuf served is the stored bytes, shared.
    #[test]
    fn protobuf_is_served_as_stored_with_its_revision() {
        let served = crate::model::protobuf::tests::vector("pod.pb");
        let key = pod_key(&served);
        let o = Object::decode(&pods(), &key, &served, 12345).unwrap();
        let wire = o.protobuf_wire().unwrap();
        assert_eq!(&wire[..], &served[..]);
        assert_eq!(
            wire.as_ptr(),
            o.protobuf().unwrap().as_ptr(),
            "shared, not copied"
        );
        let o = Object::decode(&pods(), &key, &served, 777).unwrap();
        let wire = o.protobuf_wire().unwrap();
        assert_eq!(wire.as_ptr(), o.protobuf().unwrap().as_ptr());
        let (want, _) = crate::model::protobuf::with_resource_version(&served, 777).unwrap();
        assert_eq!(&wire[..], &want[..]);
        assert_eq!(o.to_value()["metadata"]["resourceVersion"], "777");
    }

    /// A one-off reader of a protobuf-stored object's JSON gets the same bytes as `json` and
    /// leaves nothing with the object; once `json` has made (and kept) it, both share it.
    #[test]
    fn json_unkept_is_the_json_without_keeping_it() {
        let served = crate::model::protobuf::tests::vector("pod.pb");
        let key = pod_key(&served);
        let o = Object::decode(&pods(), &key, &served, 12345).unwrap();
        let kept = |o: &Object| o.0.lazy.get().is_some_and(|l| l.json.get().is_some());
        let once = o.json_unkept();
        assert!(!kept(&o), "a one-off read keeps no JSON");
        let again = o.json_unkept();
        assert_ne!(once.as_ptr(), again.as_ptr(), "made again, not kept");
        assert_eq!(&once[..], &o.json()[..]);
        assert!(kept(&o));
        assert_eq!(
            o.json_unkept().as_ptr(),
            o.json().as_ptr(),
            "shared once kept"
        );
        // Stored as JSON: the stored bytes themselves.
        let j = Object::decode(&pods(), &key, &o.json()[..], 5).unwrap();
        assert_eq!(j.json_unkept().as_ptr(), j.json().as_ptr());
    }

    /// An object stored as protobuf serves its stored bytes, the revision spliced in at decode
    /// (no copy on protobuf use), and keeps a protobuf watch frame's head per event type.
    #[test]
    fn a_protobuf_object_serves_its_stored_bytes_and_keeps_its_frame_heads() {
        let stored = crate::model::protobuf::tests::vector("pod.etcd.bin");
        let served = crate::model::protobuf::tests::vector("pod.pb");
        let key = pod_key(&stored);
        let o = Object::decode(&pods(), &key, &stored, 12345).unwrap();
        let wire = o.protobuf_wire().unwrap();
        assert_eq!(&wire[..], &served[..]);
        assert_eq!(
            wire.as_ptr(),
            o.protobuf().unwrap().as_ptr(),
            "the stored bytes, not a copy"
        );
        let (env, added) = o.protobuf_with_head(EventType::Added).unwrap();
        assert_eq!(env.as_ptr(), wire.as_ptr());
        let made = added
            .unwrap()
            .get_or_init(|| Bytes::from_static(b"<ADDED>"));
        let (_, modified) = o.protobuf_with_head(EventType::Modified).unwrap();
        assert!(modified.unwrap().get().is_none(), "a slot per event type");
        let (_, again) = o.protobuf_with_head(EventType::Added).unwrap();
        assert_eq!(
            again.unwrap().get().map(|b| b.as_ptr()),
            Some(made.as_ptr()),
            "kept"
        );
        assert!(
            o.protobuf_with_head(EventType::Deleted)
                .unwrap()
                .1
                .is_none()
        );
    }

    /// A CR read by its CRD's schema: defaulted, pruned, written back as Go writes it, and
    /// decoded once: a default the schema itself would prune (CRD validation refuses one, but
    /// what etcd holds is what is read) is served as one decode makes it, as kube-apiserver
    /// serves it, not decoded again and again.
    #[test]
    fn a_custom_resource_is_read_once_by_its_crds_schema() {
        let crd = serde_json::json!({
            "metadata": {"name": "gadgets.g.example.com"},
            "spec": {"group": "g.example.com", "scope": "Namespaced",
                "names": {"plural": "gadgets", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "a": {"type": "string", "default": "<A>"},
                            "b": {"type": "array", "default": [{"x": null}]}}}}}}}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]}
        });
        let def = crate::model::CrdServing::of(&crd)
            .definition()
            .cloned()
            .unwrap();
        let s = Schema::new(def);
        let v = br#"{"apiVersion":"g.example.com/v1","kind":"Gadget","metadata":{"name":"g","namespace":"a"},"spec":{"gone":1.5}}"#;
        let o = Object::decode(&s, "/registry/g.example.com/gadgets/a/g", v, 9).unwrap();
        assert_eq!(
            std::str::from_utf8(o.json()).unwrap(),
            r#"{"apiVersion":"g.example.com/v1","kind":"Gadget","metadata":{"name":"g","namespace":"a","resourceVersion":"9"},"spec":{"a":"\u003cA\u003e","b":[{"x":null}]}}"#
        );
    }

    #[test]
    fn a_custom_resources_revision_goes_where_sorted_keys_put_it() {
        let s = Schema::new(ResourceDef::builtin("widgets").unwrap());
        let v = br#"{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z","name":"w","namespace":"a","resourceVersion":"1","uid":"u"},"spec":{}}"#;
        let o = Object::decode(&s, "/registry/example.com/widgets/a/w", v, 42).unwrap();
        assert_eq!(
            std::str::from_utf8(o.json()).unwrap(),
            r#"{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z","name":"w","namespace":"a","resourceVersion":"42","uid":"u"},"spec":{}}"#
        );
        assert_eq!(o.json_at(7).len(), o.json().len() - 1);
        // Last when every key sorts before it.
        let v = br#"{"metadata":{"name":"w","namespace":"a"}}"#;
        let o = Object::decode(&s, "/registry/example.com/widgets/a/w", v, 3).unwrap();
        assert_eq!(
            std::str::from_utf8(o.json()).unwrap(),
            r#"{"metadata":{"name":"w","namespace":"a","resourceVersion":"3"}}"#
        );
    }

    #[test]
    fn malformed_values_are_typed_errors() {
        let s = pods();
        let k = "/registry/pods/ns/a";
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "not a JSON object"),
            (b"[1,2]", "not a JSON object"),
            (
                b"{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\"}} trailing",
                "not a JSON object",
            ),
            (b"{}", "no metadata"),
            (b"{\"metadata\":7}", "metadata is not an object"),
            (
                b"{\"metadata\":{\"namespace\":\"ns\"}}",
                "metadata.name is missing",
            ),
            (
                b"{\"metadata\":{\"name\":5,\"namespace\":\"ns\"}}",
                "metadata.name must be a string",
            ),
            (
                b"{\"metadata\":{\"name\":\"a\"}}",
                "metadata.namespace is missing",
            ),
            (
                b"{\"metadata\":{\"name\":\"b\",\"namespace\":\"ns\"}}",
                "key does not match",
            ),
            (
                b"{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\",\"labels\":{\"x\":1}}}",
                "labels must map",
            ),
            (b"\xff\xfe", "not UTF-8"),
            (
                br#"{"metadata":{"name":"a","namespace":"ns"},"x":"\ud800zz"}"#,
                "unpaired UTF-16 surrogate",
            ),
            (
                br#"{"metadata":{"name":"a","namespace":"ns"},"x":{"y":["\udc00"]}}"#,
                "unpaired UTF-16 surrogate",
            ),
            (
                br#"{"metadata":{"name":"a","namespace":"ns"},"x":"\ud800\u0041"}"#,
                "unpaired UTF-16 surrogate",
            ),
            (
                br#"{"metadata":{"name":"a","namespace":"ns"},"x":{"\ud800":1}}"#,
                "unpaired UTF-16 surrogate",
            ),
        ];
        for (value, want) in cases {
            let e = Object::decode(&s, k, value, 1).unwrap_err();
            assert!(
                e.reason.contains(want),
                "{:?}: {e}",
                String::from_utf8_lossy(value)
            );
            assert_eq!(e.key, k);
            // Only a well-formed object naming another key names it (k/k#135115).
            let names = (*want == "key does not match").then(|| "/registry/pods/ns/b".to_owned());
            assert_eq!(e.names, names, "{e}");
        }
        assert!(
            Object::decode(
                &s,
                "/other/ns/a",
                b"{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\"}}",
                1
            )
            .unwrap_err()
            .reason
            .contains("not under")
        );
    }

    #[test]
    fn numbers_out_of_range_are_decode_errors() {
        let s = Schema::new(ResourceDef::builtin("pods").unwrap());
        let k = "/registry/pods/ns/a";
        let with = |n: &str| format!(r#"{{"metadata":{{"name":"a","namespace":"ns"}},"x":{n}}}"#);
        for bad in ["1e999", "-11e999", "1".repeat(400).as_str()] {
            let e = Object::decode(&s, k, with(bad).as_bytes(), 1).unwrap_err();
            assert!(e.reason.contains("out of range"), "{bad}: {e}");
        }
        for good in [
            "0",
            "-0",
            "1e-999",
            "18446744073709551615",
            "-9223372036854775808",
            "2.5e300",
        ] {
            let o = Object::decode(&s, k, with(good).as_bytes(), 1).unwrap();
            serde_json::from_slice::<serde_json::Value>(o.json()).unwrap();
        }
    }

    /// `{"metadata":…,"x":[[…[0]…]]}`, nested `depth` levels in all.
    fn nested(depth: usize) -> String {
        let inner = depth - 1;
        format!(
            r#"{{"metadata":{{"name":"a","namespace":"ns"}},"x":{}0{}}}"#,
            "[".repeat(inner),
            "]".repeat(inner)
        )
    }

    #[test]
    fn what_is_cached_is_valid_json_for_strict_clients() {
        let s = pods();
        let k = "/registry/pods/ns/a";
        // The deepest accepted object still parses in serde_json as a list item (two more levels).
        let o = Object::decode(&s, k, nested(MAX_DEPTH).as_bytes(), 1).unwrap();
        let list = format!(
            r#"{{"items":[{}]}}"#,
            std::str::from_utf8(o.json()).unwrap()
        );
        serde_json::from_str::<serde_json::Value>(&list).unwrap();
        for depth in [MAX_DEPTH + 1, 5000] {
            let e = Object::decode(&s, k, nested(depth).as_bytes(), 1).unwrap_err();
            assert!(e.reason.contains("nested deeper"), "{e}");
        }
        // Paired surrogates, escaped quotes and backslashes, and brackets inside strings are fine.
        let v = br#"{"metadata":{"name":"a","namespace":"ns"},"x":"\ud83d\ude00 \\ \" [[[{{ \u00e9","y":"\\ud800"}"#;
        let o = Object::decode(&s, k, v, 1).unwrap();
        let back: serde_json::Value = serde_json::from_slice(o.json()).unwrap();
        assert_eq!(back["x"], "\u{1f600} \\ \" [[[{{ \u{e9}");
        assert_eq!(back["y"], "\\ud800");
    }

    #[test]
    fn duplicate_members_keep_the_last_value_in_linear_time() {
        let s = pods();
        let k = "/registry/pods/ns/a";
        let v = br#"{"a":1,"metadata":{"name":"a","namespace":"ns"},"a":2,"b":3}"#;
        let o = Object::decode(&s, k, v, 1).unwrap();
        assert_eq!(
            std::str::from_utf8(o.json()).unwrap(),
            r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"1"},"a":2,"b":3}"#
        );
        // 100 000 members, many repeated: quadratic work took minutes here unoptimised; linear
        // work takes well under a second.
        let mut body = String::from(r#"{"metadata":{"name":"a","namespace":"ns"}"#);
        for i in 0..100_000 {
            body.push_str(&format!(r#","k{}":{i}"#, i % 60_000));
        }
        body.push('}');
        let started = std::time::Instant::now();
        let o = Object::decode(&s, k, body.as_bytes(), 1).unwrap();
        let took = started.elapsed();
        let back = o.to_value();
        assert_eq!(back.as_object().unwrap().len(), 60_001);
        assert_eq!(back["k0"], 60_000);
        assert_eq!(back["k59999"], 59_999);
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn the_fixed_part_of_an_object_stays_small() {
        // Paid by every cached object (design/performance.md, "Per cached object against its
        // JSON"): a field added here is paid by all of them; what only some objects use goes in
        // `Lazy`.
        assert_eq!(std::mem::size_of::<Inner>(), 120);
        assert_eq!(std::mem::size_of::<Form>(), 8);
        // What an object whose JSON or protobuf is made allocates once (design/performance.md).
        #[cfg(feature = "typed")]
        assert_eq!(std::mem::size_of::<Lazy>(), 112);
    }

    #[test]
    fn what_is_made_later_is_made_once_and_only_when_asked() {
        let s = pods();
        let k = "/registry/pods/ns/a";
        let v = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns","labels":{"b":"2","a":"1"}},"spec":{"nodeName":"n1","hostname":"y"}}"#;
        let json = Object::decode(&s, k, v, 7).unwrap();
        let pb = Object::decode(&s, k, json.protobuf_wire().unwrap(), 7).unwrap();
        assert!(pb.0.lazy.get().is_none(), "ingest makes nothing later");
        assert_eq!(pb.labels().collect::<Vec<_>>(), [("a", "1"), ("b", "2")]);
        assert_eq!((pb.key(), pb.name(), pb.namespace()), (k, "a", Some("ns")));
        // An undeclared path read once (not kept) makes nothing either; kept, the memo is made.
        let path = FieldPath::parse("spec.hostname").unwrap();
        assert!(s.field_attr("spec.hostname").is_none(), "undeclared");
        assert_eq!(
            pb.with_field(&path, false, |v| v.map(str::to_owned))
                .as_deref(),
            Some("y")
        );
        assert!(pb.0.lazy.get().is_none());
        assert_eq!(
            pb.with_field(&path, true, |v| v.map(str::to_owned))
                .as_deref(),
            Some("y")
        );
        assert!(pb.0.lazy.get().is_some());
        assert_eq!(pb.to_value()["spec"]["nodeName"], "n1");
        assert!(std::ptr::eq(pb.json(), pb.json()), "made once");
        assert!(pb.overhead_bytes() > json.overhead_bytes());
    }

    #[test]
    fn cluster_scoped_objects_have_no_namespace() {
        let s = Schema::new(ResourceDef::builtin("nodes").unwrap());
        let o = Object::decode(
            &s,
            "/registry/minions/n1",
            br#"{"metadata":{"name":"n1"}}"#,
            3,
        )
        .unwrap();
        assert_eq!((o.namespace(), o.name()), (None, "n1"));
        assert_eq!(
            std::str::from_utf8(o.json()).unwrap(),
            r#"{"metadata":{"name":"n1","resourceVersion":"3"}}"#
        );
    }
}
