//! Deadlines delivered from one place: a watch's end in the server, and its periodic bookmarks
//! in the cache.
//!
//! Why: an idle watch used to wait in a `select!` holding a tokio timer entry for its deadline
//! and a waiter on the shutdown signal, inside the pending future around its pump, and its stream
//! kept a boxed tokio `Sleep` (112 B and a timer entry) for its bookmarks: per idle watch, for a
//! timer that fires once a minute at most (design/performance.md). Here one wheel keeps, for each
//! waiting deadline, its tick and its task's waker, and one task advances the wheel every tick: it
//! wakes the deadlines that passed and, when the wheel has a shutdown signal, all of them at
//! shutdown. A waiting deadline holds a [`Deadline`] (40 B) and one entry in the wheel's map; it
//! holds no future. A server has one wheel for its watches' ends (with its shutdown signal); a
//! cache has one for its watches' bookmarks (without: a bookmark has no reason to come at
//! shutdown). The cache cannot take the server's: it is built before any server, by whoever
//! follows its upstream, and the server is above it.
//!
//! Invariants:
//! - A deadline is never early: it is rounded up to a whole tick, and a tick has passed only once
//!   the wheel's clock (`now`, ticks since `epoch`) reached it. It may be up to a tick late
//!   (kube-apiserver's watch timeouts are minutes, randomised; its bookmarks are a minute apart
//!   and "best effort"; a tick is 1 s). Tick 0 has always passed ([`Deadline::reset_passed`]).
//! - No lost wakeup: a deadline stores its waker in its entry (under the lock) before it reads
//!   `now` and `stopped`; the wheel's task stores those before it takes the lock to find the
//!   wakers. So either the deadline reads the new value, or the task finds its waker. Every poll
//!   arms (an entry whose tick passed is fired at the task's next tick), so a `Ready` that its
//!   caller ignores still has a wakeup coming.
//! - The task runs while the map has an entry (`running`, changed only under the lock): an idle
//!   wheel has no task, and an entry always has a task to fire it. A task dropped with its
//!   runtime clears `running` (its guard), so a later deadline starts a new one.
//! - A [`Deadline`]'s entry is gone once the handle is dropped or reset. Ids are never reused (a
//!   reset takes a new one), so removing an entry the task already fired cannot remove another's.
//! - Lock order: the wheel's lock is a leaf; no waker is woken and no task spawned under it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

/// The wheel's granularity in a server and a cache.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// A wheel of deadlines (see the module's documentation).
pub(crate) struct Deadlines {
    epoch: Instant,
    tick: Duration,
    /// Ticks since `epoch` the task has seen pass.
    now: AtomicU32,
    /// Set once the server shuts down (or its shutdown signal is gone).
    stopped: AtomicBool,
    /// The last id given to a deadline.
    last_id: AtomicU64,
    /// The server's shutdown signal, for the task (`None`: a cache's wheel, never stopped).
    shutdown: Option<watch::Receiver<bool>>,
    inner: Mutex<Inner>,
}

struct Inner {
    /// The waiting watches by (deadline tick, id).
    due: BTreeMap<(u32, u64), Waker>,
    /// Whether a task is advancing the wheel.
    running: bool,
}

impl Deadlines {
    /// A wheel of `tick` granularity; with `shutdown`, every deadline passes once it becomes true.
    pub fn new(shutdown: Option<watch::Receiver<bool>>, tick: Duration) -> Arc<Deadlines> {
        Arc::new(Deadlines {
            epoch: Instant::now(),
            tick,
            now: AtomicU32::new(0),
            stopped: AtomicBool::new(false),
            last_id: AtomicU64::new(0),
            shutdown,
            inner: Mutex::new(Inner {
                due: BTreeMap::new(),
                running: false,
            }),
        })
    }

    /// A deadline at `at` (rounded up to the next tick), armed when first polled.
    pub fn deadline(self: &Arc<Self>, at: Instant) -> Deadline {
        Deadline {
            wheel: Arc::clone(self),
            id: self.next_id(),
            tick: self.tick_of(at),
            waker: None,
        }
    }

    /// `at` in ticks since the epoch, rounded up (at least 1: tick 0 is "passed").
    fn tick_of(&self, at: Instant) -> u32 {
        let since = at.saturating_duration_since(self.epoch);
        let ticks = since.as_nanos().div_ceil(self.tick.as_nanos().max(1));
        u32::try_from(ticks).unwrap_or(u32::MAX).max(1)
    }

    fn next_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether the server is shutting down (never, for a wheel without a shutdown signal).
    /// Only the server's watches ask (a cache built without it never does).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst) || self.shutdown.as_ref().is_some_and(|s| *s.borrow())
    }

    /// Watches waiting in the wheel.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.inner.lock().due.len()
    }

    /// Stores `waker` as `(tick, id)`'s, starting the task if none runs.
    fn arm(self: &Arc<Self>, tick: u32, id: u64, waker: &Waker) {
        let start = {
            let mut inner = self.inner.lock();
            inner.due.insert((tick, id), waker.clone());
            !std::mem::replace(&mut inner.running, true)
        };
        if start {
            let run = run(
                Arc::downgrade(self),
                self.shutdown.clone(),
                self.epoch,
                self.tick,
            );
            tokio::spawn(run);
        }
    }

    fn disarm(&self, tick: u32, id: u64) {
        // Dropped outside the lock: a waker's drop may run a task's code.
        let waker = self.inner.lock().due.remove(&(tick, id));
        drop(waker);
    }

    /// The task's step at tick `now`: wakes the watches due. Returns whether the task goes on.
    fn advance(&self, now: u32) -> bool {
        self.now.fetch_max(now, Ordering::SeqCst);
        let (due, more) = {
            let mut inner = self.inner.lock();
            let later = inner.due.split_off(&(now.saturating_add(1), 0));
            let due = std::mem::replace(&mut inner.due, later);
            inner.running = !inner.due.is_empty();
            (due, inner.running)
        };
        due.into_values().for_each(Waker::wake);
        more
    }

    /// Shutdown: wakes every watch waiting.
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let due = {
            let mut inner = self.inner.lock();
            inner.running = false;
            std::mem::take(&mut inner.due)
        };
        due.into_values().for_each(Waker::wake);
    }
}

/// Clears `running` when the task is dropped before it ended (its runtime shut down). A task that
/// ends by itself cleared it already, under the lock, and a new task may be running by then.
struct Running {
    wheel: Weak<Deadlines>,
    ended: bool,
}

impl Running {
    /// The task ends by itself (it set `running` under the lock).
    fn end(&mut self) {
        self.ended = true;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.ended
            && let Some(w) = self.wheel.upgrade()
        {
            w.inner.lock().running = false;
        }
    }
}

/// The wheel's task: one sleep to the next tick at a time, until the wheel is empty or gone.
/// (The guard is made outside the `async` block: a task dropped before its first poll must clear
/// `running` too.)
fn run(
    wheel: Weak<Deadlines>,
    mut shutdown: Option<watch::Receiver<bool>>,
    epoch: Instant,
    tick: Duration,
) -> impl Future<Output = ()> + Send {
    let mut running = Running {
        wheel,
        ended: false,
    };
    async move {
        let tick_nanos = tick.as_nanos().max(1);
        loop {
            let elapsed = Instant::now().saturating_duration_since(epoch).as_nanos() / tick_nanos;
            let next = epoch + tick.saturating_mul(u32::try_from(elapsed + 1).unwrap_or(u32::MAX));
            // `Err`: the server is gone, and with it whoever could end its watches.
            let stopping = async {
                match &mut shutdown {
                    Some(s) => drop(s.wait_for(|s| *s).await),
                    None => std::future::pending().await,
                }
            };
            let stop = tokio::select! {
                () = tokio::time::sleep_until(next) => false,
                () = stopping => true,
            };
            let Some(w) = running.wheel.upgrade() else {
                return;
            };
            if stop {
                w.stop();
                running.end();
                return;
            }
            let now = Instant::now().saturating_duration_since(epoch).as_nanos() / tick_nanos;
            if !w.advance(u32::try_from(now).unwrap_or(u32::MAX)) {
                running.end();
                return;
            }
        }
    }
}

/// One deadline in a [`Deadlines`] wheel.
pub(crate) struct Deadline {
    wheel: Arc<Deadlines>,
    id: u64,
    /// The deadline, in the wheel's ticks.
    tick: u32,
    /// The waker in this deadline's entry (`None`: no entry yet).
    waker: Option<Waker>,
}

impl Deadline {
    /// Ready once the deadline passed or the wheel's server is shutting down; otherwise `cx` is
    /// woken when one of them happens.
    pub fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.wheel.arm(self.tick, self.id, cx.waker());
            self.waker = Some(cx.waker().clone());
        }
        if self.wheel.stopped.load(Ordering::SeqCst)
            || self.wheel.now.load(Ordering::SeqCst) >= self.tick
        {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Deadline {
    /// Moves the deadline to `at` (rounded up to a tick), armed when next polled.
    pub fn reset(&mut self, at: Instant) {
        let tick = self.wheel.tick_of(at);
        self.move_to(tick);
    }

    /// Moves the deadline to one that has passed: the next poll is ready.
    pub fn reset_passed(&mut self) {
        self.move_to(0);
    }

    /// Whether the deadline is later than `at` would be.
    pub fn is_after(&self, at: Instant) -> bool {
        self.tick > self.wheel.tick_of(at)
    }

    fn move_to(&mut self, tick: u32) {
        if self.waker.take().is_some() {
            self.wheel.disarm(self.tick, self.id);
        }
        self.id = self.wheel.next_id();
        self.tick = tick;
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if self.waker.is_some() {
            self.wheel.disarm(self.tick, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    fn wheel() -> (watch::Sender<bool>, Arc<Deadlines>) {
        let (tx, rx) = watch::channel(false);
        (tx, Deadlines::new(Some(rx), TICK))
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_is_never_early_and_at_most_a_tick_late() {
        let (_tx, wheel) = wheel();
        let start = Instant::now();
        for after in [
            Duration::from_millis(1),
            Duration::from_millis(1500),
            Duration::from_secs(3),
        ] {
            let began = Instant::now();
            let mut d = wheel.deadline(began + after);
            poll_fn(|cx| d.poll_passed(cx)).await;
            let took = began.elapsed();
            assert!(took >= after && took <= after + TICK, "{after:?}: {took:?}");
        }
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_wakes_every_waiting_deadline() {
        let (tx, wheel) = wheel();
        let far = Instant::now() + Duration::from_secs(3600);
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let mut d = wheel.deadline(far);
                tokio::spawn(async move { poll_fn(|cx| d.poll_passed(cx)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(wheel.waiting(), 3);
        tx.send(true).unwrap();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(1), t)
                .await
                .expect("woken at shutdown")
                .unwrap();
        }
        assert!(wheel.stopped());
        assert_eq!(wheel.waiting(), 0);
        // A deadline made after the shutdown has passed already.
        let mut late = wheel.deadline(far);
        assert!(
            poll_fn(|cx| Poll::Ready(late.poll_passed(cx)))
                .await
                .is_ready()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_deadline_leaves_nothing_and_the_task_ends() {
        let (_tx, wheel) = wheel();
        let mut d = wheel.deadline(Instant::now() + Duration::from_secs(60));
        assert!(
            poll_fn(|cx| Poll::Ready(d.poll_passed(cx)))
                .await
                .is_pending()
        );
        assert_eq!(wheel.waiting(), 1);
        assert!(wheel.inner.lock().running);
        drop(d);
        assert_eq!(wheel.waiting(), 0);
        // The task ends at its next tick, the wheel being empty.
        tokio::time::sleep(TICK * 2).await;
        assert!(!wheel.inner.lock().running);
        // And the next deadline starts one again.
        let mut d = wheel.deadline(Instant::now() + TICK);
        poll_fn(|cx| d.poll_passed(cx)).await;
        // Every poll arms: the poll that saw the tick pass may have stored its waker again (when
        // `will_wake` says it changed, as it may for the same task in a release build, whose
        // vtables can be duplicated), and that entry goes at the task's next tick.
        tokio::time::sleep(TICK * 2).await;
        assert_eq!(wheel.waiting(), 0);
        assert!(!wheel.inner.lock().running);
    }

    #[test]
    fn a_task_dropped_with_its_runtime_is_replaced() {
        let rt = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
        };
        let (_tx, wheel) = rt().block_on(async { wheel() });
        let first = rt();
        let mut far = first.block_on(async {
            let mut d = wheel.deadline(Instant::now() + Duration::from_secs(3600));
            assert!(
                poll_fn(|cx| Poll::Ready(d.poll_passed(cx)))
                    .await
                    .is_pending()
            );
            d
        });
        assert!(wheel.inner.lock().running);
        drop(first);
        assert!(!wheel.inner.lock().running);
        // A later runtime's watch gets a task again, and its deadline passes.
        rt().block_on(async {
            let mut d = wheel.deadline(Instant::now() + TICK);
            tokio::time::timeout(TICK * 3, poll_fn(|cx| d.poll_passed(cx)))
                .await
                .expect("a new task fired it");
        });
        drop(far.waker.take());
    }
}
