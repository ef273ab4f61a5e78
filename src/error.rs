//! Typed errors. Every variant maps one-to-one onto a Kubernetes `Status` reason and HTTP code, so the
//! server layer never has to guess (see [`Error::reason`] and [`Error::code`]).

use std::time::Duration;

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
    /// A continue token refers to a list whose resourceVersion fell out of the history window (410 Expired).
    #[error(
        "the provided continue parameter is too old to display a consistent list result; \
         start a new list without the continue parameter (list resourceVersion {requested}, oldest available {oldest})"
    )]
    ContinueExpired {
        /// The resourceVersion of the list the token continues.
        requested: u64,
        /// The oldest resourceVersion the cache can still serve from.
        oldest: u64,
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
    #[error("{0}")]
    BadRequest(String),
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
    /// The upstream (etcd) failed in a way the client may retry (500 InternalError).
    #[error("upstream error: {0}")]
    Upstream(String),
}

impl Error {
    /// The Kubernetes `Status.reason` for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Expired { .. } | Error::ContinueExpired { .. } => "Expired",
            Error::TooLargeResourceVersion { .. } => "Timeout",
            Error::BadRequest(_) => "BadRequest",
            Error::NotFound { .. } => "NotFound",
            Error::NotReady { .. } | Error::TooManyRequests { .. } => "TooManyRequests",
            Error::Upstream(_) => "InternalError",
        }
    }

    /// The HTTP status code for this error.
    pub fn code(&self) -> u16 {
        match self {
            Error::Expired { .. } | Error::ContinueExpired { .. } => 410,
            Error::TooLargeResourceVersion { .. } => 504,
            Error::BadRequest(_) => 400,
            Error::NotFound { .. } => 404,
            Error::NotReady { .. } | Error::TooManyRequests { .. } => 429,
            Error::Upstream(_) => 500,
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

    pub(crate) fn bad_request(msg: impl Into<String>) -> Self {
        Error::BadRequest(msg.into())
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
            (Error::Upstream("boom".into()), "InternalError", 500),
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
}
