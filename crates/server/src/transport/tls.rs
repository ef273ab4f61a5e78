//! TLS on the serving port: the certificate, its key and the client CA as files, kept current.
//!
//! The files are read into one `rustls::ServerConfig`; each handshake takes the config that is
//! current when the connection is accepted, so a reload changes what new handshakes present and
//! verify, and nothing about connections already open (their watches go on). A background task
//! polls the files' (mtime, length) every `reload_interval`; when they change it builds a new
//! config and swaps it in, or, when the new files do not make one (a key that does not match the
//! certificate, a half-written file, an empty CA bundle), logs why and keeps the old one. A pair
//! written in two steps is retried at the next change, so the second write completes the reload.
//!
//! Client certificates: with a client CA, rustls' `WebPkiClientVerifier` verifies the chain the
//! client presents (a certificate from another CA fails the handshake), X.509 v1 leaves beside it
//! (`client_cert.rs`), and a client without a certificate is let through: it may still
//! authenticate with a token. The verified leaf's DER is
//! what `ConnInfo::client_cert` carries.
//!
//! Lock order: the one `RwLock` over the current config is held only to clone or replace an `Arc`,
//! never across an await.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch as signal;
use tracing::{info, warn};

use crate::transport::client_cert::ClientVerifier;
use parking_lot::RwLock;
use watchcache::Cause;

/// ALPN protocols offered, preferred first: HTTP/2 (what client-go negotiates), then HTTP/1.1.
pub(crate) const ALPN_H2: &[u8] = b"h2";
const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Where the serving certificate, its key and the client CA are (kube-apiserver's
/// `--tls-cert-file`, `--tls-private-key-file`, `--client-ca-file`).
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key of the leaf (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM bundle of CAs whose client certificates are verified; `None` asks for no certificate.
    pub client_ca_file: Option<PathBuf>,
    /// How often the files are checked for changes.
    pub reload_interval: Duration,
}

impl TlsConfig {
    /// A certificate and key, no client CA, checked for changes every second.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> TlsConfig {
        TlsConfig {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            client_ca_file: None,
            reload_interval: Duration::from_secs(1),
        }
    }

    /// Verifies client certificates against this CA bundle (clients without one are still let in).
    #[must_use]
    pub fn with_client_ca(mut self, client_ca_file: impl Into<PathBuf>) -> TlsConfig {
        self.client_ca_file = Some(client_ca_file.into());
        self
    }

    fn files(&self) -> impl Iterator<Item = &Path> {
        [
            Some(&self.cert_file),
            Some(&self.key_file),
            self.client_ca_file.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
    }
}

/// Why the TLS files do not make a server configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{}: {what}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
        /// The reader's or parser's error, when there is one.
        #[source]
        cause: Option<Cause>,
    },
    /// The private key is not the certificate's.
    #[error("{}: the private key does not match the certificate in {} ({cause})", key_file.display(), cert_file.display())]
    KeyMismatch {
        /// The certificate file.
        cert_file: PathBuf,
        /// The key file.
        key_file: PathBuf,
        /// rustls' error.
        #[source]
        cause: rustls::Error,
    },
    /// rustls refused the combination otherwise.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client CA bundle does not make a verifier.
    #[error("client CA {}: {what}", path.display())]
    ClientCa {
        /// The bundle.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
        /// rustls' or webpki's error.
        #[source]
        cause: Cause,
    },
}

/// The current server configuration, and the files it came from.
pub(crate) struct Tls {
    config: TlsConfig,
    current: RwLock<Current>,
}

/// The configurations built from one reading of the files.
struct Current {
    /// What connections are served with.
    serving: Arc<rustls::ServerConfig>,
    /// The same, offering only `http/1.1`: for connections over the limit, answered with an
    /// HTTP/1.1 503 once the handshake is done.
    refusing: Arc<rustls::ServerConfig>,
}

impl Current {
    fn new(serving: rustls::ServerConfig) -> Current {
        let mut refusing = serving.clone();
        refusing.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
        Current {
            serving: Arc::new(serving),
            refusing: Arc::new(refusing),
        }
    }
}

/// The client's leaf certificate (DER) of a finished handshake: verified against the client CA,
/// since the verifier accepts no other; `None` when the client sent none.
pub(crate) fn client_leaf(session: &rustls::ServerConnection) -> Option<bytes::Bytes> {
    session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| bytes::Bytes::copy_from_slice(leaf))
}

/// Whether the handshake chose HTTP/2.
pub(crate) fn is_h2(session: &rustls::ServerConnection) -> bool {
    session.alpn_protocol() == Some(ALPN_H2)
}

/// What was last seen of each file: (modified, length), `None` when it could not be read.
type Fingerprint = Vec<Option<(SystemTime, u64)>>;

impl Tls {
    /// Reads the files; an error here is a start-up error.
    pub(crate) fn load(config: TlsConfig) -> Result<Arc<Tls>, TlsError> {
        let built = build(&config)?;
        Ok(Arc::new(Tls {
            config,
            current: RwLock::new(Current::new(built)),
        }))
    }

    /// The acceptor for a new connection: the configuration current now.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.current.read().serving))
    }

    /// The acceptor for a connection over the limit (HTTP/1.1 only, for its 503).
    pub(crate) fn refusing_acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.current.read().refusing))
    }

    /// Polls the files until `stop` is set, swapping in a new configuration when they change.
    pub(crate) async fn reload_loop(self: Arc<Self>, mut stop: signal::Receiver<bool>) {
        let mut seen = fingerprint(&self.config);
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.reload_interval) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let now = fingerprint(&self.config);
            if now == seen {
                continue;
            }
            seen = now;
            self.reload();
        }
    }

    /// Builds a configuration from the files as they are now; keeps the old one on error.
    fn reload(&self) -> bool {
        match build(&self.config) {
            Ok(c) => {
                let next = Current::new(c);
                *self.current.write() = next;
                info!(cert = %self.config.cert_file.display(), "TLS certificate reloaded");
                true
            }
            Err(e) => {
                warn!(error = %e, "TLS files changed but do not load: keeping the previous certificate");
                false
            }
        }
    }
}

fn fingerprint(config: &TlsConfig) -> Fingerprint {
    config
        .files()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

fn file_error(path: &Path, e: impl std::error::Error + Send + Sync + 'static) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        what: e.to_string(),
        cause: Some(Cause::new(e)),
    }
}

fn ca_error(path: &Path, e: impl std::error::Error + Send + Sync + 'static) -> TlsError {
    TlsError::ClientCa {
        path: path.to_owned(),
        what: e.to_string(),
        cause: Cause::new(e),
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::File {
            path: path.to_owned(),
            what: "no CERTIFICATE in the file".to_owned(),
            cause: None,
        });
    }
    Ok(certs)
}

/// A server configuration from the files: the certificate with its key (checked to match), the
/// client verifier, ALPN `h2` then `http/1.1`.
fn build(config: &TlsConfig) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs(&config.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&config.key_file)
        .map_err(|e| file_error(&config.key_file, e))?;
    // A rotated certificate written before its key must not be served with the old key.
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| file_error(&config.key_file, e))?;
    rustls::sign::CertifiedKey::new(certs.clone(), signing)
        .keys_match()
        .map_err(|cause| TlsError::KeyMismatch {
            cert_file: config.cert_file.clone(),
            key_file: config.key_file.clone(),
            cause,
        })?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    let builder = match &config.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let cas = read_certs(path)?;
            for ca in &cas {
                roots.add(ca.clone()).map_err(|e| ca_error(path, e))?;
            }
            let algs = provider.signature_verification_algorithms;
            let webpki = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ca_error(path, e))?;
            // X.509 v1 leaves, which webpki refuses and kube-apiserver accepts, beside it.
            builder.with_client_cert_verifier(Arc::new(ClientVerifier::new(webpki, cas, algs)))
        }
    };
    let mut server = builder.with_single_cert(certs, key)?;
    server.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    // No session tickets: each would cost a record written after the handshake, and resumption
    // buys nothing for connections that live for hours.
    server.send_tls13_tickets = 0;
    // No resumption cache either (kubelets and controllers reconnect rarely).
    server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    // A streaming watch's connection is handed down to its sending key (`sealed.rs`).
    server.enable_secret_extraction = true;
    Ok(server)
}

/// A stream that fails its reads when nothing at all has arrived by a deadline: an HTTP/2 client
/// that finishes the handshake but never sends its preface does not hold a connection slot
/// forever (h2's server has no such deadline of its own). The timer is dropped with the
/// first bytes, and so is the connection's count as waiting for its first request (an h2
/// client's first bytes are its preface, then its first request's HEADERS).
pub(crate) struct FirstBytesBy<S> {
    inner: S,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    idle: Option<crate::transport::accept::IdleSlot>,
}

impl<S> FirstBytesBy<S> {
    pub(crate) fn new(
        inner: S,
        within: Duration,
        idle: crate::transport::accept::IdleSlot,
    ) -> FirstBytesBy<S> {
        FirstBytesBy {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            idle: Some(idle),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytesBy<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Some(deadline) = &mut self.deadline {
            if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
                self.deadline = None;
                self.idle = None;
            } else if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(std::io::ErrorKind::TimedOut.into()));
            }
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstBytesBy<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    struct Pki {
        dir: tempfile::TempDir,
        issuer: Issuer<'static, KeyPair>,
    }

    impl Pki {
        fn new() -> Pki {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, "test-ca");
            let key = KeyPair::generate().unwrap();
            let cert = p.self_signed(&key).unwrap();
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("ca.crt"), cert.pem()).unwrap();
            std::fs::write(dir.path().join("ca.key"), key.serialize_pem()).unwrap();
            Pki {
                dir,
                issuer: Issuer::new(p, key),
            }
        }
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
        /// (cert PEM, key PEM, cert DER).
        fn issue(&self, sans: &[&str], cn: &str, client: bool) -> (String, String, Vec<u8>) {
            let mut p =
                CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                    .unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![if client {
                ExtendedKeyUsagePurpose::ClientAuth
            } else {
                ExtendedKeyUsagePurpose::ServerAuth
            }];
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &self.issuer).unwrap();
            (cert.pem(), key.serialize_pem(), cert.der().to_vec())
        }
        /// An X.509 v1 client certificate (cert PEM, key PEM, cert DER), made by
        /// `openssl x509 -req` as an operator makes one; `ec`: a P-256 key, else RSA.
        fn issue_v1(&self, cn: &str, ec: bool) -> (String, String, Vec<u8>) {
            let run = |args: &[&str]| {
                let out = std::process::Command::new("openssl")
                    .args(args)
                    .current_dir(self.dir.path())
                    .output()
                    .expect("openssl on PATH");
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            };
            let subj = format!("/CN={cn}");
            if ec {
                run(&[
                    "ecparam",
                    "-name",
                    "prime256v1",
                    "-genkey",
                    "-noout",
                    "-out",
                    "v1.key",
                ]);
                run(&[
                    "req", "-new", "-key", "v1.key", "-out", "v1.csr", "-subj", &subj,
                ]);
            } else {
                run(&[
                    "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "v1.key", "-out",
                    "v1.csr", "-subj", &subj,
                ]);
            }
            run(&[
                "x509",
                "-req",
                "-in",
                "v1.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                "3",
                "-days",
                "1",
                "-out",
                "v1.crt",
            ]);
            let (c, k) = (
                std::fs::read_to_string(self.path("v1.crt")).unwrap(),
                std::fs::read_to_string(self.path("v1.key")).unwrap(),
            );
            let der = CertificateDer::from_pem_slice(c.as_bytes())
                .unwrap()
                .to_vec();
            (c, k, der)
        }
        fn serving(&self) -> TlsConfig {
            let (c, k, _) = self.issue(&["localhost"], "server", false);
            std::fs::write(self.path("s.crt"), c).unwrap();
            std::fs::write(self.path("s.key"), k).unwrap();
            TlsConfig::new(self.path("s.crt"), self.path("s.key"))
                .with_client_ca(self.path("ca.crt"))
        }
    }

    fn current_cert(tls: &Tls, ca: &Path) -> Vec<u8> {
        let server = Arc::clone(&tls.current.read().serving);
        let mut c =
            rustls::ClientConnection::new(client_config(ca, None), "localhost".try_into().unwrap())
                .unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        pump(&mut c, &mut s).unwrap();
        c.peer_certificates().unwrap()[0].to_vec()
    }

    /// A client trusting `ca`, presenting `cert` (PEM cert and key) when given.
    fn client_config(ca: &Path, cert: Option<(String, String)>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(
            CertificateDer::pem_file_iter(ca)
                .unwrap()
                .map(Result::unwrap),
        );
        let b = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        Arc::new(match cert {
            None => b.with_no_client_auth(),
            Some((c, k)) => b
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_slice(c.as_bytes()).unwrap()],
                    PrivateKeyDer::from_pem_slice(k.as_bytes()).unwrap(),
                )
                .unwrap(),
        })
    }

    /// Moves records both ways until neither side has anything to write.
    fn pump(
        c: &mut rustls::ClientConnection,
        s: &mut rustls::ServerConnection,
    ) -> Result<(), rustls::Error> {
        for _ in 0..20 {
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).unwrap();
            }
            if !buf.is_empty() {
                s.read_tls(&mut &buf[..]).unwrap();
                s.process_new_packets()?;
            }
            let mut buf = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut buf).unwrap();
            }
            if !buf.is_empty() {
                c.read_tls(&mut &buf[..]).unwrap();
                c.process_new_packets()?;
            }
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        Err(rustls::Error::General("handshake did not finish".into()))
    }

    #[test]
    fn a_mismatched_key_is_refused_and_the_old_pair_kept() {
        let pki = Pki::new();
        let ca = pki.path("ca.crt");
        let tls = Tls::load(pki.serving()).unwrap();
        let before = current_cert(&tls, &ca);
        // A new certificate written, its key not yet: refused, naming both files.
        let (c2, k2, der2) = pki.issue(&["localhost"], "server-2", false);
        std::fs::write(pki.path("s.crt"), &c2).unwrap();
        let (crt, key) = (pki.path("s.crt"), pki.path("s.key"));
        let e = Tls::load(TlsConfig::new(&crt, &key))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&*crt.to_string_lossy()) && e.contains(&*key.to_string_lossy()),
            "{e}"
        );
        assert!(!tls.reload());
        assert_eq!(current_cert(&tls, &ca), before);
        // A half-written key: refused too.
        std::fs::write(pki.path("s.key"), &k2[..k2.len() / 2]).unwrap();
        assert!(!tls.reload());
        assert_eq!(current_cert(&tls, &ca), before);
        // The whole key: the new pair is served.
        std::fs::write(pki.path("s.key"), &k2).unwrap();
        assert!(tls.reload());
        assert_eq!(current_cert(&tls, &ca), der2);
        assert!(matches!(
            Tls::load(TlsConfig::new(pki.path("s.crt"), pki.path("ca.crt"))),
            Err(TlsError::File { .. })
        ));
    }

    #[test]
    fn client_certificates_are_verified_against_the_client_ca_and_optional() {
        let pki = Pki::new();
        let ca = pki.path("ca.crt");
        let tls = Tls::load(pki.serving()).unwrap();
        let server = Arc::clone(&tls.current.read().serving);
        let connect = |cfg| {
            let mut c =
                rustls::ClientConnection::new(cfg, "localhost".try_into().unwrap()).unwrap();
            let mut s = rustls::ServerConnection::new(Arc::clone(&server)).unwrap();
            pump(&mut c, &mut s).map(|()| client_leaf(&s).map(|b| b.to_vec()))
        };
        // No certificate: connects, no client certificate.
        assert_eq!(connect(client_config(&ca, None)).unwrap(), None);
        // A certificate from the client CA: the verified leaf.
        let (c, k, der) = pki.issue(&[], "alice", true);
        assert_eq!(
            connect(client_config(&ca, Some((c, k)))).unwrap(),
            Some(der)
        );
        // A certificate from another CA: the handshake fails.
        let other = Pki::new();
        let (c, k, _) = other.issue(&[], "mallory", true);
        assert!(connect(client_config(&ca, Some((c, k)))).is_err());
        // X.509 v1 certificates (issue 20, item 11: webpki refused them), RSA and EC, over
        // TLS 1.3 and 1.2: verified, the handshake signed by their key; another CA's refused.
        for ec in [false, true] {
            let (c, k, der) = pki.issue_v1("carol", ec);
            for tls12 in [false, true] {
                let cfg = presenting(&ca, (c.clone(), k.clone()), tls12);
                assert_eq!(
                    connect(cfg).unwrap(),
                    Some(der.clone()),
                    "ec {ec}, tls12 {tls12}"
                );
            }
            let (c, k, _) = other.issue_v1("mallory", ec);
            assert!(connect(presenting(&ca, (c, k), false)).is_err());
        }
    }

    /// Presents a certificate as it is (rustls' own client checks its key against the
    /// certificate with webpki, which refuses v1; Go's and OpenSSL's clients do not).
    #[derive(Debug)]
    struct Present(Arc<rustls::sign::CertifiedKey>);

    impl rustls::client::ResolvesClientCert for Present {
        fn resolve(
            &self,
            _: &[&[u8]],
            _: &[rustls::SignatureScheme],
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            Some(Arc::clone(&self.0))
        }
        fn has_certs(&self) -> bool {
            true
        }
    }

    /// A client trusting `ca` that presents `cert` (PEM cert and key) as it is, on TLS 1.2
    /// only when `tls12`, else TLS 1.3.
    fn presenting(ca: &Path, cert: (String, String), tls12: bool) -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(
            CertificateDer::pem_file_iter(ca)
                .unwrap()
                .map(Result::unwrap),
        );
        let versions: &[&rustls::SupportedProtocolVersion] = if tls12 {
            &[&rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS13]
        };
        let b = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let key = provider
            .key_provider
            .load_private_key(PrivateKeyDer::from_pem_slice(cert.1.as_bytes()).unwrap())
            .unwrap();
        let certified = rustls::sign::CertifiedKey::new(
            vec![CertificateDer::from_pem_slice(cert.0.as_bytes()).unwrap()],
            key,
        );
        Arc::new(b.with_client_cert_resolver(Arc::new(Present(Arc::new(certified)))))
    }
}
