//! A resource double: memory (a registered buffer, staging memory) or a connection that calls
//! use and that something releases exactly once.
//!
//! Every use goes through a loom `UnsafeCell`, and release writes it too, so loom reports a release
//! that is not ordered after every use (a causality violation); a use after an ordered release trips
//! the `freed` flag. The flags and counters are plain std atomics: bookkeeping for the assertions,
//! not something loom should explore.

use loom::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc as StdArc;

/// What a released resource's bytes are set to.
const RELEASED_PATTERN: u64 = 0xdead_dead_dead_dead;

pub struct Resource {
    what: &'static str,
    bytes: UnsafeCell<u64>,
    freed: AtomicBool,
    frees: AtomicUsize,
}

// SAFETY: `bytes` is only reached through loom's `UnsafeCell::with`/`with_mut`, which loom checks
// for conflicting concurrent access (that is the point of the double); the rest are atomics. The
// real resources are shared between threads the same way, so the double must be `Sync` too.
unsafe impl Sync for Resource {}

impl Resource {
    pub fn new(what: &'static str) -> StdArc<Resource> {
        StdArc::new(Resource {
            what,
            bytes: UnsafeCell::new(0),
            freed: AtomicBool::new(false),
            frees: AtomicUsize::new(0),
        })
    }

    fn assert_live(&self) {
        assert!(
            !self.freed.load(Ordering::SeqCst),
            "{} used after it was released",
            self.what
        );
    }

    /// A shared use (several calls may read a registration at once).
    pub fn read(&self) -> u64 {
        self.assert_live();
        // SAFETY: loom's cell checks that no write (use or release) runs concurrently with this read.
        let value = self.bytes.with(|p| unsafe { *p });
        assert_ne!(value, RELEASED_PATTERN, "{} read after release", self.what);
        value
    }

    /// An exclusive use (a leased connection, a staging copy writing its memory).
    pub fn write(&self) {
        self.assert_live();
        // SAFETY: loom's cell checks that no other access runs concurrently with this write.
        self.bytes
            .with_mut(|p| unsafe { *p = (*p).wrapping_add(1) });
        self.assert_live();
    }

    /// Release it; must happen after every use, and once.
    pub fn free(&self) {
        // SAFETY: loom's cell checks that no use runs concurrently with the release.
        self.bytes.with_mut(|p| unsafe { *p = RELEASED_PATTERN });
        let already = self.freed.swap(true, Ordering::SeqCst);
        assert!(!already, "{} released twice", self.what);
        self.frees.fetch_add(1, Ordering::SeqCst);
    }

    /// How many times it was released.
    pub fn frees(&self) -> usize {
        self.frees.load(Ordering::SeqCst)
    }
}
