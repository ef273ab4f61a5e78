//! The streams of one HTTP/2 connection, polled by the connection's own task instead of a tokio
//! task each.
//!
//! hyper hands every HTTP/2 stream (the service's future, then the pipe of its response body) to
//! the connection's executor. With tokio's, each stream is a task: a 256-byte allocation (tokio
//! aligns a task to 128 bytes) that a kubelet's idle watch holds for as long as it is open, and
//! every event a stream sends takes two wake-ups, the stream's task and then the connection's
//! (to flush). Here the connection's task polls them, after hyper's connection: a stream costs
//! its boxed future and one node in a [`FuturesUnordered`], and an event is one wake-up of one
//! task.
//!
//! Work that can be heavy does not run in that task: requests other than watches are handed to a
//! tokio task of their own by [`super::h2_service`] (their response is then a pointer to wait
//! on), and the heavy parts of a request run on the blocking pool (`blocking.rs`). A watch's
//! stream is polled here from its start: it decides little before its body streams.
//!
//! A stream that panics ends alone (caught here), as a task of its own would.
//!
//! Invariants:
//! - A future handed to [`StreamExec`] is polled by the [`WithStreams`] that made it (the inbox is
//!   drained before the streams are polled, and after the connection is, in the same poll).
//! - When the connection's future ends, streams still running are not dropped: each is spawned
//!   as a tokio task and ends as it would have (an upgraded stream, such as a CONNECT tunnel,
//!   outlives its connection's future).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};

/// The futures hyper has handed over since the connection's task last took them.
type Inbox = Arc<Mutex<Vec<BoxFuture<'static, ()>>>>;

/// The executor hyper's HTTP/2 connection hands its streams to: it keeps them for the
/// connection's [`WithStreams`]. hyper clones it into every stream (8 bytes each).
#[derive(Clone, Default)]
pub(crate) struct StreamExec {
    inbox: Inbox,
}

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        // A stream that panics (a bug) ends alone, as its own tokio task would have: the
        // connection's other streams go on.
        let fut = std::panic::AssertUnwindSafe(fut).catch_unwind().map(|r| {
            if r.is_err() {
                tracing::error!("an HTTP/2 stream panicked; its stream is reset");
            }
        });
        // Only the connection's own poll calls this, and only that poll takes the inbox: the
        // lock is never contended. A poisoned lock still holds a valid Vec.
        self.inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Box::pin(fut));
    }
}

/// A connection's future with its streams: polls both, in one task.
pub(crate) struct WithStreams<C> {
    conn: C,
    inbox: Inbox,
    streams: FuturesUnordered<BoxFuture<'static, ()>>,
}

/// `conn`, polled with the streams `exec` is handed. `exec` must be the executor `conn`'s
/// builder was made with.
pub(crate) fn with_streams<C>(conn: C, exec: &StreamExec) -> WithStreams<C> {
    WithStreams {
        conn,
        inbox: Arc::clone(&exec.inbox),
        streams: FuturesUnordered::new(),
    }
}

impl<C> WithStreams<C> {
    /// Moves what hyper handed over into the polled set; `false` when there was nothing.
    fn take_inbox(&mut self) -> bool {
        let mut inbox = self
            .inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if inbox.is_empty() {
            return false;
        }
        // Taken, not drained: the inbox keeps no room for the largest burst of streams.
        let new = std::mem::take(&mut *inbox);
        drop(inbox);
        self.streams.extend(new);
        true
    }

    /// Polls the streams until none is ready (or `FuturesUnordered` yields, having polled each
    /// once: it then wakes this task again).
    fn poll_streams(&mut self, cx: &mut Context<'_>) {
        while let Poll::Ready(Some(())) = self.streams.poll_next_unpin(cx) {}
    }
}

impl<C> Future for WithStreams<C>
where
    C: Future + Unpin,
{
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.get_mut();
        // Streams first: what they send is then flushed by the connection's poll below.
        this.take_inbox();
        this.poll_streams(cx);
        loop {
            if let Poll::Ready(out) = Pin::new(&mut this.conn).poll(cx) {
                // Whatever still runs goes on by itself (the last take: nothing can be handed
                // over once the connection's future has ended).
                this.take_inbox();
                for s in std::mem::take(&mut this.streams) {
                    tokio::spawn(s);
                }
                return Poll::Ready(out);
            }
            // Streams the connection's poll accepted are started at once; their response's
            // first frames then need the connection again.
            if !this.take_inbox() {
                return Poll::Pending;
            }
            this.poll_streams(cx);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::rt::Executor;

    use super::*;

    /// A connection that hands `n` streams over on its first poll, then ends when told.
    struct Conn {
        exec: StreamExec,
        handed: bool,
        n: usize,
        ran: Arc<AtomicUsize>,
        end: Arc<tokio::sync::Notify>,
        ended: Pin<Box<dyn Future<Output = ()> + Send>>,
    }

    impl Future for Conn {
        type Output = &'static str;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
            if !self.handed {
                self.handed = true;
                for _ in 0..self.n {
                    let ran = Arc::clone(&self.ran);
                    let end = Arc::clone(&self.end);
                    self.exec.execute(async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        // A stream that runs until told, past its connection's end.
                        end.notified().await;
                        ran.fetch_add(1, Ordering::SeqCst);
                    });
                }
            }
            self.ended.as_mut().poll(cx).map(|()| "done")
        }
    }

    #[tokio::test]
    async fn streams_run_in_the_connections_task_and_outlive_it() {
        let exec = StreamExec::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let end = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let conn = Conn {
            exec: exec.clone(),
            handed: false,
            n: 3,
            ran: Arc::clone(&ran),
            end: Arc::clone(&end),
            ended: Box::pin(async move {
                let _ = rx.await;
            }),
        };
        let task = tokio::spawn(with_streams(conn, &exec));
        // The streams start without a task of their own.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while ran.load(Ordering::SeqCst) < 3 {
            assert!(tokio::time::Instant::now() < deadline, "streams not polled");
            tokio::task::yield_now().await;
        }
        assert_eq!(ran.load(Ordering::SeqCst), 3);
        // The connection ends; its streams, still waiting, are not dropped.
        tx.send(()).unwrap();
        assert_eq!(task.await.unwrap(), "done");
        end.notify_waiters();
        while ran.load(Ordering::SeqCst) < 6 {
            assert!(tokio::time::Instant::now() < deadline, "streams dropped");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_panicking_stream_ends_alone() {
        let exec = StreamExec::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (e, r) = (exec.clone(), Arc::clone(&ran));
        let mut handed = false;
        let mut ended: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            let _ = rx.await;
        });
        let conn = std::future::poll_fn(move |cx| {
            if !handed {
                handed = true;
                e.execute(async { panic!("a bug in one stream") });
                let r = Arc::clone(&r);
                e.execute(async move {
                    tokio::task::yield_now().await;
                    r.fetch_add(1, Ordering::SeqCst);
                });
            }
            ended.as_mut().poll(cx)
        });
        let task = tokio::spawn(with_streams(Box::pin(conn), &exec));
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while ran.load(Ordering::SeqCst) < 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the other stream stopped"
            );
            tokio::task::yield_now().await;
        }
        // The connection's task lives on and ends normally.
        assert!(!task.is_finished());
        tx.send(()).unwrap();
        task.await.expect("the connection's task did not panic");
    }
}
