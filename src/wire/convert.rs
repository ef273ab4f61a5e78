//! Conversions a client can ask for instead of the object itself (see `negotiate.rs`): a
//! `meta.k8s.io` Table built from the definition's printer columns, and `PartialObjectMetadata`.
//!
//! These run on kubectl's and metadata clients' requests, from the object's JSON DOM. A watch
//! event is converted once per format and shared by every watcher asking for that format (the
//! `Memo`); only a Table watch's first event, which carries the column definitions, is made for
//! its own watcher.
//!
//! A watch of another served version of a CRD than its cache's ([`ResourceDef::other_versions`])
//! is a variant too: its events' JSON at that version (`version.rs`), and its Tables with that
//! version's columns, are made once per event and version. A bookmark is made per watcher, as a
//! Table's are.
//!
//! # Lock order
//! The memo's mutex is a leaf: held for a lookup or an insert, never across a conversion or an
//! await.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::SystemTime;

use parking_lot::Mutex;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::model::{EncodeError, EventType, Object, ResourceDef};
use crate::wire::format::{Fields, Format, MetaVersion};
use crate::wire::status::Status;

/// A conversion that failed: the `Status` of the 500 it is answered with (boxed: failures are
/// never expected, results stay small).
pub(crate) type Failed = Box<Status>;
use crate::wire::encoder::{Encoder, EncoderId, Event, JsonFrames, ProtobufFrames, event_envelope};
use crate::wire::version::json_at_version;
use crate::wire::{Frame, ObjectList, go_json, managed_fields, partial};

/// What a Table row's `object` holds (`includeObject`); upstream's default is `Metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IncludeObject {
    /// No object.
    None,
    /// The object's `PartialObjectMetadata`.
    #[default]
    Metadata,
    /// The whole object.
    Object,
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
    cols.extend(
        def.columns
            .iter()
            .filter(|c| !c.hidden)
            .map(|c| c.definition()),
    );
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
            // A bookmark's object has no name: Go's printers write the empty string.
            obj.pointer("/metadata/name")
                .cloned()
                .unwrap_or_else(|| Value::String(String::new())),
        );
    }
    cells.extend(def.columns.iter().map(|c| c.cell(obj, now)));
    let mut r = json!({ "cells": cells });
    // printPod marks a finished pod's row Completed (kubectl hides those rows unless -a).
    if def.group.is_empty() && def.kind == "Pod" {
        let done = match obj.pointer("/status/phase").and_then(Value::as_str) {
            Some("Succeeded") => Some(("Succeeded", "The pod has completed successfully.")),
            Some("Failed") => Some(("Failed", "The pod failed.")),
            _ => None,
        };
        if let Some((reason, message)) = done {
            r["conditions"] = json!([{
                "type": "Completed", "status": "True", "reason": reason, "message": message,
            }]);
        }
    }
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
/// null, as `includeObject` asks). `rows` pairs each row (its cells, from [`row`]) with its
/// object's JSON.
fn write_table(
    out: &mut Vec<u8>,
    def: &ResourceDef,
    v: MetaVersion,
    list_meta: &[u8],
    rows: &[(Value, &[u8])],
    include: IncludeObject,
    with_columns: bool,
) -> Result<(), Failed> {
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
    // Upstream's default table convertor (resources without a printer: Name and Created At)
    // appends rows to a nil slice, so it writes an empty Table's rows as null; the printers and
    // CRDs' convertor start from an empty slice.
    if rows.is_empty() && def.has_default_table() {
        out.extend_from_slice(br#","rows":null}"#);
        return Ok(());
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
            // encoding/json writes a `TableRow`'s empty `RawExtension` as null: `omitempty`
            // leaves no struct out.
            IncludeObject::None => out.extend_from_slice(br#","object":null"#),
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

/// Whether a bookmark's object carries `k8s.io/initial-events-end: "true"`.
fn is_initial_events_end(obj: &Value) -> bool {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(crate::model::INITIAL_EVENTS_END))
        .and_then(Value::as_str)
        == Some("true")
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
fn meta_json(def: &ResourceDef, obj: &[u8]) -> Result<Vec<u8>, Failed> {
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
    partial::meta_json(&mut out, &meta).map_err(unreadable)?;
    Ok(out)
}

/// The `ObjectMeta` message of a JSON `metadata`.
fn meta_message(raw: &str) -> Result<Vec<u8>, Failed> {
    let map: Map<String, Value> = serde_json::from_str(raw).map_err(unreadable)?;
    partial::encode_meta(&map).map_err(unreadable)
}

/// An object's `ObjectMeta` message: from its protobuf envelope (`envelope`, made only for
/// built-ins), else encoded from its JSON's `metadata`.
fn meta_protobuf(
    def: &ResourceDef,
    json: impl FnOnce() -> Bytes,
    envelope: impl FnOnce() -> Result<Bytes, EncodeError>,
) -> Result<Vec<u8>, Failed> {
    if def.has_protobuf() {
        let env = envelope().map_err(unreadable)?;
        return partial::envelope_meta(&env)
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

fn unreadable(e: impl std::fmt::Display) -> Failed {
    Box::new(Status::new(
        500,
        "InternalError",
        format!("a stored object cannot be converted: {e}"),
    ))
}

fn parse(json: &[u8]) -> Result<Value, Failed> {
    serde_json::from_slice(json).map_err(|e| {
        Box::new(Status::new(
            500,
            "InternalError",
            format!("a stored object is not valid JSON: {e}"),
        ))
    })
}

/// A LIST in a converted format (Table or PartialObjectMetadataList).
///
/// # Errors
/// 500 if a stored object cannot be read back (never expected: objects are validated on decode).
pub fn list(
    def: &ResourceDef,
    list: &ObjectList,
    format: Format,
    include: IncludeObject,
    fields: Fields,
) -> Result<Vec<Bytes>, Failed> {
    let drop = fields == Fields::WithoutManaged;
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
            // A row's whole object goes out at the requested version.
            let jsons: Vec<Bytes> = list
                .items
                .iter()
                .map(|o| match include {
                    IncludeObject::Object => at_def_version(def, o.json()),
                    _ => o.json().clone(),
                })
                .collect();
            let mut parsed = jsons
                .iter()
                .map(|j| parse(j).map(|obj| (obj, j.as_ref())))
                .collect::<Result<Vec<_>, _>>()?;
            // The FlowSchema printer lists them in matching order (`FlowSchemaSequence`:
            // matchingPrecedence, then name); every other printer keeps the list's order.
            if def.group == "flowcontrol.apiserver.k8s.io" && def.kind == "FlowSchema" {
                parsed.sort_by_cached_key(|(o, _)| {
                    let precedence = o.pointer("/spec/matchingPrecedence");
                    let name = o.pointer("/metadata/name").and_then(Value::as_str);
                    (
                        precedence.and_then(Value::as_i64).unwrap_or(0),
                        name.unwrap_or_default().to_owned(),
                    )
                });
            }
            let rows: Vec<(Value, &[u8])> = parsed
                .iter()
                .map(|(obj, json)| (row(def, obj, IncludeObject::None, v, now), *json))
                .collect();
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
                    let meta = meta_json(def, o.json())?;
                    if drop {
                        let mut item = Vec::with_capacity(meta.len() + 64);
                        write_partial(&mut item, v, &meta);
                        out.extend_from_slice(&json_without_managed(&Bytes::from(item)));
                    } else {
                        write_partial(&mut out, v, &meta);
                    }
                }
                out.extend_from_slice(b"]}");
            }
        }
        Format::MetadataProtobuf => {
            use crate::wire::protobuf as pb;
            let items = list
                .items
                .iter()
                .map(|o| {
                    meta_protobuf(def, || o.json().clone(), || o.protobuf_wire().cloned()).map(
                        |m| {
                            let m = if drop { meta_without_managed(m) } else { m };
                            partial::partial_message(&m)
                        },
                    )
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
                // Upstream's metadata lists leave out the shard echo (only typed lists carry it).
                None,
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
pub fn object(
    def: &ResourceDef,
    json: &[u8],
    format: Format,
    include: IncludeObject,
    fields: Fields,
) -> Result<Bytes, Failed> {
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
        Format::Metadata(v) => {
            write_partial(&mut out, v, &meta_json(def, json)?);
            if fields == Fields::WithoutManaged {
                return Ok(json_without_managed(&Bytes::from(out)));
            }
        }
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
pub fn object_metadata_protobuf(
    def: &ResourceDef,
    obj: &Object,
    fields: Fields,
) -> Result<Bytes, Failed> {
    let meta = meta_protobuf(def, || obj.json().clone(), || obj.protobuf_wire().cloned())?;
    let meta = match fields {
        Fields::All => meta,
        Fields::WithoutManaged => meta_without_managed(meta),
    };
    Ok(Bytes::from(partial::partial_envelope(&meta)))
}

/// Converts a watch's events for one watcher: each event's object becomes a one-row Table (column
/// definitions on the first only, as upstream's `watchEmbeddedEncoder` sends them), its
/// PartialObjectMetadata, or itself without managed fields (JSON or protobuf). A bookmark keeps
/// its resourceVersion and annotations.
pub struct WatchConverter {
    /// The format and variant: the key of its conversions in an event's memo.
    id: EncoderId,
    def: ResourceDef,
    format: Format,
    include: IncludeObject,
    fields: Fields,
    /// The apiVersion objects go out at when it is not the cache's (another served version of a
    /// CRD): part of the memo's key where the body depends on it.
    version: Option<Arc<str>>,
    columns_sent: bool,
    /// Counts the conversions made for this watch's (resource, format, fields): a conversion
    /// shared with other watchers is counted once, by whichever made it.
    made: MadeCounter,
}

/// Counts the conversions one watch made (a server's metric): called once per conversion the
/// watch made itself, not for those it shared with other watchers.
pub type MadeCounter = Box<dyn Fn() + Send + Sync>;

impl WatchConverter {
    /// A converter for a watch answered in `format` with `fields`, of `def` (the definition at
    /// the requested version); `other_version` when that is not the version the cache holds its
    /// objects at. `None` when the events go out as they are (JSON or protobuf with all their
    /// fields, at the cache's version).
    pub fn new(
        def: &ResourceDef,
        format: Format,
        include: IncludeObject,
        fields: Fields,
        other_version: bool,
        made: impl FnOnce() -> MadeCounter,
    ) -> Option<WatchConverter> {
        let converts = match format {
            Format::Table(_) | Format::Metadata(_) | Format::MetadataProtobuf => true,
            Format::Json | Format::Protobuf => fields == Fields::WithoutManaged || other_version,
            Format::AggregatedDiscovery => false,
        };
        if !converts {
            return None;
        }
        let version: Option<Arc<str>> = other_version.then(|| Arc::from(def.api_version()));
        // Only JSON and a Table carry the object's apiVersion (or the version's columns).
        let id_version = match format {
            Format::Json | Format::Table(_) => version.as_deref(),
            _ => None,
        };
        let id = EncoderId::with(
            "convert",
            format_args!("{format:?}/{include:?}/{fields:?}/{id_version:?}"),
        );
        Some(WatchConverter {
            id,
            def: def.clone(),
            format,
            include,
            fields,
            version,
            columns_sent: false,
            made: made(),
        })
    }

    /// The event's frame in this watcher's format: converted once per event and (format,
    /// fields), and shared (except a Table's first event, which carries this watch's column
    /// definitions). Concurrent watchers asking for the same conversion wait for the one that
    /// makes it.
    ///
    /// # Errors
    /// A protobuf watch of an object stored as JSON that its kind's message cannot hold.
    fn converted(&mut self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        let kind = ev.kind();
        if kind == EventType::Bookmark {
            // A bookmark's object has no managed fields to leave out.
            return match self.format {
                Format::Json if self.version.is_none() => JsonFrames.frame(ev),
                Format::Protobuf => ProtobufFrames.frame(ev),
                _ => Ok(self.convert(ev)),
            };
        }
        if !self.columns_sent && matches!(self.format, Format::Table(_)) {
            return Ok(self.convert(ev));
        }
        if let Some(memo) = ev.memo() {
            return memo.frame(&self.id, kind, || self.shared(ev));
        }
        // Not a change (an initial event): shared by the identity of the bytes the conversion
        // reads, the object's protobuf for protobuf answers of built-ins (a protobuf-stored
        // object's JSON is never made for them), else its JSON.
        let from_protobuf = match self.format {
            Format::Protobuf => true,
            Format::MetadataProtobuf => self.def.has_protobuf(),
            _ => false,
        };
        let source = match (from_protobuf, self.format) {
            (false, _) => ev.json().clone(),
            (true, Format::Protobuf) => event_envelope(ev)?,
            // (Never expected: a built-in's stored object its message cannot hold.) Its metadata
            // is converted for this watcher from its JSON, as before the memo.
            (true, _) => match event_envelope(ev) {
                Ok(b) => b,
                Err(_) => return Ok(self.convert(ev)),
            },
        };
        MEMO.cell(&source, &self.id, kind)
            .get_or_init(|| self.shared(ev))
            .clone()
    }

    /// The event's frame for every watcher of this variant, made once and counted: the event's
    /// own frame when the conversion left its object as it was.
    fn shared(&self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        (self.made)();
        match self.body(ev, false) {
            Some(b) if self.format == Format::Json && same_bytes(&b, ev.json()) => {
                JsonFrames.frame(ev)
            }
            Some(b)
                if self.format == Format::Protobuf
                    && event_envelope(ev).is_ok_and(|env| same_bytes(&b, &env)) =>
            {
                ProtobufFrames.frame(ev)
            }
            Some(b) => Ok(self.framed(ev, b)),
            None => self.unconverted(ev),
        }
    }

    /// A converted body as the event's frame in this watch's wire format.
    fn framed(&self, ev: &dyn Event, body: Bytes) -> Frame {
        match self.format {
            Format::MetadataProtobuf | Format::Protobuf => {
                Frame::protobuf(ev.kind().as_str(), body)
            }
            _ => Frame::new(ev.kind(), body),
        }
    }

    /// The event as it is, when its conversion failed (never expected: stored objects are
    /// validated); it goes out unconverted rather than being lost.
    fn unconverted(&self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        let json = || Frame::new(ev.kind(), ev.json().clone());
        match self.format {
            Format::MetadataProtobuf => Ok(ProtobufFrames.frame(ev).unwrap_or_else(|_| json())),
            Format::Protobuf => ProtobufFrames.frame(ev),
            _ => Ok(json()),
        }
    }

    /// Converts one event for this watcher alone (a Table's first event, a bookmark).
    fn convert(&mut self, ev: &dyn Event) -> Frame {
        // The first event carries the column definitions, a bookmark too (upstream sets
        // `NoHeaders` after whatever it encoded first: an empty WatchList's bookmark).
        let first = !self.columns_sent && matches!(self.format, Format::Table(_));
        self.columns_sent |= first;
        match self.body(ev, first) {
            Some(b) => self.framed(ev, b),
            None => self
                .unconverted(ev)
                .unwrap_or_else(|_| Frame::new(ev.kind(), ev.json().clone())),
        }
    }

    /// The event's object in this watch's format; `None` when it cannot be converted. A Table
    /// carries its column definitions when `first`.
    fn body(&self, ev: &dyn Event, first: bool) -> Option<Bytes> {
        let drop = self.fields == Fields::WithoutManaged;
        match self.format {
            Format::Json => {
                let json = self.at_version(ev.json());
                Some(if drop {
                    json_without_managed(&json)
                } else {
                    json
                })
            }
            Format::Protobuf => {
                let env = event_envelope(ev).ok()?;
                match managed_fields::protobuf_without(&env) {
                    Ok(Some(b)) => Some(Bytes::from(b)),
                    Ok(None) => Some(env),
                    Err(_) => None,
                }
            }
            Format::MetadataProtobuf => {
                let meta =
                    meta_protobuf(&self.def, || ev.json().clone(), || event_envelope(ev)).ok()?;
                let meta = if drop {
                    meta_without_managed(meta)
                } else {
                    meta
                };
                Some(Bytes::from(partial::partial_envelope(&meta)))
            }
            Format::Metadata(v) => {
                let meta = meta_json(&self.def, ev.json()).ok()?;
                let mut out = Vec::with_capacity(meta.len() + 64);
                write_partial(&mut out, v, &meta);
                let out = Bytes::from(out);
                Some(if drop {
                    json_without_managed(&out)
                } else {
                    out
                })
            }
            Format::Table(v) => {
                let obj = serde_json::from_slice::<Value>(ev.json()).ok()?;
                let mut out = Vec::with_capacity(ev.json().len() + 256);
                // A bookmark is converted as any object, as upstream's `asTable` does: one row of
                // the printer's cells for its empty object, whose row object carries the bookmark's
                // metadata. The initial-events-end annotation must reach the client there (a
                // Table's own ListMeta has no annotations: a Go client would drop it), so that
                // row's object is its PartialObjectMetadata even with includeObject=None.
                let include = match self.include {
                    IncludeObject::None
                        if ev.kind() == EventType::Bookmark && is_initial_events_end(&obj) =>
                    {
                        IncludeObject::Metadata
                    }
                    include => include,
                };
                let r = row(&self.def, &obj, IncludeObject::None, v, SystemTime::now());
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let meta = list_meta_json(rv, None, None);
                let json = match include {
                    IncludeObject::Object => self.at_version(ev.json()),
                    _ => ev.json().clone(),
                };
                write_table(
                    &mut out,
                    &self.def,
                    v,
                    &meta,
                    &[(r, &json[..])],
                    include,
                    first,
                )
                .ok()?;
                Some(Bytes::from(out))
            }
            Format::AggregatedDiscovery => None,
        }
    }
}

impl Encoder for WatchConverter {
    fn id(&self) -> &EncoderId {
        &self.id
    }

    fn content_type(&self) -> &'static str {
        match self.format {
            Format::Protobuf | Format::MetadataProtobuf => ProtobufFrames.content_type(),
            _ => JsonFrames.content_type(),
        }
    }

    fn frame(&mut self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        self.converted(ev)
    }

    fn error_frame(&self, status: &Status) -> Frame {
        match self.format {
            Format::Protobuf | Format::MetadataProtobuf => ProtobufFrames.error_frame(status),
            _ => JsonFrames.error_frame(status),
        }
    }
}

impl WatchConverter {
    /// An object's JSON at the version this watch asked for.
    fn at_version(&self, json: &Bytes) -> Bytes {
        match &self.version {
            Some(v) => json_at_version(json, v),
            None => json.clone(),
        }
    }
}

/// An object's JSON at `def`'s version: a custom resource's read at another served version of
/// its CRD has its apiVersion changed; the same bytes otherwise.
pub fn at_def_version(def: &ResourceDef, json: &Bytes) -> Bytes {
    if def.rewrite_api_version {
        json_at_version(json, &def.api_version())
    } else {
        json.clone()
    }
}

fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

/// An object's JSON without `metadata.managedFields`: the same bytes when it has none (or, never
/// expected, when they cannot be read).
pub fn json_without_managed(json: &Bytes) -> Bytes {
    match managed_fields::json_without(json) {
        Ok(Some(b)) => Bytes::from(b),
        Ok(None) => json.clone(),
        Err(e) => {
            tracing::error!(error = %e, "a stored object's JSON cannot be read");
            json.clone()
        }
    }
}

/// An `ObjectMeta` message without `managedFields`.
fn meta_without_managed(meta: Vec<u8>) -> Vec<u8> {
    match managed_fields::meta_message_without(&meta) {
        Ok(Some(m)) => m,
        _ => meta,
    }
}

/// An object's envelope without `metadata.managedFields`: the object's own shared bytes when
/// it has none.
///
/// # Errors
/// As [`Object::protobuf_wire`](Object::protobuf_wire).
pub fn protobuf_without_managed(obj: &Object) -> Result<Bytes, EncodeError> {
    let env = obj.protobuf_wire()?;
    match managed_fields::protobuf_without(env) {
        Ok(Some(b)) => Ok(Bytes::from(b)),
        Ok(None) => Ok(env.clone()),
        Err(reason) => Err(EncodeError {
            key: obj.key().to_owned(),
            reason,
        }),
    }
}

/// A list item's pieces without `metadata.managedFields` (for [`list_parts_with`]): `{` and the
/// members after `kind` and `apiVersion` for a built-in (which come before `metadata`, so the
/// item starts at the same offset), the whole object for a custom resource.
///
/// [`list_parts_with`]: crate::wire::list_parts_with
pub fn json_item_without_managed(o: &Object, parts: &mut Vec<Bytes>) {
    let json = json_without_managed(o.json());
    match o.list_item_tail() {
        Some(tail) => {
            let at = o.json().len() - tail.len();
            parts.push(Bytes::from_static(b"{"));
            parts.push(json.slice(at.min(json.len())..));
        }
        None => parts.push(json),
    }
}

/// A list item's message without `metadata.managedFields` (for [`list_parts_protobuf_with`]).
///
/// [`list_parts_protobuf_with`]: crate::wire::list_parts_protobuf_with
///
/// # Errors
/// As [`Object::protobuf_item`](Object::protobuf_item).
pub fn protobuf_item_without_managed(o: &Object) -> Result<Bytes, EncodeError> {
    let raw = o.protobuf_item()?;
    match managed_fields::message_without(&raw) {
        Ok(Some(b)) => Ok(Bytes::from(b)),
        Ok(None) => Ok(raw),
        Err(reason) => Err(EncodeError {
            key: o.key().to_owned(),
            reason,
        }),
    }
}

/// How many converted event bodies the memo keeps: enough for every watcher of a burst of events
/// to find the conversion the first one made; each entry also keeps its source bytes alive.
const MEMO_ENTRIES: usize = 1024;

type MemoKey = (usize, usize, EncoderId, EventType);

/// One conversion: made once, by the first watcher to ask.
type MemoCell = Arc<OnceLock<Result<Frame, EncodeError>>>;

/// The conversions of events that are not changes (initial events, which have no memo of their
/// own), keyed by the identity of the object's shared bytes (pointer and length), the
/// converter's id and the event's type (a frame carries it). The entry holds a clone of those bytes, so the allocation cannot be freed and
/// its address reused while the entry lives: a key never names other bytes.
pub(crate) struct Memo {
    inner: Mutex<MemoInner>,
}

#[derive(Default)]
struct MemoInner {
    map: HashMap<MemoKey, (Bytes, MemoCell)>,
    order: VecDeque<MemoKey>,
}

static MEMO: LazyLock<Memo> = LazyLock::new(|| Memo {
    inner: Mutex::new(MemoInner::default()),
});

impl Memo {
    /// The cell of this conversion, new or shared. The conversion itself is made outside the
    /// memo's lock, in the cell.
    fn cell(&self, source: &Bytes, id: &EncoderId, kind: EventType) -> MemoCell {
        let key = (source.as_ptr() as usize, source.len(), id.clone(), kind);
        let mut inner = self.inner.lock();
        if let Some((src, cell)) = inner.map.get(&key)
            && src.as_ptr() == source.as_ptr()
        {
            return Arc::clone(cell);
        }
        let cell = MemoCell::default();
        if inner
            .map
            .insert(key.clone(), (source.clone(), Arc::clone(&cell)))
            .is_none()
        {
            inner.order.push_back(key);
        }
        while inner.order.len() > MEMO_ENTRIES {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
            }
        }
        cell
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_shares_one_conversion_and_forgets_the_oldest() {
        let id = |v: &str| EncoderId::with("convert", format_args!("{v}"));
        let k = id("metadata");
        let get = |b: &Bytes, k: &EncoderId| {
            MEMO.cell(b, k, EventType::Added)
                .get()
                .cloned()
                .map(|f| f.unwrap().to_bytes())
        };
        let put = |b: &Bytes, k: &EncoderId, body: Bytes| {
            let _ = MEMO
                .cell(b, k, EventType::Added)
                .get_or_init(|| Ok(Frame::whole(body)));
        };
        // Heap bytes: equal static literals may share one address (and then equal content, so
        // sharing their conversion is right).
        let a = Bytes::from(r#"{"metadata":{"name":"a"}}"#.to_owned());
        let same_text = Bytes::from(r#"{"metadata":{"name":"a"}}"#.to_owned());
        assert!(get(&a, &k).is_none());
        put(&a, &k, Bytes::from_static(b"converted"));
        assert_eq!(get(&a.clone(), &k).unwrap(), "converted");
        // Other bytes (even equal ones), other encoders and other event types are other entries.
        assert!(get(&same_text, &k).is_none());
        assert!(get(&a, &id("table")).is_none());
        assert!(
            MEMO.cell(&a, &k, EventType::Modified).get().is_none(),
            "a frame carries its type"
        );
        let keep: Vec<Bytes> = (0..MEMO_ENTRIES + 1)
            .map(|i| {
                let b = Bytes::from(format!("{i}"));
                put(&b, &k, b.clone());
                b
            })
            .collect();
        assert!(get(&a, &k).is_none(), "the oldest entry is evicted");
        assert!(get(&keep[MEMO_ENTRIES], &k).is_some());
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
                Fields::All,
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
                Fields::All,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(m["kind"], "PartialObjectMetadata");
        assert_eq!(m["apiVersion"], "meta.k8s.io/v1");
        assert!(m.get("spec").is_none());
    }
}

#[cfg(test)]
mod bookmark_tests {
    use super::*;

    /// A bookmark as the cache's watch stream makes it.
    struct Bookmark(Bytes);

    impl Event for Bookmark {
        fn kind(&self) -> EventType {
            EventType::Bookmark
        }
        fn resource_version(&self) -> u64 {
            0
        }
        fn object(&self) -> Option<&Object> {
            None
        }
        fn json(&self) -> &Bytes {
            &self.0
        }
        fn memo(&self) -> Option<&crate::wire::encoder::EventMemo> {
            None
        }
    }

    /// kube-apiserver 1.35.4's Table watch bookmarks (`tests/data/kube-apiserver-1.35/
    /// table-bookmarks.jsonl`, see its README), byte for byte: one row of the printer's cells
    /// for the bookmark's empty object, the initial-events-end annotation on that row's
    /// PartialObjectMetadata (even with includeObject=None), the Table's own metadata the
    /// resourceVersion only, and column definitions when the bookmark is the watch's first event.
    #[test]
    fn table_bookmarks_are_kube_apiservers() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/kube-apiserver-1.35/table-bookmarks.jsonl"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut cases = 0;
        for line in text.lines() {
            let case: Value = serde_json::from_str(line).unwrap();
            let s = |k: &str| case[k].as_str().unwrap();
            let want = s("frame");
            let def = ResourceDef::builtin(s("resource")).unwrap();
            let v = match s("version") {
                "v1" => MetaVersion::V1,
                _ => MetaVersion::V1beta1,
            };
            let include = match s("include") {
                "Object" => IncludeObject::Object,
                "None" => IncludeObject::None,
                _ => IncludeObject::Metadata,
            };
            let sent: Value = serde_json::from_str(want).unwrap();
            let rv: u64 = sent["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let end = want.contains(crate::model::INITIAL_EVENTS_END);
            let mut conv =
                WatchConverter::new(&def, Format::Table(v), include, Fields::All, false, || {
                    Box::new(|| ())
                })
                .unwrap();
            conv.columns_sent = !case["first"].as_bool().unwrap();
            let ev = Bookmark(crate::wire::bookmark_object(&def, rv, end));
            let got = conv.frame(&ev).unwrap().to_bytes();
            assert_eq!(
                String::from_utf8_lossy(&got).trim_end(),
                want,
                "{}",
                s("case")
            );
            // Column definitions go with the first event only, whatever it is.
            assert!(conv.columns_sent, "{}", s("case"));
            cases += 1;
        }
        assert!(cases >= 5, "{cases} cases");
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    /// An event as the cache's watch stream shares it among watchers (its memo).
    struct Change(EventType, Bytes, crate::wire::encoder::EventMemo);

    impl Event for Change {
        fn kind(&self) -> EventType {
            self.0
        }
        fn resource_version(&self) -> u64 {
            0
        }
        fn object(&self) -> Option<&Object> {
            None
        }
        fn json(&self) -> &Bytes {
            &self.1
        }
        fn memo(&self) -> Option<&crate::wire::encoder::EventMemo> {
            Some(&self.2)
        }
    }

    fn shirts() -> ResourceDef {
        let crd = json!({
            "metadata": {"name": "shirts.stable.example.com"},
            "spec": {"group": "stable.example.com", "scope": "Namespaced",
                     "names": {"plural": "shirts", "kind": "Shirt"},
                     "versions": [
                        {"name": "v1", "served": true, "storage": true},
                        {"name": "v1beta1", "served": true, "storage": false,
                         "additionalPrinterColumns": [
                            {"name": "Color", "type": "string", "jsonPath": ".spec.color"}]}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]}
        });
        crate::model::CrdServing::of(&crd)
            .definition()
            .cloned()
            .unwrap()
    }

    fn text(f: &Frame) -> String {
        String::from_utf8(f.to_bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_version_variant_is_made_once_per_event_and_shared() {
        let def = shirts();
        let beta = def.at_version("v1beta1").unwrap();
        let json = Bytes::from(
            r#"{"apiVersion":"stable.example.com/v1","kind":"Shirt","metadata":{"name":"a","namespace":"d","resourceVersion":"5"},"spec":{"color":"red"}}"#
                .to_owned(),
        );
        let ev = Change(EventType::Added, json, Default::default());
        let made = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let watcher = || {
            WatchConverter::new(
                beta,
                Format::Json,
                IncludeObject::Metadata,
                Fields::All,
                true,
                {
                    let made = made.clone();
                    move || -> MadeCounter {
                        Box::new(move || {
                            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        })
                    }
                },
            )
            .expect("another version is converted")
        };
        let (mut a, mut b) = (watcher(), watcher());
        let (fa, fb) = (a.frame(&ev).unwrap(), b.frame(&ev).unwrap());
        assert_eq!(
            text(&fa),
            "{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"stable.example.com/v1beta1\",\"kind\":\"Shirt\",\"metadata\":{\"name\":\"a\",\"namespace\":\"d\",\"resourceVersion\":\"5\"},\"spec\":{\"color\":\"red\"}}}\n"
        );
        // One body, shared: the same bytes in both watchers' frames.
        assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(fa.parts()[1].as_ptr(), fb.parts()[1].as_ptr());
        // The storage version's watchers take the event's own frame: no converter at all.
        assert!(
            WatchConverter::new(
                &def,
                Format::Json,
                IncludeObject::Metadata,
                Fields::All,
                false,
                || Box::new(|| ())
            )
            .is_none()
        );

        // A Table at v1beta1: that version's columns, its row object at v1beta1.
        let mut t = WatchConverter::new(
            beta,
            Format::Table(MetaVersion::V1),
            IncludeObject::Object,
            Fields::All,
            true,
            || Box::new(|| ()),
        )
        .unwrap();
        let table: Value = serde_json::from_str(&text(&t.frame(&ev).unwrap())).unwrap();
        let cols: Vec<&Value> = table["object"]["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["name"])
            .collect();
        assert_eq!(cols, ["Name", "Color"]);
        assert_eq!(table["object"]["rows"][0]["cells"], json!(["a", "red"]));
        assert_eq!(
            table["object"]["rows"][0]["object"]["apiVersion"],
            "stable.example.com/v1beta1"
        );

        // A bookmark too goes out at the watch's version.
        let mark = Change(
            EventType::Bookmark,
            crate::wire::bookmark_object(&def, 9, false),
            Default::default(),
        );
        assert_eq!(
            text(&watcher().frame(&mark).unwrap()),
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Shirt\",\"apiVersion\":\"stable.example.com/v1beta1\",\"metadata\":{\"resourceVersion\":\"9\"}}}\n"
        );
    }
}
