//! One follower driver for every upstream (the crate `watchcache-follow`): the single watch
//! behind a cache, kept alive. The etcd and Kubernetes API server upstreams (`watchcache-etcd`,
//! `watchcache-kube`) are two [`Source`]s of it; an embedder follows an upstream kind of its own
//! by implementing a third (`examples/follow_source.rs`).
//!
//! | module | what |
//! |---|---|
//! | this file | the driver: [`Source`], [`Follow`], carrying out the machine's actions |
//! | `machine` | the follower's state machine, pure |
//! | `error` | [`FollowError`], typed, each with its cause |
//! | `check` | the periodic consistency check beside each follower |
//! | [`followers`] | the caches of one upstream, a follower task per cache |
//! | [`runtime`] | the upstream's own tokio runtime |
//! | [`backoff`] | capped exponential backoff with jitter; throttled warnings |
//! | [`crds`] | CustomResourceDefinitions followed into served resources |
//!
//! The algorithm (initial sync by WatchList or paged list, watch, resume after a break, relist
//! on 410 or compaction, reset when the upstream's history was replaced, backoff with jitter,
//! readiness through the grace period, the WatchList fallback) is one state machine
//! ([`machine`], pure, tested transition by transition). This file carries out its actions; an
//! upstream supplies only its [`Source`]: how to sync, how to open a watch from a revision, how
//! to follow it, and what each way of breaking means ([`Break`]).
//!
//! The driver owns the cache's one [`CacheWriter`]: nothing else changes the cache.
//!
//! ## Errors
//! A source reports what failed as a [`FollowError`] (`error.rs`) inside the [`Break`] that says
//! what it means; the upstream's own error stays its `source()`. Its text is what the logs show,
//! and what the cache's not-ready and reset reasons say (those are strings: a client reads them in
//! a 429's or 410's `Status`).
//!
//! ## Invariants
//! - `applied` (passed to [`Source::follow`]) is the revision the cache holds every change up
//!   to; a watch is only ever opened after it, so no change is skipped or applied twice.
//! - No lock is held here; the cache's own lock is taken inside the writer's calls.
//!
//! ## Logs
//! A failure to reach the upstream is logged at most once per [`backoff::WARN_EVERY`] for this
//! resource, with the number of failures since the last line ([`backoff::Throttle`]); the
//! recovery once, with the number not logged. Per-resource progress (synced, resumed WatchList
//! fallback) is at debug.

pub mod backoff;
pub mod check;
pub mod crds;
mod error;
pub mod followers;
pub mod machine;
pub mod runtime;

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::backoff::Throttle;
pub use error::FollowError;
use machine::{Action, Effect, Input, Machine};
pub use machine::{Break, Policy, SyncMode, WatchListUse};
use watchcache::CacheWriter;

/// While paused, how often the grace period is checked.
const TICK: Duration = Duration::from_millis(500);

/// A finished sync.
pub struct Synced<W> {
    /// The revision of the state read.
    pub rv: u64,
    /// A WatchList's response, which carries on as the watch after its initial events.
    pub watch: Option<W>,
}

/// What an upstream supplies to be followed: its side of the sync and of the watch.
///
/// Every method returns when shutdown is asked for (`shutdown` changes or its sender is
/// dropped), with [`Break::Shutdown`].
pub trait Source: Send {
    /// An open watch.
    type Watch: Send;

    /// The upstream's name in logs and not-ready reasons ("etcd", "API server").
    const NAME: &'static str;

    /// Reads the full state into a [`resync`](CacheWriter::resync) of the cache and finishes it.
    fn sync(
        &mut self,
        writer: &mut CacheWriter,
        mode: SyncMode,
        shutdown: &mut watch::Receiver<bool>,
    ) -> impl Future<Output = Result<Synced<Self::Watch>, Break>> + Send;

    /// Opens a watch of the changes after `from`; returns once the upstream confirmed it.
    fn open(
        &mut self,
        from: u64,
        shutdown: &mut watch::Receiver<bool>,
    ) -> impl Future<Output = Result<Self::Watch, Break>> + Send;

    /// Applies the watch's changes until it breaks, moving `applied` with them.
    fn follow(
        &mut self,
        watch: Self::Watch,
        writer: &mut CacheWriter,
        applied: &mut u64,
        shutdown: &mut watch::Receiver<bool>,
    ) -> impl Future<Output = Break> + Send;
}

/// What the driver needs besides the source.
pub struct Follow {
    /// How the follower treats unavailability.
    pub policy: Policy,
    /// Whether the initial sync is a WatchList.
    pub watch_list: WatchListUse,
    /// Changes (or its sender drops) when the follower is to stop.
    pub shutdown: watch::Receiver<bool>,
    /// Relists the consistency check asks for (`check.rs`), when it runs.
    pub relists: Option<RelistRequests>,
}

/// The follower's end of the consistency check's relist requests.
pub struct RelistRequests {
    /// Each request is one more than the last.
    pub asked: watch::Receiver<u64>,
    /// The last request a finished sync answered.
    pub done: watch::Sender<u64>,
}

impl RelistRequests {
    /// A new request; never, when its sender is gone.
    async fn next(this: &mut Option<RelistRequests>) {
        let asked = match this {
            Some(r) => r.asked.changed().await.is_ok(),
            None => false,
        };
        if !asked {
            std::future::pending::<()>().await;
        }
    }
}

/// Follows `source` into the cache of `writer` until shutdown.
pub async fn run<S: Source>(mut source: S, mut writer: CacheWriter, follow: Follow) {
    let Follow {
        policy,
        watch_list,
        mut shutdown,
        mut relists,
    } = follow;
    let plural = writer.cache().definition().plural.clone();
    let mut machine = Machine::new(policy, watch_list);
    let mut action = machine.start();
    let mut open: Option<S::Watch> = None;
    let mut failures = Throttle::new(backoff::WARN_EVERY);
    loop {
        if *shutdown.borrow() {
            return;
        }
        // A WatchList that falls back to LIST is no failure: logged as the fallback only.
        let mut fallback = false;
        let input = match action {
            Action::Sync(mode) => {
                // Every relist asked for so far is answered by this sync.
                let answers = relists.as_mut().map(|r| *r.asked.borrow_and_update());
                match source.sync(&mut writer, mode, &mut shutdown).await {
                    Ok(Synced { rv, watch }) => {
                        if let (Some(r), Some(n)) = (&relists, answers) {
                            r.done.send_replace(n);
                        }
                        let streaming = watch.is_some();
                        open = watch;
                        Input::Synced { rv, streaming }
                    }
                    Err(why) => {
                        if mode == SyncMode::WatchList && machine.watch_list() == WatchListUse::Try
                        {
                            fallback = log_watch_list_fallback(&plural, S::NAME, &why);
                        }
                        Input::Broke { applied: None, why }
                    }
                }
            }
            Action::Watch { from } => match source.open(from, &mut shutdown).await {
                Ok(w) => {
                    open = Some(w);
                    Input::Opened
                }
                Err(why) => Input::Broke {
                    applied: Some(from),
                    why,
                },
            },
            Action::Follow { from } => {
                let mut applied = from;
                let why = match open.take() {
                    // The follow future is dropped for a relist between two of its awaits:
                    // `applied` holds what it applied, and the relist starts over anyway.
                    Some(w) => tokio::select! {
                        why = source.follow(w, &mut writer, &mut applied, &mut shutdown) => why,
                        () = RelistRequests::next(&mut relists) => Break::Relist(FollowError::Inconsistent),
                    },
                    None => Break::Relist(FollowError::NoWatch),
                };
                Input::Broke {
                    applied: Some(applied),
                    why,
                }
            }
            Action::Pause { max } => {
                let log = Log {
                    plural: &plural,
                    upstream: S::NAME,
                };
                pause(
                    &machine,
                    &mut writer,
                    max,
                    &mut shutdown,
                    log,
                    &mut failures,
                )
                .await
            }
            Action::Wait(how_long) => {
                tokio::select! {
                    _ = shutdown.changed() => Input::Broke { applied: None, why: Break::Shutdown },
                    () = tokio::time::sleep(how_long) => Input::Resumed,
                }
            }
            Action::Stop => return,
        };
        if !fallback {
            log_input(&plural, S::NAME, &input, &machine, &mut failures);
        }
        if let Input::Broke {
            why: Break::Failed { .. },
            ..
        } = &input
        {
            writer.count_upstream_failure();
        }
        let step = machine.step(input, Instant::now());
        if let Some(effect) = step.effect {
            let log = Log {
                plural: &plural,
                upstream: S::NAME,
            };
            carry_out(effect, &mut writer, log, &policy, &mut failures);
        }
        action = step.action;
    }
}

/// What a log line names: the resource and its upstream.
#[derive(Clone, Copy)]
struct Log<'a> {
    plural: &'a str,
    upstream: &'a str,
}

/// Sleeps up to `max` (full jitter), checking the grace period meanwhile.
async fn pause(
    machine: &Machine,
    writer: &mut CacheWriter,
    max: Duration,
    shutdown: &mut watch::Receiver<bool>,
    log: Log<'_>,
    failures: &mut Throttle,
) -> Input {
    let until = tokio::time::Instant::now() + backoff::jitter(max);
    loop {
        let tick = tokio::time::sleep_until(until.min(tokio::time::Instant::now() + TICK));
        tokio::select! {
            _ = shutdown.changed() => {
                return Input::Broke { applied: None, why: Break::Shutdown };
            }
            _ = tick => {}
        }
        if let Some(effect) = machine.tick(Instant::now()) {
            carry_out(effect, writer, log, machine.policy(), failures);
        }
        if tokio::time::Instant::now() >= until {
            return Input::Resumed;
        }
    }
}

fn carry_out(
    effect: Effect,
    writer: &mut CacheWriter,
    log: Log<'_>,
    policy: &Policy,
    failures: &mut Throttle,
) {
    let Log { plural, upstream } = log;
    match effect {
        Effect::Recovered { down_for } => {
            let unlogged = failures.reset();
            if let Some(after) = down_for {
                info!(resource = %plural, ?after, unlogged_failures = unlogged, "{upstream} watch resumed");
            }
            writer.set_ready();
        }
        Effect::NotReady(why) => {
            if writer.set_not_ready(why.to_string()) {
                warn!(resource = %plural, grace = ?policy.grace, error = %why.last, "{upstream} unavailable past the grace period; not ready");
            }
        }
        Effect::Reset(why) => writer.reset(why.to_string()),
        Effect::Absent(why) => {
            if writer.set_absent() {
                warn!(resource = %plural, error = %why, retry = ?policy.absent_retry, "the {upstream} does not serve this resource; not waited for (its requests go to the upstream), asked again");
            }
        }
    }
}

/// Logs a failed WatchList that falls back to LIST; whether it does. An upstream that could not
/// be reached is a failure like any other (logged by [`log_input`], throttled): each retry
/// while it is down tries WatchList again.
fn log_watch_list_fallback(plural: &str, upstream: &str, why: &Break) -> bool {
    match why {
        Break::Shutdown | Break::Replaced(_) | Break::Absent(_) => return false,
        Break::Failed { .. } if !why.refuses_watch_list() => return false,
        Break::NoInitialEventsEnd => {
            debug!(resource = %plural, "the {upstream} does not do WatchList; using LIST then watch")
        }
        other => {
            warn!(resource = %plural, error = %other, for_good = other.refuses_watch_list(), "WatchList failed; falling back to LIST then watch")
        }
    }
    true
}

fn log_input(
    plural: &str,
    upstream: &str,
    input: &Input,
    machine: &Machine,
    failures: &mut Throttle,
) {
    let Input::Broke { applied, why } = input else {
        return;
    };
    match why {
        Break::Ended => debug!(resource = %plural, "watch timed out; reopening"),
        Break::Expired(e) => {
            warn!(resource = %plural, from = ?applied, error = %e, "watch position expired; relisting")
        }
        Break::Relist(why) => warn!(resource = %plural, rv = ?applied, %why, "relisting"),
        Break::Failed { error: why, .. } => {
            let now = Instant::now();
            if let Some(n) = failures.admit(now) {
                let down_for = machine.down_for(now).unwrap_or_default();
                warn!(resource = %plural, error = %why, ?down_for, failures = n, "{upstream} unavailable; retrying (logged once per 10 s)")
            }
        }
        Break::Replaced(_) | Break::NoInitialEventsEnd | Break::Absent(_) | Break::Shutdown => {}
    }
}
