//! `serve --local-pki`: a local PKI in the data dir, made on first start and reused after (as kind
//! and k3s do): a CA, a serving certificate for localhost, 127.0.0.1 and ::1, an admin client
//! certificate (CN `kubernetes-admin`, O `system:masters`) and `admin.kubeconfig` using them.
//!
//! Files (keys are written 0600):
//! `<data>/pki/{ca,serving,admin}.{crt,key}` and `<data>/admin.kubeconfig`.
//!
//! `watchcache up` ([`ClusterPki`]) adds, with the same CA and the same rule (made once, reused):
//! the control plane's client certificates (`<data>/pki/NAME.{crt,key}`), the service-account key
//! pair (`sa.key`, `sa.pub`) and the EncryptionConfiguration (`encryption-config.yaml`). Losing
//! the last two would leave tokens unverifiable and secrets unreadable, so nothing rewrites them.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Where the local PKI's files are.
pub(crate) struct LocalPki {
    /// The CA (also the client CA: the admin certificate is signed by it).
    pub ca_file: PathBuf,
    /// The serving certificate.
    pub cert_file: PathBuf,
    /// The serving key.
    pub key_file: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Whether this start made the certificates (false: they were reused).
    pub created: bool,
}

/// Why the local PKI could not be made or read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PkiError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// rcgen could not make a key or certificate.
    #[error("making the local PKI: {0}")]
    Rcgen(#[from] rcgen::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes a file through a temporary name and a rename, so a crash never leaves half a file.
fn write(path: &Path, contents: &[u8], secret: bool) -> Result<(), PkiError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(contents).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

impl LocalPki {
    /// Makes the PKI in `data_dir` unless it is there, and (re)writes `admin.kubeconfig` for a
    /// server on `listen`.
    ///
    /// # Errors
    /// [`PkiError`].
    pub(crate) fn ensure(data_dir: &Path, listen: SocketAddr) -> Result<LocalPki, PkiError> {
        let dir = data_dir.join("pki");
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let file = |name: &str| dir.join(name);
        let names = [
            "ca.crt",
            "ca.key",
            "serving.crt",
            "serving.key",
            "admin.crt",
            "admin.key",
        ];
        let created = !names.iter().all(|n| file(n).exists());
        if created {
            let (ca_pem, ca_key, issuer) = ca()?;
            let serving = leaf(&issuer, serving_params()?)?;
            let admin = leaf(&issuer, crate::ops::admin_params()?)?;
            for (name, pem, secret) in [
                ("ca.key", &ca_key, true),
                ("serving.crt", &serving.0, false),
                ("serving.key", &serving.1, true),
                ("admin.crt", &admin.0, false),
                ("admin.key", &admin.1, true),
                // Last: its presence with the others means a complete set.
                ("ca.crt", &ca_pem, false),
            ] {
                write(&file(name), pem.as_bytes(), secret)?;
            }
        }
        let read = |name: &str| std::fs::read(file(name)).map_err(io(&file(name)));
        let kubeconfig = data_dir.join("admin.kubeconfig");
        let text = kubeconfig_text(
            &server_url(listen),
            &read("ca.crt")?,
            &read("admin.crt")?,
            &read("admin.key")?,
        );
        if std::fs::read(&kubeconfig).ok().as_deref() != Some(text.as_bytes()) {
            write(&kubeconfig, text.as_bytes(), true)?;
        }
        Ok(LocalPki {
            ca_file: file("ca.crt"),
            cert_file: file("serving.crt"),
            key_file: file("serving.key"),
            kubeconfig,
            created,
        })
    }
}

/// The PKI of `watchcache up`'s control plane: the local PKI (its serving certificate serves
/// watchcache and kube-apiserver alike, both on loopback) and what the components need.
pub(crate) struct ClusterPki {
    /// The local PKI: CA, serving and admin certificates, `admin.kubeconfig` for watchcache.
    pub local: LocalPki,
    /// The admin's certificate (CN `kubernetes-admin`, O `system:masters`).
    pub admin: CertFiles,
    /// The service-account signing key (ECDSA P-256, PKCS#8).
    pub sa_key: PathBuf,
    /// Its public key.
    pub sa_pub: PathBuf,
    /// kube-apiserver's EncryptionConfiguration (secrets with aescbc, configmaps with secretbox).
    pub encryption_config: PathBuf,
    dir: PathBuf,
}

/// A certificate and its key on disk.
pub(crate) struct CertFiles {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM key (0600).
    pub key: PathBuf,
}

impl ClusterPki {
    /// Makes what is missing in `data_dir` (see [`LocalPki::ensure`]) and reuses the rest.
    ///
    /// # Errors
    /// [`PkiError`].
    pub(crate) fn ensure(data_dir: &Path, listen: SocketAddr) -> Result<ClusterPki, PkiError> {
        let local = LocalPki::ensure(data_dir, listen)?;
        let dir = data_dir.join("pki");
        let (sa_key, sa_pub) = (dir.join("sa.key"), dir.join("sa.pub"));
        if !(sa_key.exists() && sa_pub.exists()) {
            let key = KeyPair::generate()?;
            write(&sa_pub, key.public_key_pem().as_bytes(), false)?;
            write(&sa_key, key.serialize_pem().as_bytes(), true)?;
        }
        let encryption_config = dir.join("encryption-config.yaml");
        if !encryption_config.exists() {
            write(
                &encryption_config,
                encryption_config_yaml()?.as_bytes(),
                true,
            )?;
        }
        Ok(ClusterPki {
            local,
            admin: CertFiles {
                cert: dir.join("admin.crt"),
                key: dir.join("admin.key"),
            },
            sa_key,
            sa_pub,
            encryption_config,
            dir,
        })
    }

    /// The client certificate `pki/NAME.{crt,key}` (CN `user`, an O per group, Kubernetes' x509
    /// convention), signed by the CA when missing.
    ///
    /// # Errors
    /// [`PkiError`].
    pub(crate) fn client(
        &self,
        name: &str,
        user: &str,
        groups: &[&str],
    ) -> Result<CertFiles, PkiError> {
        let files = CertFiles {
            cert: self.dir.join(format!("{name}.crt")),
            key: self.dir.join(format!("{name}.key")),
        };
        if files.cert.exists() && files.key.exists() {
            return Ok(files);
        }
        let ca_key_file = self.dir.join("ca.key");
        let ca_key = std::fs::read_to_string(&ca_key_file).map_err(io(&ca_key_file))?;
        let issuer = Issuer::new(ca_params()?, KeyPair::from_pem(&ca_key)?);
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (cert, key) = leaf(&issuer, params)?;
        write(&files.key, key.as_bytes(), true)?;
        // Last: its presence means both are there.
        write(&files.cert, cert.as_bytes(), false)?;
        Ok(files)
    }

    /// Writes a kubeconfig for `server` (an `https://` URL) trusting the CA, as `user`, with the
    /// files embedded, unless it already says exactly that.
    ///
    /// # Errors
    /// [`PkiError`].
    pub(crate) fn kubeconfig(
        &self,
        path: &Path,
        server: &str,
        user: &CertFiles,
    ) -> Result<(), PkiError> {
        let read = |p: &Path| std::fs::read(p).map_err(io(p));
        let text = kubeconfig_text(
            server,
            &read(&self.local.ca_file)?,
            &read(&user.cert)?,
            &read(&user.key)?,
        );
        if std::fs::read(path).ok().as_deref() != Some(text.as_bytes()) {
            write(path, text.as_bytes(), true)?;
        }
        Ok(())
    }
}

/// kube-apiserver's EncryptionConfiguration with fresh 32-byte keys: secrets are written with
/// aescbc, configmaps with secretbox, and both read plain values too (what was stored before).
fn encryption_config_yaml() -> Result<String, PkiError> {
    use std::io::Read;
    let urandom = Path::new("/dev/urandom");
    let key = || {
        let mut k = [0u8; 32];
        std::fs::File::open(urandom)
            .and_then(|mut f| f.read_exact(&mut k))
            .map_err(io(urandom))?;
        Ok::<_, PkiError>(base64::engine::general_purpose::STANDARD.encode(k))
    };
    let (cbc, sbox) = (key()?, key()?);
    Ok(format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - secrets
    providers:
      - aescbc:
          keys:
          - name: cbc
            secret: {cbc}
      - identity: {{}}
  - resources:
      - configmaps
    providers:
      - secretbox:
          keys:
          - name: box
            secret: {sbox}
      - identity: {{}}
"
    ))
}

fn ca() -> Result<(String, String, Issuer<'static, KeyPair>), PkiError> {
    let params = ca_params()?;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let key_pem = key.serialize_pem();
    Ok((cert.pem(), key_pem, Issuer::new(params, key)))
}

/// The CA's parameters: what a certificate it signs names as its issuer (the subject and the key
/// identifier come from these and the key), so the CA of an earlier start signs from its key file.
fn ca_params() -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
        .distinguished_name
        .push(DnType::CommonName, "watchcache-ca");
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    Ok(params)
}

fn serving_params() -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
    params.subject_alt_names.extend([
        SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        SanType::IpAddress(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
    ]);
    params
        .distinguished_name
        .push(DnType::CommonName, "watchcache");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    Ok(params)
}

/// A certificate signed by the CA: (cert PEM, key PEM).
fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    mut params: CertificateParams,
) -> Result<(String, String), PkiError> {
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The server URL a local client uses for `listen` (an unspecified address means loopback).
pub(crate) fn server_url(listen: SocketAddr) -> String {
    let ip = if listen.ip().is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        listen.ip()
    };
    format!("https://{}", SocketAddr::new(ip, listen.port()))
}

fn kubeconfig_text(server: &str, ca: &[u8], cert: &[u8], key: &[u8]) -> String {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: watchcache
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: kubernetes-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: kubernetes-admin@watchcache
  context:
    cluster: watchcache
    user: kubernetes-admin
current-context: kubernetes-admin@watchcache
",
        ca = b64(ca),
        cert = b64(cert),
        key = b64(key),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pki_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let listen: SocketAddr = "0.0.0.0:6443".parse().unwrap();
        let first = LocalPki::ensure(dir.path(), listen).unwrap();
        assert!(first.created);
        let ca = std::fs::read(&first.ca_file).unwrap();
        let serving = std::fs::read(&first.cert_file).unwrap();
        let second = LocalPki::ensure(dir.path(), listen).unwrap();
        assert!(!second.created);
        assert_eq!(std::fs::read(&second.ca_file).unwrap(), ca);
        assert_eq!(std::fs::read(&second.cert_file).unwrap(), serving);
        let kubeconfig = std::fs::read_to_string(&second.kubeconfig).unwrap();
        assert!(kubeconfig.contains("server: https://127.0.0.1:6443\n"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("pki/admin.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    fn openssl(args: &[&str]) -> String {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl on PATH");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn the_cluster_pki_signs_with_the_ca_of_an_earlier_start_and_keeps_its_keys() {
        let dir = tempfile::tempdir().unwrap();
        let listen: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        // An earlier `serve --local-pki` made the CA; `up` adds to it.
        let first = LocalPki::ensure(dir.path(), listen).unwrap();
        let pki = ClusterPki::ensure(dir.path(), listen).unwrap();
        let id = pki
            .client("scheduler", "system:kube-scheduler", &["g1", "g2"])
            .unwrap();
        let ca = first.ca_file.to_str().unwrap();
        let cert = id.cert.to_str().unwrap();
        assert!(openssl(&["verify", "-CAfile", ca, cert]).contains(": OK"));
        let subject = openssl(&["x509", "-in", cert, "-noout", "-subject"]);
        assert!(
            subject.contains("CN = system:kube-scheduler") && subject.contains("O = g2"),
            "{subject}"
        );
        let kept = |p: &Path| std::fs::read(p).unwrap();
        let (sa, enc, made) = (
            kept(&pki.sa_key),
            kept(&pki.encryption_config),
            kept(&id.cert),
        );
        let again = ClusterPki::ensure(dir.path(), listen).unwrap();
        assert_eq!(kept(&again.sa_key), sa);
        assert_eq!(kept(&again.encryption_config), enc);
        let id = again.client("scheduler", "other", &[]).unwrap();
        assert_eq!(kept(&id.cert), made, "made once");
        let yaml = String::from_utf8(enc).unwrap();
        assert!(
            yaml.contains("- aescbc:") && yaml.contains("- secretbox:"),
            "{yaml}"
        );
        let kc = dir.path().join("x.kubeconfig");
        again
            .kubeconfig(&kc, "https://127.0.0.1:1234", &id)
            .unwrap();
        let text = std::fs::read_to_string(&kc).unwrap();
        assert!(text.contains("server: https://127.0.0.1:1234\n"), "{text}");
    }
}
