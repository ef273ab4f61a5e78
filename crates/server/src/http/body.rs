//! Request bodies, read as they arrive into one buffer and counted by what they cost on the wire.
//!
//! Why one buffer: a body collected as a list of frames keeps each frame's bytes, and each is a
//! slice of the read buffer it arrived in. A POST sent as 1-byte HTTP/2 DATA frames padded to
//! 255 bytes held 303 bytes per body byte that way (about 900 MiB for a 3 MiB body), and an
//! HTTP/1.1 body in 1-byte chunks 60 (issue 35, H2-PAD and H1-CHUNKS). Here each frame is copied
//! and dropped at once, so a body holds its data and nothing else, whatever its framing.
//!
//! Why wire bytes: the limit (`--max-body-bytes`, 3 MiB as upstream) bounds what a body
//! costs to receive, not only what it carries. An HTTP/2 frame counts its 9-byte header and its
//! padding (`vendor/h2`'s `poll_data_framed`; h2 gives padding back to flow control itself, so it
//! is otherwise unseen), an HTTP/1.1 chunk its size line and CRLFs. A body whose framing outweighs
//! its data once it is past [`RATIO_GRACE`] bytes is refused at once: no client sends a JSON
//! object in frames smaller than their own headers, and each such frame costs a wake-up and a
//! copy.
//!
//! Both refusals are upstream's 413 RequestEntityTooLarge.

use std::pin::Pin;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body_util::BodyExt;

use crate::http::status::ApiError;
use crate::transport::H2Framing;

/// Wire bytes a body may take before its framing is weighed against its data.
pub(crate) const RATIO_GRACE: u64 = 64 * 1024;

/// How a request's body is framed, which decides what each frame costs beyond its data.
enum Framing {
    /// `content-length`: no framing on the wire.
    Length,
    /// HTTP/1.1 chunked: a size line in hex and two CRLFs per chunk (hyper hands over one chunk,
    /// or one piece of a chunk, per frame, so this never counts less than was sent).
    Chunked,
    /// HTTP/2: counted by the stream as it receives each frame.
    H2(H2Framing),
}

impl Framing {
    fn of(headers: &HeaderMap, h2: Option<&H2Framing>) -> Framing {
        if let Some(f) = h2 {
            return Framing::H2(f.clone());
        }
        let chunked = headers.get_all(header::TRANSFER_ENCODING).iter().any(|v| {
            v.as_bytes()
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"))
        });
        if chunked {
            Framing::Chunked
        } else {
            Framing::Length
        }
    }
}

/// The framing bytes of one HTTP/1.1 chunk of `n` bytes: its size in hex, CRLF, and the CRLF
/// after its data.
fn chunk_framing(n: usize) -> u64 {
    let hex_digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1);
    u64::from(hex_digits) + 4
}

/// A body being read into one buffer, a frame at a time (so that its reader can do something
/// between frames: the gate gives back its seat while the client sends nothing).
pub(crate) struct Reader {
    body: Body,
    framing: Framing,
    limit: usize,
    buf: Vec<u8>,
    chunk_framing: u64,
}

impl Reader {
    /// A reader of `body` as `headers` and its transport frame it: at most `limit` bytes on the
    /// wire, data and framing.
    ///
    /// # Errors
    /// 413 when `content-length` is over the limit.
    pub(crate) fn new(
        body: Body,
        headers: &HeaderMap,
        h2: Option<&H2Framing>,
        limit: usize,
    ) -> Result<Reader, ApiError> {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::too_large(limit));
        }
        Ok(Reader {
            body,
            framing: Framing::of(headers, h2),
            limit,
            // Sized from content-length (at most the limit): one allocation for an honest body.
            buf: Vec::with_capacity(declared.unwrap_or(0) as usize),
            chunk_framing: 0,
        })
    }

    /// Reads the next frame into the buffer: `Ok(false)` at the end of the body. Cancel-safe:
    /// dropped while waiting, it has taken nothing.
    ///
    /// # Errors
    /// 413 past the limit on the wire, or when the framing outweighs the data past
    /// [`RATIO_GRACE`]; 400 when the body cannot be read (the client reset it, or broke its
    /// framing).
    pub(crate) async fn step(&mut self) -> Result<bool, ApiError> {
        let frame = match Pin::new(&mut self.body).frame().await {
            None => return Ok(false),
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                let e = e.into_inner();
                return Err(ApiError::bad_request(format!(
                    "the request body could not be read: {e}"
                )));
            }
        };
        let Ok(data) = frame.into_data() else {
            // Trailers: nothing a Kubernetes request carries there.
            return Ok(true);
        };
        let framed = match &self.framing {
            Framing::Length => 0,
            Framing::Chunked => {
                self.chunk_framing += chunk_framing(data.len());
                self.chunk_framing
            }
            Framing::H2(f) => f.get(),
        };
        let limit = self.limit;
        let data_len = (self.buf.len() + data.len()) as u64;
        let wire = data_len + framed;
        if wire > limit as u64 {
            return Err(ApiError::too_large(limit));
        }
        if wire > RATIO_GRACE && framed > data_len {
            return Err(ApiError::entity_too_large(format!(
                "limit is {limit}: the body's framing ({framed} bytes) outweighs its data \
                 ({data_len} bytes)"
            )));
        }
        self.buf.extend_from_slice(&data);
        // `data` (and the read buffer it is a slice of) is dropped here.
        Ok(true)
    }

    /// The data read so far.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The body's data, as one buffer.
    pub(crate) fn finish(mut self) -> Bytes {
        if self.buf.capacity() - self.buf.len() > self.buf.len() / 4 {
            self.buf.shrink_to_fit();
        }
        Bytes::from(self.buf)
    }
}

/// Reads `body` whole into one buffer ([`Reader`]).
///
/// # Errors
/// As [`Reader::new`] and [`Reader::step`].
pub(crate) async fn read(
    body: Body,
    headers: &HeaderMap,
    h2: Option<&H2Framing>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let mut r = Reader::new(body, headers, h2, limit)?;
    while r.step().await? {}
    Ok(r.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    fn frames(pieces: Vec<Vec<u8>>) -> Body {
        let s = futures_util::stream::iter(
            pieces
                .into_iter()
                .map(|p| Ok::<_, std::io::Error>(Frame::data(Bytes::from(p)))),
        );
        Body::new(StreamBody::new(s))
    }

    fn chunked() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h
    }

    #[test]
    fn chunk_framing_is_the_size_line_and_two_crlfs() {
        assert_eq!(chunk_framing(1), 5); // "1\r\n" + "\r\n"
        assert_eq!(chunk_framing(15), 5);
        assert_eq!(chunk_framing(16), 6); // "10\r\n"
        assert_eq!(chunk_framing(0x1_0000), 9);
    }

    #[tokio::test]
    async fn a_body_is_one_buffer_of_its_data() {
        let got = read(
            frames(vec![b"{\"a\":".to_vec(), b"1}".to_vec()]),
            &HeaderMap::new(),
            None,
            100,
        )
        .await
        .unwrap();
        assert_eq!(&got[..], b"{\"a\":1}");
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_refused_before_reading() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("101"));
        let e = read(frames(vec![]), &h, None, 100).await.unwrap_err();
        assert_eq!(e.code(), 413);
    }

    /// 1-byte chunks: each costs 6 bytes on the wire, so a limit of 60 takes 10 of them, and
    /// past the grace the framing outweighs the data.
    #[tokio::test]
    async fn chunks_count_their_framing() {
        let one_byte = |n| (0..n).map(|_| b"x".to_vec()).collect::<Vec<_>>();
        let e = read(frames(one_byte(11)), &chunked(), None, 60)
            .await
            .unwrap_err();
        assert_eq!(e.code(), 413);
        assert!(
            read(frames(one_byte(10)), &chunked(), None, 60)
                .await
                .is_ok()
        );
        let e = read(frames(one_byte(20_000)), &chunked(), None, 3 << 20)
            .await
            .unwrap_err();
        assert_eq!(e.code(), 413);
        assert!(e.message().contains("outweighs"), "{}", e.message());
        // Big chunks are honest: 1 MiB in 16 KiB chunks passes a 3 MiB limit.
        let big = (0..64).map(|_| vec![b'x'; 16 * 1024]).collect();
        let got = read(frames(big), &chunked(), None, 3 << 20).await.unwrap();
        assert_eq!(got.len(), 1 << 20);
    }

    #[tokio::test]
    async fn h2_framing_counts_against_the_limit() {
        let f = H2Framing::default();
        // What the stream counted for frames already received: 10 frames of 255 padded bytes.
        for _ in 0..10 {
            f.count(9 + 256, 1);
        }
        let e = read(
            frames(vec![vec![b'x'; 10]]),
            &HeaderMap::new(),
            Some(&f),
            2_000,
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), 413);
        let f = H2Framing::default();
        f.count(9 + 10, 10);
        assert!(
            read(
                frames(vec![vec![b'x'; 10]]),
                &HeaderMap::new(),
                Some(&f),
                2_000
            )
            .await
            .is_ok()
        );
    }
}
