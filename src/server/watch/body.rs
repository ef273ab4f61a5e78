//! A watch response body served by hyper (a watch that is not a connection's first request): the
//! pump's chunks as a stream. Each event's frame goes out as the cache's shared bytes. Empty
//! pieces are dropped: over HTTP/2 each chunk is a DATA frame, and an empty one is 9 bytes of
//! nothing that clients count as abuse (h2's client closes the connection after 100 of them,
//! `too_many_data_frames`; found by `watchcache bench --model kubelet`).

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};

use crate::server::watch::pump::WatchPump;

/// The body of a watch response.
pub(crate) fn body(pump: WatchPump) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    stream::unfold(pump, |mut pump| async move {
        let chunks = pump.next().await?;
        let chunks = chunks.into_iter().filter(|c| !c.is_empty()).map(Ok);
        Some((stream::iter(chunks), pump))
    })
    .flatten()
}
