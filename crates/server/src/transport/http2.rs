//! HTTP/2 (TLS with ALPN `h2`: kubelets, client-go, kubectl), served with h2 directly: a
//! connection ([`H2Conn`]: the handshake, then the streams the client opens, all polled by the
//! connection's one task) and each of its streams ([`Stream`], a state machine: its request handed
//! to the connection's [`Service`], the router given down by `lib.rs`, then its response sent
//! under h2's flow control). An event wakes one task, which polls the stream's pump, hands its
//! chunks to h2, and then polls the connection, which writes them.
//!
//! Why not hyper's HTTP/2 server: it hands every stream to an executor as a future of its own
//! (hyper's `H2Stream`, 128 B, boxed) that holds axum's boxed body (a watch's 280-byte body in a
//! 320-byte block), and a node in the connection's set of streams (80 B); an idle kubelet watch
//! held all three for hours. Here an idle watch is one node of the connection's
//! [`FuturesUnordered`] holding its h2 handle and its pump inline ([`Stream::Watch`], 160 B: with
//! the set's own fields, a 224-byte block): design/performance.md, "Watches sent by our own
//! HTTP/2 streams".
//!
//! Settings as hyper's server had them (hyper 1.x's defaults where ours set none): streams,
//! windows and send buffer from `lib.rs`'s constants, frames of 16 KiB, header lists of at
//! most 16 KiB, at most 1 024 streams reset for a client's errors. What hyper's server did is
//! done here the same way (hyper 1.x, `proto/h2/server.rs`): the response's connection-specific
//! headers are stripped, `date` is set when missing, an exact body length becomes
//! `content-length`, a body is sent one frame at a time once the stream has any capacity (a
//! chunk in hand reserves one byte, so an idle body pins no window: hyper #4003), a client's
//! RST_STREAM ends the stream (and with it its request's task), a failing body or handler resets
//! the stream with INTERNAL_ERROR.
//!
//! Invariants:
//! - Streams are polled before the connection in every poll (what they queued is then written)
//!   and again after it accepted new ones, until it accepts none.
//! - The connection's end (closed, or its error) drops its streams: their requests' tasks are
//!   aborted, their watches unregistered.
//! - Server shutdown sends GOAWAY (graceful): streams already open go on (a watch ends by its
//!   deadline, which shutdown passes), new ones are refused; the connection ends once they are
//!   done. The server's [`Watcher`] is held until then, so the server waits for it.
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
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use h2::server::{Connection, Handshake, SendResponse};
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, Request, header};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{debug, error, warn};

use crate::transport::conn::ConnInfo;
use crate::transport::deadline::ResponseDeadline;

/// Whether the h2 this is built with is watchcache's patched copy (`vendor/h2`): always, by
/// the dependency's name; the crate's `H2_PATCHED` says it to embedders.
pub(crate) const H2_PATCHED: bool = h2::WATCHCACHE_PATCHED;

/// What a connection's client may not exceed: hyper's defaults, which these were.
const MAX_FRAME: u32 = 16 * 1024;
const MAX_HEADER_LIST: u32 = 16 * 1024;
const MAX_ERROR_RESETS: usize = 1024;

/// The connection's h2 settings (see the module's documentation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub max_streams: u32,
    pub stream_window: u32,
    pub conn_window: u32,
    pub send_buf: usize,
    pub header_table: u32,
}

enum Phase<T: AsyncRead + AsyncWrite + Unpin> {
    Handshaking(Handshake<T, Bytes>),
    Serving(Connection<T, Bytes>),
}

/// A served HTTP/2 connection: a future that ends when the connection does.
pub(crate) struct H2Conn<T: AsyncRead + AsyncWrite + Unpin, S: Service> {
    phase: Phase<T>,
    streams: FuturesUnordered<Stream<S>>,
    service: S,
    conn: Arc<ConnInfo>,
    /// Ready once the server shuts down; `None` once GOAWAY is sent.
    shutdown: Option<BoxFuture<'static, ()>>,
    /// Held for the server's graceful shutdown, which waits for it to be dropped.
    _watcher: Watcher,
}

impl<T: AsyncRead + AsyncWrite + Unpin, S: Service> H2Conn<T, S> {
    /// Serves `io` (its TLS handshake done) with `service`; `shutdown` is the server's signal.
    pub(crate) fn new(
        io: T,
        settings: Settings,
        service: S,
        conn: Arc<ConnInfo>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        watcher: Watcher,
    ) -> Self {
        let mut b = h2::server::Builder::new();
        b.max_concurrent_streams(settings.max_streams)
            .initial_window_size(settings.stream_window)
            .initial_connection_window_size(settings.conn_window)
            .max_send_buffer_size(settings.send_buf)
            .header_table_size(settings.header_table)
            .max_frame_size(MAX_FRAME)
            .max_header_list_size(MAX_HEADER_LIST)
            .max_local_error_reset_streams(Some(MAX_ERROR_RESETS));
        H2Conn {
            phase: Phase::Handshaking(b.handshake(io)),
            streams: FuturesUnordered::new(),
            service,
            conn,
            shutdown: Some(Box::pin(async move {
                // `Err`: the server is gone: as good as shut down.
                let _ = shutdown.wait_for(|s| *s).await;
            })),
            _watcher: watcher,
        }
    }
}

/// Polls the streams until none is ready (or `FuturesUnordered` yields, having polled each once:
/// it then wakes this task again).
fn poll_streams<S: Service>(streams: &mut FuturesUnordered<Stream<S>>, cx: &mut Context<'_>) {
    while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
}

impl<T: AsyncRead + AsyncWrite + Unpin, S: Service> Future for H2Conn<T, S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let stopping = this
            .shutdown
            .as_mut()
            .is_some_and(|s| s.as_mut().poll(cx).is_ready());
        let conn = loop {
            match &mut this.phase {
                Phase::Handshaking(hs) => match Pin::new(hs).poll(cx) {
                    Poll::Ready(Ok(c)) => this.phase = Phase::Serving(c),
                    Poll::Ready(Err(e)) => {
                        debug!(error = %e, "HTTP/2 handshake failed");
                        return Poll::Ready(());
                    }
                    Poll::Pending if stopping => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                },
                Phase::Serving(c) => break c,
            }
        };
        if stopping {
            this.shutdown = None;
            conn.graceful_shutdown();
        }
        // Streams first: what they queue is then written by the connection's poll below.
        poll_streams(&mut this.streams, cx);
        loop {
            let mut accepted = false;
            loop {
                match conn.poll_accept(cx) {
                    Poll::Ready(Some(Ok((req, reply)))) => {
                        this.streams
                            .push(Stream::start(req, reply, &this.service, &this.conn));
                        accepted = true;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        debug!(error = %e, "HTTP/2 connection ended with an error");
                        return Poll::Ready(());
                    }
                    Poll::Ready(None) => return Poll::Ready(()),
                    Poll::Pending => break,
                }
            }
            if !accepted {
                return Poll::Pending;
            }
            // Streams just accepted start at once; their response's first frames then need the
            // connection again.
            poll_streams(&mut this.streams, cx);
        }
    }
}

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
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use axum::Router;
    use axum::routing::get;
    use http::{Request, StatusCode};
    use hyper_util::server::graceful::GracefulShutdown;

    use super::*;

    /// The tests serve a router alone: none of their responses is sent chunk by chunk.
    pub(crate) enum NoChunks {}

    impl crate::transport::Chunks for NoChunks {
        fn poll_chunks(&mut self, _: &mut Context<'_>) -> Poll<Option<Vec<Bytes>>> {
            match *self {}
        }
    }

    impl Service for Router {
        type Chunks = NoChunks;
        type Future = axum::routing::future::RouteFuture<std::convert::Infallible>;

        fn call(&self, req: Request<axum::body::Body>) -> Self::Future {
            <Router as tower::Service<_>>::call(&mut self.clone(), req)
        }

        /// As the server's router: a watch is polled in place.
        fn in_place(&self, req: &Request<axum::body::Body>) -> bool {
            req.uri().query() == Some("watch=1")
        }

        fn chunks(_: &mut http::response::Parts) -> Option<NoChunks> {
            None
        }

        fn failed() -> axum::response::Response {
            axum::response::IntoResponse::into_response(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }

    const SETTINGS: Settings = Settings {
        max_streams: 100,
        stream_window: 64 * 1024,
        conn_window: 1024 * 1024,
        send_buf: 64 * 1024,
        header_table: 0,
    };

    /// The client's end of a pipe, keeping every byte the server sent.
    struct Recorded {
        io: tokio::io::DuplexStream,
        read: Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl AsyncRead for Recorded {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let before = buf.filled().len();
            let r = Pin::new(&mut self.io).poll_read(cx, buf);
            self.read
                .lock()
                .unwrap()
                .extend_from_slice(&buf.filled()[before..]);
            r
        }
    }

    impl AsyncWrite for Recorded {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.io).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    /// A connection served over an in-memory pipe: the client's half, and what the server sent.
    async fn serve(
        router: Router,
    ) -> (
        h2::client::SendRequest<Bytes>,
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
        GracefulShutdown,
        Arc<std::sync::Mutex<Vec<u8>>>,
    ) {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let read = Arc::new(std::sync::Mutex::new(Vec::new()));
        let client_io = Recorded {
            io: client_io,
            read: Arc::clone(&read),
        };
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let graceful = GracefulShutdown::new();
        let conn = Arc::new(ConnInfo {
            peer: None,
            client_cert: None,
            insecure_listener: false,
            clock: Default::default(),
        });
        let served = tokio::spawn(H2Conn::new(
            server_io,
            SETTINGS,
            router,
            conn,
            stop_rx,
            graceful.watcher(),
        ));
        let (send, client) = h2::client::handshake(client_io).await.expect("handshake");
        tokio::spawn(async move {
            let _ = client.await;
        });
        (send, stop, served, graceful, read)
    }

    /// The header blocks of the HEADERS frames in `wire` (frames as a server sends them: no
    /// preface; none of them padded or split into CONTINUATIONs here).
    fn header_blocks(wire: &[u8]) -> Vec<Vec<u8>> {
        let mut blocks = Vec::new();
        let mut at = 0;
        while at + 9 <= wire.len() {
            let len = usize::from(wire[at]) << 16
                | usize::from(wire[at + 1]) << 8
                | usize::from(wire[at + 2]);
            let (kind, flags) = (wire[at + 3], wire[at + 4]);
            let payload = &wire[at + 9..(at + 9 + len).min(wire.len())];
            if kind == 1 {
                assert_eq!(flags & 0x28, 0, "padded or prioritised HEADERS");
                blocks.push(payload.to_vec());
            }
            at += 9 + len;
        }
        blocks
    }

    /// Each second's `date` goes out as a literal never indexed:
    /// indexed, each new value was one more entry in the connection's HPACK table, kept for its
    /// life (`super::never_indexed`).
    #[tokio::test]
    async fn dates_are_never_indexed() {
        let router = Router::new()
            .route(
                "/dated/{s}",
                get(
                    |axum::extract::Path(s): axum::extract::Path<u32>| async move {
                        (
                            [
                                (
                                    http::header::DATE,
                                    format!("Sat, 28 Nov 2026 01:00:{s:02} GMT"),
                                ),
                                (
                                    http::header::HeaderName::from_static("audit-id"),
                                    format!("3a1e0c6e-0000-4000-8000-0000000000{s:02}"),
                                ),
                            ],
                            "ok",
                        )
                    },
                ),
            )
            .route("/now", get(|| async { "ok" }));
        let (mut send, _stop, _served, _g, wire) = serve(router).await;
        for path in ["/dated/1", "/dated/2", "/dated/3", "/now", "/now"] {
            let (status, got) = get_body(&mut send, path).await;
            assert_eq!((status, &got[..]), (StatusCode::OK, &b"ok"[..]));
        }
        let blocks = header_blocks(&wire.lock().unwrap());
        assert_eq!(blocks.len(), 5);
        for b in &blocks {
            // RFC 7541 6.2.3: 0001 and the name's index in four bits plus more (static 33,
            // `date`: 0x1f 0x12). Indexed, it was 01 and six bits (0x61), and the table grew.
            assert!(
                b.windows(2).any(|w| w == [0x1f, 0x12]),
                "date not sent as a literal never indexed: {b:02x?}"
            );
        }
    }

    async fn get_body(
        send: &mut h2::client::SendRequest<Bytes>,
        path: &str,
    ) -> (StatusCode, Bytes) {
        let req = Request::get(format!("http://test{path}")).body(()).unwrap();
        let (resp, _) = send.send_request(req, true).expect("request sent");
        let resp = tokio::time::timeout(Duration::from_secs(5), resp)
            .await
            .expect("answered")
            .expect("a response");
        let status = resp.status();
        let mut body = resp.into_body();
        let mut all = Vec::new();
        while let Some(d) = body.data().await {
            let d = d.expect("data");
            let _ = body.flow_control().release_capacity(d.len());
            all.extend_from_slice(&d);
        }
        (status, Bytes::from(all))
    }

    #[tokio::test]
    async fn a_body_larger_than_the_window_arrives_whole_and_a_panicking_stream_ends_alone() {
        let big = Bytes::from(vec![b'x'; 300 * 1024]);
        let body = big.clone();
        let router = Router::new()
            .route("/big", get(move || async move { body.clone() }))
            .route(
                "/panic",
                get(|| async {
                    // A bug the compiler cannot see through.
                    let bug: Option<&str> = std::hint::black_box(None);
                    bug.unwrap_or_else(|| panic!("a bug in a watch"))
                }),
            );
        let (mut send, _stop, _served, _g, _) = serve(router).await;
        // 300 KiB through the client's 64 KiB window: sent as WINDOW_UPDATEs come.
        let (status, got) = get_body(&mut send, "/big").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(got, big);
        // A watch is polled in the connection's task: its panic resets its stream only.
        let req = Request::get("http://test/panic?watch=1").body(()).unwrap();
        let (resp, _) = send.send_request(req, true).expect("request sent");
        let err = tokio::time::timeout(Duration::from_secs(5), resp)
            .await
            .expect("answered")
            .expect_err("reset");
        assert_eq!(err.reason(), Some(h2::Reason::INTERNAL_ERROR));
        let (status, got) = get_body(&mut send, "/big").await;
        assert_eq!((status, got.len()), (StatusCode::OK, big.len()));
    }

    /// Set when dropped: the request's future is gone.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_reset_stream_cancels_its_request_and_shutdown_ends_the_connection() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&dropped);
        let router = Router::new()
            .route(
                "/wait",
                get(move || {
                    let guard = Dropped(Arc::clone(&flag));
                    async move {
                        std::future::pending::<()>().await;
                        drop(guard);
                    }
                }),
            )
            .route("/ok", get(|| async { "ok" }));
        let (mut send, stop, served, graceful, _) = serve(router).await;
        let req = Request::get("http://test/wait").body(()).unwrap();
        let (resp, _) = send.send_request(req, true).expect("request sent");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!dropped.load(Ordering::SeqCst), "the request runs");
        // Dropping the response future resets the stream (CANCEL).
        drop(resp);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !dropped.load(Ordering::SeqCst) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "request not cancelled"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (status, got) = get_body(&mut send, "/ok").await;
        assert_eq!((status, &got[..]), (StatusCode::OK, &b"ok"[..]));
        // Shutdown: GOAWAY, and with no stream open the connection ends; the server's graceful
        // shutdown then finds no connection left.
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("the connection ends")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), graceful.shutdown())
            .await
            .expect("nothing left to wait for");
    }
}

#[cfg(test)]
mod stream_tests {
    use http::header::{self, HeaderMap, HeaderValue};

    /// The values that change with each response are flagged for HPACK never to index them;
    /// the others are left to h2 (`tests::dates_are_never_indexed` reads the wire).
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
