//! x509 client certificates: the user a verified certificate names. The TLS handshake has
//! already verified the chain against `--client-ca-file` (crates/server/src/tls*); this reads the
//! subject as upstream does: the common name is the user, each organization a group.

use super::user::User;

/// The user of a client certificate (DER), or why it names none.
///
/// # Errors
/// The certificate does not parse, or its subject has no common name.
pub fn user_of(der: &[u8]) -> Result<User, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the client certificate does not parse: {e}"))?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .ok_or_else(|| "the client certificate's subject has no common name".to_owned())?;
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_owned)
        .collect();
    Ok(User::authenticated(name, "", groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn cert(cn: Option<&str>, orgs: &[&str]) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn common_name_is_the_user_and_organizations_the_groups() {
        let u = user_of(&cert(Some("alice"), &["dev"])).unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["dev", "system:authenticated"]);
        // Several organizations (rcgen keeps one per attribute type, so this one was made with
        // `openssl req -subj "/CN=system:node:n1/O=system:nodes/O=extra"`).
        let u = user_of(include_bytes!("testdata/node-n1.der")).unwrap();
        assert_eq!(u.name, "system:node:n1");
        assert_eq!(u.groups, ["system:nodes", "extra", "system:authenticated"]);
        assert_eq!(u.node_name(), Some("n1"));
        let e = user_of(&cert(None, &["g"])).unwrap_err();
        assert!(e.contains("no common name"), "{e}");
        assert!(user_of(b"not a certificate").is_err());
    }
}
