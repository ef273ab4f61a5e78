//! Proxy mode's request path: which requests stay local, and forwarding the others through the
//! server's [`Proxy`] with their answers streamed back. With authentication on, a forwarded
//! request carries its client's identity as impersonation headers (and not the client's own
//! credentials), so the upstream authorizes the client, not the proxy.
//!
//! Upgrades (`kubectl exec`, `attach`, `port-forward`, `cp`: WebSocket or SPDY) are relayed: the
//! request goes up with its `Connection: Upgrade` and `Upgrade` headers, the upstream's
//! `101 Switching Protocols` comes back with its headers, and then both upgraded connections are
//! joined byte for byte until either side closes. The server serves a connection whose first
//! request asks for an upgrade with hyper's upgrades on ([`wants_upgrade`]); such a connection is
//! not waited for by graceful shutdown (an exec session may last hours).

use crate::auth::{User, impersonate};
use crate::http::params;
use crate::http::served::{ServedSet, Target};
use crate::http::status::ApiError;
use crate::proxy::{HOP_BY_HOP, Proxy, ProxyContext};
use axum::http;
use axum::response::IntoResponse;
use hyper_util::rt::TokioIo;
use tracing::{debug, info};

/// Whether a header is one of the front-proxy identity headers (`X-Remote-User`,
/// `X-Remote-Group`, `X-Remote-Extra-<key>`): an upstream that trusts this server's client
/// certificate as a front proxy (`--requestheader-*`) takes them as the requester's identity, so a
/// client's own must never reach it (the identity goes up as impersonation, below). Names are
/// lower-case here, as the `http` crate keeps them.
fn is_front_proxy_identity(name: &str) -> bool {
    name == "x-remote-user" || name == "x-remote-group" || name.starts_with("x-remote-extra-")
}

/// Whether headers (name, value) ask for a protocol upgrade: an `Upgrade` protocol and
/// `Connection: Upgrade`.
fn asks_upgrade<'a>(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> bool {
    let (mut protocol, mut connection) = (false, false);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("upgrade") {
            protocol = true;
        } else if name.eq_ignore_ascii_case("connection") {
            connection |= value
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"));
        }
    }
    protocol && connection
}

fn is_upgrade(headers: &http::HeaderMap) -> bool {
    asks_upgrade(headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())))
}

/// Whether the first request read on a connection (its head, possibly with more bytes after it)
/// asks for an upgrade: the connection is then served with hyper's upgrades on.
pub(crate) fn wants_upgrade(first: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    matches!(req.parse(first), Ok(httparse::Status::Complete(_)))
        && asks_upgrade(req.headers.iter().map(|h| (h.name, h.value)))
}

/// The cached resource a request reads locally when a proxy is set: only reads (GET, LIST,
/// WATCH) of the cached resources' own paths (no subresources, no discovery). Writes, even of
/// cached resources, are the upstream's: it runs admission, defaulting, server-side apply and
/// dry-run, and sees the client's identity by impersonation; the cache sees the write when its
/// watch brings it, as any other change.
pub(crate) fn local_read(
    served: &ServedSet,
    method: &http::Method,
    segs: &[&str],
) -> Option<Target> {
    (method == http::Method::GET || method == http::Method::HEAD)
        .then(|| served.resolve(segs))
        .flatten()
        // Subresources (`/status`) are the upstream's in proxy mode, as everything not cached,
        // and so is a resource the upstream says it does not serve (yet): it answers 404, or
        // the real answer once it serves it.
        .filter(|t| !t.status && !t.served.cache.is_absent())
}

/// Whether a GET is a consistent read: not a watch, `resourceVersion` unset.
pub(crate) fn is_consistent_read(uri: &http::Uri) -> bool {
    let query = uri.query();
    !params::is_watch(query)
        && params::query_value(query, "resourceVersion").is_none_or(|v| v.is_empty())
}

/// A copy of a bodiless request (method, target, headers, and the identity the gate attached),
/// to forward it after a local attempt.
pub(crate) fn replay(req: &axum::extract::Request) -> axum::extract::Request {
    let mut again = axum::extract::Request::new(axum::body::Body::empty());
    *again.method_mut() = req.method().clone();
    *again.uri_mut() = req.uri().clone();
    *again.version_mut() = req.version();
    *again.headers_mut() = req.headers().clone();
    if let Some(user) = req.extensions().get::<std::sync::Arc<User>>() {
        again.extensions_mut().insert(user.clone());
    }
    again
}

/// Forwards one request through the server's proxy and streams the answer back.
pub(crate) async fn forward(
    cx: &ProxyContext,
    proxy: &dyn Proxy,
    req: axum::extract::Request,
) -> axum::response::Response {
    let (mut parts, body) = req.into_parts();
    let upgrade = is_upgrade(&parts.headers);
    // The client's side of the upgrade: present when this connection is served with upgrades.
    let client_upgrade = if upgrade {
        parts.extensions.remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    };
    // A request the gate served has its body read already (one frame: this is a move); a
    // long-running one (an upgrade) is read here, by the same rules.
    let body = match crate::http::body::read(
        body,
        &parts.headers,
        parts.extensions.get::<crate::transport::H2Framing>(),
        cx.max_body_bytes,
    )
    .await
    {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let uri = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let mut out = http::Request::builder().method(parts.method).uri(&uri);
    for (name, value) in &parts.headers {
        // The client's credentials were for this server, and any impersonation it asked for
        // was applied here: the upstream sees the proxy's credentials and, below, the identity
        // this server authenticated (and authorized) for the request.
        if !HOP_BY_HOP.contains(&name.as_str())
            && name != http::header::AUTHORIZATION
            && !name.as_str().starts_with("impersonate-")
            && !is_front_proxy_identity(name.as_str())
        {
            out = out.header(name, value);
        }
    }
    if client_upgrade.is_some() {
        // The two hop-by-hop headers an upgrade needs on the next hop too.
        for name in [http::header::CONNECTION, http::header::UPGRADE] {
            for value in parts.headers.get_all(&name) {
                out = out.header(&name, value);
            }
        }
    }
    if let Some(user) = parts.extensions.get::<std::sync::Arc<User>>() {
        for (name, value) in impersonate::headers_for(user) {
            out = out.header(name, value);
        }
    }
    let out = match out.body(body) {
        Ok(r) => r,
        Err(e) => {
            return ApiError::bad_request(format!("cannot forward {uri}: {e}")).into_response();
        }
    };
    match proxy.forward(out).await {
        Ok(mut resp) => {
            let switching = resp.status() == http::StatusCode::SWITCHING_PROTOCOLS;
            let relay = match client_upgrade {
                Some(client) if switching => {
                    let upstream = hyper::upgrade::on(&mut resp);
                    Some((client, upstream))
                }
                _ => None,
            };
            let (parts, body) = resp.into_parts();
            let mut r = axum::response::Response::new(axum::body::Body::new(body));
            *r.status_mut() = parts.status;
            for (name, value) in &parts.headers {
                let keep = !HOP_BY_HOP.contains(&name.as_str())
                    || (relay.is_some()
                        && (name == http::header::CONNECTION || name == http::header::UPGRADE));
                if keep {
                    r.headers_mut().append(name, value.clone());
                }
            }
            if let Some((client, upstream)) = relay {
                tokio::spawn(join_upgraded(uri, client, upstream));
            }
            r
        }
        Err(why) => {
            tracing::warn!(%uri, error = %why, "upstream unavailable for a proxied request");
            ApiError::new(
                503,
                "ServiceUnavailable",
                format!("the upstream API server is unavailable: {why}"),
            )
            .into_response()
        }
    }
}

/// Joins the client's and the upstream's upgraded connections until either side closes.
async fn join_upgraded(
    uri: String,
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
) {
    let (client, upstream) = match tokio::join!(client, upstream) {
        (Ok(c), Ok(u)) => (c, u),
        (c, u) => {
            debug!(%uri, client = ?c.err(), upstream = ?u.err(), "an upgrade did not complete");
            return;
        }
    };
    info!(%uri, "relaying an upgraded connection");
    let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        Ok((up, down)) => debug!(%uri, up, down, "upgraded connection closed"),
        Err(e) => debug!(%uri, error = %e, "upgraded connection ended"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrades_need_both_headers() {
        let head =
            |h: &str| wants_upgrade(format!("GET /x HTTP/1.1\r\nHost: a\r\n{h}\r\n").as_bytes());
        assert!(head("Connection: Upgrade\r\nUpgrade: websocket\r\n"));
        assert!(head(
            "connection: keep-alive, upgrade\r\nupgrade: SPDY/3.1\r\n"
        ));
        assert!(!head("Upgrade: websocket\r\n"));
        assert!(!head("Connection: Upgrade\r\n"));
        assert!(!wants_upgrade(
            b"GET /x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
        ));
    }

    #[test]
    fn front_proxy_identity_headers_are_recognised() {
        for h in [
            "x-remote-user",
            "x-remote-group",
            "x-remote-extra-scopes",
            "x-remote-extra-",
        ] {
            assert!(is_front_proxy_identity(h), "{h}");
        }
        for h in [
            "x-remote",
            "x-remote-userx",
            "x-forwarded-for",
            "remote-user",
        ] {
            assert!(!is_front_proxy_identity(h), "{h}");
        }
    }

    #[test]
    fn consistent_reads_are_the_gets_without_a_resource_version() {
        let read = |q: &str| is_consistent_read(&format!("/api/v1/pods{q}").parse().unwrap());
        assert!(read(""));
        assert!(read("?limit=5&resourceVersion="));
        assert!(!read("?resourceVersion=0"));
        assert!(!read("?resourceVersion=12&resourceVersionMatch=Exact"));
        assert!(!read("?watch=true"));
        assert!(read("?watch=false"));
        // The first value counts, as everywhere (issue 20, item 13).
        assert!(!read("?watch=1&watch=0"));
        assert!(read("?resourceVersion=&resourceVersion=5"));
    }
}
