//! A watch response body served by hyper (a watch that is not a connection's first request): the
//! pump's chunks as a stream. Each event's frame goes out as the cache's shared bytes.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};

use crate::server::watch::pump::WatchPump;

/// The body of a watch response.
pub(crate) fn body(pump: WatchPump) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    stream::unfold(pump, |mut pump| async move {
        let chunks = pump.next().await?;
        Some((stream::iter(chunks.into_iter().map(Ok)), pump))
    })
    .flatten()
}
