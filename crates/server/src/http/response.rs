//! Response bodies: JSON made of shared pieces, gzipped as one when the client accepts it.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use futures_util::stream;

pub(crate) fn json_response(code: StatusCode, body: Body) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn wants_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .any(|v| wants_gzip_value(v.as_bytes()))
}

/// Whether an Accept-Encoding value accepts gzip.
pub(crate) fn wants_gzip_value(v: &[u8]) -> bool {
    std::str::from_utf8(v).is_ok_and(|v| {
        v.split(',').any(|enc| {
            enc.split(';')
                .next()
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("gzip"))
        })
    })
}

fn gzip_all(parts: &[Bytes]) -> Bytes {
    use std::io::Write;
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    for p in parts {
        gz.write_all(p)
            .unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
    }
    Bytes::from(gz.finish().unwrap_or_default())
}

/// Marks a response gzip-encoded.
pub(crate) fn gzip_encoded(mut r: Response) -> Response {
    r.headers_mut().insert(
        header::CONTENT_ENCODING,
        header::HeaderValue::from_static("gzip"),
    );
    r
}

/// A response body made of shared pieces, gzipped as one when asked.
pub(crate) fn body_of(parts: Vec<Bytes>, gzip: bool, code: StatusCode) -> Response {
    if gzip {
        gzip_encoded(json_response(code, Body::from(gzip_all(&parts))))
    } else {
        json_response(
            code,
            Body::from_stream(stream::iter(
                parts.into_iter().map(Ok::<_, std::convert::Infallible>),
            )),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_values() {
        assert!(wants_gzip_value(b"gzip"));
        assert!(wants_gzip_value(b"deflate, GZIP;q=0.5"));
        assert!(!wants_gzip_value(b"deflate, br"));
        assert!(!wants_gzip_value(b"gzipx"));
        assert!(!wants_gzip_value(b"\xff"));
    }
}
