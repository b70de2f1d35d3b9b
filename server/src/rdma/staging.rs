//! Staging memory the NIC reads and writes, and a pool of registered staging buffers (one per
//! running transfer, registered once and reused).
//!
//! [`StagingMemory`] is memory reached by the NIC through raw pointers: while a work request over
//! some bytes is posted, the NIC may read or write them at any time. Rust code reaches its bytes
//! only through values that own them:
//! - the whole memory through `&mut StagingMemory` ([`StagingMemory::bytes_mut`]): its owner,
//!   once nothing is posted over it and no window covers it (a hipobj-rc-v2 PUT's received bytes);
//! - one slot through a [`Slot`] (a transfer cuts the memory into slots with
//!   [`StagingMemory::slots`]): a token owned by value, `Send` but not `Clone`, handed out by the
//!   [`SlotPool`] and free again when dropped. Its holder (the poller, or the file thread it moved
//!   the slot to) gets `&mut [u8]` through `&mut Slot`; a slot is posted to the NIC only by the
//!   poller while it holds the slot's token, and it keeps the token until the completion.
//!
//! It is either a heap allocation (a staging buffer: the local end fills or drains its slots) or
//! a read-only mapping of a stored file (a GET sent straight from the page cache: only the NIC
//! reads it, and it has no slot to hand out).
//!
//! [`StagingPool`] hands out buffers the same way: a [`Staged`] owns its buffer by value and
//! gives it back to the pool when dropped.

use hipobj_actors::slots::{SlotLedger, SlotTicket};
use hipobj_actors::sync::{Arc, Mutex};
use std::alloc::{self, Layout};
use std::cell::Cell;
use std::fs::File;
use std::marker::PhantomData;
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

/// Memory owned by raw pointer: zeroed and page-aligned, or a read-only file mapping. `Send`
/// (its owner may move), not `Sync`: `&StagingMemory` gives raw pointers and slots only.
pub struct StagingMemory {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// A [`SlotPool`] over this memory is alive (at most one at a time).
    cut: Cell<bool>,
}

// SAFETY: the memory is a heap allocation or a mapping owned by this value, freed once by its
// drop on whichever thread that runs; nothing in it is tied to the thread that made it.
unsafe impl Send for StagingMemory {}

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
            cut: Cell::new(false),
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
            cut: Cell::new(false),
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

    /// The whole memory, or `None` for a read-only file mapping. `&mut self`: its owner, who
    /// also owns every work request and window over it, has ended them all.
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if self.is_file_mapping() {
            return None;
        }
        // SAFETY: writable heap memory of `len` bytes owned by `self`, borrowed mutably for the
        // slice's life (no slot pool can exist: it borrows `self`).
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// Cut the first `count * slot_len` bytes into `count` slots of `slot_len` bytes. `None` for
    /// a file mapping, a cut that does not fit, or while another pool over this memory lives.
    pub fn slots(&self, slot_len: usize, count: usize) -> Option<SlotPool<'_>> {
        let fits = slot_len
            .checked_mul(count)
            .is_some_and(|n| self.covers(0, n));
        if self.is_file_mapping() || !fits || self.cut.replace(true) {
            return None;
        }
        Some(SlotPool {
            memory: self,
            slot_len,
            ledger: Arc::new(SlotLedger::new(count)),
        })
    }
}

/// The slots of one cut of a [`StagingMemory`]; each is held by one [`Slot`] token at a time.
pub struct SlotPool<'m> {
    memory: &'m StagingMemory,
    slot_len: usize,
    ledger: Arc<SlotLedger>,
}

impl SlotPool<'_> {
    /// A free slot, now the caller's; `None` while every slot is held.
    pub fn take(&self) -> Option<Slot<'_>> {
        let ticket = SlotLedger::take(&self.ledger)?;
        let offset = ticket.index() * self.slot_len;
        // SAFETY: `offset + slot_len <= len` (checked when cut): inside the memory, so in bounds
        // of its allocation and not null.
        let ptr = unsafe { NonNull::new_unchecked(self.memory.as_ptr().add(offset)) };
        Some(Slot {
            ticket,
            ptr,
            offset,
            len: self.slot_len,
            _bytes: PhantomData,
        })
    }

    /// Slots free now.
    pub fn free(&self) -> usize {
        self.ledger.free()
    }

    pub fn slot_len(&self) -> usize {
        self.slot_len
    }
}

impl Drop for SlotPool<'_> {
    fn drop(&mut self) {
        // Every slot token borrows this pool, so none is alive any more.
        self.memory.cut.set(false);
    }
}

/// Sole hold of one slot's bytes: `Send`, not `Clone`; the slot is free again when dropped.
/// It borrows its pool (`'p`), so the pool, and the memory under it, outlive it.
pub struct Slot<'p> {
    ticket: SlotTicket,
    ptr: NonNull<u8>,
    offset: usize,
    len: usize,
    _bytes: PhantomData<&'p mut [u8]>,
}

// SAFETY: the ticket makes this the only holder of `len` bytes at `ptr` (the ledger hands each
// slot number to one ticket at a time; slots do not overlap), which live as long as the pool
// this borrows; so the bytes may be used from any one thread, like the `&mut [u8]` they are.
unsafe impl Send for Slot<'_> {}

impl Slot<'_> {
    /// Byte offset of the slot in its memory (where a work request over it starts).
    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot's number in its pool.
    pub fn index(&self) -> usize {
        self.ticket.index()
    }

    /// The slot's bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes at `ptr` inside live heap memory (see `SlotPool::take`), held by
        // this token alone (see the `Send` impl) and borrowed mutably through it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for Slot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("index", &self.index())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
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

/// Registered staging buffers waiting for reuse, all of one size.
pub struct StagingPool<B: StagingBuffer> {
    free: Arc<Mutex<Vec<B>>>,
    buf_len: usize,
}

impl<B: StagingBuffer> StagingPool<B> {
    /// Buffers of `buf_len` bytes, allocated (and registered) on first use.
    pub fn new(buf_len: usize) -> Self {
        StagingPool {
            free: Arc::new(Mutex::new(Vec::new())),
            buf_len,
        }
    }

    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// A buffer of the pool's size: a free one, or a newly registered one.
    pub fn acquire<P: RdmaPort<Buffer = B>>(&self, port: &P) -> Result<Staged<B>, PortError> {
        self.take(port, self.buf_len)
    }

    /// A buffer of at least `len` bytes (a hipobj-rc-v2 PUT session holds one from PREPARE to
    /// its end): a pooled one when `len` fits, else one registered for it (freed, not pooled,
    /// when dropped). Drop it once no work request and no window covers it.
    pub fn take<P: RdmaPort<Buffer = B>>(
        &self,
        port: &P,
        len: usize,
    ) -> Result<Staged<B>, PortError> {
        let buf = if len > self.buf_len {
            port.alloc_staging(len)?
        } else {
            let reused = self.free.lock().pop();
            match reused {
                Some(b) => b,
                None => port.alloc_staging(self.buf_len)?,
            }
        };
        Ok(Staged {
            free: Arc::clone(&self.free),
            buf_len: self.buf_len,
            buf: ManuallyDrop::new(buf),
        })
    }

    /// Buffers waiting for reuse.
    pub fn idle(&self) -> usize {
        self.free.lock().len()
    }
}

/// A buffer on loan, owned by value (`Send`, not `Clone`); it goes back to its pool when
/// dropped (a buffer of another size is freed).
pub struct Staged<B: StagingBuffer> {
    free: Arc<Mutex<Vec<B>>>,
    buf_len: usize,
    buf: ManuallyDrop<B>,
}

impl<B: StagingBuffer> Deref for Staged<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.buf
    }
}

impl<B: StagingBuffer> DerefMut for Staged<B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.buf
    }
}

impl<B: StagingBuffer> Drop for Staged<B> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A transfer panicked: work requests over this buffer may still be posted (the QP is
            // destroyed by the lease's own drop, maybe later). Never reuse nor free it: leak it.
            tracing::warn!("staging buffer leaked after a panic");
            return;
        }
        // SAFETY: `buf` is taken exactly once, here, and never used afterwards.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        if buf.memory().len() == self.buf_len {
            self.free.lock().push(buf);
        }
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
            assert!(m.slots(1, 1).is_none(), "a mapping is read-only: no slots");
        }
        assert!(StagingMemory::map_file(&file, 0, 0).is_err());
        assert!(!StagingMemory::zeroed(10).expect("heap").is_file_mapping());
    }

    #[test]
    fn memory_is_zeroed_aligned_and_slots_are_bounded() {
        let mut m = StagingMemory::zeroed(10_000).expect("memory");
        assert_eq!(m.as_ptr() as usize % STAGING_ALIGN, 0);
        let all = m.bytes_mut().expect("heap memory");
        assert!(all.iter().all(|&b| b == 0));
        all[9_000..].fill(7);
        assert!(m.slots(1_000, 11).is_none(), "11 slots of 1000 do not fit");
        assert!(m.slots(usize::MAX, 2).is_none());
        let pool = m.slots(1_000, 10).expect("fits");
        let slots: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(slots.len(), 10);
        let mut offsets: Vec<_> = slots.iter().map(|s| s.offset()).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..10).map(|i| i * 1_000).collect::<Vec<_>>());
        let mut last = slots
            .into_iter()
            .find(|s| s.offset() == 9_000)
            .expect("last");
        assert!(last.bytes_mut().iter().all(|&b| b == 7));
    }

    /// A slot is held by one token at a time; a token dropped (on any thread) frees its slot
    /// for reuse; the memory is cut by one pool at a time.
    #[test]
    fn slot_tokens_are_exclusive_move_between_threads_and_return_when_dropped() {
        let m = StagingMemory::zeroed(64).expect("memory");
        let pool = m.slots(16, 2).expect("cut");
        assert!(m.slots(16, 2).is_none(), "one cut at a time");
        let mut a = pool.take().expect("a");
        let b = pool.take().expect("b");
        assert!(pool.take().is_none(), "both slots held");
        assert_ne!(a.offset(), b.offset());
        a.bytes_mut().fill(1);
        let b_offset = b.offset();
        // The file thread fills its slot and drops the token there.
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut b = b;
                b.bytes_mut().fill(2);
            });
        });
        assert_eq!(pool.free(), 1);
        let mut again = pool.take().expect("reused");
        assert_eq!(again.offset(), b_offset);
        assert!(again.bytes_mut().iter().all(|&x| x == 2));
        assert!(a.bytes_mut().iter().all(|&x| x == 1));
        drop((a, again));
        drop(pool);
        let mut m = m;
        let all = m.bytes_mut().expect("heap");
        assert_eq!(all[..32].iter().filter(|&&x| x != 0).count(), 32);
        assert!(m.slots(32, 2).is_some(), "cut again once the pool is gone");
    }

    #[test]
    fn staged_buffers_go_back_to_the_pool_when_dropped() {
        let port = DoublePort::new();
        let pool = StagingPool::new(4096);
        let big = pool.take(&port, 10_000).expect("big");
        assert!(big.memory().len() >= 10_000);
        let moved = std::thread::scope(|s| s.spawn(move || big.memory().len()).join());
        assert!(moved.is_ok_and(|n| n >= 10_000));
        assert_eq!(
            pool.idle(),
            0,
            "a buffer of another size is freed, not pooled"
        );
        let small = pool.take(&port, 100).expect("small");
        assert_eq!(small.memory().len(), 4096);
        drop(small);
        assert_eq!(pool.idle(), 1);
    }
}
