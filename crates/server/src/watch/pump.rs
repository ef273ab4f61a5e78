//! The one state machine every watch response runs: wait for the next event, the watch's deadline
//! or server shutdown, and turn what came into response chunks. The fast path writes the chunks to
//! its socket; hyper's body yields them.
//!
//! It is polled, not awaited: an idle watch holds its pump and nothing else (no future, no timer
//! entry, no shutdown waiter; the deadline and the shutdown come from the server's
//! [`Deadlines`](watchcache::deadlines::Deadlines)). Invariant: every `Pending` it returns has the
//! caller's waker stored both with the watch stream and with the deadline wheel.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::StreamExt;

use crate::metrics::WatchMeter;
use crate::watch::StartedWatch;
use crate::watch::chunks::{FrameEncoder, Wire};
use watchcache::deadlines::Deadlines;
use watchcache::wire::Frame;
use watchcache::wire::format::WatchEncoder;

/// A watch response in progress.
pub(crate) struct WatchPump {
    phase: Phase,
    encoder: FrameEncoder,
    /// The frames' stored format, unless the encoder has one of its own.
    wire: Wire,
    /// The watch's metrics (`None` for a response of one frame).
    meter: Option<WatchMeter>,
}

/// Each state keeps the server's deadlines, for [`WatchPump::shutting_down`]: a streaming
/// watch's are its stream's (its end is in them), and they are kept when it ends. Two variants:
/// their tag is a pointer's niche in the streaming watch (a third needs a tag of its own, 8 B
/// more in every idle watch).
enum Phase {
    /// Streaming the watch's events.
    Streaming(StartedWatch),
    /// Not streaming: a response of one frame still to send (the ERROR event of a watch that
    /// could not start; boxed: rare, and larger than a streaming watch), or done.
    Ended {
        single: Option<Box<Frame>>,
        deadlines: Option<Arc<Deadlines>>,
    },
}

impl WatchPump {
    /// Streams a started watch until its deadline, server shutdown, an error, or its end, its
    /// events made by `encoder`.
    pub(crate) fn events(
        w: StartedWatch,
        gzip: bool,
        encoder: WatchEncoder,
        meter: WatchMeter,
    ) -> WatchPump {
        let (encoder, wire) = FrameEncoder::of(gzip, encoder);
        WatchPump {
            phase: Phase::Streaming(w),
            encoder,
            wire,
            meter: Some(meter),
        }
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(&self) -> &'static str {
        self.encoder.content_type(self.wire)
    }

    /// A response made of one last frame, made by `encoder` (whose Content-Type it carries).
    pub(crate) fn single(
        frame: Frame,
        deadlines: Arc<Deadlines>,
        gzip: bool,
        encoder: WatchEncoder,
    ) -> WatchPump {
        let (encoder, wire) = FrameEncoder::of(gzip, encoder);
        WatchPump {
            phase: Phase::Ended {
                single: Some(Box::new(frame)),
                deadlines: Some(deadlines),
            },
            encoder,
            wire,
            meter: None,
        }
    }

    /// The next chunks to send, or `None` once the response is complete.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped before it completes, it loses nothing (the watch stream keeps its
    /// events until they are taken).
    pub(crate) async fn next(&mut self) -> Option<Vec<Bytes>> {
        poll_fn(|cx| self.poll_chunks(cx)).await
    }

    /// The next chunks to send, or `None` once the response is complete; `Pending` until an
    /// event, the deadline or shutdown comes (`cx` is then woken).
    pub(crate) fn poll_chunks(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<Bytes>>> {
        // Asked for more: the writer took the last chunks.
        self.written();
        let w = match &mut self.phase {
            Phase::Ended { single, .. } => {
                return match single.take() {
                    Some(frame) => Poll::Ready(Some(self.encoder.last(&frame))),
                    None => Poll::Ready(None),
                };
            }
            Phase::Streaming(w) => w,
        };
        // The end first: a watch whose events never pause still ends at its deadline.
        let item = if w.stream.poll_end(cx).is_ready() {
            None
        } else {
            match w.stream.poll_next_unpin(cx) {
                Poll::Ready(ev) => Some(ev),
                Poll::Pending => return Poll::Pending,
            }
        };
        let (chunks, done) = match item {
            Some(ev) => {
                let received = ev
                    .as_ref()
                    .and_then(|r| r.as_ref().ok())
                    .and_then(|e| e.received_at());
                let (chunks, done, sent) = self.encoder.item(ev, self.wire);
                if let (Some(m), Some(len)) = (&mut self.meter, sent) {
                    m.sent(len, received);
                }
                (chunks, done)
            }
            None => {
                let mut chunks = Vec::new();
                // Drained: what was queued, then a last bookmark, for the client to resume from
                // on another replica.
                if w.stream.end_wheel().is_some_and(|d| d.draining()) {
                    for ev in w.stream.drain_tail() {
                        let received = ev.received_at();
                        let (more, _, sent) = self.encoder.item(Some(Ok(ev)), self.wire);
                        if let (Some(m), Some(len)) = (&mut self.meter, sent) {
                            m.sent(len, received);
                        }
                        chunks.extend(more);
                    }
                }
                chunks.extend(self.encoder.finish());
                (chunks, true)
            }
        };
        if done {
            let deadlines = w.stream.end_wheel().cloned();
            self.phase = Phase::Ended {
                single: None,
                deadlines,
            };
        }
        Poll::Ready(Some(chunks))
    }

    /// Records that the chunks returned last were written to the connection (the fast path
    /// calls it after its write; hyper's body when asked for more).
    pub(crate) fn written(&mut self) {
        if let Some(m) = &mut self.meter {
            m.written();
        }
    }

    /// Whether the server is shutting down or draining (a response that ended for that closes
    /// its connection: its client comes back through another).
    pub(crate) fn shutting_down(&self) -> bool {
        match &self.phase {
            Phase::Streaming(w) => w.stream.end_wheel(),
            Phase::Ended { deadlines, .. } => deadlines.as_ref(),
        }
        .is_some_and(|d| d.stopped() || d.draining())
    }
}

/// The HTTP/2 stream sends a watch's chunks itself (`transport/h2_stream.rs`).
impl crate::transport::Chunks for WatchPump {
    fn poll_chunks(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<Bytes>>> {
        WatchPump::poll_chunks(self, cx)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::*;
    use crate::auth::Limits;
    use crate::metrics::ServerMetrics;
    use watchcache::deadlines;
    use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef, Selection};
    use watchcache::{WatchEnd, WatchOptions};

    #[test]
    fn a_pump_is_small() {
        // The pump is all an idle watch's response holds (design/performance.md, per idle watch
        // connection): its metrics are one pointer to what the watches of its request key share
        // (its resource's meters, its long-running gauge and duration handles) and two 8-byte
        // stamps; its end and its bookmarks are one deadline, the stream's, in the server's wheel,
        // whose handle it shares; its two limits are one slot; gzip and conversion one box. At
        // 128 B, an HTTP/2 watch stream (its h2 handle, the pump and a pointer: 160 B) makes its
        // connection's node 224 B, a mimalloc block of that size (256 at a 160-byte pump);
        // hyper's HTTP/1.1 body (the pump and a 32-byte iterator) fits 160-byte blocks.
        println!(
            "WatchPump {} B, WatchMeter {} B, Deadline {} B",
            std::mem::size_of::<WatchPump>(),
            std::mem::size_of::<WatchMeter>(),
            std::mem::size_of::<watchcache::deadlines::Deadline>()
        );
        assert!(std::mem::size_of::<WatchPump>() <= 128);
        assert!(std::mem::size_of::<WatchMeter>() <= 24);
        assert!(std::mem::size_of::<watchcache::deadlines::Deadline>() <= 40);
        // Boxed gzip state: a kubelet's watch is never compressed.
        assert!(std::mem::size_of::<FrameEncoder>() <= 8);
    }

    /// A pod on node `n1` in namespace `ns`, as JSON.
    pub(crate) fn pod(name: &str) -> String {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"nodeName": "n1"}})
        .to_string()
    }

    /// A cache of pods at revision 1, its source, and a server's deadlines.
    pub(crate) fn setup() -> (Cache, MemorySource, watch::Sender<bool>, Arc<Deadlines>) {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = MemorySource::new(writer, 1, []);
        let (tx, rx) = watch::channel(false);
        (cache, src, tx, Deadlines::new(Some(rx), deadlines::TICK))
    }

    /// A started watch of every pod after revision 1, ending at `deadline`.
    pub(crate) async fn pump(
        cache: &Cache,
        wheel: &Arc<Deadlines>,
        deadline: Instant,
        gzip: bool,
    ) -> WatchPump {
        let opts = WatchOptions::new(Selection::all(), watchcache::ResourceVersion::At(1));
        started(cache, wheel, deadline, gzip, opts).await
    }

    /// A started watch with `opts`, ending at `deadline`.
    async fn started(
        cache: &Cache,
        wheel: &Arc<Deadlines>,
        deadline: Instant,
        gzip: bool,
        opts: WatchOptions,
    ) -> WatchPump {
        let end = WatchEnd {
            wheel: Arc::clone(wheel),
            at: deadline,
        };
        let stream = cache.watch_until(opts, end).await.unwrap();
        let w = StartedWatch {
            stream,
            _slot: Limits::new(0, 1, 0, Duration::ZERO).watch(None).unwrap(),
        };
        let meter = ServerMetrics::default().watch(cache.definition(), None);
        WatchPump::events(w, gzip, WatchEncoder::Stored(Wire::Json), meter)
    }

    fn watchers(cache: &Cache) -> u64 {
        let s = cache.stats();
        s.routed_watchers + s.unrouted_watchers
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_ends_a_watch_with_its_final_chunk() {
        let (cache, src, _tx, wheel) = setup();
        let start = Instant::now();
        let mut p = pump(&cache, &wheel, start + Duration::from_secs(5), true).await;
        src.put("/registry/pods/ns/a", pod("a")).unwrap();
        let event: Vec<u8> = p.next().await.unwrap().concat();
        assert!(!event.is_empty());
        // Then nothing until the deadline, which ends the gzip stream: its final block and
        // trailer, the response's last chunk.
        let last = tokio::time::timeout(Duration::from_secs(10), p.next())
            .await
            .expect("ended at the deadline")
            .unwrap();
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(5) && took <= Duration::from_secs(6),
            "{took:?}"
        );
        let mut gz = event;
        gz.extend(last.concat());
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
            .unwrap();
        assert!(text.contains("\"ADDED\""), "{text}");
        assert!(p.next().await.is_none());
        assert!(!p.shutting_down());
        // The watch is gone from the cache and from the wheel.
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_every_watch() {
        let (cache, _src, tx, wheel) = setup();
        let far = Instant::now() + Duration::from_secs(3600);
        let mut tasks = Vec::new();
        for gzip in [false, true, false] {
            let mut p = pump(&cache, &wheel, far, gzip).await;
            tasks.push(tokio::spawn(async move {
                let mut chunks = 0;
                while let Some(c) = p.next().await {
                    chunks += c.len();
                }
                (chunks, p.shutting_down())
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!((watchers(&cache), wheel.waiting()), (3, 3));
        tx.send(true).unwrap();
        let mut ended = Vec::new();
        for t in tasks {
            ended.push(
                tokio::time::timeout(Duration::from_millis(100), t)
                    .await
                    .expect("ended at shutdown")
                    .unwrap(),
            );
        }
        // The gzip watch still sent its end; each says why it ended.
        assert_eq!(ended, [(0, true), (1, true), (0, true)]);
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }

    /// A served watch with bookmarks holds one entry, in the server's wheel, for its end and its
    /// bookmarks (none in the cache's): it gets its periodic bookmarks, the one 2 s before its
    /// end, and ends at its end; another ends at shutdown. Each never early, at most a tick late.
    #[tokio::test(start_paused = true)]
    async fn a_served_watch_holds_one_entry_for_its_end_and_bookmarks() {
        let every = Duration::from_secs(5);
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default().bookmark_interval(every),
        );
        let _src = MemorySource::new(writer, 1, []);
        let (tx, rx) = watch::channel(false);
        let wheel = Deadlines::new(Some(rx), deadlines::TICK);
        let opts = || {
            WatchOptions::new(Selection::all(), watchcache::ResourceVersion::At(1)).with_bookmarks()
        };
        let start = Instant::now();
        let within_a_tick = |at: u64| {
            let took = start.elapsed();
            let at = Duration::from_secs(at);
            assert!(
                took >= at && took <= at + deadlines::TICK,
                "{at:?}: {took:?}"
            );
        };
        let mut p = started(
            &cache,
            &wheel,
            start + Duration::from_secs(16),
            false,
            opts(),
        )
        .await;
        // Periodic bookmarks at 5 s and 10 s, the end's at 14 s; then the end at 16 s.
        for at in [5, 10, 14] {
            let chunk = p.next().await.unwrap().concat();
            within_a_tick(at);
            let text = String::from_utf8(chunk).unwrap();
            assert!(text.contains("\"BOOKMARK\""), "{text}");
            assert_eq!((wheel.waiting(), cache.waiting_bookmarks()), (1, 0));
        }
        assert!(p.next().await.unwrap().is_empty());
        within_a_tick(16);
        assert!(p.next().await.is_none());
        assert!(!p.shutting_down());
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));

        // Shutdown ends a watch between its bookmarks, at once.
        let mut q = started(
            &cache,
            &wheel,
            start + Duration::from_secs(3600),
            false,
            opts(),
        )
        .await;
        let bookmark = q.next().await.unwrap().concat();
        assert!(
            String::from_utf8(bookmark)
                .unwrap()
                .contains("\"BOOKMARK\"")
        );
        within_a_tick(16 + 5);
        assert_eq!((wheel.waiting(), cache.waiting_bookmarks()), (1, 0));
        let stopping = Instant::now();
        tx.send(true).unwrap();
        assert!(q.next().await.unwrap().is_empty());
        assert!(q.next().await.is_none());
        assert!(stopping.elapsed() < Duration::from_millis(100));
        assert!(q.shutting_down());
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_watch_leaves_nothing_in_the_wheel() {
        let (cache, _src, _tx, wheel) = setup();
        let mut p = pump(
            &cache,
            &wheel,
            Instant::now() + Duration::from_secs(60),
            false,
        )
        .await;
        // Polled once and cancelled: it waits in the wheel and the cache, cancel-safe.
        assert!(
            tokio::time::timeout(Duration::from_millis(10), p.next())
                .await
                .is_err()
        );
        assert_eq!((watchers(&cache), wheel.waiting()), (1, 1));
        drop(p);
        assert_eq!((watchers(&cache), wheel.waiting()), (0, 0));
    }
}
