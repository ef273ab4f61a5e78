//! A watch response body served by hyper's HTTP/1.1 connection (a watch that is not a
//! connection's first request): the pump's chunks as a stream. Each event's frame goes out as the cache's shared bytes. Empty
//! pieces are dropped: over HTTP/2 each chunk is a DATA frame, and an empty one is 9 bytes of
//! nothing that clients count as abuse (h2's client closes the connection after 100 of them,
//! `too_many_data_frames`; found by `watchcache-bench --model kubelet`).
//!
//! Hand-written, not a `stream::unfold` around `next()`: idle, the body holds the pump and an
//! empty iterator, no pending future (design/performance.md, "HTTP/2 over TLS").

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;

use crate::watch::pump::WatchPump;

/// A watch's response as the router returns it: its head, an empty body, and its pump in the
/// response's extensions. Each transport takes the pump out: hyper's HTTP/1.1 connection as a
/// [`WatchBody`] ([`into_body`]), the HTTP/2 connection (`transport/http2.rs`) by sending the pump's
/// chunks itself, with neither axum's box around a body nor hyper's stream. (An extension must be
/// `Clone`: the pump is taken from a shared slot, once.)
#[derive(Clone)]
pub(crate) struct WatchResponse(Arc<parking_lot::Mutex<Option<WatchPump>>>);

impl WatchResponse {
    pub(crate) fn new(pump: WatchPump) -> Self {
        WatchResponse(Arc::new(parking_lot::Mutex::new(Some(pump))))
    }

    /// The pump (`None` once taken).
    pub(crate) fn take(&self) -> Option<WatchPump> {
        self.0.lock().take()
    }
}

/// `resp` with its watch's pump, if it has one, as its body (hyper's HTTP/1.1 connection).
pub(crate) fn into_body(mut resp: axum::response::Response) -> axum::response::Response {
    if let Some(pump) = resp
        .extensions_mut()
        .remove::<WatchResponse>()
        .and_then(|w| w.take())
    {
        // The router measured the empty body that stood in for the pump.
        resp.headers_mut().remove(http::header::CONTENT_LENGTH);
        *resp.body_mut() = axum::body::Body::from_stream(body(pump));
    }
    resp
}

/// The body of a watch response.
pub(crate) struct WatchBody {
    pump: WatchPump,
    /// What is left of the pump's last chunks.
    chunks: std::vec::IntoIter<Bytes>,
}

/// The body of a watch response.
pub(crate) fn body(pump: WatchPump) -> WatchBody {
    WatchBody {
        pump,
        chunks: Vec::new().into_iter(),
    }
}

impl Stream for WatchBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(c) = this.chunks.by_ref().find(|c| !c.is_empty()) {
                return Poll::Ready(Some(Ok(c)));
            }
            match this.pump.poll_chunks(cx) {
                Poll::Ready(Some(chunks)) => this.chunks = chunks.into_iter(),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => {
                    // The spent iterator still owns the last event's `Vec`: an idle watch
                    // should not keep it until its next event.
                    this.chunks = Vec::new().into_iter();
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// axum boxes this body and an idle HTTP/1.1 watch holds it for hours: 160 B (192 before
    /// the pump's limits slot, gzip and conversion box and deadlines were merged, 304 before
    /// the encoder's gzip state was boxed, 280 before one deadline and a smaller meter).
    #[test]
    fn a_watch_body_is_small() {
        let size = std::mem::size_of::<super::WatchBody>();
        assert!(size <= 160, "{size}");
    }
}
