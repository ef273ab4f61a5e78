//! Realistic pod JSON of about 2 KB, with labels and the send-time annotation, and cheap field
//! extraction for the load clients.

/// The annotation every write carries: its send time in microseconds since the Unix epoch.
pub(crate) const SENT_AT: &str = "bench.watchcache.io/sent-at-us";

/// Microseconds since the Unix epoch.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The etcd key of bench pod `id`.
pub(crate) fn key(id: usize) -> String {
    format!("/registry/pods/bench-{}/pod-{id}", id % 16)
}

/// A pod of about 2 KB on `node`, labelled `app=app-{app}`, written at `sent_us`.
pub(crate) fn json_app(
    id: usize,
    node: usize,
    app: usize,
    generation: u64,
    sent_us: u64,
) -> String {
    let ns = format!("bench-{}", id % 16);
    format!(
        concat!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"pod-{id}","namespace":"{ns}","uid":"00000000-0000-4000-8000-{id:012}","#,
            r#""generation":{gen},"creationTimestamp":"2026-11-21T00:00:00Z","labels":{{"app":"app-{app}","tier":"backend","pod-template-hash":"5d8f9c7b6"}},"#,
            r#""annotations":{{"{sent}":"{sent_us}","kubectl.kubernetes.io/last-applied-configuration":"{pad}"}},"#,
            r#""ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"app-{app}-5d8f9c7b6","uid":"11111111-0000-4000-8000-{app:012}","controller":true}}]}},"#,
            r#""spec":{{"nodeName":"node-{node}","serviceAccountName":"default","restartPolicy":"Always","terminationGracePeriodSeconds":30,"#,
            r#""containers":[{{"name":"app","image":"registry.example/app:1.{app}","ports":[{{"containerPort":8080,"protocol":"TCP"}}],"#,
            r#""env":[{{"name":"POD_NAME","value":"pod-{id}"}},{{"name":"LOG_LEVEL","value":"info"}}],"#,
            r#""resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}},"limits":{{"cpu":"500m","memory":"256Mi"}}}},"#,
            r#""readinessProbe":{{"httpGet":{{"path":"/healthz","port":8080}},"periodSeconds":10}}}}]}},"#,
            r#""status":{{"phase":"Running","hostIP":"10.0.{h}.{l}","podIP":"10.244.{h}.{l}","conditions":[{{"type":"Ready","status":"True"}},{{"type":"ContainersReady","status":"True"}}]}}}}"#
        ),
        id = id,
        ns = ns,
        gen = generation,
        app = app,
        sent = SENT_AT,
        sent_us = sent_us,
        pad = "x".repeat(850),
        node = node,
        h = (node / 250) % 250,
        l = node % 250,
    )
}

/// How the bench's pods are stored in etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Storage {
    /// As kube-apiserver 1.35 writes pods: protobuf, `k8s\0` + `runtime.Unknown`, no
    /// resourceVersion.
    Protobuf,
    /// JSON, as the bench's other models write.
    Json,
}

/// The bench pods' encodings in etcd, made and read with the library's own codec (a probe cache
/// of pods that holds nothing).
pub(crate) struct Codec {
    probe: watchcache::Cache,
    node_name: watchcache::FieldPath,
}

impl Codec {
    pub(crate) fn new() -> Result<Codec, String> {
        let def = watchcache::ResourceDef::builtin("pods").ok_or("no built-in pods")?;
        let (probe, _writer) = watchcache::Cache::new(def, watchcache::CacheConfig::default());
        Ok(Codec {
            probe,
            node_name: watchcache::FieldPath::parse("spec.nodeName")?,
        })
    }

    /// The value to store for a pod's JSON. Protobuf: the JSON decoded, encoded as
    /// kube-apiserver serves it, and that read back at revision 0, which leaves the
    /// resourceVersion out, as kube-apiserver's storage does.
    pub(crate) fn stored(
        &self,
        storage: Storage,
        key: &str,
        json: String,
    ) -> Result<Vec<u8>, String> {
        match storage {
            Storage::Json => Ok(json.into_bytes()),
            Storage::Protobuf => {
                let fail = |e: &dyn std::fmt::Display| format!("{key} as protobuf: {e}");
                let served = self
                    .probe
                    .decode(key, json.as_bytes(), 1)
                    .map_err(|e| fail(&e))?;
                let pb = served.protobuf_wire().map_err(|e| fail(&e))?;
                let stored = self.probe.decode(key, pb, 0).map_err(|e| fail(&e))?;
                Ok(stored.protobuf_wire().map_err(|e| fail(&e))?.to_vec())
            }
        }
    }

    /// The node number of a stored bench pod, JSON or protobuf.
    pub(crate) fn node_of(&self, key: &str, value: &[u8]) -> Option<usize> {
        if !value.starts_with(b"k8s\0") {
            return node_of(value);
        }
        let pod = self.probe.decode(key, value, 1).ok()?;
        pod.field(&self.node_name)?
            .strip_prefix("node-")?
            .parse()
            .ok()
    }
}

/// The string value of the first `"field":"..."` in a JSON document, without parsing it.
pub(crate) fn string_field<'a>(doc: &'a [u8], field: &str) -> Option<&'a [u8]> {
    let pat = format!("\"{field}\":\"");
    let at = memchr::memmem::find(doc, pat.as_bytes())? + pat.len();
    let len = memchr::memchr(b'"', &doc[at..])?;
    Some(&doc[at..at + len])
}

/// The node number of a bench pod's JSON.
pub(crate) fn node_of(doc: &[u8]) -> Option<usize> {
    std::str::from_utf8(string_field(doc, "nodeName")?.strip_prefix(b"node-")?)
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_about_2kb_valid_json_with_a_node() {
        let j = json_app(12345, 77, 45, 3, 42);
        assert!((1900..2400).contains(&j.len()), "{}", j.len());
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["metadata"]["annotations"][SENT_AT], "42");
        assert_eq!(node_of(j.as_bytes()), Some(77));
        assert_eq!(string_field(j.as_bytes(), "name"), Some(&b"pod-12345"[..]));
    }

    #[test]
    fn protobuf_storage_is_kube_apiservers_form_and_reads_back() {
        let c = Codec::new().unwrap();
        let k = key(12345);
        let pb = c
            .stored(Storage::Protobuf, &k, json_app(12345, 77, 45, 3, 42))
            .unwrap();
        assert!(pb.starts_with(b"k8s\0"), "{pb:?}");
        assert_eq!(c.node_of(&k, &pb), Some(77));
        // No resourceVersion stored: read at 9, the object says 9 and nothing else.
        let pod = c.probe.decode(&k, &pb, 9).unwrap();
        let v: serde_json::Value = serde_json::from_slice(pod.json()).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "9");
        assert_eq!(v["metadata"]["annotations"][SENT_AT], "42");
        // No resourceVersion stored: the served form (revision 9 in it) read back at revision 0
        // is the stored value again, byte for byte.
        let served = pod.protobuf_wire().unwrap();
        assert_ne!(&served[..], &pb[..]);
        let again = c.probe.decode(&k, served, 0).unwrap();
        assert_eq!(&again.protobuf_wire().unwrap()[..], &pb[..]);
        let json = c
            .stored(Storage::Json, &k, json_app(1, 2, 3, 4, 5))
            .unwrap();
        assert_eq!(c.node_of(&key(1), &json), Some(2));
    }
}
