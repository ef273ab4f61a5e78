//! A TLS 1.3 watch connection handed down to its sending half once the watch streams.
//!
//! Why: an idle TLS HTTP/1.1 watch held about 13.6 KB of server heap, 10 KB of it rustls'
//! connection (its 4 KiB record read buffer, which stays allocated while a read is pending — and
//! the fast path always has one, to see the client go away —, both directions' record keys, the
//! handshake's leftovers). A watch sends and never needs to read again: after its response head
//! it only has to notice that the client went away. So once a watch is admitted and about to
//! stream, the connection is taken out of rustls (`dangerous_extract_secrets`, the API rustls
//! offers for kernel TLS, which this machine's kernel does not have) and kept as the socket, the
//! sending key and its sequence number: about 0.9 KB instead of 10.
//!
//! Rules, each needed for the connection to stay a correct TLS 1.3 connection:
//! - Only TLS 1.3 with one of the three AEADs rustls negotiates (AES-128-GCM, AES-256-GCM,
//!   ChaCha20-Poly1305) is handed down; anything else stays with rustls ([`TlsIo::seal`] says
//!   false). Nothing rustls still has to send may be pending (rustls refuses otherwise).
//! - Records are written as RFC 8446 §5.2 says: the inner content type `application_data`
//!   appended, the 5-byte header as additional data, the nonce the static IV XOR the 64-bit
//!   sequence number, which starts where rustls stopped and grows by one per record; at most
//!   2^14 bytes of plaintext per record.
//! - A nonce is never reused: the sequence number only grows, and writes fail (ending the watch,
//!   whose client then resumes from its last resourceVersion) long before AES-GCM's limit of
//!   2^24.5 records per key (RFC 8446 §5.5), since a key update would need the receiving half.
//! - Nothing is read again: the receiving key is dropped at once. Any bytes the client sends
//!   afterwards (its `close_notify`, or anything else) read as the end of the stream, so the
//!   watch ends; the response says `Connection: close`, so a client sends no other request on it.
//! - Shutting down sends an encrypted `close_notify` alert, as rustls would.
//!
//! Invariant: `out[sent..]` is the unsent tail of at most one sealed record; a new record is
//! sealed only once the previous one is wholly written.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::ConnectionTrafficSecrets;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Largest plaintext of one record (RFC 8446 §5.1).
const MAX_PLAINTEXT: usize = 1 << 14;
/// Header, inner content type and tag around a record's plaintext.
const OVERHEAD: usize = 5 + 1 + 16;
/// `application_data`, the outer type of every TLS 1.3 record and the inner type of data.
const APPLICATION_DATA: u8 = 0x17;
/// `alert`, the inner type of `close_notify`.
const ALERT: u8 = 0x15;
/// Records one key may seal: far below AES-GCM's 2^24.5 (RFC 8446 §5.5).
const RECORD_LIMIT: u64 = 1 << 24;

/// The sending half of a TLS 1.3 connection: records sealed here, nothing read.
pub(crate) struct Sealed<S> {
    io: S,
    key: LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    seq: u64,
    /// The record being written (empty, unallocated, while idle).
    out: Vec<u8>,
    sent: usize,
    closed: bool,
}

impl<S> Sealed<S> {
    /// The sending half from rustls' extracted `tx` secrets and sequence number; `None` for an
    /// AEAD this module does not write.
    pub(crate) fn new(io: S, seq: u64, secrets: &ConnectionTrafficSecrets) -> Option<Sealed<S>> {
        let (alg, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return None,
        };
        let key = LessSafeKey::new(UnboundKey::new(alg, key.as_ref()).ok()?);
        let iv: [u8; aead::NONCE_LEN] = iv.as_ref().try_into().ok()?;
        Some(Sealed {
            io,
            key,
            iv,
            seq,
            out: Vec::new(),
            sent: 0,
            closed: false,
        })
    }

    /// Seals one record of `inner_type` whose plaintext is the first bytes of `bufs` (at most
    /// [`MAX_PLAINTEXT`]) into `out`; returns how many plaintext bytes it took.
    fn seal(&mut self, bufs: &[IoSlice<'_>], inner_type: u8) -> io::Result<usize> {
        debug_assert!(self.sent == self.out.len());
        if self.seq >= RECORD_LIMIT {
            return Err(io::Error::other(
                "TLS record limit of the sending key reached",
            ));
        }
        let len = bufs
            .iter()
            .map(|b| b.len())
            .sum::<usize>()
            .min(MAX_PLAINTEXT);
        let inner_len = len + 1 + 16;
        let mut out = Vec::with_capacity(len + OVERHEAD);
        out.extend_from_slice(&[APPLICATION_DATA, 0x03, 0x03]);
        out.extend_from_slice(&(inner_len as u16).to_be_bytes());
        let mut left = len;
        for b in bufs {
            let take = left.min(b.len());
            out.extend_from_slice(&b[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        out.push(inner_type);
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        let (header, body) = out.split_at_mut(5);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&*header),
                body,
            )
            .map_err(|_| io::Error::other("TLS record could not be sealed"))?;
        out.extend_from_slice(tag.as_ref());
        self.seq += 1;
        self.out = out;
        self.sent = 0;
        Ok(len)
    }
}

impl<S: AsyncWrite + Unpin> Sealed<S> {
    /// Writes what is left of the current record; frees its buffer once it is all out.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        if !self.out.is_empty() {
            self.out = Vec::new();
            self.sent = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sealed<S> {
    /// Anything the client sends (its `close_notify`, a FIN, anything) ends the stream: the
    /// bytes cannot be read without the receiving key, and a watch's client has nothing else to
    /// say.
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        buf.set_filled(before);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sealed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        ready!(this.poll_drain(cx))?;
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        let n = this.seal(bufs, APPLICATION_DATA)?;
        // Started at once; what the socket does not take now goes with the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        if !this.closed {
            // close_notify: level warning (1), description close_notify (0).
            this.seal(&[IoSlice::new(&[1, 0])], ALERT)?;
            this.closed = true;
            ready!(this.poll_drain(cx))?;
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// A connection whose watch may hand it down to its sending half ([`Sealed`]).
pub(crate) trait HandDown {
    /// Hands the connection down to its sending half, if it can be: true when it was (the
    /// connection must then close after its response). Called once the response is decided and
    /// nothing of the request is left unread.
    fn hand_down(&mut self) -> bool {
        false
    }
}

impl HandDown for tokio::net::TcpStream {}

/// A TLS connection served over HTTP/1.1: rustls' stream (boxed, so that it is freed whole when
/// handed down), or its sending half once a watch took it.
pub(crate) enum TlsIo {
    /// rustls does both halves.
    Rustls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
    /// A watch's sending half.
    Sealed(Box<Sealed<tokio::net::TcpStream>>),
    /// Only while being handed down.
    Gone,
}

impl HandDown for TlsIo {
    fn hand_down(&mut self) -> bool {
        let TlsIo::Rustls(tls) = self else {
            return false;
        };
        let conn = tls.get_ref().1;
        if conn.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) || conn.wants_write() {
            return false;
        }
        let TlsIo::Rustls(tls) = std::mem::replace(self, TlsIo::Gone) else {
            return false;
        };
        let (io, conn) = tls.into_inner();
        // On failure the connection cannot go on: rustls' state is consumed. The socket is
        // dropped (closed) and the watch's first write fails; the client retries.
        *self = match conn.dangerous_extract_secrets() {
            Ok(secrets) => match Sealed::new(io, secrets.tx.0, &secrets.tx.1) {
                Some(sealed) => TlsIo::Sealed(Box::new(sealed)),
                None => TlsIo::Gone,
            },
            Err(e) => {
                tracing::warn!(error = %e, "a TLS watch connection could not be handed down");
                TlsIo::Gone
            }
        };
        matches!(self, TlsIo::Sealed(_))
    }
}

fn gone<T>() -> Poll<io::Result<T>> {
    Poll::Ready(Err(io::ErrorKind::NotConnected.into()))
}

impl AsyncRead for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsIo::Rustls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            TlsIo::Sealed(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            TlsIo::Gone => gone(),
        }
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            TlsIo::Rustls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            TlsIo::Sealed(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            TlsIo::Gone => gone(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            TlsIo::Rustls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            TlsIo::Sealed(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            TlsIo::Gone => gone(),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            TlsIo::Rustls(s) => s.is_write_vectored(),
            TlsIo::Sealed(_) | TlsIo::Gone => true,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsIo::Rustls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            TlsIo::Sealed(s) => Pin::new(s.as_mut()).poll_flush(cx),
            TlsIo::Gone => gone(),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsIo::Rustls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            TlsIo::Sealed(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            TlsIo::Gone => gone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn configs(
        suite: rustls::SupportedCipherSuite,
    ) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = CertificateDer::from(ck.cert.der().to_vec());
        let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        server.enable_secret_extraction = true;
        server.send_tls13_tickets = 0;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let client_provider = rustls::crypto::CryptoProvider {
            cipher_suites: vec![suite],
            ..rustls::crypto::ring::default_provider()
        };
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(client_provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    }

    /// A real rustls client reads, through its own record layer, what rustls wrote before the
    /// hand-down and this module after it, across record boundaries, then a clean
    /// `close_notify`; for each AEAD.
    #[tokio::test]
    async fn a_rustls_client_reads_sealed_records_for_every_aead() {
        use rustls::crypto::ring::cipher_suite as cs;
        for suite in [
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
        ] {
            let (server, client) = configs(suite);
            let (a, b) = tokio::io::duplex(1 << 20);
            let accept = tokio_rustls::TlsAcceptor::from(server).accept(a);
            let connect = tokio_rustls::TlsConnector::from(client)
                .connect(ServerName::try_from("localhost").unwrap(), b);
            let (server, client) = tokio::join!(accept, connect);
            let (mut server, mut client) = (server.unwrap(), client.unwrap());
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            let mut req = [0u8; 18];
            server.read_exact(&mut req).await.unwrap();
            server.write_all(b"before ").await.unwrap();
            server.flush().await.unwrap();

            let (io, conn) = server.into_inner();
            let secrets = conn.dangerous_extract_secrets().unwrap();
            let mut sealed = Sealed::new(io, secrets.tx.0, &secrets.tx.1).unwrap();
            let big: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
            sealed.write_all(b"after ").await.unwrap();
            let n = sealed
                .write_vectored(&[IoSlice::new(b"x"), IoSlice::new(b"yz")])
                .await
                .unwrap();
            assert_eq!(n, 3, "one record takes both slices");
            sealed.write_all(&big).await.unwrap();
            sealed.shutdown().await.unwrap();

            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            let mut want = b"before after xyz".to_vec();
            want.extend_from_slice(&big);
            assert_eq!(got.len(), want.len(), "{suite:?}");
            assert!(got == want, "{suite:?}: plaintext differs");
        }
    }

    /// Whatever the client sends after the hand-down reads as the end of the stream.
    #[tokio::test]
    async fn anything_the_client_sends_reads_as_the_end() {
        let (server, client) =
            configs(rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256);
        let (a, b) = tokio::io::duplex(1 << 16);
        let accept = tokio_rustls::TlsAcceptor::from(server).accept(a);
        let connect = tokio_rustls::TlsConnector::from(client)
            .connect(ServerName::try_from("localhost").unwrap(), b);
        let (server, client) = tokio::join!(accept, connect);
        let (server, mut client) = (server.unwrap(), client.unwrap());
        let (io, conn) = server.into_inner();
        let secrets = conn.dangerous_extract_secrets().unwrap();
        let mut sealed = Sealed::new(io, secrets.tx.0, &secrets.tx.1).unwrap();
        client.write_all(b"more").await.unwrap();
        client.flush().await.unwrap();
        let mut probe = [0u8; 64];
        assert_eq!(sealed.read(&mut probe).await.unwrap(), 0);
    }
}
