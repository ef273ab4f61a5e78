//! Where each read is served from and what it waits for first: pure decisions, made once per
//! request, from the request alone (the role upstream gave `CacheDelegator`, kubernetes/apiserver
//! `pkg/storage/cacher/delegator.go`). Every read is served by the cache; what differs is what it
//! waits for. How a consistent read learns that the cache is fresh is `fresh.rs`'s.
//!
//! The plans are carried out by the facade ([`crate::cache::Cache`]); nothing here waits or locks.

use crate::cache::continue_token;
use crate::error::Error;
use crate::model::{ResourceVersion, RvMatch};

/// What a read waits for before it reads the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Nothing: any cached state will do.
    Nothing,
    /// The cache proven as fresh as the upstream is now, for the keys the read can match (a
    /// consistent read).
    Fresh,
    /// The cache reaching this revision.
    For(u64),
}

/// How a LIST page is served: from the cache, after `wait`, the current state (`at` = `None`) or
/// the state exactly at a revision, after key `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListPlan {
    pub wait: Wait,
    pub at: Option<u64>,
    pub after: Option<String>,
}

/// Plans a LIST. `token` is the `continue` parameter; the keys of the resource start with `prefix`.
///
/// # Errors
/// [`Error::BadRequest`] for combinations upstream rejects and for malformed tokens.
pub(crate) fn plan_list(
    rv: ResourceVersion,
    rv_match: Option<RvMatch>,
    token: Option<&str>,
    prefix: &str,
) -> Result<ListPlan, Error> {
    if let Some(token) = token {
        if rv != ResourceVersion::Unset {
            return Err(Error::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (at, last) = continue_token::decode(token)?;
        let after = Some(format!("{prefix}{last}"));
        return Ok(match at {
            Some(at) => ListPlan {
                wait: Wait::For(at),
                at: Some(at),
                after,
            },
            // The latest revision (a token from an expired continue's 410): the rest of the
            // list as a consistent read now, inconsistent with the pages before.
            None => ListPlan {
                wait: Wait::Fresh,
                at: None,
                after,
            },
        });
    }
    let cache = |wait, at| {
        Ok(ListPlan {
            wait,
            at,
            after: None,
        })
    };
    match (rv, rv_match) {
        (ResourceVersion::Unset, None) => cache(Wait::Fresh, None),
        (ResourceVersion::Unset, Some(_)) => Err(Error::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )),
        (ResourceVersion::Any, Some(RvMatch::Exact)) => Err(Error::bad_request(
            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
        )),
        (ResourceVersion::Any, _) => cache(Wait::Nothing, None),
        (ResourceVersion::At(n), Some(RvMatch::Exact)) => cache(Wait::For(n), Some(n)),
        (ResourceVersion::At(n), _) => cache(Wait::For(n), None),
    }
}

/// Plans a GET: what it waits for before reading the cache.
pub(crate) fn plan_get(rv: ResourceVersion) -> Wait {
    match rv {
        ResourceVersion::Unset => Wait::Fresh,
        ResourceVersion::Any => Wait::Nothing,
        ResourceVersion::At(n) => Wait::For(n),
    }
}

/// Where a WATCH starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchPlan {
    /// Initial events from the cache's state once `Wait` is met, then changes.
    Snapshot(Wait),
    /// Changes after the revision the cache reaches once `Wait` is met.
    AfterCache(Wait),
    /// Changes after this revision.
    After(u64),
}

/// Plans a WATCH. `initial` is `sendInitialEvents`; unset, it follows the legacy rule (initial
/// events for resourceVersion unset or `"0"`, none for N).
pub(crate) fn plan_watch(rv: ResourceVersion, initial: Option<bool>) -> WatchPlan {
    let initial = initial.unwrap_or(matches!(rv, ResourceVersion::Unset | ResourceVersion::Any));
    match (rv, initial) {
        (ResourceVersion::Unset, true) => WatchPlan::Snapshot(Wait::Fresh),
        (ResourceVersion::Unset, false) => WatchPlan::AfterCache(Wait::Fresh),
        (ResourceVersion::Any, true) => WatchPlan::Snapshot(Wait::Nothing),
        (ResourceVersion::Any, false) => WatchPlan::AfterCache(Wait::Nothing),
        (ResourceVersion::At(n), true) => WatchPlan::Snapshot(Wait::For(n)),
        (ResourceVersion::At(n), false) => WatchPlan::After(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ResourceVersion::{Any, At, Unset};

    fn tok(rv: u64) -> String {
        continue_token::encode(rv, "ns/a")
    }

    #[test]
    fn lists_follow_upstreams_resource_version_table() {
        let plan = |rv, m| plan_list(rv, m, None, "/p/").unwrap();
        let cache = |wait, at| ListPlan {
            wait,
            at,
            after: None,
        };
        assert_eq!(plan(Unset, None), cache(Wait::Fresh, None));
        assert_eq!(plan(Any, None), cache(Wait::Nothing, None));
        assert_eq!(
            plan(Any, Some(RvMatch::NotOlderThan)),
            cache(Wait::Nothing, None)
        );
        assert_eq!(plan(At(7), None), cache(Wait::For(7), None));
        assert_eq!(
            plan(At(7), Some(RvMatch::Exact)),
            cache(Wait::For(7), Some(7))
        );
        let err = |rv, m| plan_list(rv, m, None, "/p/").unwrap_err().code();
        assert_eq!(err(Unset, Some(RvMatch::NotOlderThan)), 400);
        assert_eq!(err(Any, Some(RvMatch::Exact)), 400);
    }

    #[test]
    fn continuations_read_where_their_first_page_was_read() {
        assert_eq!(
            plan_list(Unset, None, Some(&tok(20)), "/p/").unwrap(),
            ListPlan {
                wait: Wait::For(20),
                at: Some(20),
                after: Some("/p/ns/a".into()),
            }
        );
        assert_eq!(
            plan_list(At(3), None, Some("garbage"), "/p/")
                .unwrap_err()
                .to_string(),
            "specifying resource version is not allowed when using continue",
            "checked before the token is decoded"
        );
        assert!(
            plan_list(Unset, None, Some("garbage"), "/p/")
                .unwrap_err()
                .to_string()
                .starts_with("continue key is not valid")
        );
    }

    #[test]
    fn gets_and_watches() {
        assert_eq!(plan_get(Unset), Wait::Fresh);
        assert_eq!(plan_get(Any), Wait::Nothing);
        assert_eq!(plan_get(At(4)), Wait::For(4));

        use WatchPlan::*;
        let cases = [
            (Unset, None, Snapshot(Wait::Fresh)),
            (Unset, Some(false), AfterCache(Wait::Fresh)),
            (Any, None, Snapshot(Wait::Nothing)),
            (Any, Some(false), AfterCache(Wait::Nothing)),
            (At(9), None, After(9)),
            (At(9), Some(true), Snapshot(Wait::For(9))),
        ];
        for (rv, initial, want) in cases {
            assert_eq!(plan_watch(rv, initial), want, "{rv:?} {initial:?}");
        }
    }
}
