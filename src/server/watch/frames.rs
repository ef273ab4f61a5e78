//! Watch frames as response chunks: the cache's shared pieces as they are, or compressed into the
//! response's gzip stream and flushed, so the client sees each event at once. Both watch paths
//! (the fast path and hyper's body) encode through this one type.

use std::io::Write;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;

use crate::cache::{Frame, WatchEvent};
use crate::error::Error;
use crate::server::convert::WatchConverter;
use crate::server::status::ApiError;

/// Turns frames into response chunks: the shared pieces, or gzip-compressed and flushed.
pub(crate) struct FrameEncoder {
    gzip: Option<GzEncoder<Vec<u8>>>,
    /// Set when the watch is answered as Table or PartialObjectMetadata: each event is converted
    /// for this watcher. Boxed: plain JSON watches (nearly all) carry one pointer, not the state.
    convert: Option<Box<WatchConverter>>,
}

impl FrameEncoder {
    pub fn new(gzip: bool, convert: Option<WatchConverter>) -> FrameEncoder {
        FrameEncoder {
            gzip: gzip.then(|| GzEncoder::new(Vec::new(), Compression::fast())),
            convert: convert.map(Box::new),
        }
    }

    fn chunks(&mut self, frame: &Frame) -> Vec<Bytes> {
        match &mut self.gzip {
            None => frame.parts().to_vec(),
            Some(gz) => {
                for p in frame.parts() {
                    gz.write_all(p)
                        .unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
                }
                gz.flush()
                    .unwrap_or_else(|_| unreachable!("flushing to a Vec cannot fail"));
                vec![Bytes::from(std::mem::take(gz.get_mut()))]
            }
        }
    }

    /// The chunks for a watch stream's next item, and whether the response ends with them: an error
    /// goes out as an ERROR event and ends it, and the end of the stream closes the gzip stream.
    pub fn item(&mut self, item: Option<Result<WatchEvent, Error>>) -> (Vec<Bytes>, bool) {
        match item {
            Some(Ok(ev)) => {
                let frame = match &mut self.convert {
                    None => ev.frame(),
                    Some(c) => c.frame(&ev),
                };
                (self.chunks(&frame), false)
            }
            Some(Err(e)) => (
                self.last(&Frame::error(ApiError::from(e).status_json())),
                true,
            ),
            None => (self.finish().into_iter().collect(), true),
        }
    }

    /// The chunks for a response's last frame, gzip trailer included.
    pub fn last(&mut self, frame: &Frame) -> Vec<Bytes> {
        let mut chunks = self.chunks(frame);
        chunks.extend(self.finish());
        chunks
    }

    /// The gzip trailer, once, when compressing.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.gzip
            .take()
            .map(|gz| Bytes::from(gz.finish().unwrap_or_default()))
    }
}
