//! An encoder per format and variant: what turns a watch event into the frame a watcher gets.
//!
//! As upstream's `cachingObject` (`caching_object.go`) keeps one serialization per
//! `runtime.Identifier`, each event keeps its encodings in an [`EventMemo`] keyed by the
//! [`EncoderId`] that made them: the first watcher asking for a variant makes it, every other
//! watcher of that variant shares it, and the cache that holds the memo knows no format.
//!
//! - [`JsonFrames`] and [`ProtobufFrames`] (with its frames' heads): the event as it is stored,
//!   one line of JSON or one length-prefixed `metav1.WatchEvent`. Their ADDED and MODIFIED frames
//!   share the object's own bytes (made once per object state, at decode); a protobuf frame's
//!   head is made once per object state and event type and kept with the object; a DELETED
//!   frame, the last state at the deletion's revision, is made once per event in its memo.
//! - `WatchConverter` (`convert.rs`): Table, PartialObjectMetadata (JSON and protobuf), either
//!   format without managed fields, a CRD's other served version.
//!
//! Adding a format to watches: its encoder in its own file, and the media range that picks it in
//! the server's negotiation (`server/http/negotiate.rs`, `watch_encoder`). `encoder_skeleton` in
//! this file's tests is one, end to end, from a real cache.
//!
//! A [`Frame`] is what an encoder makes: three shared pieces a socket writer sends vectored with
//! no copy (JSON: a static head, the object's shared bytes, a static tail), or one made whole.
//!
//! # Lock order
//! A memo's mutex is a leaf: held to find or insert a cell, never while an encoding is made (that
//! happens in the cell, outside it) or across an await.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;

use crate::model::definition::ResourceDef;
use crate::model::protobuf::{put_len, tag, varint};
use crate::model::{EncodeError, EventType, Object};
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
///
/// What its frames hold is charged to a budget while the memo is [charged](EventMemo::charge_to)
/// (the history window's: its byte budget counts what its events' encodings hold, as what their
/// objects hold), and given back when it is [released](EventMemo::release). Frames count whole,
/// shared pieces included: the charge errs on the side of leaving the window early.
#[derive(Default)]
pub struct EventMemo {
    inner: Mutex<MemoCells>,
}

#[derive(Default)]
struct MemoCells {
    cells: Vec<(EncoderId, EventType, Cell)>,
    /// The bytes of the frames made in `cells`.
    held: usize,
    /// Where `held` is charged, while it is.
    budget: Option<Arc<AtomicUsize>>,
}

impl std::fmt::Debug for EventMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("EventMemo")
            .field("encodings", &inner.cells.len())
            .field("held", &inner.held)
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
            let mut inner = self.inner.lock();
            match inner.cells.iter().find(|(i, k, _)| *k == kind && i == id) {
                Some((_, _, c)) => Arc::clone(c),
                None => {
                    let c = Cell::default();
                    inner.cells.push((id.clone(), kind, Arc::clone(&c)));
                    c
                }
            }
        };
        let mut made = 0;
        let out = cell.get_or_init(|| {
            let f = make();
            made = f.as_ref().map_or(0, Frame::len);
            f
        });
        if made > 0 {
            let mut inner = self.inner.lock();
            inner.held += made;
            if let Some(b) = &inner.budget {
                b.fetch_add(made, Ordering::Relaxed);
            }
        }
        out.clone()
    }

    /// Charges what the memo holds, now and from now on, to `budget` (before it is shared: no
    /// lock taken).
    pub fn charge_to(&mut self, budget: Arc<AtomicUsize>) {
        let inner = self.inner.get_mut();
        budget.fetch_add(inner.held, Ordering::Relaxed);
        inner.budget = Some(budget);
    }

    /// Gives back what the memo charged to its budget, and charges nothing more (its event left
    /// the window; a watcher still sending it may still add to it).
    pub fn release(&self) {
        let mut inner = self.inner.lock();
        if let Some(b) = inner.budget.take() {
            b.fetch_sub(inner.held, Ordering::Relaxed);
        }
    }

    /// How many encodings it holds.
    pub fn len(&self) -> usize {
        self.inner.lock().cells.len()
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

impl JsonFrames {
    /// The event's frame, statically dispatched: what a watch in a stored format calls for every
    /// event (through [`Wire::frame`]), without the trait's dynamic calls (design/performance.md,
    /// "Encoders per format").
    #[inline]
    pub fn event<E: Event + ?Sized>(ev: &E) -> Frame {
        Frame::new(ev.kind(), ev.json().clone())
    }
}

impl Encoder for JsonFrames {
    fn id(&self) -> &EncoderId {
        &JSON
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }

    fn frame(&mut self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        Ok(JsonFrames::event(ev))
    }

    fn error_frame(&self, status: &Status) -> Frame {
        Frame::error(status.json())
    }
}

/// The event as stored, in Kubernetes protobuf: a length-prefixed `metav1.WatchEvent` per event
/// (`application/vnd.kubernetes.protobuf;stream=watch`). An ADDED or MODIFIED frame is its head,
/// made once per object state and event type and kept with the object
/// (`Object::protobuf_with_head`), then the object's own protobuf bytes, shared; a DELETED frame,
/// the last state at the deletion's revision, once per event in its memo; a bookmark's, per
/// watcher (its object is a few bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProtobufFrames;

/// [`ProtobufFrames`]' id.
pub static PROTOBUF: EncoderId = EncoderId::of("protobuf");

impl ProtobufFrames {
    /// The event's frame, statically dispatched (as [`JsonFrames::event`](crate::wire::JsonFrames::event)).
    ///
    /// # Errors
    /// An object stored as JSON that its kind's protobuf message cannot hold.
    pub fn event<E: Event + ?Sized>(ev: &E) -> Result<Frame, EncodeError> {
        match (ev.kind(), ev.object()) {
            (EventType::Deleted, Some(o)) => {
                let make = || {
                    let env = o.protobuf_at(ev.resource_version())?;
                    Ok(Frame::protobuf("DELETED", env))
                };
                match ev.memo() {
                    Some(m) => m.frame(&PROTOBUF, EventType::Deleted, make),
                    None => make(),
                }
            }
            (kind, Some(o)) => {
                let (envelope, head) = o.protobuf_with_head(kind)?;
                let Some(kept) = head else {
                    return Ok(Frame::protobuf(kind.as_str(), envelope.clone()));
                };
                let head = kept
                    .get_or_init(|| Bytes::from(watch_frame_head(kind.as_str(), envelope.len())));
                Ok(Frame::with_head(head.clone(), envelope.clone()))
            }
            (kind, None) => {
                let fail = |reason: String| EncodeError {
                    key: String::new(),
                    reason,
                };
                let v: serde_json::Value =
                    serde_json::from_slice(ev.json()).map_err(|e| fail(e.to_string()))?;
                let env = crate::model::protobuf::encode_json(&v).map_err(fail)?;
                Ok(Frame::protobuf(kind.as_str(), Bytes::from(env)))
            }
        }
    }
}

impl Encoder for ProtobufFrames {
    fn id(&self) -> &EncoderId {
        &PROTOBUF
    }

    fn content_type(&self) -> &'static str {
        "application/vnd.kubernetes.protobuf;stream=watch"
    }

    fn frame(&mut self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        ProtobufFrames::event(ev)
    }

    fn error_frame(&self, status: &Status) -> Frame {
        Frame::protobuf_error(Bytes::from(status.protobuf()))
    }
}

/// The event's object in protobuf (`k8s\0` + `runtime.Unknown`), shared: the object's own, a
/// deletion's last state at its revision (from its frame, made once per event), or a bookmark's.
///
/// # Errors
/// An object stored as JSON that its kind's protobuf message cannot hold.
pub(crate) fn event_envelope(ev: &dyn Event) -> Result<Bytes, EncodeError> {
    match (ev.kind(), ev.object()) {
        (EventType::Deleted, _) | (_, None) => ProtobufFrames.frame(ev).map(|f| f.body().clone()),
        (_, Some(o)) => o.protobuf_wire().cloned(),
    }
}

/// `metav1.WatchEvent` {type = 1, object = 2 (RawExtension {raw = 1})} around an object's
/// envelope, behind the 4-byte big-endian length of the stream framer: the head of the frame
/// (the envelope follows it).
fn watch_frame_head(event_type: &str, envelope_len: usize) -> Vec<u8> {
    let mut ext_len = Vec::with_capacity(5);
    varint(&mut ext_len, envelope_len as u64);
    let ext = 1 + ext_len.len() + envelope_len;
    let mut msg = Vec::with_capacity(32);
    put_len(&mut msg, 1, event_type.as_bytes());
    tag(&mut msg, 2, 2);
    varint(&mut msg, ext as u64);
    tag(&mut msg, 1, 2);
    msg.extend_from_slice(&ext_len);
    let total = msg.len() + envelope_len;
    let mut out = Vec::with_capacity(4 + msg.len());
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

/// A watch's frames in one of the stored formats: the object's own JSON or protobuf, as
/// [`JsonFrames`] and [`ProtobufFrames`] make them, chosen in a byte (a watch holds it for its
/// life, and nearly every watch is one of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// One `{"type":...,"object":...}` line per event (`application/json`).
    Json,
    /// Length-prefixed `metav1.WatchEvent` messages
    /// (`application/vnd.kubernetes.protobuf;stream=watch`).
    Protobuf,
}

impl Wire {
    /// The response's Content-Type.
    pub fn content_type(self) -> &'static str {
        match self {
            Wire::Json => JsonFrames.content_type(),
            Wire::Protobuf => ProtobufFrames.content_type(),
        }
    }

    /// The event's frame.
    ///
    /// # Errors
    /// As [`Encoder::frame`].
    #[inline]
    pub fn frame<E: Event + ?Sized>(self, ev: &E) -> Result<Frame, EncodeError> {
        match self {
            Wire::Json => Ok(JsonFrames::event(ev)),
            Wire::Protobuf => ProtobufFrames::event(ev),
        }
    }

    /// The frame of an ERROR event carrying this error's `Status`.
    pub fn error_frame(self, status: &Status) -> Frame {
        match self {
            Wire::Json => JsonFrames.error_frame(status),
            Wire::Protobuf => ProtobufFrames.error_frame(status),
        }
    }
}

/// The encoder a watch was negotiated: a stored format, or one of its own (a conversion, another
/// format), which the watch keeps boxed.
pub enum WatchEncoder {
    /// The object's own JSON or protobuf.
    Stored(Wire),
    /// Any other [`Encoder`].
    Own(Box<dyn Encoder>),
}

impl WatchEncoder {
    /// The response's Content-Type.
    pub fn content_type(&self) -> &'static str {
        match self {
            WatchEncoder::Stored(w) => w.content_type(),
            WatchEncoder::Own(e) => e.content_type(),
        }
    }

    /// The frame of an ERROR event carrying this error's `Status`.
    pub fn error_frame(&self, status: &Status) -> Frame {
        match self {
            WatchEncoder::Stored(w) => w.error_frame(status),
            WatchEncoder::Own(e) => e.error_frame(status),
        }
    }
}

impl std::fmt::Debug for WatchEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchEncoder::Stored(w) => f.debug_tuple("Stored").field(w).finish(),
            WatchEncoder::Own(e) => f.debug_tuple("Own").field(&e.id().as_str()).finish(),
        }
    }
}

/// One encoded watch event: `head ++ body ++ tail` is a line of JSON ending in `\n`.
#[derive(Debug, Clone)]
pub struct Frame {
    parts: [Bytes; 3],
}

impl Frame {
    #[inline]
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
        let head = watch_frame_head(event_type, envelope.len());
        Frame::with_head(Bytes::from(head), envelope)
    }

    /// A frame of a head made for it and a body shared with other frames (a protobuf frame's head
    /// kept with its object, and the object's bytes).
    pub(crate) fn with_head(head: Bytes, body: Bytes) -> Frame {
        Frame {
            parts: [head, body, Bytes::new()],
        }
    }

    /// A frame made whole, in one shared buffer (an encoder's own frame).
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
    /// a frame made whole ([`Frame::whole`]), empty: the frame is its first piece.
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

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::cache::{Cache, CacheConfig, WatchOptions};
    use crate::model::{EventType, ResourceDef, ResourceVersion, Selection};

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

    /// Protobuf watch frames, byte for byte upstream's stream (`pods-watch.pb-stream`, made by
    /// Kubernetes' own serializers).
    #[test]
    fn protobuf_frames_are_upstreams_watch_stream() {
        let vector = crate::model::protobuf::tests::vector;
        let lines = vector("pods-watch.json-stream");
        let mut got = Vec::new();
        for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let ev: serde_json::Value = serde_json::from_slice(line).unwrap();
            let env = crate::model::protobuf::encode_json(&ev["object"]).unwrap();
            got.extend_from_slice(&watch_frame_head(ev["type"].as_str().unwrap(), env.len()));
            got.extend_from_slice(&env);
        }
        assert!(
            got == vector("pods-watch.pb-stream"),
            "watch stream differs from upstream's vector"
        );
    }
}
