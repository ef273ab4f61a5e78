//! Who a request comes from, once authenticated: a name, a uid and groups, as upstream's
//! `user.Info` (without extras, which nothing here reads).

/// The group every authenticated user is in.
pub(super) const AUTHENTICATED: &str = "system:authenticated";
/// The group of the anonymous user.
pub(super) const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The anonymous user's name.
pub(super) const ANONYMOUS: &str = "system:anonymous";
/// The group allowed everything, whatever the authorization modes (upstream's superuser group).
pub(crate) const MASTERS: &str = "system:masters";
/// The group of node (kubelet) identities.
pub(super) const NODES: &str = "system:nodes";
/// The prefix of a node identity's user name: `system:node:<node name>`.
pub(super) const NODE_PREFIX: &str = "system:node:";

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    /// The user name (`jane`, `system:node:n1`, `system:serviceaccount:ns:name`).
    pub name: String,
    /// A unique id, when the authenticator knows one.
    pub uid: String,
    /// The groups, `system:authenticated` (or `system:unauthenticated`) included.
    pub groups: Vec<String>,
}

impl User {
    /// An authenticated user: `system:authenticated` is added to `groups` unless present.
    pub fn authenticated(
        name: impl Into<String>,
        uid: impl Into<String>,
        mut groups: Vec<String>,
    ) -> User {
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        User {
            name: name.into(),
            uid: uid.into(),
            groups,
        }
    }

    /// The anonymous user, in `system:unauthenticated`.
    pub fn anonymous() -> User {
        User {
            name: ANONYMOUS.to_owned(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.to_owned()],
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The node name of a node identity (`system:node:<name>` in `system:nodes`).
    pub fn node_name(&self) -> Option<&str> {
        let name = self.name.strip_prefix(NODE_PREFIX)?;
        (!name.is_empty() && self.in_group(NODES)).then_some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_identities_need_the_name_and_the_group() {
        let n = User::authenticated("system:node:n1", "", vec![NODES.into()]);
        assert_eq!(n.node_name(), Some("n1"));
        assert!(n.in_group(AUTHENTICATED));
        let not_in_group = User::authenticated("system:node:n1", "", vec![]);
        assert_eq!(not_in_group.node_name(), None);
        let empty = User::authenticated("system:node:", "", vec![NODES.into()]);
        assert_eq!(empty.node_name(), None);
        assert!(User::anonymous().in_group(UNAUTHENTICATED));
    }
}
