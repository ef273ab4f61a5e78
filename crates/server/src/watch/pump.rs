//! The one state machine every watch response runs: wait for the next event, the watch's deadline
//! or server shutdown, and turn what came into response chunks. The fast path writes the chunks to
//! its socket; hyper's body yields them.
//!
//! It is polled, not awaited: an idle watch holds its pump and nothing else (no future, no timer
//! entry, no shutdown waiter; the deadline and the shutdown come from the server's
//! [`Deadlines`](watchcache::deadlines::Deadlines)). Invariant: every `Pending` it returns has the
//! caller's waker stored both with the watch stream and with the deadline wheel.
//!
//! ## Frames as chunks
//!
//! Watch frames as response chunks: the cache's shared pieces as they are, or compressed into the
//! response's gzip stream and flushed, so the client sees each event at once. Both watch paths
//! (the fast path and hyper's body) encode through this one type.
//!
//! ### gzip without a deflate state per watch
//! A deflate compressor holds about 400 KB (window, hash chains, buffers); one per gzip watch made
//! 1 000 idle client-go watches cost 400 MB (client-go asks for gzip by default). So a watch keeps
//! only the gzip stream's running CRC-32 and length (a few bytes, inline), and each frame is
//! compressed on its own by the worker thread's one compressor, reset first: the frame becomes
//! deflate blocks that refer to nothing before them, ending byte-aligned with a sync flush and
//! never marked final. Such block runs concatenate into one valid deflate stream, so the response
//! is still one gzip member: a header, the frames' blocks, an empty final block, the trailer.
//! The price is that a frame cannot refer to earlier frames (each event is a whole object, which
//! is where nearly all of its redundancy is). The gain beyond memory: a frame's blocks do not
//! depend on the watch, so a thread compresses an event once for all the gzip watches it sends
//! it to (the last 16 frames are kept).
//!
//! ### Invariants
//! - The thread's compressor is only used inside one synchronous call (no `.await`), so no other
//!   watch can see it mid-frame.
//! - Every chunk a gzip encoder returns ends on a byte boundary outside any final block, until
//!   `finish`, which returns the final block and trailer once.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use flate2::{Compress, Compression, Crc, FlushCompress};
use futures_util::StreamExt;

pub(crate) use crate::http::negotiate::Wire;
use crate::http::status::ApiError;
use crate::metrics::WatchMeter;
use crate::watch::StartedWatch;
use watchcache::deadlines::Deadlines;
use watchcache::wire::format::WatchEncoder;
use watchcache::wire::{Encoder, Frame};
use watchcache::{Error, WatchEvent};

/// A watch response in progress.
pub(crate) struct WatchPump {
    phase: Phase,
    encoder: FrameEncoder,
    /// The frames' stored format, unless the encoder has one of its own.
    wire: Wire,
    /// The watch's metrics (`None` for a response of one frame).
    meter: Option<WatchMeter>,
}

/// Each state keeps the server's deadlines, for [`WatchPump::shutting_down`]: a streaming
/// watch's are its stream's (its end is in them), and they are kept when it ends. Two variants:
/// their tag is a pointer's niche in the streaming watch (a third needs a tag of its own, 8 B
/// more in every idle watch).
enum Phase {
    /// Streaming the watch's events.
    Streaming(StartedWatch),
    /// Not streaming: a response of one frame still to send (the ERROR event of a watch that
    /// could not start; boxed: rare, and larger than a streaming watch), or done.
    Ended {
        single: Option<Box<Frame>>,
        deadlines: Option<Arc<Deadlines>>,
    },
}

impl WatchPump {
    /// Streams a started watch until its deadline, server shutdown, an error, or its end, its
    /// events made by `encoder`.
    pub(crate) fn events(
        w: StartedWatch,
        gzip: bool,
        encoder: WatchEncoder,
        meter: WatchMeter,
    ) -> WatchPump {
        let (encoder, wire) = FrameEncoder::of(gzip, encoder);
        WatchPump {
            phase: Phase::Streaming(w),
            encoder,
            wire,
            meter: Some(meter),
        }
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(&self) -> &'static str {
        self.encoder.content_type(self.wire)
    }

    /// A response made of one last frame, made by `encoder` (whose Content-Type it carries).
    pub(crate) fn single(
        frame: Frame,
        deadlines: Arc<Deadlines>,
        gzip: bool,
        encoder: WatchEncoder,
    ) -> WatchPump {
        let (encoder, wire) = FrameEncoder::of(gzip, encoder);
        WatchPump {
            phase: Phase::Ended {
                single: Some(Box::new(frame)),
                deadlines: Some(deadlines),
            },
            encoder,
            wire,
            meter: None,
        }
    }

    /// The next chunks to send, or `None` once the response is complete.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped before it completes, it loses nothing (the watch stream keeps its
    /// events until they are taken).
    pub(crate) async fn next(&mut self) -> Option<Vec<Bytes>> {
        poll_fn(|cx| self.poll_chunks(cx)).await
    }

    /// The next chunks to send, or `None` once the response is complete; `Pending` until an
    /// event, the deadline or shutdown comes (`cx` is then woken).
    pub(crate) fn poll_chunks(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<Bytes>>> {
        // Asked for more: the writer took the last chunks.
        self.written();
        let w = match &mut self.phase {
            Phase::Ended { single, .. } => {
                return match single.take() {
                    Some(frame) => Poll::Ready(Some(self.encoder.last(&frame))),
                    None => Poll::Ready(None),
                };
            }
            Phase::Streaming(w) => w,
        };
        // The end first: a watch whose events never pause still ends at its deadline.
        let item = if w.stream.poll_end(cx).is_ready() {
            None
        } else {
            match w.stream.poll_next_unpin(cx) {
                Poll::Ready(ev) => Some(ev),
                Poll::Pending => return Poll::Pending,
            }
        };
        let (chunks, done) = match item {
            Some(ev) => {
                let received = ev
                    .as_ref()
                    .and_then(|r| r.as_ref().ok())
                    .and_then(|e| e.received_at());
                let (chunks, done, sent) = self.encoder.item(ev, self.wire);
                if let (Some(m), Some(len)) = (&mut self.meter, sent) {
                    m.sent(len, received);
                }
                (chunks, done)
            }
            None => {
                let mut chunks = Vec::new();
                // Drained: what was queued, then a last bookmark, for the client to resume from
                // on another replica.
                if w.stream.end_wheel().is_some_and(|d| d.draining()) {
                    for ev in w.stream.drain_tail() {
                        let received = ev.received_at();
                        let (more, _, sent) = self.encoder.item(Some(Ok(ev)), self.wire);
                        if let (Some(m), Some(len)) = (&mut self.meter, sent) {
                            m.sent(len, received);
                        }
                        chunks.extend(more);
                    }
                }
                chunks.extend(self.encoder.finish());
                (chunks, true)
            }
        };
        if done {
            let deadlines = w.stream.end_wheel().cloned();
            self.phase = Phase::Ended {
                single: None,
                deadlines,
            };
        }
        Poll::Ready(Some(chunks))
    }

    /// Records that the chunks returned last were written to the connection (the fast path
    /// calls it after its write; hyper's body when asked for more).
    pub(crate) fn written(&mut self) {
        if let Some(m) = &mut self.meter {
            m.written();
        }
    }

    /// Whether the server is shutting down or draining (a response that ended for that closes
    /// its connection: its client comes back through another).
    pub(crate) fn shutting_down(&self) -> bool {
        match &self.phase {
            Phase::Streaming(w) => w.stream.end_wheel(),
            Phase::Ended { deadlines, .. } => deadlines.as_ref(),
        }
        .is_some_and(|d| d.stopped() || d.draining())
    }
}

/// The HTTP/2 stream sends a watch's chunks itself (`transport/http2.rs`).
impl crate::transport::Chunks for WatchPump {
    fn poll_chunks(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<Bytes>>> {
        WatchPump::poll_chunks(self, cx)
    }
}

/// The gzip member header: magic, deflate, no flags, no mtime, no extra flags, unknown OS.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
/// An empty deflate block with the final bit set (fixed Huffman, end-of-block only).
const FINAL_EMPTY_BLOCK: [u8; 2] = [0x03, 0x00];

thread_local! {
    /// This worker thread's compressor, and the frames it compressed last, shared by every gzip
    /// watch the thread serves.
    static DEFLATE: RefCell<Deflater> = const {
        RefCell::new(Deflater { compress: None, recent: VecDeque::new() })
    };
}

/// How many compressed frames a thread keeps for the next watches that send the same frame.
const RECENT_FRAMES: usize = 16;
/// Larger frames are compressed for each watch, not kept (the cache stays small).
const MAX_SHARED_FRAME: usize = 64 * 1024;

struct Deflater {
    compress: Option<Compress>,
    /// The frames compressed last, newest at the back. A frame is the same frame when its three
    /// pieces are the same bytes: the entry holds the pieces, so their memory cannot be freed and
    /// reused by other bytes while the entry lives, and pointer and length identify them.
    recent: VecDeque<([Bytes; 3], Bytes)>,
}

fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

/// The per-watch state of a gzip response: what the trailer needs.
struct GzipStream {
    /// CRC-32 and length (mod 2^32) of everything compressed so far.
    crc: Crc,
    /// Whether the header went out (with the first chunk).
    started: bool,
}

/// Turns frames into response chunks: the shared pieces, or gzip-compressed and flushed; and a
/// watch's events into frames, in a stored format (the watch's [`Wire`], a byte kept beside
/// this) or by an encoder of its own.
pub(crate) struct FrameEncoder {
    /// Boxed, both in one box: nearly every watch is neither compressed nor converted (a
    /// kubelet's never is), and each holds its encoder for as long as it is open (8 bytes, where
    /// two boxes took 16: design/performance.md).
    rare: Option<Box<Rare>>,
}

/// What a compressed or converted watch's encoder holds.
struct Rare {
    gzip: Option<GzipStream>,
    /// The watch's own encoder (`wire/encoder.rs`): Table, PartialObjectMetadata, without
    /// managed fields, another version; any format but the stored two.
    own: Option<Box<dyn Encoder>>,
}

impl FrameEncoder {
    pub(super) fn new(gzip: bool) -> FrameEncoder {
        FrameEncoder::with(gzip, None)
    }

    /// An encoder whose events are made by `own` (`None`: in the watch's stored format).
    pub(super) fn with(gzip: bool, own: Option<Box<dyn Encoder>>) -> FrameEncoder {
        let gzip = gzip.then(|| GzipStream {
            crc: Crc::new(),
            started: false,
        });
        FrameEncoder {
            rare: (gzip.is_some() || own.is_some()).then(|| Box::new(Rare { gzip, own })),
        }
    }

    /// The watch's encoder and the stored format `wire` split into what a watch keeps.
    pub(super) fn of(gzip: bool, encoder: WatchEncoder) -> (FrameEncoder, Wire) {
        match encoder {
            WatchEncoder::Stored(wire) => (FrameEncoder::new(gzip), wire),
            // The byte is unused beside an encoder of its own.
            WatchEncoder::Own(own) => (FrameEncoder::with(gzip, Some(own)), Wire::Json),
        }
    }

    /// The frame of an ERROR event carrying `status`, in this watch's format.
    fn error_frame(&self, wire: Wire, status: &watchcache::wire::status::Status) -> Frame {
        match self.rare.as_ref().and_then(|r| r.own.as_ref()) {
            Some(own) => own.error_frame(status),
            None => wire.error_frame(status),
        }
    }

    /// The watch response's Content-Type.
    pub(super) fn content_type(&self, wire: Wire) -> &'static str {
        match self.rare.as_ref().and_then(|r| r.own.as_ref()) {
            Some(own) => own.content_type(),
            None => wire.content_type(),
        }
    }

    fn chunks(&mut self, frame: &Frame) -> Vec<Bytes> {
        match self.rare.as_mut().and_then(|r| r.gzip.as_mut()) {
            None => frame.parts().to_vec(),
            Some(gz) => {
                let mut chunks = Vec::with_capacity(2);
                if !gz.started {
                    chunks.push(Bytes::from_static(&GZIP_HEADER));
                    gz.started = true;
                }
                for p in frame.parts() {
                    gz.crc.update(p);
                }
                chunks.push(deflate_frame(frame.parts()));
                chunks
            }
        }
    }

    /// The chunks for a watch stream's next item, whether the response ends with them, and the
    /// size of the event's frame (before compression) when it is one: an error goes out as an
    /// ERROR event and ends it, and the end of the stream closes the gzip stream.
    /// `wire` is the frames' format.
    pub(super) fn item(
        &mut self,
        item: Option<Result<WatchEvent, Error>>,
        wire: Wire,
    ) -> (Vec<Bytes>, bool, Option<usize>) {
        match item {
            Some(Ok(ev)) => {
                let frame = match self.rare.as_mut().and_then(|r| r.own.as_mut()) {
                    Some(own) => own.frame(&ev),
                    None => wire.frame(&ev),
                };
                let frame = match frame {
                    Ok(f) => f,
                    Err(e) => {
                        // A JSON-stored object its kind's message cannot hold: the watch ends
                        // with an ERROR event naming it, as upstream ends a watch whose object
                        // fails to encode.
                        tracing::error!(error = %e, "protobuf encoding of a watch event failed");
                        let err = ApiError::new(500, "InternalError", e.to_string());
                        let frame = self.error_frame(wire, err.status());
                        return (self.last(&frame), true, None);
                    }
                };
                (self.chunks(&frame), false, Some(frame.len()))
            }
            Some(Err(e)) => {
                let frame = self.error_frame(wire, ApiError::from(e).status());
                (self.last(&frame), true, None)
            }
            None => (self.finish().into_iter().collect(), true, None),
        }
    }

    /// The chunks for a response's last frame, gzip trailer included.
    pub(super) fn last(&mut self, frame: &Frame) -> Vec<Bytes> {
        let mut chunks = self.chunks(frame);
        chunks.extend(self.finish());
        chunks
    }

    /// The end of the gzip stream (header if nothing went out yet, final block, trailer), once,
    /// when compressing.
    pub(super) fn finish(&mut self) -> Option<Bytes> {
        let gz = self.rare.as_mut()?.gzip.take()?;
        let mut out = Vec::with_capacity(GZIP_HEADER.len() + FINAL_EMPTY_BLOCK.len() + 8);
        if !gz.started {
            out.extend_from_slice(&GZIP_HEADER);
        }
        out.extend_from_slice(&FINAL_EMPTY_BLOCK);
        out.extend_from_slice(&gz.crc.sum().to_le_bytes());
        out.extend_from_slice(&gz.crc.amount().to_le_bytes());
        Some(Bytes::from(out))
    }
}

/// `parts` as self-contained deflate blocks ending byte-aligned (a sync flush), none final, from
/// the thread's compressor; the same frame sent to many gzip watches is compressed once per
/// thread (its blocks do not depend on the watch).
fn deflate_frame(parts: &[Bytes; 3]) -> Bytes {
    let size: usize = parts.iter().map(Bytes::len).sum();
    let blocks = DEFLATE.with(|cell| {
        let mut d = cell.try_borrow_mut().ok()?;
        if let Some((_, blocks)) = d
            .recent
            .iter()
            .find(|(p, _)| p.iter().zip(parts).all(|(a, b)| same_bytes(a, b)))
        {
            return Some(blocks.clone());
        }
        let c = d
            .compress
            .get_or_insert_with(|| Compress::new(Compression::fast(), false));
        c.reset();
        let mut out = Vec::with_capacity(size / 2 + 64);
        if !compress_parts(c, parts, &mut out) {
            return None;
        }
        let blocks = Bytes::from(out);
        if size <= MAX_SHARED_FRAME {
            if d.recent.len() == RECENT_FRAMES {
                d.recent.pop_front();
            }
            d.recent.push_back((parts.clone(), blocks.clone()));
        }
        Some(blocks)
    });
    blocks.unwrap_or_else(|| {
        // Not expected (deflate fails only on misuse); stored blocks keep the stream valid.
        tracing::error!("deflate failed; sending the frame as stored blocks");
        let mut out = Vec::with_capacity(size + 16);
        stored_blocks(parts, &mut out);
        Bytes::from(out)
    })
}

fn compress_parts(c: &mut Compress, parts: &[Bytes], out: &mut Vec<u8>) -> bool {
    let last = parts.len().saturating_sub(1);
    for (i, p) in parts.iter().enumerate() {
        let flush = if i == last {
            FlushCompress::Sync
        } else {
            FlushCompress::None
        };
        let mut input: &[u8] = p;
        loop {
            out.reserve(input.len() / 2 + 64);
            let before = c.total_in();
            if c.compress_vec(input, out, flush).is_err() {
                return false;
            }
            let consumed = usize::try_from(c.total_in() - before).unwrap_or(usize::MAX);
            input = input.get(consumed..).unwrap_or_default();
            // A flush is complete once a call leaves output room unused.
            if input.is_empty() && (flush == FlushCompress::None || out.len() < out.capacity()) {
                break;
            }
        }
    }
    true
}

/// `parts` as stored (uncompressed) deflate blocks, none final.
fn stored_blocks(parts: &[Bytes], out: &mut Vec<u8>) {
    let all: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    for piece in all.chunks(u16::MAX as usize) {
        let len = piece.len() as u16;
        out.push(0);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(piece);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::*;
    use crate::auth::Limits;
    use crate::metrics::ServerMetrics;
    use watchcache::deadlines;
    use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef, Selection};
    use watchcache::{WatchEnd, WatchOptions};

    #[test]
    fn a_pump_is_small() {
        // The pump is all an idle watch's response holds (design/performance.md, per idle watch
        // connection): its metrics are one pointer to what the watches of its request key share
        // (its resource's meters, its long-running gauge and duration handles) and two 8-byte
        // stamps; its end and its bookmarks are one deadline, the stream's, in the server's wheel,
        // whose handle it shares; its two limits are one slot; gzip and conversion one box. At
        // 128 B, an HTTP/2 watch stream (its h2 handle, the pump and a pointer: 160 B) makes its
        // connection's node 224 B, a mimalloc block of that size (256 at a 160-byte pump);
        // hyper's HTTP/1.1 body (the pump and a 32-byte iterator) fits 160-byte blocks.
        println!(
            "WatchPump {} B, WatchMeter {} B, Deadline {} B",
            std::mem::size_of::<WatchPump>(),
            std::mem::size_of::<WatchMeter>(),
            std::mem::size_of::<watchcache::deadlines::Deadline>()
        );
        assert!(std::mem::size_of::<WatchPump>() <= 128);
        assert!(std::mem::size_of::<WatchMeter>() <= 24);
        assert!(std::mem::size_of::<watchcache::deadlines::Deadline>() <= 40);
        // Boxed gzip state: a kubelet's watch is never compressed.
        assert!(std::mem::size_of::<FrameEncoder>() <= 8);
    }

    /// A pod on node `n1` in namespace `ns`, as JSON.
    pub(crate) fn pod(name: &str) -> String {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"nodeName": "n1"}})
        .to_string()
    }

    /// A cache of pods at revision 1, its source, and a server's deadlines.
    pub(crate) fn setup() -> (Cache, MemorySource, watch::Sender<bool>, Arc<Deadlines>) {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = MemorySource::new(writer, 1, []);
        let (tx, rx) = watch::channel(false);
        (cache, src, tx, Deadlines::new(Some(rx), deadlines::TICK))
    }

    /// A started watch of every pod after revision 1, ending at `deadline`.
    pub(crate) async fn pump(
        cache: &Cache,
        wheel: &Arc<Deadlines>,
        deadline: Instant,
        gzip: bool,
    ) -> WatchPump {
        let opts = WatchOptions::new(Selection::all(), watchcache::ResourceVersion::At(1));
        started(cache, wheel, deadline, gzip, opts).await
    }

    /// A started watch with `opts`, ending at `deadline`.
    async fn started(
        cache: &Cache,
        wheel: &Arc<Deadlines>,
        deadline: Instant,
        gzip: bool,
        opts: WatchOptions,
    ) -> WatchPump {
        let end = WatchEnd {
            wheel: Arc::clone(wheel),
            at: deadline,
        };
        let stream = cache.watch_until(opts, end).await.unwrap();
        let w = StartedWatch {
            stream,
            _slot: Limits::new(0, 1, 0, Duration::ZERO).watch(None).unwrap(),
        };
        let meter = ServerMetrics::default().watch(cache.definition(), None);
        WatchPump::events(w, gzip, WatchEncoder::Stored(Wire::Json), meter)
    }

    fn watchers(cache: &Cache) -> u64 {
        let s = cache.stats();
        s.routed_watchers + s.unrouted_watchers
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_ends_a_watch_with_its_final_chunk() {
        let (cache, src, _tx, wheel) = setup();
        let start = Instant::now();
        let mut p = pump(&cache, &wheel, start + Duration::from_secs(5), true).await;
        src.put("/registry/pods/ns/a", pod("a")).unwrap();
        let event: Vec<u8> = p.next().await.unwrap().concat();
        assert!(!event.is_empty());
        // Then nothing until the deadline, which ends the gzip stream: its final block and
        // trailer, the response's last chunk.
        let last = tokio::time::timeout(Duration::from_secs(10), p.next())
            .await
            .expect("ended at the deadline")
            .unwrap();
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(5) && took <= Duration::from_secs(6),
            "{took:?}"
        );
        let mut gz = event;
        gz.extend(last.concat());
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
            .unwrap();
        assert!(text.contains("\"ADDED\""), "{text}");
        assert!(p.next().await.is_none());
        assert!(!p.shutting_down());
        // The watch is gone from the cache and from the wheel.
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_every_watch() {
        let (cache, _src, tx, wheel) = setup();
        let far = Instant::now() + Duration::from_secs(3600);
        let mut tasks = Vec::new();
        for gzip in [false, true, false] {
            let mut p = pump(&cache, &wheel, far, gzip).await;
            tasks.push(tokio::spawn(async move {
                let mut chunks = 0;
                while let Some(c) = p.next().await {
                    chunks += c.len();
                }
                (chunks, p.shutting_down())
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!((watchers(&cache), wheel.waiting()), (3, 3));
        tx.send(true).unwrap();
        let mut ended = Vec::new();
        for t in tasks {
            ended.push(
                tokio::time::timeout(Duration::from_millis(100), t)
                    .await
                    .expect("ended at shutdown")
                    .unwrap(),
            );
        }
        // The gzip watch still sent its end; each says why it ended.
        assert_eq!(ended, [(0, true), (1, true), (0, true)]);
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }

    /// A served watch with bookmarks holds one entry, in the server's wheel, for its end and its
    /// bookmarks (none in the cache's): it gets its periodic bookmarks, the one 2 s before its
    /// end, and ends at its end; another ends at shutdown. Each never early, at most a tick late.
    #[tokio::test(start_paused = true)]
    async fn a_served_watch_holds_one_entry_for_its_end_and_bookmarks() {
        let every = Duration::from_secs(5);
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default().bookmark_interval(every),
        );
        let _src = MemorySource::new(writer, 1, []);
        let (tx, rx) = watch::channel(false);
        let wheel = Deadlines::new(Some(rx), deadlines::TICK);
        let opts = || {
            WatchOptions::new(Selection::all(), watchcache::ResourceVersion::At(1)).with_bookmarks()
        };
        let start = Instant::now();
        let within_a_tick = |at: u64| {
            let took = start.elapsed();
            let at = Duration::from_secs(at);
            assert!(
                took >= at && took <= at + deadlines::TICK,
                "{at:?}: {took:?}"
            );
        };
        let mut p = started(
            &cache,
            &wheel,
            start + Duration::from_secs(16),
            false,
            opts(),
        )
        .await;
        // Periodic bookmarks at 5 s and 10 s, the end's at 14 s; then the end at 16 s.
        for at in [5, 10, 14] {
            let chunk = p.next().await.unwrap().concat();
            within_a_tick(at);
            let text = String::from_utf8(chunk).unwrap();
            assert!(text.contains("\"BOOKMARK\""), "{text}");
            assert_eq!((wheel.waiting(), cache.waiting_bookmarks()), (1, 0));
        }
        assert!(p.next().await.unwrap().is_empty());
        within_a_tick(16);
        assert!(p.next().await.is_none());
        assert!(!p.shutting_down());
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));

        // Shutdown ends a watch between its bookmarks, at once.
        let mut q = started(
            &cache,
            &wheel,
            start + Duration::from_secs(3600),
            false,
            opts(),
        )
        .await;
        let bookmark = q.next().await.unwrap().concat();
        assert!(
            String::from_utf8(bookmark)
                .unwrap()
                .contains("\"BOOKMARK\"")
        );
        within_a_tick(16 + 5);
        assert_eq!((wheel.waiting(), cache.waiting_bookmarks()), (1, 0));
        let stopping = Instant::now();
        tx.send(true).unwrap();
        assert!(q.next().await.unwrap().is_empty());
        assert!(q.next().await.is_none());
        assert!(stopping.elapsed() < Duration::from_millis(100));
        assert!(q.shutting_down());
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_watch_leaves_nothing_in_the_wheel() {
        let (cache, _src, _tx, wheel) = setup();
        let mut p = pump(
            &cache,
            &wheel,
            Instant::now() + Duration::from_secs(60),
            false,
        )
        .await;
        // Polled once and cancelled: it waits in the wheel and the cache, cancel-safe.
        assert!(
            tokio::time::timeout(Duration::from_millis(10), p.next())
                .await
                .is_err()
        );
        assert_eq!((watchers(&cache), wheel.waiting()), (1, 1));
        drop(p);
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use std::io::Read;

    fn gunzip(chunks: &[Bytes]) -> Vec<u8> {
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut d = flate2::read::GzDecoder::new(&all[..]);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        // One member, nothing after it.
        assert_eq!(d.into_inner().len(), 0);
        out
    }

    fn frame(text: &str) -> Frame {
        Frame::error(Bytes::from(text.to_owned()))
    }

    #[test]
    fn frames_compressed_apart_make_one_valid_gzip_stream() {
        let mut enc = FrameEncoder::new(true);
        let mut chunks = Vec::new();
        let mut plain = Vec::new();
        let big = format!(r#"{{"pad":"{}"}}"#, "abc".repeat(40_000));
        for text in [r#"{"a":1}"#, big.as_str(), r#"{"a":1}"#, ""] {
            let f = frame(text);
            for p in f.parts() {
                plain.extend_from_slice(p);
            }
            let c = enc.chunks(&f);
            // Each chunk is decodable up to its end: a client sees the event at once.
            let so_far: Vec<u8> = chunks
                .iter()
                .chain(&c)
                .flat_map(|b| b.iter().copied())
                .skip(GZIP_HEADER.len())
                .collect();
            let mut d = flate2::read::DeflateDecoder::new(&so_far[..]);
            let mut partial = Vec::new();
            // The stream has no end yet: the decoder reports it once the input runs out.
            let _ = d.read_to_end(&mut partial);
            assert_eq!(partial, plain, "decodable after each frame");
            chunks.extend(c);
        }
        chunks.extend(enc.finish());
        assert_eq!(enc.finish(), None, "the trailer goes out once");
        assert_eq!(gunzip(&chunks), plain);
        let compressed: usize = chunks.iter().map(Bytes::len).sum();
        assert!(
            compressed < plain.len() / 10,
            "{compressed} of {}",
            plain.len()
        );
    }

    #[test]
    fn a_frame_sent_to_many_gzip_watches_is_compressed_once_per_thread() {
        let body = Bytes::from(format!(r#"{{"pad":"{}"}}"#, "xy".repeat(500)));
        let f = frame_of(&body);
        let mut a = FrameEncoder::new(true);
        let mut b = FrameEncoder::new(true);
        let ca = a.last(&f);
        let cb = b.last(&f);
        // The header, the shared blocks, the trailer.
        assert_eq!(ca.len(), 3);
        assert!(same_bytes(&ca[1], &cb[1]), "the blocks are shared");
        assert_eq!(gunzip(&ca), gunzip(&cb));
        // Equal bytes elsewhere in memory are another frame: compressed again, equally valid.
        let copy = Bytes::from(body.to_vec());
        let mut c = FrameEncoder::new(true);
        let cc = c.last(&frame_of(&copy));
        assert!(!same_bytes(&cc[1], &ca[1]));
        assert_eq!(gunzip(&cc), gunzip(&ca));
        // Frames over the sharing limit are compressed for each watch.
        let big = Bytes::from("z".repeat(MAX_SHARED_FRAME + 1));
        let (mut d, mut e) = (FrameEncoder::new(true), FrameEncoder::new(true));
        let (cd, ce) = (d.last(&frame_of(&big)), e.last(&frame_of(&big)));
        assert!(!same_bytes(&cd[1], &ce[1]));
        assert_eq!(gunzip(&cd), gunzip(&ce));
    }

    fn frame_of(body: &Bytes) -> Frame {
        Frame::error(body.clone())
    }

    #[test]
    fn a_response_with_no_frames_and_stored_blocks_are_valid_gzip() {
        let mut enc = FrameEncoder::new(true);
        let end = enc.finish().unwrap();
        assert_eq!(gunzip(&[end]), b"");
        let f = frame(&"xyz".repeat(30_000));
        let mut out = GZIP_HEADER.to_vec();
        stored_blocks(f.parts(), &mut out);
        out.extend_from_slice(&FINAL_EMPTY_BLOCK);
        let mut crc = Crc::new();
        for p in f.parts() {
            crc.update(p);
        }
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&crc.amount().to_le_bytes());
        let plain: Vec<u8> = f.parts().iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(gunzip(&[Bytes::from(out)]), plain);
    }

    /// A measurement, not a check: CPU per gzip frame of a ~2 KB pod event, with a deflate state
    /// per watch (before) and with the thread's compressor reset per frame (now). Run with
    /// `cargo test --release --lib gzip_frame_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement; run it in release"]
    fn gzip_frame_cost() {
        use std::io::Write;
        let pod = format!(
            r#"{{"metadata":{{"name":"pod-1","namespace":"ns-1","labels":{{"app":"web"}}}},"spec":{{"nodeName":"node-7","containers":[{{"name":"main","image":"busybox"}}]}},"status":{{"phase":"Running","pad":"{}"}}}}"#,
            (0..1800)
                .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
                .collect::<String>()
        );
        let f = Frame::error(Bytes::from(pod));
        let n = 20_000u32;
        let mut before = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
        let t = std::time::Instant::now();
        let mut out_before = 0;
        for _ in 0..n {
            for p in f.parts() {
                before.write_all(p).unwrap();
            }
            before.flush().unwrap();
            out_before += std::mem::take(before.get_mut()).len();
        }
        let per_before = t.elapsed() / n;
        // Distinct frames (equal bytes at other addresses), so none is shared.
        let frames: Vec<Frame> = (0..n)
            .map(|_| Frame::error(Bytes::from(f.parts()[1].to_vec())))
            .collect();
        let mut enc = FrameEncoder::new(true);
        let t = std::time::Instant::now();
        let mut out_now = 0;
        for f in &frames {
            out_now += enc.chunks(f).iter().map(Bytes::len).sum::<usize>();
        }
        let per_now = t.elapsed() / n;
        // The same event to 1 000 gzip watches: compressed once, then shared.
        let t = std::time::Instant::now();
        let mut shared_out = 0;
        for _ in 0..n / 1000 {
            let fresh = Frame::error(Bytes::from(f.parts()[1].to_vec()));
            for _ in 0..1000 {
                let mut w = FrameEncoder {
                    rare: Some(Box::new(Rare {
                        gzip: Some(GzipStream {
                            crc: Crc::new(),
                            started: true,
                        }),
                        own: None,
                    })),
                };
                shared_out += w.chunks(&fresh).iter().map(Bytes::len).sum::<usize>();
            }
        }
        println!(
            "the same frame to 1 000 gzip watches: {:?} per watch, {} B/frame",
            t.elapsed() / n,
            shared_out / n as usize
        );
        let mut c = Compress::new(Compression::fast(), false);
        let t = std::time::Instant::now();
        for _ in 0..n {
            c.reset();
        }
        let per_reset = t.elapsed() / n;
        println!("of which a compressor reset: {per_reset:?}");
        let size: usize = f.parts().iter().map(Bytes::len).sum();
        println!(
            "{size} B frame: state per watch {per_before:?} -> {} B/frame; thread compressor reset per frame {per_now:?} -> {} B/frame",
            out_before / n as usize,
            out_now / n as usize
        );
    }

    #[test]
    fn an_encoder_is_a_few_inline_bytes() {
        assert!(std::mem::size_of::<FrameEncoder>() <= 32);
        let mut enc = FrameEncoder::new(true);
        let chunks = enc.last(&frame(r#"{"type":"ERROR"}"#));
        let mut plain = Vec::new();
        for p in frame(r#"{"type":"ERROR"}"#).parts() {
            plain.extend_from_slice(p);
        }
        assert_eq!(gunzip(&chunks), plain);
    }
}
