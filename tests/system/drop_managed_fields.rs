//! `Accept: ...;drop=metadata.managedFields` (KEP-5958) over HTTP, on a memory-fed server holding
//! what kube-apiserver 1.35 stored (tests/data/kube-apiserver-1.35): GET, LIST, WATCH (both
//! transports) and WatchList, in JSON and protobuf, PartialObjectMetadata, a custom resource, and
//! unknown `drop=` targets. The answers are compared with kube-apiserver's own answers with
//! `managedFields` cut out by this file's own code (text for JSON, a protobuf walk for protobuf),
//! and each event is shown to be converted once whatever the number of watchers.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::{Client, StatusCode};
use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef};
use watchcache_server::{Served, Server, ServerConfig};

/// What kube-apiserver 1.35 wrote to etcd, and its answers.
fn dir() -> std::path::PathBuf {
    support::repo().join("tests/data/kube-apiserver-1.35")
}
const JSON_DROP: &str = "application/json;drop=metadata.managedFields";
const PB: &str = "application/vnd.kubernetes.protobuf";
const PB_DROP: &str = "application/vnd.kubernetes.protobuf;drop=metadata.managedFields";
const POD_KEY: &str = "/registry/pods/demo/pod1";

use crate::support;
use crate::support::cut;
use cut::{cut_json, cut_protobuf, fields};

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap()
}

struct Fixture {
    url: String,
    pods: MemorySource,
    widgets: MemorySource,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server over pods and widgets; the pods' source is at revision 276, so the vector's pod
/// (written by kube-apiserver at 277) is served at its own resourceVersion when put first.
async fn serve() -> Fixture {
    let cache = |r: &str| Cache::new(ResourceDef::builtin(r).unwrap(), CacheConfig::default());
    let ((pods, pods_writer), (widgets, widgets_writer)) =
        (cache("pods"), cache("widgets.example.com"));
    let pods_src = MemorySource::new(pods_writer, 276, []);
    let widgets_src = MemorySource::new(widgets_writer, 1, []);
    let server = Server::new(
        ServerConfig::default(),
        [Served::new(pods), Served::new(widgets)],
    );
    let (url, stop) = crate::support::server::serve_http(server).await;
    Fixture {
        url,
        pods: pods_src,
        widgets: widgets_src,
        _stop: stop,
    }
}

async fn get(c: &Client, url: &str, accept: &str) -> (StatusCode, Vec<u8>) {
    let r = c.get(url).header("Accept", accept).send().await.unwrap();
    (r.status(), r.bytes().await.unwrap().to_vec())
}

/// The next `n` watch events of a JSON stream (one per line).
async fn json_events(
    stream: &mut (impl StreamExt<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    n: usize,
) -> Vec<String> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event in time")
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            out.push(String::from_utf8(line[..line.len() - 1].to_vec()).unwrap());
        }
    }
    out
}

/// The next `n` protobuf watch frames (4-byte length, then a `WatchEvent`): each event's type and
/// object envelope.
async fn pb_events(
    stream: &mut (impl StreamExt<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    n: usize,
) -> Vec<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        while buf.len() >= 4 {
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let frame: Vec<u8> = buf.drain(..4 + len).collect();
            let ev = fields(&frame[4..]);
            let kind = String::from_utf8(ev[0].2.to_vec()).unwrap();
            // object = 2: RawExtension {raw = 1}.
            let raw = fields(ev[1].2)[0].2.to_vec();
            out.push((kind, raw));
        }
        if out.len() >= n {
            break;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event in time")
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
    }
    out
}

fn object_of(event_line: &str) -> String {
    // `{"type":"ADDED","object":` ... `}`
    let at = event_line.find(",\"object\":").unwrap() + ",\"object\":".len();
    event_line[at..event_line.len() - 1].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_list_watch_and_watchlist_leave_managed_fields_out() {
    let f = serve().await;
    let c = Client::new();
    let pod_json = String::from_utf8(read("pods.json")).unwrap();
    let pod_json = pod_json.trim_end();
    let pod_pb = read("pods.pb");
    assert!(
        pod_json.contains("\"managedFields\":["),
        "the vector has managed fields"
    );
    let want_json = cut_json(pod_json);
    let want_pb = cut_protobuf(&pod_pb);
    assert!(want_json.len() < pod_json.len() && want_pb.len() < pod_pb.len());

    // Watches opened before the pod exists, on the fast path (first request of a connection).
    let watch_url = format!(
        "{}/api/v1/namespaces/demo/pods?watch=1&resourceVersion=276",
        f.url
    );
    let mut json_watch = Client::new()
        .get(&watch_url)
        .header("Accept", JSON_DROP)
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let mut pb_watch = Client::new()
        .get(&watch_url)
        .header("Accept", PB_DROP)
        .send()
        .await
        .unwrap()
        .bytes_stream();
    assert_eq!(f.pods.put(POD_KEY, read("pods.etcd.bin")).unwrap(), 277);

    let pod_url = format!("{}/api/v1/namespaces/demo/pods/pod1", f.url);
    // GET: kube-apiserver's bytes without the member, and without ObjectMeta's field 17.
    let (code, body) = get(&c, &pod_url, JSON_DROP).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(String::from_utf8(body).unwrap().trim_end(), want_json);
    assert_eq!(
        get(&c, &pod_url, PB_DROP).await,
        (StatusCode::OK, want_pb.clone())
    );
    // Without the parameter, or with targets this server does not know: everything (not 406).
    assert_eq!(get(&c, &pod_url, PB).await.1, pod_pb);
    for accept in [
        "application/json",
        "application/json;drop=spec.someFutureField",
        "application/json;drop=",
    ] {
        let (code, body) = get(&c, &pod_url, accept).await;
        assert_eq!(code, StatusCode::OK, "{accept}");
        let body = String::from_utf8(body).unwrap_or_default();
        assert_eq!(body.trim_end(), pod_json, "{accept}");
    }
    // Only the chosen range's parameter counts.
    let accept = "application/vnd.kubernetes.protobuf;q=0.5,application/json;drop=metadata.managedFields;q=0.4";
    assert_eq!(get(&c, &pod_url, accept).await.1, pod_pb);
    // `+` joins targets: the known one counts.
    let (_, body) = get(
        &c,
        &pod_url,
        "application/json;drop=spec.x+metadata.managedFields",
    )
    .await;
    assert_eq!(String::from_utf8(body).unwrap().trim_end(), want_json);

    // LIST: the full list with the member cut out of each item.
    let list_url = format!("{}/api/v1/namespaces/demo/pods", f.url);
    let (_, full) = get(&c, &list_url, "application/json").await;
    let (code, dropped) = get(&c, &list_url, JSON_DROP).await;
    assert_eq!(code, StatusCode::OK);
    let full = String::from_utf8(full).unwrap();
    assert!(full.contains("managedFields"));
    assert_eq!(String::from_utf8(dropped).unwrap(), cut_json(&full));
    let (_, pb_full) = get(&c, &list_url, PB).await;
    let (_, pb_list) = get(&c, &list_url, PB_DROP).await;
    let item = |env: &[u8]| {
        fields(&env[4..])
            .into_iter()
            .find(|(n, _, _)| *n == 2)
            .unwrap()
            .2
            .to_vec()
    };
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(contains(&pb_full, &item(&pod_pb)));
    assert!(
        contains(&pb_list, &item(&want_pb)),
        "the item without field 17"
    );
    assert!(!contains(&pb_list, &item(&pod_pb)));
    assert_eq!(pb_full.len() - pb_list.len(), pod_pb.len() - want_pb.len());

    // PartialObjectMetadata without managed fields, JSON and protobuf.
    let (_, meta) = get(
        &c,
        &pod_url,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    let (_, meta_drop) = get(
        &c,
        &pod_url,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;drop=metadata.managedFields",
    )
    .await;
    let meta = String::from_utf8(meta).unwrap();
    assert!(meta.contains("managedFields"));
    assert_eq!(String::from_utf8(meta_drop).unwrap(), cut_json(&meta));
    let (_, pmeta) = get(
        &c,
        &pod_url,
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    let (_, pmeta_drop) = get(&c, &pod_url, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;drop=metadata.managedFields").await;
    assert_eq!(pmeta_drop, cut_protobuf(&pmeta));
    assert!(pmeta_drop.len() < pmeta.len());

    // The fast path's watches.
    let ev = json_events(&mut json_watch, 1).await;
    assert!(
        ev[0].starts_with(r#"{"type":"ADDED","object":"#),
        "{}",
        ev[0]
    );
    assert_eq!(object_of(&ev[0]), want_json);
    let ev = pb_events(&mut pb_watch, 1).await;
    assert_eq!(ev[0], ("ADDED".to_owned(), want_pb.clone()));

    // hyper's: a watch after another request on the same connection, and a WatchList.
    let (_, _) = get(&c, &pod_url, "application/json").await;
    let mut hyper_watch = c
        .get(format!("{watch_url}&timeoutSeconds=30"))
        .header("Accept", JSON_DROP)
        .send()
        .await
        .unwrap()
        .bytes_stream();
    assert_eq!(
        object_of(&json_events(&mut hyper_watch, 1).await[0]),
        want_json
    );
    let mut watch_list = c
        .get(format!(
            "{list_url}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
        ))
        .header("Accept", PB_DROP)
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let initial = pb_events(&mut watch_list, 2).await;
    assert_eq!(initial[0], ("ADDED".to_owned(), want_pb.clone()));
    assert_eq!(initial[1].0, "BOOKMARK");

    // A deletion: its last state at the deletion's revision, without managed fields.
    let rv = f.pods.delete(POD_KEY).unwrap();
    let ev = json_events(&mut json_watch, 1).await;
    let deleted = object_of(&ev[0]);
    assert!(ev[0].starts_with(r#"{"type":"DELETED""#));
    assert_eq!(
        deleted,
        want_json.replace(
            "\"resourceVersion\":\"277\"",
            &format!("\"resourceVersion\":\"{rv}\"")
        )
    );
    let ev = pb_events(&mut pb_watch, 1).await;
    assert_eq!(ev[0].0, "DELETED");
    assert!(!contains(&ev[0].1, b"FieldsV1"), "no managed fields entry");

    // A custom resource (stored as JSON): the member is cut as well.
    let widget = r#"{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"creationTimestamp":"2026-01-02T03:04:05Z","managedFields":[{"apiVersion":"example.com/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:size":{}}},"manager":"kubectl","operation":"Update","time":"2026-01-02T03:04:05Z"}],"name":"w1","namespace":"demo","uid":"u1"},"spec":{"size":3}}"#;
    f.widgets
        .put("/registry/example.com/widgets/demo/w1", widget)
        .unwrap();
    let w_url = format!(
        "{}/apis/example.com/v1alpha1/namespaces/demo/widgets/w1",
        f.url
    );
    let (_, full) = get(&c, &w_url, "application/json").await;
    let (code, dropped) = get(&c, &w_url, JSON_DROP).await;
    assert_eq!(code, StatusCode::OK);
    let full = String::from_utf8(full).unwrap();
    assert!(full.contains("managedFields"));
    assert_eq!(String::from_utf8(dropped).unwrap(), cut_json(&full));
}

/// The value of one sample of `/metrics` (`name` with all of `labels`), 0 when absent.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_is_converted_once_per_format_for_any_number_of_watchers() {
    const W: usize = 20;
    const K: usize = 5;
    let f = serve().await;
    let c = Client::new();
    let base = format!(
        "{}/api/v1/namespaces/demo/pods?watch=1&resourceVersion=276",
        f.url
    );
    let mut json = Vec::new();
    let mut pb = Vec::new();
    for i in 0..W {
        // Half on the fast path, half through hyper (a client that already made a request).
        let client = if i % 2 == 0 { Client::new() } else { c.clone() };
        if i == 1 {
            get(&c, &format!("{}/api/v1/pods", f.url), "application/json").await;
        }
        let accept = if i < W / 2 { JSON_DROP } else { PB_DROP };
        let s = client
            .get(&base)
            .header("Accept", accept)
            .send()
            .await
            .unwrap()
            .bytes_stream();
        if i < W / 2 { json.push(s) } else { pb.push(s) }
    }
    // The vector pod, then K - 1 more pods made from it (its name, the first "pod1" of the
    // stored value, renamed in place: same length, so the value stays well-formed).
    let stored = read("pods.etcd.bin");
    for i in 0..K {
        let mut v = stored.clone();
        if i > 0 {
            let at = v.windows(4).position(|w| w == b"pod1").unwrap();
            v[at + 3] = b'1' + i as u8;
            f.pods
                .put(&format!("/registry/pods/demo/pod{}", i + 1), v)
                .unwrap();
        } else {
            f.pods.put(POD_KEY, v).unwrap();
        }
    }
    for s in &mut json {
        let evs = json_events(s, K).await;
        assert!(evs.iter().all(|e| !e.contains("managedFields")));
    }
    for s in &mut pb {
        let evs = pb_events(s, K).await;
        assert!(
            evs.iter()
                .all(|(_, o)| !o.windows(8).any(|w| w == b"FieldsV1"))
        );
    }
    let text = c
        .get(format!("{}/metrics", f.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for format in ["json", "protobuf"] {
        assert_eq!(
            sample(
                &text,
                "watchcache_watch_conversions_total",
                &[
                    ("resource", "pods"),
                    ("format", format),
                    ("fields", "without-managed-fields")
                ]
            ),
            K as f64,
            "{format}: one conversion per event for {} watchers\n{text}",
            W / 2
        );
    }
    assert_eq!(
        sample(&text, "apiserver_watch_events_total", &[("kind", "Pod")]),
        (W * K) as f64
    );
}
