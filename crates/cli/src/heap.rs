//! mimalloc, counted on demand: with `WATCHCACHE_HEAP_STATS=1` in its environment the process
//! counts its live heap (bytes asked for, and bytes in mimalloc's blocks) and `/metrics` reports
//! them (`watchcache_heap_live_bytes`, `watchcache_heap_held_bytes`). A diagnostic: RSS says how
//! much memory a process holds, these say how much of it its live allocations are, so the rest is
//! the allocator's (pages kept around freed blocks). `watchcache-bench --model kubelet
//! --heap-stats` reads them next to the RSS.
//!
//! Off, an allocation costs one relaxed load more than mimalloc's own; on, two relaxed atomic
//! additions (shared by every thread: for measuring, not for production).
//!
//! `watchcache serve` also turns transparent huge pages off for itself here
//! ([`refuse_huge_pages`]), unless `--transparent-huge-pages`.
// A global allocator and prctl(2) are unsafe by signature; each block says why it is sound.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use watchcache_server::{HeapBytes, mimalloc_block};

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);
static HELD: AtomicI64 = AtomicI64::new(0);

/// The process's allocator: mimalloc, with the counts above when they are on.
pub(crate) struct Counting;

fn count(size: usize, sign: i64) {
    LIVE.fetch_add(
        sign * i64::try_from(size).unwrap_or(i64::MAX),
        Ordering::Relaxed,
    );
    HELD.fetch_add(
        sign * i64::try_from(mimalloc_block(size)).unwrap_or(i64::MAX),
        Ordering::Relaxed,
    );
}

// SAFETY: every call goes to mimalloc unchanged; the counting touches only atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            count(l.size(), 1);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc(l) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            count(l.size(), 1);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if ON.load(Ordering::Relaxed) {
            count(l.size(), -1);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            count(l.size(), -1);
            count(new, 1);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.realloc(p, l, new) }
    }
}

/// Turns transparent huge pages off for this process and what it starts
/// (`PR_SET_THP_DISABLE`; the kernel then gives neither a fault nor khugepaged a huge page, even
/// where mimalloc asked for them with `MADV_HUGEPAGE`).
///
/// Why: a served cache is mostly small blocks that live as long as their watches, freed one by
/// one. A huge page is resident whole from its first touched byte, khugepaged fills in the 4 KiB
/// pages around a single one in use (`max_ptes_none` is 511 by default), and a fault in a
/// `MADV_HUGEPAGE` range may stall for the kernel's compaction. In the kubelet bench (100 000
/// idle watches) about half of the server's RSS was huge pages (378–418 of 810–819 MiB), and the
/// server held 3.5–4.5 % more than without them (design/performance.md, "Bookmarks woken in
/// batches; transparent huge pages"). Go's
/// runtime stopped asking for huge pages for the same reasons (golang/go#61718,
/// golang/go#64332).
///
/// # Errors
/// The `prctl` error (a kernel before 3.15, or a seccomp policy refusing it).
#[cfg(target_os = "linux")]
pub(crate) fn refuse_huge_pages() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes integers only and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Elsewhere there is no such switch (nor, on macOS and Windows, transparent huge pages).
#[cfg(not(target_os = "linux"))]
pub fn refuse_huge_pages() -> std::io::Result<()> {
    Ok(())
}

/// Turns the counts on when the environment asks (before the runtime starts: what was allocated
/// earlier and freed later makes the counts lower by its size, a constant) and has `/metrics`
/// report them.
pub(crate) fn init_from_env() {
    if std::env::var_os("WATCHCACHE_HEAP_STATS").is_some_and(|v| v == "1") {
        ON.store(true, Ordering::SeqCst);
        watchcache_server::count_heap_with(|| HeapBytes {
            live: LIVE.load(Ordering::Relaxed),
            held: HELD.load(Ordering::Relaxed),
        });
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn refusing_huge_pages_sets_the_process_flag() {
        super::refuse_huge_pages().unwrap();
        // SAFETY: PR_GET_THP_DISABLE takes and touches nothing.
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(flag, 1);
    }
}
