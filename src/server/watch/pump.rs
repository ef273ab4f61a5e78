//! The one loop every watch response runs: wait for the next event, the watch's deadline or server
//! shutdown, and turn what came into response chunks. The fast path writes the chunks to its
//! socket; hyper's body yields them.

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;

use crate::cache::Frame;
use crate::server::convert::WatchConverter;
use crate::server::watch::StartedWatch;
use crate::server::watch::frames::{FrameEncoder, Wire};

/// A watch response in progress.
pub(crate) struct WatchPump {
    phase: Phase,
    shutdown: watch::Receiver<bool>,
    encoder: FrameEncoder,
    /// The frames' format.
    wire: Wire,
    /// Set when the watch is answered as Table or PartialObjectMetadata (see `convert.rs`). Boxed:
    /// a plain JSON watch (nearly all) carries one pointer, not the state.
    convert: Option<Box<WatchConverter>>,
}

enum Phase {
    /// Streaming the watch's events.
    Streaming(StartedWatch),
    /// A response of one frame (the ERROR event of a watch that could not start).
    Single(Frame),
    Done,
}

impl WatchPump {
    /// Streams a started watch until its deadline, server shutdown, an error, or its end.
    /// `wire` is the frames' format; `convert` answers the events as Table or
    /// PartialObjectMetadata.
    pub fn events(
        w: StartedWatch,
        shutdown: watch::Receiver<bool>,
        gzip: bool,
        wire: Wire,
        convert: Option<WatchConverter>,
    ) -> WatchPump {
        WatchPump {
            phase: Phase::Streaming(w),
            shutdown,
            encoder: FrameEncoder::new(gzip),
            wire,
            convert: convert.map(Box::new),
        }
    }

    /// A response made of one last frame.
    pub fn single(frame: Frame, shutdown: watch::Receiver<bool>, gzip: bool) -> WatchPump {
        WatchPump {
            phase: Phase::Single(frame),
            shutdown,
            encoder: FrameEncoder::new(gzip),
            wire: Wire::Json,
            convert: None,
        }
    }

    /// The next chunks to send, or `None` once the response is complete.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped before it completes, it loses nothing (the watch stream keeps its
    /// events until they are taken).
    pub async fn next(&mut self) -> Option<Vec<Bytes>> {
        let w = match &mut self.phase {
            Phase::Done => return None,
            Phase::Single(frame) => {
                let chunks = self.encoder.last(frame);
                self.phase = Phase::Done;
                return Some(chunks);
            }
            Phase::Streaming(w) => w,
        };
        let item = tokio::select! {
            ev = w.stream.next() => Some(ev),
            _ = tokio::time::sleep_until(w.deadline) => None,
            // (mapped: the guard it returns must not outlive the select)
            _ = self.shutdown.wait_for(|stop| *stop).map(|_| ()) => None,
        };
        let (chunks, done) = match item {
            Some(ev) => self
                .encoder
                .item(ev, self.convert.as_deref_mut(), self.wire),
            None => (self.encoder.finish().into_iter().collect(), true),
        };
        if done {
            self.phase = Phase::Done;
        }
        Some(chunks)
    }

    /// Whether the server is shutting down (a response that ended for that closes its
    /// connection).
    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}
