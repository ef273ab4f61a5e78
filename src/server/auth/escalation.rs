//! RBAC's escalation prevention (upstream's `pkg/registry/rbac`: the policy-based storage of the
//! four RBAC resources, `ConfirmNoEscalation`, `Covers`): writing a Role or ClusterRole needs
//! every permission it grants, or the `escalate` verb on it; writing a RoleBinding or
//! ClusterRoleBinding needs every permission of the role it references (in the binding's
//! namespace; cluster-wide for a ClusterRoleBinding), or the `bind` verb on that role. Without
//! this, whoever may create bindings may bind himself to `cluster-admin`.
//!
//! - `system:masters` is never checked (upstream's `EscalationAllowed`); neither is an open
//!   server (no user).
//! - An update that changes only what the garbage collector changes (owner references,
//!   finalizers) is not checked (`IsOnlyMutatingGCFields`).
//! - A ClusterRole with an `aggregationRule` (or an update of one that had one) needs full
//!   authority (`*` on everything), since it can gather any rule.
//! - The permissions held are the user's RBAC rules in the request's namespace (the cluster scope
//!   for cluster-scoped objects), read from the same index the authorizer uses; aggregated
//!   ClusterRoles count with their members' rules. The `escalate` and `bind` questions go to the
//!   whole authorizer chain, as upstream's.
//! - A denial is 403 with upstream's message (`... is attempting to grant RBAC permissions not
//!   currently held:` and each missing rule, compacted and sorted as upstream prints them).

use serde_json::{Map, Value};

use super::Auth;
use super::attributes::{Attributes, Decision, RequestInfo, ResourceInfo};
use super::rbac::{GROUP, PolicyRule};
use super::user::{MASTERS, User};
use crate::server::status::ApiError;

/// Checks a write of one of the four RBAC resources (any other resource passes): `obj` is what
/// is about to be stored, `old` the stored object for an update, `info` the request (its
/// resource, namespace and name).
///
/// # Errors
/// 403 Forbidden with upstream's message; 404 when a binding names a role that does not exist;
/// 400 when the rules or role reference do not have their types' shape.
pub(crate) fn confirm(
    auth: &Auth,
    user: &User,
    info: &RequestInfo,
    obj: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Result<(), ApiError> {
    let Some(r) = info.resource.as_ref().filter(|r| r.group == GROUP) else {
        return Ok(());
    };
    if user.in_group(MASTERS) {
        return Ok(());
    }
    let resource = r.resource.as_str();
    if !matches!(
        resource,
        "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
    ) {
        return Ok(());
    }
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = r.namespace.as_str();
    let roles = matches!(resource, "roles" | "clusterroles");
    // Roles: the `escalate` verb on the role itself lets anything through.
    if roles && allowed(auth, user, "escalate", GROUP, resource, namespace, &r.name) {
        return Ok(());
    }
    if old.is_some_and(|old| only_gc_fields_change(obj, old)) {
        return Ok(());
    }
    let forbidden = |why: String| {
        ApiError::forbidden(
            format!("{resource}.{GROUP} \"{name}\" is forbidden: {why}"),
            GROUP.to_owned(),
            resource.to_owned(),
            name.to_owned(),
        )
    };
    if roles {
        let rules = rules_of(obj)?;
        if let Some(missing) = not_covered(auth, user, namespace, &rules) {
            return Err(forbidden(missing));
        }
        let aggregates = |o: &Map<String, Value>| {
            o.get("aggregationRule")
                .and_then(|a| a.get("clusterRoleSelectors"))
                .and_then(Value::as_array)
                .is_some_and(|s| !s.is_empty())
        };
        if resource == "clusterroles"
            && (aggregates(obj) || old.is_some_and(aggregates))
            && not_covered(auth, user, namespace, &full_authority()).is_some()
        {
            return Err(forbidden(
                "must have cluster-admin privileges to use the aggregationRule".into(),
            ));
        }
        return Ok(());
    }
    // Bindings: the `bind` verb on the referenced role (in the binding's namespace), or holding
    // every permission the role grants.
    let role_ref = obj.get("roleRef").and_then(Value::as_object);
    let field = |f: &str| {
        role_ref
            .and_then(|r| r.get(f))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (kind, ref_name, ref_group) = (field("kind"), field("name"), field("apiGroup"));
    let ref_resource = match kind {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        other => {
            return Err(ApiError::new(
                500,
                "InternalError",
                format!("Internal error occurred: unsupported role reference kind: {other:?}"),
            ));
        }
    };
    if allowed(
        auth,
        user,
        "bind",
        ref_group,
        ref_resource,
        namespace,
        ref_name,
    ) {
        return Ok(());
    }
    let index = auth.rbac_index();
    let Some(rules) = index
        .as_deref()
        .and_then(|ix| ix.role_ref_rules(kind, ref_name, namespace))
    else {
        return Err(ApiError::not_found(GROUP, ref_resource, ref_name));
    };
    match not_covered(auth, user, namespace, &rules) {
        Some(missing) => Err(forbidden(missing)),
        None => Ok(()),
    }
}

/// Whether the authorizer chain allows `verb` on a named RBAC object (the `escalate` and
/// `bind` questions).
fn allowed(
    auth: &Auth,
    user: &User,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let info = RequestInfo {
        verb: verb.to_owned(),
        resource: Some(ResourceInfo {
            group: group.to_owned(),
            version: "*".to_owned(),
            resource: resource.to_owned(),
            subresource: String::new(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }),
        path: String::new(),
    };
    auth.authz.authorize(&Attributes {
        user,
        info: &info,
        selection: None,
    }) == Decision::Allow
}

/// The rules a Role or ClusterRole object grants.
fn rules_of(obj: &Map<String, Value>) -> Result<Vec<PolicyRule>, ApiError> {
    match obj.get("rules") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| ApiError::bad_request(format!("rules: {e}"))),
    }
}

/// `*` on every resource and every path: what an aggregation rule could gather.
fn full_authority() -> Vec<PolicyRule> {
    let all = vec!["*".to_owned()];
    vec![
        PolicyRule {
            verbs: all.clone(),
            api_groups: all.clone(),
            resources: all.clone(),
            ..PolicyRule::default()
        },
        PolicyRule {
            verbs: all.clone(),
            non_resource_urls: all,
            ..PolicyRule::default()
        },
    ]
}

/// `ConfirmNoEscalation`: `None` when the user's rules in `namespace` cover `rules`; otherwise
/// upstream's description of what is missing.
fn not_covered(auth: &Auth, user: &User, namespace: &str, rules: &[PolicyRule]) -> Option<String> {
    let owner = auth
        .rbac_index()
        .map(|ix| ix.rules_for(user, namespace))
        .unwrap_or_default();
    let missing = uncovered(&owner, rules);
    if missing.is_empty() {
        return None;
    }
    let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    Some(format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        go_quoted_list(&user.groups),
        lines.join("\n")
    ))
}

/// Upstream's `Covers`: each servant rule broken into single (group, resource, verb, name) or
/// (path, verb) rules, and those no owner rule covers.
fn uncovered(owner: &[PolicyRule], servant: &[PolicyRule]) -> Vec<PolicyRule> {
    let one = |s: &String| vec![s.clone()];
    let mut missing = Vec::new();
    for rule in servant {
        let mut sub = Vec::new();
        for group in &rule.api_groups {
            for resource in &rule.resources {
                for verb in &rule.verbs {
                    let base = PolicyRule {
                        api_groups: one(group),
                        resources: one(resource),
                        verbs: one(verb),
                        ..PolicyRule::default()
                    };
                    if rule.resource_names.is_empty() {
                        sub.push(base);
                    } else {
                        for n in &rule.resource_names {
                            sub.push(PolicyRule {
                                resource_names: one(n),
                                ..base.clone()
                            });
                        }
                    }
                }
            }
        }
        for url in &rule.non_resource_urls {
            for verb in &rule.verbs {
                sub.push(PolicyRule {
                    non_resource_urls: one(url),
                    verbs: one(verb),
                    ..PolicyRule::default()
                });
            }
        }
        missing.extend(
            sub.into_iter()
                .filter(|s| !owner.iter().any(|o| rule_covers(o, s))),
        );
    }
    missing
}

fn has(set: &[String], x: &str) -> bool {
    set.iter().any(|s| s == x)
}

fn has_all(set: &[String], xs: &[String]) -> bool {
    xs.iter().all(|x| has(set, x))
}

/// Upstream's `ruleCovers`: whether an owner rule covers a broken-down servant rule.
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = has(&owner.resources, "*")
        || has_all(&owner.resources, &sub.resources)
        || sub.resources.iter().all(|path| {
            has(&owner.resources, path)
                || path.split_once('/').is_some_and(|(_, subresource)| {
                    has(&owner.resources, &format!("*/{subresource}"))
                })
        });
    let urls = sub.non_resource_urls.iter().all(|path| {
        owner.non_resource_urls.iter().any(|o| {
            o == path
                || o.strip_suffix('*')
                    .is_some_and(|_| path.starts_with(o.trim_end_matches('*')))
        })
    });
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && urls && names
}

/// Upstream's `CompactRules`: rules of one group, one resource and at most one name that differ
/// only by verb are joined (verbs in order, without repeats); others stay as they are.
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::with_capacity(rules.len());
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = rule.api_groups.len() == 1
            && rule.resources.len() == 1
            && rule.resource_names.len() <= 1
            && rule.non_resource_urls.is_empty();
        if !is_simple {
            out.push(rule);
            continue;
        }
        match simple.iter_mut().find(|s| {
            s.api_groups == rule.api_groups
                && s.resources == rule.resources
                && s.resource_names == rule.resource_names
        }) {
            Some(s) => {
                for v in rule.verbs {
                    if !s.verbs.contains(&v) {
                        s.verbs.push(v);
                    }
                }
            }
            None => simple.push(rule),
        }
    }
    out.extend(simple);
    out
}

/// Go's `%q` of a string list: `["a" "b"]`.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Upstream's `CompactString` of a rule: `{APIGroups:["*"], Resources:["*"], Verbs:["*"]}`.
fn compact_string(r: &PolicyRule) -> String {
    let parts: Vec<String> = [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
        ("Verbs", &r.verbs),
    ]
    .iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k}:{}", go_quoted_list(v)))
    .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Whether an update changes only what the garbage collector writes: owner references and
/// finalizers (and what no client writes: managedFields, selfLink, the resourceVersion).
fn only_gc_fields_change(obj: &Map<String, Value>, old: &Map<String, Value>) -> bool {
    let strip = |o: &Map<String, Value>| {
        let mut o = o.clone();
        if let Some(Value::Object(m)) = o.get_mut("metadata") {
            for f in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "selfLink",
                "resourceVersion",
            ] {
                m.remove(f);
            }
        }
        o
    };
    strip(obj) == strip(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    fn missing(owner: &[Value], servant: &[Value]) -> Vec<String> {
        let owner: Vec<PolicyRule> = owner.iter().cloned().map(rule).collect();
        let servant: Vec<PolicyRule> = servant.iter().cloned().map(rule).collect();
        let mut lines: Vec<String> = compact(uncovered(&owner, &servant))
            .iter()
            .map(compact_string)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn covers_breaks_rules_down_as_upstream() {
        let admin = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]});
        let pods = json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]});
        assert!(missing(std::slice::from_ref(&admin), std::slice::from_ref(&pods)).is_empty());
        assert_eq!(
            missing(std::slice::from_ref(&pods), &[admin]),
            [r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#]
        );
        // Verbs of one resource are compacted in order; other resources stay apart.
        assert_eq!(
            missing(
                &[json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})],
                &[
                    json!({"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods", "secrets"]})
                ]
            ),
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["list" "watch"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list" "watch"]}"#,
            ]
        );
        // Names: a named owner covers only its names; an unnamed one covers all.
        let one_secret = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]});
        assert!(
            missing(
                std::slice::from_ref(&one_secret),
                std::slice::from_ref(&one_secret)
            )
            .is_empty()
        );
        assert_eq!(
            missing(
                &[one_secret],
                &[json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]})]
            ),
            [r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#]
        );
        // Subresources: `*/status` covers `pods/status`, not `pods`.
        let status = json!({"verbs": ["*"], "apiGroups": [""], "resources": ["*/status"]});
        assert!(
            missing(
                std::slice::from_ref(&status),
                &[json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"]})]
            )
            .is_empty()
        );
        assert_eq!(missing(&[status], &[pods]).len(), 1);
        // Paths: a `prefix*` owner covers longer paths; verbs must be held too.
        let metrics = json!({"verbs": ["get"], "nonResourceURLs": ["/metrics*"]});
        assert!(
            missing(
                std::slice::from_ref(&metrics),
                &[json!({"verbs": ["get"], "nonResourceURLs": ["/metrics/x"]})]
            )
            .is_empty()
        );
        assert_eq!(
            missing(
                &[metrics],
                &[json!({"verbs": ["post"], "nonResourceURLs": ["/metrics"]})]
            ),
            [r#"{NonResourceURLs:["/metrics"], Verbs:["post"]}"#]
        );
        assert_eq!(
            missing(&[], &full_authority().into_iter().map(|r| json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources, "nonResourceURLs": r.non_resource_urls})).collect::<Vec<_>>()),
            [
                r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#,
                r#"{NonResourceURLs:["*"], Verbs:["*"]}"#
            ]
        );
    }

    #[test]
    fn garbage_collector_updates_are_not_escalations() {
        let old = json!({"metadata": {"name": "r", "resourceVersion": "5"}, "rules": []});
        let gc = json!({"metadata": {"name": "r", "finalizers": ["x"], "ownerReferences": [{"uid": "u"}]}, "rules": []});
        let more = json!({"metadata": {"name": "r"}, "rules": [{"verbs": ["*"]}]});
        let m = |v: &Value| v.as_object().unwrap().clone();
        assert!(only_gc_fields_change(&m(&gc), &m(&old)));
        assert!(!only_gc_fields_change(&m(&more), &m(&old)));
    }

    #[test]
    fn lists_print_as_go_quotes_them() {
        assert_eq!(
            go_quoted_list(&["system:authenticated".into(), "a\"b".into()]),
            r#"["system:authenticated" "a\"b"]"#
        );
    }
}
