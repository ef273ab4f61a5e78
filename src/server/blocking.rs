//! Heavy request work off the reactor: applying a patch, decoding a large protobuf or YAML body.
//! Such work costs CPU in proportion to bodies and objects of several MiB; run on the reactor's
//! worker threads it stalls every other request on them (three concurrent patches of 60 000
//! finalizers held `/readyz` for 11 s, issue 20, item 5). It runs on tokio's blocking threads
//! instead, at most one job per core at once: more wait their turn (within the request's
//! `--request-timeout`), so a burst of heavy requests cannot take every core or spawn a thread
//! each.

use std::sync::{Arc, LazyLock};

use tokio::sync::Semaphore;

use crate::server::status::ApiError;

/// Jobs running at once: one per core.
static SLOTS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    Arc::new(Semaphore::new(cores))
});

/// Runs `job` on a blocking thread once a slot is free, and returns its result. The slot is held
/// by the job itself, not by the waiting request: a request that times out while its job runs
/// does not free the slot before the job ends, so the bound holds on running work.
///
/// # Errors
/// 500 if the job panicked (it never should: the jobs are the request readers, which refuse bad
/// input with errors).
pub(crate) async fn run<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    let slot = Arc::clone(&SLOTS).acquire_owned().await.map_err(|e| {
        ApiError::new(
            500,
            "InternalError",
            format!("no worker for the request: {e}"),
        )
    })?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        job()
    })
    .await
    .map_err(|e| {
        ApiError::new(
            500,
            "InternalError",
            format!("the request's work failed: {e}"),
        )
    })
}
