//! The one loop every watch response runs: wait for the next event, the watch's deadline or server
//! shutdown, and turn what came into response chunks. The fast path writes the chunks to its
//! socket; hyper's body yields them.

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;

use crate::server::metrics::WatchMeter;
use crate::server::watch::StartedWatch;
use crate::server::watch::chunks::{FrameEncoder, Wire};
use crate::wire::Frame;
use crate::wire::convert::WatchConverter;

/// A watch response in progress.
pub(crate) struct WatchPump {
    phase: Phase,
    shutdown: watch::Receiver<bool>,
    encoder: FrameEncoder,
    /// The frames' format.
    wire: Wire,
    /// Set when the watch is answered as Table or PartialObjectMetadata (see `wire/convert.rs`). Boxed:
    /// a plain JSON watch (nearly all) carries one pointer, not the state.
    convert: Option<Box<WatchConverter>>,
    /// The watch's metrics (`None` for a response of one frame).
    meter: Option<WatchMeter>,
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
        meter: WatchMeter,
    ) -> WatchPump {
        WatchPump {
            phase: Phase::Streaming(w),
            shutdown,
            encoder: FrameEncoder::new(gzip),
            wire,
            convert: convert.map(Box::new),
            meter: Some(meter),
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
            meter: None,
        }
    }

    /// The next chunks to send, or `None` once the response is complete.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped before it completes, it loses nothing (the watch stream keeps its
    /// events until they are taken).
    pub async fn next(&mut self) -> Option<Vec<Bytes>> {
        // Asked for more: the writer took the last chunks.
        self.written();
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
            Some(ev) => {
                let received = ev
                    .as_ref()
                    .and_then(|r| r.as_ref().ok())
                    .and_then(|e| e.received_at());
                let (chunks, done, sent) =
                    self.encoder
                        .item(ev, self.convert.as_deref_mut(), self.wire);
                if let (Some(m), Some(len)) = (&mut self.meter, sent) {
                    m.sent(len, received);
                }
                (chunks, done)
            }
            None => (self.encoder.finish().into_iter().collect(), true),
        };
        if done {
            self.phase = Phase::Done;
        }
        Some(chunks)
    }

    /// Records that the chunks returned last were written to the connection (the fast path
    /// calls it after its write; hyper's body when asked for more).
    pub fn written(&mut self) {
        if let Some(m) = &mut self.meter {
            m.written();
        }
    }

    /// Whether the server is shutting down (a response that ended for that closes its
    /// connection).
    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pump_is_small() {
        // The pump lives in every idle watch's task (design/performance.md, per idle watch
        // connection): its metrics are one shared pointer, the watch's long-running gauge and
        // duration handles, and two instants.
        println!(
            "WatchPump {} B, WatchMeter {} B",
            std::mem::size_of::<WatchPump>(),
            std::mem::size_of::<WatchMeter>()
        );
        assert!(std::mem::size_of::<WatchMeter>() <= 72);
    }
}
