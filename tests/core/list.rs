//! LIST and GET behaviour: index answers, paging consistent at the list revision, the
//! resourceVersion table, and typed errors.

use crate::support;

use std::time::Duration;

use support::*;
use watchcache::{
    Cache, CacheConfig, Error, HistoryConfig, ListOptions, MemorySource, ResourceDef,
    ResourceVersion, RvMatch, Selection,
};

fn names(items: &[watchcache::Object]) -> Vec<String> {
    items.iter().map(|o| o.name().to_owned()).collect()
}

fn seeded(n: usize) -> (Cache, MemorySource) {
    let (cache, src) = pods(CacheConfig::default().too_large_wait(Duration::from_millis(50)));
    for i in 0..n {
        let app = if i % 3 == 0 { "web" } else { "db" };
        src.put(
            &key("ns", &format!("p{i:03}")),
            pod(
                "ns",
                &format!("p{i:03}"),
                &format!("n{}", i % 4),
                &[("app", app)],
            ),
        )
        .unwrap();
    }
    (cache, src)
}

#[tokio::test]
async fn lists_by_index_with_the_rest_of_the_predicate_on_candidates() {
    let (cache, _src) = seeded(40);
    let sel = Selection::parse(
        None,
        "spec.nodeName=n1,status.phase=Running,metadata.name!=p001",
        "app=db",
    )
    .unwrap();
    let list = cache.list(&ListOptions::all().select(sel)).await.unwrap();
    let want: Vec<String> = (0..40)
        .filter(|i| i % 4 == 1 && i % 3 != 0 && *i != 1)
        .map(|i| format!("p{i:03}"))
        .collect();
    assert_eq!(names(&list.items), want);
    assert_eq!(list.resource_version, cache.resource_version());
    // An unindexed field path works too, by evaluation...
    let sel = Selection::all()
        .with_fields("spec.nodeName=n2,spec.restartPolicy!=Never")
        .unwrap();
    assert_eq!(
        cache
            .list(&ListOptions::all().select(sel))
            .await
            .unwrap()
            .items
            .len(),
        10
    );
    // ...when kube-apiserver accepts it as a field selector for the kind; else 400, upstream's.
    let sel = Selection::all()
        .with_fields("spec.nodeName=n2,apiVersion=v1")
        .unwrap();
    let err = cache
        .list(&ListOptions::all().select(sel))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 400);
    assert_eq!(err.to_string(), "field label not supported: apiVersion");
    assert_eq!(names(&cache.lookup("label:app", "web").unwrap()).len(), 14);
    let err = cache.lookup("spec.schedulerName", "x").unwrap_err();
    assert_eq!(err.code(), 400);
    assert!(
        err.to_string()
            .contains("indexes are: metadata.namespace, spec.nodeName"),
        "{err}"
    );
}

#[tokio::test]
async fn pages_stay_consistent_at_the_first_pages_revision() {
    let (cache, src) = seeded(30);
    for sel in [
        Selection::all(),
        Selection::all().with_fields("spec.nodeName=n0").unwrap(),
    ] {
        let first = cache
            .list(&ListOptions::all().select(sel.clone()).limit(4))
            .await
            .unwrap();
        let rv = first.resource_version;
        let expected = cache
            .list(&ListOptions::all().select(sel.clone()))
            .await
            .unwrap();
        // Change things behind the pager: delete a later item, add one, move one.
        src.delete(&key("ns", "p020")).unwrap();
        src.put(&key("ns", "p0205"), pod("ns", "p0205", "n0", &[]))
            .unwrap();
        src.put(&key("ns", "p024"), pod("ns", "p024", "n3", &[]))
            .unwrap();
        let mut items = first.items.clone();
        let mut token = first.continue_token.clone();
        while let Some(t) = token {
            let page = cache
                .list(
                    &ListOptions::all()
                        .select(sel.clone())
                        .limit(4)
                        .continue_from(t),
                )
                .await
                .unwrap();
            assert_eq!(page.resource_version, rv);
            assert!(page.items.len() <= 4);
            items.extend(page.items);
            token = page.continue_token;
        }
        assert_eq!(
            names(&items),
            names(&expected.items),
            "paged == unpaged at the same revision"
        );
        // Put things back for the next round.
        src.put(
            &key("ns", "p020"),
            pod("ns", "p020", "n0", &[("app", "web")]),
        )
        .unwrap();
        src.delete(&key("ns", "p0205")).unwrap();
        src.put(
            &key("ns", "p024"),
            pod("ns", "p024", "n0", &[("app", "web")]),
        )
        .unwrap();
    }
    let page = cache.list(&ListOptions::all().limit(25)).await.unwrap();
    assert_eq!(page.items.len(), 25);
    assert!(page.continue_token.is_some());
}

#[tokio::test]
async fn resource_version_semantics_follow_upstream() {
    let (cache, src) = seeded(5);
    let rv_before = cache.resource_version();
    src.delete(&key("ns", "p000")).unwrap();
    // Exact: the state at that revision.
    let exact = cache
        .list(&ListOptions::all().at(ResourceVersion::At(rv_before), Some(RvMatch::Exact)))
        .await
        .unwrap();
    assert_eq!((exact.items.len(), exact.resource_version), (5, rv_before));
    // NotOlderThan and "0": the current state.
    let not_older = cache
        .list(&ListOptions::all().at(ResourceVersion::At(rv_before), Some(RvMatch::NotOlderThan)))
        .await
        .unwrap();
    assert_eq!(not_older.items.len(), 4);
    assert_eq!(
        cache
            .list(&ListOptions::all().at(ResourceVersion::Any, None))
            .await
            .unwrap()
            .items
            .len(),
        4
    );
    // Too large: 504 after the wait, with Retry-After 1 s.
    let future = cache.resource_version() + 5;
    let err = cache
        .list(&ListOptions::all().at(ResourceVersion::At(future), None))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::TooLargeResourceVersion {
            requested: future,
            current: cache.resource_version()
        }
    );
    assert_eq!(
        (err.code(), err.retry_after()),
        (504, Some(Duration::from_secs(1)))
    );
    // ...but a write that arrives during the wait satisfies it.
    let waiter = {
        let cache = cache.clone();
        let want = cache.resource_version() + 1;
        tokio::spawn(async move {
            cache
                .list(&ListOptions::all().at(ResourceVersion::At(want), None))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    src.put(&key("ns", "late"), pod("ns", "late", "n", &[]))
        .unwrap();
    assert_eq!(waiter.await.unwrap().unwrap().items.len(), 5);
    // Invalid combinations are 400s naming the problem.
    let bad = [
        (
            ListOptions::all().at(ResourceVersion::Unset, Some(RvMatch::Exact)),
            "forbidden unless resourceVersion",
        ),
        (
            ListOptions::all().at(ResourceVersion::Any, Some(RvMatch::Exact)),
            "forbidden for resourceVersion \"0\"",
        ),
        (
            ListOptions::all()
                .at(ResourceVersion::At(3), None)
                .continue_from("x"),
            "not allowed when using continue",
        ),
        (
            ListOptions::all().continue_from("garbage!"),
            "continue key is not valid",
        ),
    ];
    for (opts, msg) in bad {
        let e = cache.list(&opts).await.unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(e.to_string().contains(msg), "{e}");
    }
}

#[tokio::test]
async fn a_continue_token_older_than_the_window_is_expired() {
    let mut def = ResourceDef::builtin("pods").unwrap();
    def.history = HistoryConfig {
        min_events: 4,
        max_events: 4,
        window: Duration::from_secs(75),
        max_bytes: None,
    };
    let (cache, writer) = Cache::new(def, CacheConfig::default());
    let src = MemorySource::new(writer, 1, []);
    for i in 0..6 {
        src.put(
            &key("ns", &format!("p{i}")),
            pod("ns", &format!("p{i}"), "n", &[]),
        )
        .unwrap();
    }
    let first = cache.list(&ListOptions::all().limit(2)).await.unwrap();
    for i in 0..6 {
        src.put(
            &key("ns", "churn"),
            pod("ns", "churn", &format!("n{i}"), &[]),
        )
        .unwrap();
    }
    let err = cache
        .list(
            &ListOptions::all()
                .limit(2)
                .continue_from(first.continue_token.unwrap()),
        )
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.reason()), (410, "Expired"));
    assert!(
        err.to_string()
            .starts_with("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response"),
        "upstream's words: {err}"
    );
    // As upstream: a token that continues after the same key (p1) at the latest revision, which
    // gives the rest of the list as it is now (`churn` sorts before p1).
    let Error::ContinueExpired { continue_token, .. } = err else {
        panic!("{err:?}")
    };
    let rest = cache
        .list(&ListOptions::all().continue_from(continue_token))
        .await
        .unwrap();
    let names: Vec<&str> = rest.items.iter().map(|o| o.name()).collect();
    assert_eq!(names, ["p2", "p3", "p4", "p5"]);
    assert!(rest.resource_version > first.resource_version);
    let exact = cache
        .list(&ListOptions::all().at(
            ResourceVersion::At(first.resource_version),
            Some(RvMatch::Exact),
        ))
        .await;
    assert!(matches!(exact, Err(Error::Expired { .. })));
}

#[tokio::test]
async fn get_and_readiness() {
    let (cache, writer) = Cache::new(
        ResourceDef::builtin("pods").unwrap(),
        CacheConfig::default(),
    );
    let err = cache.list(&ListOptions::all()).await.unwrap_err();
    assert_eq!((err.code(), err.reason()), (429, "TooManyRequests"));
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    let src = MemorySource::new(
        writer,
        7,
        [(key("ns", "a"), pod("ns", "a", "n", &[]).into())],
    );
    let a = cache
        .get(Some("ns"), "a", ResourceVersion::Unset)
        .await
        .unwrap();
    assert_eq!((a.resource_version(), a.namespace()), (7, Some("ns")));
    let e = cache
        .get(Some("ns"), "zz", ResourceVersion::Any)
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.to_string()),
        (404, "pods \"zz\" not found".to_owned())
    );
    src.writer().set_not_ready("etcd unavailable");
    assert!(
        cache
            .get(Some("ns"), "a", ResourceVersion::Any)
            .await
            .unwrap_err()
            .to_string()
            .contains("etcd unavailable")
    );
    src.writer().set_ready();
    src.put(&key("ns", "b"), pod("ns", "b", "n", &[])).unwrap();
    assert_eq!(
        cache.list(&ListOptions::all()).await.unwrap().items.len(),
        2
    );
}

#[tokio::test]
async fn list_json_is_a_kubernetes_list_built_from_shared_bytes() {
    let (cache, _src) = seeded(3);
    let full = cache.list(&ListOptions::all().limit(2)).await.unwrap();
    assert_eq!(
        full.remaining_item_count, None,
        "unknown after a scan that stopped early"
    );
    let db = Selection::all().with_labels("app=db").unwrap();
    let list = cache
        .list(&ListOptions::all().select(db).limit(1))
        .await
        .unwrap();
    let parts = watchcache::list_parts(cache.definition(), &list);
    assert_eq!(parts[1].as_ptr(), list.items[0].json().as_ptr());
    let body: Vec<u8> = parts.concat();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["kind"], "PodList");
    assert_eq!(v["apiVersion"], "v1");
    assert_eq!(
        v["metadata"]["resourceVersion"],
        list.resource_version.to_string()
    );
    assert_eq!(v["metadata"]["remainingItemCount"], 1);
    assert!(v["metadata"]["continue"].is_string());
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
}
