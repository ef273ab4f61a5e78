//! Deadlines delivered from one place: a watch's end in the server, and its periodic bookmarks.
//!
//! Why: an idle watch used to wait in a `select!` holding a tokio timer entry for its deadline
//! and a waiter on the shutdown signal, inside the pending future around its pump, and its stream
//! kept a boxed tokio `Sleep` (112 B and a timer entry) for its bookmarks: per idle watch, for a
//! timer that fires once a minute at most (design/performance.md). Here one wheel keeps, for each
//! waiting deadline, its tick and its task's waker, and one task advances the wheel every tick: it
//! wakes the deadlines that passed (a batch at a time, `WAKE_BATCH`) and, when the wheel has a shutdown signal, all of them at
//! shutdown. A waiting watch holds one [`Deadline`] (40 B) and one entry in a wheel's map, for
//! both its end and its next bookmark; it holds no future.
//!
//! A server has one wheel (with its shutdown signal): a served watch's deadline there holds its
//! end and, when it asked for them, its bookmarks (`Cache::watch_until`). A cache has one for the
//! bookmarks of the watches made without a server (`Cache::watch`; without a shutdown signal: a
//! bookmark has no reason to come at shutdown, and such a watch has no end). The cache cannot
//! take the server's wheel when it is built: it is built before any server, by whoever follows
//! its upstream, and the server is above it; a served watch is handed the server's.
//!
//! Invariants:
//! - A deadline is never early: it is rounded up to a whole tick, and a tick has passed only once
//!   the wheel's clock (`now`, ticks since `epoch`) reached it. It may be up to a tick late
//!   (kube-apiserver's watch timeouts are minutes, randomised; its bookmarks are a minute apart
//!   and "best effort"; a tick is 1 s). Tick 0 has always passed (`Deadline::reset_passed`).
//! - No lost wakeup: a deadline stores its waker in its entry (under the lock) before it reads
//!   `now` and `stopped`; the wheel's task stores those before it takes the lock to find the
//!   wakers. So either the deadline reads the new value, or the task finds its waker. Every poll
//!   arms (an entry whose tick passed is fired at the task's next tick), so a `Ready` that its
//!   caller ignores still has a wakeup coming.
//! - The task runs while the map has an entry (`running`, changed only under the lock): an idle
//!   wheel has no task, and an entry always has a task to fire it. A task dropped with its
//!   runtime clears `running` (its guard), so a later deadline starts a new one.
//! - A watch has at most one entry: its [`Deadline`]'s, at the earlier of its end and its next
//!   bookmark. Which passed is told by their ticks against `now`, never by the wakeup: a wakeup at
//!   the earlier tick finds that one passed; the end (or shutdown, which passes every end but no
//!   bookmark) ends the watch; a due bookmark is sent and the next one set, which moves the entry.
//! - A [`Deadline`]'s entry is gone once the handle is dropped or either tick moves. Ids are never
//!   reused (a move takes a new one), so removing an entry the task already fired cannot remove
//!   another's.
//! - Lock order: the wheel's lock is a leaf; no waker is woken and no task spawned under it.
//! - A drain ([`Deadlines::drain`]) moves no entry itself: it publishes the drain's first tick
//!   and span, then wakes every waiting watch (its entry kept). Each end is then brought forward, by the
//!   deadline that owns it, to its slot in the span (from its id, so the ends spread evenly),
//!   never later than it was: a drain only ever makes an end earlier. An end brought forward
//!   keeps its tick, so the slot is read once.

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
pub const TICK: Duration = Duration::from_secs(1);

/// How many due deadlines the wheel's task wakes before it lets the runtime run them (and what
/// else waits: an event's delivery). Watches opened together, as after a thousand kubelets
/// reconnect, keep their bookmarks together for good (each next one is a minute after the last).
/// Woken at once, a tick's 2 500 of them queued their connections' tasks ahead of the events
/// woken just after: write → client p99 88–137 ms at 10 000 × 10, against 17 ms without
/// bookmarks (design/performance.md, "Bookmarks woken in batches"). A batch is a few
/// milliseconds of work.
const WAKE_BATCH: usize = 64;

/// A wheel of deadlines (see the module's documentation).
pub struct Deadlines {
    epoch: Instant,
    tick: Duration,
    /// Ticks since `epoch` the task has seen pass.
    now: AtomicU32,
    /// Set once the server shuts down (or its shutdown signal is gone).
    stopped: AtomicBool,
    /// The first tick of a drain (`NEVER`: none begun), then how many ticks its ends spread
    /// over (`drain_span`).
    drain_from: AtomicU32,
    drain_span: AtomicU32,
    /// The last id given to a deadline.
    last_id: AtomicU64,
    /// The server's shutdown signal, for the task (`None`: a cache's wheel, never stopped).
    shutdown: Option<watch::Receiver<bool>>,
    inner: Mutex<Inner>,
}

/// A waiting watch's place in the wheel: its tick, then its id, high half first (the order of
/// `(tick, id)`). Why not `(u32, u64)`: aligned to 8, that key is 16 bytes, and a B-tree leaf of
/// 11 of them and their wakers a 384-byte block; at 12 bytes it is a 320-byte block (internal
/// nodes 512 → 448). The map filled in rising order keeps its nodes about half full: ~68 bytes
/// a watch, now ~57 (design/performance.md, "HPACK's table").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u32, u32, u32);

impl Key {
    fn new(tick: u32, id: u64) -> Key {
        // The halves of `id`, by design.
        #[allow(clippy::cast_possible_truncation)]
        Key(tick, (id >> 32) as u32, id as u32)
    }
}

struct Inner {
    /// The waiting watches by (deadline tick, id).
    due: BTreeMap<Key, Waker>,
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
            drain_from: AtomicU32::new(NEVER),
            drain_span: AtomicU32::new(0),
            last_id: AtomicU64::new(0),
            shutdown,
            inner: Mutex::new(Inner {
                due: BTreeMap::new(),
                running: false,
            }),
        })
    }

    /// A deadline ending at `end` (`None`: never) with its first bookmark at `bookmark`
    /// (`None`: no bookmarks), each rounded up to the next tick; armed when first polled.
    pub(crate) fn deadline(
        self: &Arc<Self>,
        end: Option<Instant>,
        bookmark: Option<Instant>,
    ) -> Deadline {
        Deadline {
            wheel: Arc::clone(self),
            id: self.next_id(),
            end: end.map_or(NEVER, |at| self.tick_of(at)),
            bookmark: bookmark.map_or(NEVER, |at| self.tick_of(at)),
            waker: None,
        }
    }

    /// `at` in ticks since the epoch, rounded up (at least 1: tick 0 is "passed"; below
    /// `NEVER`: a deadline beyond the wheel's range still passes at its last tick, 136 years on).
    fn tick_of(&self, at: Instant) -> u32 {
        let since = at.saturating_duration_since(self.epoch);
        let ticks = since.as_nanos().div_ceil(self.tick.as_nanos().max(1));
        u32::try_from(ticks)
            .unwrap_or(NEVER - 1)
            .clamp(1, NEVER - 1)
    }

    fn next_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether the server is shutting down (never, for a wheel without a shutdown signal).
    /// Only the server's watches ask (a cache built without it never does).
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst) || self.shutdown.as_ref().is_some_and(|s| *s.borrow())
    }

    /// Watches waiting in the wheel.
    pub fn waiting(&self) -> usize {
        self.inner.lock().due.len()
    }

    /// Stores `waker` as `(tick, id)`'s, starting the task if none runs.
    fn arm(self: &Arc<Self>, tick: u32, id: u64, waker: &Waker) {
        let start = {
            let mut inner = self.inner.lock();
            inner.due.insert(Key::new(tick, id), waker.clone());
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
        let waker = self.inner.lock().due.remove(&Key::new(tick, id));
        drop(waker);
    }

    /// The task's step at tick `now`: takes the watches due, to be woken (in their order), and
    /// whether the task goes on.
    fn advance(&self, now: u32) -> (BTreeMap<Key, Waker>, bool) {
        self.now.fetch_max(now, Ordering::SeqCst);
        let mut inner = self.inner.lock();
        let later = inner.due.split_off(&Key::new(now.saturating_add(1), 0));
        let due = std::mem::replace(&mut inner.due, later);
        inner.running = !inner.due.is_empty();
        (due, inner.running)
    }

    /// Begins a drain: every end still ahead is brought forward into the next `over`, spread
    /// evenly over its ticks (from the next tick on), so that the watches' clients come back
    /// elsewhere a few at a time rather than all at once. Wakes every watch waiting, for each
    /// to take its slot. A second drain changes nothing.
    pub fn drain(&self, over: Duration) {
        if self.draining() {
            return;
        }
        let from = self.tick_of(Instant::now() + self.tick);
        let span = over.as_nanos() / self.tick.as_nanos().max(1);
        self.drain_span
            .store(u32::try_from(span).unwrap_or(NEVER - 1), Ordering::SeqCst);
        if self
            .drain_from
            .compare_exchange(NEVER, from, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        // The entries stay: a watch whose end is within the span keeps its own.
        let due: Vec<Waker> = self.inner.lock().due.values().cloned().collect();
        due.into_iter().for_each(Waker::wake);
    }

    /// Whether a drain began.
    pub fn draining(&self) -> bool {
        self.drain_from.load(Ordering::SeqCst) != NEVER
    }

    /// The tick a drain brings the end `end` of deadline `id` forward to, when a drain began
    /// and `end` is past its span: the deadline's slot in the span, by a multiplicative hash of
    /// the id (ids are sequential; the hash spreads them evenly). An end within the span stays
    /// (so the slot is taken once, though moving gives the deadline a new id); `NEVER` (a
    /// watch without an end) too.
    fn drained_end(&self, id: u64, end: u32) -> Option<u32> {
        let from = self.drain_from.load(Ordering::SeqCst);
        if from == NEVER || end == NEVER {
            return None;
        }
        let span = self.drain_span.load(Ordering::SeqCst);
        if end <= from.saturating_add(span) {
            return None;
        }
        let spread = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % (u64::from(span) + 1);
        Some(from.saturating_add(u32::try_from(spread).unwrap_or(0)))
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
            let (due, more) = w.advance(u32::try_from(now).unwrap_or(u32::MAX));
            drop(w);
            if !more {
                // Before the yields below: a deadline armed meanwhile starts a task of its own.
                running.end();
            }
            // Woken WAKE_BATCH at a time, the runtime running what they woke (and what else
            // waits) in between. A deadline polled for another reason meanwhile finds its tick
            // passed already (`now` is set); its later wakeup is then a spurious one.
            let mut due = due.into_values();
            loop {
                let mut woken = 0;
                for waker in due.by_ref().take(WAKE_BATCH) {
                    waker.wake();
                    woken += 1;
                }
                if woken < WAKE_BATCH {
                    break;
                }
                tokio::task::yield_now().await;
            }
            if !more {
                return;
            }
        }
    }
}

/// A tick that never passes: no end (an embedded cache's watch), or no bookmarks.
const NEVER: u32 = u32::MAX;

/// A watch's one entry in a [`Deadlines`] wheel, armed at the earlier of its two deadlines: its
/// end (a served watch's, in the server's wheel, which also ends it at shutdown) and its next
/// periodic bookmark. Which of them passed is told apart by their ticks against the wheel's
/// clock, so a watch needs one entry and one handle for both.
pub struct Deadline {
    wheel: Arc<Deadlines>,
    id: u64,
    /// The end, in the wheel's ticks (`NEVER`: none, only its reader ends the watch).
    end: u32,
    /// The next bookmark, in the wheel's ticks (`NEVER`: none asked; 0: due now).
    bookmark: u32,
    /// The waker in this deadline's entry (`None`: no entry yet). The entry's tick is
    /// [`Deadline::tick`]: both ticks change only through [`Deadline::move_to`], which removes
    /// the entry first.
    waker: Option<Waker>,
}

impl Deadline {
    /// The tick the entry is armed at: the earlier of the two.
    fn tick(&self) -> u32 {
        self.end.min(self.bookmark)
    }

    /// Stores `cx`'s waker in the entry unless it is there already.
    fn arm(&mut self, cx: &Context<'_>) {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.wheel.arm(self.tick(), self.id, cx.waker());
            self.waker = Some(cx.waker().clone());
        }
    }

    /// Whether the wheel's clock reached `tick`. Read after arming (see the module's
    /// invariants).
    fn reached(&self, tick: u32) -> bool {
        tick != NEVER && self.wheel.now.load(Ordering::SeqCst) >= tick
    }

    /// Ready once the end passed or the wheel's server is shutting down; otherwise `cx` is
    /// woken when one of them happens (or when the next bookmark is due: every poll arms the
    /// one entry, at the earlier deadline).
    pub(crate) fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.arm(cx);
        // Read after arming, as `stopped`: a drain that began before the entry was stored is
        // seen here; one that began after wakes it.
        if let Some(end) = self.wheel.drained_end(self.id, self.end) {
            self.move_to(end, self.bookmark);
            self.arm(cx);
        }
        if self.wheel.stopped.load(Ordering::SeqCst) || self.reached(self.end) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Ready once the next bookmark is due (the caller then sets the one after it with
    /// [`Deadline::next_bookmark`]); otherwise `cx` is woken when it is (or at the end). Shutdown
    /// alone does not make a bookmark due: it ends the watch, through
    /// [`poll_end`](Deadline::poll_end).
    pub(crate) fn poll_bookmark(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.arm(cx);
        if self.reached(self.bookmark) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Whether the deadline has an end (a served watch's).
    pub(crate) fn has_end(&self) -> bool {
        self.end != NEVER
    }

    /// The wheel the deadline is in.
    pub(crate) fn wheel(&self) -> &Arc<Deadlines> {
        &self.wheel
    }

    /// Whether the deadline has bookmarks.
    pub(crate) fn has_bookmarks(&self) -> bool {
        self.bookmark != NEVER
    }

    /// Moves the next bookmark to `at` (rounded up to a tick), armed when next polled.
    pub(crate) fn set_bookmark(&mut self, at: Instant) {
        let bookmark = self.wheel.tick_of(at);
        self.move_to(self.end, bookmark);
    }

    /// Moves the next bookmark to `at`, or to `before_end` ahead of the end when that comes
    /// first and is more than a tick from now; armed when next polled. Nearer than that, the
    /// bookmark just sent stands for it, as a watch that short gets its bookmark at once
    /// (`WatchStream::bookmark_before`). Never early: the end's tick is rounded up, and
    /// `before_end` is taken in whole ticks, rounded down.
    pub(crate) fn next_bookmark(&mut self, at: Instant, before_end: Duration) {
        let mut bookmark = self.wheel.tick_of(at);
        if self.end != NEVER {
            let ahead = before_end.as_nanos() / self.wheel.tick.as_nanos().max(1);
            let pre = self
                .end
                .saturating_sub(u32::try_from(ahead).unwrap_or(u32::MAX));
            let soon = self.wheel.tick_of(Instant::now() + self.wheel.tick);
            if pre > soon && pre < bookmark {
                bookmark = pre;
            }
        }
        self.move_to(self.end, bookmark);
    }

    /// Makes the next bookmark due now: the next [`poll_bookmark`](Deadline::poll_bookmark) is
    /// ready.
    pub(crate) fn bookmark_now(&mut self) {
        self.move_to(self.end, 0);
    }

    /// Whether the next bookmark is later than `at` would be.
    pub(crate) fn bookmark_is_after(&self, at: Instant) -> bool {
        self.bookmark > self.wheel.tick_of(at)
    }

    fn move_to(&mut self, end: u32, bookmark: u32) {
        if self.waker.take().is_some() {
            self.wheel.disarm(self.tick(), self.id);
        }
        self.id = self.wheel.next_id();
        self.end = end;
        self.bookmark = bookmark;
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if self.waker.is_some() {
            self.wheel.disarm(self.tick(), self.id);
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
            let mut d = wheel.deadline(Some(began + after), None);
            poll_fn(|cx| d.poll_end(cx)).await;
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
                let mut d = wheel.deadline(Some(far), None);
                tokio::spawn(async move { poll_fn(|cx| d.poll_end(cx)).await })
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
        let mut late = wheel.deadline(Some(far), None);
        assert!(
            poll_fn(|cx| Poll::Ready(late.poll_end(cx)))
                .await
                .is_ready()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_spreads_the_ends_over_its_span_and_never_delays_one() {
        let (_tx, wheel) = wheel();
        let far = Instant::now() + Duration::from_secs(3600);
        let start = Instant::now();
        let ended = |mut d: Deadline| {
            tokio::spawn(async move {
                poll_fn(|cx| d.poll_end(cx)).await;
                Instant::now()
            })
        };
        let waiting: Vec<_> = (0..200)
            .map(|_| ended(wheel.deadline(Some(far), None)))
            .collect();
        // An end within the span stays where it was; a watch without an end has none.
        let soon = ended(wheel.deadline(Some(start + Duration::from_millis(1500)), None));
        let mut endless = wheel.deadline(None, Some(far));
        tokio::time::sleep(Duration::from_millis(10)).await;
        wheel.drain(Duration::from_secs(4));
        // Not yet polled when the drain began: it takes its slot at its first poll.
        let late = ended(wheel.deadline(Some(far), None));
        let mut ticks = std::collections::BTreeMap::<u64, usize>::new();
        for t in waiting.into_iter().chain([late]) {
            let at = tokio::time::timeout(Duration::from_secs(7), t)
                .await
                .expect("ended within the drain's span and a tick")
                .unwrap();
            let after = at.duration_since(start);
            // From the next tick on, over 4 s: ticks 1..=5 (a tick late at most).
            assert!(
                after >= TICK && after <= Duration::from_secs(6),
                "{after:?}"
            );
            *ticks.entry(after.as_secs()).or_default() += 1;
        }
        // Spread: no tick takes more than half of them, and at least four ticks take some.
        assert!(ticks.len() >= 4, "{ticks:?}");
        assert!(ticks.values().all(|&n| n <= 100), "{ticks:?}");
        let soon_at = soon.await.unwrap().duration_since(start);
        assert!(soon_at >= Duration::from_millis(1500) && soon_at <= Duration::from_secs(3));
        assert!(
            poll_fn(|cx| Poll::Ready(endless.poll_end(cx)))
                .await
                .is_pending()
        );
        assert!(!wheel.stopped());
        assert!(wheel.draining());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_deadline_leaves_nothing_and_the_task_ends() {
        let (_tx, wheel) = wheel();
        let mut d = wheel.deadline(Some(Instant::now() + Duration::from_secs(60)), None);
        assert!(poll_fn(|cx| Poll::Ready(d.poll_end(cx))).await.is_pending());
        assert_eq!(wheel.waiting(), 1);
        assert!(wheel.inner.lock().running);
        drop(d);
        assert_eq!(wheel.waiting(), 0);
        // The task ends at its next tick, the wheel being empty.
        tokio::time::sleep(TICK * 2).await;
        assert!(!wheel.inner.lock().running);
        // And the next deadline starts one again.
        let mut d = wheel.deadline(Some(Instant::now() + TICK), None);
        poll_fn(|cx| d.poll_end(cx)).await;
        // Every poll arms: the poll that saw the tick pass may have stored its waker again (when
        // `will_wake` says it changed, as it may for the same task in a release build, whose
        // vtables can be duplicated), and that entry goes at the task's next tick.
        tokio::time::sleep(TICK * 2).await;
        assert_eq!(wheel.waiting(), 0);
        assert!(!wheel.inner.lock().running);
    }

    /// A watch's end and its bookmarks share one entry, at the earlier of the two: each is
    /// told apart by its tick (never early, at most a tick late), and shutdown passes the end but
    /// no bookmark.
    #[tokio::test(start_paused = true)]
    async fn an_end_and_bookmarks_share_one_entry() {
        let (tx, wheel) = wheel();
        let start = Instant::now();
        let end = start + Duration::from_secs(10);
        let mut d = wheel.deadline(Some(end), Some(start + Duration::from_secs(3)));
        // (end passed, bookmark due), polled once.
        fn tick(d: &mut Deadline) -> impl Future<Output = (bool, bool)> + '_ {
            poll_fn(move |cx| {
                Poll::Ready((d.poll_end(cx).is_ready(), d.poll_bookmark(cx).is_ready()))
            })
        }
        assert_eq!(tick(&mut d).await, (false, false));
        assert_eq!(wheel.waiting(), 1);
        // The bookmark first, alone.
        poll_fn(|cx| d.poll_bookmark(cx)).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(3) && took <= Duration::from_secs(4),
            "{took:?}"
        );
        assert_eq!(tick(&mut d).await, (false, true));
        // The next one after the end: the end comes first, alone, and the entry stays one.
        d.set_bookmark(start + Duration::from_secs(60));
        assert_eq!(tick(&mut d).await, (false, false));
        assert_eq!(wheel.waiting(), 1);
        poll_fn(|cx| d.poll_end(cx)).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(10) && took <= Duration::from_secs(11),
            "{took:?}"
        );
        assert_eq!(tick(&mut d).await, (true, false));
        // A bookmark due now is ready at once, in the same entry.
        d.bookmark_now();
        assert_eq!(tick(&mut d).await, (true, true));
        assert_eq!(wheel.waiting(), 1);
        // Shutdown passes a far end, and no bookmark.
        let mut far = wheel.deadline(
            Some(start + Duration::from_secs(3600)),
            Some(start + Duration::from_secs(1800)),
        );
        assert_eq!(tick(&mut far).await, (false, false));
        tx.send(true).unwrap();
        poll_fn(|cx| far.poll_end(cx)).await;
        assert_eq!(tick(&mut far).await, (true, false));
        assert!(start.elapsed() < Duration::from_secs(12));
    }

    /// A thousand watches due at one tick: the wheel's task wakes them a batch at a time, and a
    /// task woken in the first batch runs before the rest are woken.
    #[tokio::test(start_paused = true)]
    async fn many_due_deadlines_are_woken_in_batches_the_runtime_runs_between() {
        struct Count(std::sync::atomic::AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        const MANY: usize = 1000;
        let (_tx, wheel) = wheel();
        let at = Instant::now() + TICK;
        let count = Arc::new(Count(Default::default()));
        // Made first, so first in the wheel's order at that tick.
        let mut first = wheel.deadline(Some(at), None);
        let probe = {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                poll_fn(|cx| first.poll_end(cx)).await;
                count.0.load(Ordering::SeqCst)
            })
        };
        let waker = Waker::from(Arc::clone(&count));
        let mut others: Vec<Deadline> = (0..MANY).map(|_| wheel.deadline(Some(at), None)).collect();
        for d in &mut others {
            assert!(d.poll_end(&mut Context::from_waker(&waker)).is_pending());
        }
        let before_probe_ran = probe.await.unwrap();
        assert!(
            before_probe_ran < MANY.min(WAKE_BATCH),
            "{before_probe_ran} of {MANY} woken before the first batch's task ran"
        );
        tokio::time::sleep(TICK).await;
        assert_eq!(count.0.load(Ordering::SeqCst), MANY, "every one is woken");
        assert_eq!(wheel.waiting(), 0);
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
            let mut d = wheel.deadline(Some(Instant::now() + Duration::from_secs(3600)), None);
            assert!(poll_fn(|cx| Poll::Ready(d.poll_end(cx))).await.is_pending());
            d
        });
        assert!(wheel.inner.lock().running);
        drop(first);
        assert!(!wheel.inner.lock().running);
        // A later runtime's watch gets a task again, and its deadline passes.
        rt().block_on(async {
            let mut d = wheel.deadline(Some(Instant::now() + TICK), None);
            tokio::time::timeout(TICK * 3, poll_fn(|cx| d.poll_end(cx)))
                .await
                .expect("a new task fired it");
        });
        drop(far.waker.take());
    }
}
