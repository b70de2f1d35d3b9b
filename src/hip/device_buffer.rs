//! `DeviceBuffer`: device memory from a `GpuRuntime` (`hipMalloc`, `cuMemAlloc`), freed by that
//! runtime when dropped, with bounds-checked blocking copies to and from host memory.
//!
//! The library itself never allocates device memory (the application owns what it registers);
//! this is for tools and tests that need a real device buffer, such as `hipobj cp --gpu`.

use super::copy::CopyDirection;
use super::error::{HipError, HIP_ERROR_INVALID_VALUE};
use super::GpuRuntime;
use std::fmt;
use std::sync::Arc;

/// `len` bytes of device memory on `device`, freed (`hipFree`, `cuMemFree`) when dropped.
///
/// It holds the runtime that allocated it, so the runtime (and the library behind it) outlives
/// the allocation.
pub struct DeviceBuffer {
    ptr: usize,
    len: usize,
    device: i32,
    runtime: Arc<dyn GpuRuntime>,
}

impl DeviceBuffer {
    /// Allocate `len` (> 0) bytes on `device` of `runtime` ([`GpuRuntime::alloc_device`]).
    pub fn new(
        runtime: Arc<dyn GpuRuntime>,
        device: i32,
        len: usize,
    ) -> Result<DeviceBuffer, HipError> {
        let ptr = runtime.alloc_device(device, len)?;
        Ok(DeviceBuffer {
            ptr,
            len,
            device,
            runtime,
        })
    }

    /// The device address of the first byte.
    pub fn addr(&self) -> usize {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the memory is on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Copy `len` bytes between `[offset, offset + len)` of this buffer and host memory at
    /// `host`, the way `direction` says, and return when it has finished. A range past the
    /// buffer's end is refused (`hipErrorInvalidValue`) before the runtime is asked.
    ///
    /// # Safety
    /// `host` must be valid for `len` bytes: readable for `HostToDevice`, writable and not
    /// otherwise borrowed for `DeviceToHost`.
    unsafe fn copy(
        &self,
        offset: usize,
        host: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<(), HipError> {
        let inside = offset <= self.len && len <= self.len - offset;
        if !inside {
            return Err(HipError::new("DeviceBuffer copy", HIP_ERROR_INVALID_VALUE));
        }
        if len == 0 {
            return Ok(());
        }
        let device = self.ptr + offset;
        let (dst, src) = match direction {
            CopyDirection::HostToDevice => (device, host),
            CopyDirection::DeviceToHost => (host, device),
        };
        // SAFETY: the device side is `len` bytes inside this live allocation of `device`, the
        // host side is valid by this function's contract, and device and host memory don't
        // overlap.
        unsafe {
            self.runtime
                .copy_blocking(self.device, dst, src, len, direction)
        }
    }

    /// Copy `data` into the buffer at `offset` (blocking: the bytes are on the device when this
    /// returns). A range past the buffer's end is refused and copies nothing.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), HipError> {
        // SAFETY: `data` is a live host slice of that length.
        unsafe {
            self.copy(
                offset,
                data.as_ptr() as usize,
                data.len(),
                CopyDirection::HostToDevice,
            )
        }
    }

    /// Copy `out.len()` bytes of the buffer at `offset` into `out` (blocking). A range past the
    /// buffer's end is refused and copies nothing.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), HipError> {
        // SAFETY: `out` is a live host slice of that length, exclusively borrowed.
        unsafe {
            self.copy(
                offset,
                out.as_mut_ptr() as usize,
                out.len(),
                CopyDirection::DeviceToHost,
            )
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from this runtime's `alloc_device` on `device`, only this value owns
        // it, and nothing uses it after drop.
        if let Err(err) = unsafe { self.runtime.free_device(self.device, self.ptr) } {
            tracing::warn!(%err, device = self.device, "freeing device memory failed");
        }
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("addr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("device", &self.device)
            .field("platform", &self.runtime.platform())
            .finish()
    }
}

// The copies against a runtime are tested with the simulated GPU (tests/hip_sim.rs) and on the
// real CUDA GPU (tests/gpu, the CLI's `gpu` module).
