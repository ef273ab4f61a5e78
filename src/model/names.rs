//! Object names and namespaces as upstream validates them (`k8s.io/apimachinery/pkg/util/validation`):
//! most resources name objects with a DNS-1123 subdomain, namespaces with a DNS-1123 label, and
//! services with a DNS-1035 label. A name that passes is also a safe etcd key segment and path
//! segment (no `/`, `%`, space, `.` or `..`).
// Reads outside input (requests or stored values): it must not panic on any of it
// (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::panic
    )
)]

/// Which syntax a resource's object names follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`, at most 253 characters.
    Dns1123Subdomain,
    /// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
    Dns1123Label,
    /// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
    Dns1035Label,
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
    characters, '-' or '.', and must start and end with an alphanumeric character (e.g. \
    'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
    characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
    '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or \
    '-', start with an alphabetic character, and end with an alphanumeric character (e.g. \
    'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

impl NameRule {
    /// The rule upstream applies to the names of a resource (by API group and plural). Custom
    /// resources use DNS subdomains, as upstream's default does.
    pub fn for_resource(group: &str, plural: &str) -> NameRule {
        match (group, plural) {
            ("", "namespaces") => NameRule::Dns1123Label,
            ("", "services") => NameRule::Dns1035Label,
            _ => NameRule::Dns1123Subdomain,
        }
    }

    /// Checks a name; the errors are upstream's messages (several when several rules fail).
    ///
    /// # Errors
    /// Each rule the name breaks.
    pub fn validate(self, name: &str) -> Result<(), Vec<String>> {
        let mut errs = Vec::new();
        let (max, ok, msg) = match self {
            NameRule::Dns1123Subdomain => (253, name.split('.').all(is_label), SUBDOMAIN_MSG),
            NameRule::Dns1123Label => (63, is_label(name), LABEL_MSG),
            NameRule::Dns1035Label => (
                63,
                is_label(name) && name.as_bytes().first().is_some_and(u8::is_ascii_lowercase),
                DNS1035_MSG,
            ),
        };
        if name.len() > max {
            errs.push(format!("must be no more than {max} characters"));
        }
        if !ok {
            errs.push(msg.to_owned());
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, any length.
fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// Checks a namespace name (a DNS-1123 label, as upstream's `ValidateNamespaceName`).
///
/// # Errors
/// Each rule the name breaks.
pub fn validate_namespace(ns: &str) -> Result<(), Vec<String>> {
    NameRule::Dns1123Label.validate(ns)
}

const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', \
    '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
    '[-._a-zA-Z0-9]+')";

/// Checks a key of a ConfigMap's or Secret's data (upstream's `IsConfigMapKey`): at most 253
/// characters of `[-._a-zA-Z0-9]`, and not `.`, `..` or anything starting with `..` (a key becomes
/// a file name where the object is mounted, so it must not leave its directory).
///
/// # Errors
/// Each rule the key breaks, in upstream's words.
pub fn validate_config_key(key: &str) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
    {
        errs.push(CONFIG_KEY_MSG.to_owned());
    }
    if key == "." {
        errs.push("must not be '.'".to_owned());
    } else if key == ".." {
        errs.push("must not be '..'".to_owned());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".to_owned());
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_are_file_names_that_stay_in_their_directory() {
        for ok in [
            "a",
            "key.name",
            "KEY_NAME",
            "key-name",
            ".hidden",
            "a..b",
            &"k".repeat(253),
        ] {
            assert_eq!(validate_config_key(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            validate_config_key("../escape").unwrap_err(),
            [CONFIG_KEY_MSG, "must not start with '..'"]
        );
        assert_eq!(validate_config_key("a/b").unwrap_err(), [CONFIG_KEY_MSG]);
        assert_eq!(validate_config_key("..").unwrap_err(), ["must not be '..'"]);
        assert_eq!(validate_config_key(".").unwrap_err(), ["must not be '.'"]);
        assert_eq!(validate_config_key("").unwrap_err(), [CONFIG_KEY_MSG]);
        assert_eq!(validate_config_key(&"k".repeat(254)).unwrap_err().len(), 1);
    }

    #[test]
    fn names_follow_upstreams_rules_per_resource() {
        let sub = NameRule::for_resource("", "pods");
        assert_eq!(sub, NameRule::Dns1123Subdomain);
        for ok in ["a", "web-1", "a.b.c", "0abc", &"a".repeat(253)] {
            assert_eq!(sub.validate(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "héllo☃",
            "A",
            "-a",
            "a-",
            "a..b",
            ".",
            "..",
            "a/b",
            "a%2f",
            "a=b",
            "a,b",
            &"a".repeat(254),
        ] {
            assert!(sub.validate(bad).is_err(), "{bad}");
        }
        assert_eq!(
            sub.validate(&"-".repeat(254)).unwrap_err().len(),
            2,
            "both the length and the syntax are reported"
        );
        let label = NameRule::for_resource("", "namespaces");
        assert_eq!(label.validate("kube-system"), Ok(()));
        for bad in ["a.b", &"a".repeat(64)] {
            assert!(label.validate(bad).is_err(), "{bad}");
        }
        assert_eq!(validate_namespace("default"), Ok(()));
        assert!(validate_namespace("").is_err());
        let svc = NameRule::for_resource("", "services");
        assert_eq!(svc.validate("my-svc"), Ok(()));
        assert!(svc.validate("1svc").is_err());
        assert_eq!(
            NameRule::for_resource("example.com", "services"),
            NameRule::Dns1123Subdomain
        );
    }
}
