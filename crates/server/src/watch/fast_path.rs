//! The watch fast path: a connection whose first request is a WATCH is served here, straight from
//! the socket, and every other connection goes to hyper.
//!
//! Why: an idle kubelet watch is the common case by far, and hyper keeps an 8 KiB read buffer and an
//! 8 KiB header buffer for each connection for its whole life, twice the whole cost of an idle
//! watcher here (design/performance.md). This path parses the request head with `httparse` (hyper's
//! parser), frees the head buffer, and writes the chunked response with vectored writes of the
//! cache's shared frame bytes: an idle watch costs its task and its watcher, and an event costs no
//! copy. When the watch ends (timeout, error, shutdown) and the client keeps the connection alive,
//! the connection, with any bytes the client sent meanwhile, continues in hyper.

// Reads outside input (request or etcd data): it must not panic on any of it. (Indexing is
// still reviewed by hand here: each index is bounded by a check just before it.)
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::auth::filters::{self, Incoming};
use crate::transport::conn::ConnInfo;
use tracing::debug;

use crate::auth::AuthContext;
use crate::http::negotiate::{Fields, Format, Negotiate, WatchWire, watch_encoder};
use crate::http::params;
use crate::http::response::wants_gzip_value;
use crate::http::served::{ServedSet, segments};
use crate::http::status::ApiError;
use crate::proxy::ProxyContext;
use crate::transport::sealed::HandDown;
use crate::watch::pump::WatchPump;
use crate::watch::{self, WatchContext, Wire};
use watchcache::wire::convert::IncludeObject;

/// What the fast path needs: it reads a connection's first request, admits it and starts its
/// watch by itself, as hyper's gate and router would.
pub(crate) struct FastPathContext {
    pub(crate) auth: Arc<AuthContext>,
    pub(crate) watches: Arc<WatchContext>,
    /// Proxy mode: a watch of anything not cached is hyper's to forward.
    pub(crate) proxy: Arc<ProxyContext>,
    pub(crate) served: Arc<ServedSet>,
    /// The server's shutdown: a connection still waiting for its first request closes.
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
    /// `ServerConfig::header_read_timeout`.
    pub(crate) header_read_timeout: std::time::Duration,
    /// `ServerConfig::tls_watch_hand_down`.
    pub(crate) tls_watch_hand_down: bool,
}

/// Largest request head the fast path reads before giving the connection to hyper.
const MAX_HEAD: usize = 16 * 1024;

/// What the first request of a connection turned out to be.
pub(crate) enum FirstRequest {
    /// Served here; hyper takes over with these bytes already read (empty when closing).
    Served { rest: Vec<u8>, keep_alive: bool },
    /// Not a watch: hyper serves it, starting with these bytes.
    NotAWatch(Vec<u8>),
    /// No request came (the server is shutting down, or the head took too long): close.
    Close,
}

/// A parsed WATCH request head.
pub(crate) struct WatchRequest {
    path: String,
    query: String,
    keep_alive: bool,
    gzip: bool,
    head_len: usize,
    /// The `Authorization` header's value, when sent.
    authorization: Option<Vec<u8>>,
    /// The frames for a built-in resource, and for a custom one (`None`: hyper's).
    wire: (WatchWire, Option<WatchWire>),
}

/// The frames a watch's Accept header asks for, when they are plain JSON or protobuf; a watch
/// that asks for anything else (Table, PartialObjectMetadata, or nothing servable) is hyper's:
/// it negotiates, converts or answers 406.
fn watch_wire(accept: Option<&[u8]>) -> Option<(WatchWire, Option<WatchWire>)> {
    let json = (Wire::Json, Fields::All);
    match accept {
        None => Some((json, Some(json))),
        Some(a) => Format::watch_wire(std::str::from_utf8(a).ok()?),
    }
}

/// The frames of this watch for the resource it names (`None`: hyper's, see [`watch_wire`]).
fn wire_for(served: &ServedSet, req: &WatchRequest) -> Option<WatchWire> {
    match req.wire {
        (json @ (Wire::Json, _), _) => Some(json),
        (builtin, custom) => match served.resolve(&segments(&req.path)) {
            Some(t) if t.served.cache.definition().has_protobuf() => Some(builtin),
            Some(_) => custom,
            // Nothing there: the fast path answers the 404.
            None => Some((Wire::Json, Fields::All)),
        },
    }
}

pub(crate) enum Head {
    Incomplete,
    NotAWatch,
    Watch(WatchRequest),
}

/// Parses a request head (synchronously, so the header array never lives in a task's state).
pub(crate) fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Head::Incomplete,
        Err(_) => return Head::NotAWatch,
    };
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let has_body = header("transfer-encoding").is_some()
        || header("content-length").is_some_and(|v| v != b"0");
    let Some(target) = req
        .path
        .filter(|_| req.method == Some("GET") && !has_body && req.version == Some(1))
    else {
        return Head::NotAWatch;
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    // A watch that impersonates another user is hyper's: its gate authorizes and applies the
    // impersonation.
    if !params::is_watch(Some(query))
        || req
            .headers
            .iter()
            .any(|h| h.name.len() > 12 && h.name[..12].eq_ignore_ascii_case("impersonate-"))
    {
        return Head::NotAWatch;
    }
    let Some(wire) = watch_wire(header("accept")) else {
        return Head::NotAWatch;
    };
    Head::Watch(WatchRequest {
        wire,
        path: path.to_owned(),
        query: query.to_owned(),
        keep_alive: !header("connection").is_some_and(|v| v.eq_ignore_ascii_case(b"close")),
        gzip: header("accept-encoding").is_some_and(wants_gzip_value),
        head_len,
        authorization: header("authorization").map(<[u8]>::to_vec),
    })
}

/// Reads the first request head and serves it if it is a WATCH. `idle` counts the connection as
/// waiting for its first request: it is dropped once the head has been read (when this returns,
/// or before a watch is served).
pub(crate) async fn first_request<S: AsyncRead + AsyncWrite + Unpin + HandDown>(
    tcp: &mut S,
    cx: &FastPathContext,
    conn: &ConnInfo,
    idle: Option<crate::transport::accept::IdleSlot>,
) -> std::io::Result<FirstRequest> {
    let mut buf = Vec::with_capacity(1024);
    // One deadline for the whole head, not one per read: a client trickling a byte at a time
    // must not hold the connection open for days (slowloris).
    let deadline = tokio::time::Instant::now() + cx.header_read_timeout;
    let req = loop {
        if buf.len() >= MAX_HEAD {
            return Ok(FirstRequest::NotAWatch(buf));
        }
        let at = buf.len();
        buf.resize(at + 1024, 0);
        // An idle kept-alive connection must not hold up shutdown (graceful shutdown waits for
        // every connection task) nor a task forever.
        let mut shutdown = cx.shutdown.clone();
        let n = tokio::select! {
            n = tcp.read(&mut buf[at..]) => n?,
            _ = shutdown.wait_for(|s| *s).map(|_| ()) => return Ok(FirstRequest::Close),
            _ = tokio::time::sleep_until(deadline) => return Ok(FirstRequest::Close),
        };
        buf.truncate(at + n);
        if n == 0 {
            return Ok(FirstRequest::NotAWatch(buf));
        }
        match parse_head(&buf) {
            Head::Incomplete => continue,
            Head::NotAWatch => return Ok(FirstRequest::NotAWatch(buf)),
            // Proxy mode: a watch of anything not cached is hyper's to forward.
            Head::Watch(req)
                if cx.proxy.proxy.get().is_some()
                    && crate::proxy::forward::local_read(
                        &cx.served,
                        &axum::http::Method::GET,
                        &segments(&req.path),
                    )
                    .is_none() =>
            {
                return Ok(FirstRequest::NotAWatch(buf));
            }
            Head::Watch(req) => match wire_for(&cx.served, &req) {
                Some(wire) => break (req, wire),
                None => return Ok(FirstRequest::NotAWatch(buf)),
            },
        }
    };
    // The head is here: the connection asked for something.
    drop(idle);
    let (mut req, (wire, fields)) = req;
    let mut rest = buf.split_off(req.head_len);
    drop(buf);
    rest.shrink_to_fit();
    // Taken: the header's bytes (a JWT is ~1 KiB) must not live as long as the watch.
    let authorization = req.authorization.take();
    // Boxed: admission and the watch's start (which may read etcd) are large futures needed
    // once; the task of an idle watch then holds only the streaming state.
    let Some((mut pump, origin)) = Box::pin(admit_and_start(
        tcp,
        cx,
        conn,
        &req,
        authorization,
        (wire, fields),
    ))
    .await?
    else {
        return Ok(FirstRequest::Served {
            rest,
            keep_alive: req.keep_alive,
        });
    };
    // Nothing of the request may be left unread in a connection handed down to its sending half.
    let hand_down = cx.tls_watch_hand_down && rest.is_empty();
    let outcome = stream(tcp, &mut pump, req.gzip, origin, hand_down).await?;
    rest.extend(outcome.received);
    Ok(FirstRequest::Served {
        rest,
        keep_alive: req.keep_alive && outcome.clean,
    })
}

struct Outcome {
    /// Whether the response ended properly (the connection can carry another request).
    clean: bool,
    /// Bytes the client sent while the watch ran (a pipelined request).
    received: Vec<u8>,
}

/// Admits a watch (server/auth/filters.rs, the same function hyper's requests pass in the gate:
/// never bypassed) and starts it. A refusal, a path naming nothing and a start that fails are
/// answered here (and audited): `None`.
async fn admit_and_start<S: AsyncRead + AsyncWrite + Unpin>(
    tcp: &mut S,
    cx: &FastPathContext,
    conn: &ConnInfo,
    req: &WatchRequest,
    authorization: Option<Vec<u8>>,
    (wire, fields): WatchWire,
) -> std::io::Result<Option<(WatchPump, Option<u64>)>> {
    let began = std::time::Instant::now();
    let mut adm = filters::admit(
        &cx.auth,
        &Incoming {
            method: "GET",
            path: &req.path,
            query: Some(&req.query),
            authorization: authorization.as_deref(),
            headers: None,
            conn,
        },
    );
    drop(authorization);
    let key = cx.auth.request_key(&adm.info);
    let path = req.path.as_str();
    let read = adm.read.take();
    let started = async {
        // Refused before anything else, as upstream (a path naming nothing is 404 only to whom
        // may watch it).
        adm.decision.clone()?;
        // A subresource (`/status`) is not watchable: 404, as any path naming nothing.
        let target = cx
            .served
            .resolve(&segments(path))
            .filter(|t| !t.status)
            .ok_or_else(|| ApiError::no_route(path))?;
        // The query admission parsed, authorized and (its first `watch=`) found a watch.
        let mut params = read.unwrap_or_else(|| Err(ApiError::no_route(path)))?;
        if let Some(n) = &target.name {
            params.watch_one(n);
        }
        let opts = params.watch_options(target.namespace.as_deref())?;
        target.check_fields(&opts.selection)?;
        let user = adm.user.as_deref();
        let format = match wire {
            Wire::Json => Format::Json,
            Wire::Protobuf => Format::Protobuf,
        };
        let encoder = watch_encoder(
            target.def(),
            format,
            IncludeObject::default(),
            fields,
            target.converts_version(),
            || {
                cx.watches.metrics.conversions(
                    &target.served.cache.definition().plural,
                    format,
                    fields,
                )
            },
        );
        let origin = target.served.cache.origin();
        watch::start(
            &cx.watches,
            &target.served.cache,
            opts,
            params.timeout,
            req.gzip,
            encoder,
            user,
            Some(&key),
        )
        .await
        .map(|pump| (pump, origin))
    }
    .await;
    match started {
        Ok(pump) => {
            cx.watches.metrics.observe_request(&key, 200, began);
            Ok(Some(pump))
        }
        Err(e) => {
            write_error(tcp, &e).await?;
            adm.audit(&cx.auth, e.code(), began);
            cx.watches.metrics.observe_request(&key, e.code(), began);
            Ok(None)
        }
    }
}

/// Streams a started watch's chunks until it ends or the client goes away.
/// With `hand_down`, a TLS 1.3 connection streams from its sending half only
/// (`server/transport/sealed.rs`) and closes after the watch.
async fn stream<S: AsyncRead + AsyncWrite + Unpin + HandDown>(
    tcp: &mut S,
    pump: &mut WatchPump,
    gzip: bool,
    origin: Option<u64>,
    hand_down: bool,
) -> std::io::Result<Outcome> {
    let sealed = hand_down && tcp.hand_down();
    let done = |clean: bool, received| {
        Ok(Outcome {
            clean: clean && !sealed,
            received,
        })
    };
    write_head(tcp, gzip, pump.content_type(), origin, sealed).await?;
    let mut received = Vec::new();
    let mut probe = [0u8; 256];
    loop {
        tokio::select! {
            chunks = pump.next() => match chunks {
                Some(mut chunks) => {
                    let ended = take_ready(pump, &mut chunks);
                    write_chunk(tcp, &chunks).await?;
                    pump.written();
                    if ended {
                        break;
                    }
                }
                None => break,
            },
            // The client going away must end the watch even when no event comes.
            n = tcp.read(&mut probe) => match n {
                Ok(0) | Err(_) => return done(false, received),
                Ok(n) if received.len() + n <= MAX_HEAD => received.extend_from_slice(&probe[..n]),
                Ok(_) => return done(false, Vec::new()),
            },
        }
    }
    tcp.write_all(b"0\r\n\r\n").await?;
    tcp.flush().await?;
    done(!pump.shutting_down(), received)
}

async fn write_head<S: AsyncWrite + Unpin>(
    tcp: &mut S,
    gzip: bool,
    content_type: &str,
    origin: Option<u64>,
    close: bool,
) -> std::io::Result<()> {
    let enc = if gzip {
        "Content-Encoding: gzip\r\n"
    } else {
        ""
    };
    let close = if close { "Connection: close\r\n" } else { "" };
    let origin = origin.map_or(String::new(), |o| {
        format!("{}: {o:016x}\r\n", watchcache::ORIGIN_HEADER)
    });
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{enc}{origin}{close}Transfer-Encoding: chunked\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await?;
    tcp.flush().await
}

/// Appends to `chunks` the chunks of the events that are already waiting, without waiting for
/// more, up to [`BATCH_BYTES`] or [`BATCH_PARTS`]; returns whether the response ended among them.
///
/// Why: a watch that is behind (a leaf catching up from its root's history, a client after a
/// burst) has many events ready at once. Written one `writev` each, every event cost a syscall
/// and a loopback TCP segment (whose receive processing the kernel charges to the sender) and
/// the task a switch out and in: in the catch-up bench, 15 % and 29 % of the root's samples,
/// about 5.5 µs of its CPU per event, 3.3 µs batched (design/performance.md, "A warm
/// catch-up"). Taken together they go out in one write, and the client reads them in fewer
/// reads. Only events already queued are taken, so no event waits for another. The pump is
/// polled with a no-op waker here; the loop polls it again with the task's waker before it
/// sleeps (in `select!`), so the pump's invariant (the waker stored with the stream and the
/// wheel on `Pending`) holds whenever the task waits. The watch's written-latency metric of
/// the earlier events of a batch is taken when the next event is taken, just before the write.
fn take_ready(pump: &mut WatchPump, chunks: &mut Vec<Bytes>) -> bool {
    let mut bytes: usize = chunks.iter().map(Bytes::len).sum();
    while bytes < BATCH_BYTES && chunks.len() < BATCH_PARTS {
        match pump.next().now_or_never() {
            Some(Some(more)) => {
                bytes += more.iter().map(Bytes::len).sum::<usize>();
                chunks.extend(more);
            }
            Some(None) => return true,
            None => break,
        }
    }
    false
}

/// At most this many bytes of ready events are gathered into one write (the first event is
/// written whatever its size): a loopback segment's worth, enough to make the per-write cost
/// small next to the bytes, small enough that a slow client's socket takes it in one go.
const BATCH_BYTES: usize = 64 * 1024;
/// At most this many pieces in one write (a frame is up to 3 pieces; `writev` takes 1 024).
const BATCH_PARTS: usize = 256;

/// Writes one HTTP chunk made of `parts`, vectored: the shared bytes are never copied.
async fn write_chunk<S: AsyncWrite + Unpin>(tcp: &mut S, parts: &[Bytes]) -> std::io::Result<()> {
    let len: usize = parts.iter().map(Bytes::len).sum();
    if len == 0 {
        return Ok(());
    }
    let size = format!("{len:x}\r\n");
    let mut slices: Vec<&[u8]> = Vec::with_capacity(parts.len() + 2);
    slices.push(size.as_bytes());
    slices.extend(parts.iter().map(|p| &p[..]));
    slices.push(b"\r\n");
    write_all_vectored(tcp, &mut slices).await
}

async fn write_all_vectored<S: AsyncWrite + Unpin>(
    tcp: &mut S,
    slices: &mut [&[u8]],
) -> std::io::Result<()> {
    let mut first = 0;
    while first < slices.len() {
        let io: Vec<IoSlice<'_>> = slices[first..].iter().map(|s| IoSlice::new(s)).collect();
        let mut n = tcp.write_vectored(&io).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while first < slices.len() && n >= slices[first].len() {
            n -= slices[first].len();
            first += 1;
        }
        if first < slices.len() {
            slices[first] = &slices[first][n..];
        }
    }
    // A TLS stream may keep records it could not write yet: they must go now, not with the next
    // event (a no-op on TCP).
    tcp.flush().await
}

async fn write_error<S: AsyncWrite + Unpin>(tcp: &mut S, e: &ApiError) -> std::io::Result<()> {
    let body = e.status_json();
    let retry = e
        .retry_after()
        .map(|s| format!("Retry-After: {s}\r\n"))
        .unwrap_or_default();
    let reason = axum::http::StatusCode::from_u16(e.code())
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Error");
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{retry}\r\n",
        e.code(),
        body.len()
    );
    write_all_vectored(tcp, &mut [head.as_bytes(), &body]).await
}

/// A connection whose first bytes were already read: replays them, then reads the stream.
pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Rewind<S> {
        Rewind {
            prefix,
            pos: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Logs why a fast-path connection ended early.
pub(crate) fn log_io(e: &std::io::Error) {
    debug!(error = %e, "watch connection ended");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_sorted_into_watches_and_the_rest() {
        let watch = |h: &[u8]| match parse_head(h) {
            Head::Watch(w) => Some((w.path, w.query, w.keep_alive, w.gzip, w.head_len)),
            _ => None,
        };
        let h = b"GET /api/v1/pods?watch=true&x=1 HTTP/1.1\r\nConnection: close\r\nAccept-Encoding: gzip, br\r\n\r\nrest";
        assert_eq!(
            watch(h),
            Some((
                "/api/v1/pods".into(),
                "watch=true&x=1".into(),
                false,
                true,
                h.len() - 4
            ))
        );
        assert!(matches!(
            parse_head(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\n"),
            Head::Incomplete
        ));
        // (Not the fuzz corpus: it holds real watch heads too.)
        let not_watches: [&[u8]; 4] = [
            b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
            b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /api/v1/namespaces/%ZZ/pods/a%2Fb?watch=%FF HTTP/1.1\r\n\r\n",
            b"POST /api/v1/pods?watch=1 HTTP/1.1\r\n\r\n",
        ];
        for not_watch in not_watches {
            assert!(
                watch(not_watch).is_none(),
                "{}",
                String::from_utf8_lossy(not_watch)
            );
        }
    }

    /// The HTTP chunks of a chunked response body read so far from `client` into `buf` (the
    /// whole response from its head), each chunk's payload split into its frames (JSON: one per
    /// line). Reads until `want` chunks came (the terminal empty chunk counts, as an empty list).
    async fn chunks_of(
        client: &mut tokio::net::TcpStream,
        buf: &mut Vec<u8>,
        want: usize,
    ) -> Vec<Vec<String>> {
        let mut b = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(buf).into_owned();
            if let Some(at) = text.find("\r\n\r\n") {
                let mut rest = &text[at + 4..];
                let mut got = Vec::new();
                while let Some(eol) = rest.find("\r\n") {
                    let len = usize::from_str_radix(&rest[..eol], 16).unwrap();
                    if rest.len() < eol + 2 + len + 2 {
                        break;
                    }
                    let payload = &rest[eol + 2..eol + 2 + len];
                    got.push(payload.lines().map(str::to_owned).collect());
                    rest = &rest[eol + 2 + len + 2..];
                }
                if got.len() >= want {
                    return got;
                }
            }
            let n = client.read(&mut b).await.unwrap();
            assert!(n > 0, "the response ended early: {text}");
            buf.extend_from_slice(&b[..n]);
        }
    }

    #[tokio::test]
    async fn events_already_waiting_go_out_in_one_chunk_and_later_ones_at_once() {
        use crate::watch::pump::tests::{pod, pump, setup};

        let (cache, src, stop, wheel) = setup();
        let mut pump = pump(
            &cache,
            &wheel,
            tokio::time::Instant::now() + std::time::Duration::from_secs(3600),
            false,
        )
        .await;
        // Three events wait before the response starts.
        for name in ["a", "b", "c"] {
            src.put(&format!("/registry/pods/ns/{name}"), pod(name))
                .unwrap();
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let served = tokio::spawn(async move {
            stream(&mut server, &mut pump, false, None, false)
                .await
                .map(|o| o.clean)
        });
        let mut response = Vec::new();
        let first = chunks_of(&mut client, &mut response, 1).await;
        assert_eq!(
            first[0].len(),
            3,
            "one write for the waiting events: {first:?}"
        );
        for (frame, name) in first[0].iter().zip(["a", "b", "c"]) {
            assert!(frame.contains(&format!("\"name\":\"{name}\"")), "{frame}");
        }
        // An event that comes while the watch waits goes out alone, at once.
        src.put("/registry/pods/ns/d", pod("d")).unwrap();
        let two = chunks_of(&mut client, &mut response, 2).await;
        assert_eq!(two[1].len(), 1, "{two:?}");
        assert!(two[1][0].contains("\"name\":\"d\""), "{two:?}");
        // Shutdown ends the response with its terminal chunk.
        stop.send(true).unwrap();
        let end = chunks_of(&mut client, &mut response, 3).await;
        assert!(end[2].is_empty(), "{end:?}");
        assert!(
            !served.await.unwrap().unwrap(),
            "a shutdown is not a clean end"
        );
    }

    // Fuzzing target (tests/core/fuzz.rs has the others): the first bytes of every connection.
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { failure_persistence: None, ..Default::default() })]

        #[test]
        fn any_head_parses_without_panicking(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            target in "/\\PC{0,60}",
            headers in proptest::collection::vec(("[A-Za-z-]{1,20}", "[ -~]{0,30}"), 0..6),
        ) {
            let _ = parse_head(&bytes);
            let mut h = format!("GET {target} HTTP/1.1\r\n");
            for (k, v) in headers {
                h.push_str(&format!("{k}: {v}\r\n"));
            }
            h.push_str("\r\n");
            if let Head::Watch(w) = parse_head(h.as_bytes()) {
                proptest::prop_assert_eq!(w.head_len, h.len());
                proptest::prop_assert!(target.starts_with(&w.path));
            }
        }
    }
}
