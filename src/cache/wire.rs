//! Wire encoding, serialize-once: an object's JSON is produced once on ingest and every frame that
//! carries it (live event, history replay, initial event, list item) points at those same bytes.
//!
//! A watch frame is `{"type":"ADDED","object":<object JSON>}\n`, written as three [`Bytes`]: a static
//! head, the shared object bytes and a static tail, so a socket writer can send them vectored with no
//! copy. The only per-event encoding is a DELETED event's previous state at the deletion's revision,
//! made once per event and shared by all its watchers.

use bytes::{BufMut, Bytes, BytesMut};

use crate::cache::list::ObjectList;
use crate::model::definition::ResourceDef;
use crate::model::{EncodeError, EventType, Object};

/// One encoded watch event: `head ++ body ++ tail` is a line of JSON ending in `\n`.
#[derive(Debug, Clone)]
pub struct Frame {
    parts: [Bytes; 3],
}

impl Frame {
    pub(crate) fn new(kind: EventType, body: Bytes) -> Frame {
        let head: &'static [u8] = match kind {
            EventType::Added => b"{\"type\":\"ADDED\",\"object\":",
            EventType::Modified => b"{\"type\":\"MODIFIED\",\"object\":",
            EventType::Deleted => b"{\"type\":\"DELETED\",\"object\":",
            EventType::Bookmark => b"{\"type\":\"BOOKMARK\",\"object\":",
        };
        Frame {
            parts: [Bytes::from_static(head), body, Bytes::from_static(b"}\n")],
        }
    }

    /// A frame carrying an `ERROR` event with a `Status` object.
    pub fn error(status_json: Bytes) -> Frame {
        Frame {
            parts: [
                Bytes::from_static(b"{\"type\":\"ERROR\",\"object\":"),
                status_json,
                Bytes::from_static(b"}\n"),
            ],
        }
    }

    /// A protobuf watch frame: the length and `metav1.WatchEvent` head, then the object's shared
    /// envelope (`k8s\0` + `runtime.Unknown`), as upstream's protobuf stream framer writes it.
    pub fn protobuf(event_type: &str, envelope: Bytes) -> Frame {
        let head = crate::model::protobuf::watch_frame_head(event_type, envelope.len());
        Frame {
            parts: [Bytes::from(head), envelope, Bytes::new()],
        }
    }

    /// A protobuf watch frame from its shared head (made by the object or event) and envelope.
    pub(crate) fn protobuf_parts(head: Bytes, envelope: Bytes) -> Frame {
        Frame {
            parts: [head, envelope, Bytes::new()],
        }
    }

    /// A protobuf watch frame made whole (head and envelope in one shared buffer).
    pub(crate) fn protobuf_whole(frame: Bytes) -> Frame {
        Frame {
            parts: [frame, Bytes::new(), Bytes::new()],
        }
    }

    /// A protobuf frame carrying an `ERROR` event with a `Status` object (its envelope).
    pub fn protobuf_error(status_envelope: Bytes) -> Frame {
        Frame::protobuf("ERROR", status_envelope)
    }

    /// The pieces to write, in order.
    pub fn parts(&self) -> &[Bytes; 3] {
        &self.parts
    }

    /// The object's bytes inside the frame (shared with every other frame of the same event); for
    /// a protobuf frame made whole ([`WatchEvent::protobuf_frame`](crate::WatchEvent::protobuf_frame)
    /// of ADDED and MODIFIED events), empty: the frame is its first piece.
    pub fn body(&self) -> &Bytes {
        &self.parts[1]
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    /// Whether the frame is empty (never, for a real frame).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame as one contiguous buffer (copies; for tests and simple writers).
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.len());
        for p in &self.parts {
            b.put_slice(p);
        }
        b.freeze()
    }
}

/// The object of a BOOKMARK event: kind, apiVersion and resourceVersion only, plus the
/// `k8s.io/initial-events-end` annotation when it closes the initial events of a WatchList.
pub(crate) fn bookmark_object(def: &ResourceDef, rv: u64, initial_events_end: bool) -> Bytes {
    let annotations = if initial_events_end {
        r#","annotations":{"k8s.io/initial-events-end":"true"}"#
    } else {
        ""
    };
    Bytes::from(format!(
        r#"{{"kind":"{}","apiVersion":"{}","metadata":{{"resourceVersion":"{rv}"{annotations}}}}}"#,
        def.kind,
        def.api_version()
    ))
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
    use crate::model::protobuf as pb;
    let items = list
        .items
        .iter()
        .map(Object::protobuf_item)
        .collect::<Result<Vec<_>, _>>()?;
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
    if !def.has_protobuf() {
        return unstructured_list_parts(def, list);
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
    head.push_str(r#"},"items":["#);
    let mut parts = Vec::with_capacity(list.items.len() * 2 + 2);
    parts.push(Bytes::from(head));
    for (i, o) in list.items.iter().enumerate() {
        if i > 0 {
            parts.push(Bytes::from_static(b","));
        }
        match o.list_item_tail() {
            Some(tail) => {
                parts.push(Bytes::from_static(b"{"));
                parts.push(tail);
            }
            None => parts.push(o.json().clone()),
        }
    }
    parts.push(Bytes::from_static(b"]}"));
    parts
}

/// A custom resource's list as kube-apiserver writes an `UnstructuredList`: members sorted by key
/// (`apiVersion`, `items`, `kind`, `metadata`), the list metadata a map too, with `continue`
/// always there (empty on the last page).
fn unstructured_list_parts(def: &ResourceDef, list: &ObjectList) -> Vec<Bytes> {
    let mut parts = Vec::with_capacity(list.items.len() * 2 + 2);
    parts.push(Bytes::from(format!(
        r#"{{"apiVersion":"{}","items":["#,
        def.api_version()
    )));
    for (i, o) in list.items.iter().enumerate() {
        if i > 0 {
            parts.push(Bytes::from_static(b","));
        }
        parts.push(o.json().clone());
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
