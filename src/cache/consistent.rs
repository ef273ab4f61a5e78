//! Where each read is served from and what it waits for first: pure decisions, made once per
//! request, from the request and two facts about the cache (the role upstream gave
//! `CacheDelegator`, kubernetes/apiserver `pkg/storage/cacher/delegator.go`).
//!
//! The two facts:
//! - `upstream_reads`: the upstream's progress notifications cannot prove freshness (etcd before
//!   3.4.31 / 3.5.13), so consistent reads are served by upstream range reads instead of by waiting
//!   for the cache (see `design/semantics.md`, "Consistent reads on etcd").
//! - the cache's current revision, for continuations of such reads.
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
    /// The cache reaching the upstream's current revision (a consistent read).
    Fresh,
    /// The cache reaching this revision.
    For(u64),
}

/// How a LIST page is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListPlan {
    /// From the cache, after `wait`: the current state (`at` = `None`) or the state exactly at a
    /// revision, after key `after`.
    Cache {
        wait: Wait,
        at: Option<u64>,
        after: Option<String>,
    },
    /// From upstream range reads at `revision` (`None`: current), after key `after`.
    Upstream {
        revision: Option<u64>,
        after: Option<String>,
    },
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
    upstream_reads: bool,
    cache_rv: u64,
) -> Result<ListPlan, Error> {
    if let Some(token) = token {
        if rv != ResourceVersion::Unset {
            return Err(Error::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (at, last) = continue_token::decode(token)?;
        let after = format!("{prefix}{last}");
        // A first page read from the upstream is at a revision the cache may never reach through
        // events alone: continue there.
        if upstream_reads && cache_rv < at {
            return Ok(ListPlan::Upstream {
                revision: Some(at),
                after: Some(after),
            });
        }
        return Ok(ListPlan::Cache {
            wait: Wait::For(at),
            at: Some(at),
            after: Some(after),
        });
    }
    let cache = |wait, at| {
        Ok(ListPlan::Cache {
            wait,
            at,
            after: None,
        })
    };
    match (rv, rv_match) {
        (ResourceVersion::Unset, None) if upstream_reads => Ok(ListPlan::Upstream {
            revision: None,
            after: None,
        }),
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

/// How a GET is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GetPlan {
    /// From the cache after `Wait`.
    Cache(Wait),
    /// From an upstream read of the key at its current revision.
    Upstream,
}

/// Plans a GET.
pub(crate) fn plan_get(rv: ResourceVersion, upstream_reads: bool) -> GetPlan {
    match rv {
        ResourceVersion::Unset if upstream_reads => GetPlan::Upstream,
        ResourceVersion::Unset => GetPlan::Cache(Wait::Fresh),
        ResourceVersion::Any => GetPlan::Cache(Wait::Nothing),
        ResourceVersion::At(n) => GetPlan::Cache(Wait::For(n)),
    }
}

/// Where a WATCH starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchPlan {
    /// Initial events read from the upstream at its current revision R, then changes after R.
    UpstreamSnapshot,
    /// Changes after the upstream's current revision.
    AfterUpstream,
    /// Initial events from the cache's state once `Wait` is met, then changes.
    Snapshot(Wait),
    /// Changes after the revision the cache reaches once `Wait` is met.
    AfterCache(Wait),
    /// Changes after this revision.
    After(u64),
}

/// Plans a WATCH. `initial` is `sendInitialEvents`; unset, it follows the legacy rule (initial
/// events for resourceVersion unset or `"0"`, none for N).
pub(crate) fn plan_watch(
    rv: ResourceVersion,
    initial: Option<bool>,
    upstream_reads: bool,
) -> WatchPlan {
    let initial = initial.unwrap_or(matches!(rv, ResourceVersion::Unset | ResourceVersion::Any));
    match (rv, initial) {
        (ResourceVersion::Unset, true) if upstream_reads => WatchPlan::UpstreamSnapshot,
        (ResourceVersion::Unset, false) if upstream_reads => WatchPlan::AfterUpstream,
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
        let plan = |rv, m, up| plan_list(rv, m, None, "/p/", up, 10).unwrap();
        let cache = |wait, at| ListPlan::Cache {
            wait,
            at,
            after: None,
        };
        assert_eq!(plan(Unset, None, false), cache(Wait::Fresh, None));
        assert_eq!(
            plan(Unset, None, true),
            ListPlan::Upstream {
                revision: None,
                after: None
            }
        );
        for up in [false, true] {
            assert_eq!(plan(Any, None, up), cache(Wait::Nothing, None));
            assert_eq!(
                plan(Any, Some(RvMatch::NotOlderThan), up),
                cache(Wait::Nothing, None)
            );
            assert_eq!(plan(At(7), None, up), cache(Wait::For(7), None));
            assert_eq!(
                plan(At(7), Some(RvMatch::Exact), up),
                cache(Wait::For(7), Some(7))
            );
        }
        let err = |rv, m| plan_list(rv, m, None, "/p/", false, 10).unwrap_err().code();
        assert_eq!(err(Unset, Some(RvMatch::NotOlderThan)), 400);
        assert_eq!(err(Any, Some(RvMatch::Exact)), 400);
    }

    #[test]
    fn continuations_read_where_their_first_page_was_read() {
        let cont =
            |up, cache_rv| plan_list(Unset, None, Some(&tok(20)), "/p/", up, cache_rv).unwrap();
        let from_cache = ListPlan::Cache {
            wait: Wait::For(20),
            at: Some(20),
            after: Some("/p/ns/a".into()),
        };
        assert_eq!(cont(false, 5), from_cache);
        assert_eq!(cont(true, 20), from_cache, "the cache has reached it");
        assert_eq!(
            cont(true, 19),
            ListPlan::Upstream {
                revision: Some(20),
                after: Some("/p/ns/a".into())
            }
        );
        assert_eq!(
            plan_list(At(3), None, Some("garbage"), "/p/", false, 30)
                .unwrap_err()
                .to_string(),
            "specifying resource version is not allowed when using continue",
            "checked before the token is decoded"
        );
        assert!(
            plan_list(Unset, None, Some("garbage"), "/p/", false, 30)
                .unwrap_err()
                .to_string()
                .starts_with("continue key is not valid")
        );
    }

    #[test]
    fn gets_and_watches() {
        assert_eq!(plan_get(Unset, false), GetPlan::Cache(Wait::Fresh));
        assert_eq!(plan_get(Unset, true), GetPlan::Upstream);
        assert_eq!(plan_get(Any, true), GetPlan::Cache(Wait::Nothing));
        assert_eq!(plan_get(At(4), true), GetPlan::Cache(Wait::For(4)));

        use WatchPlan::*;
        let cases = [
            (Unset, None, false, Snapshot(Wait::Fresh)),
            (Unset, None, true, UpstreamSnapshot),
            (Unset, Some(false), false, AfterCache(Wait::Fresh)),
            (Unset, Some(false), true, AfterUpstream),
            (Any, None, true, Snapshot(Wait::Nothing)),
            (Any, Some(false), false, AfterCache(Wait::Nothing)),
            (At(9), None, true, After(9)),
            (At(9), Some(true), true, Snapshot(Wait::For(9))),
        ];
        for (rv, initial, up, want) in cases {
            assert_eq!(plan_watch(rv, initial, up), want, "{rv:?} {initial:?} {up}");
        }
    }
}
