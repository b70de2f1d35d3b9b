//! The GPU runtime: everything hipObject needs from a GPU, behind one object-safe trait.
//!
//! Two real implementations, both loaded at run time with `libloading` and never linked
//! (`readelf -d libhipobj.so` shows neither `libamdhip64` nor `libcuda`): [`HipRuntime`] over
//! HIP (`libamdhip64.so.7`, `.6` or `.5`, [`load`]) and [`CudaRuntime`] over the CUDA driver API
//! (`libcuda.so.1`, [`load_cuda`]) for NVIDIA GPUs. [`load_gpu_runtime`] picks one for
//! `hipObjInit`: HIP when it has a device, else CUDA when it has one. With the crate feature
//! `sim-gpu` (test builds only) [`SimGpu`] is a simulated device behind the same trait.
//!
//! Layout: `sys` (raw HIP/HSA types and the function-pointer table), `amd` (the HIP runtime),
//! `cuda_sys` and `cuda` (the same two for CUDA), `platform` (which runtime `hipObjInit` uses),
//! `memory_type` (the ROCm 5/6 `hipMemoryType` tables), `select` (`hipObjInit`'s `gpuDevice`
//! rules), `host_buffer`, `device_buffer` and `copy` (the RAII types over what the trait hands
//! out), `error`, and `sim` (the test double).

mod amd;
mod copy;
mod cuda;
mod cuda_sys;
mod device_buffer;
mod dl;
mod error;
mod host_buffer;
mod memory_type;
mod platform;
mod select;
#[cfg(feature = "sim-gpu")]
mod sim;
mod sys;

use std::os::fd::OwnedFd;

pub use amd::{load, HipRuntime, HIP_LIBRARY_NAMES};
pub use copy::{CopyDirection, CopyInFlight, CopyProbe, CopyStatus};
pub use cuda::{load_cuda, CudaRuntime, VisibilityMethod, CUDA_LIBRARY_NAMES};
pub use device_buffer::DeviceBuffer;
pub use error::{
    HipError, HipLoadError, HIP_ERROR_INVALID_DEVICE, HIP_ERROR_INVALID_VALUE, HIP_ERROR_NOT_READY,
    HIP_ERROR_NOT_SUPPORTED, HIP_ERROR_NO_DEVICE, HIP_ERROR_OUT_OF_MEMORY, HIP_SUCCESS,
};
pub use host_buffer::{HostBuffer, HostMemoryOwner};
pub use memory_type::MemoryTypeTable;
pub use platform::{choose_runtime, load_gpu_runtime, GpuPlatform, NoGpuRuntime};
pub use select::{select_gpu, GpuSelectError, GpuSelection};
#[cfg(feature = "sim-gpu")]
pub use sim::{SimCalls, SimGpu};

/// Expands to the items it is given when this build of hipobj has the simulated GPU (crate feature
/// `sim-gpu`), to nothing otherwise: how a dependent crate's tests use [`SimGpu`] whenever
/// `--features hipobj/sim-gpu` is on (as in `make test`) without a feature of their own.
#[cfg(feature = "sim-gpu")]
#[macro_export]
macro_rules! with_sim_gpu {
    ($($item:item)*) => { $($item)* };
}

/// Without the feature `sim-gpu`: nothing (see the other definition).
#[cfg(not(feature = "sim-gpu"))]
#[macro_export]
macro_rules! with_sim_gpu {
    ($($item:item)*) => {};
}

/// What memory a pointer points into, as far as hipObject cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerKind {
    /// Host memory: `malloc`, `hipHostMalloc`, or memory HIP doesn't track (ROCm 6
    /// "unregistered").
    Host,
    /// Device memory of HIP device `device` (`hipMalloc`).
    Device { device: i32 },
    /// The attributes call failed (ROCm 5 on an untracked pointer) or the memory is managed,
    /// unified or an array. Treated like host memory: no dmabuf export, no range check.
    Unknown,
}

/// The HIP allocation that holds a device pointer (`hipMemGetAddressRange`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRange {
    pub base: usize,
    pub len: usize,
}

impl AddressRange {
    /// Whether `[ptr, ptr + len)` lies inside this allocation (overflow-safe).
    pub fn contains(&self, ptr: usize, len: usize) -> bool {
        ptr >= self.base && ptr - self.base < self.len && len <= self.len - (ptr - self.base)
    }
}

/// `hipObjBufRegister`'s range rule: `[ptr, ptr + len)` must lie inside the GPU allocation that
/// holds device pointer `ptr`. `hipObjInvalidValue` (with the runtime's error, if its lookup
/// failed) otherwise; the allocation on success.
pub fn check_inside_allocation(
    gpu: &dyn GpuRuntime,
    ptr: usize,
    len: usize,
) -> Result<AddressRange, crate::error::Error> {
    let range = gpu
        .address_range(ptr)
        .map_err(|e| e.to_error(crate::error::OpError::InvalidValue))?;
    if !range.contains(ptr, len) {
        return Err(crate::error::Error::invalid(
            "the buffer runs past the end of its GPU allocation",
        ));
    }
    Ok(range)
}

/// Copy `dst.len()` bytes of device memory at `ptr` on `device` into host memory `dst`, and
/// return when they are there: the one device-to-host read of bytes the library did not allocate
/// (a registration's, for its CRC or for an upload's ring).
///
/// # Safety
/// `ptr .. ptr + dst.len()` must be device memory of `device` that stays allocated for the call.
pub unsafe fn read_device_memory(
    gpu: &dyn GpuRuntime,
    device: i32,
    ptr: usize,
    dst: &mut [u8],
) -> Result<(), HipError> {
    // SAFETY: the caller's contract covers the device side; `dst` is a live host slice of that
    // length, exclusively borrowed, which cannot overlap device memory.
    unsafe {
        gpu.copy_blocking(
            device,
            dst.as_mut_ptr() as usize,
            ptr,
            dst.len(),
            CopyDirection::DeviceToHost,
        )
    }
}

/// Copy host bytes `src` into device memory at `ptr` on `device`, and return when they are there:
/// the one host-to-device write into memory the library did not allocate (a registration's, for
/// a batch operation's bytes that came over plain HTTP).
///
/// # Safety
/// `ptr .. ptr + src.len()` must be device memory of `device` that stays allocated for the call
/// and that nothing else writes meanwhile.
pub unsafe fn write_device_memory(
    gpu: &dyn GpuRuntime,
    device: i32,
    ptr: usize,
    src: &[u8],
) -> Result<(), HipError> {
    // SAFETY: the caller's contract covers the device side; `src` is a live host slice of that
    // length, only read, which cannot overlap device memory.
    unsafe {
        gpu.copy_blocking(
            device,
            ptr,
            src.as_ptr() as usize,
            src.len(),
            CopyDirection::HostToDevice,
        )
    }
}

/// A device range exported as a dmabuf: `ibv_reg_dmabuf_mr(pd, offset, len, iova = ptr, fd, ..)`.
#[derive(Debug)]
pub struct DmabufExport {
    /// The dmabuf file descriptor; closing it (drop) ends the export. Keep it open as long as the
    /// memory region that uses it.
    pub fd: OwnedFd,
    /// Where the exported range starts inside the dmabuf.
    pub offset: u64,
}

/// Everything hipObject needs from a GPU runtime.
///
/// Object-safe and `Send + Sync`: the library holds one `Arc<dyn GpuRuntime>` and calls it from
/// any thread. Every failure carries the `hipError_t` that caused it.
pub trait GpuRuntime: Send + Sync {
    /// Which GPU runtime this is (for `hipobj info` and logs).
    fn platform(&self) -> GpuPlatform;

    /// The runtime's version, if it reports one: `HIP_VERSION` (`hipRuntimeGetVersion`) for HIP,
    /// `cuDriverGetVersion` (e.g. 13000) for CUDA.
    fn runtime_version(&self) -> Option<i32>;

    /// Number of visible GPUs (`hipGetDeviceCount`). On a host without a GPU, HIP returns
    /// `hipErrorNoDevice` (100): this returns that error, not `Ok(0)`; callers decide.
    fn device_count(&self) -> Result<i32, HipError>;

    /// The calling thread's current device (`hipGetDevice`).
    fn current_device(&self) -> Result<i32, HipError>;

    /// Make `device` the calling thread's current device (`hipSetDevice`).
    fn set_device(&self, device: i32) -> Result<(), HipError>;

    /// The PCI bus id of `device`, e.g. `0000:43:00.0` (`hipDeviceGetPCIBusId`).
    fn pci_bus_id(&self, device: i32) -> Result<String, HipError>;

    /// What `ptr` points into (`hipPointerGetAttributes`, read with the table for this runtime's
    /// version, see [`MemoryTypeTable`]). Never fails: a failed call is `Unknown`.
    fn classify_pointer(&self, ptr: usize) -> PointerKind;

    /// The allocation holding device pointer `ptr` (`hipMemGetAddressRange`).
    fn address_range(&self, ptr: usize) -> Result<AddressRange, HipError>;

    /// Export device memory `[ptr, ptr + len)` as a dmabuf.
    fn export_dmabuf(&self, ptr: usize, len: usize) -> Result<DmabufExport, HipError>;

    /// Allocate `len` bytes of pinned host memory for staging (`hipHostMalloc`).
    fn alloc_host(&self, len: usize) -> Result<HostBuffer, HipError>;

    /// Start copying `len` bytes from `src` to `dst` on `device` (the device whose memory one
    /// side is). Returns once the copy is queued; [`CopyInFlight::poll`] says when it finished.
    ///
    /// # Safety
    /// `src` and `dst` must be valid for `len` bytes of the kinds `direction` names, must not
    /// overlap, and must stay valid until the copy has finished, which may be after the returned
    /// value is dropped.
    unsafe fn start_copy(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<CopyInFlight, HipError>;

    /// Allocate `len` (> 0) bytes of device memory on `device` (`hipMalloc`, `cuMemAlloc`) and
    /// return its address. Out of memory is `hipErrorOutOfMemory` (2, the same in CUDA). Use
    /// [`DeviceBuffer::new`], which frees the memory when dropped.
    fn alloc_device(&self, device: i32, len: usize) -> Result<usize, HipError>;

    /// Free device memory from [`GpuRuntime::alloc_device`] (`hipFree`, `cuMemFree`).
    ///
    /// # Safety
    /// `ptr` must be an allocation of this runtime on `device` that nothing uses any more.
    unsafe fn free_device(&self, device: i32, ptr: usize) -> Result<(), HipError>;

    /// Copy `len` bytes from `src` to `dst` on `device` and return when the copy has finished
    /// (`hipMemcpy`, `cuMemcpyHtoD`/`cuMemcpyDtoH`). [`DeviceBuffer::write`] and
    /// [`DeviceBuffer::read`] are its bounds-checked forms.
    ///
    /// # Safety
    /// `src` and `dst` must be valid for `len` bytes of the kinds `direction` names (device
    /// memory of `device` on the device side) and must not overlap.
    unsafe fn copy_blocking(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<(), HipError>;

    /// Make data that the NIC wrote by RDMA into directly registered (dmabuf) memory of `device`
    /// visible to GPU work that the application starts next. Called after a GET's completion.
    /// The real runtime uses the narrowest sync there is, a marker on hipObject's own stream,
    /// never waiting for the application's streams; `hipDeviceSynchronize` is its last resort
    /// (see [`HipRuntime`]).
    fn make_visible_after_rdma_write(&self, device: i32) -> Result<(), HipError>;
}

#[cfg(test)]
pub(crate) use scripted::ScriptedGpu;

#[cfg(test)]
mod scripted {
    use super::*;

    /// A GPU runtime for unit tests (the runtime choice, the GPU selection): `platform` and the
    /// device queries answer from the script; every other call is `hipErrorNotSupported`.
    pub(crate) struct ScriptedGpu {
        pub(crate) platform: GpuPlatform,
        pub(crate) current: Result<i32, i32>,
        pub(crate) count: Result<i32, i32>,
        pub(crate) bus_id: Result<&'static str, i32>,
    }

    fn hip(call: &'static str, result: Result<i32, i32>) -> Result<i32, HipError> {
        result.map_err(|code| HipError::new(call, code))
    }

    impl GpuRuntime for ScriptedGpu {
        fn platform(&self) -> GpuPlatform {
            self.platform
        }
        fn runtime_version(&self) -> Option<i32> {
            None
        }
        fn device_count(&self) -> Result<i32, HipError> {
            hip("hipGetDeviceCount", self.count)
        }
        fn current_device(&self) -> Result<i32, HipError> {
            hip("hipGetDevice", self.current)
        }
        fn set_device(&self, _: i32) -> Result<(), HipError> {
            Err(HipError::new("hipSetDevice", HIP_ERROR_NOT_SUPPORTED))
        }
        fn pci_bus_id(&self, _: i32) -> Result<String, HipError> {
            self.bus_id
                .map(str::to_owned)
                .map_err(|code| HipError::new("hipDeviceGetPCIBusId", code))
        }
        fn classify_pointer(&self, _: usize) -> PointerKind {
            PointerKind::Unknown
        }
        fn address_range(&self, _: usize) -> Result<AddressRange, HipError> {
            Err(HipError::new(
                "hipMemGetAddressRange",
                HIP_ERROR_NOT_SUPPORTED,
            ))
        }
        fn export_dmabuf(&self, _: usize, _: usize) -> Result<DmabufExport, HipError> {
            Err(HipError::new("export", HIP_ERROR_NOT_SUPPORTED))
        }
        fn alloc_host(&self, _: usize) -> Result<HostBuffer, HipError> {
            Err(HipError::new("hipHostMalloc", HIP_ERROR_NOT_SUPPORTED))
        }
        fn alloc_device(&self, _: i32, _: usize) -> Result<usize, HipError> {
            Err(HipError::new("hipMalloc", HIP_ERROR_NOT_SUPPORTED))
        }
        unsafe fn free_device(&self, _: i32, _: usize) -> Result<(), HipError> {
            Err(HipError::new("hipFree", HIP_ERROR_NOT_SUPPORTED))
        }
        unsafe fn copy_blocking(
            &self,
            _: i32,
            _: usize,
            _: usize,
            _: usize,
            _: CopyDirection,
        ) -> Result<(), HipError> {
            Err(HipError::new("hipMemcpy", HIP_ERROR_NOT_SUPPORTED))
        }
        unsafe fn start_copy(
            &self,
            _: i32,
            _: usize,
            _: usize,
            _: usize,
            _: CopyDirection,
        ) -> Result<CopyInFlight, HipError> {
            Err(HipError::new("hipMemcpyAsync", HIP_ERROR_NOT_SUPPORTED))
        }
        fn make_visible_after_rdma_write(&self, _: i32) -> Result<(), HipError> {
            Err(HipError::new("sync", HIP_ERROR_NOT_SUPPORTED))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_range_contains_is_overflow_safe() {
        let r = AddressRange {
            base: 0x1000,
            len: 0x100,
        };
        assert!(r.contains(0x1000, 0x100));
        assert!(r.contains(0x10ff, 1));
        assert!(r.contains(0x1080, 0x80));
        assert!(!r.contains(0x1080, 0x81));
        assert!(!r.contains(0x0fff, 1));
        assert!(!r.contains(0x1100, 0));
        assert!(!r.contains(0x1001, usize::MAX));
    }

    #[test]
    fn gpu_runtime_is_object_safe_and_shareable() {
        fn assert_send_sync<T: Send + Sync + ?Sized>() {}
        assert_send_sync::<dyn GpuRuntime>();
        assert_send_sync::<HostBuffer>();
        assert_send_sync::<DeviceBuffer>();
        fn assert_send<T: Send>() {}
        assert_send::<CopyInFlight>();
    }
}
