//! What kube-apiserver's registry does to a write's object beyond metadata syntax, so that what
//! watchcache stores is what kube-apiserver would have stored (both may share one etcd):
//!
//! - the system fields it owns (`rest.BeforeCreate`, `BeforeUpdate`, `WipeObjectMetaSystemFields`):
//!   a create gets a new uid and creationTimestamp whatever the client sent (kubectl sends
//!   `"creationTimestamp": null`) and no deletionTimestamp or deletionGracePeriodSeconds; an
//!   update keeps the stored uid (a different one is 422 `field is immutable`), creationTimestamp,
//!   generation, deletionTimestamp and deletionGracePeriodSeconds;
//! - the strategies' `PrepareForCreate` and `PrepareForUpdate`: for a resource with a status
//!   subresource the status is that subresource's to write (a create resets it, an update of the
//!   object keeps the stored one); a new Pod is `Pending` with its QoS class (and the
//!   `SchedulingGated` condition when it has scheduling gates), a new Namespace `Active` with the
//!   `kubernetes` finalizer and its `kubernetes.io/metadata.name` label; a Node keeps the status
//!   it is created with;
//! - decoding into the internal type: a Secret's `stringData` is merged into `data` (base64) and
//!   never stored or answered;
//! - kind validation: ConfigMap and Secret keys (`IsConfigMapKey`), keys in both `data` and
//!   `binaryData`, and the 1 MiB limit on their data.
//!
//! Only the parts whose effect a client sees are here; defaulting of the many optional fields of
//! the built-in types is not.
// Reads outside input (request bodies): it must not panic on any of it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

use crate::model::Quantity;
use crate::model::ResourceDef;
use crate::model::names;
use crate::server::status::ApiError;

/// One 422 cause: (reason, field, message), as [`ApiError::invalid`] takes them.
pub(crate) type Cause = (&'static str, String, String);

/// Upstream's limit on the data of one ConfigMap or Secret (`MaxSecretSize`).
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The label every namespace carries with its own name (`kubernetes.io/metadata.name`).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

fn is_core(def: &ResourceDef, plural: &str) -> bool {
    def.group.is_empty() && def.plural == plural
}

fn meta_of(obj: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// What decoding a body into the internal type does: a Secret's `stringData` overwrites the
/// `data` keys it names (base64-encoded), and is gone. Runs on every object a write stores
/// (create, update, the result of a patch).
///
/// # Errors
/// 400 when `stringData` is not an object of strings, as upstream's decoder refuses it.
pub(crate) fn convert(def: &ResourceDef, obj: &mut Map<String, Value>) -> Result<(), ApiError> {
    if !is_core(def, "secrets") {
        return Ok(());
    }
    let string_data = match obj.remove("stringData") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Secret in version \"v1\" cannot be handled as a Secret: stringData must be an object of strings, not {other}"
            )));
        }
    };
    if string_data.is_empty() {
        return Ok(());
    }
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if data.is_null() {
        *data = Value::Object(Map::new());
    }
    let Value::Object(data) = data else {
        return Err(ApiError::bad_request(
            "Secret in version \"v1\" cannot be handled as a Secret: data must be an object",
        ));
    };
    for (k, v) in string_data {
        let Value::String(v) = v else {
            return Err(ApiError::bad_request(format!(
                "Secret in version \"v1\" cannot be handled as a Secret: stringData[{k:?}] must be a string, not {v}"
            )));
        };
        data.insert(k, Value::String(BASE64.encode(v.as_bytes())));
    }
    Ok(())
}

/// `BeforeCreate`: system fields set by the server, and the kind's `PrepareForCreate`.
pub(crate) fn prepare_for_create(def: &ResourceDef, obj: &mut Map<String, Value>, uid: String) {
    let meta = meta_of(obj);
    for wiped in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(wiped);
    }
    meta.insert("uid".into(), Value::String(uid));
    meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    // Upstream starts generation at 1 for every object whose strategy tracks it.
    meta.insert("generation".into(), Value::from(1));
    if is_core(def, "namespaces") {
        prepare_namespace(obj);
        obj.insert("status".into(), json!({"phase": "Active"}));
        return;
    }
    if !def.status_subresource || is_core(def, "nodes") {
        // Nodes are created with the status their kubelet reports; resources without a status
        // subresource keep whatever their status field holds.
        return;
    }
    if is_core(def, "pods") {
        let status = pod_status_on_create(obj);
        obj.insert("status".into(), status);
    } else if def.has_protobuf() {
        // A built-in kind's strategy resets the status to its zero value.
        obj.insert("status".into(), Value::Object(Map::new()));
    } else {
        // A custom resource with a status subresource: its strategy drops the status.
        obj.remove("status");
    }
}

/// A namespace always carries the `kubernetes` finalizer from its creation and a label with its
/// own name (upstream's `PrepareForCreate` and `Canonicalize`).
fn prepare_namespace(obj: &mut Map<String, Value>) {
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let spec = obj
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(spec) = spec {
        let finalizers = spec
            .entry("finalizers")
            .or_insert_with(|| Value::Array(Vec::new()));
        if finalizers.is_null() {
            *finalizers = Value::Array(Vec::new());
        }
        if let Value::Array(f) = finalizers
            && !f.iter().any(|v| v == "kubernetes")
        {
            f.push(Value::String("kubernetes".into()));
        }
    }
    label_namespace(obj, &name);
}

fn label_namespace(obj: &mut Map<String, Value>, name: &str) {
    if name.is_empty() {
        return;
    }
    let meta = meta_of(obj);
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if labels.is_null() {
        *labels = Value::Object(Map::new());
    }
    if let Value::Object(labels) = labels {
        labels.insert(NAMESPACE_NAME_LABEL.into(), Value::String(name.to_owned()));
    }
}

/// A new pod's status (upstream's `podStrategy.PrepareForCreate`): `Pending`, its QoS class,
/// and `PodScheduled=False` (`SchedulingGated`) when it has scheduling gates.
fn pod_status_on_create(pod: &Map<String, Value>) -> Value {
    let spec = pod.get("spec");
    let mut status = json!({"phase": "Pending", "qosClass": qos_class(spec)});
    let gated = spec
        .and_then(|s| s.get("schedulingGates"))
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty());
    if let (true, Value::Object(status)) = (gated, &mut status) {
        status.insert(
            "conditions".into(),
            json!([{
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
            }]),
        );
    }
    status
}

/// Upstream's `ComputePodQOS` on a pod spec as defaulting leaves it (a container's limit stands
/// for its missing request): `BestEffort` without CPU or memory requests and limits,
/// `Guaranteed` when every container limits both and the summed requests equal the summed
/// limits, `Burstable` otherwise. Pod-level `spec.resources`, when given, decide instead.
fn qos_class(spec: Option<&Value>) -> &'static str {
    const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];
    let mut requests: [Quantity; 2] = [Quantity::ZERO; 2];
    let mut limits: [Quantity; 2] = [Quantity::ZERO; 2];
    let (mut any_request, mut any_limit) = ([false; 2], [false; 2]);
    let mut guaranteed = true;
    let mut add = |resources: Option<&Value>| {
        let list = |field: &str| {
            resources
                .and_then(|r| r.get(field))
                .and_then(Value::as_object)
        };
        let (reqs, lims) = (list("requests"), list("limits"));
        let mut limited = [false; 2];
        for (i, name) in QOS_RESOURCES.iter().enumerate() {
            let parse = |m: Option<&Map<String, Value>>| {
                m.and_then(|m| m.get(*name))
                    .and_then(Value::as_str)
                    .and_then(Quantity::parse)
            };
            let limit = parse(lims);
            // Defaulting copies a limit into a missing request.
            let request = parse(reqs).or(limit);
            if let (Some(r), Some(slot), Some(seen)) =
                (request, requests.get_mut(i), any_request.get_mut(i))
                && r.is_positive()
            {
                *slot = slot.saturating_add(r);
                *seen = true;
            }
            if let (Some(l), Some(slot), Some(seen), Some(lim)) = (
                limit,
                limits.get_mut(i),
                any_limit.get_mut(i),
                limited.get_mut(i),
            ) && l.is_positive()
            {
                *slot = slot.saturating_add(l);
                *seen = true;
                *lim = true;
            }
        }
        if !limited.iter().all(|l| *l) {
            guaranteed = false;
        }
    };
    match spec
        .and_then(|s| s.get("resources"))
        .filter(|r| r.is_object())
    {
        Some(pod_level) => add(Some(pod_level)),
        None => {
            for field in ["containers", "initContainers"] {
                for c in spec
                    .and_then(|s| s.get(field))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    add(c.get("resources"));
                }
            }
        }
    }
    if !any_request.iter().any(|x| *x) && !any_limit.iter().any(|x| *x) {
        return "BestEffort";
    }
    let same = (0..QOS_RESOURCES.len()).all(|i| {
        // Every resource requested must be limited to exactly its request, and the other way.
        any_request.get(i) == any_limit.get(i) && requests.get(i) == limits.get(i)
    });
    if guaranteed && same {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// `BeforeUpdate` and the kind's `PrepareForUpdate`, given the stored object (`old`; empty when
/// the stored value could not be read, and a PUT replaces it): the stored system fields are kept,
/// an update of a resource with a status subresource keeps the stored status, a namespace keeps
/// its finalizers. `generation` is the stored one, plus one when the spec changed.
///
/// # Errors
/// The causes of a 422 when the update changes a field that cannot change (`metadata.uid`, a
/// `deletionTimestamp` or `deletionGracePeriodSeconds` the stored object does not have).
pub(crate) fn prepare_for_update(
    def: &ResourceDef,
    obj: &mut Map<String, Value>,
    old: &Map<String, Value>,
) -> Result<(), Vec<Cause>> {
    let empty = Map::new();
    let old_meta = match old.get("metadata") {
        Some(Value::Object(m)) => m,
        _ => &empty,
    };
    let spec_changed = obj.get("spec") != old.get("spec");
    let mut causes = Vec::new();
    // `ValidateRoleBindingUpdate`: a binding's role is fixed for its life, so that whoever may
    // edit its subjects cannot re-point it at a broader role (escalation checks bind the role
    // a binding names; a new role needs a new binding).
    if def.group == "rbac.authorization.k8s.io"
        && matches!(def.plural.as_str(), "rolebindings" | "clusterrolebindings")
    {
        let role_ref = |o: &Map<String, Value>| {
            ["apiGroup", "kind", "name"].map(|k| {
                o.get("roleRef")
                    .and_then(|r| r.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })
        };
        let [group, kind, name] = role_ref(obj);
        if [&group, &kind, &name] != role_ref(old).each_ref() {
            // The internal type as Go's `%#v` prints it, as upstream's field error does.
            causes.push((
                "FieldValueInvalid",
                "roleRef".to_owned(),
                format!(
                    "Invalid value: rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}: cannot change roleRef",
                    quoted(&group),
                    quoted(&kind),
                    quoted(&name)
                ),
            ));
        }
    }
    if def.status_subresource {
        match old.get("status") {
            Some(s) => obj.insert("status".into(), s.clone()),
            None => obj.remove("status"),
        };
    }
    if is_core(def, "namespaces") {
        let old_finalizers = old.get("spec").and_then(|s| s.get("finalizers")).cloned();
        if let Some(Value::Object(spec)) = obj.get_mut("spec") {
            match old_finalizers {
                Some(f) => spec.insert("finalizers".into(), f),
                None => spec.remove("finalizers"),
            };
        }
        let name = old_meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        label_namespace(obj, &name);
    }
    let meta = meta_of(obj);
    let immutable = |field: &str, shown: String| {
        (
            "FieldValueInvalid",
            format!("metadata.{field}"),
            format!("Invalid value: {shown}: field is immutable"),
        )
    };
    // The uid: left out, the stored one; a different one is refused.
    match (meta.get("uid").and_then(Value::as_str), old_meta.get("uid")) {
        (None | Some(""), Some(u)) => {
            meta.insert("uid".into(), u.clone());
        }
        (Some(new), Some(Value::String(u))) if new != u => {
            causes.push(immutable("uid", quoted(new)));
        }
        _ => {}
    }
    // creationTimestamp and generation: silently the stored ones.
    for field in ["creationTimestamp", "generation"] {
        if let Some(v) = old_meta.get(field).filter(|v| !v.is_null()) {
            meta.insert(field.into(), v.clone());
        }
    }
    if spec_changed {
        let g = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta.insert("generation".into(), Value::from(g + 1));
    }
    // An update never sets, changes or removes a deletion: the stored values stand, and one the
    // stored object does not have is refused.
    for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
        let stored = old_meta.get(field).filter(|v| !v.is_null());
        match (meta.get(field).filter(|v| !v.is_null()), stored) {
            (_, Some(s)) if field == "deletionTimestamp" => {
                meta.insert(field.into(), s.clone());
            }
            (None, Some(s)) => {
                meta.insert(field.into(), s.clone());
            }
            (Some(new), stored) if Some(new) != stored => {
                causes.push(immutable(field, shown_value(new)));
            }
            _ => {}
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A value as upstream's field errors print it: strings quoted, numbers as they are, a time as
/// Go prints a `time.Time` (`2026-01-02 15:04:05 +0000 UTC`).
fn shown_value(v: &Value) -> String {
    match v {
        Value::String(s) => match humantime::parse_rfc3339_weak(s) {
            Ok(t) => {
                let text = humantime::format_rfc3339_seconds(t).to_string();
                format!(
                    "{} +0000 UTC",
                    text.trim_end_matches('Z').replacen('T', " ", 1)
                )
            }
            Err(_) => quoted(s),
        },
        other => other.to_string(),
    }
}

/// The kind's own validation (`ValidateConfigMap`, `ValidateSecret`): keys, keys in both of a
/// ConfigMap's maps, and the data limit. The causes join those of the metadata rules in one 422.
pub(crate) fn validate(def: &ResourceDef, obj: &Map<String, Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let keys_of = |field: &str| match obj.get(field) {
        Some(Value::Object(m)) => Some(m),
        _ => None,
    };
    let check_key = |field: &str, key: &str, causes: &mut Vec<Cause>| {
        if let Err(errs) = names::validate_config_key(key) {
            for e in errs {
                causes.push((
                    "FieldValueInvalid",
                    format!("{field}[{key}]"),
                    format!("Invalid value: {}: {e}", quoted(key)),
                ));
            }
        }
    };
    let too_long = |field: &str| {
        (
            "FieldValueTooLong",
            field.to_owned(),
            format!("Too long: may not be more than {MAX_DATA_BYTES} bytes"),
        )
    };
    let decoded_len = |v: &Value| match v {
        Value::String(s) => BASE64.decode(s.as_bytes()).map_or(s.len(), |b| b.len()),
        _ => 0,
    };
    if is_core(def, "secrets") {
        let mut total = 0usize;
        for (k, v) in keys_of("data").into_iter().flatten() {
            check_key("data", k, &mut causes);
            total = total.saturating_add(decoded_len(v));
        }
        if total > MAX_DATA_BYTES {
            causes.push(too_long("data"));
        }
    } else if is_core(def, "configmaps") {
        let (data, binary) = (keys_of("data"), keys_of("binaryData"));
        let mut total = 0usize;
        for (k, v) in data.into_iter().flatten() {
            check_key("data", k, &mut causes);
            if binary.is_some_and(|b| b.contains_key(k)) {
                causes.push((
                    "FieldValueInvalid",
                    format!("data[{k}]"),
                    format!(
                        "Invalid value: {}: duplicate of key present in binaryData",
                        quoted(k)
                    ),
                ));
            }
            total = total.saturating_add(v.as_str().map_or(0, str::len));
        }
        for (k, v) in binary.into_iter().flatten() {
            check_key("binaryData", k, &mut causes);
            if data.is_some_and(|d| d.contains_key(k)) {
                causes.push((
                    "FieldValueInvalid",
                    format!("binaryData[{k}]"),
                    format!(
                        "Invalid value: {}: duplicate of key present in data",
                        quoted(k)
                    ),
                ));
            }
            total = total.saturating_add(decoded_len(v));
        }
        if total > MAX_DATA_BYTES {
            causes.push(too_long(""));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(plural: &str) -> ResourceDef {
        ResourceDef::builtin(plural).unwrap()
    }

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn string_data_is_merged_into_data_and_gone() {
        let mut s =
            obj(json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "new", "c": "ç"}}));
        convert(&def("secrets"), &mut s).unwrap();
        assert_eq!(
            s,
            obj(json!({"data": {"a": "eA==", "b": "bmV3", "c": "w6c="}}))
        );
        let mut bad = obj(json!({"stringData": {"b": 1}}));
        assert_eq!(convert(&def("secrets"), &mut bad).unwrap_err().code(), 400);
        let mut cm = obj(json!({"stringData": {"b": "x"}}));
        convert(&def("configmaps"), &mut cm).unwrap();
        assert!(cm.contains_key("stringData"), "only secrets convert");
    }

    #[test]
    fn qos_classes_as_upstream_computes_them() {
        let pod = |containers: Value| qos_class(Some(&json!({"containers": containers})));
        assert_eq!(pod(json!([{"name": "a"}])), "BestEffort");
        assert_eq!(
            pod(json!([{"resources": {"limits": {"cpu": "100m", "memory": "1Gi"}}}])),
            "Guaranteed",
            "requests default to limits"
        );
        assert_eq!(
            pod(
                json!([{"resources": {"requests": {"cpu": "0.1", "memory": "1024Mi"},
                                      "limits": {"cpu": "100m", "memory": "1Gi"}}}])
            ),
            "Guaranteed"
        );
        assert_eq!(
            pod(
                json!([{"resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "100m", "memory": "1Gi"}}}])
            ),
            "Burstable"
        );
        assert_eq!(
            pod(json!([{"resources": {"requests": {"cpu": "1"}}}])),
            "Burstable"
        );
        assert_eq!(
            pod(json!([{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, {"name": "b"}])),
            "Burstable",
            "a container without limits"
        );
        assert_eq!(
            pod(json!([{"resources": {"requests": {"ephemeral-storage": "1Gi"}}}])),
            "BestEffort",
            "only cpu and memory count"
        );
        assert_eq!(
            qos_class(Some(
                &json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                                    "containers": [{"name": "a"}]})
            )),
            "Guaranteed",
            "pod-level resources decide"
        );
    }

    #[test]
    fn creates_get_fresh_system_fields_and_their_kinds_status() {
        let mut p = obj(
            json!({"metadata": {"name": "p", "uid": "mine", "creationTimestamp": null,
            "deletionTimestamp": "2020-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30},
            "spec": {"schedulingGates": [{"name": "g"}]}, "status": {"phase": "Running"}}),
        );
        prepare_for_create(&def("pods"), &mut p, "u-1".into());
        let m = &p["metadata"];
        assert_eq!(m["uid"], "u-1");
        assert!(
            m["creationTimestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
        assert!(
            m.get("deletionTimestamp").is_none() && m.get("deletionGracePeriodSeconds").is_none()
        );
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert_eq!(p["status"]["conditions"][0]["reason"], "SchedulingGated");
        let mut ns = obj(json!({"metadata": {"name": "team"}, "spec": {"finalizers": ["x"]}}));
        prepare_for_create(&def("namespaces"), &mut ns, "u".into());
        assert_eq!(ns["status"], json!({"phase": "Active"}));
        assert_eq!(ns["spec"]["finalizers"], json!(["x", "kubernetes"]));
        assert_eq!(ns["metadata"]["labels"][NAMESPACE_NAME_LABEL], "team");
        let mut node =
            obj(json!({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}}}));
        prepare_for_create(&def("nodes"), &mut node, "u".into());
        assert_eq!(
            node["status"]["capacity"]["cpu"], "4",
            "nodes keep their status"
        );
        let mut svc = obj(
            json!({"metadata": {"name": "s"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
        );
        prepare_for_create(&def("services"), &mut svc, "u".into());
        assert_eq!(svc["status"], json!({}));
        let mut w = obj(json!({"metadata": {"name": "w"}, "status": {"x": 1}}));
        prepare_for_create(&def("widgets"), &mut w, "u".into());
        assert!(w.get("status").is_none());
        let mut cm = obj(json!({"metadata": {"name": "c"}, "status": {"x": 1}}));
        prepare_for_create(&def("configmaps"), &mut cm, "u".into());
        assert_eq!(
            cm["status"]["x"], 1,
            "no status subresource: nothing special"
        );
    }

    #[test]
    fn updates_keep_the_stored_system_fields_and_refuse_a_new_uid() {
        let old = obj(
            json!({"metadata": {"name": "p", "uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 3}, "spec": {"a": 1}, "status": {"phase": "Running"}}),
        );
        let mut new = obj(
            json!({"metadata": {"name": "p", "creationTimestamp": "1999-01-01T00:00:00Z",
            "generation": 99}, "spec": {"a": 2}, "status": {"phase": "Failed"}}),
        );
        prepare_for_update(&def("pods"), &mut new, &old).unwrap();
        assert_eq!(new["metadata"]["uid"], "u-1");
        assert_eq!(new["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(
            new["metadata"]["generation"], 4,
            "bumped from the stored one"
        );
        assert_eq!(
            new["status"]["phase"], "Running",
            "status is the subresource's"
        );
        let mut other = obj(json!({"metadata": {"name": "p", "uid": "u-2"}}));
        let causes = prepare_for_update(&def("pods"), &mut other, &old).unwrap_err();
        assert_eq!(causes[0].1, "metadata.uid");
        assert_eq!(causes[0].2, "Invalid value: \"u-2\": field is immutable");
        let mut deleting =
            obj(json!({"metadata": {"name": "p", "deletionTimestamp": "2026-02-03T04:05:06Z"}}));
        let causes = prepare_for_update(&def("pods"), &mut deleting, &old).unwrap_err();
        assert_eq!(
            causes[0].2,
            "Invalid value: 2026-02-03 04:05:06 +0000 UTC: field is immutable"
        );
        let mut cm = obj(json!({"metadata": {"name": "c"}, "status": {"x": 2}}));
        prepare_for_update(
            &def("configmaps"),
            &mut cm,
            &obj(json!({"status": {"x": 1}})),
        )
        .unwrap();
        assert_eq!(cm["status"]["x"], 2);
    }

    /// Issue 35, A-ROLEREF: a merge patch changing a RoleBinding's roleRef answered 200.
    #[test]
    fn a_bindings_role_ref_is_immutable() {
        let binding = |role: &str| {
            obj(json!({"metadata": {"name": "b"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "User", "name": "alice"}]}))
        };
        for plural in ["rolebindings", "clusterrolebindings"] {
            let d = ResourceDef::builtin(plural).unwrap();
            let causes = prepare_for_update(&d, &mut binding("cluster-admin"), &binding("view"))
                .unwrap_err();
            assert_eq!(causes[0].1, "roleRef");
            assert_eq!(
                causes[0].2,
                "Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", \
                 Kind:\"ClusterRole\", Name:\"cluster-admin\"}: cannot change roleRef"
            );
            // The subjects may change.
            let mut more = binding("view");
            more["subjects"] = json!([{"kind": "User", "name": "bob"}]);
            prepare_for_update(&d, &mut more, &binding("view")).unwrap();
        }
    }

    #[test]
    fn config_map_and_secret_keys_are_validated() {
        let causes = validate(
            &def("configmaps"),
            &obj(
                json!({"data": {"../escape": "x", "ok": "y", "both": "z"}, "binaryData": {"a/b": "", "both": ""}}),
            ),
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.1.as_str()).collect();
        assert_eq!(
            fields,
            [
                "data[../escape]",
                "data[../escape]",
                "data[both]",
                "binaryData[a/b]",
                "binaryData[both]"
            ]
        );
        assert!(
            causes[1].2.ends_with("must not start with '..'"),
            "{causes:?}"
        );
        let causes = validate(&def("secrets"), &obj(json!({"data": {"a/b": "eA=="}})));
        assert_eq!(causes.len(), 1);
        assert!(
            causes[0]
                .2
                .starts_with("Invalid value: \"a/b\": a valid config key")
        );
        let big = BASE64.encode(vec![0u8; MAX_DATA_BYTES + 1]);
        let causes = validate(&def("secrets"), &obj(json!({"data": {"k": big}})));
        assert_eq!(causes[0].0, "FieldValueTooLong");
    }
}
