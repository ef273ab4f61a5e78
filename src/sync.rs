//! The synchronization primitives the cache uses: parking_lot's locks and std's atomics, or, when
//! built with `--cfg watchcache_loom`, loom's, so that `tests/loom.rs` can explore the interleavings
//! of dispatch, parking and catch-up (as tokio does with its own `loom` shim).
//!
//! The wrappers give both the same surface: `lock()`, `read()` and `write()` return guards directly
//! (loom's locks are poisoned by a panic, which can only happen in a failing model).

#[cfg(not(watchcache_loom))]
pub(crate) use parking_lot::{Mutex, RwLock};
#[cfg(not(watchcache_loom))]
pub(crate) use std::sync::atomic::AtomicU64;

#[cfg(watchcache_loom)]
pub(crate) use loom_impl::{AtomicU64, Mutex, RwLock};

#[cfg(watchcache_loom)]
mod loom_impl {
    pub(crate) use loom::sync::atomic::AtomicU64;

    /// loom's mutex with parking_lot's surface.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(t: T) -> Self {
            Mutex(loom::sync::Mutex::new(t))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    /// loom's read-write lock with parking_lot's surface.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(t: T) -> Self {
            RwLock(loom::sync::RwLock::new(t))
        }

        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(|e| e.into_inner())
        }

        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(|e| e.into_inner())
        }
    }
}
