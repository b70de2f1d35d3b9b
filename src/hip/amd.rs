//! `HipRuntime`: the real GPU runtime, over `libamdhip64` loaded at run time, and [`load`].

use super::copy::{CopyDirection, CopyInFlight, CopyProbe, CopyStatus};
use super::error::{
    HipError, HipLoadError, HIP_ERROR_INVALID_VALUE, HIP_ERROR_NOT_READY, HIP_ERROR_NOT_SUPPORTED,
    HIP_ERROR_OUT_OF_MEMORY, HIP_SUCCESS,
};
use super::host_buffer::{HostBuffer, HostMemoryOwner};
use super::memory_type::MemoryTypeTable;
use super::sys::{self, HipLib, HipStatus, HsaLib, PointerAttributesBuf, RawEvent, RawStream};
use super::{AddressRange, DmabufExport, GpuPlatform, GpuRuntime, PointerKind};
use hipobj_actors::sync::{Mutex, StartOnce};
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

/// The HIP runtime sonames, in the order they are tried: newest ROCm first. Runtime sonames only,
/// never the `libamdhip64.so` development symlink.
pub const HIP_LIBRARY_NAMES: [&str; 3] =
    ["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];

/// The runtime that loaded, kept once a load succeeds. A failure isn't kept, so a later
/// `hipObjInit` tries again (after the application installed ROCm, say).
static LOADED: StartOnce<Arc<HipRuntime>> = StartOnce::new();

/// Load the HIP runtime (`libamdhip64.so.7`, `.6`, `.5`), or return the one already loaded.
///
/// The load runs under a lock, so library initialisers never run on two threads at once, and
/// only a success is cached. Never panics.
pub fn load() -> Result<Arc<dyn GpuRuntime>, HipLoadError> {
    let runtime =
        LOADED.get_or_start(|| HipRuntime::load_from(&HIP_LIBRARY_NAMES).map(Arc::new))?;
    Ok(runtime.clone())
}

/// `hipError_t` → `Result`.
fn check(call: &'static str, status: HipStatus) -> Result<(), HipError> {
    if status == HIP_SUCCESS {
        Ok(())
    } else {
        Err(HipError::new(call, status))
    }
}

/// The real GPU runtime.
///
/// # Staging copies
/// Copies run with `hipMemcpyAsync` on a non-blocking stream of our own per device (created on
/// first use), followed by `hipEventRecord` on that stream; `CopyInFlight::poll` is
/// `hipEventQuery`. If any of those entry points is missing, or the stream or event can't be
/// created, the copy falls back to a blocking `hipMemcpy` that has finished when `start_copy`
/// returns (and so can't be timed out).
///
/// # Visibility after an RDMA write
/// The reference calls `hipDeviceSynchronize` after every transfer into a direct buffer, which
/// waits for every stream of the application on that device. The spec
/// header makes the application responsible for having no GPU work on the buffer during a GET, so
/// nothing of the application's needs waiting for: what is needed is that GPU work started after
/// `hipObjGet` returns doesn't read stale cache lines for the bytes the NIC wrote to VRAM. We get
/// that by recording an event on our own stream and waiting for it (`hipEventRecord` +
/// `hipEventSynchronize`): the marker packet this submits carries a system-scope acquire fence,
/// which invalidates the GPU caches, and it waits for nothing but our own (idle) stream. Only if
/// those entry points are missing, or that path fails, do we fall back to `hipDeviceSynchronize`.
/// (No GPU exists on the development machine, so this choice is reasoned from the HIP/HSA memory
/// model, not measured.)
///
/// # Current device
/// HIP's current device is per thread, and the caller's thread is the application's. Calls that
/// must run on a given device (stream and event creation, copies, the visibility marker) switch to
/// it with `hipSetDevice` and switch back before returning.
pub struct HipRuntime {
    lib: Arc<HipLib>,
    hsa: Option<HsaLib>,
    version: Option<i32>,
    memory_types: MemoryTypeTable,
    /// Our own stream per device, created on first use.
    streams: Mutex<HashMap<i32, Arc<OwnedStream>>>,
}

impl HipRuntime {
    /// Load from the first of `names` that opens, without caching (tests pass bogus names here;
    /// the library uses [`load`]).
    pub fn load_from(names: &[&str]) -> Result<HipRuntime, HipLoadError> {
        let lib = Arc::new(HipLib::open(names)?);
        let version = lib.runtime_get_version.and_then(|get_version| {
            let mut version: c_int = 0;
            // SAFETY: `hipRuntimeGetVersion(int*)` writes one int to our local.
            let status = unsafe { get_version(&mut version) };
            (status == HIP_SUCCESS).then_some(version)
        });
        let memory_types = match (version, lib.soname_major()) {
            (Some(version), _) => MemoryTypeTable::for_runtime_version(version),
            (None, Some(major)) => MemoryTypeTable::for_soname_major(major),
            (None, None) => MemoryTypeTable::Rocm6,
        };
        let hsa = if lib.mem_get_handle_for_address_range.is_none() {
            HsaLib::open_resident()
        } else {
            None
        };
        tracing::info!(
            library = %lib.soname,
            hip_version = ?version,
            ?memory_types,
            hip_dmabuf_export = lib.mem_get_handle_for_address_range.is_some(),
            hsa_dmabuf_export = hsa.is_some(),
            "HIP runtime loaded"
        );
        Ok(HipRuntime {
            lib,
            hsa,
            version,
            memory_types,
            streams: Mutex::new(HashMap::new()),
        })
    }

    /// The soname that loaded, e.g. `libamdhip64.so.5`.
    pub fn library_name(&self) -> &str {
        &self.lib.soname
    }

    /// Which `hipMemoryType` numbering this runtime's answers are read with.
    pub fn memory_type_table(&self) -> MemoryTypeTable {
        self.memory_types
    }

    /// Whether any dmabuf export entry point exists (`hipMemGetHandleForAddressRange` or the
    /// resident HSA runtime's `hsa_amd_portable_export_dmabuf`).
    pub fn has_dmabuf_export(&self) -> bool {
        self.lib.mem_get_handle_for_address_range.is_some() || self.hsa.is_some()
    }

    /// HIP's name for an error code, for logs.
    pub fn error_name(&self, code: i32) -> String {
        let Some(get_error_name) = self.lib.get_error_name else {
            return format!("hipError {code}");
        };
        // SAFETY: `hipGetErrorName` returns a pointer to a static NUL-terminated string (or NULL).
        let name = unsafe { get_error_name(code) };
        if name.is_null() {
            return format!("hipError {code}");
        }
        // SAFETY: non-NULL, NUL-terminated and static, as above.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// Run `f` with `device` as the calling thread's current device, then restore the previous
    /// one.
    fn on_device<T>(
        &self,
        device: i32,
        f: impl FnOnce() -> Result<T, HipError>,
    ) -> Result<T, HipError> {
        let previous = self.current_device()?;
        if previous != device {
            self.set_device(device)?;
        }
        let result = f();
        if previous != device {
            if let Err(err) = self.set_device(previous) {
                tracing::warn!(%err, previous, "could not restore the thread's current HIP device");
            }
        }
        result
    }

    /// Our stream on the current device, which must be `device`.
    fn stream_for(&self, device: i32) -> Result<Arc<OwnedStream>, HipError> {
        if let Some(stream) = self.streams.lock().get(&device) {
            return Ok(stream.clone());
        }
        let (Some(create), Some(destroy)) =
            (self.lib.stream_create_with_flags, self.lib.stream_destroy)
        else {
            return Err(HipError::new(
                "hipStreamCreateWithFlags",
                HIP_ERROR_NOT_SUPPORTED,
            ));
        };
        let mut raw: RawStream = std::ptr::null_mut();
        // SAFETY: `hipStreamCreateWithFlags(hipStream_t*, unsigned)` writes the new stream to our
        // local; the flag value is hipStreamNonBlocking.
        check("hipStreamCreateWithFlags", unsafe {
            create(&mut raw, sys::HIP_STREAM_NON_BLOCKING)
        })?;
        let created = Arc::new(OwnedStream {
            raw,
            destroy,
            _lib: self.lib.clone(),
        });
        // Another thread may have created one meanwhile: keep the first, drop (destroy) ours.
        Ok(self.streams.lock().entry(device).or_insert(created).clone())
    }

    fn create_event(&self) -> Result<OwnedEvent, HipError> {
        let (Some(create), Some(destroy)) =
            (self.lib.event_create_with_flags, self.lib.event_destroy)
        else {
            return Err(HipError::new(
                "hipEventCreateWithFlags",
                HIP_ERROR_NOT_SUPPORTED,
            ));
        };
        let mut raw: RawEvent = std::ptr::null_mut();
        // SAFETY: `hipEventCreateWithFlags(hipEvent_t*, unsigned)` writes the new event to our
        // local; the flag value is hipEventDisableTiming.
        check("hipEventCreateWithFlags", unsafe {
            create(&mut raw, sys::HIP_EVENT_DISABLE_TIMING)
        })?;
        Ok(OwnedEvent {
            raw,
            destroy,
            _lib: self.lib.clone(),
        })
    }

    fn async_fns(&self) -> Option<AsyncFns> {
        Some(AsyncFns {
            memcpy_async: self.lib.memcpy_async?,
            event_record: self.lib.event_record?,
            event_query: self.lib.event_query?,
            _have_event_lifecycle: (self.lib.event_create_with_flags?, self.lib.event_destroy?),
            _have_stream_lifecycle: (self.lib.stream_create_with_flags?, self.lib.stream_destroy?),
        })
    }

    /// Wait for everything on our stream: `hipStreamSynchronize`, else the whole device.
    fn wait_for_stream(&self, stream: &OwnedStream) -> Result<(), HipError> {
        match self.lib.stream_synchronize {
            // SAFETY: `stream.raw` is a live stream of ours.
            Some(sync) => check("hipStreamSynchronize", unsafe { sync(stream.raw) }),
            // SAFETY: no arguments.
            None => check("hipDeviceSynchronize", unsafe {
                (self.lib.device_synchronize)()
            }),
        }
    }

    /// The asynchronous copy; `Ok(None)` means "use the blocking fallback".
    ///
    /// # Safety
    /// As `GpuRuntime::start_copy`.
    unsafe fn start_async_copy(
        &self,
        fns: AsyncFns,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<Option<CopyInFlight>, HipError> {
        self.on_device(device, || {
            let stream = match self.stream_for(device) {
                Ok(stream) => stream,
                Err(err) => {
                    tracing::warn!(%err, device, "no stream of our own; staging copy will block");
                    return Ok(None);
                }
            };
            let event = match self.create_event() {
                Ok(event) => event,
                Err(err) => {
                    tracing::warn!(%err, device, "hipEventCreate failed; staging copy will block");
                    return Ok(None);
                }
            };
            // SAFETY: the caller guarantees both ranges are valid for `len` bytes until the copy
            // finishes; `stream.raw` is a live stream of the current device.
            let status = unsafe {
                (fns.memcpy_async)(
                    dst as *mut c_void,
                    src as *const c_void,
                    len,
                    direction.hip_kind(),
                    stream.raw,
                )
            };
            check("hipMemcpyAsync", status)?;
            // SAFETY: a live event and a live stream of the current device.
            let status = unsafe { (fns.event_record)(event.raw, stream.raw) };
            if status != HIP_SUCCESS {
                // The copy is queued but can't be tracked: wait for it rather than return with
                // an untracked copy still writing.
                tracing::warn!(
                    code = status,
                    "hipEventRecord failed after a queued copy; waiting for it"
                );
                self.wait_for_stream(&stream)?;
                return Ok(Some(CopyInFlight::finished(Ok(()))));
            }
            Ok(Some(CopyInFlight::running(Box::new(HipCopyProbe {
                event,
                query: fns.event_query,
            }))))
        })
    }
}

/// The entry points an asynchronous copy needs, all present.
#[derive(Clone, Copy)]
struct AsyncFns {
    memcpy_async: sys::FnMemcpyAsync,
    event_record: sys::FnEventRecord,
    event_query: sys::FnPtrIn,
    _have_event_lifecycle: (sys::FnCreateWithFlags, sys::FnPtrIn),
    _have_stream_lifecycle: (sys::FnCreateWithFlags, sys::FnPtrIn),
}

/// A stream of ours, destroyed on drop. It holds the library, so `hipStreamDestroy` is still
/// loaded when it runs, however the runtime and its copies are dropped.
struct OwnedStream {
    raw: RawStream,
    destroy: sys::FnPtrIn,
    _lib: Arc<HipLib>,
}

// SAFETY: a hipStream_t is a handle into the HIP runtime, whose API is thread-safe: any thread may
// enqueue on, synchronise or destroy a stream. We never touch the pointee ourselves.
unsafe impl Send for OwnedStream {}
// SAFETY: as above; shared use only passes the handle to thread-safe HIP calls.
unsafe impl Sync for OwnedStream {}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: we created this stream and nothing else destroys it. HIP releases a stream that
        // still has work once the work completes.
        let status = unsafe { (self.destroy)(self.raw) };
        if status != HIP_SUCCESS {
            tracing::warn!(code = status, "hipStreamDestroy failed");
        }
    }
}

/// An event of ours, destroyed on drop. It holds the library: a `CopyInFlight` can outlive the
/// `HipRuntime` that started it.
struct OwnedEvent {
    raw: RawEvent,
    destroy: sys::FnPtrIn,
    _lib: Arc<HipLib>,
}

// SAFETY: a hipEvent_t is a handle into the thread-safe HIP runtime; moving it to another thread
// and querying or destroying it there is allowed.
unsafe impl Send for OwnedEvent {}

impl Drop for OwnedEvent {
    fn drop(&mut self) {
        // SAFETY: we created this event and nothing else destroys it. Destroying an event whose
        // work hasn't completed is allowed: HIP releases it once the work completes, and the copy
        // itself isn't cancelled.
        let status = unsafe { (self.destroy)(self.raw) };
        if status != HIP_SUCCESS {
            tracing::warn!(code = status, "hipEventDestroy failed");
        }
    }
}

/// Polls a copy's completion event.
struct HipCopyProbe {
    event: OwnedEvent,
    query: sys::FnPtrIn,
}

impl CopyProbe for HipCopyProbe {
    fn probe(&mut self) -> CopyStatus {
        // SAFETY: a live, recorded event of ours.
        match unsafe { (self.query)(self.event.raw) } {
            HIP_SUCCESS => CopyStatus::Done,
            HIP_ERROR_NOT_READY => CopyStatus::Pending,
            code => CopyStatus::Failed(code),
        }
    }
}

impl HostMemoryOwner for HipLib {
    unsafe fn free_host(&self, ptr: NonNull<u8>) {
        // SAFETY: the caller guarantees `ptr` came from `hipHostMalloc` of this library and is
        // not used again.
        let status = unsafe { (self.host_free)(ptr.as_ptr().cast()) };
        if status != HIP_SUCCESS {
            tracing::warn!(code = status, "hipHostFree failed");
        }
    }
}

impl GpuRuntime for HipRuntime {
    fn platform(&self) -> GpuPlatform {
        GpuPlatform::Hip
    }

    fn runtime_version(&self) -> Option<i32> {
        self.version
    }

    fn device_count(&self) -> Result<i32, HipError> {
        let mut count: c_int = 0;
        // SAFETY: `hipGetDeviceCount(int*)` writes one int to our local.
        check("hipGetDeviceCount", unsafe {
            (self.lib.get_device_count)(&mut count)
        })?;
        Ok(count)
    }

    fn current_device(&self) -> Result<i32, HipError> {
        let mut device: c_int = -1;
        // SAFETY: `hipGetDevice(int*)` writes one int to our local.
        check("hipGetDevice", unsafe {
            (self.lib.get_device)(&mut device)
        })?;
        Ok(device)
    }

    fn set_device(&self, device: i32) -> Result<(), HipError> {
        // SAFETY: `hipSetDevice(int)` validates its argument.
        check("hipSetDevice", unsafe { (self.lib.set_device)(device) })
    }

    fn pci_bus_id(&self, device: i32) -> Result<String, HipError> {
        let mut buf = [0u8; 64];
        let len = (buf.len() - 1) as c_int;
        // SAFETY: `hipDeviceGetPCIBusId(char*, int len, int device)` writes at most `len` bytes,
        // NUL included, into our buffer, which has one more byte that stays 0.
        check("hipDeviceGetPCIBusId", unsafe {
            (self.lib.device_get_pci_bus_id)(buf.as_mut_ptr().cast(), len, device)
        })?;
        let id = CStr::from_bytes_until_nul(&buf)
            .map_err(|_| HipError::new("hipDeviceGetPCIBusId", HIP_ERROR_INVALID_VALUE))?;
        Ok(id.to_string_lossy().into_owned())
    }

    fn classify_pointer(&self, ptr: usize) -> PointerKind {
        if ptr == 0 {
            return PointerKind::Unknown;
        }
        let mut buf = PointerAttributesBuf::zeroed();
        // SAFETY: `hipPointerGetAttributes(hipPointerAttribute_t*, const void*)` writes one
        // attribute struct (our buffer has slack beyond it) and only looks `ptr` up.
        let status =
            unsafe { (self.lib.pointer_get_attributes)(&mut buf.attrs, ptr as *const c_void) };
        if status != HIP_SUCCESS {
            tracing::trace!(
                ptr = format_args!("{ptr:#x}"),
                code = status,
                "hipPointerGetAttributes failed"
            );
            return PointerKind::Unknown;
        }
        self.memory_types
            .classify(buf.attrs.memory_type, buf.attrs.device)
    }

    fn address_range(&self, ptr: usize) -> Result<AddressRange, HipError> {
        let mut base: *mut c_void = std::ptr::null_mut();
        let mut len: usize = 0;
        // SAFETY: `hipMemGetAddressRange(void** base, size_t* size, void* ptr)` writes our two
        // locals and only looks `ptr` up.
        check("hipMemGetAddressRange", unsafe {
            (self.lib.mem_get_address_range)(&mut base, &mut len, ptr as *mut c_void)
        })?;
        Ok(AddressRange {
            base: base as usize,
            len,
        })
    }

    /// `hipMemGetHandleForAddressRange` (ROCm 7) when present, else the resident HSA runtime's
    /// `hsa_amd_portable_export_dmabuf`.
    ///
    /// The HIP call follows CUDA's `cuMemGetHandleForAddressRange`: the dmabuf starts at `ptr`,
    /// so the offset is 0. HSA returns the offset of `ptr` inside the dmabuf it exports.
    fn export_dmabuf(&self, ptr: usize, len: usize) -> Result<DmabufExport, HipError> {
        let mut first_error = None;
        if let Some(get_handle) = self.lib.mem_get_handle_for_address_range {
            let mut fd: c_int = -1;
            // SAFETY: with hipMemRangeHandleTypeDmaBufFd the handle out-parameter is an `int*`;
            // the range is only looked up.
            let status = unsafe {
                get_handle(
                    (&mut fd as *mut c_int).cast(),
                    ptr as *mut c_void,
                    len,
                    sys::HIP_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            };
            match (status, fd) {
                (HIP_SUCCESS, fd) if fd >= 0 => {
                    return Ok(DmabufExport {
                        // SAFETY: a fresh descriptor the call created for us; nobody else owns it.
                        fd: unsafe { OwnedFd::from_raw_fd(fd) },
                        offset: 0,
                    });
                }
                (HIP_SUCCESS, _) => {
                    first_error = Some(HipError::new(
                        "hipMemGetHandleForAddressRange",
                        HIP_ERROR_NOT_SUPPORTED,
                    ))
                }
                (code, _) => {
                    first_error = Some(HipError::new("hipMemGetHandleForAddressRange", code))
                }
            }
        }
        if let Some(hsa) = &self.hsa {
            let mut fd: c_int = -1;
            let mut offset: u64 = 0;
            // SAFETY: `hsa_amd_portable_export_dmabuf(const void*, size_t, int*, uint64_t*)`
            // writes our two locals and only looks the range up.
            let status =
                unsafe { (hsa.export_dmabuf)(ptr as *const c_void, len, &mut fd, &mut offset) };
            if status == sys::HSA_STATUS_SUCCESS && fd >= 0 {
                return Ok(DmabufExport {
                    // SAFETY: a fresh descriptor the call created for us; nobody else owns it.
                    fd: unsafe { OwnedFd::from_raw_fd(fd) },
                    offset,
                });
            }
            let code = i32::try_from(status).unwrap_or(i32::MAX);
            first_error.get_or_insert(HipError::new("hsa_amd_portable_export_dmabuf", code));
        }
        Err(first_error.unwrap_or(HipError::new("dmabuf export", HIP_ERROR_NOT_SUPPORTED)))
    }

    fn alloc_host(&self, len: usize) -> Result<HostBuffer, HipError> {
        if len == 0 {
            return Err(HipError::new("hipHostMalloc", HIP_ERROR_INVALID_VALUE));
        }
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `hipHostMalloc(void**, size_t, unsigned)` writes the allocation to our local.
        check("hipHostMalloc", unsafe {
            (self.lib.host_malloc)(&mut raw, len, sys::HIP_HOST_MALLOC_DEFAULT)
        })?;
        let ptr = NonNull::new(raw.cast::<u8>())
            .ok_or(HipError::new("hipHostMalloc", HIP_ERROR_OUT_OF_MEMORY))?;
        let owner: Arc<dyn HostMemoryOwner> = self.lib.clone();
        // SAFETY: a fresh `len`-byte allocation of this library, owned by nobody else.
        Ok(unsafe { HostBuffer::from_raw(ptr, len, owner) })
    }

    /// Asynchronous on our own stream when the runtime allows, else a blocking `hipMemcpy`.
    /// An `Err` means no copy is running.
    unsafe fn start_copy(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<CopyInFlight, HipError> {
        if let Some(fns) = self.async_fns() {
            if let Some(copy) =
                // SAFETY: the caller's guarantees are passed on unchanged.
                unsafe { self.start_async_copy(fns, device, dst, src, len, direction) }?
            {
                return Ok(copy);
            }
        }
        // SAFETY: the caller's guarantees are passed on unchanged.
        unsafe { self.copy_blocking(device, dst, src, len, direction) }?;
        Ok(CopyInFlight::finished(Ok(())))
    }

    /// `hipMalloc` with `device` current.
    fn alloc_device(&self, device: i32, len: usize) -> Result<usize, HipError> {
        if len == 0 {
            return Err(HipError::new("hipMalloc", HIP_ERROR_INVALID_VALUE));
        }
        let mut raw: *mut c_void = std::ptr::null_mut();
        self.on_device(device, || {
            // SAFETY: `hipMalloc(void**, size_t)` writes the allocation to our local.
            check("hipMalloc", unsafe { (self.lib.malloc)(&mut raw, len) })
        })?;
        if raw.is_null() {
            return Err(HipError::new("hipMalloc", HIP_ERROR_OUT_OF_MEMORY));
        }
        Ok(raw as usize)
    }

    /// `hipFree` with `device` current.
    unsafe fn free_device(&self, device: i32, ptr: usize) -> Result<(), HipError> {
        self.on_device(device, || {
            // SAFETY: the caller guarantees a `hipMalloc` allocation of ours that nothing uses.
            check("hipFree", unsafe { (self.lib.free)(ptr as *mut c_void) })
        })
    }

    /// `hipMemcpy` with `device` current, which returns once the copy has finished.
    unsafe fn copy_blocking(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<(), HipError> {
        self.on_device(device, || {
            // SAFETY: the caller guarantees both ranges are valid for `len` bytes of the kinds
            // `direction` names.
            check("hipMemcpy", unsafe {
                (self.lib.memcpy)(
                    dst as *mut c_void,
                    src as *const c_void,
                    len,
                    direction.hip_kind(),
                )
            })
        })
    }

    /// A marker on our own stream (`hipEventRecord` + `hipEventSynchronize`), falling back to
    /// `hipDeviceSynchronize`; see the module documentation for why.
    fn make_visible_after_rdma_write(&self, device: i32) -> Result<(), HipError> {
        if let (Some(record), Some(synchronize)) =
            (self.lib.event_record, self.lib.event_synchronize)
        {
            let marker = self.on_device(device, || {
                let stream = self.stream_for(device)?;
                let event = self.create_event()?;
                // SAFETY: a live event and a live stream of the current device.
                check("hipEventRecord", unsafe { record(event.raw, stream.raw) })?;
                // SAFETY: a live, recorded event.
                check("hipEventSynchronize", unsafe { synchronize(event.raw) })
            });
            match marker {
                Ok(()) => return Ok(()),
                Err(err) => {
                    tracing::warn!(%err, device, "stream marker failed; falling back to hipDeviceSynchronize")
                }
            }
        }
        self.on_device(device, || {
            // SAFETY: no arguments.
            check("hipDeviceSynchronize", unsafe {
                (self.lib.device_synchronize)()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bogus_names_fail_with_a_typed_error() {
        let names = [
            "libhipobj-does-not-exist.so.1",
            "/nonexistent/libamdhip64.so.9",
        ];
        match HipRuntime::load_from(&names) {
            Err(HipLoadError::LibraryNotFound { tried, reason }) => {
                assert_eq!(tried, names);
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("loaded a library that doesn't exist"),
        }
    }

    #[test]
    fn no_names_fail_cleanly() {
        assert!(matches!(
            HipRuntime::load_from(&[]),
            Err(HipLoadError::LibraryNotFound { .. })
        ));
    }

    #[test]
    fn a_library_without_hip_symbols_is_missing_a_required_symbol() {
        // libc loads everywhere and has none of HIP's entry points.
        match HipRuntime::load_from(&["libc.so.6"]) {
            Err(HipLoadError::MissingSymbol { library, symbol }) => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(symbol, "hipGetDeviceCount");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("libc taken for a HIP runtime"),
        }
    }
}
