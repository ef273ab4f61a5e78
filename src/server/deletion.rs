//! Deletion as kube-apiserver's registry does it (`k8s.io/apiserver/pkg/registry/rest/delete.go`
//! `BeforeDelete`, `registry/generic/registry/store.go` `Delete`, `ShouldDeleteDuringUpdate`,
//! and `pkg/registry/core/pod/strategy.go` `CheckGracefulDelete`): graceful deletion of pods,
//! finalizers on every resource, and the garbage collector's `orphan` and `foregroundDeletion`
//! finalizers added as `DeleteOptions` ask.
//!
//! These are pure rules over an object's JSON: [`plan`] says what a DELETE does to the stored
//! object, [`before_update`] what an update may not change while an object is being deleted, and
//! [`deletes_on_update`] when an update that empties the finalizers deletes the object instead.
//! `server/writes.rs` carries them out against the upstream, each step one conditional write.
//!
//! Namespaces (`Terminating` while the namespace controller empties them) and custom resource
//! definitions (their own cleanup finalizer) have registries of their own upstream; here they
//! follow the generic store's rules (design/semantics.md).

// Reads outside input (request bodies, stored objects): it must not panic on any of it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::server::status::ApiError;

/// The garbage collector's finalizer that orphans an object's dependents.
pub const ORPHAN: &str = "orphan";
/// The garbage collector's finalizer that deletes dependents first (foreground deletion).
pub const FOREGROUND: &str = "foregroundDeletion";

/// `DeleteOptions.propagationPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

/// The `DeleteOptions` of a request (body or query), validated as upstream's
/// `ValidateDeleteOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation: Option<Propagation>,
    pub orphan_dependents: Option<bool>,
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` JSON body.
    ///
    /// # Errors
    /// 400 for a body that is not DeleteOptions JSON, 422 for options upstream refuses.
    pub fn from_json(body: &[u8]) -> Result<DeleteOptions, ApiError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
        })?;
        let Value::Object(m) = v else {
            return Err(ApiError::bad_request(
                "the DeleteOptions body must be an object",
            ));
        };
        let mut o = DeleteOptions {
            grace_period_seconds: int(&m, "gracePeriodSeconds")?,
            orphan_dependents: match m.get("orphanDependents") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(b)) => Some(*b),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "orphanDependents must be a boolean, not {other}"
                    )));
                }
            },
            ..DeleteOptions::default()
        };
        o.propagation = match m.get("propagationPolicy") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(propagation(s)?),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "propagationPolicy must be a string, not {other}"
                )));
            }
        };
        if let Some(Value::Object(p)) = m.get("preconditions") {
            o.uid = match p.get("uid") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "preconditions.uid must be a string, not {other}"
                    )));
                }
            };
            o.resource_version = match p.get("resourceVersion") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid preconditions.resourceVersion \"{s}\""))
                })?),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "preconditions.resourceVersion must be a string, not {other}"
                    )));
                }
            };
        }
        o.validate()?;
        Ok(o)
    }

    /// Reads the options a DELETE without a body gives as query parameters
    /// (`gracePeriodSeconds`, `propagationPolicy`, `orphanDependents`), as upstream's
    /// parameter codec does.
    ///
    /// # Errors
    /// 400 for a value that does not parse, 422 for options upstream refuses.
    pub fn from_query(query: Option<&str>) -> Result<DeleteOptions, ApiError> {
        let mut o = DeleteOptions::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*k {
                "gracePeriodSeconds" if o.grace_period_seconds.is_none() => {
                    o.grace_period_seconds = Some(v.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid gracePeriodSeconds \"{v}\""))
                    })?);
                }
                "propagationPolicy" if o.propagation.is_none() => {
                    o.propagation = Some(propagation(&v)?);
                }
                "orphanDependents" if o.orphan_dependents.is_none() => {
                    o.orphan_dependents = Some(v.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid orphanDependents \"{v}\""))
                    })?);
                }
                _ => {}
            }
        }
        o.validate()?;
        Ok(o)
    }

    /// The options as a `DeleteOptions` JSON body (to send them on to an upstream API server),
    /// with `dryRun: ["All"]` when asked.
    pub fn to_json(&self, dry_run: bool) -> Vec<u8> {
        let mut m = Map::new();
        m.insert("kind".into(), Value::from("DeleteOptions"));
        m.insert("apiVersion".into(), Value::from("v1"));
        if let Some(g) = self.grace_period_seconds {
            m.insert("gracePeriodSeconds".into(), Value::from(g));
        }
        if let Some(p) = self.propagation {
            let p = match p {
                Propagation::Orphan => "Orphan",
                Propagation::Background => "Background",
                Propagation::Foreground => "Foreground",
            };
            m.insert("propagationPolicy".into(), Value::from(p));
        }
        if let Some(o) = self.orphan_dependents {
            m.insert("orphanDependents".into(), Value::from(o));
        }
        let mut pre = Map::new();
        if let Some(u) = &self.uid {
            pre.insert("uid".into(), Value::from(u.as_str()));
        }
        if let Some(rv) = self.resource_version {
            pre.insert("resourceVersion".into(), Value::from(rv.to_string()));
        }
        if !pre.is_empty() {
            m.insert("preconditions".into(), Value::Object(pre));
        }
        if dry_run {
            m.insert("dryRun".into(), Value::from(vec!["All"]));
        }
        serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
    }

    fn validate(&self) -> Result<(), ApiError> {
        if self.orphan_dependents.is_some() && self.propagation.is_some() {
            let p = match self.propagation {
                Some(Propagation::Orphan) => "Orphan",
                Some(Propagation::Background) => "Background",
                _ => "Foreground",
            };
            return Err(ApiError::invalid(
                "DeleteOptions",
                "",
                vec![(
                    "FieldValueInvalid",
                    "propagationPolicy".into(),
                    format!(
                        "Invalid value: \"{p}\": orphanDependents and deletionPropagation cannot be both set"
                    ),
                )],
            ));
        }
        Ok(())
    }
}

fn int(m: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(format!("{key} must be an integer, not {v}"))),
    }
}

fn propagation(s: &str) -> Result<Propagation, ApiError> {
    match s {
        "Orphan" => Ok(Propagation::Orphan),
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        other => Err(ApiError::invalid(
            "DeleteOptions",
            "",
            vec![(
                "FieldValueNotSupported",
                "propagationPolicy".into(),
                format!(
                    "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )],
        )),
    }
}

/// A resource's default garbage collection policy (`DefaultGarbageCollectionPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcPolicy {
    /// Dependents are deleted in the background unless the request says otherwise.
    DeleteDependents,
    /// Dependents are orphaned unless the request says otherwise (core/v1 ReplicationControllers,
    /// for backwards compatibility).
    OrphanDependents,
    /// The resource is never garbage collected (Events): no GC finalizer is ever set.
    Unsupported,
}

/// How upstream's registry deletes one resource's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strategy {
    /// Graceful deletion (`RESTGracefulDeleteStrategy`): pods.
    pub graceful: bool,
    /// A DELETE answers the deleted object (`ReturnDeletedObject`), else a `Status`.
    pub returns_object: bool,
    pub gc: GcPolicy,
}

impl Strategy {
    /// Upstream's strategy for a resource, by API group and plural (kube-apiserver 1.35's
    /// registries; custom resources and everything else use the generic store's defaults).
    pub fn for_resource(group: &str, plural: &str) -> Strategy {
        let returns_object = matches!(
            (group, plural),
            (
                "",
                "pods"
                    | "services"
                    | "namespaces"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
                    | "serviceaccounts"
                    | "resourcequotas"
                    | "podtemplates"
            ) | (
                "storage.k8s.io",
                "csidrivers"
                    | "storageclasses"
                    | "volumeattachments"
                    | "csinodes"
                    | "volumeattributesclasses"
            ) | (
                "resource.k8s.io",
                "resourceclaimtemplates"
                    | "resourceslices"
                    | "resourceclaims"
                    | "deviceclasses"
                    | "devicetaintrules"
            )
        );
        let gc = match (group, plural) {
            ("" | "events.k8s.io", "events") => GcPolicy::Unsupported,
            ("", "replicationcontrollers") => GcPolicy::OrphanDependents,
            _ => GcPolicy::DeleteDependents,
        };
        Strategy {
            graceful: group.is_empty() && plural == "pods",
            returns_object,
            gc,
        }
    }
}

/// What a DELETE does to the stored object.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Remove it now.
    Delete,
    /// Write this state of the object (deletion timestamp, grace period, finalizers). Then, with
    /// `delete`, remove it (a graceful deletion with a grace period of 0); else it stays until its
    /// grace period ends or its finalizers are gone (`deleted = false`).
    Update {
        object: Map<String, Value>,
        delete: bool,
    },
    /// Being deleted already, with a grace period no longer than the one asked: nothing changes,
    /// and the answer is the object as it is.
    Pending,
}

fn meta(obj: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_mut(obj: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let m = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    match m {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

fn str_at<'a>(obj: &'a Map<String, Value>, path: &[&str]) -> Option<&'a str> {
    let mut v = obj.get(*path.first()?)?;
    for p in path.get(1..).unwrap_or_default() {
        v = v.get(*p)?;
    }
    v.as_str()
}

fn finalizers(obj: &Map<String, Value>) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn deletion_timestamp(obj: &Map<String, Value>) -> Option<SystemTime> {
    meta(obj)
        .and_then(|m| m.get("deletionTimestamp"))
        .and_then(Value::as_str)
        .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
}

fn grace_period(obj: &Map<String, Value>) -> Option<i64> {
    meta(obj)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
}

fn rfc3339(t: SystemTime) -> Value {
    Value::String(humantime::format_rfc3339_seconds(t).to_string())
}

fn shifted(t: SystemTime, secs: i64) -> SystemTime {
    let d = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        t.checked_add(d).unwrap_or(t)
    } else {
        t.checked_sub(d).unwrap_or(t)
    }
}

/// Whole seconds, as `metav1.Time` keeps them.
fn truncated(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn bump_generation(m: &mut Map<String, Value>) {
    if let Some(g) = m.get("generation").and_then(Value::as_i64)
        && g > 0
    {
        m.insert("generation".into(), Value::from(g + 1));
    }
}

/// `BeforeDelete`: (graceful, pending). Sets the deletion timestamp and grace period of a
/// graceful deletion on `obj`, and the grace period chosen in `grace` (`CheckGracefulDelete`).
fn before_delete(
    strategy: Strategy,
    obj: &mut Map<String, Value>,
    grace: &mut Option<i64>,
    now: SystemTime,
) -> (bool, bool) {
    if grace.is_some_and(|g| g < 0) {
        *grace = Some(1);
    }
    if !strategy.graceful {
        return (false, false);
    }
    if let Some(ts) = deletion_timestamp(obj) {
        let Some(current) = grace_period(obj).map(|g| if g < 0 { 1 } else { g }) else {
            return (false, false);
        };
        if current == 0 {
            return (false, false);
        }
        let Some(mut period) = *grace else {
            *grace = Some(current);
            return (false, true);
        };
        if period >= current {
            return (false, true);
        }
        // Only shorter: the timestamp moves back by the difference, never into the past.
        let mut new_ts = shifted(shifted(ts, -current), period);
        let now = truncated(now);
        if new_ts < now {
            new_ts = now;
            if period != 0 {
                period = 1;
            }
        }
        let m = meta_mut(obj);
        m.insert("deletionTimestamp".into(), rfc3339(new_ts));
        m.insert("deletionGracePeriodSeconds".into(), Value::from(period));
        return (true, false);
    }
    // CheckGracefulDelete (pods): the request's period, else the pod's own, 0 for a pod that is
    // not bound or has terminated.
    let mut period = grace.unwrap_or_else(|| {
        obj.get("spec")
            .and_then(|s| s.get("terminationGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    });
    if str_at(obj, &["spec", "nodeName"]).is_none_or(str::is_empty) {
        period = 0;
    }
    if matches!(
        str_at(obj, &["status", "phase"]),
        Some("Failed" | "Succeeded")
    ) {
        period = 0;
    }
    if period < 0 {
        period = 1;
    }
    *grace = Some(period);
    let m = meta_mut(obj);
    m.insert(
        "deletionTimestamp".into(),
        rfc3339(shifted(truncated(now), period)),
    );
    m.insert("deletionGracePeriodSeconds".into(), Value::from(period));
    bump_generation(m);
    (true, false)
}

/// `deletionFinalizersForGarbageCollection`: the finalizers after the options' GC policy, when
/// they change.
fn gc_finalizers(
    strategy: Strategy,
    obj: &Map<String, Value>,
    o: &DeleteOptions,
) -> Option<Vec<String>> {
    let current = finalizers(obj);
    // The first of the two the object has decides when the request says nothing.
    let first = current.iter().find(|c| *c == ORPHAN || *c == FOREGROUND);
    let unsupported = strategy.gc == GcPolicy::Unsupported;
    let orphan = !unsupported
        && match (o.orphan_dependents, o.propagation, first) {
            (Some(b), _, _) => b,
            (None, Some(p), _) => p == Propagation::Orphan,
            (None, None, Some(f)) => f == ORPHAN,
            (None, None, None) => strategy.gc == GcPolicy::OrphanDependents,
        };
    let foreground = !unsupported
        && match (o.orphan_dependents, o.propagation, first) {
            (Some(_), _, _) => false,
            (None, Some(p), _) => p == Propagation::Foreground,
            (None, None, f) => f.is_some_and(|f| f == FOREGROUND),
        };
    let mut new: Vec<String> = current
        .iter()
        .filter(|f| *f != ORPHAN && *f != FOREGROUND)
        .cloned()
        .collect();
    if orphan {
        new.push(ORPHAN.into());
    }
    if foreground {
        new.push(FOREGROUND.into());
    }
    let same = {
        let mut a = current.clone();
        let mut b = new.clone();
        a.sort();
        a.dedup();
        b.sort();
        b.dedup();
        a == b
    };
    (!same).then_some(new)
}

/// `markAsDeleting`: an object with finalizers that is not deleted gracefully gets a deletion
/// timestamp (now, unless it has an earlier one) and a grace period of 0.
fn mark_as_deleting(obj: &mut Map<String, Value>, now: SystemTime) {
    let existing = deletion_timestamp(obj);
    let m = meta_mut(obj);
    if existing.is_none() {
        bump_generation(m);
    }
    let now = truncated(now);
    if existing.is_none_or(|t| t > now) {
        m.insert("deletionTimestamp".into(), rfc3339(now));
    }
    m.insert("deletionGracePeriodSeconds".into(), Value::from(0));
}

/// What a DELETE does to `obj` (the stored object as read, without its resourceVersion, which
/// is `rv`), as upstream's `Store.Delete` and `updateForGracefulDeletionAndFinalizers`.
///
/// # Errors
/// 409 Conflict when a precondition (uid, resourceVersion) does not hold, with upstream's
/// message (which names the kind, as `BeforeDelete` does, where other conflicts name the
/// resource).
pub fn plan(
    strategy: Strategy,
    (group, kind): (&str, &str),
    obj: &Map<String, Value>,
    rv: u64,
    o: &DeleteOptions,
    now: SystemTime,
) -> Result<Plan, ApiError> {
    let name = str_at(obj, &["metadata", "name"]).unwrap_or_default();
    if let Some(uid) = &o.uid {
        let have = str_at(obj, &["metadata", "uid"]).unwrap_or_default();
        if uid != have {
            return Err(ApiError::conflict_because(
                group,
                kind,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({have}). The object might have been deleted and then recreated"
                ),
            ));
        }
    }
    if let Some(want) = o.resource_version
        && want != rv
    {
        return Err(ApiError::conflict_because(
            group,
            kind,
            name,
            &format!(
                "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified"
            ),
        ));
    }
    let mut out = obj.clone();
    let mut grace = o.grace_period_seconds;
    let (graceful, pending) = before_delete(strategy, &mut out, &mut grace, now);
    if pending {
        return Ok(Plan::Pending);
    }
    if let Some(f) = gc_finalizers(strategy, &out, o) {
        meta_mut(&mut out).insert(
            "finalizers".into(),
            Value::Array(f.into_iter().map(Value::String).collect()),
        );
    }
    let pending_finalizers = !finalizers(&out).is_empty();
    if !graceful {
        if !pending_finalizers {
            return Ok(Plan::Delete);
        }
        mark_as_deleting(&mut out, now);
        return Ok(Plan::Update {
            object: out,
            delete: false,
        });
    }
    Ok(Plan::Update {
        object: out,
        delete: !pending_finalizers && grace.unwrap_or(0) <= 0,
    })
}

/// `BeforeUpdate` and `ValidateObjectMetaAccessorUpdate` for deletion: an update keeps the
/// stored deletion timestamp and grace period, may not set a deletion timestamp on an object
/// that has none, and may not add finalizers to an object being deleted.
///
/// # Errors
/// 422 Invalid with upstream's causes.
pub fn before_update(
    kind: &str,
    old: &Map<String, Value>,
    new: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    let old_meta = meta(old).cloned().unwrap_or_default();
    let name = str_at(new, &["metadata", "name"])
        .unwrap_or_default()
        .to_owned();
    let mut causes = Vec::new();
    {
        let m = meta_mut(new);
        if let Some(ts) = old_meta.get("deletionTimestamp").filter(|v| !v.is_null()) {
            m.insert("deletionTimestamp".into(), ts.clone());
        } else if let Some(ts) = m.get("deletionTimestamp").filter(|v| !v.is_null()) {
            let shown = ts
                .as_str()
                .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
                .map_or_else(|| ts.to_string(), go_time);
            causes.push((
                "FieldValueInvalid",
                "metadata.deletionTimestamp".to_owned(),
                format!("Invalid value: {shown}: field is immutable"),
            ));
        }
        if let Some(g) = old_meta
            .get("deletionGracePeriodSeconds")
            .filter(|v| !v.is_null())
            && m.get("deletionGracePeriodSeconds")
                .is_none_or(Value::is_null)
        {
            m.insert("deletionGracePeriodSeconds".into(), g.clone());
        }
    }
    if old_meta
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        let before = finalizers(old);
        let mut extra: Vec<String> = finalizers(new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            let list: Vec<String> = extra.iter().map(|f| format!("{f:?}")).collect();
            causes.push((
                "FieldValueForbidden",
                "metadata.finalizers".to_owned(),
                format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    list.join(", ")
                ),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind, &name, causes))
    }
}

/// Go's `time.Time.String()` of a UTC time, as upstream's field errors print a `metav1.Time`.
fn go_time(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    // 2006-01-02T15:04:05Z → 2006-01-02 15:04:05 +0000 UTC
    format!(
        "{} +0000 UTC",
        s.trim_end_matches('Z').replacen('T', " ", 1)
    )
}

/// `ShouldDeleteDuringUpdate`: an update that leaves no finalizers on an object being deleted
/// with no grace period left deletes it.
pub fn deletes_on_update(old: &Map<String, Value>, new: &Map<String, Value>) -> bool {
    finalizers(new).is_empty()
        && deletion_timestamp(old).is_some()
        && grace_period(old).is_none_or(|g| g == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn at(s: &str) -> SystemTime {
        humantime::parse_rfc3339(s).unwrap()
    }

    const NOW: &str = "2026-03-04T05:06:07Z";

    fn pods() -> Strategy {
        Strategy::for_resource("", "pods")
    }

    fn bound_pod() -> Map<String, Value> {
        obj(
            json!({"metadata": {"name": "p", "uid": "u1", "generation": 1},
            "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running"}}),
        )
    }

    fn planned(s: Strategy, o: &Map<String, Value>, opts: &DeleteOptions) -> Plan {
        plan(s, ("", "Pod"), o, 7, opts, at(NOW)).unwrap()
    }

    fn updated(p: Plan) -> (Map<String, Value>, bool) {
        match p {
            Plan::Update { object, delete } => (object, delete),
            other => panic!("expected an update, got {other:?}"),
        }
    }

    #[test]
    fn a_bound_pod_is_deleted_gracefully_with_its_own_period() {
        let (o, delete) = updated(planned(pods(), &bound_pod(), &DeleteOptions::default()));
        assert!(!delete);
        assert_eq!(o["metadata"]["deletionTimestamp"], "2026-03-04T05:06:37Z");
        assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 30);
        assert_eq!(o["metadata"]["generation"], 2);
        // Asked again with the same or a longer period: pending, nothing changes.
        assert_eq!(
            planned(pods(), &o, &DeleteOptions::default()),
            Plan::Pending
        );
        let longer = DeleteOptions {
            grace_period_seconds: Some(60),
            ..DeleteOptions::default()
        };
        assert_eq!(planned(pods(), &o, &longer), Plan::Pending);
        // A shorter period moves the timestamp back; 0 then removes it.
        let shorter = DeleteOptions {
            grace_period_seconds: Some(10),
            ..DeleteOptions::default()
        };
        let (o2, delete) = updated(planned(pods(), &o, &shorter));
        assert!(!delete);
        assert_eq!(o2["metadata"]["deletionTimestamp"], "2026-03-04T05:06:17Z");
        assert_eq!(o2["metadata"]["deletionGracePeriodSeconds"], 10);
        let zero = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        let (o3, delete) = updated(planned(pods(), &o2, &zero));
        assert!(delete, "grace 0: written, then removed");
        assert_eq!(o3["metadata"]["deletionTimestamp"], NOW);
        assert_eq!(o3["metadata"]["deletionGracePeriodSeconds"], 0);
        // Once at 0, a further DELETE removes it.
        assert_eq!(
            planned(pods(), &o3, &DeleteOptions::default()),
            Plan::Delete
        );
    }

    #[test]
    fn grace_zero_unbound_and_finished_pods_are_written_then_removed() {
        let zero = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        let (o, delete) = updated(planned(pods(), &bound_pod(), &zero));
        assert!(delete);
        assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 0);
        let mut unbound = bound_pod();
        unbound["spec"]["nodeName"] = json!("");
        let (_, delete) = updated(planned(pods(), &unbound, &DeleteOptions::default()));
        assert!(delete);
        let mut done = bound_pod();
        done["status"]["phase"] = json!("Succeeded");
        let (_, delete) = updated(planned(pods(), &done, &DeleteOptions::default()));
        assert!(delete);
        // A negative period is 1 s.
        let negative = DeleteOptions {
            grace_period_seconds: Some(-5),
            ..DeleteOptions::default()
        };
        let (o, delete) = updated(planned(pods(), &bound_pod(), &negative));
        assert!(!delete);
        assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 1);
    }

    #[test]
    fn finalizers_keep_an_object_until_an_update_empties_them() {
        let cm = Strategy::for_resource("", "configmaps");
        let plain = obj(json!({"metadata": {"name": "c"}}));
        assert_eq!(planned(cm, &plain, &DeleteOptions::default()), Plan::Delete);
        let held = obj(json!({"metadata": {"name": "c", "finalizers": ["example.com/hold"]}}));
        let (o, delete) = updated(planned(cm, &held, &DeleteOptions::default()));
        assert!(!delete);
        assert_eq!(o["metadata"]["deletionTimestamp"], NOW);
        assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 0);
        // Deleting again changes nothing (the write is skipped as a no-op by the caller).
        let (again, _) = updated(planned(cm, &o, &DeleteOptions::default()));
        assert_eq!(again, o);
        // An update emptying the finalizers deletes it; one keeping them does not.
        let mut emptied = o.clone();
        emptied["metadata"]["finalizers"] = json!([]);
        assert!(deletes_on_update(&o, &emptied));
        assert!(!deletes_on_update(&o, &o));
        assert!(!deletes_on_update(&held, &emptied), "not being deleted");
    }

    #[test]
    fn propagation_policies_add_the_garbage_collectors_finalizers() {
        let deploy = Strategy::for_resource("apps", "deployments");
        let d = obj(json!({"metadata": {"name": "d", "generation": 3}}));
        let with = |p| DeleteOptions {
            propagation: Some(p),
            ..DeleteOptions::default()
        };
        let (o, delete) = updated(planned(deploy, &d, &with(Propagation::Orphan)));
        assert!(!delete);
        assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]));
        assert_eq!(o["metadata"]["generation"], 4);
        let (o, _) = updated(planned(deploy, &d, &with(Propagation::Foreground)));
        assert_eq!(o["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        assert_eq!(
            planned(deploy, &d, &with(Propagation::Background)),
            Plan::Delete
        );
        let orphan_flag = DeleteOptions {
            orphan_dependents: Some(true),
            ..DeleteOptions::default()
        };
        let (o, _) = updated(planned(deploy, &d, &orphan_flag));
        assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]));
        // Background on an object with the orphan finalizer takes it off, and deletes.
        let orphaning = obj(json!({"metadata": {"name": "d", "finalizers": ["orphan"]}}));
        assert_eq!(
            planned(deploy, &orphaning, &with(Propagation::Background)),
            Plan::Delete
        );
        // ReplicationControllers orphan by default; events never get GC finalizers.
        let rc = Strategy::for_resource("", "replicationcontrollers");
        let (o, _) = updated(planned(rc, &d, &DeleteOptions::default()));
        assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]));
        let events = Strategy::for_resource("", "events");
        assert_eq!(
            planned(events, &d, &with(Propagation::Orphan)),
            Plan::Delete
        );
    }

    #[test]
    fn preconditions_and_options_are_checked_as_upstream() {
        let p = bound_pod();
        let uid = DeleteOptions {
            uid: Some("other".into()),
            ..DeleteOptions::default()
        };
        let e = plan(pods(), ("", "Pod"), &p, 7, &uid, at(NOW)).unwrap_err();
        assert_eq!(e.code(), 409);
        let rv = DeleteOptions {
            resource_version: Some(6),
            ..DeleteOptions::default()
        };
        assert_eq!(
            plan(pods(), ("", "Pod"), &p, 7, &rv, at(NOW))
                .unwrap_err()
                .code(),
            409
        );
        assert_eq!(
            DeleteOptions::from_json(br#"{"propagationPolicy":"Sideways"}"#)
                .unwrap_err()
                .code(),
            422
        );
        assert_eq!(
            DeleteOptions::from_json(br#"{"propagationPolicy":"Orphan","orphanDependents":true}"#)
                .unwrap_err()
                .code(),
            422
        );
        let q =
            DeleteOptions::from_query(Some("gracePeriodSeconds=0&propagationPolicy=Foreground"))
                .unwrap();
        assert_eq!(q.grace_period_seconds, Some(0));
        assert_eq!(q.propagation, Some(Propagation::Foreground));
        assert_eq!(
            DeleteOptions::from_query(Some("gracePeriodSeconds=x"))
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn updates_keep_the_deletion_and_add_no_finalizers_while_deleting() {
        let old = obj(json!({"metadata": {"name": "c", "deletionTimestamp": NOW,
            "deletionGracePeriodSeconds": 0, "finalizers": ["a"]}}));
        let mut new = obj(json!({"metadata": {"name": "c", "finalizers": ["a"]}}));
        before_update("ConfigMap", &old, &mut new).unwrap();
        assert_eq!(new["metadata"]["deletionTimestamp"], NOW);
        assert_eq!(new["metadata"]["deletionGracePeriodSeconds"], 0);
        let mut more = obj(json!({"metadata": {"name": "c", "finalizers": ["a", "b"]}}));
        let e = before_update("ConfigMap", &old, &mut more).unwrap_err();
        assert_eq!(e.code(), 422);
        let live = obj(json!({"metadata": {"name": "c"}}));
        let mut set = obj(json!({"metadata": {"name": "c", "deletionTimestamp": NOW}}));
        assert_eq!(
            before_update("ConfigMap", &live, &mut set)
                .unwrap_err()
                .code(),
            422
        );
        assert_eq!(go_time(at(NOW)), "2026-03-04 05:06:07 +0000 UTC");
    }
}
