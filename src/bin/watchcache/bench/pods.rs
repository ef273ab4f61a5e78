//! Realistic pod JSON of about 2 KB, with labels and the send-time annotation, and cheap field
//! extraction for the load clients.

/// The annotation every write carries: its send time in microseconds since the Unix epoch.
pub const SENT_AT: &str = "bench.watchcache.io/sent-at-us";

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The etcd key of bench pod `id`.
pub fn key(id: usize) -> String {
    format!("/registry/pods/bench-{}/pod-{id}", id % 16)
}

/// A pod of about 2 KB on `node`, labelled `app=app-{app}`, written at `sent_us`.
pub fn json_app(id: usize, node: usize, app: usize, generation: u64, sent_us: u64) -> String {
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

/// The string value of the first `"field":"..."` in a JSON document, without parsing it.
pub fn string_field<'a>(doc: &'a [u8], field: &str) -> Option<&'a [u8]> {
    let pat = format!("\"{field}\":\"");
    let at = memchr::memmem::find(doc, pat.as_bytes())? + pat.len();
    let len = memchr::memchr(b'"', &doc[at..])?;
    Some(&doc[at..at + len])
}

/// The node number of a bench pod's JSON.
pub fn node_of(doc: &[u8]) -> Option<usize> {
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
}
