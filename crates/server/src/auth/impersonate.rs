//! Impersonation, as kube-apiserver's filter: a request carrying `Impersonate-User` (with
//! `Impersonate-Group`, `Impersonate-Uid`, `Impersonate-Extra-<key>`) acts as that user once the
//! requester is authorized to `impersonate` each of them: `users` (or `serviceaccounts` in their
//! namespace for `system:serviceaccount:<ns>:<name>`) and `groups` in the core group, `uids` and
//! `userextras/<key>` in `authentication.k8s.io`. This is how a proxy (a watchcache in proxy mode,
//! another watchcache above it) passes its clients' identities on, so the upstream authorizes each
//! client as itself rather than as the proxy.

use std::sync::Arc;

use axum::http::HeaderMap;

use super::Auth;
use super::attributes::{RequestInfo, ResourceInfo};
use super::user::{ANONYMOUS, AUTHENTICATED, User};
use crate::http::status::ApiError;

/// The header naming the user to act as.
pub const USER: &str = "impersonate-user";
/// A group to act in (repeated).
pub const GROUP: &str = "impersonate-group";
/// The uid to act with.
pub const UID: &str = "impersonate-uid";
/// The prefix of an extra to act with (`Impersonate-Extra-<key>`).
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Whether a request asks for impersonation at all.
pub fn requested(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}

/// The headers a proxy sends to act as `user` upstream.
pub fn headers_for(user: &User) -> Vec<(&'static str, String)> {
    let mut out = vec![(USER, user.name.clone())];
    // The upstream adds system:authenticated itself, as for any impersonated user.
    out.extend(
        user.groups
            .iter()
            .filter(|g| *g != AUTHENTICATED)
            .map(|g| (GROUP, g.clone())),
    );
    if !user.uid.is_empty() {
        out.push((UID, user.uid.clone()));
    }
    out
}

fn text<'h>(headers: &'h HeaderMap, name: &str) -> Result<Vec<&'h str>, ApiError> {
    headers
        .get_all(name)
        .iter()
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::bad_request(format!("the {name} header is not text")))
        })
        .collect()
}

/// The user a request acts as: `requester`, or the one it impersonates once every part of the
/// impersonation is authorized (403 naming the first refused part; 400 for groups, a uid or
/// extras without a user).
pub fn apply(
    auth: &Auth,
    requester: Arc<User>,
    headers: &HeaderMap,
) -> Result<Arc<User>, ApiError> {
    if !requested(headers) {
        return Ok(requester);
    }
    let users = text(headers, USER)?;
    let groups = text(headers, GROUP)?;
    let uids = text(headers, UID)?;
    let mut extras: Vec<(String, &str)> = Vec::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
            let value = value.to_str().map_err(|_| {
                ApiError::bad_request(format!("the {} header is not text", name.as_str()))
            })?;
            extras.push((key.to_owned(), value));
        }
    }
    let name = match users.as_slice() {
        [one] => *one,
        [] => {
            return Err(ApiError::bad_request(
                "requested impersonation of groups, a uid or extras without impersonating a user",
            ));
        }
        _ => {
            return Err(ApiError::bad_request(
                "more than one Impersonate-User header",
            ));
        }
    };
    if uids.len() > 1 {
        return Err(ApiError::bad_request(
            "more than one Impersonate-Uid header",
        ));
    }
    let check = |group: &str, resource: &str, subresource: &str, namespace: &str, name: &str| {
        let info = RequestInfo {
            verb: "impersonate".to_owned(),
            resource: Some(ResourceInfo {
                group: group.to_owned(),
                version: String::new(),
                resource: resource.to_owned(),
                subresource: subresource.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
            path: String::new(),
        };
        auth.check(&requester, &info, None)
    };
    let service_account = name
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'));
    match service_account {
        Some((ns, sa)) => check("", "serviceaccounts", "", ns, sa)?,
        None => check("", "users", "", "", name)?,
    }
    for g in &groups {
        check("", "groups", "", "", g)?;
    }
    for u in &uids {
        check(AUTHENTICATION_GROUP, "uids", "", "", u)?;
    }
    for (key, value) in &extras {
        check(AUTHENTICATION_GROUP, "userextras", key, "", value)?;
    }
    let mut all_groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
    if let Some((ns, _)) = service_account {
        for g in [
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{ns}"),
        ] {
            if !all_groups.contains(&g) {
                all_groups.push(g);
            }
        }
    }
    let uid = uids.first().copied().unwrap_or_default();
    let user = if name == ANONYMOUS {
        User {
            name: name.to_owned(),
            uid: uid.to_owned(),
            groups: all_groups,
        }
    } else {
        User::authenticated(name, uid, all_groups)
    };
    tracing::debug!(requester = %requester.name, acting_as = %user.name, "impersonation");
    Ok(Arc::new(user))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthConfig, Authenticator, Mode, RbacObjects};
    use axum::http::HeaderValue;
    use serde_json::json;

    fn auth() -> Auth {
        let mut rbac = RbacObjects::default();
        rbac.add(json!({"kind": "ClusterRole", "metadata": {"name": "impersonator"},
            "rules": [{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]},
                      {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}]}))
            .unwrap();
        rbac.add(
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "proxy-impersonates"},
            "subjects": [{"kind": "User", "name": "proxy"}],
            "roleRef": {"kind": "ClusterRole", "name": "impersonator"}}),
        )
        .unwrap();
        Auth::new(
            AuthConfig {
                authenticator: Authenticator::default(),
                modes: vec![Mode::Rbac],
                rbac_bootstrap: rbac,
            },
            &[],
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn an_authorized_proxy_acts_as_its_client() {
        let a = auth();
        let proxy = Arc::new(User::authenticated("proxy", "", vec![]));
        let u = apply(
            &a,
            Arc::clone(&proxy),
            &headers(&[(USER, "alice"), (GROUP, "devs"), (GROUP, "qa")]),
        )
        .unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["devs", "qa", AUTHENTICATED]);
        // No headers: the requester itself.
        assert!(Arc::ptr_eq(
            &apply(&a, Arc::clone(&proxy), &HeaderMap::new()).unwrap(),
            &proxy
        ));
        // A service account gets its groups.
        let sa = apply(
            &a,
            proxy,
            &headers(&[(USER, "system:serviceaccount:kube-system:gc")]),
        )
        .unwrap();
        assert!(sa.in_group("system:serviceaccounts:kube-system"), "{sa:?}");
    }

    #[test]
    fn impersonation_needs_the_verb_and_a_user() {
        let a = auth();
        let alice = Arc::new(User::authenticated("alice", "", vec![]));
        let e = apply(
            &a,
            alice,
            &headers(&[(USER, "admin"), (GROUP, "system:masters")]),
        )
        .unwrap_err();
        assert_eq!(e.code(), 403);
        let proxy = Arc::new(User::authenticated("proxy", "", vec![]));
        let e = apply(&a, Arc::clone(&proxy), &headers(&[(GROUP, "devs")])).unwrap_err();
        assert_eq!(e.code(), 400);
        // The proxy may impersonate users and groups, not uids.
        let e = apply(&a, proxy, &headers(&[(USER, "alice"), (UID, "1")])).unwrap_err();
        assert_eq!(e.code(), 403);
    }

    #[test]
    fn a_proxy_sends_its_clients_identity() {
        let u = User::authenticated("alice", "42", vec!["devs".into()]);
        assert_eq!(
            headers_for(&u),
            [
                (USER, "alice".to_owned()),
                (GROUP, "devs".to_owned()),
                (UID, "42".to_owned())
            ]
        );
    }
}
