//! Conversions a client can ask for instead of the object itself (see `negotiate.rs`): a
//! `meta.k8s.io` Table built from the definition's printer columns, and `PartialObjectMetadata`.
//!
//! These run on kubectl's and metadata clients' requests, from the object's JSON DOM. A watch
//! event is converted once per format and shared by every watcher asking for that format (the
//! [`Memo`]); only a Table watch's first event, which carries the column definitions, is made for
//! its own watcher.
//!
//! # Lock order
//! The memo's mutex is a leaf: held for a lookup or an insert, never across a conversion or an
//! await.

use std::collections::{HashMap, VecDeque};
use std::sync::LazyLock;
use std::time::SystemTime;

use parking_lot::Mutex;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::cache::{Frame, ObjectList, WatchEvent};
use crate::model::{EventType, ResourceDef};
use crate::server::go_json;
use crate::server::negotiate::{Format, MetaVersion};
use crate::server::status::ApiError;

/// What a Table row's `object` holds (`includeObject`); upstream's default is `Metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum IncludeObject {
    /// No object.
    None,
    /// The object's `PartialObjectMetadata`.
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Reads `includeObject` from a query string.
    ///
    /// # Errors
    /// 400 for a value other than None, Metadata or Object (upstream's message).
    pub fn from_query(query: Option<&str>) -> Result<IncludeObject, ApiError> {
        let mut out = IncludeObject::default();
        for (k, v) in crate::server::params::query_pairs(query) {
            if k == "includeObject" {
                out = match &*v {
                    "None" => IncludeObject::None,
                    "Metadata" | "" => IncludeObject::Metadata,
                    "Object" => IncludeObject::Object,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "includeObject: Unsupported value: \"{other}\": supported values: \"Metadata\", \"None\", \"Object\""
                        )));
                    }
                };
            }
        }
        Ok(out)
    }
}

/// `PartialObjectMetadata` of an object: its kind and apiVersion (the metadata's), and its
/// metadata (managed fields included, as upstream keeps them).
pub(crate) fn partial_metadata(obj: &Value, v: MetaVersion) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": v.api_version(),
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| Value::Object(Map::new())),
    })
}

/// `metav1.ObjectMeta`'s documentation of `name`: upstream's description of every NAME column.
const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// Whether the Table starts with the implicit NAME column: unless the definition declares its own
/// (a column `Name` of format `name`, as the StorageClass printer's NAME with `(default)`, or an
/// event's NAME among the wide columns).
fn implicit_name(def: &ResourceDef) -> bool {
    !def.columns
        .iter()
        .any(|c| c.format == "name" && c.name == "Name")
}

/// The Table's column definitions: NAME (unless declared), then the definition's columns.
fn column_definitions(def: &ResourceDef) -> Vec<Value> {
    let mut cols = Vec::with_capacity(def.columns.len() + 1);
    if implicit_name(def) {
        cols.push(json!({
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": NAME_DOC,
            "priority": 0,
        }));
    }
    cols.extend(def.columns.iter().map(|c| c.definition()));
    cols
}

fn row(
    def: &ResourceDef,
    obj: &Value,
    include: IncludeObject,
    v: MetaVersion,
    now: SystemTime,
) -> Value {
    let mut cells = Vec::with_capacity(def.columns.len() + 1);
    if implicit_name(def) {
        cells.push(
            obj.pointer("/metadata/name")
                .cloned()
                .unwrap_or(Value::Null),
        );
    }
    cells.extend(def.columns.iter().map(|c| c.cell(obj, now)));
    let mut r = json!({ "cells": cells });
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => r["object"] = partial_metadata(obj, v),
        IncludeObject::Object => r["object"] = obj.clone(),
    }
    r
}

/// A Table as encoding/json writes `metav1.Table`: kind, apiVersion, metadata, columnDefinitions
/// (`null` when left out, as on every watch event after the first), rows (each `cells`, then
/// `conditions` when set, then `object`: the row's PartialObjectMetadata, its whole object, or
/// nothing, as `includeObject` asks). `rows` pairs each row (its cells, from [`row`]) with its
/// object's JSON.
fn write_table(
    out: &mut Vec<u8>,
    def: &ResourceDef,
    v: MetaVersion,
    list_meta: &[u8],
    rows: &[(Value, &[u8])],
    include: IncludeObject,
    with_columns: bool,
) -> Result<(), ApiError> {
    out.extend_from_slice(br#"{"kind":"Table","apiVersion":"#);
    go_json::string(out, v.api_version());
    out.extend_from_slice(br#","metadata":"#);
    out.extend_from_slice(list_meta);
    out.extend_from_slice(br#","columnDefinitions":"#);
    if with_columns {
        out.push(b'[');
        for (i, c) in column_definitions(def).iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            go_json::fields(
                out,
                c,
                &["name", "type", "format", "description", "priority"],
            );
        }
        out.push(b']');
    } else {
        out.extend_from_slice(b"null");
    }
    out.extend_from_slice(br#","rows":["#);
    for (i, (r, obj)) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"cells":"#);
        go_json::value(out, r.get("cells").unwrap_or(&Value::Null));
        if let Some(Value::Array(c)) = r.get("conditions")
            && !c.is_empty()
        {
            out.extend_from_slice(br#","conditions":["#);
            for (j, cond) in c.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                go_json::fields(out, cond, &["type", "status", "reason", "message"]);
            }
            out.push(b']');
        }
        match include {
            IncludeObject::None => {}
            IncludeObject::Metadata => {
                out.extend_from_slice(br#","object":"#);
                write_partial(out, v, &meta_json(def, obj)?);
            }
            IncludeObject::Object => {
                out.extend_from_slice(br#","object":"#);
                out.extend_from_slice(obj);
            }
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    Ok(())
}

/// `metav1.ListMeta` as encoding/json writes it: resourceVersion, then continue and
/// remainingItemCount when set.
fn list_meta_json(rv: &str, cont: Option<&str>, remaining: Option<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    out.extend_from_slice(br#"{"resourceVersion":"#);
    go_json::string(&mut out, rv);
    if let Some(c) = cont.filter(|c| !c.is_empty()) {
        out.extend_from_slice(br#","continue":"#);
        go_json::string(&mut out, c);
    }
    if let Some(n) = remaining {
        out.extend_from_slice(format!(r#","remainingItemCount":{n}"#).as_bytes());
    }
    out.push(b'}');
    out
}

/// `PartialObjectMetadata` in JSON around an `ObjectMeta`'s JSON.
fn write_partial(out: &mut Vec<u8>, v: MetaVersion, meta: &[u8]) {
    out.extend_from_slice(br#"{"kind":"PartialObjectMetadata","apiVersion":"#);
    go_json::string(out, v.api_version());
    out.extend_from_slice(br#","metadata":"#);
    out.extend_from_slice(meta);
    out.push(b'}');
}

/// An object's `metadata` as encoding/json writes `metav1.ObjectMeta`. A built-in's JSON is made
/// from its protobuf by the same rules, so its `metadata` member is taken as it is; a custom
/// resource's (a map, its keys sorted) goes through the `ObjectMeta` message.
fn meta_json(def: &ResourceDef, obj: &[u8]) -> Result<Vec<u8>, ApiError> {
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        metadata: Option<&'a serde_json::value::RawValue>,
    }
    let top: Top<'_> = serde_json::from_slice(obj).map_err(unreadable)?;
    let raw = top.metadata.map_or("{}", |m| m.get());
    if def.has_protobuf() {
        return Ok(raw.as_bytes().to_vec());
    }
    let meta = meta_message(raw)?;
    let mut out = Vec::with_capacity(raw.len());
    crate::model::protobuf::partial::meta_json(&mut out, &meta).map_err(unreadable)?;
    Ok(out)
}

/// The `ObjectMeta` message of a JSON `metadata`.
fn meta_message(raw: &str) -> Result<Vec<u8>, ApiError> {
    let map: Map<String, Value> = serde_json::from_str(raw).map_err(unreadable)?;
    crate::model::protobuf::partial::encode_meta(&map).map_err(unreadable)
}

/// An object's `ObjectMeta` message: from its protobuf envelope (`envelope`, made only for
/// built-ins), else encoded from its JSON's `metadata`.
fn meta_protobuf(
    def: &ResourceDef,
    json: impl FnOnce() -> Bytes,
    envelope: impl FnOnce() -> Result<Bytes, crate::model::EncodeError>,
) -> Result<Vec<u8>, ApiError> {
    if def.has_protobuf() {
        let env = envelope().map_err(unreadable)?;
        return crate::model::protobuf::partial::envelope_meta(&env)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| unreadable("an object's protobuf has no metadata"));
    }
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        metadata: Option<&'a serde_json::value::RawValue>,
    }
    let json = json();
    let top: Top<'_> = serde_json::from_slice(&json).map_err(unreadable)?;
    meta_message(top.metadata.map_or("{}", |m| m.get()))
}

fn unreadable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        500,
        "InternalError",
        format!("a stored object cannot be converted: {e}"),
    )
}

fn parse(json: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(json).map_err(|e| {
        ApiError::new(
            500,
            "InternalError",
            format!("a stored object is not valid JSON: {e}"),
        )
    })
}

/// A LIST in a converted format (Table or PartialObjectMetadataList).
///
/// # Errors
/// 500 if a stored object cannot be read back (never expected: objects are validated on decode).
pub(crate) fn list(
    def: &ResourceDef,
    list: &ObjectList,
    format: Format,
    include: IncludeObject,
) -> Result<Vec<Bytes>, ApiError> {
    let rv = list.resource_version.to_string();
    let meta = list_meta_json(
        &rv,
        list.continue_token.as_deref(),
        list.remaining_item_count,
    );
    let now = SystemTime::now();
    let mut out = Vec::with_capacity(256 * (list.items.len() + 1));
    match format {
        Format::Table(v) => {
            let rows = list
                .items
                .iter()
                .map(|o| {
                    parse(o.json()).map(|obj| {
                        (
                            row(def, &obj, IncludeObject::None, v, now),
                            o.json().as_ref(),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            write_table(&mut out, def, v, &meta, &rows, include, true)?;
        }
        Format::Metadata(v) => {
            out.extend_from_slice(br#"{"kind":"PartialObjectMetadataList","apiVersion":"#);
            go_json::string(&mut out, v.api_version());
            out.extend_from_slice(br#","metadata":"#);
            out.extend_from_slice(&meta);
            // Upstream appends to a nil slice: no items is `null`.
            if list.items.is_empty() {
                out.extend_from_slice(br#","items":null}"#);
            } else {
                out.extend_from_slice(br#","items":["#);
                for (i, o) in list.items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_partial(&mut out, v, &meta_json(def, o.json())?);
                }
                out.extend_from_slice(b"]}");
            }
        }
        Format::MetadataProtobuf => {
            use crate::model::protobuf::{self as pb, partial};
            let items = list
                .items
                .iter()
                .map(|o| {
                    meta_protobuf(def, || o.json().clone(), || o.protobuf_wire().cloned())
                        .map(|m| partial::partial_message(&m))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let remaining = list
                .remaining_item_count
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
            let mut parts = Vec::with_capacity(items.len() * 2 + 2);
            parts.push(Bytes::from(pb::list_head(
                partial::META_V1,
                "PartialObjectMetadataList",
                &rv,
                list.continue_token.as_deref().unwrap_or(""),
                remaining,
                items.iter().map(Vec::len),
            )));
            for i in items {
                parts.push(Bytes::from(pb::item_head(i.len())));
                parts.push(Bytes::from(i));
            }
            parts.push(Bytes::from_static(pb::ENVELOPE_TAIL));
            return Ok(parts);
        }
        Format::Json | Format::AggregatedDiscovery | Format::Protobuf => {
            unreachable!("negotiation offers only Table and Metadata conversions for a list")
        }
    }
    Ok(vec![Bytes::from(out)])
}

/// One object (a GET) in a converted format: a one-row Table, or its PartialObjectMetadata.
///
/// # Errors
/// 500 if the stored object cannot be read back.
pub(crate) fn object(
    def: &ResourceDef,
    json: &[u8],
    format: Format,
    include: IncludeObject,
) -> Result<Bytes, ApiError> {
    let mut out = Vec::with_capacity(json.len() + 256);
    match format {
        Format::Table(v) => {
            let obj = parse(json)?;
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let r = row(def, &obj, IncludeObject::None, v, SystemTime::now());
            let meta = list_meta_json(rv, None, None);
            write_table(&mut out, def, v, &meta, &[(r, json)], include, true)?;
        }
        Format::Metadata(v) => write_partial(&mut out, v, &meta_json(def, json)?),
        Format::Json
        | Format::AggregatedDiscovery
        | Format::Protobuf
        | Format::MetadataProtobuf => {
            return Ok(Bytes::copy_from_slice(json));
        }
    }
    Ok(Bytes::from(out))
}

/// One object's `PartialObjectMetadata` in protobuf (a GET by client-go's metadata client).
///
/// # Errors
/// 500 if the stored object cannot be converted.
pub(crate) fn object_metadata_protobuf(
    def: &ResourceDef,
    obj: &crate::model::Object,
) -> Result<Bytes, ApiError> {
    let meta = meta_protobuf(def, || obj.json().clone(), || obj.protobuf_wire().cloned())?;
    Ok(Bytes::from(
        crate::model::protobuf::partial::partial_envelope(&meta),
    ))
}

/// Converts a watch's events for one watcher: each event's object becomes a one-row Table (column
/// definitions on the first only, as upstream's `watchEmbeddedEncoder` sends them) or its
/// PartialObjectMetadata. A bookmark keeps its resourceVersion and annotations.
pub(crate) struct WatchConverter {
    def: ResourceDef,
    format: Format,
    include: IncludeObject,
    columns_sent: bool,
}

impl WatchConverter {
    /// A converter for a watch answered in `format`; `None` for JSON (no conversion).
    pub fn new(
        def: &ResourceDef,
        format: Format,
        include: IncludeObject,
    ) -> Option<WatchConverter> {
        matches!(
            format,
            Format::Table(_) | Format::Metadata(_) | Format::MetadataProtobuf
        )
        .then(|| WatchConverter {
            def: def.clone(),
            format,
            include,
            columns_sent: false,
        })
    }

    /// The event's frame in this watcher's format: converted once per event and format, and
    /// shared (except a Table's first event, which carries this watch's column definitions).
    pub fn frame(&mut self, ev: &WatchEvent) -> Frame {
        let shared = ev.kind() != EventType::Bookmark
            && (self.columns_sent || !matches!(self.format, Format::Table(_)));
        if !shared {
            return self.convert(ev);
        }
        // Keyed by the bytes the conversion reads: a protobuf-stored object's envelope for
        // protobuf metadata (its JSON is never made for that), else its JSON.
        let source = match self.format {
            Format::MetadataProtobuf if self.def.has_protobuf() => match ev.protobuf() {
                Ok(b) => b,
                Err(_) => return self.convert(ev),
            },
            _ => ev.json().clone(),
        };
        let key = (self.format, self.include);
        if let Some(body) = MEMO.get(&source, key) {
            return self.framed(ev, body);
        }
        let frame = self.convert(ev);
        if !frame.body().is_empty() {
            MEMO.put(&source, key, frame.body().clone());
        }
        frame
    }

    /// A converted body as the event's frame in this watch's wire format.
    fn framed(&self, ev: &WatchEvent, body: Bytes) -> Frame {
        match self.format {
            Format::MetadataProtobuf => Frame::protobuf(ev.kind().as_str(), body),
            _ => Frame::new(ev.kind(), body),
        }
    }

    fn convert(&mut self, ev: &WatchEvent) -> Frame {
        if self.format == Format::MetadataProtobuf {
            return match meta_protobuf(&self.def, || ev.json().clone(), || ev.protobuf()) {
                Ok(meta) => self.framed(
                    ev,
                    Bytes::from(crate::model::protobuf::partial::partial_envelope(&meta)),
                ),
                // Never expected (stored objects are validated); the event goes out as its
                // own protobuf rather than being lost.
                Err(_) => ev.protobuf_frame().unwrap_or_else(|_| ev.frame()),
            };
        }
        let obj = match serde_json::from_slice::<Value>(ev.json()) {
            Ok(v) => v,
            // Never expected (stored objects are valid JSON); the event goes out unconverted
            // rather than being lost.
            Err(_) => return ev.frame(),
        };
        let mut out = Vec::with_capacity(ev.json().len() + 256);
        let done = match self.format {
            Format::Table(v) if ev.kind() == EventType::Bookmark => {
                let meta = obj
                    .get("metadata")
                    .map(|m| m.to_string().into_bytes())
                    .unwrap_or_else(|| b"{}".to_vec());
                write_table(&mut out, &self.def, v, &meta, &[], self.include, false)
            }
            Format::Table(v) => {
                let r = row(&self.def, &obj, IncludeObject::None, v, SystemTime::now());
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let meta = list_meta_json(rv, None, None);
                let first = !self.columns_sent;
                self.columns_sent = true;
                write_table(
                    &mut out,
                    &self.def,
                    v,
                    &meta,
                    &[(r, ev.json())],
                    self.include,
                    first,
                )
            }
            Format::Metadata(v) => {
                meta_json(&self.def, ev.json()).map(|m| write_partial(&mut out, v, &m))
            }
            Format::Json
            | Format::AggregatedDiscovery
            | Format::Protobuf
            | Format::MetadataProtobuf => return ev.frame(),
        };
        match done {
            Ok(()) => Frame::new(ev.kind(), Bytes::from(out)),
            Err(_) => ev.frame(),
        }
    }
}

/// How many converted event bodies the memo keeps: enough for every watcher of a burst of events
/// to find the conversion the first one made; each entry also keeps its source bytes alive.
const MEMO_ENTRIES: usize = 1024;

type MemoKey = (usize, usize, Format, IncludeObject);

/// Converted event bodies, keyed by the identity of the event's shared JSON bytes (pointer and
/// length) and the format. The entry holds a clone of those bytes, so the allocation cannot be
/// freed and its address reused while the entry lives: a key never names other bytes.
pub(crate) struct Memo {
    inner: Mutex<MemoInner>,
}

#[derive(Default)]
struct MemoInner {
    map: HashMap<MemoKey, (Bytes, Bytes)>,
    order: VecDeque<MemoKey>,
}

static MEMO: LazyLock<Memo> = LazyLock::new(|| Memo {
    inner: Mutex::new(MemoInner::default()),
});

impl Memo {
    fn key(source: &Bytes, k: (Format, IncludeObject)) -> MemoKey {
        (source.as_ptr() as usize, source.len(), k.0, k.1)
    }

    fn get(&self, source: &Bytes, k: (Format, IncludeObject)) -> Option<Bytes> {
        let key = Self::key(source, k);
        let inner = self.inner.lock();
        inner
            .map
            .get(&key)
            .filter(|(src, _)| src.as_ptr() == source.as_ptr())
            .map(|(_, body)| body.clone())
    }

    fn put(&self, source: &Bytes, k: (Format, IncludeObject), body: Bytes) {
        let key = Self::key(source, k);
        let mut inner = self.inner.lock();
        if inner.map.insert(key, (source.clone(), body)).is_none() {
            inner.order.push_back(key);
        }
        while inner.order.len() > MEMO_ENTRIES {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_shares_one_conversion_and_forgets_the_oldest() {
        let k = (Format::Metadata(MetaVersion::V1), IncludeObject::Metadata);
        // Heap bytes: equal static literals may share one address (and then equal content, so
        // sharing their conversion is right).
        let a = Bytes::from(r#"{"metadata":{"name":"a"}}"#.to_owned());
        let same_text = Bytes::from(r#"{"metadata":{"name":"a"}}"#.to_owned());
        assert!(MEMO.get(&a, k).is_none());
        MEMO.put(&a, k, Bytes::from_static(b"converted"));
        assert_eq!(MEMO.get(&a.clone(), k).unwrap(), "converted");
        // Other bytes (even equal ones) and other formats are other entries.
        assert!(MEMO.get(&same_text, k).is_none());
        assert!(
            MEMO.get(
                &a,
                (Format::Table(MetaVersion::V1), IncludeObject::Metadata)
            )
            .is_none()
        );
        let keep: Vec<Bytes> = (0..MEMO_ENTRIES + 1)
            .map(|i| {
                let b = Bytes::from(format!("{i}"));
                MEMO.put(&b, k, b.clone());
                b
            })
            .collect();
        assert!(MEMO.get(&a, k).is_none(), "the oldest entry is evicted");
        assert!(MEMO.get(&keep[MEMO_ENTRIES], k).is_some());
    }

    #[test]
    fn include_object_values() {
        assert_eq!(
            IncludeObject::from_query(None).unwrap(),
            IncludeObject::Metadata
        );
        assert_eq!(
            IncludeObject::from_query(Some("includeObject=Object")).unwrap(),
            IncludeObject::Object
        );
        assert_eq!(
            IncludeObject::from_query(Some("includeObject=None")).unwrap(),
            IncludeObject::None
        );
        assert_eq!(
            IncludeObject::from_query(Some("includeObject=All"))
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn a_pod_becomes_a_row_with_its_printer_columns() {
        let def = ResourceDef::builtin("pods").unwrap();
        let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"d","resourceVersion":"7","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"nodeName":"n1","containers":[{"name":"a"}]},"status":{"phase":"Running","podIP":"10.0.0.1","containerStatuses":[{"name":"a","ready":true,"restartCount":0,"state":{"running":{}}}]}}"#;
        let t: Value = serde_json::from_slice(
            &object(
                &def,
                pod,
                Format::Table(MetaVersion::V1),
                IncludeObject::Metadata,
            )
            .unwrap(),
        )
        .unwrap();
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            &names[..7],
            ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"]
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "web");
        assert_eq!(cells[1], "1/1");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "0");
        assert_eq!(cells[5], "10.0.0.1");
        assert_eq!(cells[6], "n1");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "web");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
        let m: Value = serde_json::from_slice(
            &object(
                &def,
                pod,
                Format::Metadata(MetaVersion::V1),
                IncludeObject::Metadata,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(m["kind"], "PartialObjectMetadata");
        assert_eq!(m["apiVersion"], "meta.k8s.io/v1");
        assert!(m.get("spec").is_none());
    }
}
