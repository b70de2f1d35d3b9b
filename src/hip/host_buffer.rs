//! `HostBuffer`: pinned host memory for staging, freed by the runtime that allocated it.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// Frees host memory that a `GpuRuntime` allocated (`hipHostFree` for the real runtime).
pub trait HostMemoryOwner: Send + Sync {
    /// Release `ptr`.
    ///
    /// # Safety
    /// `ptr` must have come from this owner's allocation and must not be used afterwards.
    unsafe fn free_host(&self, ptr: NonNull<u8>);
}

/// Pinned host memory (`hipHostMalloc`) of `len` bytes, freed when dropped.
///
/// It holds its allocator, so the library that allocated it outlives it. A staging buffer that a
/// copy which timed out may still use must never be freed: [`HostBuffer::leak`] gives it up
/// deliberately (the spec header: "If it never finishes, the staging buffer is never freed").
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    owner: Arc<dyn HostMemoryOwner>,
}

// SAFETY: the buffer is plain host memory that this value owns exclusively; HIP's allocation and
// free calls are thread-safe, so it may be moved to and shared with other threads. Access to the
// bytes goes through raw pointers whose users uphold the aliasing rules.
unsafe impl Send for HostBuffer {}
// SAFETY: `&HostBuffer` only exposes the address and length, never the bytes.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Take ownership of `len` bytes at `ptr`, to be released through `owner`.
    ///
    /// # Safety
    /// `ptr` must be a live allocation of at least `len` bytes from `owner`, owned by nobody else.
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        len: usize,
        owner: Arc<dyn HostMemoryOwner>,
    ) -> HostBuffer {
        HostBuffer { ptr, len, owner }
    }

    /// The first byte's address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The address as an integer (for tokens and registration).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Give the memory up without freeing it: for a staging buffer that a copy that never
    /// finished may still write or read. Returns its address.
    pub fn leak(self) -> usize {
        let addr = self.addr();
        std::mem::forget(self);
        addr
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: `from_raw`'s contract makes `ptr` an allocation of `owner` that only this value
        // owns, and after drop nothing can use it.
        unsafe { self.owner.free_host(self.ptr) }
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .finish()
    }
}
