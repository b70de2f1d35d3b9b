//! Staging memory the NIC reads and writes, and a pool of registered staging buffers (one per
//! running transfer, registered once and reused).
//!
//! [`StagingMemory`] is memory reached only through raw pointers: while a work request over some
//! bytes is posted, the NIC may read or write them at any time, so no Rust reference (`&[u8]` /
//! `&mut [u8]`) over those bytes may be alive. Code outside the NIC touches a slot only through
//! [`StagingMemory::slot_mut`], whose caller promises that no work request over that slot is
//! outstanding and no other reference to it exists.
//!
//! It is either a heap allocation (a staging buffer: the local end fills or drains its slots) or
//! a read-only mapping of a stored file (a GET sent straight from the page cache: only the NIC
//! reads it, and it has no slot to hand out).

use hipobj_actors::sync::Mutex;
use std::alloc::{self, Layout};
use std::fs::File;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use super::port::{PortError, RdmaPort, StagingBuffer};

/// Alignment of staging memory (a page: what registrations pin anyway).
const STAGING_ALIGN: usize = 4096;

/// Who owns the bytes of a [`StagingMemory`], and how they are given back.
enum Backing {
    /// `alloc_zeroed` with this layout.
    Heap(Layout),
    /// `mmap` of a file, read-only and shared: `map_len` bytes from the page-aligned `base`.
    File { base: NonNull<u8>, map_len: usize },
}

/// Memory owned by raw pointer: zeroed and page-aligned, or a read-only file mapping.
pub struct StagingMemory {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: the memory is a heap allocation or a mapping owned by this value; access is through
// raw pointers whose users uphold the slot rules of the module doc.
unsafe impl Send for StagingMemory {}
// SAFETY: as above; `&StagingMemory` hands out only raw pointers (and `slot_mut` is unsafe).
unsafe impl Sync for StagingMemory {}

impl StagingMemory {
    /// `len` zeroed bytes (at least one).
    pub fn zeroed(len: usize) -> Result<StagingMemory, PortError> {
        let len = len.max(1);
        let layout = Layout::from_size_align(len, STAGING_ALIGN)
            .map_err(|_| PortError::new(format!("staging of {len} bytes: bad layout")))?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| PortError::new(format!("staging of {len} bytes: out of memory")))?;
        Ok(StagingMemory {
            ptr,
            len,
            backing: Backing::Heap(layout),
        })
    }

    /// The `len` bytes of `file` from `offset`, mapped read-only and shared (the page cache's
    /// own pages: nothing is copied). The caller keeps the file's bytes unchanged while the
    /// mapping lives (the fs store never rewrites a committed file).
    pub fn map_file(file: &File, offset: u64, len: usize) -> Result<StagingMemory, PortError> {
        let what = |e: &dyn std::fmt::Display| {
            PortError::new(format!("mapping {len} bytes of a file at {offset}: {e}"))
        };
        if len == 0 {
            return Err(what(&"nothing to map"));
        }
        let page = hipobj::verbs::page_size() as u64;
        let aligned = offset - offset % page;
        let delta = (offset - aligned) as usize;
        let map_len = delta.checked_add(len).ok_or_else(|| what(&"too long"))?;
        let at = libc::off_t::try_from(aligned).map_err(|_| what(&"offset out of range"))?;
        // SAFETY: a fresh mapping chosen by the kernel (no address given), of a file descriptor
        // that is open for the duration of the call; the result is checked before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                at,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(what(&std::io::Error::last_os_error()));
        }
        let base = NonNull::new(raw.cast::<u8>()).ok_or_else(|| what(&"null mapping"))?;
        // SAFETY: `delta < page <= map_len`: inside the mapping just made.
        let ptr = unsafe { base.add(delta) };
        Ok(StagingMemory {
            ptr,
            len,
            backing: Backing::File { base, map_len },
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this is a read-only file mapping (no slots: only the NIC reads it).
    pub fn is_file_mapping(&self) -> bool {
        matches!(self.backing, Backing::File { .. })
    }

    /// Whether `offset..offset + len` lies inside the memory.
    pub fn covers(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// A mutable slice over `offset..offset + len`, or `None` when outside the memory or the
    /// memory is a read-only file mapping.
    ///
    /// # Safety
    /// No work request over these bytes is outstanding, and no other reference to them is alive
    /// while the returned slice is.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot_mut(&self, offset: usize, len: usize) -> Option<&mut [u8]> {
        if self.is_file_mapping() || !self.covers(offset, len) {
            return None;
        }
        // SAFETY: in bounds (checked above) of writable heap memory; exclusivity is the caller's
        // promise.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) })
    }
}

impl Drop for StagingMemory {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated in `zeroed` with this very layout, freed once.
            Backing::Heap(layout) => unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) },
            Backing::File { base, map_len } => {
                // SAFETY: the mapping made in `map_file`, unmapped once; its owner (a buffer)
                // deregisters it first.
                if unsafe { libc::munmap(base.as_ptr().cast(), map_len) } != 0 {
                    tracing::warn!(error = %std::io::Error::last_os_error(), "munmap failed");
                }
            }
        }
    }
}

pub struct StagingPool<B: StagingBuffer> {
    free: Mutex<Vec<B>>,
    buf_len: usize,
}

impl<B: StagingBuffer> StagingPool<B> {
    /// Buffers of `buf_len` bytes, allocated (and registered) on first use.
    pub fn new(buf_len: usize) -> Self {
        StagingPool {
            free: Mutex::new(Vec::new()),
            buf_len,
        }
    }

    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// A free buffer, or a newly registered one.
    pub fn acquire<P: RdmaPort<Buffer = B>>(&self, port: &P) -> Result<Staged<'_, B>, PortError> {
        let reused = self.free.lock().pop();
        let buf = match reused {
            Some(b) => b,
            None => port.alloc_staging(self.buf_len)?,
        };
        Ok(Staged {
            pool: self,
            buf: ManuallyDrop::new(buf),
        })
    }

    /// A buffer of at least `len` bytes owned by the caller (a hipobj-rc-v2 PUT session holds
    /// one from PREPARE to its end): a pooled one when `len` fits, else one registered for it.
    /// Hand it back with [`StagingPool::give_back`] once no work request and no window covers it.
    pub fn take<P: RdmaPort<Buffer = B>>(&self, port: &P, len: usize) -> Result<B, PortError> {
        if len > self.buf_len {
            return port.alloc_staging(len);
        }
        let reused = self.free.lock().pop();
        match reused {
            Some(b) => Ok(b),
            None => port.alloc_staging(self.buf_len),
        }
    }

    /// Return a buffer from [`StagingPool::take`]: pooled if it has the pool's size, else freed.
    pub fn give_back(&self, buf: B) {
        if buf.memory().len() == self.buf_len {
            self.free.lock().push(buf);
        }
    }

    /// Register `n` buffers now, so the first transfers do not pay for the registration.
    pub fn prefill<P: RdmaPort<Buffer = B>>(&self, port: &P, n: usize) -> Result<(), PortError> {
        let mut fresh = Vec::with_capacity(n);
        for _ in 0..n {
            fresh.push(port.alloc_staging(self.buf_len)?);
        }
        self.free.lock().extend(fresh);
        Ok(())
    }

    /// Buffers waiting for reuse.
    pub fn idle(&self) -> usize {
        self.free.lock().len()
    }
}

/// A buffer on loan; it goes back to the pool when dropped.
pub struct Staged<'p, B: StagingBuffer> {
    pool: &'p StagingPool<B>,
    buf: ManuallyDrop<B>,
}

impl<B: StagingBuffer> Deref for Staged<'_, B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.buf
    }
}

impl<B: StagingBuffer> DerefMut for Staged<'_, B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.buf
    }
}

impl<B: StagingBuffer> Drop for Staged<'_, B> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A transfer panicked: work requests over this buffer may still be posted (the QP is
            // destroyed by the lease's own drop, maybe later). Never reuse nor free it: leak it.
            tracing::warn!("staging buffer leaked after a panic");
            return;
        }
        // SAFETY: `buf` is taken exactly once, here, and never used afterwards.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        self.pool.free.lock().push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::test_double::DoublePort;

    #[test]
    fn buffers_are_reused() {
        let port = DoublePort::new();
        let pool = StagingPool::new(4096);
        {
            let a = pool.acquire(&port).expect("a");
            let b = pool.acquire(&port).expect("b");
            assert_eq!(a.memory().len(), 4096);
            assert_eq!(b.memory().len(), 4096);
            assert_ne!(a.memory().as_ptr(), b.memory().as_ptr());
        }
        assert_eq!(pool.idle(), 2);
        let _c = pool.acquire(&port).expect("c");
        assert_eq!(pool.idle(), 1);
        pool.prefill(&port, 3).expect("prefill");
        assert_eq!(pool.idle(), 4);
    }

    #[test]
    fn a_file_mapping_holds_the_files_bytes_at_any_offset_and_hands_out_no_slot() {
        use std::io::Write;
        let data: Vec<u8> = (0..3 * STAGING_ALIGN + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut file = tempfile::tempfile().expect("file");
        file.write_all(&data).expect("write");
        for (offset, len) in [(0, data.len()), (1, 10), (4095, 4098), (8192, 100)] {
            let m = StagingMemory::map_file(&file, offset as u64, len).expect("map");
            assert!(m.is_file_mapping());
            assert_eq!(m.len(), len);
            // SAFETY: nothing is posted over this mapping; it is read only here.
            let seen = unsafe { std::slice::from_raw_parts(m.as_ptr(), len) };
            assert_eq!(seen, &data[offset..offset + len], "offset {offset}");
            assert!(m.covers(0, len) && !m.covers(1, len));
            // SAFETY: as above.
            let slot = unsafe { m.slot_mut(0, 1) };
            assert!(slot.is_none(), "a mapping is read-only");
        }
        assert!(StagingMemory::map_file(&file, 0, 0).is_err());
        assert!(!StagingMemory::zeroed(10).expect("heap").is_file_mapping());
    }

    #[test]
    fn memory_is_zeroed_aligned_and_slots_are_bounded() {
        let m = StagingMemory::zeroed(10_000).expect("memory");
        assert_eq!(m.as_ptr() as usize % STAGING_ALIGN, 0);
        // SAFETY: nothing is posted over this memory and no other reference exists.
        let slot = unsafe { m.slot_mut(9_000, 1_000) }.expect("in bounds");
        assert!(slot.iter().all(|&b| b == 0));
        slot.fill(7);
        // SAFETY: as above (the previous slice is no longer used).
        assert!(unsafe { m.slot_mut(9_001, 1_000) }.is_none());
        // SAFETY: as above.
        assert!(unsafe { m.slot_mut(usize::MAX, 2) }.is_none());
    }
}
