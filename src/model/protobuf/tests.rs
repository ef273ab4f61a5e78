//! Every upstream vector (tests/data/kubernetes-protobuf, made by Kubernetes 1.35's own
//! serializers) decoded and compared with the JSON kube-apiserver returns for it.

use super::*;

pub(crate) const VECTORS: &[&str] = &[
    "pod",
    "node",
    "namespace",
    "service",
    "endpointslice",
    "lease",
    "event",
    "configmap",
    "secret",
    "zero-pod",
];

pub(crate) fn vector(name: &str) -> Vec<u8> {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kubernetes-protobuf/"
    );
    std::fs::read(format!("{dir}{name}")).unwrap()
}

#[test]
fn every_vector_transcodes_to_upstreams_json() {
    for name in VECTORS {
        let value = vector(&format!("{name}.etcd.bin"));
        let env = Envelope::parse(&value).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (json, at, len, fields_at) = env
            .encode_json(12345)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // The list item form: no kind and apiVersion.
        let mut item = b"{".to_vec();
        item.extend_from_slice(&json[fields_at as usize..]);
        let item: serde_json::Value = serde_json::from_slice(&item).unwrap();
        assert!(
            item.get("kind").is_none() && item.get("metadata").is_some(),
            "{name}"
        );
        assert_eq!(&json[at as usize..at as usize + len as usize], b"12345");
        assert!(!json.contains(&b'\n'), "{name}: not compact");
        let got: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let want: serde_json::Value =
            serde_json::from_slice(&vector(&format!("{name}.json"))).unwrap();
        assert_eq!(got, want, "{name}:\n got {got}\nwant {want}");
    }
}

#[test]
fn metadata_and_fields_are_read_from_the_bytes() {
    let value = vector("pod.etcd.bin");
    let env = Envelope::parse(&value).unwrap();
    assert_eq!((env.api_version, env.kind), ("v1", "Pod"));
    let meta = env.meta().unwrap();
    assert_eq!((meta.name, meta.namespace), ("web-7d4b9c-x2k8p", "default"));
    let labels: Vec<_> = meta.labels.iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(
        labels,
        [
            ("app", "web"),
            ("pod-template-hash", "7d4b9c"),
            ("tier", "frontend")
        ]
    );
    let json: serde_json::Value = serde_json::from_slice(&vector("pod.json")).unwrap();
    let raw = serde_json::value::RawValue::from_string(json.to_string()).unwrap();
    for path in [
        "spec.nodeName",
        "status.phase",
        "spec.restartPolicy",
        "spec.priority",
        "spec.enableServiceLinks",
        "spec.terminationGracePeriodSeconds",
        "metadata.generateName",
        "spec.containers",
        "spec.nothing",
        "nothing.at.all",
        "spec.securityContext",
        "status.podIP",
        "metadata.labels.app",
        "status.startTime",
    ] {
        let p = FieldPath::parse(path).unwrap();
        let want = crate::model::field_path::extract(&raw, &p);
        assert_eq!(env.field(&p).unwrap().map(String::from), want, "{path}");
    }
}

#[test]
fn bad_values_are_errors_not_panics() {
    let pod = vector("pod.etcd.bin");
    let mut cases: Vec<(Vec<u8>, &str)> = vec![
        (b"k8s\0".to_vec(), "not a built-in type"),
        (b"k8s\0{\"kind\":\"Widget\"}".to_vec(), "protobuf envelope"),
        (pod[..pod.len() / 2].to_vec(), "truncated"),
    ];
    // An envelope naming an unknown type around a pod's bytes.
    let pod_raw = Envelope::parse(&pod).unwrap().raw;
    cases.push((
        envelope("v1", "Gizmo", pod_raw),
        "\"v1\" \"Gizmo\", not a built-in type",
    ));
    // A JSON custom resource behind the protobuf prefix.
    let cr = br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}"#;
    cases.push((
        envelope("example.com/v1", "Widget", cr),
        "not a built-in type",
    ));
    // ... and JSON where a built-in's message should be.
    cases.push((envelope("v1", "Pod", cr), "v1.Pod"));
    // Right type, wrong message.
    cases.push((envelope("v1", "Pod", &[0x0a, 0x02, 0x0a, 0x05]), "metadata"));
    for (value, want) in &cases {
        let r = Envelope::parse(value).and_then(|e| {
            e.meta()?;
            e.encode_json(1)
        });
        let err = r.expect_err("must fail");
        assert!(err.contains(want), "{err}");
    }
    // Every prefix of every vector, and bytes changed at every position: errors or values, never
    // a panic; and whatever passes validation at ingest must encode to JSON later.
    let mut checked = 0;
    for (name, _, _) in STORED {
        let value = vector(&format!("{name}.etcd.bin"));
        for n in 0..value.len() {
            let mut variants = vec![value[..n].to_vec()];
            for x in [0x01, 0x80, 0xa5, 0xff] {
                let mut v = value.clone();
                v[n] ^= x;
                variants.push(v);
            }
            for v in variants {
                let Ok(env) = Envelope::parse(&v) else {
                    continue;
                };
                if env.meta().is_ok() && env.validate().is_ok() {
                    checked += 1;
                    let (json, _, _, _) = env
                        .encode_json(1)
                        .unwrap_or_else(|e| panic!("{name} at {n}: validated but {e}"));
                    serde_json::from_slice::<serde_json::Value>(&json)
                        .unwrap_or_else(|e| panic!("{name} at {n}: {e}"));
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

/// `k8s\0` + a `runtime.Unknown` around `raw`.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    fn bytes_field(out: &mut Vec<u8>, num: u8, b: &[u8]) {
        out.push(num << 3 | 2);
        wire::put_varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
    let mut tm = Vec::new();
    bytes_field(&mut tm, 1, api_version.as_bytes());
    bytes_field(&mut tm, 2, kind.as_bytes());
    let mut out = MAGIC.to_vec();
    bytes_field(&mut out, 1, &tm);
    bytes_field(&mut out, 2, raw);
    out
}

/// (vector, definition, etcd key) as the vectors' README lists them.
pub(crate) const STORED: &[(&str, &str, &str)] = &[
    ("pod", "pods", "/registry/pods/default/web-7d4b9c-x2k8p"),
    ("node", "nodes", "/registry/minions/node-1"),
    ("namespace", "namespaces", "/registry/namespaces/team-a"),
    (
        "service",
        "services",
        "/registry/services/specs/default/web",
    ),
    (
        "endpointslice",
        "endpointslices",
        "/registry/endpointslices/default/web-x7k2q",
    ),
    ("lease", "leases", "/registry/leases/kube-node-lease/node-1"),
    (
        "event",
        "events",
        "/registry/events/default/web-7d4b9c-x2k8p.18a9f3c2d4e5b6a7",
    ),
    (
        "configmap",
        "configmaps",
        "/registry/configmaps/default/web-config",
    ),
    (
        "secret",
        "secrets",
        "/registry/secrets/default/db-credentials",
    ),
    ("zero-pod", "pods", "/registry/pods/default/zero"),
];

#[test]
fn objects_from_protobuf_match_objects_from_upstreams_json() {
    use crate::model::{Object, ResourceDef, Schema};
    for (name, def, key) in STORED {
        let schema = Schema::new(ResourceDef::builtin(def).unwrap());
        let pb = Object::decode(&schema, key, &vector(&format!("{name}.etcd.bin")), 12345)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // The JSON path on upstream's JSON is the reference for every attribute.
        let js = Object::decode(&schema, key, &vector(&format!("{name}.json")), 12345).unwrap();
        // Field selectors on undeclared fields: from the bytes before the JSON exists, then from
        // the JSON.
        for path in [
            "spec.nodeName",
            "spec",
            "type",
            "spec.ports",
            "reason",
            "data",
            "count",
        ] {
            let p = FieldPath::parse(path).unwrap();
            assert_eq!(pb.field(&p), js.field(&p), "{name} {path}");
        }
        assert_eq!(pb.to_value(), js.to_value(), "{name}");
        for path in ["spec.nodeName", "spec", "type", "reason"] {
            let p = FieldPath::parse(path).unwrap();
            assert_eq!(pb.field(&p), js.field(&p), "{name} {path}");
        }
        assert_eq!(
            (pb.namespace(), pb.name()),
            (js.namespace(), js.name()),
            "{name}"
        );
        assert_eq!(
            pb.labels().collect::<Vec<_>>(),
            js.labels().collect::<Vec<_>>()
        );
        for (i, path) in schema.fields.iter().enumerate() {
            let a = crate::model::Attr::Field(i as u16);
            assert_eq!(pb.attr(a), js.attr(a), "{name} {path}");
        }
        let moved: serde_json::Value = serde_json::from_slice(&pb.json_at(99)).unwrap();
        assert_eq!(moved["metadata"]["resourceVersion"], "99");
    }
}

#[test]
fn stored_protobuf_must_match_the_resource_and_key() {
    use crate::model::{Object, ResourceDef, Schema};
    let pods = Schema::new(ResourceDef::builtin("pods").unwrap());
    let pod = vector("pod.etcd.bin");
    for (key, value, want) in [
        (
            "/registry/pods/default/other",
            pod.clone(),
            "key does not match",
        ),
        (
            "/registry/pods/other/web-7d4b9c-x2k8p",
            pod.clone(),
            "key does not match",
        ),
        (
            "/registry/pods/default/zero",
            vector("node.etcd.bin"),
            "not this resource's v1 Pod",
        ),
    ] {
        let e = Object::decode(&pods, key, &value, 1).unwrap_err();
        assert!(e.reason.contains(want), "{key}: {e}");
        // The key the message names, when it is another pod's (k/k#135115).
        let names =
            (want == "key does not match").then_some("/registry/pods/default/web-7d4b9c-x2k8p");
        assert_eq!(e.names.as_deref(), names, "{key}: {e}");
    }
}

/// Decodes as ingest does; whatever passes must encode to valid JSON.
fn ingest_then_encode(value: &[u8]) {
    let Ok(env) = Envelope::parse(value) else {
        return;
    };
    if env.meta().is_ok() && env.validate().is_ok() {
        for f in [
            "spec.nodeName",
            "status.phase",
            "spec.containers",
            "metadata.labels.app",
        ] {
            let _ = env.field(&FieldPath::parse(f).unwrap());
        }
        let (json, _, _, _) = env.encode_json(1).expect("validated values encode");
        serde_json::from_slice::<serde_json::Value>(&json).expect("valid JSON");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// Arbitrary messages behind every built-in kind's envelope.
    #[test]
    fn arbitrary_messages_never_panic(
        kind in 0usize..super::tables::KINDS.len(),
        raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
    ) {
        let (av, k, _) = super::tables::KINDS[kind];
        ingest_then_encode(&envelope(av, k, &raw));
    }

    /// Real objects with a run of bytes replaced somewhere.
    #[test]
    fn spliced_real_objects_never_panic(
        which in 0usize..STORED.len(),
        at in 0usize..2000,
        cut in 0usize..8,
        insert in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
    ) {
        let mut v = vector(&format!("{}.etcd.bin", STORED[which].0));
        let at = at % v.len();
        let end = (at + cut).min(v.len());
        v.splice(at..end, insert);
        ingest_then_encode(&v);
    }
}

/// The length-delimited fields `num` of a message.
fn len_fields(b: &[u8], num: u32) -> Vec<&[u8]> {
    wire::Fields::new(b)
        .map(Result::unwrap)
        .filter_map(|(n, v)| match v {
            wire::Value::Len(x) if n == num => Some(x),
            _ => None,
        })
        .collect()
}

fn rv_of(v: &serde_json::Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_pods_of_upstreams_list_and_watch_stream_transcode_to_its_json() {
    // pods-list.pb: a PodList {metadata = 1, items = 2}; each item a Pod message.
    let list = vector("pods-list.pb");
    let list_env = Envelope::parse(&list).err();
    assert!(
        list_env.unwrap().contains("PodList"),
        "lists are not stored kinds"
    );
    let body = &list[MAGIC.len()..];
    let raw = len_fields(body, 2)[0];
    let items = len_fields(raw, 2);
    let want: serde_json::Value = serde_json::from_slice(&vector("pods-list.json")).unwrap();
    let want = want["items"].as_array().unwrap();
    assert_eq!(items.len(), want.len());
    for (item, want) in items.iter().zip(want) {
        let value = envelope("v1", "Pod", item);
        let env = Envelope::parse(&value).unwrap();
        env.validate().unwrap();
        let (json, _, _, fields_at) = env.encode_json(rv_of(want)).unwrap();
        let mut as_item = b"{".to_vec();
        as_item.extend_from_slice(&json[fields_at as usize..]);
        let got: serde_json::Value = serde_json::from_slice(&as_item).unwrap();
        assert_eq!(&got, want);
    }
    // pods-watch.pb-stream: 4-byte big-endian length, then a WatchEvent {type = 1, object = 2
    // {raw = 1}} whose raw is the pod's full storage-style encoding.
    let stream = vector("pods-watch.pb-stream");
    let lines = vector("pods-watch.json-stream");
    let mut lines = lines.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let mut rest = &stream[..];
    let mut n = 0;
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let frame = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let want: serde_json::Value = serde_json::from_slice(lines.next().unwrap()).unwrap();
        assert_eq!(
            len_fields(frame, 1)[0],
            want["type"].as_str().unwrap().as_bytes()
        );
        let object = len_fields(len_fields(frame, 2)[0], 1)[0];
        let env = Envelope::parse(object).unwrap();
        env.validate().unwrap();
        let (json, _, _, _) = env.encode_json(rv_of(&want["object"])).unwrap();
        let got: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(got, want["object"], "event {n}");
        n += 1;
    }
    assert_eq!(n, 5);
}

/// The first difference of two byte strings, for readable failures.
fn first_diff(a: &[u8], b: &[u8]) -> String {
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    format!(
        "lengths {} / {}, first difference at {i}: got {:02x?} want {:02x?}",
        a.len(),
        b.len(),
        &a[i.saturating_sub(8)..(i + 16).min(a.len())],
        &b[i.saturating_sub(8)..(i + 16).min(b.len())]
    )
}

#[test]
fn stored_values_with_the_revision_spliced_are_upstreams_get_bodies() {
    for name in VECTORS {
        let stored = vector(&format!("{name}.etcd.bin"));
        let want = vector(&format!("{name}.pb"));
        let (got, raw) = encode::with_resource_version(&stored, 12345).unwrap();
        assert!(got == want, "{name}: {}", first_diff(&got, &want));
        assert_eq!(Envelope::parse(&got).unwrap().raw, &got[raw]);
    }
}

#[test]
fn json_encodes_to_upstreams_protobuf_byte_for_byte() {
    for name in VECTORS {
        let json: serde_json::Value =
            serde_json::from_slice(&vector(&format!("{name}.json"))).unwrap();
        let want = vector(&format!("{name}.pb"));
        let got = encode::encode_json(&json).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == want, "{name}: {}", first_diff(&got, &want));
        // Without the revision: the stored value.
        let mut stored = json.clone();
        stored["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        let got = encode::encode_json(&stored).unwrap();
        let want = vector(&format!("{name}.etcd.bin"));
        assert!(got == want, "{name} stored: {}", first_diff(&got, &want));
    }
}

#[test]
fn json_of_the_wrong_shape_is_an_error_not_a_panic() {
    for bad in [
        serde_json::json!([]),
        serde_json::json!({"apiVersion": "v1", "kind": "Widget"}),
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": 3}),
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": 1}}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": "yesterday"}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "spec": {"priority": 1e12}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "!!"}}),
    ] {
        assert!(encode::encode_json(&bad).is_err(), "{bad}");
    }
}
