//! The states of a follower and its step function: pure, no I/O, no clock of its own (the driver
//! passes the time in), no randomness (the driver adds the backoff's jitter). In the manner of
//! kube-rs's `watcher.rs`, with its I/O taken out so that every transition is a unit test.
//!
//! ```text
//!            ┌─────────── Synced (WatchList: the watch is open) ───────────┐
//!            │                                                             ▼
//!  start → Syncing ── Synced (LIST) ──→ Opening ── Opened ──────────→ Watching
//!   ▲  ▲ ▲   │ WatchList failed: LIST       │  ▲                           │
//!   │  │ │   └──────────┘ (off for good     │  └── Ended: reopen at once ──┤
//!   │  │ │                when refused)     │                              │
//!   │  │ └──── Expired, Relist, Replaced (reset first) ────────────────────┤
//!   │  │                                                                   │
//!   │  └── Resumed ── Paused(sync) ←── Failed (no consistent state yet) ───┤
//!   └── (Opening ←) Resumed ── Paused(watch rv) ←── Failed (resume at rv) ─┘
//!
//!  Syncing, Opening, Watching ── Absent (404: not served) ──→ Absent ── Resumed ──→ Syncing
//! ```
//!
//! Availability rides along: a failure starts an outage (or continues it), and past the grace
//! period the cache is not ready, for the latest failure (`Unavailable`); the next watch that
//! opens ends the outage, restarts the backoff and makes the cache ready again. A resource the
//! upstream does not serve (an API server's 404: a CRD not installed) is no outage: the upstream
//! answered. The cache is absent (not ready, not waited for) and the sync is asked again every
//! `absent_retry`, with no backoff and no grace period, until a sync makes the cache ready.
//!
//! Errors: a [`Break`] says what an end means to the follower, the [`FollowError`] it carries
//! what failed (see `error.rs`); the effects hand the error on, so that the cache's not-ready
//! and reset reasons and the driver's logs name it.
//!
//! ## Invariants
//! - `Watching { rv }` and `Opening { rv }`: the cache holds every change of the upstream up to
//!   `rv` (the driver reports how far the watch got in `Input::Broke`).
//! - The upstream is down (`Link::Down`) from the first failure of an outage until a watch opens
//!   or it answers 404; meanwhile `last` is the latest failure.
//! - Only a sync leaves `Phase::Syncing`; only an opened watch (`Input::Opened`, or a WatchList
//!   that carries on as the watch) ends an outage.

use std::time::{Duration, Instant};

use crate::backoff;
use crate::error::{FollowError, Unavailable};

/// How a sync reads the full state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// A WatchList: the state as initial events, ended by the initial-events-end bookmark; the
    /// same response then carries on as the watch.
    WatchList,
    /// A paged read at one revision (a LIST, etcd range reads), then a watch from its revision.
    List,
}

/// Whether a follower syncs by WatchList.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchListUse {
    /// Never (etcd; `InitialList::List`).
    Off,
    /// First; any failure falls back to a LIST for that sync, and a refusal for good
    /// (`InitialList::Auto`, as client-go's reflector).
    Try,
    /// Only: a failed WatchList is a failure like any other (`InitialList::WatchList`).
    /// (Only an API server follows this way.)
    Only,
}

/// Why a sync or a watch ended, as the source classifies what it saw: what it means to the
/// follower. The [`FollowError`] each carries says what failed, with the upstream's own error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Break {
    /// The watch reached its deadline: reopen where it was, at once. (Only an API server's
    /// watches have one.)
    Ended,
    /// The position left the upstream's window (410 Expired, an etcd compaction): relist.
    Expired(FollowError),
    /// The upstream's history was replaced (etcd wiped or restored): every watcher gets 410
    /// Expired and the cache relists. (Only etcd shows it.)
    Replaced(FollowError),
    /// What was read cannot be applied where the cache stands (one revision's events split
    /// across two reads): relist.
    Relist(FollowError),
    /// A WatchList ended without its initial-events-end bookmark: the server ignored
    /// `sendInitialEvents`. (Only an API server's.)
    NoInitialEventsEnd,
    /// The upstream does not serve the resource (404 on its collection: a CRD not installed).
    /// Nothing to do with WatchList: the fallback does not apply. (Only an API server says so.)
    Absent(FollowError),
    /// A failure to retry after a backoff, resuming where the cache stands. `status`: the HTTP
    /// code, when the upstream answered with one.
    Failed {
        /// What failed.
        error: FollowError,
        /// The upstream's HTTP status code, when it answered with one.
        status: Option<u16>,
    },
    /// The follower was asked to stop.
    Shutdown,
}

impl Break {
    /// A resumable failure without a status.
    pub fn failed(error: FollowError) -> Break {
        Break::Failed {
            error,
            status: None,
        }
    }

    /// Whether a failed WatchList was the server's choice, so that asking again is pointless: an
    /// answer with any status but 410 and 429 (kube-apiserver on an etcd without progress
    /// requests answers 500 "the required storage feature RequestWatchProgress is disabled",
    /// every time).
    pub(crate) fn refuses_watch_list(&self) -> bool {
        match self {
            Break::NoInitialEventsEnd => true,
            Break::Failed {
                status: Some(c), ..
            } => *c != 410 && *c != 429,
            _ => false,
        }
    }
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Break::Ended => f.write_str("the watch reached its deadline"),
            Break::NoInitialEventsEnd => FollowError::NoInitialEventsEnd.fmt(f),
            Break::Shutdown => f.write_str("shutting down"),
            Break::Expired(e)
            | Break::Replaced(e)
            | Break::Relist(e)
            | Break::Absent(e)
            | Break::Failed { error: e, .. } => e.fmt(f),
        }
    }
}

/// What the driver learned by carrying out the last [`Action`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// The sync finished at `rv`; `streaming`: its response carries on as the watch (WatchList).
    Synced { rv: u64, streaming: bool },
    /// The watch is open (the upstream confirmed it).
    Opened,
    /// The sync, the opening or the watch ended. `applied`: the revision the cache holds every
    /// change up to (`None` while syncing: no consistent state to resume from).
    Broke { applied: Option<u64>, why: Break },
    /// The backoff pause is over.
    Resumed,
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Read the full state into a resync.
    Sync(SyncMode),
    /// Open a watch of the changes after `from`.
    Watch { from: u64 },
    /// Follow the open watch, which starts after `from`, until it breaks.
    Follow { from: u64 },
    /// Pause for up to this long (the driver draws the delay in `[0, max]`), then [`Input::Resumed`].
    Pause { max: Duration },
    /// Wait exactly this long (no jitter, no grace period: not an outage), then
    /// [`Input::Resumed`].
    Wait(Duration),
    /// Stop following.
    Stop,
}

/// What the driver does to the cache before the next action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// The watch is back: the cache is ready again if it was unavailable. `down_for`: how long
    /// the upstream was unavailable, if it was.
    Recovered { down_for: Option<Duration> },
    /// Unavailable past the grace period: the cache is not ready, for this reason.
    NotReady(Unavailable),
    /// The upstream's history was replaced (as this says): every watcher gets 410 Expired, the
    /// cache empties and is not ready until the next sync.
    Reset(FollowError),
    /// The upstream does not serve the resource (its answer says so): the cache is absent until
    /// a sync finishes.
    Absent(FollowError),
}

/// One step's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub effect: Option<Effect>,
    pub action: Action,
}

/// Where a paused follower goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    Sync,
    Watch(u64),
}

/// The follower's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Reading the full state.
    Syncing(SyncMode),
    /// Opening a watch after `rv`.
    Opening {
        rv: u64,
    },
    /// Following a watch that started after `rv`.
    Watching {
        rv: u64,
    },
    /// Waiting out a backoff.
    Paused(Then),
    /// The upstream does not serve the resource: waiting to ask again (then a sync).
    Absent,
    Stopped,
}

/// Whether the upstream answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Link {
    Up,
    /// Unavailable `since`; `last`: the latest failure, the not-ready reason.
    Down {
        since: Instant,
        last: FollowError,
    },
}

/// How a follower treats unavailability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The upstream's name in not-ready reasons ("etcd", "API server").
    pub upstream: &'static str,
    /// How long the upstream may be unavailable before the cache is not ready.
    pub grace: Duration,
    /// The first retry's delay.
    pub backoff_initial: Duration,
    /// The longest delay between retries (each doubles up to it, with full jitter).
    pub backoff_max: Duration,
    /// How often a resource the upstream does not serve is asked for again.
    pub absent_retry: Duration,
}

/// A follower's state machine (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    phase: Phase,
    watch_list: WatchListUse,
    link: Link,
    /// Pauses since the upstream last answered: the backoff's exponent.
    attempt: u32,
    policy: Policy,
}

impl Machine {
    pub(crate) fn new(policy: Policy, watch_list: WatchListUse) -> Machine {
        let mut m = Machine {
            phase: Phase::Stopped,
            watch_list,
            link: Link::Up,
            attempt: 0,
            policy,
        };
        m.phase = Phase::Syncing(m.sync_mode());
        m
    }

    /// The first action: the initial sync.
    pub(crate) fn start(&self) -> Action {
        match self.phase {
            Phase::Syncing(mode) => Action::Sync(mode),
            _ => Action::Stop,
        }
    }

    #[cfg(test)]
    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    pub(crate) fn watch_list(&self) -> WatchListUse {
        self.watch_list
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// How long the upstream has been unavailable at `now`, if it is.
    pub(crate) fn down_for(&self, now: Instant) -> Option<Duration> {
        match self.link {
            Link::Up => None,
            Link::Down { since, .. } => Some(now.saturating_duration_since(since)),
        }
    }

    fn sync_mode(&self) -> SyncMode {
        match self.watch_list {
            WatchListUse::Off => SyncMode::List,
            WatchListUse::Try | WatchListUse::Only => SyncMode::WatchList,
        }
    }

    fn go(&mut self, phase: Phase, effect: Option<Effect>) -> Step {
        self.phase = phase;
        let action = match phase {
            Phase::Syncing(mode) => Action::Sync(mode),
            Phase::Opening { rv } => Action::Watch { from: rv },
            Phase::Watching { rv } => Action::Follow { from: rv },
            Phase::Paused(_) => {
                let max = backoff::cap(
                    self.policy.backoff_initial,
                    self.policy.backoff_max,
                    self.attempt,
                );
                self.attempt = self.attempt.saturating_add(1);
                Action::Pause { max }
            }
            Phase::Absent => Action::Wait(self.policy.absent_retry),
            Phase::Stopped => Action::Stop,
        };
        Step { effect, action }
    }

    fn relist(&mut self, effect: Option<Effect>) -> Step {
        let mode = self.sync_mode();
        self.go(Phase::Syncing(mode), effect)
    }

    /// The watch is open: the outage (if any) ends, the backoff restarts.
    fn recovered(&mut self, now: Instant, phase: Phase) -> Step {
        let down_for = self.down_for(now);
        self.link = Link::Up;
        self.attempt = 0;
        self.go(phase, Some(Effect::Recovered { down_for }))
    }

    /// A failure: the outage starts now unless it already had; past the grace period, the
    /// cache is not ready. Then a pause before `then`.
    fn failed(&mut self, now: Instant, last: FollowError, then: Then) -> Step {
        let since = match self.link {
            Link::Down { since, .. } => since,
            Link::Up => now,
        };
        self.link = Link::Down { since, last };
        let effect = self.past_grace(now);
        self.go(Phase::Paused(then), effect)
    }

    /// Not ready, for the last failure, when the outage is past the grace period at `now`.
    fn past_grace(&self, now: Instant) -> Option<Effect> {
        let Link::Down { since, last } = &self.link else {
            return None;
        };
        let down_for = now.saturating_duration_since(*since);
        (down_for >= self.policy.grace).then(|| {
            Effect::NotReady(Unavailable {
                upstream: self.policy.upstream,
                down_for,
                last: last.clone(),
            })
        })
    }

    /// While paused: the grace period may run out meanwhile.
    pub(crate) fn tick(&self, now: Instant) -> Option<Effect> {
        match self.phase {
            Phase::Paused(_) => self.past_grace(now),
            _ => None,
        }
    }

    /// The step function: where the follower goes on `input`, at `now`.
    pub(crate) fn step(&mut self, input: Input, now: Instant) -> Step {
        match (self.phase, input) {
            (Phase::Stopped, _) => self.go(Phase::Stopped, None),
            (
                _,
                Input::Broke {
                    why: Break::Shutdown,
                    ..
                },
            ) => self.go(Phase::Stopped, None),

            (
                Phase::Syncing(_),
                Input::Synced {
                    rv,
                    streaming: true,
                },
            ) => self.recovered(now, Phase::Watching { rv }),
            (
                Phase::Syncing(_),
                Input::Synced {
                    rv,
                    streaming: false,
                },
            ) => self.go(Phase::Opening { rv }, None),
            (Phase::Opening { rv }, Input::Opened) => self.recovered(now, Phase::Watching { rv }),
            (Phase::Paused(Then::Sync) | Phase::Absent, Input::Resumed) => self.relist(None),
            (Phase::Paused(Then::Watch(rv)), Input::Resumed) => {
                self.go(Phase::Opening { rv }, None)
            }

            // As client-go's reflector: a WatchList that fails for any reason falls back to LIST
            // then watch for this sync ("making progress is better than deadlocking"); one the
            // server refused, for good. A replaced history is still a reset first, and a resource
            // not served is absent (a LIST would get the same 404).
            (Phase::Syncing(SyncMode::WatchList), Input::Broke { why, .. })
                if self.watch_list == WatchListUse::Try
                    && !matches!(why, Break::Replaced(_) | Break::Absent(_)) =>
            {
                if why.refuses_watch_list() {
                    self.watch_list = WatchListUse::Off;
                }
                self.go(Phase::Syncing(SyncMode::List), None)
            }

            (
                Phase::Syncing(_) | Phase::Opening { .. } | Phase::Watching { .. },
                Input::Broke { applied, why },
            ) => self.broke(applied, why, now),

            // Nothing else can happen with a driver that carries out the actions it is given;
            // a relist is right from anywhere.
            (_, _) => self.relist(None),
        }
    }

    fn broke(&mut self, applied: Option<u64>, why: Break, now: Instant) -> Step {
        let resume = |applied: Option<u64>| applied.map_or(Then::Sync, Then::Watch);
        match why {
            Break::Ended => match resume(applied) {
                Then::Watch(rv) => self.go(Phase::Opening { rv }, None),
                Then::Sync => self.relist(None),
            },
            Break::Expired(_) | Break::Relist(_) => self.relist(None),
            Break::Replaced(why) => self.relist(Some(Effect::Reset(why))),
            Break::NoInitialEventsEnd => {
                self.failed(now, FollowError::NoInitialEventsEnd, resume(applied))
            }
            Break::Failed { error, .. } => self.failed(now, error, resume(applied)),
            // The upstream answered: whatever outage there was is over, and the next sync
            // starts with a fresh backoff.
            Break::Absent(why) => {
                self.link = Link::Up;
                self.attempt = 0;
                self.go(Phase::Absent, Some(Effect::Absent(why)))
            }
            Break::Shutdown => self.go(Phase::Stopped, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(30);

    fn policy() -> Policy {
        Policy {
            upstream: "etcd",
            grace: GRACE,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            absent_retry: Duration::from_secs(3),
        }
    }

    fn at(phase: Phase, watch_list: WatchListUse) -> Machine {
        let mut m = Machine::new(policy(), watch_list);
        m.phase = phase;
        m
    }

    fn broke(applied: Option<u64>, why: Break) -> Input {
        Input::Broke { applied, why }
    }

    /// A failure whose message is `why`.
    fn err(why: &str) -> FollowError {
        FollowError::watch(std::io::Error::other(why.to_owned()))
    }

    fn failed(status: Option<u16>) -> Break {
        Break::Failed {
            error: err("boom"),
            status,
        }
    }

    fn not_ready(down_for: Duration, last: FollowError) -> Option<Effect> {
        Some(Effect::NotReady(Unavailable {
            upstream: "etcd",
            down_for,
            last,
        }))
    }

    fn step(effect: Option<Effect>, action: Action) -> Step {
        Step { effect, action }
    }

    fn every_break() -> Vec<Break> {
        vec![
            Break::Ended,
            Break::Expired(err("410")),
            Break::Replaced(err("wiped")),
            Break::Relist(err("split")),
            Break::NoInitialEventsEnd,
            failed(None),
            failed(Some(500)),
            failed(Some(410)),
            failed(Some(429)),
            Break::Absent(err("404")),
            Break::Shutdown,
        ]
    }

    fn every_phase() -> Vec<Phase> {
        vec![
            Phase::Syncing(SyncMode::WatchList),
            Phase::Syncing(SyncMode::List),
            Phase::Opening { rv: 7 },
            Phase::Watching { rv: 7 },
            Phase::Paused(Then::Sync),
            Phase::Paused(Then::Watch(7)),
            Phase::Absent,
            Phase::Stopped,
        ]
    }

    fn every_input() -> Vec<Input> {
        let mut inputs = vec![
            Input::Synced {
                rv: 9,
                streaming: false,
            },
            Input::Synced {
                rv: 9,
                streaming: true,
            },
            Input::Opened,
            Input::Resumed,
        ];
        for why in every_break() {
            inputs.push(broke(None, why.clone()));
            inputs.push(broke(Some(8), why));
        }
        inputs
    }

    #[test]
    fn the_first_action_is_a_sync_by_the_configured_mode() {
        for (use_, mode) in [
            (WatchListUse::Off, SyncMode::List),
            (WatchListUse::Try, SyncMode::WatchList),
            (WatchListUse::Only, SyncMode::WatchList),
        ] {
            let m = Machine::new(policy(), use_);
            assert_eq!(m.start(), Action::Sync(mode));
            assert_eq!(m.phase(), Phase::Syncing(mode));
        }
    }

    #[test]
    fn a_sync_opens_a_watch_from_its_revision_or_is_the_watch() {
        let now = Instant::now();
        for mode in [SyncMode::List, SyncMode::WatchList] {
            let mut m = at(Phase::Syncing(mode), WatchListUse::Try);
            let s = m.step(
                Input::Synced {
                    rv: 9,
                    streaming: false,
                },
                now,
            );
            assert_eq!(s, step(None, Action::Watch { from: 9 }));
            assert_eq!(m.phase(), Phase::Opening { rv: 9 });
            assert_eq!(
                m.step(Input::Opened, now),
                step(
                    Some(Effect::Recovered { down_for: None }),
                    Action::Follow { from: 9 }
                )
            );
            let mut m = at(Phase::Syncing(mode), WatchListUse::Try);
            let s = m.step(
                Input::Synced {
                    rv: 9,
                    streaming: true,
                },
                now,
            );
            assert_eq!(
                s,
                step(
                    Some(Effect::Recovered { down_for: None }),
                    Action::Follow { from: 9 }
                )
            );
            assert_eq!(m.phase(), Phase::Watching { rv: 9 });
        }
    }

    #[test]
    fn breaks_of_a_watch_resume_reopen_relist_or_reset() {
        let now = Instant::now();
        for phase in [Phase::Opening { rv: 7 }, Phase::Watching { rv: 7 }] {
            for use_ in [WatchListUse::Off, WatchListUse::Try, WatchListUse::Only] {
                let relist = Action::Sync(if use_ == WatchListUse::Off {
                    SyncMode::List
                } else {
                    SyncMode::WatchList
                });
                let go = |why: Break| {
                    let mut m = at(phase, use_);
                    let s = m.step(broke(Some(8), why), now);
                    (s, m.phase(), m.watch_list())
                };
                // The deadline: reopen at once from where the watch got to.
                assert_eq!(
                    go(Break::Ended),
                    (
                        step(None, Action::Watch { from: 8 }),
                        Phase::Opening { rv: 8 },
                        use_
                    )
                );
                for why in [Break::Expired(err("410")), Break::Relist(err("split"))] {
                    let (s, _, wl) = go(why);
                    assert_eq!((s, wl), (step(None, relist), use_));
                }
                let (s, _, _) = go(Break::Replaced(err("wiped")));
                assert_eq!(s, step(Some(Effect::Reset(err("wiped"))), relist));
                // A failure: a pause, then a resume from where the watch got to.
                for why in [failed(None), failed(Some(500)), Break::NoInitialEventsEnd] {
                    let (s, p, _) = go(why);
                    assert_eq!(
                        s,
                        step(
                            None,
                            Action::Pause {
                                max: Duration::from_millis(100)
                            }
                        )
                    );
                    assert_eq!(p, Phase::Paused(Then::Watch(8)));
                }
                assert_eq!(go(Break::Shutdown).0, step(None, Action::Stop));
            }
        }
    }

    #[test]
    fn a_failed_watch_list_falls_back_to_list_for_this_sync_and_off_for_good_when_refused() {
        let now = Instant::now();
        for why in every_break() {
            let mut m = at(Phase::Syncing(SyncMode::WatchList), WatchListUse::Try);
            let s = m.step(broke(None, why.clone()), now);
            match &why {
                Break::Shutdown => assert_eq!(s.action, Action::Stop),
                // Not served: absent, and WatchList stays on (a 404 says nothing of it).
                Break::Absent(w) => {
                    assert_eq!(
                        s,
                        step(
                            Some(Effect::Absent(w.clone())),
                            Action::Wait(Duration::from_secs(3))
                        )
                    );
                    assert_eq!(m.watch_list(), WatchListUse::Try);
                }
                Break::Replaced(w) => {
                    assert_eq!(
                        s,
                        step(
                            Some(Effect::Reset(w.clone())),
                            Action::Sync(SyncMode::WatchList)
                        )
                    );
                }
                _ => {
                    assert_eq!(s, step(None, Action::Sync(SyncMode::List)), "{why:?}");
                    let for_good = matches!(
                        why,
                        Break::NoInitialEventsEnd
                            | Break::Failed {
                                status: Some(500),
                                ..
                            }
                    );
                    assert_eq!(
                        m.watch_list(),
                        if for_good {
                            WatchListUse::Off
                        } else {
                            WatchListUse::Try
                        },
                        "{why:?}"
                    );
                    // The fallback's LIST is not a failure: no outage, no backoff.
                    assert_eq!(m.down_for(now), None);
                }
            }
        }
        // Off for good: every later sync (a relist after 410) is a LIST.
        let mut m = at(Phase::Syncing(SyncMode::WatchList), WatchListUse::Try);
        m.step(broke(None, failed(Some(500))), now);
        m.step(
            Input::Synced {
                rv: 5,
                streaming: false,
            },
            now,
        );
        m.step(Input::Opened, now);
        let s = m.step(broke(Some(6), Break::Expired(err("410"))), now);
        assert_eq!(s.action, Action::Sync(SyncMode::List));
        // Still on after a transient failure: the relist tries WatchList again.
        let mut m = at(Phase::Syncing(SyncMode::WatchList), WatchListUse::Try);
        m.step(broke(None, failed(Some(429))), now);
        m.step(
            Input::Synced {
                rv: 5,
                streaming: false,
            },
            now,
        );
        m.step(Input::Opened, now);
        let s = m.step(broke(Some(6), Break::Expired(err("410"))), now);
        assert_eq!(s.action, Action::Sync(SyncMode::WatchList));
    }

    #[test]
    fn watch_list_only_treats_a_failed_watch_list_as_a_failure() {
        let now = Instant::now();
        let mut m = at(Phase::Syncing(SyncMode::WatchList), WatchListUse::Only);
        let s = m.step(broke(None, Break::NoInitialEventsEnd), now);
        assert!(matches!(s.action, Action::Pause { .. }));
        assert_eq!(m.phase(), Phase::Paused(Then::Sync));
        assert_eq!(m.watch_list(), WatchListUse::Only);
        assert_eq!(
            m.step(Input::Resumed, now).action,
            Action::Sync(SyncMode::WatchList)
        );
        // 410 on a sync: relist at once, no backoff.
        let s = m.step(broke(None, Break::Expired(err("410"))), now);
        assert_eq!(s, step(None, Action::Sync(SyncMode::WatchList)));
    }

    #[test]
    fn a_failed_sync_pauses_then_syncs_again() {
        let now = Instant::now();
        for mode in [SyncMode::List, SyncMode::WatchList] {
            let use_ = if mode == SyncMode::List {
                WatchListUse::Off
            } else {
                WatchListUse::Only
            };
            let mut m = at(Phase::Syncing(mode), use_);
            let s = m.step(broke(None, failed(None)), now);
            assert!(matches!(s.action, Action::Pause { .. }));
            assert_eq!(m.phase(), Phase::Paused(Then::Sync));
            assert_eq!(m.step(Input::Resumed, now).action, Action::Sync(mode));
            // A sync that breaks with Ended has nothing to reopen: it syncs again.
            let mut m = at(Phase::Syncing(mode), use_);
            assert_eq!(
                m.step(broke(None, Break::Ended), now).action,
                Action::Sync(mode)
            );
        }
    }

    #[test]
    fn the_backoff_grows_while_down_and_restarts_when_a_watch_opens() {
        let t0 = Instant::now();
        let mut m = at(Phase::Watching { rv: 7 }, WatchListUse::Off);
        let mut maxima = Vec::new();
        for i in 0..8 {
            let s = m.step(broke(Some(7), failed(None)), t0 + Duration::from_secs(i));
            let Action::Pause { max } = s.action else {
                panic!("{s:?}")
            };
            maxima.push(max);
            assert_eq!(m.step(Input::Resumed, t0).action, Action::Watch { from: 7 });
        }
        assert_eq!(maxima[0], Duration::from_millis(100));
        assert_eq!(maxima[1], Duration::from_millis(200));
        assert_eq!(maxima[7], Duration::from_secs(5), "capped");
        assert_eq!(
            m.down_for(t0 + Duration::from_secs(9)),
            Some(Duration::from_secs(9))
        );
        let s = m.step(Input::Opened, t0 + Duration::from_secs(9));
        assert_eq!(
            s.effect,
            Some(Effect::Recovered {
                down_for: Some(Duration::from_secs(9))
            })
        );
        assert_eq!(m.down_for(t0), None);
        let s = m.step(broke(Some(7), failed(None)), t0);
        assert_eq!(
            s.action,
            Action::Pause {
                max: Duration::from_millis(100)
            }
        );
    }

    #[test]
    fn past_the_grace_period_the_cache_is_not_ready_until_a_watch_opens() {
        let t0 = Instant::now();
        let mut m = at(Phase::Watching { rv: 7 }, WatchListUse::Off);
        let s = m.step(broke(Some(7), failed(None)), t0);
        assert_eq!(s.effect, None, "inside the grace period");
        assert_eq!(m.tick(t0 + GRACE / 2), None);
        // The reason is the last failure.
        assert_eq!(m.tick(t0 + GRACE), not_ready(GRACE, err("boom")));
        m.step(Input::Resumed, t0 + GRACE);
        assert_eq!(m.tick(t0 + GRACE), None, "only while paused");
        // The outage goes on through further failures: it started at t0.
        let s = m.step(
            broke(Some(7), Break::failed(err("reset by peer"))),
            t0 + GRACE * 2,
        );
        assert_eq!(s.effect, not_ready(GRACE * 2, err("reset by peer")));
        let Some(Effect::NotReady(u)) = s.effect else {
            panic!("{s:?}")
        };
        assert_eq!(
            u.to_string(),
            "etcd unavailable for 60s: the watch failed: reset by peer"
        );
        m.step(Input::Resumed, t0 + GRACE * 2);
        assert_eq!(
            m.step(Input::Opened, t0 + GRACE * 2).effect,
            Some(Effect::Recovered {
                down_for: Some(GRACE * 2)
            })
        );
        // A WatchList that carries on as the watch ends an outage too.
        let mut m = at(Phase::Syncing(SyncMode::List), WatchListUse::Off);
        m.step(broke(None, failed(None)), t0);
        m.step(Input::Resumed, t0);
        let s = m.step(
            Input::Synced {
                rv: 3,
                streaming: true,
            },
            t0 + GRACE,
        );
        assert_eq!(
            s.effect,
            Some(Effect::Recovered {
                down_for: Some(GRACE)
            })
        );
        // A LIST alone does not: the watch has to open.
        let mut m = at(Phase::Syncing(SyncMode::List), WatchListUse::Off);
        m.step(broke(None, failed(None)), t0);
        m.step(Input::Resumed, t0);
        let s = m.step(
            Input::Synced {
                rv: 3,
                streaming: false,
            },
            t0 + GRACE,
        );
        assert_eq!(s.effect, None);
        assert_eq!(m.down_for(t0 + GRACE), Some(GRACE));
    }

    #[test]
    fn a_resource_not_served_is_absent_and_asked_again_with_no_outage() {
        let t0 = Instant::now();
        let absent = || broke(None, Break::Absent(err("404")));
        for (phase, use_) in [
            (Phase::Syncing(SyncMode::List), WatchListUse::Off),
            (Phase::Syncing(SyncMode::WatchList), WatchListUse::Try),
            (Phase::Syncing(SyncMode::WatchList), WatchListUse::Only),
            (Phase::Opening { rv: 7 }, WatchListUse::Off),
            (Phase::Watching { rv: 7 }, WatchListUse::Try),
        ] {
            let mut m = at(phase, use_);
            let s = m.step(absent(), t0);
            assert_eq!(
                s,
                step(
                    Some(Effect::Absent(err("404"))),
                    Action::Wait(Duration::from_secs(3))
                ),
                "{phase:?}"
            );
            assert_eq!(m.phase(), Phase::Absent);
            assert_eq!(m.watch_list(), use_, "WatchList is not refused by a 404");
            // Asked again by a sync in the configured mode.
            let mode = if use_ == WatchListUse::Off {
                SyncMode::List
            } else {
                SyncMode::WatchList
            };
            assert_eq!(m.step(Input::Resumed, t0).action, Action::Sync(mode));
        }
        // Absent for a long time: no grace period runs out, no backoff grows.
        let mut m = at(Phase::Syncing(SyncMode::List), WatchListUse::Off);
        for i in 0..10 {
            let now = t0 + GRACE * i;
            let s = m.step(absent(), now);
            assert_eq!(s.action, Action::Wait(Duration::from_secs(3)));
            assert_eq!(m.tick(now), None, "not an outage");
            assert_eq!(m.down_for(now), None);
            m.step(Input::Resumed, now);
        }
        // A failure before the 404 ends there: the upstream answered.
        let mut m = at(Phase::Watching { rv: 7 }, WatchListUse::Off);
        m.step(broke(Some(7), failed(None)), t0);
        m.step(Input::Resumed, t0);
        assert_eq!(
            m.step(broke(Some(7), Break::Absent(err("404"))), t0 + GRACE)
                .effect,
            Some(Effect::Absent(err("404")))
        );
        assert_eq!(m.down_for(t0 + GRACE), None);
        m.step(Input::Resumed, t0 + GRACE);
        let s = m.step(broke(None, failed(None)), t0 + GRACE);
        assert_eq!(
            s.action,
            Action::Pause {
                max: Duration::from_millis(100)
            },
            "a fresh backoff"
        );
        // Served at last: the sync and the watch make it ready as the first sync does.
        let mut m = at(Phase::Absent, WatchListUse::Off);
        m.step(Input::Resumed, t0);
        assert_eq!(
            m.step(
                Input::Synced {
                    rv: 5,
                    streaming: false
                },
                t0
            )
            .action,
            Action::Watch { from: 5 }
        );
        assert_eq!(
            m.step(Input::Opened, t0),
            step(
                Some(Effect::Recovered { down_for: None }),
                Action::Follow { from: 5 }
            )
        );
    }

    /// Every (state, input) pair: the follower always has a next action, stops only when asked
    /// to (and then for good), and never resumes a watch from a revision it did not reach.
    #[test]
    fn every_state_and_input_has_a_defined_step() {
        let now = Instant::now();
        for phase in every_phase() {
            for use_ in [WatchListUse::Off, WatchListUse::Try, WatchListUse::Only] {
                for input in every_input() {
                    let mut m = at(phase, use_);
                    let s = m.step(input.clone(), now);
                    let case = format!("{phase:?} {use_:?} {input:?} -> {s:?}");
                    let shutdown = matches!(
                        input,
                        Input::Broke {
                            why: Break::Shutdown,
                            ..
                        }
                    );
                    assert_eq!(
                        s.action == Action::Stop,
                        shutdown || phase == Phase::Stopped,
                        "{case}"
                    );
                    assert_eq!(
                        s.action == Action::Stop,
                        m.phase() == Phase::Stopped,
                        "{case}"
                    );
                    // The action is the new phase's.
                    match (m.phase(), s.action) {
                        (Phase::Syncing(a), Action::Sync(b)) => assert_eq!(a, b, "{case}"),
                        (Phase::Opening { rv }, Action::Watch { from })
                        | (Phase::Watching { rv }, Action::Follow { from }) => {
                            assert_eq!(rv, from, "{case}")
                        }
                        (Phase::Paused(_), Action::Pause { .. })
                        | (Phase::Absent, Action::Wait(_))
                        | (Phase::Stopped, Action::Stop) => {}
                        other => panic!("{case}: {other:?}"),
                    }
                    // A watch resumes only from a revision the cache reached: the phase's, the
                    // sync's, or the one the broken watch reported.
                    if let Action::Watch { from } | Action::Follow { from } = s.action {
                        assert!([7, 8, 9].contains(&from), "{case}");
                        if let Input::Broke { applied, .. } = &input {
                            assert_eq!(Some(from), *applied, "{case}");
                        }
                    }
                    // Only a reset relists with a reset, and only a replaced history resets.
                    let reset =
                        matches!(
                            input,
                            Input::Broke {
                                why: Break::Replaced(_),
                                ..
                            }
                        ) && !matches!(phase, Phase::Paused(_) | Phase::Absent | Phase::Stopped);
                    assert_eq!(matches!(s.effect, Some(Effect::Reset(_))), reset, "{case}");
                    // WatchList is only ever turned off, never on.
                    if use_ != WatchListUse::Try {
                        assert_eq!(m.watch_list(), use_, "{case}");
                    }
                }
            }
        }
    }
}
