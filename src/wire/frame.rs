//! Watch frames, serialize-once: an object's JSON is produced once on ingest and every frame that
//! carries it (live event, history replay, initial event) points at those same bytes.
//!
//! A watch frame is `{"type":"ADDED","object":<object JSON>}\n`, written as three [`Bytes`]: a static
//! head, the shared object bytes and a static tail, so a socket writer can send them vectored with no
//! copy. The only per-event encoding is a DELETED event's previous state at the deletion's revision,
//! made once per event and shared by all its watchers.

use bytes::{BufMut, Bytes, BytesMut};

use crate::model::EventType;
use crate::model::definition::ResourceDef;

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
        let head = crate::wire::protobuf::watch_frame_head(event_type, envelope.len());
        Frame {
            parts: [Bytes::from(head), envelope, Bytes::new()],
        }
    }

    /// A frame made whole, in one shared buffer (a protobuf frame's head and envelope; an
    /// encoder's own frame).
    pub fn whole(frame: Bytes) -> Frame {
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
    /// a frame made whole ([`Frame::whole`]: a protobuf ADDED or MODIFIED event's), empty: the
    /// frame is its first piece.
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
