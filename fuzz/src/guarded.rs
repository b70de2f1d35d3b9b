//! Memory between two inaccessible guard pages.
//!
//! Without AddressSanitizer (the targets are built with `-s none`, see fuzz/README.md) an
//! out-of-bounds read of a few bytes goes unnoticed. A [`GuardedPages`] region is
//! `[PROT_NONE page][usable pages][PROT_NONE page]`: a buffer placed with [`GuardedPages::at_end`]
//! ends exactly where the trailing guard begins, so touching the byte after it raises SIGSEGV,
//! which libFuzzer reports as a crash with the input. [`GuardedPages::at_start`] does the same for
//! the byte before a buffer.

use std::ptr::NonNull;

/// One mapping: a guard page, `usable` bytes, a guard page.
pub struct GuardedPages {
    mapping: NonNull<u8>,
    page: usize,
    usable: usize,
}

// SAFETY: the region is plain memory owned by this value; the fuzz targets use it from the one
// thread libFuzzer runs them on, and every access goes through `&mut`-free raw copies that the
// caller sequences.
unsafe impl Send for GuardedPages {}
// SAFETY: as above; shared references only hand out raw pointers.
unsafe impl Sync for GuardedPages {}

impl GuardedPages {
    /// Map a region with at least `min_usable` usable bytes (rounded up to whole pages).
    pub fn new(min_usable: usize) -> GuardedPages {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let usable = min_usable.max(1).div_ceil(page) * page;
        let total = usable + 2 * page;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap of {total} bytes failed");
        let base = p.cast::<u8>();
        // SAFETY: both ranges are whole pages inside the mapping just made.
        let (front, back) = unsafe {
            (
                libc::mprotect(base.cast(), page, libc::PROT_NONE),
                libc::mprotect(base.add(page + usable).cast(), page, libc::PROT_NONE),
            )
        };
        assert!(
            front == 0 && back == 0,
            "mprotect of the guard pages failed"
        );
        GuardedPages {
            mapping: NonNull::new(base).unwrap_or(NonNull::dangling()),
            page,
            usable,
        }
    }

    /// Usable bytes.
    pub fn capacity(&self) -> usize {
        self.usable
    }

    fn first_usable(&self) -> *mut u8 {
        // SAFETY: the first usable byte lies one page into the mapping.
        unsafe { self.mapping.as_ptr().add(self.page) }
    }

    /// Fill all usable bytes with `byte`.
    pub fn fill(&self, byte: u8) {
        // SAFETY: the usable range is readable and writable and owned by this value.
        unsafe { std::ptr::write_bytes(self.first_usable(), byte, self.usable) };
    }

    /// Copy `data` so that its last byte is the last usable byte; returns its first byte's
    /// address (for empty data: the trailing guard page's address, which must not be touched).
    pub fn at_end(&self, data: &[u8]) -> *mut u8 {
        assert!(data.len() <= self.usable, "input larger than the region");
        // SAFETY: usable - len >= 0, so the start stays in the usable range.
        let start = unsafe { self.first_usable().add(self.usable - data.len()) };
        // SAFETY: `data.len()` bytes from `start` are usable; `data` is another allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), start, data.len()) };
        start
    }

    /// Copy `data` to the first usable byte and return that address.
    pub fn at_start(&self, data: &[u8]) -> *mut u8 {
        assert!(data.len() <= self.usable, "input larger than the region");
        let start = self.first_usable();
        // SAFETY: `data.len()` bytes from `start` are usable; `data` is another allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), start, data.len()) };
        start
    }

    /// The `len` bytes that end at the last usable byte (the buffer `at_end` placed).
    pub fn tail(&self, len: usize) -> &[u8] {
        assert!(len <= self.usable, "length larger than the region");
        // SAFETY: the range lies in the usable bytes; callers read it only between the calls
        // that write it.
        unsafe { std::slice::from_raw_parts(self.first_usable().add(self.usable - len), len) }
    }
}

impl Drop for GuardedPages {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; nothing borrows it any more.
        unsafe {
            libc::munmap(self.mapping.as_ptr().cast(), self.usable + 2 * self.page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement() {
        let g = GuardedPages::new(100);
        assert!(g.capacity() >= 100);
        g.fill(7);
        let p = g.at_end(b"abc");
        // SAFETY: `p` points at the 3 bytes just copied.
        assert_eq!(unsafe { std::slice::from_raw_parts(p, 3) }, b"abc");
        assert_eq!(g.tail(4), b"\x07abc");
        let q = g.at_start(b"xy");
        // SAFETY: `q` points at the 2 bytes just copied.
        assert_eq!(unsafe { std::slice::from_raw_parts(q, 2) }, b"xy");
    }
}
