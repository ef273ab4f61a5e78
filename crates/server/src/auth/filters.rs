//! One admission path for every request, whichever transport serves it: hyper's requests (through
//! `gate.rs`) and the watch fast path (`watch/fast_path.rs`) both call [`admit`], and get back the
//! same decision together with the request as it was parsed for that decision. A rule added here
//! holds on both paths; a rule added to one of them only would be a bypass on the other (issue 21,
//! item 2: a repeated `watch=` was read one way for authorization and another way for serving).
//!
//! In order, as kube-apiserver's filter chain: the request is read once (verb, resource,
//! namespace, name, and a read's query with each parameter's first value); authentication (401);
//! impersonation (403, 400); authorization (403). What comes after the decision is here too, so
//! both paths apply it alike: the `--max-requests-inflight` permit ([`Admission::permit`]: never for
//! watches, never refused to `system:masters`) and the audit line ([`Admission::audit`]).
//!
//! A list or watch is authorized with its selectors parsed (the Node authorizer reads a kubelet's
//! `spec.nodeName`), and one whose field selector pins `metadata.name` is authorized for that
//! name, as upstream's `RequestInfoFactory` does: a `resourceNames` grant allows listing and
//! watching its object.

use std::sync::Arc;
use std::time::Instant;

use axum::http::HeaderMap;

use crate::auth::AuthContext;
use crate::auth::{self, Audit, InflightPermit, Record, RequestInfo, User};
use crate::http::lifecycle::Phase;
use crate::http::params::{self, ReadParams};
use crate::http::status::ApiError;
use crate::transport::conn::ConnInfo;
use watchcache::Selection;

/// What admission reads of a request, before its body.
pub(crate) struct Incoming<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// The path, as sent (not decoded).
    pub path: &'a str,
    /// The query string, as sent.
    pub query: Option<&'a str>,
    /// The `Authorization` header's value.
    pub authorization: Option<&'a [u8]>,
    /// The headers, for impersonation; `None` on the watch fast path, which hands any request
    /// that impersonates to hyper.
    pub headers: Option<&'a HeaderMap>,
    /// The connection (its verified client certificate; whether it came on the development
    /// listener, whose requests are neither authenticated nor authorized).
    pub conn: &'a ConnInfo,
}

/// The decision on one request, with the request as parsed for it.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Who asks, once authenticated (and after impersonation); `None` without authentication.
    pub user: Option<Arc<User>>,
    /// What is asked: the verb, the resource, and the name (from the path, or the field selector
    /// of a list or watch).
    pub info: RequestInfo,
    /// The query of a resource read (LIST, GET, WATCH), parsed once for every reader: the verb
    /// above comes from it, and the handler serves it. Its error is answered by the handler,
    /// after authorization, as upstream answers a malformed query only to whom may ask.
    pub read: Option<Result<ReadParams, ApiError>>,
    /// Allowed, or the answer: 401, 403, 400 (malformed impersonation).
    pub decision: Result<(), ApiError>,
}

/// Admits one request: reads it, authenticates, applies impersonation, authorizes. While the
/// server drains, a request other than a health check is answered 429 first, as
/// kube-apiserver's `--shutdown-send-retry-after`: its client retries through a connection of
/// its own, on another replica.
pub(crate) fn admit(cx: &AuthContext, req: &Incoming<'_>) -> Admission {
    let health = matches!(req.path, "/livez" | "/readyz" | "/healthz" | "/metrics");
    let refused = if health {
        None
    } else if cx.lifecycle.phase() == Phase::Draining {
        Some(ApiError::shutting_down())
    } else if cx.auth.get().is_some_and(|a| !a.ready()) {
        // Not ready to authorize: retry, rather than a 403 the caller's permissions do not make.
        Some(ApiError::authorizer_not_ready())
    } else {
        None
    };
    if let Some(e) = refused {
        return Admission {
            user: None,
            info: RequestInfo::new(req.method, req.path, false),
            read: None,
            decision: Err(e),
        };
    }
    let resource = RequestInfo::new(req.method, req.path, false).resource;
    let read = (resource.is_some() && matches!(req.method, "GET" | "HEAD"))
        .then(|| ReadParams::parse(req.query, cx.max_selector_len));
    let watch = match &read {
        Some(Ok(p)) => p.watch,
        // A query that does not parse is still a watch if it says so (upstream's fallback when
        // its parameter codec fails): anything but `false` or `0` in the first `watch=`.
        _ => params::query_value(req.query, "watch")
            .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0")),
    };
    let mut info = RequestInfo::new(req.method, req.path, watch);
    let selection = selection_of(&info, read.as_ref());
    if let (Some(r), Some(name)) = (
        info.resource.as_mut(),
        selection
            .as_ref()
            .and_then(|s| s.fields.required_value("metadata.name")),
    ) && r.name.is_empty()
        && is_valid_path_segment_name(name)
    {
        r.name = name.to_owned();
    }
    let mut admission = Admission {
        user: None,
        info,
        read,
        decision: Ok(()),
    };
    // The development listener (`--insecure-listen`, loopback only) is kube-apiserver's former
    // insecure port: no authentication or authorization.
    let Some(auth) = cx.auth.get().filter(|_| !req.conn.insecure_listener) else {
        return admission;
    };
    let requester = match auth
        .authn
        .authenticate(req.conn.client_cert.as_deref(), req.authorization)
    {
        Ok(u) => u,
        Err(why) => {
            tracing::debug!(path = %req.path, why = %why.0, "unauthorized");
            admission.decision = Err(ApiError::unauthorized());
            return admission;
        }
    };
    admission.user = Some(Arc::clone(&requester));
    let user = match req.headers {
        Some(h) => match auth::impersonate::apply(auth, requester, h) {
            Ok(u) => u,
            Err(e) => {
                admission.decision = Err(e);
                return admission;
            }
        },
        None => requester,
    };
    admission.user = Some(Arc::clone(&user));
    admission.decision = auth.check(&user, &admission.info, selection.as_ref());
    admission
}

/// What a list or watch selects, for the authorizers: its selectors, in the request's namespace
/// (`None` for other verbs, or when the query does not parse: the handler answers that).
fn selection_of(
    info: &RequestInfo,
    read: Option<&Result<ReadParams, ApiError>>,
) -> Option<Selection> {
    let r = info.resource.as_ref()?;
    if info.verb != "list" && info.verb != "watch" {
        return None;
    }
    let p = read?.as_ref().ok()?;
    let ns = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
    Selection::parse(ns, &p.field_selector, &p.label_selector).ok()
}

/// Upstream's `path.IsValidPathSegmentName`: a name that could stand in a path segment (not `.`
/// or `..`, no `/` or `%`), the only kind a field selector's `metadata.name` is authorized as.
fn is_valid_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

impl Admission {
    /// Whether the request streams or may last long (a watch): no request timeout, no in-flight
    /// permit.
    pub(super) fn is_long_running(&self) -> bool {
        self.info.is_long_running()
    }

    /// The `--max-requests-inflight` permit of an admitted request, held while it is served;
    /// taken only once the request's body has arrived (a client trickling its body holds nobody
    /// out), waiting fairly with the other requests of its user. A long-running request takes
    /// none; `system:masters` is served even when none is left, as upstream's limit always
    /// answers its super-admins.
    ///
    /// # Errors
    /// 429 with Retry-After when the limit is reached.
    pub(crate) async fn permit(
        &self,
        cx: &AuthContext,
    ) -> Result<Option<InflightPermit>, ApiError> {
        if self.is_long_running() {
            return Ok(None);
        }
        let privileged = self
            .user
            .as_ref()
            .is_some_and(|u| u.in_group(auth::MASTERS));
        // The flow is the user's name, as upstream's default flow schemas distinguish flows.
        let flow = self.user.as_ref().map_or("", |u| u.name.as_str());
        cx.limits.request(flow, privileged).await.map(Some)
    }

    /// Records the request in the audit log when it is audited (every write, every 401, 403 and
    /// 429) and auditing is on.
    pub(crate) fn audit(&self, cx: &AuthContext, code: u16, started: Instant) {
        if cx.auditing() && Audit::wants(&self.info, code) {
            cx.audit.record(&Record {
                user: self.user.as_deref(),
                info: &self.info,
                code,
                latency: started.elapsed(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthConfig, Authenticator, Mode, RbacObjects, TokenFile};
    use crate::{Served, Server, ServerConfig};
    use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef};

    /// A server state with tokens for `alice` (may only watch pods in `a`, and get or list the
    /// pod `one` there by name) and `admin` (system:masters), and `--max-requests-inflight 1`.
    fn state() -> Arc<AuthContext> {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let source = MemorySource::new(writer, 1, []);
        let mut rbac = RbacObjects::default();
        for o in [
            serde_json::json!({"kind": "Role", "metadata": {"name": "r", "namespace": "a"},
                "rules": [{"verbs": ["watch"], "apiGroups": [""], "resources": ["pods"]},
                          {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"],
                           "resourceNames": ["one"]}]}),
            serde_json::json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "a"},
                "subjects": [{"kind": "User", "name": "alice"}],
                "roleRef": {"kind": "Role", "name": "r"}}),
        ] {
            rbac.add(o).unwrap();
        }
        let server = Server::new(
            ServerConfig {
                max_requests_inflight: 1,
                // A queue wait of a quarter of it: 50 ms.
                request_timeout: std::time::Duration::from_millis(200),
                ..ServerConfig::default()
            },
            [Served::new(cache)],
        )
        .with_auth(AuthConfig {
            authenticator: Authenticator {
                tokens: Some(
                    TokenFile::parse("t", "at,alice,1\nmt,admin,2,system:masters\n").unwrap(),
                ),
                ..Authenticator::default()
            },
            modes: vec![Mode::Rbac],
            rbac_bootstrap: rbac,
        });
        // The pods' source outlives the test (its cache is abandoned when it goes).
        std::mem::forget(source);
        Arc::clone(&server.state_for_tests().auth)
    }

    fn admit_as(st: &AuthContext, token: &str, path_and_query: &str) -> Admission {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let authorization = format!("Bearer {token}");
        admit(
            st,
            &Incoming {
                method: "GET",
                path,
                query,
                authorization: Some(authorization.as_bytes()),
                headers: None,
                conn: &ConnInfo::default(),
            },
        )
    }

    #[test]
    fn a_draining_server_answers_429_to_all_but_health_checks() {
        let st = state();
        let path = "/api/v1/namespaces/a/pods?watch=1";
        assert!(admit_as(&st, "at", path).decision.is_ok());
        // The delay serves everything.
        st.lifecycle.enter(Phase::Delaying);
        assert!(admit_as(&st, "at", path).decision.is_ok());
        st.lifecycle.enter(Phase::Draining);
        for (token, path) in [("at", path), ("mt", "/api/v1/pods"), ("", "/version")] {
            let e = admit_as(&st, token, path).decision.unwrap_err();
            assert_eq!((e.code(), e.retry_after()), (429, Some(1)), "{path}");
            assert!(e.message().contains("shutting down"), "{path}");
        }
        for path in ["/livez", "/readyz", "/healthz", "/metrics"] {
            assert!(admit_as(&st, "mt", path).decision.is_ok(), "{path}");
        }
        // Never back.
        st.lifecycle.enter(Phase::Serving);
        assert_eq!(st.lifecycle.phase(), Phase::Draining);
    }

    #[test]
    fn a_request_before_the_authorizer_has_read_rbac_is_told_to_retry_not_denied() {
        // A served `roles` cache that never fills: RBAC cannot have read it.
        let (pods, _pods_writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let (roles, _roles_writer) = Cache::new(
            ResourceDef::builtin("roles").unwrap(),
            CacheConfig::default(),
        );
        let st = Server::new(
            ServerConfig::default(),
            [Served::new(pods), Served::new(roles)],
        )
        .with_auth(AuthConfig {
            authenticator: Authenticator {
                tokens: Some(TokenFile::parse("t", "mt,admin,2,system:masters\n").unwrap()),
                ..Authenticator::default()
            },
            modes: vec![Mode::Rbac],
            rbac_bootstrap: RbacObjects::default(),
        })
        .state_for_tests()
        .auth
        .clone();
        let e = admit_as(&st, "mt", "/api/v1/pods").decision.unwrap_err();
        assert_eq!((e.code(), e.retry_after()), (429, Some(1)));
        assert!(e.message().contains("authorizer"), "{}", e.message());
        for path in ["/livez", "/readyz", "/healthz", "/metrics"] {
            assert!(admit_as(&st, "mt", path).decision.is_ok(), "{path}");
        }
    }

    #[test]
    fn the_first_watch_value_decides_the_verb_and_the_query_served() {
        let st = state();
        // Authorized as the watch it is served as (item 13): alice may watch, not list.
        let a = admit_as(&st, "at", "/api/v1/namespaces/a/pods?watch=1&watch=0");
        assert_eq!(a.info.verb, "watch");
        assert!(a.decision.is_ok());
        assert!(a.read.unwrap().unwrap().watch);
        let a = admit_as(&st, "at", "/api/v1/namespaces/a/pods?watch=0&watch=1");
        assert_eq!(a.info.verb, "list");
        assert_eq!(a.decision.unwrap_err().code(), 403);
        assert!(!a.read.unwrap().unwrap().watch);
        // A query that does not parse is a watch unless it says false (upstream's fallback),
        // and its error is the handler's to answer.
        let a = admit_as(&st, "at", "/api/v1/namespaces/a/pods?watch=maybe");
        assert_eq!(a.info.verb, "watch");
        assert_eq!(a.read.unwrap().unwrap_err().code(), 400);
    }

    #[test]
    fn a_field_selector_on_the_name_is_authorized_as_that_name() {
        let st = state();
        let a = admit_as(
            &st,
            "at",
            "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Done",
        );
        assert_eq!(a.info.resource.as_ref().unwrap().name, "one");
        assert!(a.decision.is_ok(), "{:?}", a.decision);
        for denied in [
            "/api/v1/namespaces/a/pods",
            "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Dtwo",
            "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%21%3Done",
            "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3D..",
        ] {
            assert_eq!(
                admit_as(&st, "at", denied).decision.unwrap_err().code(),
                403,
                "{denied}"
            );
        }
    }

    #[tokio::test]
    async fn masters_are_never_refused_a_permit_and_watches_take_none() {
        let st = state();
        let admin = admit_as(&st, "mt", "/api/v1/pods");
        let alice = admit_as(
            &st,
            "at",
            "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Done",
        );
        let watch = admit_as(&st, "at", "/api/v1/namespaces/a/pods?watch=1");
        assert!(admin.user.as_ref().unwrap().in_group(auth::MASTERS));
        // The one permit is held by alice.
        let held = alice.permit(&st).await.unwrap();
        assert!(held.is_some());
        assert_eq!(alice.permit(&st).await.unwrap_err().code(), 429);
        assert!(
            admin.permit(&st).await.is_ok(),
            "masters always get an answer"
        );
        assert!(watch.permit(&st).await.unwrap().is_none());
    }
}
