//! What went wrong while following an upstream, typed: each variant says what failed (the sync,
//! opening the watch, the watch itself, a decode, a probe...) or what the upstream showed
//! (compacted, its history or origin replaced), and keeps the upstream's own error as a
//! [`Cause`], so that `source()` hands out the `etcd_client::Error` or `RestError` itself.
//!
//! [`Break`](super::Break) says what a failure means to the follower (resume, relist, reset,
//! absent); a [`FollowError`] says what it was. `Display` is the message logs, not-ready reasons
//! and reset reasons show; it names the step that failed, then the cause's text.

use std::time::Duration;

use watchcache::Cause;

/// What failed while following an upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowError {
    /// Reading the full state failed: an etcd range read, a LIST page, a WatchList's initial
    /// events.
    #[error("sync failed: {cause}")]
    Sync {
        /// The upstream's error.
        #[source]
        cause: Cause,
    },
    /// The upstream refused or failed to open the watch.
    #[error("opening the watch failed: {cause}")]
    Open {
        /// The upstream's error.
        #[source]
        cause: Cause,
    },
    /// The open watch failed: its stream broke, or the upstream sent an error on it.
    #[error("the watch failed: {cause}")]
    Watch {
        /// The upstream's error.
        #[source]
        cause: Cause,
    },
    /// The upstream closed the watch's stream without saying why.
    #[error("the watch stream was closed by {upstream}")]
    Closed {
        /// The upstream's name ("etcd").
        upstream: &'static str,
    },
    /// etcd canceled the watch for another reason than a compaction.
    #[error("the watch was canceled: {reason}")]
    Canceled {
        /// etcd's cancel reason.
        reason: String,
    },
    /// etcd compacted its history past the watch's position: the changes after it are gone.
    #[error("etcd compacted past {from} (to {to})")]
    Compacted {
        /// The revision the watch started after.
        from: u64,
        /// etcd's compact revision.
        to: u64,
    },
    /// A progress request on the open watch failed.
    #[error("progress request failed: {cause}")]
    Progress {
        /// The upstream's error.
        #[source]
        cause: Cause,
    },
    /// The probe of a silent watch (is the connection alive, has the cluster a leader?) failed.
    #[error("probe of a silent watch failed: {cause}")]
    Probe {
        /// The upstream's error.
        #[source]
        cause: Cause,
    },
    /// The upstream did not answer a request in time.
    #[error("{what}: no answer within {after:?}")]
    Timeout {
        /// The request that went unanswered.
        what: &'static str,
        /// How long it was given.
        after: Duration,
    },
    /// A watch sent nothing, not even a bookmark, for longer than bookmarks come: a connection
    /// that died without closing.
    #[error("the watch went silent: nothing for {0:?}")]
    Silent(Duration),
    /// An object or event from the upstream has no usable identity (its key or resourceVersion).
    #[error("cannot decode the upstream's answer: {cause}")]
    Decode {
        /// The decoder's error.
        #[source]
        cause: Cause,
    },
    /// An answer the upstream's protocol does not allow.
    #[error("unexpected answer from the upstream: {0}")]
    Unexpected(&'static str),
    /// A WatchList ended without its initial-events-end bookmark: the server ignored
    /// `sendInitialEvents`.
    #[error("the WatchList ended without its initial-events-end bookmark")]
    NoInitialEventsEnd,
    /// etcd answers with another cluster id than before: another cluster on the same URL.
    #[error("etcd's cluster id changed from {known:x} to {now:x}")]
    ClusterChanged {
        /// The cluster id the cache follows.
        known: u64,
        /// The one etcd answered with.
        now: u64,
    },
    /// etcd's revision went below what the cache applied: wiped, or restored from a backup.
    #[error("etcd's revision {rev} is below the applied revision {applied}")]
    RevisionBehind {
        /// etcd's revision.
        rev: u64,
        /// The revision the cache holds every change up to.
        applied: u64,
    },
    /// An upstream watchcache's resourceVersions now come from another etcd cluster (a load
    /// balancer moved this follower to a root over another etcd).
    #[error(
        "the upstream's resourceVersions now come from another etcd cluster (origin {known:016x}, now {now:016x})"
    )]
    OriginChanged {
        /// The origin the cache follows.
        known: u64,
        /// The one the upstream names now.
        now: u64,
    },
    /// An upstream that named its origin no longer does: nothing says its resourceVersions are
    /// the same space.
    #[error("the upstream's resourceVersions no longer say their origin (was {known:016x})")]
    OriginDropped {
        /// The origin the cache follows.
        known: u64,
    },
    /// One revision's events arrived in two reads after the first part was applied: the cache
    /// cannot take a second batch at one revision.
    #[error("the events of revision {0} arrived in two parts")]
    SplitRevision(u64),
    /// The consistency check found the cache differs from the upstream.
    #[error("the consistency check found the cache differs from the upstream")]
    Inconsistent,
    /// The driver was to follow a watch that was not open (a driver bug; relisting recovers).
    #[error("no open watch to follow")]
    NoWatch,
}

impl FollowError {
    /// A failed sync, caused by `e`.
    pub fn sync(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        FollowError::Sync {
            cause: Cause::new(e),
        }
    }

    /// A failure to open the watch, caused by `e`.
    pub fn open(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        FollowError::Open {
            cause: Cause::new(e),
        }
    }

    /// A failed watch, caused by `e`.
    pub fn watch(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        FollowError::Watch {
            cause: Cause::new(e),
        }
    }

    /// An answer that does not decode, as `e` says.
    pub fn decode(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        FollowError::Decode {
            cause: Cause::new(e),
        }
    }
}

/// Why a cache is not ready: its upstream has been unavailable past the grace period.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{upstream} unavailable for {down_for:?}: {last}")]
pub(crate) struct Unavailable {
    /// The upstream's name ("etcd", "API server").
    pub upstream: &'static str,
    /// How long it has been unavailable.
    pub down_for: Duration,
    /// The last failure.
    #[source]
    pub last: FollowError,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn the_message_names_the_step_and_the_source_is_the_upstream_error_itself() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = FollowError::open(io);
        assert_eq!(e.to_string(), "opening the watch failed: refused");
        let inner = e
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the io::Error itself");
        assert_eq!(inner.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(FollowError::Compacted { from: 4, to: 9 }.source().is_none());

        let u = Unavailable {
            upstream: "etcd",
            down_for: Duration::from_secs(30),
            last: e.clone(),
        };
        assert_eq!(
            u.to_string(),
            "etcd unavailable for 30s: opening the watch failed: refused"
        );
        assert_eq!(u.source().map(ToString::to_string), Some(e.to_string()));
    }
}
