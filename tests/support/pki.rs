//! A throwaway PKI for TLS tests: a CA, and certificates it signs, written as PEM files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

pub struct Ca {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

/// A PEM certificate and key on disk.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let cert_file = dir.join(format!("{name}.crt"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        let key_file = dir.join(format!("{name}.key"));
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        Ca {
            cert_file,
            key_file,
            issuer: Issuer::new(params, key),
            dir: dir.to_owned(),
        }
    }

    /// A serving certificate for 127.0.0.1 and localhost.
    pub fn server(&self, name: &str) -> Issued {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(name, params)
    }

    /// A client certificate: CN is the user, each O a group (Kubernetes' x509 convention).
    pub fn client(&self, name: &str, user: &str, groups: &[&str]) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(name, params)
    }

    /// An X.509 **v1** client certificate, made as `openssl x509 -req` makes one without an
    /// extensions file (kube-apiserver accepts them; rustls' webpki does not).
    pub fn client_v1(&self, name: &str, user: &str, groups: &[&str]) -> Issued {
        let (cert_file, key_file, csr) = (
            self.dir.join(format!("{name}.crt")),
            self.dir.join(format!("{name}.key")),
            self.dir.join(format!("{name}.csr")),
        );
        let mut subject = format!("/CN={user}");
        for g in groups {
            subject.push_str(&format!("/O={g}"));
        }
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl on PATH");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let path = |p: &PathBuf| p.to_str().unwrap().to_owned();
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &path(&key_file),
            "-out",
            &path(&csr),
            "-subj",
            &subject,
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &path(&csr),
            "-CA",
            &path(&self.cert_file),
            "-CAkey",
            &path(&self.key_file),
            "-set_serial",
            "7",
            "-days",
            "1",
            "-out",
            &path(&cert_file),
        ]);
        let text = openssl(&["x509", "-in", &path(&cert_file), "-noout", "-text"]);
        assert!(text.contains("Version: 1 (0x0)"), "{text}");
        Issued {
            cert_file,
            key_file,
        }
    }

    fn issue(&self, name: &str, mut params: CertificateParams) -> Issued {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_file, key_file) = (
            self.dir.join(format!("{name}.crt")),
            self.dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        Issued {
            cert_file,
            key_file,
        }
    }
}
