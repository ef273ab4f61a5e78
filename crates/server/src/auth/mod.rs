//! Authentication, authorization, per-client limits and the audit log, as kube-apiserver does
//! them and with its flag names and file formats (design/semantics.md, "Security model").
//!
//! | file | concept |
//! |---|---|
//! | `user.rs` | an authenticated user; the well-known users and groups |
//! | `authn.rs` | the authentication chain: client certificate, bearer token, anonymous |
//! | `token_file.rs` | `--token-auth-file` (CSV) |
//! | `service_account.rs` | service-account JWTs (RS256, ES256), remembered briefly |
//! | `x509.rs` | the user a verified client certificate names |
//! | `attributes.rs` | what a request asks (verb, resource, path), an authorizer's answer, Forbidden's message |
//! | `authz.rs` | `--authorization-mode`: the modes, in order |
//! | `rbac.rs` | the RBAC authorizer, its index, following the RBAC caches |
//! | `node.rs` | the Node authorizer, from the pods cache's `spec.nodeName` index |
//! | `limits.rs` | `--max-requests-inflight`, `--max-watches-per-user` |
//! | `audit.rs` | the audit log (tracing, and a JSON-lines file) |
//! | `filters.rs` | admission, one function for both paths: the request parsed once, authentication, impersonation, authorization; the in-flight permit and the audit line |
//! | `gate.rs` | hyper's requests through admission, their body read and their in-flight permit taken within `--request-timeout` |
//!
//! `gate.rs` puts hyper's requests through all of the above; the watch fast path calls
//! `filters.rs` itself.
//!
//! Layer: above `metrics.rs`, `http/` and `transport/`, which it may import; below `proxy/`,
//! `watch/` and `endpoints/`, which it does not know.
//!
//! With no [`AuthConfig`] given to the server, nothing is authenticated or authorized (the
//! library's and the development listener's behaviour); limits and audit still apply.

mod attributes;
mod audit;
mod authn;
mod authz;
pub(crate) mod filters;
pub(crate) mod gate;
pub mod impersonate;
mod limits;
pub(crate) mod node;
mod rbac;
mod service_account;
mod token_file;
mod user;
mod x509;

use std::sync::Arc;

pub use attributes::{Attributes, Decision, RequestInfo, ResourceInfo};
pub use audit::{Audit, Record};
pub use authn::{Authenticator, Unauthenticated};
pub use authz::{Authorizer, Mode};
pub use limits::{InflightPermit, Limits, WatchSlot};
pub use node::{NodeAuthorizer, NodeCaches, RefSet};
pub use rbac::{Objects as RbacObjects, PolicyRule, Rbac};
pub use service_account::ServiceAccounts;
pub use token_file::{TokenFile, TokenFileError};
pub(crate) use user::MASTERS;
pub use user::User;
pub use x509::user_of as user_of_certificate;

use crate::http::lifecycle::Lifecycle;
use crate::http::served::{ServedSet, segments};
use crate::http::status::ApiError;
use crate::metrics::{RequestKey, ServerMetrics};
use watchcache::Cache;
use watchcache::Selection;

/// What admission needs (the request filters, `filters.rs`, on both paths: hyper's gate,
/// `gate.rs`, and the watch fast path): who may ask what, the limits and the audit log, and
/// where the server is in its life.
pub(crate) struct AuthContext {
    /// Authentication and authorization, when configured ([`Server::with_auth`]).
    ///
    /// [`Server::with_auth`]: crate::Server::with_auth
    pub(crate) auth: std::sync::OnceLock<Arc<Auth>>,
    /// `--max-requests-inflight` and `--max-watches-per-user` (the watches' share is counted
    /// where they start: `watch/mod.rs`).
    pub(crate) limits: Arc<Limits>,
    /// The audit log.
    pub(crate) audit: Audit,
    /// Serving, delaying its stop, or draining (429 to every request then).
    pub(crate) lifecycle: Arc<Lifecycle>,
    /// For a request's metrics labels: its resource is named only when it is served here.
    pub(crate) served: Arc<ServedSet>,
    pub(crate) metrics: Arc<ServerMetrics>,
    /// `--max-selector-len`: a read's query is parsed once, here.
    pub(crate) max_selector_len: usize,
    /// `--max-body-bytes`: a request's body is read within its admission (`gate.rs`).
    pub(crate) max_body_bytes: usize,
    /// `--request-timeout`.
    pub(crate) request_timeout: std::time::Duration,
}

impl AuthContext {
    /// Whether requests are audited: only with an audit file (`--audit-log-path`).
    pub(crate) fn auditing(&self) -> bool {
        self.audit.has_file()
    }

    /// The metrics labels of a request (`metrics.rs`): its resource named only when it is
    /// served here.
    pub(crate) fn request_key(&self, info: &RequestInfo) -> RequestKey {
        info.metrics_key(self.served.resolve(&segments(&info.path)).is_some())
    }
}

/// What a server authenticates and authorizes with.
#[derive(Debug, Default)]
pub struct AuthConfig {
    /// How users are recognised.
    pub authenticator: Authenticator,
    /// `--authorization-mode`, in order (empty: `Node,RBAC`, what kubeadm, kind and k3s configure:
    /// once users are told apart, nobody reads what no rule grants them).
    pub modes: Vec<Mode>,
    /// RBAC objects from `--authorization-rbac-dir`, under those of the cache.
    pub rbac_bootstrap: RbacObjects,
}

/// Authentication and authorization of a running server.
#[derive(Debug)]
pub struct Auth {
    pub(crate) authn: Authenticator,
    authz: Authorizer,
    rbac_caches: Vec<Cache>,
}

impl Auth {
    /// Builds the authorizers over the served resources: the Node authorizer reads the pods
    /// cache, RBAC follows the four RBAC caches (those that are served).
    pub(crate) fn new(config: AuthConfig, served: &[Cache]) -> Auth {
        let find = |group: &str, plural: &str| {
            served
                .iter()
                .find(|c| c.definition().group == group && c.definition().plural == plural)
                .cloned()
        };
        let modes = if config.modes.is_empty() {
            vec![Mode::Node, Mode::Rbac]
        } else {
            config.modes
        };
        let rbac_caches: Vec<Cache> = if modes.contains(&Mode::Rbac) {
            [
                "roles",
                "clusterroles",
                "rolebindings",
                "clusterrolebindings",
            ]
            .iter()
            .filter_map(|p| find(rbac::GROUP, p))
            .collect()
        } else {
            Vec::new()
        };
        let rbac = modes
            .contains(&Mode::Rbac)
            .then(|| Arc::new(Rbac::new(config.rbac_bootstrap)));
        let node = modes.contains(&Mode::Node).then(|| {
            NodeAuthorizer::new(NodeCaches {
                pods: find("", "pods"),
                pvcs: find("", "persistentvolumeclaims"),
                pvs: find("", "persistentvolumes"),
                volume_attachments: find("storage.k8s.io", "volumeattachments"),
                resource_slices: find("resource.k8s.io", "resourceslices"),
            })
        });
        let mut authn = config.authenticator;
        if let Some(sa) = authn.service_accounts.as_mut() {
            sa.look_up_in(served);
        }
        Auth {
            authn,
            authz: Authorizer::new(modes, rbac, node),
            rbac_caches,
        }
    }

    /// Starts following the RBAC caches (in the current runtime).
    pub(crate) fn start(&self) {
        if let Some(rbac) = &self.authz.rbac
            && !self.rbac_caches.is_empty()
        {
            tokio::spawn(Arc::clone(rbac).follow(self.rbac_caches.clone()));
        }
    }

    /// Whether authorization is ready: RBAC, when it follows caches, has read them once.
    pub(crate) fn ready(&self) -> bool {
        self.rbac_caches.is_empty() || self.authz.rbac.as_ref().is_none_or(|r| r.synced())
    }

    /// Authorizes one request.
    ///
    /// # Errors
    /// 403 Forbidden with upstream's message when the modes do not allow it.
    pub(crate) fn check(
        &self,
        user: &User,
        info: &RequestInfo,
        selection: Option<&Selection>,
    ) -> Result<(), ApiError> {
        let a = Attributes {
            user,
            info,
            selection,
        };
        match self.authz.authorize(&a) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) | Decision::NoOpinion(reason) => {
                let (message, group, kind, name) =
                    attributes::forbidden_message(user, info, &reason);
                Err(ApiError::forbidden(message, group, kind, name))
            }
        }
    }
}
