//! The load tool's HTTP client for the server: reqwest on plain HTTP, and on TLS (`--tls`) hyper's
//! client connections over tokio-rustls, so that HTTP/2 streams share one connection the way a
//! kubelet's watches do. (reqwest's own TLS would make every reqwest client in the crate's tests
//! need a process-wide crypto provider.)

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body_util::{BodyStream, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;

use super::TlsMode;

/// A response body as a stream of chunks.
pub(super) type BodyChunks = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

/// A client of the server. Clones share connections (an HTTP/2 client's one connection).
#[derive(Clone)]
pub(super) enum Http {
    /// Plain HTTP: reqwest, no pooled idle connections (one connection per open watch).
    Plain(reqwest::Client),
    /// TLS: a new connection per request (HTTP/1.1), or one shared connection (HTTP/2).
    Tls(Arc<TlsClient>),
}

/// A TLS client of the server.
pub(super) struct TlsClient {
    connector: tokio_rustls::TlsConnector,
    mode: TlsMode,
    /// The shared HTTP/2 connection, made by the first request, and its number: a request
    /// that fails on it drops that connection (and not a newer one another request made).
    h2: tokio::sync::Mutex<Option<(u64, SendRequest<Empty<Bytes>>)>>,
    connections: std::sync::atomic::AtomicU64,
}

impl Http {
    /// A plain HTTP client.
    pub(super) fn plain() -> Result<Http, String> {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            // reqwest probes every idle connection after 15 s, three times 15 s apart. Thousands of
            // watchers opened within seconds probe in bursts, and loopback drops what exceeds its
            // 1 000-packet input queue (`net.core.netdev_max_backlog`; `/proc/net/softnet_stat`
            // counted 13 000 drops): idle watches ended with `Connection timed out` while the
            // server held them. A local load tool needs no keepalive.
            .tcp_keepalive(None)
            .build()
            .map(Http::Plain)
            .map_err(|e| e.to_string())
    }

    /// A TLS client with this configuration (its ALPN decides the protocol).
    pub(super) fn tls(config: Arc<rustls::ClientConfig>, mode: TlsMode) -> Http {
        Http::Tls(Arc::new(TlsClient {
            connector: tokio_rustls::TlsConnector::from(config),
            mode,
            h2: tokio::sync::Mutex::new(None),
            connections: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// GET `url`: its status, and its body as it comes.
    pub(super) async fn get(&self, url: &str) -> Result<(u16, BodyChunks), String> {
        self.get_accept(url, None).await
    }

    /// GET `url` with this `Accept` header (`None`: the client's default).
    pub(super) async fn get_accept(
        &self,
        url: &str,
        accept: Option<&'static str>,
    ) -> Result<(u16, BodyChunks), String> {
        match self {
            Http::Plain(c) => {
                let mut req = c.get(url);
                if let Some(a) = accept {
                    req = req.header(reqwest::header::ACCEPT, a);
                }
                let resp = req.send().await.map_err(|e| e.to_string())?;
                let status = resp.status().as_u16();
                let body = resp.bytes_stream().map(|c| c.map_err(|e| chain(&e)));
                Ok((status, Box::pin(body)))
            }
            Http::Tls(t) => t.get(url, accept).await,
        }
    }

    /// Opens the HTTP/2 connection now, without a request (a kubelet connected, no watch yet).
    pub(super) async fn connect_h2(&self, url: &str) -> Result<(), String> {
        match self {
            Http::Tls(t) if t.mode == TlsMode::H2 => {
                let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
                t.h2_sender(&uri).await.map(drop)
            }
            _ => Ok(()),
        }
    }

    /// GET `url` and read the whole body as text, when the status is a success.
    pub(super) async fn text(&self, url: &str) -> Result<String, String> {
        let (status, mut body) = self.get(url).await?;
        if !(200..300).contains(&status) {
            return Err(format!("{url}: {status}"));
        }
        let mut out = Vec::new();
        while let Some(chunk) = body.next().await {
            out.extend_from_slice(&chunk?);
        }
        String::from_utf8(out).map_err(|e| e.to_string())
    }
}

impl TlsClient {
    async fn connect(
        &self,
        uri: &hyper::Uri,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let host = uri.host().ok_or("no host")?.to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("{host}:{port}: {e}"))?;
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let name = ServerName::try_from(host).map_err(|e| e.to_string())?;
        self.connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))
    }

    /// The shared HTTP/2 connection's number and sender, connecting first when there is none.
    async fn h2_sender(
        &self,
        uri: &hyper::Uri,
    ) -> Result<(u64, SendRequest<Empty<Bytes>>), String> {
        // Under the lock, so requests made together wait for one connection.
        let mut shared = self.h2.lock().await;
        match &*shared {
            Some((n, s)) if !s.is_closed() => Ok((*n, s.clone())),
            _ => {
                let tls = self.connect(uri).await?;
                // Go's HTTP/2 client's windows (what a kubelet has): h2's budget for small DATA
                // frames follows the connection window, and a watch server may write small ones.
                let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                    .initial_stream_window_size(4 << 20)
                    .initial_connection_window_size(1 << 30)
                    .handshake(TokioIo::new(tls))
                    .await
                    .map_err(|e| format!("HTTP/2: {e}"))?;
                tokio::spawn(conn);
                let n = self
                    .connections
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                *shared = Some((n, send.clone()));
                Ok((n, send))
            }
        }
    }

    /// Drops shared connection `n` after a request failed on it: a server that sent GOAWAY
    /// refuses new streams while its old ones finish, and the next request must connect anew
    /// (through a load balancer, to whichever replica it picks), as Go's client does.
    async fn forget(&self, n: u64) {
        let mut shared = self.h2.lock().await;
        if shared.as_ref().is_some_and(|(m, _)| *m == n) {
            *shared = None;
        }
    }

    async fn get(
        &self,
        url: &str,
        accept: Option<&'static str>,
    ) -> Result<(u16, BodyChunks), String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let req = |uri: hyper::Uri| {
            let mut r = hyper::Request::get(uri);
            if let Some(a) = accept {
                r = r.header(hyper::header::ACCEPT, a);
            }
            r.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())
        };
        let resp = match self.mode {
            TlsMode::H2 => {
                let (n, mut send) = self.h2_sender(&uri).await?;
                let sent = match send.ready().await {
                    Ok(()) => send.send_request(req(uri)?).await,
                    Err(e) => Err(e),
                };
                match sent {
                    Ok(resp) => resp,
                    Err(e) => {
                        self.forget(n).await;
                        return Err(format!("{e:?}"));
                    }
                }
            }
            TlsMode::Http1 => {
                let path = uri
                    .path_and_query()
                    .map_or("/".to_owned(), ToString::to_string);
                let host = uri.authority().map(ToString::to_string).unwrap_or_default();
                let tls = self.connect(&uri).await?;
                let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                    .await
                    .map_err(|e| format!("HTTP/1.1: {e}"))?;
                tokio::spawn(conn);
                let mut r = req(path.parse().map_err(|e| format!("{path}: {e}"))?)?;
                r.headers_mut().insert(
                    hyper::header::HOST,
                    host.parse().map_err(|e| format!("{host}: {e}"))?,
                );
                send.send_request(r).await.map_err(|e| e.to_string())?
            }
        };
        let status = resp.status().as_u16();
        let body = BodyStream::new(resp.into_body()).filter_map(|frame| async move {
            match frame {
                Ok(f) => f.into_data().ok().map(Ok),
                Err(e) => Some(Err(e.to_string())),
            }
        });
        Ok((status, Box::pin(body)))
    }
}

/// An error with its sources, `: `-separated (reqwest's own text names only its outermost layer).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
