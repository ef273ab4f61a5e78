//! The kubelet model's PKI, made per run in its directory: one CA that signs the serving
//! certificate, the admin's (`system:masters`) and every node's client certificate (CN
//! `system:node:NAME`, O `system:nodes`), so both servers take it as their client CA; and the
//! service-account key pair kube-apiserver needs to start.
//!
//! The node certificates share one key pair: signing 10 000 certificates is cheap, generating
//! 10 000 keys is not, and a shared key changes nothing the servers see (each certificate is its
//! own identity to them).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The run's PKI: files for the servers, in-memory identities for the clients.
pub(crate) struct Pki {
    pub ca_file: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    roots: Arc<rustls::RootCertStore>,
    admin: Arc<rustls::ClientConfig>,
    node_key: KeyPair,
}

fn err(e: impl std::fmt::Display) -> String {
    format!("bench PKI: {e}")
}

impl Pki {
    /// Makes the CA, the serving certificate (localhost, 127.0.0.1), the admin and the
    /// service-account keys in `dir`.
    pub(crate) fn new(dir: &Path) -> Result<Pki, String> {
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.distinguished_name
            .push(DnType::CommonName, "watchcache-bench-ca");
        let ca_key = KeyPair::generate().map_err(err)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca, ca_key);
        let write = |name: &str, text: &str| -> Result<PathBuf, String> {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(err)?;
            Ok(p)
        };
        let ca_file = write("ca.crt", &ca_cert.pem())?;
        let mut serving = CertificateParams::new(vec!["localhost".to_owned()]).map_err(err)?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::V4(
                std::net::Ipv4Addr::LOCALHOST,
            )));
        serving
            .distinguished_name
            .push(DnType::CommonName, "bench-server");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key_pair = KeyPair::generate().map_err(err)?;
        let serving_cert = serving.signed_by(&serving_key_pair, &issuer).map_err(err)?;
        let serving_cert = write("serving.crt", &serving_cert.pem())?;
        let serving_key = write("serving.key", &serving_key_pair.serialize_pem())?;
        let sa = KeyPair::generate().map_err(err)?;
        let sa_key = write("sa.key", &sa.serialize_pem())?;
        let sa_pub = write("sa.pub", &sa.public_key_pem())?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).map_err(err)?;
        let roots = Arc::new(roots);
        let node_key = KeyPair::generate().map_err(err)?;
        let admin_key = KeyPair::generate().map_err(err)?;
        let admin = client_config(
            &issuer,
            &roots,
            "kubernetes-admin",
            &["system:masters"],
            &admin_key,
        )?;
        Ok(Pki {
            ca_file,
            serving_cert,
            serving_key,
            sa_key,
            sa_pub,
            issuer,
            roots,
            admin,
            node_key,
        })
    }

    /// The admin's client configuration (`system:masters`), h2 only.
    pub(crate) fn admin(&self) -> Arc<rustls::ClientConfig> {
        Arc::clone(&self.admin)
    }

    /// The admin's certificate and key as PEM files in `dir` (`admin.crt`, `admin.key`): for
    /// a kubeconfig, where a client reads its identity from files.
    pub(crate) fn admin_files(&self, dir: &Path) -> Result<(PathBuf, PathBuf), String> {
        let params = crate::ops::admin_params().map_err(err)?;
        let key = KeyPair::generate().map_err(err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        let (cert_file, key_file) = (dir.join("admin.crt"), dir.join("admin.key"));
        std::fs::write(&cert_file, cert.pem()).map_err(err)?;
        std::fs::write(&key_file, key.serialize_pem()).map_err(err)?;
        Ok((cert_file, key_file))
    }

    /// Node `name`'s client configuration: CN `system:node:<name>`, O `system:nodes`, h2 only
    /// (a kubelet's one connection).
    pub(crate) fn node(&self, name: &str) -> Result<Arc<rustls::ClientConfig>, String> {
        client_config(
            &self.issuer,
            &self.roots,
            &format!("system:node:{name}"),
            &["system:nodes"],
            &self.node_key,
        )
    }
}

/// A client configuration with a certificate for `user` in `groups`, signed by the CA, offering
/// h2 only (a kubelet's one connection).
fn client_config(
    issuer: &Issuer<'static, KeyPair>,
    roots: &Arc<rustls::RootCertStore>,
    user: &str,
    groups: &[&str],
    key: &KeyPair,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.distinguished_name.push(DnType::CommonName, user);
    for g in groups {
        params.distinguished_name.push(DnType::OrganizationName, *g);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = params.signed_by(key, issuer).map_err(err)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(err)?
    .with_root_certificates(Arc::clone(roots))
    .with_client_auth_cert(vec![CertificateDer::from(cert.der().to_vec())], key_der)
    .map_err(err)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}
