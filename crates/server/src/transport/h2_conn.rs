//! An HTTP/2 connection (TLS with ALPN `h2`: kubelets, client-go, kubectl), served with h2
//! directly: the handshake, the streams the client opens (`h2_stream.rs`), all polled by the
//! connection's one task.
//!
//! Why not hyper's HTTP/2 server: it hands every stream to an executor as a future of its own
//! that holds axum's boxed body; an idle watch held three allocations (320 + 128 + 80 B in
//! mimalloc's blocks) around its pump. Here a stream is one node of the connection's
//! [`FuturesUnordered`] with its state inline (design/performance.md). An event wakes one task,
//! which polls the stream's pump, hands its chunks to h2, and then polls the connection, which
//! writes them.
//!
//! Settings as hyper's server had them (hyper 1.x's defaults where ours set none): streams,
//! windows and send buffer from `lib.rs`'s constants, frames of 16 KiB, header lists of at
//! most 16 KiB, at most 1 024 streams reset for a client's errors.
//!
//! Invariants:
//! - Streams are polled before the connection in every poll (what they queued is then written)
//!   and again after it accepted new ones, until it accepts none.
//! - The connection's end (closed, or its error) drops its streams: their requests' tasks are
//!   aborted, their watches unregistered.
//! - Server shutdown sends GOAWAY (graceful): streams already open go on (a watch ends by its
//!   deadline, which shutdown passes), new ones are refused; the connection ends once they are
//!   done. The server's [`Watcher`] is held until then, so the server waits for it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use h2::server::{Connection, Handshake};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use crate::transport::conn::ConnInfo;
use crate::transport::h2_stream::{Service, Stream};

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
    /// life (h2_stream.rs, `never_indexed`).
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
