use crate::frame::{self, Frame, Kind, Reason};
use crate::frame::{
    DEFAULT_MAX_FRAME_SIZE, DEFAULT_SETTINGS_HEADER_TABLE_SIZE, MAX_MAX_FRAME_SIZE,
};
use crate::proto::Error;

use crate::hpack;

use futures_core::Stream;

use bytes::{Buf, BytesMut};

use std::io;
use std::mem::MaybeUninit;

use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::{Decoder, LengthDelimitedCodec, LengthDelimitedCodecError};
use tokio_util::io::poll_read_buf;

// 16 MB "sane default" taken from golang http2
const DEFAULT_SETTINGS_MAX_HEADER_LIST_SIZE: usize = 16 << 20;

#[derive(Debug)]
pub struct FramedRead<T> {
    inner: Delimited<T>,

    decoder: FrameDecoder,
}

#[derive(Debug)]
struct FrameDecoder {
    // hpack decoder state
    hpack: hpack::Decoder,

    max_header_list_size: usize,

    max_continuation_frames: usize,

    partial: Option<Partial>,
}

/// Partially loaded headers frame
#[derive(Debug)]
struct Partial {
    /// Empty frame
    frame: Continuable,

    /// Partial header payload
    buf: BytesMut,

    continuation_frames_count: usize,
}

#[derive(Debug)]
enum Continuable {
    Headers(frame::Headers),
    PushPromise(frame::PushPromise),
}

impl<T> FramedRead<T> {
    pub fn new(inner: Delimited<T>) -> FramedRead<T> {
        let decoder = FrameDecoder::new(inner.decoder().max_frame_length());
        FramedRead { inner, decoder }
    }

    pub fn get_ref(&self) -> &T {
        self.inner.get_ref()
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// Returns the current max frame size setting
    #[inline]
    pub fn max_frame_size(&self) -> usize {
        self.inner.decoder().max_frame_length()
    }

    /// Updates the max frame size setting.
    ///
    /// Must be within 16,384 and 16,777,215.
    #[inline]
    pub fn set_max_frame_size(&mut self, val: usize) {
        assert!(DEFAULT_MAX_FRAME_SIZE as usize <= val && val <= MAX_MAX_FRAME_SIZE as usize);
        self.inner.decoder_mut().set_max_frame_length(val);
        // Update max CONTINUATION frames too, since its based on this
        self.decoder.set_max_frame_size(val);
    }

    /// Update the max header list size setting.
    #[inline]
    pub fn set_max_header_list_size(&mut self, val: usize) {
        self.decoder
            .set_max_header_list_size(val, self.max_frame_size());
    }

    /// Update the header table size setting.
    #[inline]
    pub fn set_header_table_size(&mut self, val: usize) {
        self.decoder.set_header_table_size(val);
    }
}

fn calc_max_continuation_frames(header_max: usize, frame_max: usize) -> usize {
    // At least this many frames needed to use max header list size
    let min_frames_for_list = (header_max / frame_max).max(1);
    // Some padding for imperfectly packed frames
    // 25% without floats
    let padding = min_frames_for_list >> 2;
    min_frames_for_list.saturating_add(padding).max(5)
}

impl FrameDecoder {
    fn new(max_frame_size: usize) -> Self {
        let max_header_list_size = DEFAULT_SETTINGS_MAX_HEADER_LIST_SIZE;
        FrameDecoder {
            hpack: hpack::Decoder::new(DEFAULT_SETTINGS_HEADER_TABLE_SIZE),
            max_header_list_size,
            max_continuation_frames: calc_max_continuation_frames(
                max_header_list_size,
                max_frame_size,
            ),
            partial: None,
        }
    }

    fn set_max_frame_size(&mut self, val: usize) {
        self.max_continuation_frames = calc_max_continuation_frames(self.max_header_list_size, val);
    }

    fn set_max_header_list_size(&mut self, val: usize, max_frame_size: usize) {
        self.max_header_list_size = val;
        // Update max CONTINUATION frames too, since its based on this
        self.max_continuation_frames = calc_max_continuation_frames(val, max_frame_size);
    }

    fn set_header_table_size(&mut self, val: usize) {
        self.hpack.queue_size_update(val);
    }

    fn decode(&mut self, bytes: BytesMut) -> Result<Option<Frame>, Error> {
        decode_frame(self, bytes)
    }
}

/// Decodes a frame.
///
/// This function is intentionally de-generified and outlined because it is very large.
fn decode_frame(decoder: &mut FrameDecoder, mut bytes: BytesMut) -> Result<Option<Frame>, Error> {
    let span = tracing::trace_span!("FramedRead::decode_frame", offset = bytes.len());
    let _e = span.enter();

    tracing::trace!("decoding frame from {}B", bytes.len());

    // Parse the head
    let head = frame::Head::parse(&bytes);

    if decoder.partial.is_some() && head.kind() != Kind::Continuation {
        proto_err!(conn: "expected CONTINUATION, got {:?}", head.kind());
        return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
    }

    let kind = head.kind();

    tracing::trace!(frame.kind = ?kind);

    macro_rules! header_block {
        ($frame:ident, $head:ident, $bytes:ident) => ({
            // Drop the frame header
            $bytes.advance(frame::HEADER_LEN);

            // Parse the header frame w/o parsing the payload
            let (mut frame, mut payload) = match frame::$frame::load($head, $bytes) {
                Ok(res) => res,
                Err(frame::Error::InvalidDependencyId) => {
                    proto_err!(stream: "invalid HEADERS dependency ID");
                    // A stream cannot depend on itself. An endpoint MUST
                    // treat this as a stream error (Section 5.4.2) of type
                    // `PROTOCOL_ERROR`.
                    return Err(Error::library_reset($head.stream_id(), Reason::PROTOCOL_ERROR));
                },
                Err(e) => {
                    proto_err!(conn: "failed to load frame; err={:?}", e);
                    return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
                }
            };

            let is_end_headers = frame.is_end_headers();

            // Load the HPACK encoded headers
            match frame.load_hpack(&mut payload, decoder.max_header_list_size, &mut decoder.hpack) {
                Ok(_) => {},
                Err(frame::Error::Hpack(hpack::DecoderError::NeedMore(_))) if !is_end_headers => {},
                Err(frame::Error::MalformedMessage) => {
                    let id = $head.stream_id();
                    proto_err!(stream: "malformed header block; stream={:?}", id);
                    return Err(Error::library_reset(id, Reason::PROTOCOL_ERROR));
                },
                Err(frame::Error::HeaderListWayTooLarge) => {
                    proto_err!(conn: "decoded header list size over abuse limit");
                    return Err(Error::library_go_away_data(
                        Reason::ENHANCE_YOUR_CALM,
                        "header_list_way_too_large",
                    ));
                },
                Err(e) => {
                    proto_err!(conn: "failed HPACK decoding; err={:?}", e);
                    return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
                }
            }

            if is_end_headers {
                frame.into()
            } else {
                tracing::trace!("loaded partial header block");
                // Defer returning the frame
                decoder.partial = Some(Partial {
                    frame: Continuable::$frame(frame),
                    buf: payload,
                    continuation_frames_count: 0,
                });

                return Ok(None);
            }
        });
    }

    let frame = match kind {
        Kind::Settings => {
            let res = frame::Settings::load(head, &bytes[frame::HEADER_LEN..]);

            res.map_err(|e| {
                proto_err!(conn: "failed to load SETTINGS frame; err={:?}", e);
                Error::library_go_away(Reason::PROTOCOL_ERROR)
            })?
            .into()
        }
        Kind::Ping => {
            let res = frame::Ping::load(head, &bytes[frame::HEADER_LEN..]);

            res.map_err(|e| {
                proto_err!(conn: "failed to load PING frame; err={:?}", e);
                Error::library_go_away(Reason::PROTOCOL_ERROR)
            })?
            .into()
        }
        Kind::WindowUpdate => {
            let res = frame::WindowUpdate::load(head, &bytes[frame::HEADER_LEN..]);

            res.map_err(|e| {
                proto_err!(conn: "failed to load WINDOW_UPDATE frame; err={:?}", e);
                Error::library_go_away(Reason::PROTOCOL_ERROR)
            })?
            .into()
        }
        Kind::Data => {
            bytes.advance(frame::HEADER_LEN);
            let res = frame::Data::load(head, bytes.freeze());

            // TODO: Should this always be connection level? Probably not...
            res.map_err(|e| {
                proto_err!(conn: "failed to load DATA frame; err={:?}", e);
                Error::library_go_away(Reason::PROTOCOL_ERROR)
            })?
            .into()
        }
        Kind::Headers => header_block!(Headers, head, bytes),
        Kind::Reset => {
            let res = frame::Reset::load(head, &bytes[frame::HEADER_LEN..]);
            res.map_err(|e| {
                proto_err!(conn: "failed to load RESET frame; err={:?}", e);
                Error::library_go_away(Reason::PROTOCOL_ERROR)
            })?
            .into()
        }
        Kind::GoAway => {
            let res = frame::GoAway::load(head, &bytes[frame::HEADER_LEN..]);
            res.map_err(|e| {
                proto_err!(conn: "failed to load GO_AWAY frame; err={:?}", e);
                Error::library_go_away(Reason::PROTOCOL_ERROR)
            })?
            .into()
        }
        Kind::PushPromise => header_block!(PushPromise, head, bytes),
        Kind::Priority => {
            if head.stream_id() == 0 {
                // Invalid stream identifier
                proto_err!(conn: "invalid stream ID 0");
                return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
            }

            match frame::Priority::load(head, &bytes[frame::HEADER_LEN..]) {
                Ok(frame) => frame.into(),
                Err(frame::Error::InvalidDependencyId) => {
                    // A stream cannot depend on itself. An endpoint MUST
                    // treat this as a stream error (Section 5.4.2) of type
                    // `PROTOCOL_ERROR`.
                    let id = head.stream_id();
                    proto_err!(stream: "PRIORITY invalid dependency ID; stream={:?}", id);
                    return Err(Error::library_reset(id, Reason::PROTOCOL_ERROR));
                }
                Err(e) => {
                    proto_err!(conn: "failed to load PRIORITY frame; err={:?};", e);
                    return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
                }
            }
        }
        Kind::Continuation => {
            let is_end_headers = (head.flag() & 0x4) == 0x4;

            let mut partial = match decoder.partial.take() {
                Some(partial) => partial,
                None => {
                    proto_err!(conn: "received unexpected CONTINUATION frame");
                    return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
                }
            };

            // The stream identifiers must match
            if partial.frame.stream_id() != head.stream_id() {
                proto_err!(conn: "CONTINUATION frame stream ID does not match previous frame stream ID");
                return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
            }

            // Check for CONTINUATION flood
            if is_end_headers {
                partial.continuation_frames_count = 0;
            } else {
                let cnt = partial.continuation_frames_count + 1;
                if cnt > decoder.max_continuation_frames {
                    tracing::debug!(
                        "too_many_continuations, max = {}",
                        decoder.max_continuation_frames
                    );
                    return Err(Error::library_go_away_data(
                        Reason::ENHANCE_YOUR_CALM,
                        "too_many_continuations",
                    ));
                } else {
                    partial.continuation_frames_count = cnt;
                }
            }

            // Extend the buf
            if partial.buf.is_empty() {
                partial.buf = bytes.split_off(frame::HEADER_LEN);
            } else {
                if partial.frame.is_over_size() {
                    // If there was left over bytes previously, they may be
                    // needed to continue decoding, even though we will
                    // be ignoring this frame. This is done to keep the HPACK
                    // decoder state up-to-date.
                    //
                    // Still, we need to be careful, because if a malicious
                    // attacker were to try to send a gigantic string, such
                    // that it fits over multiple header blocks, we could
                    // grow memory uncontrollably again, and that'd be a shame.
                    //
                    // Instead, we use a simple heuristic to determine if
                    // we should continue to ignore decoding, or to tell
                    // the attacker to go away.
                    if partial.buf.len() + bytes.len() > decoder.max_header_list_size {
                        proto_err!(conn: "CONTINUATION frame header block size over ignorable limit");
                        return Err(Error::library_go_away(Reason::COMPRESSION_ERROR));
                    }
                }
                partial.buf.extend_from_slice(&bytes[frame::HEADER_LEN..]);
            }

            match partial.frame.load_hpack(
                &mut partial.buf,
                decoder.max_header_list_size,
                &mut decoder.hpack,
            ) {
                Ok(_) => {}
                Err(frame::Error::Hpack(hpack::DecoderError::NeedMore(_))) if !is_end_headers => {}
                Err(frame::Error::MalformedMessage) => {
                    let id = head.stream_id();
                    proto_err!(stream: "malformed CONTINUATION frame; stream={:?}", id);
                    return Err(Error::library_reset(id, Reason::PROTOCOL_ERROR));
                }
                Err(frame::Error::HeaderListWayTooLarge) => {
                    proto_err!(conn: "decoded CONTINUATION header list size over abuse limit");
                    return Err(Error::library_go_away_data(
                        Reason::ENHANCE_YOUR_CALM,
                        "header_list_way_too_large",
                    ));
                }
                Err(e) => {
                    proto_err!(conn: "failed HPACK decoding; err={:?}", e);
                    return Err(Error::library_go_away(Reason::PROTOCOL_ERROR));
                }
            }

            if is_end_headers {
                partial.frame.into()
            } else {
                decoder.partial = Some(partial);
                return Ok(None);
            }
        }
        Kind::Unknown => {
            // Unknown frames are ignored
            return Ok(None);
        }
    };

    Ok(Some(frame))
}

impl<T> Stream for FramedRead<T>
where
    T: AsyncRead + Unpin,
{
    type Item = Result<Frame, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let span = tracing::trace_span!("FramedRead::poll_next");
        let _e = span.enter();
        loop {
            tracing::trace!("poll");
            let bytes = match ready!(self.inner.poll_next(cx)) {
                Some(Ok(bytes)) => bytes,
                Some(Err(e)) => return Poll::Ready(Some(Err(map_err(e)))),
                None => return Poll::Ready(None),
            };

            tracing::trace!(read.bytes = bytes.len());
            if let Some(frame) = self.decoder.decode(bytes)? {
                tracing::debug!(?frame, "received");
                return Poll::Ready(Some(Ok(frame)));
            }
        }
    }
}

fn map_err(err: io::Error) -> Error {
    if let io::ErrorKind::InvalidData = err.kind() {
        if let Some(custom) = err.get_ref() {
            if custom.is::<LengthDelimitedCodecError>() {
                return Error::library_go_away(Reason::FRAME_SIZE_ERROR);
            }
        }
    }
    err.into()
}

// ===== impl Continuable =====

impl Continuable {
    fn stream_id(&self) -> frame::StreamId {
        match *self {
            Continuable::Headers(ref h) => h.stream_id(),
            Continuable::PushPromise(ref p) => p.stream_id(),
        }
    }

    fn is_over_size(&self) -> bool {
        match *self {
            Continuable::Headers(ref h) => h.is_over_size(),
            Continuable::PushPromise(ref p) => p.is_over_size(),
        }
    }

    fn load_hpack(
        &mut self,
        src: &mut BytesMut,
        max_header_list_size: usize,
        decoder: &mut hpack::Decoder,
    ) -> Result<(), frame::Error> {
        match *self {
            Continuable::Headers(ref mut h) => h.load_hpack(src, max_header_list_size, decoder),
            Continuable::PushPromise(ref mut p) => p.load_hpack(src, max_header_list_size, decoder),
        }
    }
}

impl<T> From<Continuable> for Frame<T> {
    fn from(cont: Continuable) -> Self {
        match cont {
            Continuable::Headers(mut headers) => {
                headers.set_end_headers();
                headers.into()
            }
            Continuable::PushPromise(mut push) => {
                push.set_end_headers();
                push.into()
            }
        }
    }
}

/// watchcache: what tokio-util's `FramedRead<T, LengthDelimitedCodec>` did here (split the
/// input into frames), without its read buffer's 8 KiB for the connection's life. HTTP/2 always
/// has a read pending, so a buffer kept across it is held by every idle connection. Here the
/// buffer goes when it is empty, and a read with no buffer goes into the stack (`PROBE`): only
/// bytes that arrived are moved into a new buffer, so an idle pending read holds nothing.
#[derive(Debug)]
pub struct Delimited<T> {
    io: T,
    codec: LengthDelimitedCodec,
    /// Bytes read and not yet framed. No allocation while empty between reads.
    buf: BytesMut,
    /// The input ended (a read of 0 bytes).
    eof: bool,
    /// An error was returned: the stream ends (as tokio-util's `FramedRead` did).
    errored: bool,
}

/// The stack buffer of a read made with no buffer (the connection was idle): a TLS record's
/// worth of plaintext or less arrives in one read; more is read into the heap buffer it
/// starts.
const PROBE: usize = 8 * 1024;

impl<T> Delimited<T> {
    pub fn new(io: T, codec: LengthDelimitedCodec) -> Delimited<T> {
        Delimited {
            io,
            codec,
            buf: BytesMut::new(),
            eof: false,
            errored: false,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }

    pub fn get_mut(&mut self) -> &mut T {
        &mut self.io
    }

    pub fn decoder(&self) -> &LengthDelimitedCodec {
        &self.codec
    }

    pub fn decoder_mut(&mut self) -> &mut LengthDelimitedCodec {
        &mut self.codec
    }

    /// The next frame (its 9-byte head included), as tokio-util's `FramedRead` returned it:
    /// `None` at the end of the input, or after an error.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<BytesMut>>>
    where
        T: AsyncRead + Unpin,
    {
        loop {
            if self.errored {
                return Poll::Ready(None);
            }
            if !self.buf.is_empty() {
                match self.codec.decode(&mut self.buf) {
                    Ok(Some(frame)) => return Poll::Ready(Some(Ok(frame))),
                    Ok(None) => {}
                    Err(e) => {
                        self.errored = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            if self.eof {
                if self.buf.is_empty() {
                    return Poll::Ready(None);
                }
                // As tokio-util's default `Decoder::decode_eof`: a partial frame at the end.
                self.errored = true;
                return Poll::Ready(Some(Err(io::Error::other("bytes remaining on stream"))));
            }
            let read = if self.buf.is_empty() {
                // Frames already returned keep their part of the allocation alive; the rest
                // goes, so that the pending read below holds no buffer.
                self.buf = BytesMut::new();
                let mut probe = [MaybeUninit::<u8>::uninit(); PROBE];
                let mut probe = ReadBuf::uninit(&mut probe);
                match Pin::new(&mut self.io).poll_read(cx, &mut probe) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => Err(e),
                    Poll::Ready(Ok(())) => {
                        let filled = probe.filled();
                        // A full probe: more is likely coming, so room for it too.
                        let room = if filled.len() == PROBE {
                            2 * PROBE
                        } else {
                            filled.len()
                        };
                        self.buf.reserve(room);
                        self.buf.extend_from_slice(filled);
                        Ok(filled.len())
                    }
                }
            } else {
                // Room for at least one byte, so that a read of 0 means the end.
                self.buf.reserve(1);
                match poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(read) => read,
                }
            };
            match read {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => {
                    self.errored = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }
}

/// watchcache: the read buffer exists only while bytes wait to be framed.
#[cfg(test)]
mod watchcache_tests {
    use super::super::watchcache_mock::{frame, Mock};
    use super::super::Codec;
    use crate::frame::Frame;
    use bytes::Bytes;
    use futures_core::Stream;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    fn poll(codec: &mut Codec<Mock, Bytes>) -> Poll<Option<Result<Frame, crate::proto::Error>>> {
        Pin::new(codec).poll_next(&mut Context::from_waker(Waker::noop()))
    }

    fn buffer(codec: &Codec<Mock, Bytes>) -> usize {
        codec.inner.inner.buf.capacity()
    }

    #[test]
    fn an_idle_read_holds_no_buffer() {
        let mut codec = Codec::new(Mock::default());
        assert!(poll(&mut codec).is_pending());
        assert_eq!(buffer(&codec), 0);
        // Two frames in one read, then idle: both come out and the buffer goes.
        let mut both = frame(0x6, 0, 0, b"12345678");
        both.extend(frame(0x6, 0x1, 0, b"abcdefgh"));
        codec.inner.get_mut().get_mut().input.push_back(both);
        for payload in [b"12345678", b"abcdefgh"] {
            match poll(&mut codec) {
                Poll::Ready(Some(Ok(Frame::Ping(p)))) => assert_eq!(p.payload(), payload),
                other => panic!("a PING: {other:?}"),
            }
        }
        assert!(poll(&mut codec).is_pending());
        assert_eq!(buffer(&codec), 0);
    }

    #[test]
    fn a_frame_larger_than_the_probe_in_pieces_is_whole() {
        let mut codec = Codec::new(Mock::default());
        codec.set_max_recv_frame_size(1 << 20);
        let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let bytes = frame(0x0, 0x1, 1, &payload);
        // A partial head, then pieces around the stack probe's size.
        for piece in [
            &bytes[..5],
            &bytes[5..9000],
            &bytes[9000..9001],
            &bytes[9001..],
        ] {
            codec
                .inner
                .get_mut()
                .get_mut()
                .input
                .push_back(piece.to_vec());
        }
        match poll(&mut codec) {
            Poll::Ready(Some(Ok(Frame::Data(d)))) => {
                assert_eq!(d.payload(), &payload[..]);
                assert!(d.is_end_stream());
            }
            other => panic!("a DATA frame: {other:?}"),
        }
        assert!(poll(&mut codec).is_pending());
        assert_eq!(buffer(&codec), 0);
    }

    #[test]
    fn the_end_of_input_ends_the_stream_and_a_partial_frame_is_an_error() {
        let mut codec = Codec::new(Mock::default());
        codec.inner.get_mut().get_mut().input.push_back(Vec::new());
        assert!(matches!(poll(&mut codec), Poll::Ready(None)));

        let mut codec = Codec::new(Mock::default());
        let ping = frame(0x6, 0, 0, b"12345678");
        codec
            .inner
            .get_mut()
            .get_mut()
            .input
            .push_back(ping[..12].to_vec());
        codec.inner.get_mut().get_mut().input.push_back(Vec::new());
        assert!(matches!(poll(&mut codec), Poll::Ready(Some(Err(_)))));
        assert!(matches!(poll(&mut codec), Poll::Ready(None)));
    }

    #[test]
    fn an_oversized_frame_is_a_frame_size_error() {
        let mut codec = Codec::new(Mock::default());
        let big = frame(0x0, 0, 1, &[0; 16_385]);
        codec.inner.get_mut().get_mut().input.push_back(big);
        match poll(&mut codec) {
            Poll::Ready(Some(Err(crate::proto::Error::GoAway(_, reason, _)))) => {
                assert_eq!(reason, crate::frame::Reason::FRAME_SIZE_ERROR)
            }
            other => panic!("FRAME_SIZE_ERROR: {other:?}"),
        }
    }
}
