//! Watch frames as response chunks: the cache's shared pieces as they are, or compressed into the
//! response's gzip stream and flushed, so the client sees each event at once. Both watch paths
//! (the fast path and hyper's body) encode through this one type.
//!
//! ## gzip without a deflate state per watch
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
//! ## Invariants
//! - The thread's compressor is only used inside one synchronous call (no `.await`), so no other
//!   watch can see it mid-frame.
//! - Every chunk a gzip encoder returns ends on a byte boundary outside any final block, until
//!   `finish`, which returns the final block and trailer once.

use std::cell::RefCell;
use std::collections::VecDeque;

use bytes::Bytes;
use flate2::{Compress, Compression, Crc, FlushCompress};

pub(crate) use crate::http::negotiate::Wire;
use crate::http::status::ApiError;
use watchcache::Error;
use watchcache::WatchEvent;
use watchcache::wire::format::WatchEncoder;
use watchcache::wire::{Encoder, Frame};

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
mod tests {
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
