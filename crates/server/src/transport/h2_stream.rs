//! One stream of an HTTP/2 connection served by `h2_conn.rs`: its request handed to the
//! connection's [`Service`] (the router, given down by `lib.rs`), then its response sent under
//! h2's flow control. A state machine, polled by the connection's own task.
//!
//! Why not hyper's HTTP/2 server: a stream there is hyper's `H2Stream` (128 B, boxed by the
//! executor), which holds the response body (axum's box: a watch's 280-byte body in a 320-byte
//! block), and a node in the connection's set of streams (80 B); an idle kubelet watch held all
//! three for hours. Here an idle watch is one node holding its h2 handle and its pump inline
//! ([`Stream::Watch`], 160 B: with the set's own fields, a 224-byte block): design/performance.md,
//! "Watches sent by our own HTTP/2 streams".
//!
//! What hyper's server did is done here the same way (hyper 1.x, `proto/h2/server.rs`): the
//! response's connection-specific headers are stripped, `date` is set when missing, an exact
//! body length becomes `content-length`, a body is sent one frame at a time once the stream has
//! any capacity (a chunk in hand reserves one byte, so an idle body pins no window: hyper #4003),
//! a client's RST_STREAM ends the stream (and with it its request's task), a failing body or
//! handler resets the stream with INTERNAL_ERROR.
//!
//! Invariants:
//! - A request other than a watch runs in a tokio task of its own, so that its work does not
//!   hold up the connection's other streams; the stream holds the task's handle and aborts it
//!   when dropped (a client's reset, or the connection's end).
//! - A watch's chunks are taken from its pump only when the previous ones are handed to h2, and
//!   handed only once the stream has capacity: a client that stops reading stops its pump (its
//!   watcher's queue, then the cache's overflow rules, take over).
//! - A stream that panics ends alone: it is reset, and the connection's other streams go on.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, Request, header};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tracing::{debug, error, warn};

use crate::transport::conn::ConnInfo;
use crate::transport::deadline::ResponseDeadline;

/// What serves an HTTP/2 connection's requests, given down by the layers above (the router, and
/// a watch's pump as a response's body), as hyper's connections take a `Service`: this module
/// knows h2 and nothing of what it serves.
pub(crate) trait Service: Clone + Send + Unpin + 'static {
    /// A response body the stream sends chunk by chunk itself (a watch's pump). Held inline by
    /// the stream (a type parameter, not a trait object): an idle watch is one allocation, and
    /// an event costs no dynamic call.
    type Chunks: Chunks;
    /// A request's answer.
    type Future: Future<Output = Result<Response, Infallible>> + Send + 'static;

    /// Answers `req`.
    fn call(&self, req: Request<Body>) -> Self::Future;

    /// Whether `req` decides little before its body streams (a watch): its answer is then
    /// polled by the stream itself, not in a task of its own.
    fn in_place(&self, req: &Request<Body>) -> bool;

    /// The chunked body a response carries instead of its `Body` (which then stands empty),
    /// taken out of its head.
    fn chunks(head: &mut http::response::Parts) -> Option<Self::Chunks>;

    /// The answer to a request whose handler panicked (a 500, as the HTTP/1.1 path answers).
    fn failed() -> Response;
}

/// A response body sent as it comes: the next chunks, `None` once it is complete, `Pending`
/// until there are more (`cx` is then woken).
pub(crate) trait Chunks: Send + Unpin + 'static {
    /// The next chunks to send.
    fn poll_chunks(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<Bytes>>>;
}

/// One HTTP/2 stream, from its request to the end of its response.
// The watch is inline on purpose: it is what an idle stream holds, for hours, and a box would be
// one more allocation each; the other states are short.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Stream<S: Service> {
    /// The router has the request (a watch in place, any other request in its own task).
    Handling {
        reply: SendResponse<Bytes>,
        response: BoxFuture<'static, Response>,
    },
    /// A response body being sent (boxed: a LIST's state does not enlarge every watch's).
    Body(Box<BodyPipe>),
    /// A watch's events being sent: what an idle watch holds.
    Watch(WatchPipe<S::Chunks>),
    Done,
}

/// A response body and the stream it goes to.
pub(crate) struct BodyPipe {
    tx: SendStream<Bytes>,
    body: Body,
    /// A data frame taken from the body, waiting for capacity (with whether it ends the body).
    pending: Option<(Bytes, bool)>,
    /// `--request-timeout` from the request's start (`deadline.rs`): past it the stream is
    /// reset, and the body (a LIST's snapshot) dropped.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// A watch's pump and the stream its chunks go to.
pub(crate) struct WatchPipe<C> {
    tx: SendStream<Bytes>,
    pump: C,
    /// The pump's last chunks, when the stream had no capacity for them (a client behind on
    /// reading). Boxed: an idle watch holds 8 bytes for it, not a 32-byte iterator.
    blocked: Option<Box<std::vec::IntoIter<Bytes>>>,
}

impl<S: Service> Stream<S> {
    /// Starts a stream: its request goes to `service`, with what is known of the connection.
    pub(super) fn start(
        req: Request<RecvStream>,
        reply: SendResponse<Bytes>,
        service: &S,
        conn: &Arc<ConnInfo>,
    ) -> Stream<S> {
        let (mut parts, recv) = req.into_parts();
        let body = if recv.is_end_stream() {
            Body::empty()
        } else {
            let framing = H2Framing::default();
            parts.extensions.insert(framing.clone());
            Body::new(RecvBody::new(recv, &parts.headers, framing))
        };
        let mut req = Request::from_parts(parts, body);
        req.extensions_mut().insert(Arc::clone(conn));
        let in_place = service.in_place(&req);
        let fut = service.call(req);
        let response: BoxFuture<'static, Response> = if in_place {
            // A watch decides little before its body streams: polled here, no task.
            Box::pin(async move {
                match fut.await {
                    Ok(r) => r,
                    Err(e) => match e {},
                }
            })
        } else {
            let mut task = AbortOnDrop(tokio::spawn(fut));
            Box::pin(async move {
                match (&mut task.0).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => match e {},
                    // The handler panicked (a bug): answer 500, as the HTTP/1.1 path does.
                    Err(e) => {
                        warn!(error = %e, "request handler failed");
                        S::failed()
                    }
                }
            })
        };
        Stream::Handling { reply, response }
    }

    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match self {
                Stream::Handling { reply, response } => {
                    let resp = match response.as_mut().poll(cx) {
                        Poll::Ready(r) => r,
                        Poll::Pending => {
                            // A client's RST_STREAM cancels the request (its task is aborted
                            // when this stream is dropped).
                            if let Poll::Ready(r) = reply.poll_reset(cx) {
                                debug!(reason = ?r, "HTTP/2 stream reset before its response");
                                *self = Stream::Done;
                                return Poll::Ready(());
                            }
                            return Poll::Pending;
                        }
                    };
                    let next = respond(reply, resp);
                    *self = next;
                }
                Stream::Body(pipe) => {
                    ready!(pipe.poll(cx));
                    *self = Stream::Done;
                }
                Stream::Watch(pipe) => {
                    ready!(pipe.poll(cx));
                    *self = Stream::Done;
                }
                Stream::Done => return Poll::Ready(()),
            }
        }
    }
}

impl<S: Service> Future for Stream<S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        // A stream that panics (a bug) ends alone, reset, as its own task would have ended.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| this.poll_inner(cx))) {
            Ok(p) => p,
            Err(_) => {
                error!("an HTTP/2 stream panicked; its stream is reset");
                match std::mem::replace(this, Stream::Done) {
                    Stream::Handling { mut reply, .. } => reply.send_reset(Reason::INTERNAL_ERROR),
                    Stream::Body(mut p) => p.tx.send_reset(Reason::INTERNAL_ERROR),
                    Stream::Watch(mut p) => p.tx.send_reset(Reason::INTERNAL_ERROR),
                    Stream::Done => {}
                }
                Poll::Ready(())
            }
        }
    }
}

/// Sends `resp`'s head on `reply`, and returns what sends its body.
fn respond<S: Service>(reply: &mut SendResponse<Bytes>, resp: Response) -> Stream<S> {
    let (mut head, body) = resp.into_parts();
    strip_connection_headers(&mut head.headers);
    if !head.headers.contains_key(header::DATE)
        && let Ok(v) =
            header::HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now()))
    {
        head.headers.insert(header::DATE, v);
    }
    never_indexed(&mut head.headers);
    let pump = S::chunks(&mut head);
    let deadline = head.extensions.remove::<ResponseDeadline>();
    let end = pump.is_none() && body.is_end_stream();
    if pump.is_none()
        && !end
        && let Some(len) = body.size_hint().exact()
        && !head.headers.contains_key(header::CONTENT_LENGTH)
    {
        head.headers.insert(header::CONTENT_LENGTH, len.into());
    }
    let tx = match reply.send_response(http::Response::from_parts(head, ()), end) {
        Ok(tx) => tx,
        Err(e) => {
            debug!(error = %e, "HTTP/2 response not sent");
            reply.send_reset(Reason::INTERNAL_ERROR);
            return Stream::Done;
        }
    };
    match pump {
        Some(pump) => Stream::Watch(WatchPipe {
            tx,
            pump,
            blocked: None,
        }),
        None if end => Stream::Done,
        None => Stream::Body(Box::new(BodyPipe {
            tx,
            body,
            pending: None,
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d.0))),
        })),
    }
}

/// Response headers whose value changes from one response to the next: `date` (each second) and
/// `audit-id` (each request, in a response forwarded from kube-apiserver).
const NEW_EACH_RESPONSE: [header::HeaderName; 2] =
    [header::DATE, header::HeaderName::from_static("audit-id")];

/// Has HPACK send [`NEW_EACH_RESPONSE`]'s values as literals never indexed (RFC 7541, 6.2.3), not
/// inserted into the connection's dynamic table. Why: h2's encoder indexes every other header,
/// so each second's `date` was one more entry in the table of every connection it answered, kept
/// until the table's 4 KiB of header size was full (63 dates): measured with h2 alone, a
/// connection's server side held 10.4 KiB more after responses in 60 different seconds, and
/// nothing more with the dates never indexed. A kubelet's connection (a Lease renewal every 10 s)
/// got there in ten minutes, past the 7 KiB an idle connection holds otherwise; and in
/// `watchcache-bench --model kubelet` the table's growth while the second set of watches opened
/// was 60 B of the 800 a further idle watch cost (design/performance.md, "HPACK's table"). An
/// indexed date saves ~25 bytes on the wire, and only within its second.
fn never_indexed(headers: &mut HeaderMap) {
    for name in &NEW_EACH_RESPONSE {
        if let header::Entry::Occupied(mut e) = headers.entry(name) {
            for v in e.iter_mut() {
                v.set_sensitive(true);
            }
        }
    }
}

/// Headers that are about one HTTP/1.1 connection and illegal in HTTP/2 (RFC 9113, 8.2.2), with
/// those a `Connection` header names, as hyper strips them.
fn strip_connection_headers(headers: &mut HeaderMap) {
    for h in [
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TE,
    ] {
        headers.remove(h);
    }
    if let Some(c) = headers.remove(header::CONNECTION)
        && let Ok(names) = c.to_str()
    {
        for n in names.split(',') {
            headers.remove(n.trim());
        }
    }
}

/// Waits until `tx` has capacity for what is in hand (reserving one byte: h2 raises the claim to
/// what `send_data` is given); `Err` when the stream can send no more.
fn poll_room(tx: &mut SendStream<Bytes>, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
    tx.reserve_capacity(1);
    while tx.capacity() == 0 {
        match ready!(tx.poll_capacity(cx)) {
            Some(Ok(0)) => {}
            Some(Ok(_)) => break,
            Some(Err(e)) => {
                debug!(error = %e, "HTTP/2 stream closed while sending");
                return Poll::Ready(Err(()));
            }
            None => return Poll::Ready(Err(())),
        }
    }
    Poll::Ready(Ok(()))
}

/// Whether the client reset the stream (`cx` is woken when it does).
fn reset(tx: &mut SendStream<Bytes>, cx: &mut Context<'_>) -> bool {
    match tx.poll_reset(cx) {
        Poll::Ready(r) => {
            debug!(reason = ?r, "HTTP/2 stream reset");
            true
        }
        Poll::Pending => false,
    }
}

impl BodyPipe {
    /// Sends the body; ready when it is sent, or the stream is gone.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(d) = &mut self.deadline
            && d.as_mut().poll(cx).is_ready()
        {
            debug!("a response was not delivered within --request-timeout; its stream is reset");
            self.tx.send_reset(Reason::INTERNAL_ERROR);
            return Poll::Ready(());
        }
        loop {
            if reset(&mut self.tx, cx) {
                return Poll::Ready(());
            }
            if let Some((_, eos)) = &self.pending {
                let eos = *eos;
                if ready!(poll_room(&mut self.tx, cx)).is_err() {
                    return Poll::Ready(());
                }
                let Some((data, _)) = self.pending.take() else {
                    return Poll::Ready(());
                };
                if self.tx.send_data(data, eos).is_err() || eos {
                    return Poll::Ready(());
                }
                continue;
            }
            // The next frame before any capacity is reserved: a body that waits pins no window.
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let eos = self.body.is_end_stream();
                        if data.is_empty() {
                            if self.tx.send_data(data, eos).is_err() || eos {
                                return Poll::Ready(());
                            }
                        } else {
                            self.pending = Some((data, eos));
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.tx.reserve_capacity(0);
                            if let Err(e) = self.tx.send_trailers(trailers) {
                                debug!(error = %e, "HTTP/2 trailers not sent");
                            }
                            return Poll::Ready(());
                        }
                    }
                },
                Some(Err(e)) => {
                    warn!(error = %e, "response body failed; the stream is reset");
                    self.tx.send_reset(Reason::INTERNAL_ERROR);
                    return Poll::Ready(());
                }
                None => {
                    if let Err(e) = self.tx.send_data(Bytes::new(), true) {
                        debug!(error = %e, "HTTP/2 end of stream not sent");
                    }
                    return Poll::Ready(());
                }
            }
        }
    }
}

impl<C: Chunks> WatchPipe<C> {
    /// Sends the watch's chunks until its pump ends; ready when it has, or the stream is gone.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if reset(&mut self.tx, cx) {
                return Poll::Ready(());
            }
            if let Some(chunks) = &mut self.blocked {
                if ready!(poll_room(&mut self.tx, cx)).is_err() {
                    return Poll::Ready(());
                }
                let chunks = std::mem::take(&mut **chunks);
                self.blocked = None;
                if self.send(chunks).is_err() {
                    return Poll::Ready(());
                }
            }
            match self.pump.poll_chunks(cx) {
                Poll::Ready(Some(chunks)) => {
                    // Reserving assigns what the connection's window has at once: a client that
                    // keeps up has room, and the chunks go out without being kept.
                    self.tx.reserve_capacity(1);
                    if self.tx.capacity() == 0 {
                        self.blocked = Some(Box::new(chunks.into_iter()));
                    } else if self.send(chunks.into_iter()).is_err() {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(None) => {
                    if let Err(e) = self.tx.send_data(Bytes::new(), true) {
                        debug!(error = %e, "HTTP/2 end of watch not sent");
                    }
                    return Poll::Ready(());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Hands all of one poll's chunks to h2 at once (an event's frame, or a few), once the stream
    /// has some capacity: h2 queues what the window cannot take yet, and the next chunks wait
    /// for room again. `Err` when the stream is gone.
    fn send(&mut self, chunks: std::vec::IntoIter<Bytes>) -> Result<(), h2::Error> {
        for c in chunks {
            // An empty DATA frame is 9 bytes of nothing that clients count as abuse (h2's client
            // closes after 100 of them).
            if !c.is_empty() {
                self.tx.send_data(c, false)?;
            }
        }
        Ok(())
    }
}

/// The framing bytes of an HTTP/2 request body received so far (frame headers and padding),
/// counted by the stream's body ([`RecvBody`]) and read by the body's reader
/// (`http/body.rs`): a request extension, since the body reaches the reader behind axum's
/// type-erased [`Body`].
#[derive(Clone, Debug, Default)]
pub(crate) struct H2Framing(Arc<AtomicU64>);

impl H2Framing {
    /// Counts one DATA frame of `wire` bytes carrying `data` bytes.
    pub(crate) fn count(&self, wire: u32, data: usize) {
        let framing = u64::from(wire).saturating_sub(data as u64);
        self.0.fetch_add(framing, Ordering::Relaxed);
    }

    /// The framing bytes counted so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A request's body as h2 receives it: each frame's bytes are given back to the flow-control
/// window as they are read, as hyper's body does, and each frame's framing (its header and
/// padding) is counted for the body's reader (`http/body.rs`), which bounds a body by its wire
/// bytes.
struct RecvBody {
    recv: RecvStream,
    /// `content-length`, when the request has one.
    len: Option<u64>,
    /// The data is read; the trailers are next.
    data_done: bool,
    framing: H2Framing,
}

impl RecvBody {
    fn new(recv: RecvStream, headers: &HeaderMap, framing: H2Framing) -> RecvBody {
        let len = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        RecvBody {
            recv,
            len,
            data_done: false,
            framing,
        }
    }
}

impl HttpBody for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = self.get_mut();
        if !this.data_done {
            match ready!(this.recv.poll_data_framed(cx)) {
                Some(Ok((data, wire))) => {
                    this.framing.count(wire, data.len());
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    if let Some(l) = &mut this.len {
                        *l = l.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_done = true,
            }
        }
        match ready!(this.recv.poll_trailers(cx)) {
            Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            Some(l) => SizeHint::with_exact(l),
            None => SizeHint::default(),
        }
    }
}

/// A request's task, cancelled when its stream is dropped (after it ended, a no-op).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use http::header::{self, HeaderMap, HeaderValue};

    /// The values that change with each response are flagged for HPACK never to index them;
    /// the others are left to h2 (`h2_conn.rs`'s `dates_are_never_indexed` reads the wire).
    #[test]
    fn dates_and_audit_ids_are_flagged_never_indexed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::DATE,
            HeaderValue::from_static("Sat, 28 Nov 2026 01:00:00 GMT"),
        );
        h.insert("audit-id", HeaderValue::from_static("3a1e0c6e"));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        super::never_indexed(&mut h);
        assert!(h[header::DATE].is_sensitive());
        assert!(h["audit-id"].is_sensitive());
        assert!(!h[header::CONTENT_TYPE].is_sensitive());
    }
}
