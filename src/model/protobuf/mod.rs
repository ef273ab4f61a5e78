//! Kubernetes protobuf, as kube-apiserver stores built-in types in etcd: the magic `k8s\0`, then a
//! `runtime.Unknown` envelope {typeMeta {apiVersion, kind}, raw, contentEncoding, contentType}
//! whose `raw` is the object's message (for example a `v1.Pod`).
//!
//! Messages are read straight from the bytes, described by tables generated from the Go API types
//! (`tables.rs`, see `scripts/gen-protobuf-tables.py`): no per-type structs, and at ingest only
//! what the cache needs (name, namespace, labels, declared fields) is read. The JSON encoding
//! (`json.rs`) is kube-apiserver's for the same object.
//!
//! | file | concept |
//! |---|---|
//! | `wire.rs` | varints and tagged fields over a byte slice |
//! | `schema.rs` | the shape of a message: field numbers, JSON names, kinds, omission rules |
//! | `tables.rs` | generated: every message reachable from a served built-in kind |
//! | `catalog.rs` | lookups over the tables: a message by index or kind, a field by JSON name |
//! | `json.rs` | protobuf → JSON with encoding/json's rules |
//! | `stream.rs` | a protobuf watch stream as a follower reads it: frames, an object's identity, a `Status` |
//! | `encode.rs` | JSON → protobuf with gogo's rules; the envelope, the resourceVersion splice, the primitives `wire/` writes its frames with |

pub mod catalog;
mod encode;
mod json;
pub mod schema;
pub(crate) mod stored;
// What the API server follower reads off a protobuf watch stream.
pub mod stream;
#[rustfmt::skip]
mod tables;
mod wire;

use catalog::{kind_message, message};
use schema::{Card, Kind, Message};
use wire::{Fields, Value};

use std::borrow::Cow;

use crate::model::FieldPath;

// The primitives `wire/` writes its envelopes, frame heads and variants with (the server's
// conversions use a few more); the three writers are public for the crates that write protobuf
// around objects (the API server follower's tests).
pub(crate) use encode::{encode_json, nested, put_varint, raw_range, spans, with_resource_version};
pub use encode::{put_len, tag, varint};
// A leaf's protobuf LIST: each item in the envelope a watch frame's object has.
pub use encode::envelope_into;
pub(crate) use encode::{encode_message, envelope};
pub(crate) use json::write_go_value as write_json_value;
pub(crate) use json::write_message_json;
pub(crate) use json::write_str as write_json_str;
pub(crate) use wire::Fields as WireFields;
pub(crate) use wire::Value as WireValue;

/// Whether kube-apiserver serves this kind in protobuf (a built-in kind with a message in the
/// tables); custom resources are JSON only.
pub fn has_message(api_version: &str, kind: &str) -> bool {
    kind_message(api_version, kind).is_some()
}

/// kube-apiserver's storage form of a value written as JSON: for an object of a built-in kind,
/// `k8s\0` + `runtime.Unknown` around its message (without a resourceVersion, which is never
/// stored); `None` for anything else (custom resources stay JSON; a value already in protobuf is
/// kept as it is).
///
/// # Errors
/// JSON of a built-in kind that its message cannot hold (a member of the wrong type).
// Public through `etcd::stored_value`.
pub fn storage_form(value: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if value.starts_with(MAGIC) {
        return Ok(None);
    }
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(value) else {
        return Ok(None);
    };
    let av = v.get("apiVersion").and_then(|x| x.as_str()).unwrap_or("");
    let kind = v.get("kind").and_then(|x| x.as_str()).unwrap_or("");
    if !has_message(av, kind) || stored::JSON_STORED.contains(&(av, kind)) {
        return Ok(None);
    }
    let (av, kind) = (av.to_owned(), kind.to_owned());
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("resourceVersion");
    }
    let pb = encode_json(&v)?;
    // A kind kube-apiserver stores as another (events.k8s.io/v1 Event as a core v1 Event).
    let raw = raw_range(&pb)
        .and_then(|r| pb.get(r))
        .ok_or("an envelope without its message")?;
    Ok(Some(
        stored::write_as_stored((&av, &kind), raw)?.unwrap_or(pb),
    ))
}

/// The Kubernetes minor version (1.x) whose messages the tables describe (`tables.rs`, generated
/// from its Go modules): a server of this version or older sends nothing they do not know.
pub const TABLES_MINOR: u32 = 35;

/// The prefix of every protobuf value kube-apiserver stores.
pub const MAGIC: &[u8] = b"k8s\0";

/// The envelope of a stored value, with the message its type names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Envelope<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    /// The object's message.
    pub raw: &'a [u8],
    msg: &'static Message,
}

/// `metadata` of an object, read at ingest.
#[derive(Debug)]
pub(crate) struct Meta<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// `metadata.uid` (field 5), `""` when absent.
    pub uid: &'a str,
    /// Sorted by key; a repeated key keeps its last value. Borrowed from the bytes unless a
    /// label is not UTF-8 (then as the JSON encoding shows it, with U+FFFD).
    pub labels: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

fn utf8<'a>(b: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(b).map_err(|_| format!("{what} is not UTF-8"))
}

/// A `k8s\0` + `runtime.Unknown` value of any type (an object, a list, a `Status`): its type
/// and its message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unknown<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    /// The message (`raw`; the last one, as gogo's decoder keeps it).
    pub raw: &'a [u8],
}

impl<'a> Unknown<'a> {
    /// Reads the envelope of `value`.
    ///
    /// # Errors
    /// No [`MAGIC`], malformed protobuf, or a content encoding (kube-apiserver writes none).
    pub(crate) fn parse(value: &'a [u8]) -> Result<Unknown<'a>, String> {
        let body = value
            .strip_prefix(MAGIC)
            .ok_or("no protobuf magic prefix")?;
        let (mut api_version, mut kind, mut raw) = ("", "", None);
        for e in Fields::new(body) {
            match e.map_err(|e| format!("protobuf envelope: {e}"))? {
                (1, Value::Len(tm)) => {
                    for e in Fields::new(tm) {
                        match e.map_err(|e| format!("protobuf envelope typeMeta: {e}"))? {
                            (1, Value::Len(b)) => api_version = utf8(b, "envelope apiVersion")?,
                            (2, Value::Len(b)) => kind = utf8(b, "envelope kind")?,
                            _ => {}
                        }
                    }
                }
                (2, Value::Len(b)) => raw = Some(b),
                (3, Value::Len(b)) if !b.is_empty() => {
                    return Err(format!(
                        "protobuf envelope has content encoding {:?}",
                        String::from_utf8_lossy(b)
                    ));
                }
                (3 | 4, Value::Len(_)) => {}
                (1..=4, _) => return Err("protobuf envelope: wrong wire type".into()),
                _ => {}
            }
        }
        Ok(Unknown {
            api_version,
            kind,
            raw: raw.unwrap_or_default(),
        })
    }
}

impl<'a> Envelope<'a> {
    /// Reads the envelope of `value` (which starts with [`MAGIC`]).
    ///
    /// # Errors
    /// Malformed protobuf, a content encoding, or a type with no built-in message.
    pub(crate) fn parse(value: &'a [u8]) -> Result<Envelope<'a>, String> {
        let u = Unknown::parse(value)?;
        let (api_version, kind) = (u.api_version, u.kind);
        let msg = kind_message(api_version, kind).ok_or_else(|| {
            format!("protobuf envelope names {api_version:?} {kind:?}, not a built-in type")
        })?;
        Ok(Envelope {
            api_version,
            kind,
            raw: u.raw,
            msg,
        })
    }

    /// Name, namespace and labels.
    ///
    /// # Errors
    /// Malformed protobuf in the object or its metadata.
    pub(crate) fn meta(&self) -> Result<Meta<'a>, String> {
        let top = self.msg;
        let Some((mf, None)) = top.json_field("metadata") else {
            return Err(format!("{} has no metadata", top.name));
        };
        let mut meta_bytes: &[u8] = &[];
        for e in Fields::new(self.raw) {
            match e.map_err(|e| format!("{}: {e}", top.name))? {
                (n, Value::Len(b)) if n == mf.num => meta_bytes = b,
                (n, _) if n == mf.num => {
                    return Err(format!("{}: metadata has the wrong wire type", top.name));
                }
                _ => {}
            }
        }
        let (mut name, mut namespace, mut uid) = ("", "", "");
        let mut labels = Vec::new();
        for e in Fields::new(meta_bytes) {
            match e.map_err(|e| format!("metadata: {e}"))? {
                (1, Value::Len(b)) => name = utf8(b, "metadata.name")?,
                (3, Value::Len(b)) => namespace = utf8(b, "metadata.namespace")?,
                // Only hashed for shard selectors; validate() judges it.
                (5, Value::Len(b)) => uid = std::str::from_utf8(b).unwrap_or_default(),
                (11, Value::Len(b)) => {
                    let (mut k, mut v): (&[u8], &[u8]) = (&[], &[]);
                    for e in Fields::new(b) {
                        match e.map_err(|e| format!("metadata.labels: {e}"))? {
                            (1, Value::Len(x)) => k = x,
                            (2, Value::Len(x)) => v = x,
                            (1 | 2, _) => return Err("metadata.labels: wrong wire type".into()),
                            _ => {}
                        }
                    }
                    // As the JSON encoding shows them (invalid UTF-8 becomes U+FFFD there too).
                    labels.push((String::from_utf8_lossy(k), String::from_utf8_lossy(v)));
                }
                (1 | 3 | 11, _) => return Err("metadata: wrong wire type".into()),
                _ => {}
            }
        }
        labels.reverse();
        labels.sort_by(|a: &(Cow<'_, str>, Cow<'_, str>), b| a.0.cmp(&b.0));
        labels.dedup_by(|a, b| a.0 == b.0);
        Ok(Meta {
            name,
            namespace,
            uid,
            labels,
        })
    }

    /// A field's value as a field selector sees it in the JSON encoding: strings as they are,
    /// numbers and booleans in their JSON text, a missing, left-out or `null` field as "", and
    /// `None` for objects and arrays. Paths through maps or lists read the JSON encoding.
    ///
    /// A string read as it is stored is borrowed from the envelope's bytes (no copy: a decode reads
    /// each declared field this way).
    ///
    /// # Errors
    /// Malformed protobuf along the path.
    pub(crate) fn field(&self, path: &FieldPath) -> Result<Option<Cow<'a, str>>, String> {
        let mut msg = self.msg;
        let mut bytes = self.raw;
        let mut segs = path.segments().peekable();
        while let Some(seg) = segs.next() {
            let Some((f, via)) = msg.json_field(seg) else {
                return Ok(Some(Cow::Borrowed("")));
            };
            if let Some(inline) = via {
                let Kind::Msg(m) = inline.kind else {
                    return Ok(Some(Cow::Borrowed("")));
                };
                bytes = last_len(msg.name, bytes, inline.num)?.unwrap_or_default();
                msg = message(m);
            }
            if segs.peek().is_none() {
                return leaf_text(msg, f, bytes);
            }
            match (f.kind, f.card) {
                (Kind::Msg(m), Card::One | Card::Ptr) => {
                    bytes = match last_len(msg.name, bytes, f.num)? {
                        Some(b) => b,
                        // A zero struct has only zero fields: reading on from an empty message
                        // gives what the JSON encoding shows.
                        None if f.card == Card::One => &[],
                        // A nil pointer is left out or null.
                        None => return Ok(Some(Cow::Borrowed(""))),
                    };
                    msg = message(m);
                }
                _ => {
                    // Into a map or list: read it from the JSON encoding.
                    let (json, _, _, _) = self.encode_json(0)?;
                    let raw: &serde_json::value::RawValue =
                        serde_json::from_slice(&json).map_err(|e| format!("{e}"))?;
                    return Ok(crate::model::field_path::extract(raw, path).map(Cow::Owned));
                }
            }
        }
        Ok(Some(Cow::Borrowed("")))
    }

    /// Checks that [`encode_json`](Envelope::encode_json) will succeed: every message the JSON encoding
    /// reads is well-formed protobuf of the right shape, every embedded JSON is JSON.
    ///
    /// # Errors
    /// What `encode_json` would fail on.
    pub(crate) fn validate(&self) -> Result<(), String> {
        json::validate(self.msg, self.raw, 0)
    }

    /// The JSON encoding with `metadata.resourceVersion` = `rv`: the bytes, where the revision's
    /// digits are in them, and where the fields after `kind` and `apiVersion` start (a list item
    /// is `{` + the bytes from there, as upstream's typed lists leave items' type out).
    ///
    /// # Errors
    /// Malformed protobuf anywhere in the object, or embedded JSON that is not JSON.
    pub(crate) fn encode_json(&self, rv: u64) -> Result<(Vec<u8>, u32, u8, u32), String> {
        let mut out = Vec::with_capacity(self.raw.len() * 2 + 64);
        let (at, len, fields_at) = json::write_object(
            &mut out,
            self.api_version,
            self.kind,
            self.msg,
            self.raw,
            rv,
        )?;
        Ok((out, at, len, fields_at))
    }
}

/// The last occurrence of a length-delimited field.
/// The last length-delimited field `num` of a message (`what`, for errors), as gogo's decoder
/// keeps the last of a repeated singular field.
fn last_len<'a>(what: &str, bytes: &'a [u8], num: u32) -> Result<Option<&'a [u8]>, String> {
    match last_value(what, bytes, num)? {
        None => Ok(None),
        Some(Value::Len(b)) => Ok(Some(b)),
        Some(_) => Err(format!("{what}: field {num} has the wrong wire type")),
    }
}

fn last_value<'a>(what: &str, bytes: &'a [u8], num: u32) -> Result<Option<Value<'a>>, String> {
    let mut found = None;
    for e in Fields::new(bytes) {
        let (n, v) = e.map_err(|e| format!("{what}: {e}"))?;
        if n == num {
            found = Some(v);
        }
    }
    Ok(found)
}

/// A field's value as the JSON encoding shows it to a field selector: left out, `null`, objects
/// and arrays are "".
fn leaf_text<'a>(
    msg: &'static Message,
    f: &schema::Field,
    bytes: &'a [u8],
) -> Result<Option<Cow<'a, str>>, String> {
    let wire = || format!("{}: field {} has the wrong wire type", msg.name, f.num);
    match (f.kind, f.card, last_value(msg.name, bytes, f.num)?) {
        // An empty string reads as "" whether it is written or left out.
        (Kind::Str, Card::One | Card::Ptr, None) => Ok(Some(Cow::Borrowed(""))),
        (Kind::Str, Card::One | Card::Ptr, Some(Value::Len(b))) => {
            Ok(Some(String::from_utf8_lossy(b)))
        }
        (Kind::Bool | Kind::I32 | Kind::I64, Card::Ptr, None) => Ok(Some(Cow::Borrowed(""))),
        (Kind::Bool | Kind::I32 | Kind::I64, card @ (Card::One | Card::Ptr), v) => {
            let x = match v {
                None => 0,
                Some(Value::Varint(x)) => x,
                Some(_) => return Err(wire()),
            };
            let zero = if f.kind == Kind::I32 {
                x as i32 == 0
            } else {
                x == 0
            };
            if card == Card::One && zero && f.omit != schema::Omit::Never {
                return Ok(Some(Cow::Borrowed("")));
            }
            Ok(Some(match f.kind {
                Kind::Bool => Cow::Borrowed(if x != 0 { "true" } else { "false" }),
                Kind::I32 => Cow::Owned((x as i32).to_string()),
                _ => Cow::Owned((x as i64).to_string()),
            }))
        }
        _ => {
            let mut out = Vec::new();
            json::write_one_field(&mut out, msg, f, bytes)?;
            // `"name":` then the value.
            let Some(value) = out.get(f.json.len() + 3..) else {
                return Ok(Some(Cow::Borrowed("")));
            };
            let raw: &serde_json::value::RawValue = serde_json::from_slice(value)
                .map_err(|e| format!("{}.{}: {e}", msg.name, f.json))?;
            Ok(crate::model::field_path::scalar_text(raw).map(Cow::Owned))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
