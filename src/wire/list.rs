//! A page of a LIST ([`ObjectList`]) and its bodies, as pieces of shared [`Bytes`] to write in
//! order: each item is the object's own shared bytes (its JSON, or its protobuf message), never
//! copied; only the list's head and separators are made per answer. Byte for byte what
//! kube-apiserver writes for the same list, a custom resource's `UnstructuredList` included.

use bytes::Bytes;

use crate::model::definition::ResourceDef;
use crate::model::{EncodeError, Object};

/// One page of a LIST.
#[derive(Debug, Clone)]
pub struct ObjectList {
    /// The revision the page is consistent at.
    pub resource_version: u64,
    /// The objects, sorted by key.
    pub items: Vec<Object>,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
    /// How many more items match after this page, when known.
    pub remaining_item_count: Option<u64>,
    /// The `shardSelector` applied, in upstream's canonical form: echoed as the list's
    /// `metadata.shardInfo.selector` (KEP-5866), so a client knows it got a shard, not the whole.
    pub shard_info: Option<String>,
}

/// A `{Kind}List` in protobuf as pieces to write in order: the envelope and list metadata, each
/// item's head and its shared message bytes (the object's own protobuf, never copied), and the
/// envelope's tail. Byte for byte what kube-apiserver writes for the same list.
///
/// # Errors
/// An item stored as JSON that its kind's protobuf message cannot hold.
pub fn list_parts_protobuf(
    def: &ResourceDef,
    list: &ObjectList,
) -> Result<Vec<Bytes>, EncodeError> {
    list_parts_protobuf_with(def, list, Object::protobuf_item)
}

/// [`list_parts_protobuf`] with each item's message given by `item` (a variant of the object's
/// own, such as one without managed fields).
///
/// # Errors
/// What `item` returns.
pub fn list_parts_protobuf_with(
    def: &ResourceDef,
    list: &ObjectList,
    item: impl FnMut(&Object) -> Result<Bytes, EncodeError>,
) -> Result<Vec<Bytes>, EncodeError> {
    use crate::wire::protobuf as pb;
    let items = list.items.iter().map(item).collect::<Result<Vec<_>, _>>()?;
    let rv = list.resource_version.to_string();
    let remaining = list
        .remaining_item_count
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    let head = pb::list_head(
        &def.api_version(),
        &format!("{}List", def.kind),
        &rv,
        list.continue_token.as_deref().unwrap_or(""),
        remaining,
        list.shard_info.as_deref(),
        items.iter().map(Bytes::len),
    );
    let mut parts = Vec::with_capacity(items.len() * 2 + 2);
    parts.push(Bytes::from(head));
    for i in items {
        parts.push(Bytes::from(pb::item_head(i.len())));
        parts.push(i);
    }
    parts.push(Bytes::from_static(pb::ENVELOPE_TAIL));
    Ok(parts)
}

/// A `{Kind}List` as pieces to write in order: the head, each item's shared bytes with separators,
/// and the tail.
pub fn list_parts(def: &ResourceDef, list: &ObjectList) -> Vec<Bytes> {
    list_parts_with(def, list, |o, parts| match o.list_item_tail() {
        Some(tail) => {
            parts.push(Bytes::from_static(b"{"));
            parts.push(tail);
        }
        None => parts.push(o.json().clone()),
    })
}

/// [`list_parts`] with each item's pieces pushed by `item` (a variant of the object's JSON, such
/// as one without managed fields).
pub fn list_parts_with(
    def: &ResourceDef,
    list: &ObjectList,
    mut item: impl FnMut(&Object, &mut Vec<Bytes>),
) -> Vec<Bytes> {
    if !def.has_protobuf() {
        return unstructured_list_parts(def, list, item);
    }
    let mut head = format!(
        r#"{{"kind":"{}List","apiVersion":"{}","metadata":{{"resourceVersion":"{}""#,
        def.kind,
        def.api_version(),
        list.resource_version
    );
    if let Some(c) = &list.continue_token {
        head.push_str(&format!(r#","continue":"{c}""#));
    }
    if let Some(n) = list.remaining_item_count {
        head.push_str(&format!(r#","remainingItemCount":{n}"#));
    }
    if let Some(sel) = &list.shard_info {
        // The canonical form holds no character JSON escapes; serde_json quotes it anyway.
        let quoted = serde_json::to_string(sel).unwrap_or_default();
        head.push_str(&format!(r#","shardInfo":{{"selector":{quoted}}}"#));
    }
    head.push_str(r#"},"items":["#);
    let mut parts = Vec::with_capacity(list.items.len() * 2 + 2);
    parts.push(Bytes::from(head));
    for (i, o) in list.items.iter().enumerate() {
        if i > 0 {
            parts.push(Bytes::from_static(b","));
        }
        item(o, &mut parts);
    }
    parts.push(Bytes::from_static(b"]}"));
    parts
}

/// A custom resource's list as kube-apiserver writes an `UnstructuredList`: members sorted by key
/// (`apiVersion`, `items`, `kind`, `metadata`), the list metadata a map too, with `continue`
/// always there (empty on the last page). No `shardInfo`: upstream's unstructured lists do not
/// take it (`UnstructuredList` is no `ShardedListInterface`).
fn unstructured_list_parts(
    def: &ResourceDef,
    list: &ObjectList,
    mut item: impl FnMut(&Object, &mut Vec<Bytes>),
) -> Vec<Bytes> {
    let mut parts = Vec::with_capacity(list.items.len() * 2 + 2);
    parts.push(Bytes::from(format!(
        r#"{{"apiVersion":"{}","items":["#,
        def.api_version()
    )));
    for (i, o) in list.items.iter().enumerate() {
        if i > 0 {
            parts.push(Bytes::from_static(b","));
        }
        item(o, &mut parts);
    }
    let mut tail = format!(
        r#"],"kind":"{}List","metadata":{{"continue":"{}""#,
        def.kind,
        list.continue_token.as_deref().unwrap_or("")
    );
    if let Some(n) = list.remaining_item_count {
        tail.push_str(&format!(r#","remainingItemCount":{n}"#));
    }
    tail.push_str(&format!(
        r#","resourceVersion":"{}"}}}}"#,
        list.resource_version
    ));
    parts.push(Bytes::from(tail));
    parts
}
