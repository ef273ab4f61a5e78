//! An encoder per format and variant: what turns a watch event into the frame a watcher gets.
//!
//! As upstream's `cachingObject` (`caching_object.go`) keeps one serialization per
//! `runtime.Identifier`, each event keeps its encodings in an [`EventMemo`] keyed by the
//! [`EncoderId`] that made them: the first watcher asking for a variant makes it, every other
//! watcher of that variant shares it, and the cache that holds the memo knows no format.
//!
//! - [`JsonFrames`] and [`ProtobufFrames`] (`protobuf.rs`): the event as it is stored, one line
//!   of JSON or one length-prefixed `metav1.WatchEvent`. Their ADDED and MODIFIED frames share
//!   the object's own bytes (made once per object state, in the model); a DELETED frame, the last
//!   state at the deletion's revision, is made once per event in its memo.
//! - `WatchConverter` (`convert.rs`): Table, PartialObjectMetadata (JSON and protobuf), either
//!   format without managed fields, a CRD's other served version.
//!
//! Adding a format to watches: its encoder in its own file, and the media range that picks it in
//! the server's negotiation (`server/http/negotiate.rs`, `watch_encoder`). `encoder_skeleton` in
//! this file's tests is one, end to end, from a real cache.
//!
//! # Lock order
//! A memo's mutex is a leaf: held to find or insert a cell, never while an encoding is made (that
//! happens in the cell, outside it) or across an await.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::model::{EncodeError, EventType, Object};
use crate::wire::Frame;
use crate::wire::status::Status;

/// What a watch event offers its encoders (the cache's `WatchEvent`).
pub trait Event {
    /// ADDED, MODIFIED, DELETED or BOOKMARK.
    fn kind(&self) -> EventType;
    /// The event's revision (a DELETED event's is the deletion's, not its last state's).
    fn resource_version(&self) -> u64;
    /// The object it carries: the new state, a deletion's last state (at the revision it was
    /// written), `None` for a bookmark.
    fn object(&self) -> Option<&Object>;
    /// The object's JSON as the event carries it (a deletion's at the deletion's revision, a
    /// bookmark's own object).
    fn json(&self) -> &Bytes;
    /// The encodings shared by the event's watchers; `None` when it has no one to share them with
    /// (initial events, bookmarks).
    fn memo(&self) -> Option<&EventMemo>;
}

/// Which encoder made an encoding, as upstream's `runtime.Identifier`: two encoders with the
/// same id make the same bytes from the same event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EncoderId(Id);

#[derive(Clone, Debug, Eq)]
enum Id {
    Static(&'static str),
    Owned(Arc<str>),
}

impl Id {
    fn as_str(&self) -> &str {
        match self {
            Id::Static(s) => s,
            Id::Owned(s) => s,
        }
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.as_str() == other.as_str()
    }
}

impl std::hash::Hash for Id {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl EncoderId {
    /// The id of an encoder with no options.
    pub const fn of(name: &'static str) -> EncoderId {
        EncoderId(Id::Static(name))
    }

    /// The id of an encoder with options: its name and what else its bytes depend on.
    pub fn with(name: &str, options: std::fmt::Arguments<'_>) -> EncoderId {
        EncoderId(Id::Owned(Arc::from(format!("{name}:{options}"))))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// Encodes a watch's events, for one watcher: made when the watch starts (its format
/// negotiated), asked for each event's frame.
pub trait Encoder: Send {
    /// Who made what this encoder makes: the key of its encodings in an event's memo.
    fn id(&self) -> &EncoderId;
    /// The watch response's Content-Type.
    fn content_type(&self) -> &'static str;
    /// The event's frame.
    ///
    /// # Errors
    /// An object its format cannot hold (a JSON-stored object its kind's protobuf message
    /// cannot): the watch ends with an ERROR event naming it.
    fn frame(&mut self, ev: &dyn Event) -> Result<Frame, EncodeError>;
    /// The frame of an ERROR event carrying `status`.
    fn error_frame(&self, status: &Status) -> Frame;
}

/// One encoding, made once by the first watcher to ask.
type Cell = Arc<OnceLock<Result<Frame, EncodeError>>>;

/// An event's encodings, one per encoder and delivery that asked: a history event's (the cache
/// keeps it beside the event, and drops it with it). Keyed by the delivery's type too: one change
/// is a MODIFIED event to the watchers it still matches, ADDED to those it starts to match and
/// DELETED (its last state) to those it leaves.
#[derive(Default)]
pub struct EventMemo {
    cells: Mutex<Vec<(EncoderId, EventType, Cell)>>,
}

impl std::fmt::Debug for EventMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventMemo")
            .field("encodings", &self.cells.lock().len())
            .finish()
    }
}

impl EventMemo {
    /// The frame `id` makes of the event delivered as `kind`, made by `make` if nobody has
    /// yet. Concurrent askers of the same frame wait for the one making it.
    ///
    /// # Errors
    /// What `make` returned.
    pub fn frame(
        &self,
        id: &EncoderId,
        kind: EventType,
        make: impl FnOnce() -> Result<Frame, EncodeError>,
    ) -> Result<Frame, EncodeError> {
        let cell = {
            let mut cells = self.cells.lock();
            match cells.iter().find(|(i, k, _)| *k == kind && i == id) {
                Some((_, _, c)) => Arc::clone(c),
                None => {
                    let c = Cell::default();
                    cells.push((id.clone(), kind, Arc::clone(&c)));
                    c
                }
            }
        };
        cell.get_or_init(make).clone()
    }

    /// How many encodings it holds.
    pub fn len(&self) -> usize {
        self.cells.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The event as stored, as JSON: `{"type":...,"object":...}\n`, sharing the object's bytes (a
/// deletion's last state at its revision is made once per event by the cache, as its JSON).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonFrames;

/// [`JsonFrames`]' id.
pub static JSON: EncoderId = EncoderId::of("json");

impl Encoder for JsonFrames {
    fn id(&self) -> &EncoderId {
        &JSON
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }

    fn frame(&mut self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        Ok(Frame::new(ev.kind(), ev.json().clone()))
    }

    fn error_frame(&self, status: &Status) -> Frame {
        Frame::error(status.json())
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::cache::{Cache, CacheConfig, WatchOptions};
    use crate::model::{EventType, ResourceDef, ResourceVersion, Selection};
    use crate::wire::ProtobufFrames;

    /// The skeleton of one more variant, as a new format would add it in its own file: YAML-ish
    /// lines `{TYPE} {object JSON}\n`, made once per event for all its watchers. Nothing else in
    /// the library changes for it; the server would pick it in `negotiate.rs`.
    struct TypeLines {
        made: Arc<std::sync::atomic::AtomicUsize>,
    }

    static TYPE_LINES: EncoderId = EncoderId::of("type-lines");

    impl Encoder for TypeLines {
        fn id(&self) -> &EncoderId {
            &TYPE_LINES
        }
        fn content_type(&self) -> &'static str {
            "text/x-type-lines"
        }
        fn frame(&mut self, ev: &dyn Event) -> Result<Frame, EncodeError> {
            let make = || {
                self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut line = format!("{:?} ", ev.kind()).into_bytes();
                line.extend_from_slice(ev.json());
                line.push(b'\n');
                Ok(Frame::whole(Bytes::from(line)))
            };
            match ev.memo() {
                Some(m) => m.frame(self.id(), ev.kind(), make),
                None => make(),
            }
        }
        fn error_frame(&self, status: &Status) -> Frame {
            let mut line = b"ERROR ".to_vec();
            line.extend_from_slice(&status.json());
            line.push(b'\n');
            Frame::whole(Bytes::from(line))
        }
    }

    #[tokio::test]
    async fn encoder_skeleton() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = crate::MemorySource::new(writer, 1, []);
        let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns"}}"#;
        src.put("/registry/pods/ns/a", pod).unwrap();
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut watches = Vec::new();
        for _ in 0..3 {
            let w = cache
                .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(2)))
                .await
                .unwrap();
            let enc = TypeLines {
                made: Arc::clone(&made),
            };
            watches.push((w, enc));
        }
        src.delete("/registry/pods/ns/a").unwrap();
        let mut frames = Vec::new();
        for (w, enc) in &mut watches {
            let ev = w.next().await.unwrap().unwrap();
            let frame = enc.frame(&ev).unwrap();
            // The stored formats go on beside it, unchanged.
            ProtobufFrames.frame(&ev).unwrap();
            frames.push(frame.to_bytes());
        }
        assert_eq!(
            made.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "once per event"
        );
        let line = std::str::from_utf8(&frames[0]).unwrap();
        assert!(line.starts_with("Deleted {"), "{line}");
        assert!(
            line.contains(r#""resourceVersion":"3""#),
            "at the deletion's: {line}"
        );
        assert!(frames.iter().all(|f| f == &frames[0]));
    }

    /// One change is a MODIFIED event to a watcher it still matches and a DELETED one (its last
    /// state) to a watcher it leaves: each delivery has its own frame in the event's memo.
    #[tokio::test]
    async fn a_change_delivered_as_two_types_has_a_frame_for_each() {
        use crate::wire::convert::{IncludeObject, WatchConverter};
        use crate::wire::format::{Fields, Format};
        let def = ResourceDef::builtin("pods").unwrap();
        let (cache, writer) = Cache::new(def.clone(), CacheConfig::default());
        let src = crate::MemorySource::new(writer, 1, []);
        let pod = |node: &str| {
            format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"a","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#
            )
        };
        src.put("/registry/pods/ns/a", pod("n1")).unwrap();
        let on_n1 = Selection::all().with_fields("spec.nodeName=n1").unwrap();
        let mut leaving = cache
            .watch(WatchOptions::new(on_n1, ResourceVersion::At(2)))
            .await
            .unwrap();
        let mut staying = cache
            .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(2)))
            .await
            .unwrap();
        src.put("/registry/pods/ns/a", pod("n2")).unwrap();
        let (gone, moved) = (
            leaving.next().await.unwrap().unwrap(),
            staying.next().await.unwrap().unwrap(),
        );
        assert_eq!(
            (gone.kind(), moved.kind()),
            (EventType::Deleted, EventType::Modified)
        );
        let converter = || {
            WatchConverter::new(
                &def,
                Format::Json,
                IncludeObject::Metadata,
                Fields::WithoutManaged,
                false,
                || Box::new(|| ()),
            )
            .unwrap()
        };
        for round in 0..2 {
            // The second round takes what the first made.
            let text = |f: Frame| String::from_utf8(f.to_bytes().to_vec()).unwrap();
            let g = text(converter().frame(&gone).unwrap());
            let m = text(converter().frame(&moved).unwrap());
            assert!(
                g.starts_with(r#"{"type":"DELETED""#) && g.contains("n1"),
                "{round}: {g}"
            );
            assert!(
                m.starts_with(r#"{"type":"MODIFIED""#) && m.contains("n2"),
                "{round}: {m}"
            );
            let (pg, pm) = (
                ProtobufFrames.frame(&gone).unwrap().to_bytes(),
                ProtobufFrames.frame(&moved).unwrap().to_bytes(),
            );
            assert!(pg.windows(7).any(|w| w == b"DELETED"), "{round}");
            assert!(pm.windows(8).any(|w| w == b"MODIFIED"), "{round}");
        }
        let memo = Event::memo(&gone).unwrap();
        assert!(
            std::ptr::eq(memo, Event::memo(&moved).unwrap()),
            "one event"
        );
        // The converter's DELETED and MODIFIED frames, and protobuf's DELETED one.
        assert_eq!(memo.len(), 3);
    }
}
