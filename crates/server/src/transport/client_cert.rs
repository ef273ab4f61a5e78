//! Client certificate verification: rustls' webpki verifier, and X.509 **v1** leaves beside it.
//!
//! webpki accepts only v3 certificates, but `openssl x509 -req` without an extensions file makes
//! v1 ones, and kube-apiserver (Go's crypto/x509) accepts them: such a client failed the TLS
//! handshake here. A v1 leaf (it has no extensions, so no key-usage limits, as Go reads it) is
//! verified by hand with the same rules Go applies: the leaf and every certificate up the chain
//! within its validity period; each signature checked with the issuer's key by the provider's own
//! algorithms (the signature algorithm must be the one the certificate's body names); issuers
//! found by subject among the presented intermediates and the client CA bundle; an intermediate
//! must be a CA (basic constraints), within its path length, allow client authentication if it
//! limits extended key usage, and carry no name constraints or other critical extension this
//! code does not read (refused rather than guessed); at most [`MAX_INTERMEDIATES`]. The chain ends
//! at a certificate of the client CA bundle. Every other certificate goes to webpki unchanged.
//!
//! The handshake's own signature by a v1 leaf is checked against the leaf's public key with the
//! same algorithms rustls uses. A refused v1 certificate is logged with its reason.

// Reads outside input (certificates from the network): it must not panic on any of it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::{FromDer, X509Version};

/// Most intermediates between a v1 leaf and the client CA.
pub(crate) const MAX_INTERMEDIATES: usize = 5;

/// The OID of `id-kp-clientAuth` and of `anyExtendedKeyUsage`, as their DER contents.
const CLIENT_AUTH: &str = "1.3.6.1.5.5.7.3.2";

/// webpki's verifier, with v1 leaves verified beside it.
#[derive(Debug)]
pub(crate) struct ClientVerifier {
    webpki: Arc<dyn ClientCertVerifier>,
    /// The client CA bundle (DER), the trust anchors of v1 chains.
    roots: Vec<CertificateDer<'static>>,
    algs: WebPkiSupportedAlgorithms,
}

impl ClientVerifier {
    pub(crate) fn new(
        webpki: Arc<dyn ClientCertVerifier>,
        roots: Vec<CertificateDer<'static>>,
        algs: WebPkiSupportedAlgorithms,
    ) -> ClientVerifier {
        ClientVerifier {
            webpki,
            roots,
            algs,
        }
    }
}

fn parse(d: &[u8]) -> Result<X509Certificate<'_>, String> {
    X509Certificate::from_der(d)
        .map(|(_, c)| c)
        .map_err(|e| format!("a certificate does not parse: {e}"))
}

/// A certificate's version, when it parses.
fn is_v1(der: &[u8]) -> bool {
    X509Certificate::from_der(der).is_ok_and(|(_, c)| c.version() == X509Version::V1)
}

fn bad(why: impl Into<String>) -> Error {
    Error::General(why.into())
}

/// One DER element: (tag, contents, what follows).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let len = rest
            .get(..n)?
            .iter()
            .fold(0usize, |a, b| (a << 8) | usize::from(*b));
        (len, rest.get(n..)?)
    };
    Some((tag, rest.get(..len)?, rest.get(len..)?))
}

/// A certificate's signed body (the whole TBS element), its signature algorithm (the
/// AlgorithmIdentifier's contents) and its signature.
fn signed_parts(cert: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (0x30, body, _) = der(cert)? else {
        return None;
    };
    let (0x30, _, after_tbs) = der(body)? else {
        return None;
    };
    let tbs = body.get(..body.len() - after_tbs.len())?;
    let (0x30, alg, after_alg) = der(after_tbs)? else {
        return None;
    };
    let (0x03, bits, rest) = der(after_alg)? else {
        return None;
    };
    let (0, signature) = bits.split_first()? else {
        return None;
    };
    rest.is_empty().then_some((tbs, alg, signature))
}

/// A SubjectPublicKeyInfo's algorithm (the AlgorithmIdentifier's contents) and key bits.
fn key_parts(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (0x30, body, _) = der(spki)? else {
        return None;
    };
    let (0x30, alg, rest) = der(body)? else {
        return None;
    };
    let (0x03, bits, _) = der(rest)? else {
        return None;
    };
    let (0, key) = bits.split_first()? else {
        return None;
    };
    Some((alg, key))
}

impl ClientVerifier {
    /// Whether `cert` is signed by the key `issuer_spki`, with an algorithm the provider has.
    fn signed_by(&self, cert: &X509Certificate<'_>, issuer_spki: &[u8]) -> Result<(), String> {
        let (tbs, alg, signature) =
            signed_parts(cert.as_raw()).ok_or("the certificate's signature does not parse")?;
        if cert.tbs_certificate.signature != cert.signature_algorithm {
            return Err("the signature algorithm differs from the one the body names".into());
        }
        let (key_alg, key) = key_parts(issuer_spki).ok_or("the issuer's key does not parse")?;
        let verified = self.algs.all.iter().any(|a| {
            a.signature_alg_id().as_ref() == alg
                && a.public_key_alg_id().as_ref() == key_alg
                && a.verify_signature(key, tbs, signature).is_ok()
        });
        if verified {
            Ok(())
        } else {
            Err("the signature does not verify with the issuer's key".into())
        }
    }

    /// Go's `Verify` for a v1 leaf: a chain to the client CA bundle.
    fn verify_v1(
        &self,
        leaf: &[u8],
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), String> {
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        let in_time = |c: &X509Certificate<'_>| {
            let v = c.validity();
            if now < v.not_before.timestamp() {
                Err(format!("{} is not valid yet", c.subject()))
            } else if now > v.not_after.timestamp() {
                Err(format!("{} has expired", c.subject()))
            } else {
                Ok(())
            }
        };
        let mut current = parse(leaf)?;
        in_time(&current)?;
        let mut below = 0usize;
        loop {
            let issuer = current.issuer().as_raw();
            for root in &self.roots {
                let root = parse(root)?;
                if root.subject().as_raw() == issuer
                    && self.signed_by(&current, root.public_key().raw).is_ok()
                {
                    return in_time(&root);
                }
            }
            if below >= MAX_INTERMEDIATES {
                return Err("the chain is too long".into());
            }
            let next = intermediates
                .iter()
                .filter_map(|d| parse(d).ok())
                .find(|c| {
                    c.subject().as_raw() == issuer
                        && self.signed_by(&current, c.public_key().raw).is_ok()
                })
                .ok_or_else(|| format!("no trusted issuer for {}", current.subject()))?;
            intermediate_allowed(&next, below)?;
            in_time(&next)?;
            current = next;
            below += 1;
        }
    }
}

/// Whether an intermediate may sign client certificates with `below` intermediates under it.
fn intermediate_allowed(c: &X509Certificate<'_>, below: usize) -> Result<(), String> {
    let who = c.subject();
    let bc = c
        .basic_constraints()
        .map_err(|e| format!("{who}: {e}"))?
        .ok_or_else(|| format!("{who} is not a CA (no basic constraints)"))?;
    if !bc.value.ca {
        return Err(format!("{who} is not a CA"));
    }
    if bc
        .value
        .path_len_constraint
        .is_some_and(|max| below > usize::try_from(max).unwrap_or(usize::MAX))
    {
        return Err(format!("{who}: the path length constraint is exceeded"));
    }
    if let Some(eku) = c.extended_key_usage().map_err(|e| format!("{who}: {e}"))? {
        let e = eku.value;
        if !(e.any || e.client_auth || e.other.iter().any(|o| o.to_id_string() == CLIENT_AUTH)) {
            return Err(format!("{who} does not allow client authentication"));
        }
    }
    for ext in c.extensions() {
        let oid = ext.oid.to_id_string();
        let read = matches!(
            oid.as_str(),
            "2.5.29.19" | "2.5.29.15" | "2.5.29.37" | "2.5.29.14" | "2.5.29.35"
        );
        if oid == "2.5.29.30" || (ext.critical && !read) {
            return Err(format!("{who}: extension {oid} is not supported here"));
        }
    }
    Ok(())
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.webpki.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.webpki.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if !is_v1(end_entity) {
            return self
                .webpki
                .verify_client_cert(end_entity, intermediates, now);
        }
        match self.verify_v1(end_entity, intermediates, now) {
            Ok(()) => Ok(ClientCertVerified::assertion()),
            Err(why) => {
                tracing::info!(reason = %why, "an X.509 v1 client certificate was refused");
                Err(bad(format!("X.509 v1 client certificate refused: {why}")))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if !is_v1(cert) {
            return self.webpki.verify_tls12_signature(message, cert, dss);
        }
        // TLS 1.2 names the scheme loosely: any of its algorithms for the leaf's key will do.
        let (key_alg, key) = leaf_key(cert)?;
        let candidates = self
            .algs
            .mapping
            .iter()
            .find(|(s, _)| *s == dss.scheme)
            .map(|(_, algs)| *algs)
            .unwrap_or_default();
        candidates
            .iter()
            .any(|a| {
                a.public_key_alg_id().as_ref() == key_alg
                    && a.verify_signature(&key, message, dss.signature()).is_ok()
            })
            .then(HandshakeSignatureValid::assertion)
            .ok_or_else(|| bad("the v1 client certificate's key did not sign the handshake"))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if !is_v1(cert) {
            return self.webpki.verify_tls13_signature(message, cert, dss);
        }
        let spki = X509Certificate::from_der(cert)
            .map(|(_, c)| c.public_key().raw.to_vec())
            .map_err(|e| bad(format!("the client certificate does not parse: {e}")))?;
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(spki.as_slice()),
            dss,
            &self.algs,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A certificate's key: its algorithm (AlgorithmIdentifier contents) and bits.
fn leaf_key(cert: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let (_, c) = X509Certificate::from_der(cert)
        .map_err(|e| bad(format!("the client certificate does not parse: {e}")))?;
    let (alg, key) =
        key_parts(c.public_key().raw).ok_or_else(|| bad("the client key does not parse"))?;
    Ok((alg.to_vec(), key.to_vec()))
}

/// The fuzz target behind `watchcache::fuzz::client_cert`: `data` as a client's certificate
/// chain, DER elements one after another: the leaf, its intermediates, and the last one also the
/// only trust anchor, so that a mutated valid chain reaches the signature checks and the chain
/// walk. Every reader of the bytes runs on them; none may panic. Also checked: without a trust
/// anchor no v1 leaf is accepted, and one that is accepted has a signed body this file can read.
/// Returns whether the chain was accepted.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz(data: &[u8]) -> bool {
    let _ = (
        der(data),
        signed_parts(data),
        key_parts(data),
        leaf_key(data),
    );
    let mut certs: Vec<CertificateDer<'static>> = Vec::new();
    let mut rest = data;
    while let Some((_, _, after)) = der(rest) {
        let taken = rest.len() - after.len();
        certs.extend(rest.get(..taken).map(|c| CertificateDer::from(c.to_vec())));
        rest = after;
    }
    let Some((leaf, intermediates)) = certs.split_first() else {
        return false;
    };
    let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let now = UnixTime::now();
    let anchored = ClientVerifier::new(
        Arc::new(RefuseAll),
        certs.last().cloned().into_iter().collect(),
        algs,
    );
    let accepted = anchored
        .verify_client_cert(leaf, intermediates, now)
        .is_ok();
    if accepted && is_v1(leaf) {
        assert!(
            signed_parts(leaf).is_some(),
            "an accepted v1 leaf has a readable signed body"
        );
    }
    let bare = ClientVerifier::new(Arc::new(RefuseAll), Vec::new(), algs);
    assert!(
        bare.verify_client_cert(leaf, intermediates, now).is_err(),
        "a chain with no trust anchor is accepted"
    );
    accepted
}

/// The fuzz target's stand-in for webpki, whose parser is not this file's: it refuses all.
#[cfg(feature = "fuzzing")]
#[derive(Debug)]
struct RefuseAll;

#[cfg(feature = "fuzzing")]
impl ClientCertVerifier for RefuseAll {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        Err(bad("refused"))
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(bad("refused"))
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(bad("refused"))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    /// Runs openssl in `dir` (certificates made as an operator makes them).
    fn openssl(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl on PATH");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pem(dir: &Path, name: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(dir.join(name)).unwrap()
    }

    /// A self-signed CA (v3, CA:TRUE) named `name`.
    fn ca(dir: &Path, name: &str) -> PathBuf {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "3",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        dir.join(format!("{name}.crt"))
    }

    /// A certificate for `subject` signed by `issuer`: v1 without `ext`, v3 with it.
    fn signed(dir: &Path, name: &str, subject: &str, issuer: &str, key: &str, ext: Option<&str>) {
        let newkey = if key == "ec" {
            openssl(
                dir,
                &[
                    "ecparam",
                    "-name",
                    "prime256v1",
                    "-genkey",
                    "-noout",
                    "-out",
                    &format!("{name}.key"),
                ],
            );
            None
        } else {
            Some(["-newkey", "rsa:2048", "-nodes", "-keyout"])
        };
        let (key_file, csr) = (format!("{name}.key"), format!("{name}.csr"));
        let mut req = vec!["req", "-new", "-out", csr.as_str(), "-subj", subject];
        match &newkey {
            Some(n) => {
                req.extend_from_slice(n);
                req.push(&key_file);
            }
            None => req.extend_from_slice(&["-key", &key_file]),
        }
        openssl(dir, &req);
        let (ca_crt, ca_key, out) = (
            format!("{issuer}.crt"),
            format!("{issuer}.key"),
            format!("{name}.crt"),
        );
        let mut x509 = vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-set_serial",
            "9",
            "-days",
            "1",
            "-out",
            &out,
        ];
        let ext_file = format!("{name}.ext");
        if let Some(e) = ext {
            std::fs::write(dir.join(&ext_file), e).unwrap();
            x509.extend_from_slice(&["-extfile", &ext_file]);
        }
        openssl(dir, &x509);
    }

    fn verifier(ca: &Path) -> ClientVerifier {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cas = vec![CertificateDer::from_pem_file(ca).unwrap()];
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cas[0].clone()).unwrap();
        let algs = provider.signature_verification_algorithms;
        let webpki =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .unwrap();
        ClientVerifier::new(webpki, cas, algs)
    }

    fn at(secs_from_now: i64) -> UnixTime {
        let now = UnixTime::now().as_secs() as i64;
        UnixTime::since_unix_epoch(Duration::from_secs((now + secs_from_now) as u64))
    }

    #[test]
    fn v1_leaves_chain_to_the_client_ca_within_their_validity() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let root = ca(dir, "root");
        ca(dir, "other");
        let v = verifier(&root);
        signed(dir, "alice", "/CN=alice/O=devs", "root", "rsa", None);
        signed(dir, "bob", "/CN=bob", "root", "ec", None);
        let alice = pem(dir, "alice.crt");
        assert!(is_v1(&alice));
        for leaf in [&alice, &pem(dir, "bob.crt")] {
            assert!(v.verify_client_cert(leaf, &[], at(0)).is_ok());
            // Outside its validity period (one day): refused.
            assert!(
                v.verify_client_cert(leaf, &[], at(3 * 86_400)).is_err(),
                "expired"
            );
            assert!(
                v.verify_client_cert(leaf, &[], at(-86_400)).is_err(),
                "not yet valid"
            );
        }
        // Another CA's v1 certificate; a signature changed by one bit.
        signed(
            dir,
            "mallory",
            "/CN=mallory/O=system:masters",
            "other",
            "rsa",
            None,
        );
        let e = v
            .verify_client_cert(&pem(dir, "mallory.crt"), &[], at(0))
            .unwrap_err();
        assert!(e.to_string().contains("no trusted issuer"), "{e}");
        let mut tampered = alice.to_vec();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(
            v.verify_client_cert(&CertificateDer::from(tampered), &[], at(0))
                .is_err()
        );
        // v3 certificates still go to webpki (which wants client authentication allowed).
        signed(
            dir,
            "v3",
            "/CN=v3",
            "root",
            "rsa",
            Some("extendedKeyUsage=clientAuth\n"),
        );
        assert!(!is_v1(&pem(dir, "v3.crt")));
        assert!(
            v.verify_client_cert(&pem(dir, "v3.crt"), &[], at(0))
                .is_ok()
        );
        signed(
            dir,
            "v3srv",
            "/CN=v3srv",
            "root",
            "rsa",
            Some("extendedKeyUsage=serverAuth\n"),
        );
        assert!(
            v.verify_client_cert(&pem(dir, "v3srv.crt"), &[], at(0))
                .is_err()
        );
    }

    #[test]
    fn v1_leaves_chain_through_ca_intermediates_only() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let root = ca(dir, "root");
        let v = verifier(&root);
        signed(
            dir,
            "mid",
            "/CN=mid",
            "root",
            "rsa",
            Some("basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign\n"),
        );
        signed(dir, "leaf", "/CN=carol", "mid", "rsa", None);
        let (mid, leaf) = (pem(dir, "mid.crt"), pem(dir, "leaf.crt"));
        assert!(
            v.verify_client_cert(&leaf, std::slice::from_ref(&mid), at(0))
                .is_ok()
        );
        assert!(
            v.verify_client_cert(&leaf, &[], at(0)).is_err(),
            "the intermediate is needed"
        );
        // An intermediate that is not a CA (a v1 certificate has no basic constraints), or one
        // that limits its use to servers, signs no client certificate.
        signed(dir, "notca", "/CN=notca", "root", "rsa", None);
        signed(dir, "leaf2", "/CN=dave", "notca", "rsa", None);
        let e = v
            .verify_client_cert(&pem(dir, "leaf2.crt"), &[pem(dir, "notca.crt")], at(0))
            .unwrap_err();
        assert!(e.to_string().contains("not a CA"), "{e}");
        signed(
            dir,
            "srvmid",
            "/CN=srvmid",
            "root",
            "rsa",
            Some("basicConstraints=critical,CA:TRUE\nextendedKeyUsage=serverAuth\n"),
        );
        signed(dir, "leaf3", "/CN=erin", "srvmid", "rsa", None);
        let e = v
            .verify_client_cert(&pem(dir, "leaf3.crt"), &[pem(dir, "srvmid.crt")], at(0))
            .unwrap_err();
        assert!(e.to_string().contains("client authentication"), "{e}");
    }

    /// The fuzz target's corpus reaches the chain walk and the signature checks: its valid v1
    /// chains are accepted; a self-issued CA presented as its own issuer is walked at most
    /// `MAX_INTERMEDIATES` times, then refused.
    #[cfg(feature = "fuzzing")]
    #[test]
    fn the_fuzz_corpus_reaches_the_chain_walk() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz-corpus/client_cert");
        let run = |name: &str| fuzz(&std::fs::read(dir.join(name)).unwrap());
        assert!(run("v1-leaf-root.der"));
        assert!(run("v1-leaf-intermediate-root.der"));
        // v3 goes to webpki, which the target refuses.
        assert!(!run("v3-leaf-root.der"));
        assert!(!run("v1-leaf-alone.der"), "a leaf is not its own anchor");
        assert!(!run("huge-length.der"));
        let started = std::time::Instant::now();
        assert!(!run("v1-leaf-self-issued-loop.der"));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn hostile_bytes_are_refused_without_panicking() {
        let d = tempfile::tempdir().unwrap();
        let root = ca(d.path(), "root");
        let v = verifier(&root);
        signed(d.path(), "alice", "/CN=alice", "root", "rsa", None);
        let good = pem(d.path(), "alice.crt").to_vec();
        for cut in [0, 1, 4, 10, good.len() / 2, good.len() - 1] {
            let short = CertificateDer::from(good[..cut].to_vec());
            assert!(v.verify_client_cert(&short, &[], at(0)).is_err(), "{cut}");
        }
        for i in (0..good.len()).step_by(7) {
            let mut bent = good.clone();
            bent[i] ^= 0x55;
            // Either refused, or (a byte the signature does not cover, such as an outer
            // length that still parses) the same certificate verified.
            let _ = v.verify_client_cert(&CertificateDer::from(bent), &[], at(0));
        }
        assert_eq!(der(&[0x30, 0x85, 1, 1, 1, 1, 1]), None);
        assert_eq!(signed_parts(&[0x30, 0x00]), None);
        assert_eq!(key_parts(&[]), None);
    }
}
