//! Admission of the writes this server carries out itself, as kube-apiserver's admission and
//! RBAC's registry do them:
//!
//! - **NamespaceLifecycle**: an object is not created, updated or patched in a namespace that
//!   does not exist (404 `namespaces "x" not found`), nor created in one that is terminating (403,
//!   with a `NamespaceTerminating` cause). Checked when the namespaces resource is served; a
//!   namespace missing from the cache is looked up again with a consistent read (upstream's
//!   live lookup), so a namespace created just before is found. Deletes always pass.
//! - **ServiceAccount**'s mirror-pod rule: a created mirror pod names no service account, Secret
//!   or projected token, whoever creates it (upstream runs it before NodeRestriction).
//! - **NodeRestriction** (`node_restriction.rs`): what a kubelet may write, for the writes applied
//!   here.
//! - **RBAC escalation** (`auth/escalation.rs`): a write of a Role, ClusterRole, RoleBinding or
//!   ClusterRoleBinding by an authenticated user, checked on the object as it will be stored.
//! - **System namespaces**: with the namespaces resource served and writable (not in proxy
//!   mode), the server creates `default`, `kube-system`, `kube-public` and `kube-node-lease` when
//!   they are missing, as kube-apiserver's bootstrap and system-namespaces controllers do, so a
//!   fresh etcd is usable at once (`kubectl run` in `default`); `/readyz` waits for it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::cache::Cache;
use crate::model::{FieldPath, ResourceDef, ResourceVersion};
use crate::server::auth::{RequestInfo, User};
use crate::server::node_restriction;
use crate::server::params::WriteParams;
use crate::server::state::AppState;
use crate::server::status::ApiError;
use crate::server::writes::{self, AdmitFn};

/// The served namespaces cache, if any.
fn namespaces(st: &AppState) -> Option<&Cache> {
    st.caches().find(|c| {
        let d = c.definition();
        d.group.is_empty() && d.plural == "namespaces"
    })
}

/// NamespaceLifecycle for a create (`creating`), update or patch of an object of `def` in
/// `namespace`; `name` gives the object's name (read from the body only for the rare 403).
///
/// # Errors
/// 404 when the namespace does not exist; 403 when creating in a terminating namespace; the
/// namespaces cache's own error (429 while it is not ready).
pub(crate) async fn namespace_lifecycle(
    st: &AppState,
    def: &ResourceDef,
    namespace: Option<&str>,
    creating: bool,
    name: impl FnOnce() -> String,
) -> Result<(), ApiError> {
    let (Some(ns), true) = (namespace, def.namespaced) else {
        return Ok(());
    };
    let Some(cache) = namespaces(st) else {
        return Ok(());
    };
    let found = match cache.get(None, ns, ResourceVersion::Any).await {
        Err(crate::Error::NotFound { .. }) => {
            // Not in the cache (yet): a consistent read waits for the cache to hold every
            // namespace created before this request.
            cache.get(None, ns, ResourceVersion::Unset).await
        }
        other => other,
    };
    let namespace_obj = match found {
        Ok(o) => o,
        Err(crate::Error::NotFound { .. }) => {
            return Err(ApiError::not_found("", "namespaces", ns));
        }
        Err(e) => return Err(e.into()),
    };
    if creating {
        let phase = FieldPath::parse("status.phase")
            .ok()
            .and_then(|p| namespace_obj.field(&p).map(|v| v.into_owned()));
        if phase.as_deref() == Some("Terminating") {
            let name = name();
            return Err(ApiError::forbidden(
                format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    qualified(def)
                ),
                def.group.clone(),
                def.plural.clone(),
                name,
            )
            .with_cause(
                "NamespaceTerminating",
                format!("namespace {ns} is being terminated"),
                "metadata.namespace",
            ));
        }
    }
    Ok(())
}

fn qualified(def: &ResourceDef) -> String {
    if def.group.is_empty() {
        def.plural.clone()
    } else {
        format!("{}.{}", def.plural, def.group)
    }
}

/// ServiceAccount admission's rule for mirror pods, which kube-apiserver runs before
/// NodeRestriction and for every user: a created pod with the mirror annotation names no service
/// account, no Secret (`VisitPodSecretNames`) and no projected service-account token (the kubelet
/// that mirrors a static pod cannot give it any).
///
/// # Errors
/// 403 with upstream's words.
fn mirror_pod_references(
    def: &ResourceDef,
    info: &RequestInfo,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), ApiError> {
    // The caller passes creates only (a PUT that creates is one too, as upstream's Create).
    let is_pod_create = def.group.is_empty()
        && def.plural == "pods"
        && info
            .resource
            .as_ref()
            .is_some_and(|r| r.subresource.is_empty());
    let mirror = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(node_restriction::MIRROR))
        .is_some();
    if !is_pod_create || !mirror {
        return Ok(());
    }
    let spec = obj.get("spec").unwrap_or(&serde_json::Value::Null);
    let mut secrets = false;
    crate::server::auth::node::pod_secret_names(spec, |_| secrets = true);
    let why = if spec["serviceAccountName"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        "a mirror pod may not reference service accounts"
    } else if secrets {
        "a mirror pod may not reference secrets"
    } else if spec["volumes"].as_array().is_some_and(|vs| {
        vs.iter().any(|v| {
            v["projected"]["sources"]
                .as_array()
                .is_some_and(|ss| ss.iter().any(|s| !s["serviceAccountToken"].is_null()))
        })
    }) {
        "a mirror pod may not use ServiceAccountToken volume projections"
    } else {
        return Ok(());
    };
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Err(ApiError::forbidden(
        format!("pods \"{name}\" is forbidden: {why}"),
        String::new(),
        "pods".to_owned(),
        name,
    ))
}

/// The admission of a write's object: ServiceAccount's mirror-pod rule for everyone, then, for an
/// authenticated user (none on an open server or the development listener, where nothing is
/// authorized either), NodeRestriction for kubelets and RBAC's escalation check.
pub(crate) fn object_admission<'a>(
    st: &'a AppState,
    def: &'a ResourceDef,
    user: Option<&'a User>,
    info: &'a RequestInfo,
) -> Box<AdmitFn<'a>> {
    Box::new(move |obj, old| {
        if old.is_none() {
            mirror_pod_references(def, info, obj)?;
        }
        authenticated_admission(st, def, user, info, obj, old)
    })
}

/// NodeRestriction for kubelets, then RBAC's escalation check, for an authenticated user.
fn authenticated_admission(
    st: &AppState,
    def: &ResourceDef,
    user: Option<&User>,
    info: &RequestInfo,
    obj: &serde_json::Map<String, serde_json::Value>,
    old: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<(), ApiError> {
    match (st.auth.get(), user) {
        (Some(auth), Some(user)) => {
            node_restriction::admit(user, info, def, obj, old, || {
                let node = user.node_name()?;
                let nodes = st.caches().find(|c| {
                    let d = c.definition();
                    d.group.is_empty() && d.plural == "nodes"
                })?;
                let o = nodes.peek(None, node)?;
                let v: serde_json::Value = serde_json::from_slice(&o.json_unkept()).ok()?;
                v["metadata"]["uid"].as_str().map(str::to_owned)
            })?;
            auth.confirm_no_escalation(user, info, obj, old)
        }
        _ => Ok(()),
    }
}

/// NodeRestriction for a kubelet's DELETE of a pod: only one bound to itself.
///
/// # Errors
/// 403 otherwise; the pods cache's error when the pod cannot be read.
pub(crate) async fn pod_delete_admission(
    st: &AppState,
    cache: &Cache,
    user: Option<&User>,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    let (Some(_), Some(user)) = (st.auth.get(), user) else {
        return Ok(());
    };
    let def = cache.definition();
    if user.node_name().is_none() || !(def.group.is_empty() && def.plural == "pods") {
        return Ok(());
    }
    let pod = cache.get(namespace, name, ResourceVersion::Unset).await?;
    let bound = FieldPath::parse("spec.nodeName")
        .ok()
        .and_then(|p| pod.field(&p).map(|v| v.into_owned()));
    node_restriction::admit_pod_delete(user, def, name, bound.as_deref())
}

/// The namespaces kube-apiserver makes sure of (`default` by its bootstrap controller, the others
/// by its system-namespaces controller).
pub(crate) const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates the missing system namespaces, retrying every second until each exists; then marks
/// them ready for `/readyz`. Nothing to do in proxy mode (the upstream has them) or when the
/// namespaces resource is not served with writes.
pub(crate) async fn create_system_namespaces(st: Arc<AppState>) {
    let served = st.served.iter().find(|s| {
        let d = s.cache.definition();
        d.group.is_empty() && d.plural == "namespaces"
    });
    let (Some(served), None) = (served, st.proxy.get()) else {
        st.system_namespaces.store(true, Ordering::Release);
        return;
    };
    let Some(w) = &served.writes else {
        st.system_namespaces.store(true, Ordering::Release);
        return;
    };
    let cache = &served.cache;
    let mut shutdown = st.shutdown.clone();
    loop {
        let mut missing = 0;
        if cache.is_ready() {
            for ns in SYSTEM_NAMESPACES {
                match cache.get(None, ns, ResourceVersion::Unset).await {
                    Ok(_) => continue,
                    Err(crate::Error::NotFound { .. }) => {}
                    Err(e) => {
                        tracing::debug!(namespace = ns, error = %e, "system namespace not read yet");
                        missing += 1;
                        continue;
                    }
                }
                let body = format!(r#"{{"metadata":{{"name":"{ns}"}}}}"#);
                match writes::create(
                    cache,
                    &**w,
                    None,
                    body.as_bytes(),
                    &WriteParams::default(),
                    &|_, _| Ok(()),
                )
                .await
                {
                    Ok(_) => tracing::info!(namespace = ns, "created the system namespace"),
                    Err(e) if e.code() == 409 => {}
                    Err(e) => {
                        tracing::warn!(namespace = ns, error = ?e, "cannot create a system namespace yet");
                        missing += 1;
                    }
                }
            }
        } else {
            missing += 1;
        }
        if missing == 0 {
            st.system_namespaces.store(true, Ordering::Release);
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn refused(pod: Value) -> Option<String> {
        let info = RequestInfo::new("POST", "/api/v1/namespaces/a/pods", false);
        let def = ResourceDef::builtin("pods").unwrap();
        let Value::Object(obj) = pod else {
            unreachable!()
        };
        mirror_pod_references(&def, &info, &obj)
            .err()
            .map(|e| e.message().to_owned())
    }

    /// ServiceAccount admission's mirror-pod rule, for every user (kube-apiserver 1.35 answers
    /// it before NodeRestriction: `k8s_apiserver::a_mirror_pod_kube_apiserver_refused_...`).
    #[test]
    fn mirror_pods_name_no_service_account_secret_or_token() {
        let mirror = |spec: Value| {
            json!({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}},
                "spec": spec})
        };
        assert_eq!(
            refused(mirror(json!({"serviceAccountName": "default"}))).as_deref(),
            Some("pods \"m\" is forbidden: a mirror pod may not reference service accounts")
        );
        assert_eq!(
            refused(mirror(
                json!({"volumes": [{"name": "p", "projected": {"sources":
                [{"secret": {"name": "s"}}]}}]})
            ))
            .as_deref(),
            Some("pods \"m\" is forbidden: a mirror pod may not reference secrets")
        );
        assert_eq!(
            refused(mirror(
                json!({"volumes": [{"name": "p", "projected": {"sources":
                [{"serviceAccountToken": {"path": "t"}}]}}]})
            ))
            .as_deref(),
            Some(
                "pods \"m\" is forbidden: a mirror pod may not use ServiceAccountToken volume \
                 projections"
            )
        );
        // A ConfigMap is NodeRestriction's to refuse (for nodes); not a mirror pod: no rule.
        assert_eq!(
            refused(mirror(
                json!({"volumes": [{"name": "c", "configMap": {"name": "c"}}]})
            )),
            None
        );
        assert_eq!(
            refused(json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "x"}})),
            None
        );
    }
}
