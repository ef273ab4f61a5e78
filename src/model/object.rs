//! Cached objects: decoded once on ingest, with the attributes that indexes and selectors need
//! extracted once, and their JSON encoding produced once.
//!
//! ## Invariants
//! - `json` is compact (no newlines, so a watch stream can frame one event per line) and carries
//!   `metadata.resourceVersion` = `rv` at `json[rv_at..rv_at + rv_len]`. The stored bytes' own
//!   resourceVersion is never trusted: it is dropped on ingest.
//! - An object stored as protobuf keeps the stored bytes and makes its JSON on first use, exactly
//!   once (`OnceLock`), outside the cache's lock (consumers ask for it, the commit never does).
//!   Everything that encoding reads was validated at ingest, so making it cannot fail.
//! - `namespace` and `name` agree with the key: `prefix + ns + "/" + name`, or `prefix + name`.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::model::field_path::{self, FieldPath};
use crate::model::{Attr, Schema};

/// One cached object: cheap to clone (an `Arc`), immutable, `Send + Sync`.
#[derive(Clone)]
pub struct Object(Arc<Inner>);

struct Inner {
    key: Arc<str>,
    /// Byte range of the namespace inside `key` (empty for cluster-scoped objects).
    ns: (u32, u32),
    /// Byte offset of the name inside `key`; it runs to the end.
    name_at: u32,
    rv: u64,
    body: Body,
    /// Sorted by key.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// Values of the schema's declared fields, by slot.
    fields: Box<[Box<str>]>,
}

/// The JSON encoding, with where its resourceVersion digits are.
struct JsonForm {
    json: Bytes,
    rv_at: u32,
    rv_len: u8,
    /// Where the members after `kind` and `apiVersion` start (0: the object is listed as it is).
    item_at: u32,
}

/// What an object was decoded from.
enum Body {
    /// JSON: re-encoded compactly at ingest.
    Json(JsonForm),
    /// kube-apiserver's protobuf (`k8s\0` + `runtime.Unknown`), as stored; its JSON on first use.
    Protobuf {
        value: Bytes,
        json: OnceLock<JsonForm>,
    },
}

/// Why a stored value could not be cached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object {key}: {reason}")]
pub struct DecodeError {
    /// The etcd key.
    pub key: String,
    /// What is wrong with the value.
    pub reason: String,
}

impl Object {
    pub(crate) fn decode(
        schema: &Schema,
        key: &str,
        value: &[u8],
        rv: u64,
    ) -> Result<Object, DecodeError> {
        let fail = |reason: String| DecodeError {
            key: key.to_owned(),
            reason,
        };
        if value.starts_with(crate::model::protobuf::MAGIC) {
            return Object::decode_protobuf(schema, key, value, rv);
        }
        let text = std::str::from_utf8(value).map_err(|e| fail(format!("not UTF-8: {e}")))?;
        let top = members(text).map_err(|e| fail(format!("not a JSON object: {e}")))?;
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
            return Err(fail(format!(
                "key does not match metadata (expected {}{expected})",
                def.prefix
            )));
        }
        let labels =
            match find(&meta, "labels") {
                None => Vec::new(),
                Some(raw) => serde_json::from_str::<
                    Option<std::collections::BTreeMap<String, String>>,
                >(raw.get())
                .map_err(|e| fail(format!("metadata.labels must map strings to strings: {e}")))?
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect(),
            };
        let fields = schema
            .fields
            .iter()
            .map(|p| {
                field_in_members(&top, p)
                    .unwrap_or_default()
                    .into_boxed_str()
            })
            .collect();

        let (json, rv_at, rv_len) = encode(&top, &meta, rv);
        let prefix_len = def.prefix.len() as u32;
        let (ns, name_at) = if def.namespaced {
            let ns_end = prefix_len + namespace.len() as u32;
            ((prefix_len, ns_end), ns_end + 1)
        } else {
            ((prefix_len, prefix_len), prefix_len)
        };
        Ok(Object(Arc::new(Inner {
            key: key.into(),
            ns,
            name_at,
            rv,
            body: Body::Json(JsonForm {
                json,
                rv_at,
                rv_len,
                item_at: 0,
            }),
            labels: labels.into_boxed_slice(),
            fields,
        })))
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
        };
        let env = Envelope::parse(value).map_err(&fail)?;
        let def = &schema.def;
        let want_av = if def.group.is_empty() {
            Cow::Borrowed(def.version.as_str())
        } else {
            Cow::Owned(format!("{}/{}", def.group, def.version))
        };
        if env.kind != def.kind || env.api_version != want_av {
            return Err(fail(format!(
                "protobuf envelope holds {} {}, not this resource's {want_av} {}",
                env.api_version, env.kind, def.kind
            )));
        }
        let meta = env.meta().map_err(&fail)?;
        if meta.name.is_empty() {
            return Err(fail("metadata.name is missing or empty".into()));
        }
        let (ns, name_at) = key_layout(schema, key, meta.name, meta.namespace).map_err(&fail)?;
        let fields = schema
            .fields
            .iter()
            .map(|p| env.field(p).map(|v| v.unwrap_or_default().into_boxed_str()))
            .collect::<Result<_, _>>()
            .map_err(&fail)?;
        env.validate().map_err(&fail)?;
        Ok(Object(Arc::new(Inner {
            key: key.into(),
            ns,
            name_at,
            rv,
            body: Body::Protobuf {
                value: Bytes::copy_from_slice(value),
                json: OnceLock::new(),
            },
            labels: meta.labels.into_boxed_slice(),
            fields,
        })))
    }

    /// The JSON encoding, made now if this is its first use.
    fn form(&self) -> &JsonForm {
        match &self.0.body {
            Body::Json(f) => f,
            Body::Protobuf { value, json } => json.get_or_init(|| {
                match crate::model::protobuf::Envelope::parse(value).and_then(|e| e.encode_json(self.0.rv)) {
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
            }),
        }
    }

    /// The etcd key.
    pub fn key(&self) -> &str {
        &self.0.key
    }

    pub(crate) fn key_arc(&self) -> &Arc<str> {
        &self.0.key
    }

    /// The namespace, `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        let (a, b) = self.0.ns;
        (a != b).then(|| &self.0.key[a as usize..b as usize])
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.0.key[self.0.name_at as usize..]
    }

    /// The revision at which this state was written (its `metadata.resourceVersion`).
    pub fn resource_version(&self) -> u64 {
        self.0.rv
    }

    /// The object's JSON, compact, with `metadata.resourceVersion` set. Shared, never copied.
    /// For an object stored as protobuf it is made on the first call (once).
    pub fn json(&self) -> &Bytes {
        &self.form().json
    }

    /// The JSON of this object as an item of a list: built-ins decoded from protobuf leave `kind`
    /// and `apiVersion` out there, as upstream's typed lists do; the item is `{` followed by the
    /// returned bytes (shared, never copied). `None`: the item is [`json`](Object::json) itself.
    pub fn list_item_tail(&self) -> Option<Bytes> {
        let f = self.form();
        (f.item_at > 0).then(|| f.json.slice(f.item_at as usize..))
    }

    /// The stored protobuf value (`k8s\0` + envelope), for objects stored as protobuf.
    pub fn protobuf(&self) -> Option<&Bytes> {
        match &self.0.body {
            Body::Json(_) => None,
            Body::Protobuf { value, .. } => Some(value),
        }
    }

    /// The JSON with `metadata.resourceVersion` replaced, as a DELETED event carries the last state
    /// at the deletion's revision. Splices bytes; never re-encodes.
    pub fn json_at(&self, rv: u64) -> Bytes {
        let form = self.form();
        if rv == self.0.rv {
            return form.json.clone();
        }
        let j = &form.json;
        let (a, b) = (
            form.rv_at as usize,
            form.rv_at as usize + form.rv_len as usize,
        );
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(rv).as_bytes();
        let mut out = BytesMut::with_capacity(j.len() + digits.len());
        out.put_slice(&j[..a]);
        out.put_slice(digits);
        out.put_slice(&j[b..]);
        out.freeze()
    }

    /// A label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        let labels = &self.0.labels;
        labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*labels[i].1)
    }

    /// All labels, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    /// A field's value as a field selector sees it (see [`FieldPath`]): missing fields read as "".
    /// Pre-extracted attributes are free; other paths are read from the JSON.
    pub fn field(&self, path: &FieldPath) -> Option<Cow<'_, str>> {
        match path.as_str() {
            "metadata.name" => Some(Cow::Borrowed(self.name())),
            "metadata.namespace" => Some(Cow::Borrowed(self.namespace().unwrap_or(""))),
            _ => {
                // Read from the protobuf bytes while the JSON is not made: a predicate may ask under
                // the cache's lock, where the JSON encoding should not be made.
                if let Body::Protobuf { value, json } = &self.0.body
                    && json.get().is_none()
                {
                    let env = crate::model::protobuf::Envelope::parse(value).ok()?;
                    return env.field(path).ok().flatten().map(Cow::Owned);
                }
                let raw: &RawValue = serde_json::from_slice(self.json()).ok()?;
                field_path::extract(raw, path).map(Cow::Owned)
            }
        }
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
            Attr::Field(i) => Some(&self.0.fields[i as usize]),
            Attr::Label(_) => None,
        }
    }

    /// An attribute, with declared labels resolved through the schema.
    pub(crate) fn attr_in(&self, schema: &Schema, a: Attr) -> Option<&str> {
        match a {
            Attr::Label(i) => self.label(&schema.labels[i as usize]),
            _ => self.attr(a),
        }
    }

    /// Heap bytes this object holds beyond its JSON, for memory accounting (for an object stored as
    /// protobuf: the stored value, and the JSON once made).
    pub fn overhead_bytes(&self) -> usize {
        let i = &self.0;
        std::mem::size_of::<Inner>()
            + 16 // Arc counts
            + i.key.len()
            + 16
            + i.labels.iter().map(|(k, v)| 32 + k.len() + v.len()).sum::<usize>()
            + i.fields.iter().map(|f| 16 + f.len()).sum::<usize>()
            + match &i.body {
                Body::Json(_) => 0,
                Body::Protobuf { value, json } => {
                    value.len() + json.get().map_or(0, |f| f.json.len())
                }
            }
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
        self.0.key == other.0.key
            && self.0.rv == other.0.rv
            && match (self.protobuf(), other.protobuf()) {
                (Some(a), Some(b)) => a == b,
                _ => self.json() == other.json(),
            }
    }
}

/// Where namespace and name are in `key`, after checking that the key is the definition's prefix
/// followed by `namespace/name` (or `name` for cluster-scoped resources).
fn key_layout(
    schema: &Schema,
    key: &str,
    name: &str,
    namespace: &str,
) -> Result<((u32, u32), u32), String> {
    let def = &schema.def;
    let rest = key
        .strip_prefix(def.prefix.as_str())
        .ok_or_else(|| format!("key is not under {}", def.prefix))?;
    let ok = if def.namespaced {
        if namespace.is_empty() {
            return Err("metadata.namespace is missing for a namespaced resource".into());
        }
        rest.len() == namespace.len() + 1 + name.len()
            && rest.starts_with(namespace)
            && rest.as_bytes()[namespace.len()] == b'/'
            && rest.ends_with(name)
    } else {
        if !namespace.is_empty() {
            return Err(format!(
                "metadata.namespace \"{namespace}\" set on a cluster-scoped resource"
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
        return Err(format!(
            "key does not match metadata (expected {}{expected})",
            def.prefix
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

type Members<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

fn find<'a>(m: &Members<'a>, key: &str) -> Option<&'a RawValue> {
    m.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
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

/// The members of a JSON object, in order, values left raw. Later duplicates replace earlier ones.
fn members(text: &str) -> Result<Members<'_>, serde_json::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Members<'de>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out: Members<'de> = Vec::new();
            while let Some(k) = map.next_key::<Cow<'de, str>>()? {
                let v: &'de RawValue = map.next_value()?;
                out.retain(|(x, _)| *x != k);
                out.push((k, v));
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let m = de::Deserializer::deserialize_map(&mut de, V)?;
    de.end()?;
    Ok(m)
}

/// Writes the object compactly with `metadata.resourceVersion` = `rv` as the last metadata member.
/// Returns the bytes and where the revision's digits are.
fn encode(top: &Members<'_>, meta: &Members<'_>, rv: u64) -> (Bytes, u32, u8) {
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
            for (mk, mv) in meta.iter().filter(|(mk, _)| mk != "resourceVersion") {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_key(&mut out, mk);
                write_compact(&mut out, mv.get());
            }
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(b"\"resourceVersion\":\"");
            rv_at = out.len() as u32;
            let mut digits = itoa::Buffer::new();
            let d = digits.format(rv);
            rv_len = d.len() as u8;
            out.extend_from_slice(d.as_bytes());
            out.extend_from_slice(b"\"}");
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
        ];
        for (value, want) in cases {
            let e = Object::decode(&s, k, value, 1).unwrap_err();
            assert!(
                e.reason.contains(want),
                "{:?}: {e}",
                String::from_utf8_lossy(value)
            );
            assert_eq!(e.key, k);
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
