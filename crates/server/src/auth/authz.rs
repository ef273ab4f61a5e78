//! `--authorization-mode`: the authorizers, asked in order, as upstream's union authorizer. The
//! first that allows or denies decides; when none does, the request is denied with every
//! authorizer's reason. Members of `system:masters` are allowed everything before any mode is
//! asked (upstream's privileged-group authorizer).

use std::sync::Arc;

use super::attributes::{Attributes, Decision};
use super::node::NodeAuthorizer;
use super::rbac::Rbac;
use super::user::MASTERS;

/// One `--authorization-mode` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `AlwaysAllow`.
    AlwaysAllow,
    /// `AlwaysDeny`.
    AlwaysDeny,
    /// `Node`.
    Node,
    /// `RBAC`.
    Rbac,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s.trim() {
            "AlwaysAllow" => Ok(Mode::AlwaysAllow),
            "AlwaysDeny" => Ok(Mode::AlwaysDeny),
            "Node" => Ok(Mode::Node),
            "RBAC" => Ok(Mode::Rbac),
            other => Err(format!(
                "unknown authorization mode {other:?}: supported modes are AlwaysAllow, AlwaysDeny, Node, RBAC"
            )),
        }
    }
}

/// The modes, with what they read.
#[derive(Debug)]
pub struct Authorizer {
    pub(crate) modes: Vec<Mode>,
    pub(crate) rbac: Option<Arc<Rbac>>,
    pub(crate) node: Option<NodeAuthorizer>,
}

impl Authorizer {
    /// Asks the modes in order.
    pub fn authorize(&self, a: &Attributes<'_>) -> Decision {
        if a.user.in_group(MASTERS) {
            return Decision::Allow;
        }
        let mut reasons: Vec<String> = Vec::new();
        for m in &self.modes {
            let d = match m {
                Mode::AlwaysAllow => Decision::Allow,
                Mode::AlwaysDeny => Decision::Deny("Everything is forbidden.".into()),
                Mode::Node => self
                    .node
                    .as_ref()
                    .map_or(Decision::NoOpinion(String::new()), |n| n.authorize(a)),
                Mode::Rbac => self
                    .rbac
                    .as_ref()
                    .map_or(Decision::NoOpinion(String::new()), |r| r.authorize(a)),
            };
            match d {
                Decision::NoOpinion(why) => {
                    if !why.is_empty() {
                        reasons.push(why);
                    }
                }
                decided => return decided,
            }
        }
        Decision::Deny(reasons.join("\n"))
    }
}

impl Authorizer {
    /// The modes, with the RBAC and Node authorizers they name (a mode whose authorizer is
    /// missing has no opinion).
    pub fn new(
        modes: Vec<Mode>,
        rbac: Option<Arc<Rbac>>,
        node: Option<NodeAuthorizer>,
    ) -> Authorizer {
        Authorizer { modes, rbac, node }
    }
}
