//! The body of a WATCH response served by hyper: a chunked stream of `{"type":...,"object":...}`
//! lines. Each event's frame goes out as the cache's shared bytes (three chunks, no copy); with
//! gzip, each frame is compressed and flushed so the client sees it at once. (Most watches are
//! served by the fast path in `watch_conn.rs`, which shares [`FrameEncoder`].)

use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use futures_util::{Stream, StreamExt, stream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::status::ApiError;
use crate::encode::Frame;
use crate::error::Error;
use crate::watch_stream::{WatchEvent, WatchStream};

/// Holds one slot of the concurrent-watcher limit for as long as the watch lives.
pub struct WatcherSlot(pub Arc<AtomicUsize>);

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A started watch: its events, when it must end, and its slot.
pub struct WatchEvents {
    pub stream: WatchStream,
    pub deadline: Instant,
    /// Held for its `Drop`: the watch counts against the limit while it lives.
    pub _slot: WatcherSlot,
}

/// Turns frames into response chunks: the shared pieces, or gzip-compressed and flushed.
pub struct FrameEncoder {
    gzip: Option<GzEncoder<Vec<u8>>>,
}

impl FrameEncoder {
    pub fn new(gzip: bool) -> FrameEncoder {
        FrameEncoder {
            gzip: gzip.then(|| GzEncoder::new(Vec::new(), Compression::fast())),
        }
    }

    pub fn chunks(&mut self, frame: &Frame) -> Vec<Bytes> {
        match &mut self.gzip {
            None => frame.parts().to_vec(),
            Some(gz) => {
                for p in frame.parts() {
                    gz.write_all(p)
                        .unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
                }
                gz.flush()
                    .unwrap_or_else(|_| unreachable!("flushing to a Vec cannot fail"));
                vec![Bytes::from(std::mem::take(gz.get_mut()))]
            }
        }
    }

    /// The chunks for a watch stream's next item, and whether the response ends with them: an error
    /// goes out as an ERROR event and ends it, and the end of the stream closes the gzip stream.
    pub fn item(&mut self, item: Option<Result<WatchEvent, Error>>) -> (Vec<Bytes>, bool) {
        match item {
            Some(Ok(ev)) => (self.chunks(&ev.frame()), false),
            Some(Err(e)) => (
                self.last(&Frame::error(ApiError::from(e).status_json())),
                true,
            ),
            None => (self.finish().into_iter().collect(), true),
        }
    }

    /// The chunks for a response's last frame, gzip trailer included.
    pub fn last(&mut self, frame: &Frame) -> Vec<Bytes> {
        let mut chunks = self.chunks(frame);
        chunks.extend(self.finish());
        chunks
    }

    /// The gzip trailer, once, when compressing.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.gzip
            .take()
            .map(|gz| Bytes::from(gz.finish().unwrap_or_default()))
    }
}

struct State {
    w: WatchEvents,
    shutdown: watch::Receiver<bool>,
    encoder: FrameEncoder,
    done: bool,
}

/// The response body for a watch that ends at its deadline, on server shutdown, or after an error
/// (sent as an ERROR event with its `Status`).
pub fn body(
    w: WatchEvents,
    shutdown: watch::Receiver<bool>,
    gzip: bool,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let state = State {
        w,
        shutdown,
        encoder: FrameEncoder::new(gzip),
        done: false,
    };
    stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        enum Next {
            Event(Option<Result<WatchEvent, Error>>),
            End,
        }
        let next = tokio::select! {
            ev = st.w.stream.next() => Next::Event(ev),
            _ = tokio::time::sleep_until(st.w.deadline) => Next::End,
            _ = st.shutdown.wait_for(|stop| *stop) => Next::End,
        };
        let (chunks, done) = match next {
            Next::Event(item) => st.encoder.item(item),
            Next::End => (st.encoder.finish().into_iter().collect(), true),
        };
        st.done = done;
        Some((stream::iter(chunks.into_iter().map(Ok)), st))
    })
    .flatten()
}
