//! Per-client limits, each answered 429 TooManyRequests with Retry-After:
//! `--max-requests-inflight` (non-watch requests in progress at once; 0: no limit), the server's
//! most concurrent watches (`ServerConfig::max_watchers`) and `--max-watches-per-user`
//! (concurrent watches of one authenticated user; 0: no limit). A watch holds one [`WatchSlot`]
//! for both of its limits.
//!
//! A request over the in-flight limit waits for a seat instead of being refused at once (a fleet
//! reconnecting gets served), fairly between users, as kube-apiserver's priority and fairness
//! queues it (its `fairqueuing/queueset`): one FIFO for everyone let one user's slow reads hold
//! every other user behind them until their queue wait ran out (issue 35, item 5: 24 reads
//! waiting for a future resourceVersion under `--max-requests-inflight 4` made another user's
//! LISTs 429 in 3 of 4 tries).
//!
//! - The flow is the user's name (upstream's distinguisher `ByUser`; `""` without
//!   authentication). It is shuffle-sharded: its name's hash deals it a hand of [`HAND_SIZE`] of
//!   the [`QUEUES`] queues, the same hand every time, and each of its requests joins the
//!   shortest queue of its hand. Two users share all their queues only by a rare chance, and a
//!   flood fills its own hand's queues only.
//! - Every request is accounted to its queue, also one that finds a seat free at once. A queue
//!   keeps the virtual time at which its next request starts, in seat-microseconds: a dispatch
//!   adds upstream's estimate (3 ms) and the request's end corrects it to the time it held its
//!   seat, so a queue is charged for the seat time it used. An idle queue that gets a request
//!   starts at the set's virtual time (the start of the last request dispatched).
//! - When a seat frees, it goes to the head of the waiting queue that starts first, the queues
//!   scanned round-robin from after the last one served (ties go round-robin). A user that
//!   arrives while another floods starts at the present virtual time, and the flood's queues
//!   that have been served are charged for the seats they held: it waits for one turn at most
//!   of each of the flood's queues not served yet (its hand: 6), not for the flood's backlog;
//!   once they have all been served, for the next seat that frees.
//! - A request is refused (429, Retry-After 1) when its queue already holds its length limit
//!   ([`QUEUE_LENGTH_LIMIT`], or [`QUEUED_PER_PLACE`] per seat over a hand, whichever is more:
//!   one flow, as everyone without authentication is, may queue as many as all could before), or
//!   when no seat is dispatched to it within its queue wait (a quarter of `--request-timeout`, at
//!   most 15 s). `system:masters` is exempt: it takes a seat when one is free (charged to no
//!   queue) and is served without one when none is.
//!
//! Invariants, under the queue set's lock: `in_use <= seats`, counting the seats of requests
//! dispatched and not yet ended (masters' included); a request waits only while every seat is in
//! use (`waiting > 0` implies `in_use == seats`: a free seat is dispatched at once); `waiting` is
//! the sum of the queues' lengths; a queue's `executing` counts its dispatched requests not yet
//! ended. A waiter leaves its queue only under the lock, either dispatched (its seat is then its
//! own, and goes back through [`InflightPermit`]'s drop or its wait's drop, never lost) or
//! removed by its own wait (time out, or the request dropped while it waited: it holds no seat).
//!
//! Lock order: `watches` and the queue set's lock are never held together; each is held for a
//! few map or queue updates, never across an await (a dispatched waiter is woken by a oneshot
//! sent under the lock, which does not block).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::http::status::ApiError;

/// Queues of the in-flight limit's queue set (upstream's `system` level has 64, its workload
/// levels 128; one level here).
pub(super) const QUEUES: usize = 64;

/// Queues dealt to one flow (upstream's default levels: 6).
pub(super) const HAND_SIZE: usize = 6;

/// Requests that may wait in one queue (upstream's `global-default` level: 50), unless
/// [`QUEUED_PER_PLACE`] gives more.
pub(super) const QUEUE_LENGTH_LIMIT: usize = 50;

/// Requests one flow may queue per in-flight seat, over its hand (so its queues hold at least
/// `QUEUED_PER_PLACE × seats / HAND_SIZE` each): kube-apiserver's default priority level queues
/// 128 × 50 requests for its 400 seats, 16 per seat, and a server without authentication is one
/// flow.
pub(super) const QUEUED_PER_PLACE: usize = 16;

/// Upstream's estimate of a request's service time (`estimatedServiceDuration`), charged to its
/// queue when it is dispatched and corrected when it ends, in microseconds.
const ESTIMATED_SERVICE_US: u64 = 3_000;

/// The limits' state.
#[derive(Debug)]
pub struct Limits {
    inflight: Option<Arc<QueueSet>>,
    /// How long a request may wait for a seat.
    queue_wait: Duration,
    max_watches: usize,
    max_watches_per_user: usize,
    watches: Arc<WatchCounts>,
    /// What the watches of no counted user share (anonymous, or no per-user cap).
    anyone: Arc<UserWatches>,
}

/// One request counted against `--max-requests-inflight` while it lives (`None`: a request of
/// `system:masters` served with no seat free, or no limit).
#[derive(Debug)]
pub struct InflightPermit(#[allow(dead_code)] Option<Seat>);

/// A seat held; dropping it ends the request's service and hands the seat on.
#[derive(Debug)]
struct Seat {
    set: Arc<QueueSet>,
    /// The queue it was dispatched from (`None`: an exempt request's).
    queue: Option<usize>,
    started: Instant,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.set.end(self.queue, self.started.elapsed());
    }
}

/// The in-flight limit's fair queues.
#[derive(Debug)]
struct QueueSet {
    seats: usize,
    /// Most requests one queue may hold waiting.
    queue_length: usize,
    state: Mutex<SetState>,
}

#[derive(Debug)]
struct SetState {
    in_use: usize,
    waiting: usize,
    queues: Box<[Queue]>,
    /// The queue dispatched from last: the next scan starts after it.
    robin: usize,
    /// Requests queued so far: where the next one starts looking at its hand (upstream's
    /// `enqueues`), so that equal queues of a hand take turns.
    enqueues: usize,
    /// The virtual time: the start of the last request dispatched (seat-microseconds).
    now: u64,
    /// The next waiter's ticket, which finds it in its queue.
    tickets: u64,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    executing: usize,
    /// When its next request starts, in virtual time.
    next_start: u64,
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    /// The virtual time it arrived at: its queue's start is never earlier (upstream's
    /// anti-windup), so a queue whose requests end early saves no credit for later.
    arrived: u64,
    /// Told the instant its seat was dispatched to it.
    seat: oneshot::Sender<Instant>,
}

/// The flow's hand: [`HAND_SIZE`] distinct queues dealt from its name's hash, as upstream's
/// `shufflesharding.Deal` (each card drawn from those left by the hash's next digit).
fn hand_of(flow: &str) -> [usize; HAND_SIZE] {
    // FNV-1a, then splitmix64's finalizer to spread the bits the digits below take.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in flow.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    let mut hand = [0; HAND_SIZE];
    let mut dealt = [0; HAND_SIZE];
    for i in 0..HAND_SIZE {
        let left = (QUEUES - i) as u64;
        let mut card = (h % left) as usize;
        h /= left;
        // The card-th queue not dealt yet: step over those dealt (sorted) at or below it.
        for &d in &dealt[..i] {
            if card >= d {
                card += 1;
            }
        }
        hand[i] = card;
        let at = dealt[..i].partition_point(|&d| d < card);
        dealt.copy_within(at..i, at + 1);
        dealt[at] = card;
    }
    hand
}

/// Whether a request got a seat at once, waits for one, or is refused.
enum Arrival {
    Seated(Option<usize>),
    Unseated,
    Waits(usize, u64, oneshot::Receiver<Instant>),
    Full,
}

impl QueueSet {
    fn new(seats: usize) -> QueueSet {
        QueueSet {
            seats,
            queue_length: QUEUE_LENGTH_LIMIT.max((seats * QUEUED_PER_PLACE).div_ceil(HAND_SIZE)),
            state: Mutex::new(SetState {
                in_use: 0,
                waiting: 0,
                queues: (0..QUEUES).map(|_| Queue::default()).collect(),
                robin: QUEUES - 1,
                enqueues: 0,
                now: 0,
                tickets: 0,
            }),
        }
    }

    /// A request of `flow` arrives: seated when a seat is free, else queued in the shortest
    /// queue of its hand, or refused when that one is full.
    fn arrive(&self, hand: Option<&[usize; HAND_SIZE]>) -> Arrival {
        let mut s = self.state.lock();
        let Some(hand) = hand else {
            // Exempt: a free seat, charged to no queue, or none.
            if s.in_use < self.seats {
                s.in_use += 1;
                return Arrival::Seated(None);
            }
            return Arrival::Unseated;
        };
        let offset = s.enqueues % HAND_SIZE;
        s.enqueues = s.enqueues.wrapping_add(1);
        let mut best = hand[offset];
        for i in 1..HAND_SIZE {
            let q = hand[(offset + i) % HAND_SIZE];
            if s.queues[q].waiting.len() < s.queues[best].waiting.len() {
                best = q;
            }
        }
        let now = s.now;
        let q = &mut s.queues[best];
        if q.waiting.is_empty() && q.executing == 0 {
            q.next_start = now;
        }
        if s.in_use < self.seats {
            // Nobody waits (the invariant): this one is dispatched at once.
            s.in_use += 1;
            s.dispatch_from(best);
            return Arrival::Seated(Some(best));
        }
        if s.queues[best].waiting.len() >= self.queue_length {
            return Arrival::Full;
        }
        let (tx, rx) = oneshot::channel();
        let ticket = s.tickets;
        s.tickets += 1;
        s.waiting += 1;
        s.queues[best].waiting.push_back(Waiter {
            ticket,
            arrived: now,
            seat: tx,
        });
        Arrival::Waits(best, ticket, rx)
    }

    /// A seated request ends after holding its seat `held`: its queue is charged for that, and
    /// the seat goes to the next waiter.
    fn end(&self, queue: Option<usize>, held: Duration) {
        let mut s = self.state.lock();
        s.in_use -= 1;
        if let Some(i) = queue {
            let q = &mut s.queues[i];
            q.executing -= 1;
            let held = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
            q.next_start = q
                .next_start
                .saturating_add(held)
                .saturating_sub(ESTIMATED_SERVICE_US);
            q.bound();
        }
        s.dispatch(self.seats);
    }

    /// A waiter leaves its queue unseated, if it is still there: `false` when its seat was
    /// dispatched to it already (then it holds that seat).
    fn leave(&self, queue: usize, ticket: u64) -> bool {
        let mut s = self.state.lock();
        let q = &mut s.queues[queue];
        let Some(at) = q.waiting.iter().position(|w| w.ticket == ticket) else {
            return false;
        };
        q.waiting.remove(at);
        q.bound();
        s.waiting -= 1;
        true
    }
}

impl Queue {
    /// Upstream's anti-windup: the queue starts no earlier than its oldest waiter arrived.
    fn bound(&mut self) {
        if let Some(w) = self.waiting.front() {
            self.next_start = self.next_start.max(w.arrived);
        }
    }
}

impl SetState {
    /// Seats every waiter it can, each from the queue that starts first.
    fn dispatch(&mut self, seats: usize) {
        while self.waiting > 0 && self.in_use < seats {
            let mut best: Option<usize> = None;
            for k in 1..=QUEUES {
                let i = (self.robin + k) % QUEUES;
                let q = &self.queues[i];
                if !q.waiting.is_empty()
                    && best.is_none_or(|b| q.next_start < self.queues[b].next_start)
                {
                    best = Some(i);
                }
            }
            let Some((i, w)) = best.and_then(|i| Some((i, self.queues[i].waiting.pop_front()?)))
            else {
                return;
            };
            self.waiting -= 1;
            self.in_use += 1;
            self.dispatch_from(i);
            self.queues[i].bound();
            // Its wait may be ending at this moment: it then finds itself out of the queue and
            // hands the seat back (`Wait`'s drop), so a failed send loses nothing.
            let _ = w.seat.send(Instant::now());
        }
    }

    /// Charges queue `i` for one dispatch (its seat counted already).
    fn dispatch_from(&mut self, i: usize) {
        self.robin = i;
        let q = &mut self.queues[i];
        self.now = self.now.max(q.next_start);
        q.next_start += ESTIMATED_SERVICE_US;
        q.executing += 1;
    }
}

/// A request waiting in a queue; dropped before it is seated (its request cancelled, or its
/// wait over), it leaves the queue, or hands on the seat dispatched to it meanwhile.
struct Wait<'a> {
    set: &'a Arc<QueueSet>,
    queue: usize,
    ticket: u64,
    done: bool,
}

impl Wait<'_> {
    /// Leaves the queue; a seat if one was dispatched to it meanwhile.
    fn leave(mut self) -> Option<Seat> {
        self.done = true;
        (!self.set.leave(self.queue, self.ticket)).then(|| self.seat(Instant::now()))
    }

    fn seat(&mut self, started: Instant) -> Seat {
        self.done = true;
        Seat {
            set: Arc::clone(self.set),
            queue: Some(self.queue),
            started,
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if !self.done && !self.set.leave(self.queue, self.ticket) {
            drop(self.seat(Instant::now()));
        }
    }
}

/// One watch counted against the server's limit and its user's cap while it lives: a pointer to
/// what its user's watches share (8 bytes in every watch: the two counts took 16, a user's map
/// and name 24 before that).
#[derive(Debug)]
pub struct WatchSlot(Arc<UserWatches>);

/// Open watches by user, and the shared handle each of a user's watches holds.
type WatchCounts = Mutex<HashMap<Arc<str>, (usize, Weak<UserWatches>)>>;

/// What a user's watches share: the server's count of watches, and the user's name and the map
/// that counts them (`None`: no counted user).
#[derive(Debug)]
struct UserWatches {
    open: Arc<AtomicUsize>,
    user: Option<(Arc<str>, Arc<WatchCounts>)>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        if let Some((user, counts)) = &self.0.user {
            let mut w = counts.lock();
            if let Some((n, _)) = w.get_mut(user) {
                *n -= 1;
                if *n == 0 {
                    w.remove(user);
                }
            }
        }
    }
}

impl Limits {
    /// Limits of these sizes (0: none, but for `max_watches`); a request waits at most
    /// `queue_wait` for an in-flight seat.
    pub fn new(
        max_inflight: usize,
        max_watches: usize,
        max_watches_per_user: usize,
        queue_wait: Duration,
    ) -> Limits {
        Limits {
            inflight: (max_inflight > 0).then(|| Arc::new(QueueSet::new(max_inflight))),
            queue_wait,
            max_watches,
            max_watches_per_user,
            watches: Arc::default(),
            anyone: Arc::new(UserWatches {
                open: Arc::default(),
                user: None,
            }),
        }
    }

    /// Seats of `--max-requests-inflight` in use and requests waiting for one (`None`: no
    /// limit), for `/metrics`.
    pub fn inflight(&self) -> Option<(usize, usize)> {
        let s = self.inflight.as_ref()?.state.lock();
        Some((s.in_use, s.waiting))
    }

    /// Watches open now.
    pub fn watches_open(&self) -> usize {
        self.anyone.open.load(Ordering::Relaxed)
    }

    /// A seat for one non-watch request of `flow` (its user's name), waiting for one, fairly
    /// between flows, while others hold them all. A `privileged` requester (`system:masters`)
    /// takes one when one is free and is served without one when none is: upstream's limit
    /// always answers its super-admins, so an operator can still act on a server that others
    /// saturate.
    ///
    /// # Errors
    /// 429 with Retry-After 1 when the flow's queue is full, or no seat is dispatched to it
    /// within the queue wait.
    pub async fn request(&self, flow: &str, privileged: bool) -> Result<InflightPermit, ApiError> {
        let Some(set) = &self.inflight else {
            return Ok(InflightPermit(None));
        };
        let hand = (!privileged).then(|| hand_of(flow));
        let seat = |queue| {
            InflightPermit(Some(Seat {
                set: Arc::clone(set),
                queue,
                started: Instant::now(),
            }))
        };
        let refused = |why: &str| {
            ApiError::too_many(
                format!(
                    "Too many requests, please try again later. (the limit of {} requests in flight is reached{why})",
                    set.seats
                ),
                1,
            )
        };
        let (queue, ticket, rx) = match set.arrive(hand.as_ref()) {
            Arrival::Seated(queue) => return Ok(seat(queue)),
            Arrival::Unseated => return Ok(InflightPermit(None)),
            Arrival::Full => return Err(refused(", and the queue is full")),
            Arrival::Waits(queue, ticket, rx) => (queue, ticket, rx),
        };
        let mut wait = Wait {
            set,
            queue,
            ticket,
            done: false,
        };
        if let Ok(Ok(started)) = tokio::time::timeout(self.queue_wait, rx).await {
            return Ok(InflightPermit(Some(wait.seat(started))));
        }
        // Out of time, unless its seat came at the last moment.
        match wait.leave() {
            Some(seat) => Ok(InflightPermit(Some(seat))),
            None => Err(refused(&format!(
                ", and none was free within {:?}",
                self.queue_wait
            ))),
        }
    }

    /// A slot for one more watch, of `user` when it is authenticated.
    ///
    /// # Errors
    /// 429 with Retry-After 1 when the server has its most watches open, or the user its cap.
    pub fn watch(&self, user: Option<&str>) -> Result<WatchSlot, ApiError> {
        let open = &self.anyone.open;
        if open.fetch_add(1, Ordering::Relaxed) >= self.max_watches {
            open.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::too_many(
                format!("too many watches: the limit is {}", self.max_watches),
                1,
            ));
        }
        let Some(user) = user.filter(|_| self.max_watches_per_user > 0) else {
            return Ok(WatchSlot(Arc::clone(&self.anyone)));
        };
        let mut w = self.watches.lock();
        let shared = |user: Arc<str>| {
            Arc::new(UserWatches {
                open: Arc::clone(open),
                user: Some((user, Arc::clone(&self.watches))),
            })
        };
        let handle = if let Some((n, handle)) = w.get_mut(user) {
            if *n >= self.max_watches_per_user {
                open.fetch_sub(1, Ordering::Relaxed);
                return Err(ApiError::too_many(
                    format!(
                        "too many watches for user {user:?}: the limit is {}",
                        self.max_watches_per_user
                    ),
                    1,
                ));
            }
            *n += 1;
            // Each of the `n` watches counted holds the handle until it has uncounted itself
            // (under this lock), so it is there; made anew if not, all the same.
            handle.upgrade().unwrap_or_else(|| {
                let h = shared(Arc::from(user));
                *handle = Arc::downgrade(&h);
                h
            })
        } else {
            let name: Arc<str> = Arc::from(user);
            let h = shared(Arc::clone(&name));
            w.insert(name, (1, Arc::downgrade(&h)));
            h
        };
        Ok(WatchSlot(handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn per_user_watch_caps_and_inflight_slots_free_on_drop() {
        let l = Limits::new(1, 5, 2, Duration::from_millis(50));
        let a = l.request("u", false).await.unwrap();
        let e = l.request("u", false).await.unwrap_err();
        assert_eq!((e.code(), e.retry_after()), (429, Some(1)));
        assert!(
            l.request("admin", true).await.is_ok(),
            "system:masters is always answered"
        );
        drop(a);
        assert!(l.request("u", false).await.is_ok());
        let w1 = l.watch(Some("u")).unwrap();
        let _w2 = l.watch(Some("u")).unwrap();
        assert_eq!(l.watch(Some("u")).unwrap_err().code(), 429);
        let v = l.watch(Some("v")).expect("another user has its own cap");
        drop(w1);
        let w3 = l.watch(Some("u")).unwrap();
        assert_eq!(l.watch(Some("u")).unwrap_err().code(), 429);
        assert_eq!(l.watches_open(), 3, "refused watches are not counted");
        // The server's limit (5) counts every watch, anonymous ones too.
        let anon = [l.watch(None).unwrap(), l.watch(None).unwrap()];
        let e = l.watch(None).unwrap_err();
        assert_eq!((e.code(), e.retry_after()), (429, Some(1)));
        assert!(e.message().contains("too many watches: the limit is 5"));
        assert_eq!(l.watch(Some("w")).unwrap_err().code(), 429);
        assert_eq!(l.watches_open(), 5);
        // The user's watches share one handle; the count goes with the last of them.
        drop((_w2, w3, v, anon));
        assert!(l.watches.lock().is_empty(), "no count is left behind");
        assert_eq!(l.watches_open(), 0);
        let _u = l.watch(Some("u")).unwrap();
        assert_eq!(l.watches_open(), 1);
        assert_eq!(std::mem::size_of::<WatchSlot>(), 8);
        let none = Limits::new(0, 1, 0, Duration::ZERO);
        let one = none.watch(Some("u")).expect("no per-user cap");
        assert_eq!(none.watch(Some("u")).unwrap_err().code(), 429);
        drop(one);
        assert!(none.watch(Some("u")).is_ok());
        assert!(none.request("u", false).await.is_ok());
    }

    /// A burst over the limit waits for seats instead of being refused; only what overflows its
    /// flow's queues is refused at once, and another flow still queues.
    #[tokio::test]
    async fn a_burst_waits_for_seats_and_only_a_full_queue_refuses() {
        let l = Arc::new(Limits::new(2, 10, 0, Duration::from_secs(5)));
        let set = Arc::clone(l.inflight.as_ref().unwrap());
        assert_eq!(set.queue_length, QUEUE_LENGTH_LIMIT);
        let held: Vec<_> = [l.request("a", false).await, l.request("a", false).await]
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let spawn = |flow: &'static str| {
            let l = Arc::clone(&l);
            tokio::spawn(async move { l.request(flow, false).await.map(drop) })
        };
        // One flow fills the queues of its hand, no more.
        let waiting: Vec<_> = (0..HAND_SIZE * QUEUE_LENGTH_LIMIT)
            .map(|_| spawn("a"))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(set.state.lock().waiting, HAND_SIZE * QUEUE_LENGTH_LIMIT);
        let over = l.request("a", false).await.unwrap_err();
        assert_eq!((over.code(), over.retry_after()), (429, Some(1)));
        assert!(
            over.message().contains("the queue is full"),
            "{}",
            over.message()
        );
        let other = spawn("b");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            set.state.lock().waiting,
            HAND_SIZE * QUEUE_LENGTH_LIMIT + 1,
            "another flow queues beside a full one"
        );
        drop(held);
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        other.await.unwrap().unwrap();
        let s = set.state.lock();
        assert_eq!((s.waiting, s.in_use), (0, 0));
        // With more seats, a flow's hand holds 16 per seat, as one queue for all did.
        assert_eq!(QueueSet::new(400).queue_length, 1067);
    }

    /// The hand of a flow is the same every time (the hash has no random key), its cards are
    /// distinct queues, and names spread over every queue.
    #[test]
    fn shuffle_sharding_deals_each_flow_the_same_distinct_hand() {
        let alice = hand_of("alice");
        assert_eq!(alice, hand_of("alice"));
        assert_eq!(
            alice,
            [28, 57, 5, 51, 7, 38],
            "stable across builds and runs"
        );
        let mut used = [0usize; QUEUES];
        for i in 0..10_000 {
            let h = hand_of(&format!("system:node:n{i}"));
            let mut sorted = h;
            sorted.sort_unstable();
            assert!(sorted.windows(2).all(|w| w[0] < w[1]), "{h:?}");
            assert!(h.iter().all(|&q| q < QUEUES));
            for q in h {
                used[q] += 1;
            }
        }
        // 60 000 cards over 64 queues: about 938 each.
        assert!(used.iter().all(|&n| (700..1200).contains(&n)), "{used:?}");
    }

    /// Seats `flow` in `set` as the request path does: a seat at once, or a place in a queue.
    fn arrive(set: &QueueSet, flow: &str) -> Arrival {
        set.arrive(Some(&hand_of(flow)))
    }

    /// The waiter's queue and receiver.
    fn waits(a: Arrival) -> (usize, u64, oneshot::Receiver<Instant>) {
        match a {
            Arrival::Waits(q, t, rx) => (q, t, rx),
            _ => panic!("expected to wait"),
        }
    }

    /// With one seat, a flood of 12 from `a` (two per queue of its hand) and one request each
    /// from `b` and `c`: the seat goes round the queues, one turn each, so `b` and `c` are served
    /// before any queue of `a` has its second turn, not after `a`'s whole backlog (13th and
    /// 14th in one FIFO).
    #[test]
    fn seats_go_round_robin_across_flows() {
        let set = QueueSet::new(1);
        let Arrival::Seated(Some(first)) = arrive(&set, "a") else {
            panic!("a free seat")
        };
        let mut waiters: Vec<(&str, usize, oneshot::Receiver<Instant>)> = (0..2 * HAND_SIZE)
            .map(|_| {
                let (q, _, rx) = waits(arrive(&set, "a"));
                ("a", q, rx)
            })
            .collect();
        for flow in ["b", "c"] {
            let (q, _, rx) = waits(arrive(&set, flow));
            waiters.push((flow, q, rx));
        }
        let mut queue = first;
        let mut order = Vec::new();
        while !waiters.is_empty() {
            // The seat holder ends after 1 ms; the seat goes to exactly one waiter.
            set.end(Some(queue), Duration::from_millis(1));
            let seated: Vec<usize> = (0..waiters.len())
                .filter(|&i| waiters[i].2.try_recv().is_ok())
                .collect();
            assert_eq!(seated.len(), 1, "{order:?}");
            let (flow, q, _) = waiters.remove(seated[0]);
            order.push((flow, q));
            queue = q;
        }
        let served = |flow| order.iter().position(|&(f, _)| f == flow).unwrap();
        let second_turn = (0..order.len())
            .find(|&i| order[..i].iter().any(|o| o.1 == order[i].1))
            .unwrap();
        assert!(
            served("b") < second_turn && served("c") < second_turn,
            "{order:?}"
        );
        assert!(served("b") <= HAND_SIZE + 1 && served("c") <= HAND_SIZE + 1);
        let s = set.state.lock();
        assert_eq!((s.waiting, s.in_use), (0, 1));
    }

    /// A flow charged for long-held seats yields: once its queues have had their turn, a user
    /// arriving while it floods takes the very next seat that frees (one seat's turn).
    #[test]
    fn a_flood_holding_its_seats_yields_the_next_seat_to_a_newcomer() {
        let set = QueueSet::new(2);
        let mut running: Vec<usize> = (0..2)
            .map(|_| match arrive(&set, "a") {
                Arrival::Seated(Some(q)) => q,
                _ => panic!("a free seat"),
            })
            .collect();
        let mut flood: Vec<_> = (0..40).map(|_| waits(arrive(&set, "a"))).collect();
        // Each of a's reads holds its seat 3 s (a resourceVersion the cache has not reached),
        // until each of its queues has been served once.
        let mut served = std::collections::HashSet::new();
        served.extend(running.iter().copied());
        while served.len() < HAND_SIZE {
            set.end(Some(running.remove(0)), Duration::from_secs(3));
            let i = flood
                .iter_mut()
                .position(|w| w.2.try_recv().is_ok())
                .unwrap();
            let (q, _, _) = flood.remove(i);
            served.insert(q);
            running.push(q);
        }
        let (_, _, mut b) = waits(arrive(&set, "b"));
        set.end(Some(running.remove(0)), Duration::from_secs(3));
        assert!(b.try_recv().is_ok(), "b takes the next seat");
        assert!(flood.iter_mut().all(|w| w.2.try_recv().is_err()));
    }

    /// A request dropped while it waits leaves its place and holds no seat; one whose seat was
    /// dispatched to it just before it was dropped hands that seat on; a wait that runs out is
    /// 429 and leaves nothing behind.
    #[tokio::test]
    async fn a_waiter_cancelled_or_timed_out_never_takes_a_seat() {
        use futures_util::FutureExt;
        let l = Limits::new(1, 10, 0, Duration::from_millis(50));
        let set = Arc::clone(l.inflight.as_ref().unwrap());
        let counts = || {
            let s = set.state.lock();
            (s.waiting, s.in_use)
        };
        let held = l.request("a", false).await.unwrap();
        // Dropped while queued: its place is freed, and the seat is not dispatched to it.
        let mut b = Box::pin(l.request("b", false));
        assert!((&mut b).now_or_never().is_none());
        assert_eq!(counts(), (1, 1));
        drop(b);
        assert_eq!(counts(), (0, 1), "the dropped request left its queue");
        drop(held);
        assert_eq!(counts(), (0, 0), "no seat went to the dropped request");
        // Dropped after its seat was dispatched to it, before it saw it: the seat is handed on.
        let held = l.request("a", false).await.unwrap();
        let mut b = Box::pin(l.request("b", false));
        assert!((&mut b).now_or_never().is_none());
        let mut c = Box::pin(l.request("c", false));
        assert!((&mut c).now_or_never().is_none());
        assert_eq!(counts(), (2, 1));
        drop(held);
        assert_eq!(counts(), (1, 1), "the seat went to one waiter");
        // Whichever got it, dropping both unpolled leaves every seat free and nobody queued.
        drop(b);
        assert_eq!(
            counts().1,
            1,
            "the seat went on to the other waiter, or stayed"
        );
        drop(c);
        assert_eq!(counts(), (0, 0));
        // A wait that runs out: 429, and nothing left queued.
        let held = l.request("a", false).await.unwrap();
        let e = l.request("b", false).await.unwrap_err();
        assert_eq!((e.code(), e.retry_after()), (429, Some(1)));
        assert!(
            e.message().contains("none was free within 50ms"),
            "{}",
            e.message()
        );
        assert_eq!(counts(), (0, 1));
        drop(held);
        assert_eq!(counts(), (0, 0));
        assert!(l.request("b", false).await.is_ok());
    }
}
