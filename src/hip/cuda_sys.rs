//! Raw CUDA driver API declarations, written by hand from `cuda.h` (no `cuda-sys`, which links at
//! build time), and the function-pointer table that owns `libcuda.so.1`.
//!
//! The driver exports every versioned entry point under its `_v2` name (what `cuda.h`'s
//! `#define cuMemAlloc cuMemAlloc_v2` resolves to); those are the names looked up here. Required
//! entry points exist in every driver since CUDA 11.0; `cuMemGetHandleForAddressRange` (11.7) and
//! `cuFlushGPUDirectRDMAWrites` (11.3) are optional.

use super::dl::{open_first, optional, required};
use super::error::HipLoadError;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// `CUresult` (a C enum: `int`-sized). Its common values equal HIP's (`hipError_t` was modelled on
/// it): 0 success, 1 invalid value, 2 out of memory, 100 no device, 101 invalid device, 600 not
/// ready, 801 not supported.
pub type CuResult = c_int;
/// `CUdevice`: an opaque device handle (an `int`).
pub type CuDevice = c_int;
/// `CUdeviceptr`: a device address (`unsigned long long`).
pub type CuDevicePtr = c_ulonglong;
/// `CUcontext`, `CUstream`, `CUevent`: opaque pointers.
pub type RawContext = *mut c_void;
pub type RawStream = *mut c_void;
pub type RawEvent = *mut c_void;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CuResult = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
/// `CUDA_ERROR_NO_DEVICE`: `cuInit` on a host without an NVIDIA GPU.
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
/// `CUDA_ERROR_INVALID_DEVICE`.
pub const CUDA_ERROR_INVALID_DEVICE: CuResult = 101;
/// `CUDA_ERROR_NOT_READY`: `cuEventQuery` on work that hasn't finished.
pub const CUDA_ERROR_NOT_READY: CuResult = 600;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;

/// `CU_STREAM_NON_BLOCKING`: our stream doesn't synchronise with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_EVENT_DISABLE_TIMING`: our events only mark completion.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CU_MEMHOSTALLOC_PORTABLE`: pinned for every context, not just the one current at allocation.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x1;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
pub const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 0x1;

/// `CUpointer_attribute` values we ask for.
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;

/// `CUmemorytype` values (0 is what an address CUDA doesn't know gets).
pub const CU_MEMORYTYPE_UNREGISTERED: c_uint = 0;
pub const CU_MEMORYTYPE_HOST: c_uint = 1;
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;

/// `CUdevice_attribute` values we read.
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: c_int = 116;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: c_int = 118;
pub const CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;

/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX` and `..._TO_OWNER`.
pub const CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX: c_int = 0;
pub const CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER: c_int = 100;

pub type FnUintIn = unsafe extern "C" fn(c_uint) -> CuResult;
pub type FnIntOut = unsafe extern "C" fn(*mut c_int) -> CuResult;
pub type FnDeviceGet = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
pub type FnDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult;
pub type FnPciBusId = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
pub type FnPrimaryCtxRetain = unsafe extern "C" fn(*mut RawContext, CuDevice) -> CuResult;
pub type FnDeviceIn = unsafe extern "C" fn(CuDevice) -> CuResult;
pub type FnCtxOut = unsafe extern "C" fn(*mut RawContext) -> CuResult;
pub type FnPtrIn = unsafe extern "C" fn(*mut c_void) -> CuResult;
pub type FnCtxGetDevice = unsafe extern "C" fn(*mut CuDevice) -> CuResult;
pub type FnVoid = unsafe extern "C" fn() -> CuResult;
pub type FnPointerGetAttributes =
    unsafe extern "C" fn(c_uint, *mut c_int, *mut *mut c_void, CuDevicePtr) -> CuResult;
pub type FnMemGetAddressRange =
    unsafe extern "C" fn(*mut CuDevicePtr, *mut usize, CuDevicePtr) -> CuResult;
pub type FnMemGetHandleForAddressRange =
    unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, c_int, c_ulonglong) -> CuResult;
pub type FnMemHostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult;
pub type FnMemAlloc = unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult;
pub type FnMemFree = unsafe extern "C" fn(CuDevicePtr) -> CuResult;
pub type FnMemcpyHtoDAsync =
    unsafe extern "C" fn(CuDevicePtr, *const c_void, usize, RawStream) -> CuResult;
pub type FnMemcpyDtoHAsync =
    unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, RawStream) -> CuResult;
pub type FnCreateWithFlags = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuResult;
pub type FnEventRecord = unsafe extern "C" fn(RawEvent, RawStream) -> CuResult;
pub type FnGetErrorName = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
pub type FnFlushRdmaWrites = unsafe extern "C" fn(c_int, c_int) -> CuResult;

/// The CUDA driver entry points hipObject uses, resolved from one open `libcuda.so.1`.
pub struct CudaLib {
    /// The soname that opened.
    pub soname: String,
    // Required.
    pub init: FnUintIn,
    pub driver_get_version: FnIntOut,
    pub device_get_count: FnIntOut,
    pub device_get: FnDeviceGet,
    pub device_get_attribute: FnDeviceGetAttribute,
    pub device_get_pci_bus_id: FnPciBusId,
    pub primary_ctx_retain: FnPrimaryCtxRetain,
    pub primary_ctx_release: FnDeviceIn,
    pub ctx_get_current: FnCtxOut,
    pub ctx_set_current: FnPtrIn,
    pub ctx_get_device: FnCtxGetDevice,
    pub ctx_push_current: FnPtrIn,
    pub ctx_pop_current: FnCtxOut,
    pub ctx_synchronize: FnVoid,
    pub pointer_get_attributes: FnPointerGetAttributes,
    pub mem_get_address_range: FnMemGetAddressRange,
    pub mem_host_alloc: FnMemHostAlloc,
    pub mem_free_host: FnPtrIn,
    pub mem_alloc: FnMemAlloc,
    pub mem_free: FnMemFree,
    pub memcpy_htod_async: FnMemcpyHtoDAsync,
    pub memcpy_dtoh_async: FnMemcpyDtoHAsync,
    pub stream_create: FnCreateWithFlags,
    pub stream_destroy: FnPtrIn,
    pub stream_synchronize: FnPtrIn,
    pub event_create: FnCreateWithFlags,
    pub event_record: FnEventRecord,
    pub event_query: FnPtrIn,
    pub event_synchronize: FnPtrIn,
    pub event_destroy: FnPtrIn,
    // Optional.
    pub get_error_name: Option<FnGetErrorName>,
    pub mem_get_handle_for_address_range: Option<FnMemGetHandleForAddressRange>,
    pub flush_gpu_direct_rdma_writes: Option<FnFlushRdmaWrites>,
    /// Declared last: dropped after every field above.
    _library: Library,
}

impl CudaLib {
    /// Open the first of `names` that loads and resolve the table. Callers serialise this (see
    /// `cuda::load`): opening runs the library's initialisers and `dlerror` isn't thread-safe.
    pub fn open(names: &[&str]) -> Result<CudaLib, HipLoadError> {
        let (library, name) = open_first(names, "CUDA driver")?;
        CudaLib::resolve(library, name)
    }

    fn resolve(library: Library, soname: &str) -> Result<CudaLib, HipLoadError> {
        let lib = &library;
        // SAFETY: every lookup below: each type alias is the C prototype from cuda.h for the
        // named (versioned) entry point, unchanged from CUDA 11 to 13.
        unsafe {
            Ok(CudaLib {
                soname: soname.to_owned(),
                init: required(lib, soname, "cuInit")?,
                driver_get_version: required(lib, soname, "cuDriverGetVersion")?,
                device_get_count: required(lib, soname, "cuDeviceGetCount")?,
                device_get: required(lib, soname, "cuDeviceGet")?,
                device_get_attribute: required(lib, soname, "cuDeviceGetAttribute")?,
                device_get_pci_bus_id: required(lib, soname, "cuDeviceGetPCIBusId")?,
                primary_ctx_retain: required(lib, soname, "cuDevicePrimaryCtxRetain")?,
                primary_ctx_release: required(lib, soname, "cuDevicePrimaryCtxRelease_v2")?,
                ctx_get_current: required(lib, soname, "cuCtxGetCurrent")?,
                ctx_set_current: required(lib, soname, "cuCtxSetCurrent")?,
                ctx_get_device: required(lib, soname, "cuCtxGetDevice")?,
                ctx_push_current: required(lib, soname, "cuCtxPushCurrent_v2")?,
                ctx_pop_current: required(lib, soname, "cuCtxPopCurrent_v2")?,
                ctx_synchronize: required(lib, soname, "cuCtxSynchronize")?,
                pointer_get_attributes: required(lib, soname, "cuPointerGetAttributes")?,
                mem_get_address_range: required(lib, soname, "cuMemGetAddressRange_v2")?,
                mem_host_alloc: required(lib, soname, "cuMemHostAlloc")?,
                mem_free_host: required(lib, soname, "cuMemFreeHost")?,
                mem_alloc: required(lib, soname, "cuMemAlloc_v2")?,
                mem_free: required(lib, soname, "cuMemFree_v2")?,
                memcpy_htod_async: required(lib, soname, "cuMemcpyHtoDAsync_v2")?,
                memcpy_dtoh_async: required(lib, soname, "cuMemcpyDtoHAsync_v2")?,
                stream_create: required(lib, soname, "cuStreamCreate")?,
                stream_destroy: required(lib, soname, "cuStreamDestroy_v2")?,
                stream_synchronize: required(lib, soname, "cuStreamSynchronize")?,
                event_create: required(lib, soname, "cuEventCreate")?,
                event_record: required(lib, soname, "cuEventRecord")?,
                event_query: required(lib, soname, "cuEventQuery")?,
                event_synchronize: required(lib, soname, "cuEventSynchronize")?,
                event_destroy: required(lib, soname, "cuEventDestroy_v2")?,
                get_error_name: optional(lib, "cuGetErrorName"),
                mem_get_handle_for_address_range: optional(lib, "cuMemGetHandleForAddressRange"),
                flush_gpu_direct_rdma_writes: optional(lib, "cuFlushGPUDirectRDMAWrites"),
                _library: library,
            })
        }
    }
}
