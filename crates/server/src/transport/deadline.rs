//! `--request-timeout` over a whole response, not only its head (issue 35, item 3): a LIST whose
//! client never reads (HTTP/1.1) or never opens its window (HTTP/2) was held past the timeout
//! with its snapshot. As kube-apiserver's timeout filter aborts its handler, past the deadline an
//! HTTP/2 stream is reset (`INTERNAL_ERROR`, as Go's server resets a stream whose handler
//! aborted) and an HTTP/1.1 connection is closed; either drops the body and what it holds.
//!
//! - HTTP/2: the gate puts the deadline in the response's extensions ([`ResponseDeadline`]);
//!   the stream's body pipe (`http2.rs`) resets the stream when it passes.
//! - HTTP/1.1: hyper writes one response at a time and polls a body only while the socket takes
//!   bytes, so a body cannot see its own deadline when the client stops reading. The connection's
//!   [`ResponseClock`] holds the deadline of the response being sent; the connection's future
//!   ([`Clocked`]) sleeps until it, and the socket ([`ClockedIo`]) records whether its last write
//!   is still waiting. At the deadline the connection is closed if the body is still being sent
//!   or the socket still has bytes to write; else the response was delivered, and the clock is
//!   just disarmed.
//!
//! Invariants: a clock is armed by the gate when a response leaves it ([`ResponseClock::arm`]),
//! the body it wraps ([`ClockedBody`]) marks itself done when dropped, and the next request on
//! the connection disarms it ([`ResponseClock::disarm`]); the clock's state is one short lock,
//! never held across an await.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// When a response must be sent by: the request's start plus `--request-timeout`. A response
/// extension for the HTTP/2 stream that sends it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResponseDeadline(pub Instant);

/// The response an HTTP/1.1 connection is sending, and its deadline.
#[derive(Debug, Default)]
pub(crate) struct ResponseClock {
    /// The deadline of the response being sent; `None` when disarmed.
    deadline: parking_lot::Mutex<Option<Instant>>,
    /// The response's body is still being read (not yet dropped by hyper).
    body_live: AtomicBool,
    /// The socket's last write or flush did not complete (the client is not reading).
    stalled: AtomicBool,
    /// The connection's task, woken when the deadline changes.
    waker: AtomicWaker,
}

impl ResponseClock {
    /// Disarms the clock: a new request has arrived on the connection, so the response before
    /// it was written whole (hyper reads the next request only then). Without it, the previous
    /// response's deadline could close the connection under a later watch whose client is
    /// momentarily behind.
    pub(crate) fn disarm(&self) {
        *self.deadline.lock() = None;
        self.body_live.store(false, Ordering::Release);
    }

    /// Arms the clock for a response due by `at`, and wraps its body so that the clock learns
    /// when it is done.
    pub(crate) fn arm(self: &std::sync::Arc<Self>, at: Instant, body: Body) -> Body {
        *self.deadline.lock() = Some(at);
        self.body_live.store(true, Ordering::Release);
        self.waker.wake();
        Body::new(ClockedBody {
            inner: body,
            clock: std::sync::Arc::clone(self),
        })
    }
}

/// A response body that tells its connection's clock when it is done (dropped).
struct ClockedBody {
    inner: Body,
    clock: std::sync::Arc<ResponseClock>,
}

impl Drop for ClockedBody {
    fn drop(&mut self) {
        self.clock.body_live.store(false, Ordering::Release);
    }
}

impl HttpBody for ClockedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An HTTP/1.1 connection's future, ended (the connection closed) when the response it is
/// sending passes its deadline undelivered.
pub(crate) struct Clocked<F> {
    inner: Pin<Box<F>>,
    clock: std::sync::Arc<ResponseClock>,
    sleep: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl<F> Clocked<F> {
    pub(crate) fn new(inner: F, clock: std::sync::Arc<ResponseClock>) -> Clocked<F> {
        Clocked {
            inner: Box::pin(inner),
            clock,
            sleep: None,
        }
    }
}

impl<F: Future<Output = ()>> Future for Clocked<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        // Registered before the deadline is read: an arm after the read wakes this task.
        this.clock.waker.register(cx.waker());
        let due = *this.clock.deadline.lock();
        match due {
            None => this.sleep = None,
            Some(at) => {
                if this.sleep.as_ref().is_none_or(|(t, _)| *t != at) {
                    this.sleep = Some((at, Box::pin(tokio::time::sleep_until(at))));
                }
                if let Some((_, sleep)) = &mut this.sleep
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    this.sleep = None;
                    let mut deadline = this.clock.deadline.lock();
                    if *deadline == Some(at) {
                        *deadline = None;
                        drop(deadline);
                        if this.clock.body_live.load(Ordering::Acquire)
                            || this.clock.stalled.load(Ordering::Acquire)
                        {
                            tracing::debug!(
                                "a response was not delivered within --request-timeout; the \
                                 connection is closed"
                            );
                            return Poll::Ready(());
                        }
                    }
                }
            }
        }
        this.inner.as_mut().poll(cx)
    }
}

/// A socket that records whether its last write or flush is still waiting for the client.
pub(crate) struct ClockedIo<S> {
    inner: S,
    clock: std::sync::Arc<ResponseClock>,
}

impl<S> ClockedIo<S> {
    pub(crate) fn new(inner: S, clock: std::sync::Arc<ResponseClock>) -> ClockedIo<S> {
        ClockedIo { inner, clock }
    }

    fn record<T>(&self, p: Poll<T>) -> Poll<T> {
        self.clock.stalled.store(p.is_pending(), Ordering::Release);
        p
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClockedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClockedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.record(p)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.record(p)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let p = Pin::new(&mut self.inner).poll_flush(cx);
        self.record(p)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// Past its deadline, a connection whose response body is still being sent ends; one whose
    /// response was delivered is only disarmed.
    #[tokio::test(start_paused = true)]
    async fn a_connection_ends_at_an_undelivered_responses_deadline() {
        let clock = Arc::new(ResponseClock::default());
        let forever = Clocked::new(std::future::pending::<()>(), Arc::clone(&clock));
        let body = clock.arm(Instant::now() + Duration::from_secs(5), Body::from("x"));
        let ended = tokio::time::timeout(Duration::from_secs(6), forever).await;
        assert!(ended.is_ok(), "the body is live: the connection ends");
        drop(body);

        let clock = Arc::new(ResponseClock::default());
        let forever = Clocked::new(std::future::pending::<()>(), Arc::clone(&clock));
        drop(clock.arm(Instant::now() + Duration::from_secs(5), Body::from("x")));
        let ended = tokio::time::timeout(Duration::from_secs(6), forever).await;
        assert!(ended.is_err(), "delivered: the connection stays");
        assert!(clock.deadline.lock().is_none(), "and the clock is disarmed");

        // A later request (a watch) disarms the clock of the response before it: that
        // response's deadline no longer ends the connection, even while the socket is stalled.
        let clock = Arc::new(ResponseClock::default());
        let forever = Clocked::new(std::future::pending::<()>(), Arc::clone(&clock));
        drop(clock.arm(Instant::now() + Duration::from_secs(5), Body::from("x")));
        clock.disarm();
        clock.stalled.store(true, Ordering::Release);
        let ended = tokio::time::timeout(Duration::from_secs(6), forever).await;
        assert!(ended.is_err(), "disarmed: the connection stays");
    }
}
