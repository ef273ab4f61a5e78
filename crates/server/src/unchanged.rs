//! No response mutates what the cache shares (issue 39, item 7; openyurt#2481, where response
//! filters edited cached objects in place): a property test over random sequences of requests,
//! every variant of every verb, against one server.
//!
//! Each request (LIST, paged LIST, GET of a protobuf-stored and of a JSON-stored pod, WATCH
//! replaying creations, updates and a deletion) is asked in JSON, protobuf, Table,
//! PartialObjectMetadata and `drop=metadata.managedFields` (JSON and protobuf), with and without
//! `Accept-Encoding: gzip`. Two things must hold after any sequence, in any order, with repeats:
//! - every answer equals that request's answer from a fresh server (so no earlier response left
//!   anything behind: not in an object's lazily made encodings, an event's shared DELETED
//!   encodings, nor the conversion memo that watchers of one format share);
//! - the served cache's objects and events are byte-identical to those of a twin cache fed the
//!   same changes and never served: stored bytes, JSON, protobuf (envelope, list item, watch
//!   frames) and each event's shared frames. The twin, not the served cache read beforehand, is
//!   the reference, because reading an encoding first would make it before any response could.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use proptest::test_runner::{Config, TestRunner};

use crate::{Served, Server, ServerConfig};
use watchcache::{Cache, CacheConfig, ListOptions, MemorySource, ResourceDef, WatchOptions};
use watchcache::{ResourceVersion, Selection};

/// kube-apiserver 1.35's own pod, as it stored it (protobuf, managedFields), at revision 277.
const VECTOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/kube-apiserver-1.35/pods.etcd.bin"
);
const START: u64 = 276;
/// The changes [`feed`] makes after [`START`]: one watch event each.
const EVENTS: usize = 6;

/// A JSON pod with managedFields, labels and strings that need escaping.
fn json_pod(name: &str, image: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "demo",
            "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"app": "web", "tier": "a\"b"},
            "annotations": {"note": "é \\ \u{1F600} </script>"},
            "managedFields": [{
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "2026-01-02T03:04:05Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}},
            }],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": image}]},
        "status": {"phase": "Running"},
    })
    .to_string()
}

/// A cache of pods fed the same changes every time: kube-apiserver's pod, two JSON pods, an
/// update of each kind of stored form, and a deletion.
fn feed() -> (Cache, MemorySource) {
    let (cache, writer) = Cache::new(
        ResourceDef::builtin("pods").unwrap(),
        CacheConfig::default(),
    );
    let src = MemorySource::new(writer, START, []);
    let vector = std::fs::read(VECTOR).unwrap();
    let key = |n: &str| format!("/registry/pods/demo/{n}");
    src.put(&key("pod1"), vector.clone()).unwrap();
    src.put(&key("j1"), json_pod("j1", "v1")).unwrap();
    src.put(&key("j2"), json_pod("j2", "v1")).unwrap();
    src.put(&key("j1"), json_pod("j1", "v2")).unwrap();
    src.delete(&key("j2")).unwrap();
    src.put(&key("pod1"), vector).unwrap();
    assert_eq!(src.revision(), START + EVENTS as u64);
    (cache, src)
}

/// A server over a fresh [`feed`]: its URL, its cache, and what keeps it running.
async fn serve() -> (
    String,
    Cache,
    MemorySource,
    tokio::sync::oneshot::Sender<()>,
) {
    let (cache, src) = feed();
    let server = Server::new(ServerConfig::default(), [Served::new(cache.clone())]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(listener, async {
        stopped.await.ok();
    }));
    (url, cache, src, stop)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    List,
    PagedList,
    GetProtobufStored,
    GetJsonStored,
    Watch,
}

const VERBS: [Verb; 5] = [
    Verb::List,
    Verb::PagedList,
    Verb::GetProtobufStored,
    Verb::GetJsonStored,
    Verb::Watch,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Json,
    Protobuf,
    Table,
    Metadata,
    JsonDrop,
    ProtobufDrop,
}

const VARIANTS: [Variant; 6] = [
    Variant::Json,
    Variant::Protobuf,
    Variant::Table,
    Variant::Metadata,
    Variant::JsonDrop,
    Variant::ProtobufDrop,
];

/// One request: what, in which form, gzipped or not.
#[derive(Debug, Clone, Copy)]
struct Ask {
    verb: Verb,
    variant: Variant,
    gzip: bool,
}

fn asks() -> Vec<Ask> {
    let mut out = Vec::new();
    for verb in VERBS {
        for variant in VARIANTS {
            for gzip in [false, true] {
                out.push(Ask {
                    verb,
                    variant,
                    gzip,
                });
            }
        }
    }
    out
}

impl Ask {
    fn path(&self) -> String {
        let pods = "/api/v1/namespaces/demo/pods";
        match self.verb {
            Verb::List => pods.to_owned(),
            Verb::PagedList => format!("{pods}?limit=1&resourceVersion=0"),
            Verb::GetProtobufStored => format!("{pods}/pod1"),
            Verb::GetJsonStored => format!("{pods}/j1"),
            Verb::Watch => format!("{pods}?watch=1&resourceVersion={START}"),
        }
    }

    fn accept(&self) -> &'static str {
        let list = matches!(self.verb, Verb::List | Verb::PagedList);
        match self.variant {
            Variant::Json => "application/json",
            Variant::Protobuf => "application/vnd.kubernetes.protobuf",
            Variant::Table => "application/json;as=Table;v=v1;g=meta.k8s.io",
            Variant::Metadata if list => {
                "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
            }
            Variant::Metadata => "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
            Variant::JsonDrop => "application/json;drop=metadata.managedFields",
            Variant::ProtobufDrop => {
                "application/vnd.kubernetes.protobuf;drop=metadata.managedFields"
            }
        }
    }

    fn protobuf(&self) -> bool {
        matches!(self.variant, Variant::Protobuf | Variant::ProtobufDrop)
    }
}

/// What a response was: status, content type and encoding, and its body decompressed (a
/// watch's: its first [`EVENTS`] events).
#[derive(Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    content_type: String,
    content_encoding: String,
    body: Vec<u8>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Text where it is text (protobuf shows as escapes): a difference is found by eye.
        f.debug_struct("Answer")
            .field("status", &self.status)
            .field("content_type", &self.content_type)
            .field("content_encoding", &self.content_encoding)
            .field("body", &self.body.escape_ascii().to_string())
            .finish()
    }
}

/// Complete watch events in `body`: JSON lines, or length-prefixed protobuf frames.
fn events_in(body: &[u8], protobuf: bool) -> usize {
    if !protobuf {
        return body.iter().filter(|b| **b == b'\n').count();
    }
    let (mut n, mut at) = (0, 0);
    while let Some(len) = body.get(at..at + 4) {
        let len = u32::from_be_bytes(len.try_into().unwrap()) as usize;
        if body.len() < at + 4 + len {
            break;
        }
        at += 4 + len;
        n += 1;
    }
    n
}

async fn ask(client: &reqwest::Client, url: &str, a: Ask) -> Answer {
    use std::io::Write;
    let mut req = client
        .get(format!("{url}{}", a.path()))
        .header("Accept", a.accept());
    if a.gzip {
        req = req.header("Accept-Encoding", "gzip");
    }
    let resp = req.send().await.unwrap();
    let header = |h: &str| {
        resp.headers()
            .get(h)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (status, content_type, content_encoding) = (
        resp.status().as_u16(),
        header("content-type"),
        header("content-encoding"),
    );
    let gzipped = content_encoding == "gzip";
    let mut raw = flate2::write::GzDecoder::new(Vec::new());
    let mut plain = Vec::new();
    let mut stream = resp.bytes_stream();
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            let body = if gzipped {
                raw.write_all(&chunk).unwrap();
                raw.flush().unwrap();
                raw.get_ref()
            } else {
                plain.extend_from_slice(&chunk);
                &plain
            };
            if a.verb == Verb::Watch && events_in(body, a.protobuf()) >= EVENTS {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| panic!("{a:?}: the answer in time"));
    let body = match (gzipped, a.verb) {
        // A watch's gzip stream never ends: what it decompressed to so far.
        (true, Verb::Watch) => raw.get_ref().clone(),
        (true, _) => raw.finish().unwrap_or_else(|e| panic!("{a:?}: {e}")),
        (false, _) => plain,
    };
    if a.verb == Verb::Watch {
        assert_eq!(events_in(&body, a.protobuf()), EVENTS, "{a:?}");
    }
    Answer {
        status,
        content_type,
        content_encoding,
        body,
    }
}

/// Everything the cache shares between responses, as bytes: each object's stored form and
/// encodings, and each history event's frames (the DELETED one's made once for every watcher).
async fn shared(cache: &Cache) -> Vec<(String, u64, Vec<Bytes>)> {
    let mut out = Vec::new();
    let list = cache.list(&ListOptions::all()).await.unwrap();
    for o in &list.items {
        // The watch frames of ADDED and MODIFIED objects are read through the events below.
        let enc = vec![
            o.protobuf().cloned().unwrap_or_default(),
            o.json().clone(),
            o.json_at(o.resource_version() + 1),
            o.protobuf_wire().unwrap().clone(),
            o.protobuf_item().unwrap(),
        ];
        out.push((o.key().to_owned(), o.resource_version(), enc));
    }
    let mut w = cache
        .watch(WatchOptions::new(
            Selection::all(),
            ResourceVersion::At(START),
        ))
        .await
        .unwrap();
    for _ in 0..EVENTS {
        let ev = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        use watchcache::wire::{Encoder, JsonFrames, ProtobufFrames};
        let mut enc: Vec<Bytes> = JsonFrames.frame(&ev).unwrap().parts().to_vec();
        enc.extend(ProtobufFrames.frame(&ev).unwrap().parts().iter().cloned());
        let key = ev.object().map(|o| o.key().to_owned()).unwrap_or_default();
        out.push((format!("{:?} {key}", ev.kind()), ev.resource_version(), enc));
    }
    out
}

#[test]
fn no_response_changes_what_the_cache_shares() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let asks = asks();
    // Each request's answer from a server that answered nothing before, and the twin's bytes.
    let (fresh, twin) = rt.block_on(async {
        let client = reqwest::Client::new();
        let mut fresh = Vec::new();
        for a in &asks {
            let (url, _cache, _src, _stop) = serve().await;
            let answer = ask(&client, &url, *a).await;
            assert_eq!(
                answer.status,
                200,
                "{a:?}: {:?}",
                String::from_utf8_lossy(&answer.body)
            );
            assert_eq!(
                answer.content_encoding == "gzip",
                a.gzip,
                "{a:?}: gzip as asked"
            );
            fresh.push(answer);
        }
        let (twin, _src) = feed();
        (fresh, shared(&twin).await)
    });
    // The variants differ (drop removes managedFields, Table and metadata are other types), so
    // a response mixed up with another's would show.
    let json = |v: Variant| {
        asks.iter()
            .position(|a| a.verb == Verb::GetJsonStored && a.variant == v && !a.gzip)
            .map(|i| fresh[i].body.clone())
    };
    let forms: std::collections::HashSet<_> = VARIANTS.map(json).into_iter().collect();
    assert_eq!(forms.len(), VARIANTS.len());
    assert!(
        json(Variant::Json)
            .unwrap()
            .windows(13)
            .any(|w| w == b"managedFields")
    );

    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        ..Config::default()
    });
    let sequences = proptest::collection::vec(0..asks.len(), 1..48);
    runner
        .run(&sequences, |seq| {
            rt.block_on(async {
                let (url, cache, _src, _stop) = serve().await;
                let client = reqwest::Client::new();
                for &i in &seq {
                    let got = ask(&client, &url, asks[i]).await;
                    assert_eq!(got, fresh[i], "{:?} after {seq:?}", asks[i]);
                }
                assert_eq!(shared(&cache).await, twin, "after {seq:?}");
            });
            Ok(())
        })
        .unwrap();
}
