//! What a request asks, as authorizers see it (upstream's `authorizer.Attributes` and the
//! `RequestInfo` it is built from): a verb on a resource (group, resource, subresource,
//! namespace, name), or a verb on a non-resource path; and an authorizer's answer to it.

use watchcache::Selection;

use super::user::User;
use crate::metrics::RequestKey;

/// One authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied, why.
    Deny(String),
    /// This authorizer does not decide (the reason, if any, is part of a final denial).
    NoOpinion(String),
}

/// A resource request's target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The API group (`""` for the core group).
    pub group: String,
    /// The API version.
    pub version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource (`status`), or empty.
    pub subresource: String,
    /// The namespace, or empty.
    pub namespace: String,
    /// The object's name, or empty.
    pub name: String,
}

/// What a request asks, before anything is read from the body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for a
    /// non-resource request, the lower-case HTTP method.
    pub verb: String,
    /// The resource, for a resource request.
    pub resource: Option<ResourceInfo>,
    /// The request path.
    pub path: String,
}

impl RequestInfo {
    /// Reads a request as upstream's `RequestInfoFactory` does: `/api/{v}/...` and
    /// `/apis/{g}/{v}/...` with optional `namespaces/{ns}/`, then resource, name, subresource.
    /// Paths are not percent-decoded beyond what the segment decoder does for names.
    pub fn new(method: &str, path: &str, watch: bool) -> RequestInfo {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let non_resource = || RequestInfo {
            verb: method.to_ascii_lowercase(),
            resource: None,
            path: path.to_owned(),
        };
        let (group, version, rest) = match segs.as_slice() {
            ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
            _ => return non_resource(),
        };
        // `namespaces/{ns}/{resource}...` is namespaced; `namespaces` and `namespaces/{ns}`
        // themselves (and `namespaces/{ns}/status`) are the namespaces resource.
        let (namespace, rest) = match rest {
            ["namespaces", ns, r, tail @ ..] if *r != "status" && *r != "finalize" => (
                *ns,
                std::iter::once(*r)
                    .chain(tail.iter().copied())
                    .collect::<Vec<_>>(),
            ),
            ["namespaces", ns, tail @ ..] => (*ns, {
                let mut v = vec!["namespaces", *ns];
                v.extend(tail.iter().copied());
                v
            }),
            other => ("", other.to_vec()),
        };
        let (resource, name, subresource) = match rest.as_slice() {
            [r] => (*r, "", ""),
            [r, n] => (*r, *n, ""),
            [r, n, s, ..] => (*r, *n, *s),
            [] => return non_resource(),
        };
        // `namespaces/{ns}` names the namespace object: its namespace attribute is itself.
        let namespace = if resource == "namespaces" && !name.is_empty() {
            name
        } else {
            namespace
        };
        let verb = match method {
            "GET" | "HEAD" if watch => "watch",
            "GET" | "HEAD" if name.is_empty() => "list",
            "GET" | "HEAD" => "get",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if name.is_empty() => "deletecollection",
            "DELETE" => "delete",
            other => {
                return RequestInfo {
                    verb: other.to_ascii_lowercase(),
                    ..non_resource()
                };
            }
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        RequestInfo {
            verb: verb.to_owned(),
            resource: Some(ResourceInfo {
                group: group.to_owned(),
                version: version.to_owned(),
                resource: resource.to_owned(),
                subresource: subresource.to_owned(),
                namespace: decode(namespace),
                name: decode(name),
            }),
            path: path.to_owned(),
        }
    }

    /// Whether this request streams or may last long, by upstream's rule
    /// (`BasicLongRunningRequestCheck`): a watch, or (forwarded in proxy mode) `proxy`, `exec`,
    /// `attach`, `portforward` or `log`. Such a request is not counted by
    /// `--max-requests-inflight` and has no `--request-timeout`.
    pub fn is_long_running(&self) -> bool {
        self.verb == "watch"
            || self.verb == "proxy"
            || self.resource.as_ref().is_some_and(|r| {
                matches!(
                    r.subresource.as_str(),
                    "proxy" | "exec" | "attach" | "portforward" | "log"
                )
            })
    }

    /// Whether this request changes something (the audit log records every one).
    pub fn is_write(&self) -> bool {
        self.resource.is_some()
            && matches!(
                self.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
    }
}

/// One authorization question.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// Who asks.
    pub user: &'a User,
    /// What is asked.
    pub info: &'a RequestInfo,
    /// For a list or watch, what it selects (already parsed for the cache): the Node
    /// authorizer reads the `spec.nodeName` a kubelet pins.
    pub selection: Option<&'a Selection>,
}

/// Upstream's Forbidden message (`responsewriters.forbiddenMessage` and `NewForbidden`), and
/// the `details` (group, kind = resource, name).
pub(super) fn forbidden_message(
    user: &User,
    info: &RequestInfo,
    reason: &str,
) -> (String, String, String, String) {
    let reason = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    let Some(r) = &info.resource else {
        return (
            format!(
                "forbidden: User {:?} cannot {} path {:?}{reason}",
                user.name, info.verb, info.path
            ),
            String::new(),
            String::new(),
            String::new(),
        );
    };
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let what = if r.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            user.name, info.verb, resource, r.group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            user.name, info.verb, resource, r.group, r.namespace
        )
    };
    let qualified = if r.group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.group)
    };
    let message = if r.name.is_empty() {
        format!("{qualified} is forbidden: {what}{reason}")
    } else {
        format!("{qualified} {:?} is forbidden: {what}{reason}", r.name)
    };
    (message, r.group.clone(), r.resource.clone(), r.name.clone())
}

// Read here, where the request is known; counted in `metrics.rs`, which knows no request.
impl RequestInfo {
    /// This request's labels in the request metrics (`metrics.rs`): upstream's verb (`GET`,
    /// `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `DELETE`, `DELETECOLLECTION`, or the method of a
    /// non-resource request) and scope
    /// (`resource` when it names an object, `namespace`, `cluster`); group, version, resource and
    /// subresource only when this server serves the resource (`served`: the request's path
    /// names a resource served here).
    pub(crate) fn metrics_key(&self, served: bool) -> RequestKey {
        let info = self;
        let verb = match info.verb.as_str() {
            "get" => "GET",
            "list" => "LIST",
            "watch" => "WATCH",
            "create" | "post" => "POST",
            "update" | "put" => "PUT",
            "patch" => "PATCH",
            "delete" => "DELETE",
            "deletecollection" => "DELETECOLLECTION",
            "head" => "HEAD",
            "options" => "OPTIONS",
            _ => "OTHER",
        };
        let served = info.resource.as_ref().filter(|_| served);
        let (group, version, resource, subresource, scope) = match served {
            Some(r) => (
                r.group.clone(),
                r.version.clone(),
                r.resource.clone(),
                if r.subresource == "status" {
                    "status"
                } else {
                    ""
                },
                if !r.name.is_empty() || verb == "POST" {
                    "resource"
                } else if !r.namespace.is_empty() {
                    "namespace"
                } else {
                    "cluster"
                },
            ),
            None => (String::new(), String::new(), String::new(), "", ""),
        };
        RequestKey {
            verb,
            dry_run: "",
            group,
            version,
            resource,
            subresource,
            scope,
            component: "apiserver",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(info: &RequestInfo) -> (&str, &str, &str, &str, &str, &str) {
        let r = info.resource.as_ref().unwrap();
        (
            info.verb.as_str(),
            r.group.as_str(),
            r.resource.as_str(),
            r.subresource.as_str(),
            r.namespace.as_str(),
            r.name.as_str(),
        )
    }

    #[test]
    fn request_info_as_upstream() {
        let i = RequestInfo::new("GET", "/api/v1/namespaces/ns/pods", false);
        assert_eq!(res(&i), ("list", "", "pods", "", "ns", ""));
        let i = RequestInfo::new("GET", "/api/v1/pods", true);
        assert_eq!(res(&i), ("watch", "", "pods", "", "", ""));
        let i = RequestInfo::new("PUT", "/api/v1/nodes/n1/status", false);
        assert_eq!(res(&i), ("update", "", "nodes", "status", "", "n1"));
        let i = RequestInfo::new("DELETE", "/apis/apps/v1/namespaces/a/deployments", false);
        assert_eq!(
            res(&i),
            ("deletecollection", "apps", "deployments", "", "a", "")
        );
        let i = RequestInfo::new("GET", "/api/v1/namespaces/kube-system", false);
        assert_eq!(
            res(&i),
            ("get", "", "namespaces", "", "kube-system", "kube-system")
        );
        let i = RequestInfo::new("GET", "/api/v1/namespaces/a%20b/secrets/x%2Dy", false);
        assert_eq!(res(&i), ("get", "", "secrets", "", "a b", "x-y"));
        for p in [
            "/metrics",
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps/v1",
            "/readyz",
            "/",
        ] {
            let i = RequestInfo::new("GET", p, false);
            assert!(i.resource.is_none(), "{p}");
            assert_eq!(i.verb, "get");
        }
        assert!(RequestInfo::new("POST", "/api/v1/namespaces/a/pods", false).is_write());
        assert!(!RequestInfo::new("GET", "/api/v1/pods", false).is_write());
        // Upstream's long-running requests: no in-flight permit, no request timeout.
        for (method, path, watch) in [
            ("GET", "/api/v1/pods", true),
            ("POST", "/api/v1/namespaces/a/pods/p/exec", false),
            ("GET", "/api/v1/namespaces/a/pods/p/log", false),
            ("POST", "/api/v1/namespaces/a/pods/p/portforward", false),
        ] {
            assert!(
                RequestInfo::new(method, path, watch).is_long_running(),
                "{path}"
            );
        }
        for path in [
            "/api/v1/pods",
            "/api/v1/namespaces/a/pods/p/status",
            "/readyz",
        ] {
            assert!(
                !RequestInfo::new("GET", path, false).is_long_running(),
                "{path}"
            );
        }
    }

    #[test]
    fn forbidden_messages_have_upstreams_three_shapes() {
        let u = User::authenticated("x", "", vec![]);
        let (m, g, k, n) = forbidden_message(
            &u,
            &RequestInfo::new("GET", "/api/v1/namespaces/ns/pods", false),
            "",
        );
        assert_eq!(
            m,
            r#"pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "ns""#
        );
        assert_eq!((g.as_str(), k.as_str(), n.as_str()), ("", "pods", ""));
        let (m, g, k, n) = forbidden_message(
            &u,
            &RequestInfo::new(
                "PATCH",
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
                false,
            ),
            "because",
        );
        assert_eq!(
            m,
            r#"clusterroles.rbac.authorization.k8s.io "admin" is forbidden: User "x" cannot patch resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope: because"#
        );
        assert_eq!(
            (g.as_str(), k.as_str(), n.as_str()),
            ("rbac.authorization.k8s.io", "clusterroles", "admin")
        );
        let (m, ..) = forbidden_message(&u, &RequestInfo::new("GET", "/metrics", false), "");
        assert_eq!(m, r#"forbidden: User "x" cannot get path "/metrics""#);
        let (m, ..) = forbidden_message(
            &u,
            &RequestInfo::new("PUT", "/api/v1/nodes/n1/status", false),
            "",
        );
        assert_eq!(
            m,
            r#"nodes "n1" is forbidden: User "x" cannot update resource "nodes/status" in API group "" at the cluster scope"#
        );
    }
}
