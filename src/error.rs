//! Typed errors. Every variant maps one-to-one onto a Kubernetes `Status` reason and HTTP code, so the
//! server layer never has to guess (see [`Error::reason`] and [`Error::code`]).
//!
//! An error caused by another one keeps it as a [`Cause`], which [`std::error::Error::source`]
//! returns as the original type (so `downcast_ref` finds an `etcd_client::Error` or a
//! `serde_json::Error`). The `Display` text still carries the cause's text too: it becomes the
//! message of the `Status` a client gets, which has no chain.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

/// The error another error was caused by.
///
/// Shared (an `Arc`), so that the errors holding one stay `Clone`: one failed upstream read
/// answers every request waiting on it. Compared by its text, so that errors compare as they
/// read. It dereferences to the original error, which is what `source()` hands out.
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Keeps `e` as a cause.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(e))
    }

    /// `e` as a cause, with the message of the error that carries it: `context: e`, or `e` alone
    /// when the context is empty.
    pub fn with_context(
        context: impl fmt::Display,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> (String, Cause) {
        let context = context.to_string();
        let message = if context.is_empty() {
            e.to_string()
        } else {
            format!("{context}: {e}")
        };
        (message, Cause::new(e))
    }
}

// Deliberately not `std::error::Error` itself: thiserror's `#[source]` then reaches the original
// error through this `Deref`, and `source()` returns it rather than a wrapper.
impl Deref for Cause {
    type Target = dyn std::error::Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

/// The result type of the cache's public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from the cache, named after the Kubernetes `Status` reason it maps to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The requested resourceVersion fell out of the history window (410 Expired).
    #[error("too old resource version: {requested} ({oldest})")]
    Expired {
        /// The resourceVersion the client asked for.
        requested: u64,
        /// The oldest resourceVersion the cache can still serve from.
        oldest: u64,
    },
    /// A continue token refers to a list whose resourceVersion fell out of the history window
    /// (410 Expired), in upstream's words; `continue_token` continues the list after the same
    /// key at the latest revision, for a client that accepts an inconsistent list (upstream
    /// puts it in the Status's `metadata.continue`).
    #[error(
        "The provided continue parameter is too old to display a consistent list result. You can \
         start a new list without the continue parameter, or use the continue token in this \
         response to retrieve the remainder of the results. Continuing with the provided token \
         results in an inconsistent list - objects that were created, modified, or deleted \
         between the time the first chunk was returned and now may show up in the list."
    )]
    ContinueExpired {
        /// The resourceVersion of the list the token continues.
        requested: u64,
        /// The oldest resourceVersion the cache can still serve from.
        oldest: u64,
        /// The token that continues at the latest revision.
        continue_token: String,
    },
    /// The cache did not reach the requested resourceVersion in time (504, Retry-After 1 s).
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The resourceVersion the client asked for.
        requested: u64,
        /// The cache's resourceVersion when the wait gave up.
        current: u64,
    },
    /// The request is malformed: bad selector, parameter or resourceVersion (400 BadRequest).
    #[error("{message}")]
    BadRequest {
        /// What is wrong, as the client reads it in the `Status`.
        message: String,
        /// The parse error behind it, when there is one.
        #[source]
        cause: Option<Cause>,
    },
    /// The object does not exist (404 NotFound).
    #[error("{kind} \"{name}\" not found")]
    NotFound {
        /// The resource's plural name, as Kubernetes reports it.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// The resource is not ready: its initial sync has not finished or its upstream is unavailable
    /// (429 TooManyRequests, with a Retry-After).
    #[error("resource {resource} is not ready: {why}")]
    NotReady {
        /// The resource's plural name.
        resource: String,
        /// What the cache is waiting for.
        why: String,
        /// How long the client should wait before retrying.
        retry_after: Duration,
    },
    /// Too many requests of this kind are in flight (429 TooManyRequests, with a Retry-After).
    #[error("too many requests: {why}")]
    TooManyRequests {
        /// What is at its limit.
        why: String,
        /// How long the client should wait before retrying.
        retry_after: Duration,
    },
    /// The upstream (etcd or an API server) failed in a way the client may retry (500 InternalError).
    #[error("upstream error: {message}")]
    Upstream {
        /// What failed, with the cause's text (the `Status` message a client reads).
        message: String,
        /// The upstream's own error, when there is one (`etcd_client::Error`, a `RestError`, ...).
        #[source]
        cause: Option<Cause>,
    },
    /// A stored object does not decode as the type a library caller asked for (500 InternalError):
    /// the cache holds it as the upstream sent it, so the type, not the request, is wrong.
    #[error("{key} does not decode as {type_name}: {cause}")]
    Decode {
        /// The object's storage key.
        key: String,
        /// The Rust type it was decoded as.
        type_name: &'static str,
        /// The decoder's error.
        #[source]
        cause: Cause,
    },
}

impl Error {
    /// The Kubernetes `Status.reason` for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Expired { .. } | Error::ContinueExpired { .. } => "Expired",
            Error::TooLargeResourceVersion { .. } => "Timeout",
            Error::BadRequest { .. } => "BadRequest",
            Error::NotFound { .. } => "NotFound",
            Error::NotReady { .. } | Error::TooManyRequests { .. } => "TooManyRequests",
            Error::Upstream { .. } | Error::Decode { .. } => "InternalError",
        }
    }

    /// The HTTP status code for this error.
    pub fn code(&self) -> u16 {
        match self {
            Error::Expired { .. } | Error::ContinueExpired { .. } => 410,
            Error::TooLargeResourceVersion { .. } => 504,
            Error::BadRequest { .. } => 400,
            Error::NotFound { .. } => 404,
            Error::NotReady { .. } | Error::TooManyRequests { .. } => 429,
            Error::Upstream { .. } | Error::Decode { .. } => 500,
        }
    }

    /// How long a client should wait before retrying, when the error says so.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::TooLargeResourceVersion { .. } => Some(Duration::from_secs(1)),
            Error::NotReady { retry_after, .. } | Error::TooManyRequests { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }

    /// A 400 with this message and no cause.
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Error::BadRequest {
            message: msg.into(),
            cause: None,
        }
    }

    /// A 400 whose message is a parse error's text, keeping the error as its cause.
    pub fn bad_request_from(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        let (message, cause) = Cause::with_context("", e);
        Error::BadRequest {
            message,
            cause: Some(cause),
        }
    }

    /// An upstream failure with no error object behind it (a timeout, a missing answer).
    pub fn upstream(msg: impl Into<String>) -> Self {
        Error::Upstream {
            message: msg.into(),
            cause: None,
        }
    }

    /// An upstream failure caused by `e`: the message is `context: e`, or `e` alone when the
    /// context is empty.
    pub fn upstream_from(
        context: impl fmt::Display,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let (message, cause) = Cause::with_context(context, e);
        Error::Upstream {
            message,
            cause: Some(cause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_codes_match_kubernetes() {
        let cases = [
            (
                Error::Expired {
                    requested: 1,
                    oldest: 5,
                },
                "Expired",
                410,
            ),
            (
                Error::ContinueExpired {
                    requested: 1,
                    oldest: 5,
                    continue_token: "t".into(),
                },
                "Expired",
                410,
            ),
            (
                Error::TooLargeResourceVersion {
                    requested: 9,
                    current: 5,
                },
                "Timeout",
                504,
            ),
            (Error::bad_request("x"), "BadRequest", 400),
            (
                Error::NotFound {
                    kind: "pods".into(),
                    name: "a".into(),
                },
                "NotFound",
                404,
            ),
            (
                Error::NotReady {
                    resource: "pods".into(),
                    why: "sync".into(),
                    retry_after: Duration::from_secs(1),
                },
                "TooManyRequests",
                429,
            ),
            (
                Error::TooManyRequests {
                    why: "reads".into(),
                    retry_after: Duration::from_secs(1),
                },
                "TooManyRequests",
                429,
            ),
            (Error::upstream("boom"), "InternalError", 500),
        ];
        for (err, reason, code) in cases {
            assert_eq!(err.reason(), reason, "{err}");
            assert_eq!(err.code(), code, "{err}");
        }
        assert_eq!(
            Error::Expired {
                requested: 1,
                oldest: 5
            }
            .to_string(),
            "too old resource version: 1 (5)"
        );
        assert_eq!(
            Error::TooLargeResourceVersion {
                requested: 9,
                current: 5
            }
            .to_string(),
            "Too large resource version: 9, current: 5"
        );
        assert_eq!(
            Error::TooLargeResourceVersion {
                requested: 9,
                current: 5
            }
            .retry_after(),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn a_cause_is_the_source_as_its_own_type_and_keeps_errors_clone_and_comparable() {
        use std::error::Error as _;
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Error::upstream_from("reading /registry/pods", io());
        assert_eq!(
            e.to_string(),
            "upstream error: reading /registry/pods: refused"
        );
        let source = e.source().expect("a source");
        let inner = source
            .downcast_ref::<std::io::Error>()
            .expect("the io::Error itself");
        assert_eq!(inner.kind(), std::io::ErrorKind::ConnectionRefused);
        // Clones share the cause; equal text compares equal, other text does not.
        assert_eq!(e.clone(), e);
        assert_eq!(e, Error::upstream_from("reading /registry/pods", io()));
        assert_ne!(e, Error::upstream_from("reading /registry/nodes", io()));
        assert!(Error::upstream("timed out").source().is_none());
        let bad = Error::bad_request_from(io());
        assert_eq!(bad.code(), 400);
        assert!(
            bad.source()
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .is_some()
        );
    }
}
