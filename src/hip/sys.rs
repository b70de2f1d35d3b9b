//! Raw HIP and HSA declarations, written by hand from the HIP headers (no `hip-sys`, which links
//! at build time), and the function-pointer tables that own their libraries.
//!
//! Required entry points fail the load when missing; optional ones are `Option`s checked at each
//! use. All of them exist in ROCm 5.2 except `hipMemGetHandleForAddressRange` (ROCm 7) and
//! `hsa_amd_portable_export_dmabuf` (a later ROCr than 5.2).

use super::dl::{open_first, optional, required};
use super::error::HipLoadError;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// `hipError_t` (a C enum: `int`-sized).
pub type HipStatus = c_int;
/// `hipStream_t`, `hipEvent_t`: opaque pointers.
pub type RawStream = *mut c_void;
pub type RawEvent = *mut c_void;

/// `hipStreamNonBlocking`: our stream doesn't synchronise with the legacy null stream, so staging
/// copies never wait for (or hold up) the application's work on stream 0.
pub const HIP_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `hipEventDisableTiming`: our events only mark completion.
pub const HIP_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `hipHostMallocDefault`.
pub const HIP_HOST_MALLOC_DEFAULT: c_uint = 0;
/// `hipMemRangeHandleTypeDmaBufFd`.
pub const HIP_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
/// `HSA_STATUS_SUCCESS`.
pub const HSA_STATUS_SUCCESS: c_uint = 0;

/// `hipPointerAttribute_t`: the same layout in ROCm 5, 6 and 7 (only the first field's name and
/// enum values changed in 6.0, see `memory_type`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PointerAttributes {
    pub memory_type: c_int,
    pub device: c_int,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
    pub is_managed: c_int,
    pub allocation_flags: c_uint,
}

/// What we hand to `hipPointerGetAttributes`: the struct plus slack, so a runtime whose struct
/// grew can never write past our buffer.
#[repr(C)]
pub struct PointerAttributesBuf {
    pub attrs: PointerAttributes,
    _slack: [u64; 8],
}

impl PointerAttributesBuf {
    pub fn zeroed() -> PointerAttributesBuf {
        PointerAttributesBuf {
            attrs: PointerAttributes {
                memory_type: -1,
                device: -1,
                device_pointer: std::ptr::null_mut(),
                host_pointer: std::ptr::null_mut(),
                is_managed: 0,
                allocation_flags: 0,
            },
            _slack: [0; 8],
        }
    }
}

pub type FnIntOut = unsafe extern "C" fn(*mut c_int) -> HipStatus;
pub type FnIntIn = unsafe extern "C" fn(c_int) -> HipStatus;
pub type FnVoid = unsafe extern "C" fn() -> HipStatus;
pub type FnPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> HipStatus;
pub type FnPointerGetAttributes =
    unsafe extern "C" fn(*mut PointerAttributes, *const c_void) -> HipStatus;
pub type FnMemGetAddressRange =
    unsafe extern "C" fn(*mut *mut c_void, *mut usize, *mut c_void) -> HipStatus;
pub type FnMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> HipStatus;
pub type FnHostMalloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> HipStatus;
pub type FnPtrIn = unsafe extern "C" fn(*mut c_void) -> HipStatus;
pub type FnMemcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> HipStatus;
pub type FnMemcpyAsync =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, RawStream) -> HipStatus;
pub type FnCreateWithFlags = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> HipStatus;
pub type FnEventRecord = unsafe extern "C" fn(RawEvent, RawStream) -> HipStatus;
pub type FnMemGetHandleForAddressRange =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, c_ulonglong) -> HipStatus;
pub type FnGetErrorName = unsafe extern "C" fn(HipStatus) -> *const c_char;
pub type FnHsaExportDmabuf =
    unsafe extern "C" fn(*const c_void, usize, *mut c_int, *mut u64) -> c_uint;

/// The HIP entry points hipObject uses, resolved from one open `libamdhip64`.
pub struct HipLib {
    /// The soname that opened.
    pub soname: String,
    // Required.
    pub get_device_count: FnIntOut,
    pub get_device: FnIntOut,
    pub set_device: FnIntIn,
    pub device_get_pci_bus_id: FnPciBusId,
    pub pointer_get_attributes: FnPointerGetAttributes,
    pub mem_get_address_range: FnMemGetAddressRange,
    pub malloc: FnMalloc,
    pub free: FnPtrIn,
    pub host_malloc: FnHostMalloc,
    pub host_free: FnPtrIn,
    pub memcpy: FnMemcpy,
    pub device_synchronize: FnVoid,
    // Optional.
    pub runtime_get_version: Option<FnIntOut>,
    pub get_error_name: Option<FnGetErrorName>,
    pub memcpy_async: Option<FnMemcpyAsync>,
    pub stream_create_with_flags: Option<FnCreateWithFlags>,
    pub stream_destroy: Option<FnPtrIn>,
    pub stream_synchronize: Option<FnPtrIn>,
    pub event_create_with_flags: Option<FnCreateWithFlags>,
    pub event_record: Option<FnEventRecord>,
    pub event_query: Option<FnPtrIn>,
    pub event_synchronize: Option<FnPtrIn>,
    pub event_destroy: Option<FnPtrIn>,
    pub mem_get_handle_for_address_range: Option<FnMemGetHandleForAddressRange>,
    /// Declared last: dropped after every field above (the pointers are plain copies, but the
    /// order states that they never outlive the library).
    _library: Library,
}

impl HipLib {
    /// Open the first of `names` that loads and resolve the table.
    ///
    /// Opening a library runs its initialisers, and `dlerror` isn't thread-safe: callers
    /// serialise this (see `amd::load`).
    pub fn open(names: &[&str]) -> Result<HipLib, HipLoadError> {
        let (library, name) = open_first(names, "HIP runtime")?;
        HipLib::resolve(library, name)
    }

    fn resolve(library: Library, soname: &str) -> Result<HipLib, HipLoadError> {
        let lib = &library;
        // SAFETY: every lookup below: each type alias is the C prototype from
        // hip_runtime_api.h for the named entry point, unchanged from ROCm 5.2 to 7.
        unsafe {
            Ok(HipLib {
                soname: soname.to_owned(),
                get_device_count: required(lib, soname, "hipGetDeviceCount")?,
                get_device: required(lib, soname, "hipGetDevice")?,
                set_device: required(lib, soname, "hipSetDevice")?,
                device_get_pci_bus_id: required(lib, soname, "hipDeviceGetPCIBusId")?,
                pointer_get_attributes: required(lib, soname, "hipPointerGetAttributes")?,
                mem_get_address_range: required(lib, soname, "hipMemGetAddressRange")?,
                malloc: required(lib, soname, "hipMalloc")?,
                free: required(lib, soname, "hipFree")?,
                host_malloc: required(lib, soname, "hipHostMalloc")?,
                host_free: required(lib, soname, "hipHostFree")?,
                memcpy: required(lib, soname, "hipMemcpy")?,
                device_synchronize: required(lib, soname, "hipDeviceSynchronize")?,
                runtime_get_version: optional(lib, "hipRuntimeGetVersion"),
                get_error_name: optional(lib, "hipGetErrorName"),
                memcpy_async: optional(lib, "hipMemcpyAsync"),
                stream_create_with_flags: optional(lib, "hipStreamCreateWithFlags"),
                stream_destroy: optional(lib, "hipStreamDestroy"),
                stream_synchronize: optional(lib, "hipStreamSynchronize"),
                event_create_with_flags: optional(lib, "hipEventCreateWithFlags"),
                event_record: optional(lib, "hipEventRecord"),
                event_query: optional(lib, "hipEventQuery"),
                event_synchronize: optional(lib, "hipEventSynchronize"),
                event_destroy: optional(lib, "hipEventDestroy"),
                mem_get_handle_for_address_range: optional(lib, "hipMemGetHandleForAddressRange"),
                _library: library,
            })
        }
    }

    /// The soname's major version (`libamdhip64.so.5` → 5), if it ends in one.
    pub fn soname_major(&self) -> Option<u32> {
        self.soname.rsplit('.').next().and_then(|v| v.parse().ok())
    }
}

/// The HSA dmabuf export, from the HSA runtime that HIP already loaded.
pub struct HsaLib {
    pub export_dmabuf: FnHsaExportDmabuf,
    _library: Library,
}

/// The HSA runtime's soname (a dependency of every libamdhip64).
pub const HSA_SONAME: &str = "libhsa-runtime64.so.1";

impl HsaLib {
    /// Find `hsa_amd_portable_export_dmabuf` in the HSA runtime that is already loaded, never
    /// loading (and initialising) a second copy: `RTLD_NOLOAD`.
    pub fn open_resident() -> Option<HsaLib> {
        let flags =
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL | libc::RTLD_NOLOAD;
        // SAFETY: with RTLD_NOLOAD nothing is loaded, so no initialiser runs; we only take a
        // reference on the copy libamdhip64 already loaded.
        let library = match unsafe { libloading::os::unix::Library::open(Some(HSA_SONAME), flags) }
        {
            Ok(library) => Library::from(library),
            Err(err) => {
                tracing::debug!(error = %err, "HSA runtime is not resident");
                return None;
            }
        };
        // SAFETY: the prototype is hsa_ext_amd.h's
        // `hsa_status_t hsa_amd_portable_export_dmabuf(const void*, size_t, int*, uint64_t*)`.
        let export_dmabuf =
            unsafe { optional::<FnHsaExportDmabuf>(&library, "hsa_amd_portable_export_dmabuf") }?;
        Some(HsaLib {
            export_dmabuf,
            _library: library,
        })
    }
}
