//! The body of a WATCH response: a chunked stream of `{"type":...,"object":...}` lines. Each event's
//! frame goes onto the socket as the cache's shared bytes (three chunks, no copy); with gzip, each
//! frame is compressed and flushed so the client sees it at once.

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
use crate::watch_stream::WatchStream;

/// Holds one slot of the concurrent-watcher limit for as long as the body lives.
pub struct WatcherSlot(pub Arc<AtomicUsize>);

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

struct State {
    events: WatchStream,
    deadline: Instant,
    shutdown: watch::Receiver<bool>,
    gzip: Option<GzEncoder<Vec<u8>>>,
    done: bool,
    _slot: WatcherSlot,
}

impl State {
    /// The chunks for one frame: the shared pieces, or one compressed and flushed chunk.
    fn chunks(&mut self, frame: &Frame) -> Vec<Bytes> {
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

    fn finish(&mut self) -> Vec<Bytes> {
        self.done = true;
        match self.gzip.take() {
            Some(gz) => vec![Bytes::from(gz.finish().unwrap_or_default())],
            None => Vec::new(),
        }
    }
}

/// The response body for a watch that ends at `deadline`, on server shutdown, or after an error
/// (sent as an ERROR event with its `Status`).
pub fn body(
    events: WatchStream,
    deadline: Instant,
    shutdown: watch::Receiver<bool>,
    gzip: bool,
    slot: WatcherSlot,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let gzip = gzip.then(|| GzEncoder::new(Vec::new(), Compression::fast()));
    let state = State {
        events,
        deadline,
        shutdown,
        gzip,
        done: false,
        _slot: slot,
    };
    stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        enum Next {
            Event(Option<Result<crate::watch_stream::WatchEvent, crate::error::Error>>),
            End,
        }
        let next = tokio::select! {
            ev = st.events.next() => Next::Event(ev),
            _ = tokio::time::sleep_until(st.deadline) => Next::End,
            _ = st.shutdown.wait_for(|stop| *stop) => Next::End,
        };
        let chunks = match next {
            Next::Event(Some(Ok(ev))) => st.chunks(&ev.frame()),
            Next::Event(Some(Err(e))) => {
                let mut out = st.chunks(&Frame::error(ApiError::from(e).status_json()));
                out.extend(st.finish());
                out
            }
            Next::Event(None) | Next::End => st.finish(),
        };
        Some((stream::iter(chunks.into_iter().map(Ok)), st))
    })
    .flatten()
}
