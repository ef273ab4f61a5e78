//! Where the server is in its life, which decides how a request is answered: `/readyz` fails
//! once the server is asked to stop, and a request gets 429 once it drains (`lib.rs` moves it on).

/// Where a server is in its life: each phase only ever follows the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    Serving = 0,
    /// Asked to stop: `/readyz` fails, everything else is served (`--shutdown-delay-duration`).
    Delaying = 1,
    /// The listeners are closed and the watches are ending, each with a last bookmark; a new
    /// request on a connection still open is answered 429 with `Retry-After` (and
    /// `Connection: close` on HTTP/1.1).
    Draining = 2,
}

/// The server's [`Phase`], read by every request.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle(std::sync::atomic::AtomicU8);

impl Lifecycle {
    pub(crate) fn phase(&self) -> Phase {
        match self.0.load(std::sync::atomic::Ordering::Acquire) {
            0 => Phase::Serving,
            1 => Phase::Delaying,
            _ => Phase::Draining,
        }
    }

    /// Moves on to `phase` (never back).
    pub(crate) fn enter(&self, phase: Phase) {
        self.0
            .fetch_max(phase as u8, std::sync::atomic::Ordering::AcqRel);
    }
}
