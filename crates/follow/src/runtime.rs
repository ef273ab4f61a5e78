//! `UpstreamRuntime`: the thread the followers run on, with its own tokio runtime, apart from
//! whatever serves clients.
//!
//! Why (issue 22, `tests/system/storm.rs`, design/reliability.md): a follower's etcd watch, its idle
//! probe and the etcd client's HTTP/2 keep-alive all have time limits measured on the clock. On
//! the runtime that also runs the server, a storm of TLS handshakes and watch opens queued the
//! follower and the client's connection task behind thousands of ready tasks: the server's
//! workers woke a task up to 36 s late, so the keep-alive's pong was read after its 3 s deadline
//! (`KeepAliveTimedOut`, every watch on the connection lost), reopened watches timed out, and the
//! caches went not ready although etcd answered in milliseconds. On a thread of its own the
//! follower waits only for the operating system's scheduler, which shares the cores fairly
//! between threads, not for the server's queue.
//!
//! What runs here: the follower and consistency-check tasks, and every task the etcd client
//! spawns (its channel's worker and its connections), because the client is made here. Callers on
//! other runtimes use the client freely: their requests are handed to the worker over a channel.
//!
//! One thread, a current-thread runtime: a follower's work is decoding and applying what its
//! upstream sends, small next to serving it. Dropping the `UpstreamRuntime` stops the runtime and
//! ends its tasks (as dropping the followers' shutdown sender already did).

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::warn;

/// A runtime on a thread of its own, stopped when dropped.
pub struct UpstreamRuntime {
    handle: Handle,
    /// Dropped to stop the thread; `None` when running on the caller's runtime.
    _stop: Option<oneshot::Sender<()>>,
}

impl UpstreamRuntime {
    /// Starts the thread and its runtime. When the thread or the runtime cannot be made, the
    /// tasks run on the caller's runtime, as they did before (logged): serving goes on, unisolated.
    ///
    /// # Panics
    /// Outside a tokio runtime, only when the thread cannot be started.
    pub(crate) fn start() -> UpstreamRuntime {
        let (stop, stopped) = oneshot::channel::<()>();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("watchcache-upstream".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(rt.handle().clone()));
                // Runs every spawned task until the stop sender is dropped; the runtime is then
                // dropped here, off any async context, cancelling what is left.
                let _ = rt.block_on(stopped);
            });
        // Waits for the thread to build its runtime (well under a millisecond), once per
        // upstream at connect.
        let started = match thread {
            Ok(_) => handle_rx
                .recv()
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
            Err(e) => Err(e.to_string()),
        };
        match started {
            Ok(handle) => UpstreamRuntime {
                handle,
                _stop: Some(stop),
            },
            Err(e) => {
                warn!(error = %e, "cannot start the upstream's own runtime; the followers share the caller's");
                UpstreamRuntime {
                    handle: Handle::current(),
                    _stop: None,
                }
            }
        }
    }

    /// The runtime's handle, for spawning from what outlives a borrow of it.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Spawns a task on this runtime.
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(task)
    }

    /// Runs `f` to its end on this runtime (so that what it spawns lives here) and returns its
    /// output; `None` if the runtime stopped first. A panic in `f` is resumed here.
    pub async fn run<F>(&self, f: F) -> Option<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.handle.spawn(f).await {
            Ok(out) => Some(out),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn tasks_run_on_their_own_thread_while_the_callers_runtime_is_blocked() {
        let rt = UpstreamRuntime::start();
        let caller = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            // A timer and a spawn: both need this runtime's drivers, not the caller's.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            let inner = tokio::spawn(async { std::thread::current().name().map(str::to_owned) });
            let _ = tx.send((std::thread::current().id(), inner.await.ok().flatten()));
        });
        // The caller's thread blocks; the task still runs to its end.
        let (id, name) = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_ne!(id, caller);
        assert_eq!(name.as_deref(), Some("watchcache-upstream"));
        assert_eq!(rt.run(async { 7 }).await, Some(7));
    }

    #[test]
    fn dropping_it_stops_its_tasks() {
        let rt = UpstreamRuntime::start();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        rt.spawn(async move {
            // Holds the sender until cancelled.
            std::future::pending::<()>().await;
            drop(tx);
        });
        drop(rt);
        // The sender is dropped with the cancelled task: the receiver sees the channel closed.
        assert_eq!(rx.blocking_recv(), None);
    }
}
