//! Watch responses. A watch is started here (the concurrent-watch limit, its deadline, the cache's
//! stream) and then run by one [`WatchPump`](pump::WatchPump), which both transports use:
//!
//! - `fast_path.rs`: a connection whose first request is a WATCH is served straight from the
//!   socket (an idle watch then costs about 3 KB instead of hyper's 32 KB);
//! - `body.rs`: any other watch, as a hyper response body.
//!
//! The pump's `FrameEncoder` turns events' frames into chunks (shared bytes, or gzip); the server's wheel
//! of deadlines (`cache/deadlines.rs`) ends watches at their deadline and at shutdown, for all of
//! them from one place.
//!
//! Layer: above `proxy/`, `auth/`, `metrics.rs`, `http/` and `transport/`, which it may import
//! (the fast path admits through `auth/filters.rs` and leaves a forwarded watch to hyper); below
//! `endpoints/`, which it does not know. The HTTP/2 transport sends a pump's chunks as its
//! `Chunks` (`pump.rs`), given down to it by `lib.rs`.

pub(crate) mod body;
pub(crate) mod fast_path;
pub(crate) use pump::Wire;
pub(crate) mod pump;

use std::sync::Arc;

use tokio::time::Instant;

use crate::auth::{Limits, User, WatchSlot};
use crate::http::status::ApiError;
use crate::metrics::{RequestKey, ServerMetrics, WatchStart};
use pump::WatchPump;
use watchcache::Error;
use watchcache::wire::format::WatchEncoder;
use watchcache::{Cache, WatchEnd, WatchOptions, WatchStream};

/// The longest timeout a watch is given, whatever `timeoutSeconds` says.
const MAX_WATCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// What starting a watch needs: the watch limits, the server's wheel of deadlines, the metrics,
/// and the timeout of a watch that names none.
pub(crate) struct WatchContext {
    /// `--max-watchers` and `--max-watches-per-user` (shared with admission's in-flight limit).
    pub(crate) limits: Arc<Limits>,
    /// Every watch's deadline, and shutdown delivered to every watch (`cache/deadlines.rs`).
    pub(crate) deadlines: Arc<watchcache::deadlines::Deadlines>,
    pub(crate) metrics: Arc<ServerMetrics>,
    /// A watch without `timeoutSeconds` ends after a random time in this range.
    pub(crate) default_timeout: (std::time::Duration, std::time::Duration),
}

/// A started watch: its events and its end (the stream's one entry in the server's wheel,
/// which holds its bookmarks too), and its slot.
pub(crate) struct StartedWatch {
    pub stream: WatchStream,
    /// Held for its `Drop`: the watch counts against the server's limit and its user's cap
    /// while it lives.
    _slot: WatchSlot,
}

/// Starts a watch and returns the pump that runs its response. A start older than the window is
/// a 200 response holding one ERROR event with the 410 `Status`, as upstream sends it; other start
/// errors are HTTP errors.
///
/// `opts` are already parsed (the authorizers read their selection); `timeout` is
/// `timeoutSeconds`; `user`, when authenticated, has its own cap of watches.
///
/// # Errors
/// 429 over the watch limit or the user's, and the cache's start errors (400, 429, 504).
// The watch's parts come from both transports (hyper's request, the fast path's head), each
// parsed its own way: one struct would only be built to be taken apart here. `key` labels the
// watch among the long-running requests.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start(
    cx: &WatchContext,
    cache: &Cache,
    opts: WatchOptions,
    timeout: Option<std::time::Duration>,
    gzip: bool,
    encoder: WatchEncoder,
    user: Option<&User>,
    key: Option<&RequestKey>,
) -> Result<WatchPump, ApiError> {
    let slot = cx.limits.watch(user.map(|u| u.name.as_str()))?;
    let timeout = timeout.unwrap_or_else(|| {
        let (lo, hi) = cx.default_timeout;
        lo + (hi.saturating_sub(lo)).mul_f64(fastrand::f64())
    });
    // `timeoutSeconds` may be any u64, and an instant 2^64 s away does not exist (adding it
    // panicked): beyond a year, a watch's own timeout is no different from none.
    let deadline = Instant::now() + timeout.min(MAX_WATCH_TIMEOUT);
    let deadlines = Arc::clone(&cx.deadlines);
    let end = WatchEnd {
        wheel: Arc::clone(&deadlines),
        at: deadline,
    };
    let start = WatchStart::of(&opts);
    let def = cache.definition();
    match cache.watch_until(opts, end).await {
        Ok(stream) => {
            cx.metrics.count_watch_start(def, start);
            let w = StartedWatch {
                stream,
                _slot: slot,
            };
            let meter = cx.metrics.watch(cache.definition(), key);
            Ok(WatchPump::events(w, gzip, encoder, meter))
        }
        Err(e @ (Error::Expired { .. } | Error::ContinueExpired { .. })) => {
            cx.metrics.count_watch_start(def, WatchStart::Expired);
            let frame = encoder.error_frame(ApiError::from(e).status());
            Ok(WatchPump::single(frame, deadlines, gzip, encoder))
        }
        Err(e) => Err(e.into()),
    }
}
