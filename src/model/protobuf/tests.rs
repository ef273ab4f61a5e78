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
        assert_eq!(env.field(&p).unwrap(), want, "{path}");
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
    }
}
