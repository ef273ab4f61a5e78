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

fn table(
    def: &ResourceDef,
    v: MetaVersion,
    metadata: Value,
    rows: Vec<Value>,
    with_columns: bool,
) -> Value {
    let mut t = json!({
        "kind": "Table",
        "apiVersion": v.api_version(),
        "metadata": metadata,
        "rows": rows,
    });
    if with_columns {
        t["columnDefinitions"] = Value::Array(column_definitions(def));
    }
    t
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
) -> Result<Bytes, ApiError> {
    let mut meta = json!({"resourceVersion": list.resource_version.to_string()});
    if let Some(c) = &list.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(n) = list.remaining_item_count {
        meta["remainingItemCount"] = json!(n);
    }
    let now = SystemTime::now();
    let out = match format {
        Format::Table(v) => {
            let rows = list
                .items
                .iter()
                .map(|o| parse(o.json()).map(|obj| row(def, &obj, include, v, now)))
                .collect::<Result<Vec<_>, _>>()?;
            table(def, v, meta, rows, true)
        }
        Format::Metadata(v) => {
            let items = list
                .items
                .iter()
                .map(|o| parse(o.json()).map(|obj| partial_metadata(&obj, v)))
                .collect::<Result<Vec<_>, _>>()?;
            json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": v.api_version(),
                "metadata": meta,
                "items": items,
            })
        }
        Format::Json | Format::AggregatedDiscovery | Format::Protobuf => {
            unreachable!("negotiation offers only Table and Metadata conversions for a list")
        }
    };
    Ok(Bytes::from(out.to_string()))
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
    let obj = parse(json)?;
    let out = match format {
        Format::Table(v) => {
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null);
            let r = row(def, &obj, include, v, SystemTime::now());
            table(def, v, json!({"resourceVersion": rv}), vec![r], true)
        }
        Format::Metadata(v) => partial_metadata(&obj, v),
        Format::Json | Format::AggregatedDiscovery | Format::Protobuf => {
            return Ok(Bytes::copy_from_slice(json));
        }
    };
    Ok(Bytes::from(out.to_string()))
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
        matches!(format, Format::Table(_) | Format::Metadata(_)).then(|| WatchConverter {
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
        let key = (self.format, self.include);
        if let Some(body) = MEMO.get(ev.json(), key) {
            return Frame::new(ev.kind(), body);
        }
        let frame = self.convert(ev);
        MEMO.put(ev.json(), key, frame.body().clone());
        frame
    }

    fn convert(&mut self, ev: &WatchEvent) -> Frame {
        let obj = match serde_json::from_slice::<Value>(ev.json()) {
            Ok(v) => v,
            // Never expected (stored objects are valid JSON); the event goes out unconverted
            // rather than being lost.
            Err(_) => return ev.frame(),
        };
        let out = match self.format {
            Format::Table(v) if ev.kind() == EventType::Bookmark => {
                table(&self.def, v, obj["metadata"].clone(), Vec::new(), false)
            }
            Format::Table(v) => {
                let r = row(&self.def, &obj, self.include, v, SystemTime::now());
                let rv = obj.pointer("/metadata/resourceVersion").cloned();
                let t = table(
                    &self.def,
                    v,
                    json!({"resourceVersion": rv}),
                    vec![r],
                    !self.columns_sent,
                );
                self.columns_sent = true;
                t
            }
            Format::Metadata(v) => partial_metadata(&obj, v),
            Format::Json | Format::AggregatedDiscovery | Format::Protobuf => return ev.frame(),
        };
        Frame::new(ev.kind(), Bytes::from(out.to_string()))
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
