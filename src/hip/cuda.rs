//! `CudaRuntime`: the GPU runtime over the CUDA driver API (`libcuda.so.1`, loaded at run time,
//! never linked), for NVIDIA GPUs. On NVIDIA, HIP's own platform is a thin layer over CUDA
//! (`hipMalloc` is `cudaMalloc`), so memory an application allocated with HIP-on-NVIDIA or with
//! CUDA is what this runtime classifies, exports and copies.
//!
//! # Contexts
//! Every call runs in the primary context of the device it concerns (the context the CUDA runtime
//! API, and so HIP-on-NVIDIA and most applications, allocate in). It is pushed onto the calling
//! thread's context stack for the call and popped afterwards, so the application's current context
//! is left as it was. The runtime retains each primary context it uses until it is dropped, and
//! every stream, event and pinned buffer it hands out holds the context it was made in.
//!
//! # Error codes
//! Failures carry the `CUresult` in [`HipError::code`] and the driver call in [`HipError::call`].
//! The codes the library tests for have the same values in HIP and CUDA (0, 1, 2, 100, 101, 600,
//! 801), so `select_gpu` and the stager read them alike.
//!
//! # Staging copies
//! `cuMemcpyDtoHAsync`/`cuMemcpyHtoDAsync` on a non-blocking stream of our own per device, then
//! `cuEventRecord`; `CopyInFlight::poll` is `cuEventQuery`. The staging memory is
//! `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)`, pinned, so the copies really are asynchronous.
//!
//! # dmabuf export
//! `cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)` over the host pages that
//! hold `[ptr, ptr + len)` (the call requires page alignment): the returned offset is where `ptr`
//! lies in that dmabuf, as NCCL does it. It needs the NVIDIA open kernel modules; the device
//! attribute `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` says whether the driver offers it.
//!
//! # Visibility after an RDMA write
//! `cuFlushGPUDirectRDMAWrites(CURRENT_CTX, TO_OWNER)`, the driver's call for exactly this: GPU
//! work started afterwards sees every write the NIC made before it. Where the driver lacks it or
//! refuses it, a marker on our own stream (`cuEventRecord` + `cuEventSynchronize`), and
//! `cuCtxSynchronize` as the last resort. [`CudaRuntime::visibility_method`] says which one ran.

use super::copy::{CopyDirection, CopyInFlight, CopyProbe, CopyStatus};
use super::cuda_sys::{self as sys, CuDevice, CuDevicePtr, CuResult, CudaLib, RawContext};
use super::error::{HipError, HipLoadError};
use super::host_buffer::{HostBuffer, HostMemoryOwner};
use super::{AddressRange, DmabufExport, GpuPlatform, GpuRuntime, PointerKind};
use hipobj_actors::sync::{Mutex, StartOnce};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The CUDA driver's soname (the unversioned `libcuda.so` is a development symlink).
pub const CUDA_LIBRARY_NAMES: [&str; 1] = ["libcuda.so.1"];

/// The driver that loaded, kept once a load succeeds (a failure is tried again next time).
static LOADED: StartOnce<Arc<CudaRuntime>> = StartOnce::new();

/// Load the CUDA driver (`libcuda.so.1`) and run `cuInit`, or return the runtime already loaded.
/// Only a success is cached; a host without an NVIDIA GPU still loads when the driver library is
/// installed, and then reports `cuInit`'s error from every device query. Never panics.
pub fn load_cuda() -> Result<Arc<CudaRuntime>, HipLoadError> {
    let runtime =
        LOADED.get_or_start(|| CudaRuntime::load_from(&CUDA_LIBRARY_NAMES).map(Arc::new))?;
    Ok(runtime.clone())
}

/// `CUresult` → `Result`.
fn check(call: &'static str, status: CuResult) -> Result<(), HipError> {
    if status == sys::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(HipError::new(call, status))
    }
}

/// How [`GpuRuntime::make_visible_after_rdma_write`] last made RDMA writes visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisibilityMethod {
    /// Not called yet.
    None,
    /// `cuFlushGPUDirectRDMAWrites(CURRENT_CTX, TO_OWNER)`.
    FlushRdmaWrites,
    /// `cuEventRecord` + `cuEventSynchronize` on our own stream.
    StreamMarker,
    /// `cuCtxSynchronize`.
    ContextSynchronize,
}

impl VisibilityMethod {
    fn from_u8(raw: u8) -> VisibilityMethod {
        match raw {
            1 => VisibilityMethod::FlushRdmaWrites,
            2 => VisibilityMethod::StreamMarker,
            3 => VisibilityMethod::ContextSynchronize,
            _ => VisibilityMethod::None,
        }
    }
}

/// A retained primary context, released on drop.
struct PrimaryContext {
    lib: Arc<CudaLib>,
    device: CuDevice,
    raw: RawContext,
}

// SAFETY: a CUcontext is a handle into the thread-safe CUDA driver; any thread may push, pop or
// release it. We never touch the pointee.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; shared use only passes the handle to thread-safe driver calls.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    /// Make this context the calling thread's current one until the guard drops.
    fn enter(&self) -> Result<ContextGuard<'_>, HipError> {
        // SAFETY: `raw` is a live context that this value keeps retained.
        check("cuCtxPushCurrent", unsafe {
            (self.lib.ctx_push_current)(self.raw)
        })?;
        Ok(ContextGuard { lib: &self.lib })
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: `device` had its primary context retained once by this value.
        let status = unsafe { (self.lib.primary_ctx_release)(self.device) };
        if status != sys::CUDA_SUCCESS {
            tracing::warn!(code = status, "cuDevicePrimaryCtxRelease failed");
        }
    }
}

/// Pops the context that [`PrimaryContext::enter`] pushed.
struct ContextGuard<'a> {
    lib: &'a CudaLib,
}

impl Drop for ContextGuard<'_> {
    fn drop(&mut self) {
        let mut popped: RawContext = std::ptr::null_mut();
        // SAFETY: pops the context this guard pushed on this thread; writes our local.
        let status = unsafe { (self.lib.ctx_pop_current)(&mut popped) };
        if status != sys::CUDA_SUCCESS {
            tracing::warn!(code = status, "cuCtxPopCurrent failed");
        }
    }
}

/// The real GPU runtime on NVIDIA (see the module documentation).
pub struct CudaRuntime {
    // Field order is drop order: streams go before the contexts they live in (they also hold
    // them), the contexts before the library.
    streams: Mutex<HashMap<i32, Arc<OwnedStream>>>,
    contexts: Mutex<HashMap<i32, Arc<PrimaryContext>>>,
    visibility: AtomicU8,
    init_status: CuResult,
    driver_version: Option<i32>,
    lib: Arc<CudaLib>,
}

impl CudaRuntime {
    /// Load from the first of `names` that opens and run `cuInit(0)`, without caching (tests pass
    /// bogus names here; the library uses [`load_cuda`]).
    pub fn load_from(names: &[&str]) -> Result<CudaRuntime, HipLoadError> {
        let lib = Arc::new(CudaLib::open(names)?);
        // SAFETY: `cuInit(unsigned flags)` with flags 0, as documented; safe to call repeatedly.
        let init_status = unsafe { (lib.init)(0) };
        let mut version: c_int = 0;
        // SAFETY: `cuDriverGetVersion(int*)` writes one int to our local; works before cuInit.
        let driver_version = (unsafe { (lib.driver_get_version)(&mut version) }
            == sys::CUDA_SUCCESS)
            .then_some(version);
        tracing::info!(
            library = %lib.soname,
            ?driver_version,
            cu_init = init_status,
            dmabuf_export = lib.mem_get_handle_for_address_range.is_some(),
            "CUDA driver loaded"
        );
        Ok(CudaRuntime {
            streams: Mutex::new(HashMap::new()),
            contexts: Mutex::new(HashMap::new()),
            visibility: AtomicU8::new(0),
            init_status,
            driver_version,
            lib,
        })
    }

    /// The soname that loaded.
    pub fn library_name(&self) -> &str {
        &self.lib.soname
    }

    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub fn driver_version(&self) -> Option<i32> {
        self.driver_version
    }

    /// Whether the driver has the dmabuf export entry point at all.
    pub fn has_dmabuf_export(&self) -> bool {
        self.lib.mem_get_handle_for_address_range.is_some()
    }

    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` of `device`.
    pub fn dmabuf_supported(&self, device: i32) -> Result<bool, HipError> {
        Ok(self.device_attribute(device, sys::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)? != 0)
    }

    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED` of `device`.
    pub fn gpu_direct_rdma_supported(&self, device: i32) -> Result<bool, HipError> {
        Ok(self.device_attribute(device, sys::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED)? != 0)
    }

    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING` of `device` (0 none, 100 owner,
    /// 200 all devices).
    pub fn gpu_direct_rdma_writes_ordering(&self, device: i32) -> Result<i32, HipError> {
        self.device_attribute(
            device,
            sys::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
        )
    }

    /// How the last `make_visible_after_rdma_write` made the writes visible.
    pub fn visibility_method(&self) -> VisibilityMethod {
        VisibilityMethod::from_u8(self.visibility.load(Ordering::Relaxed))
    }

    /// The driver's name for an error code, for logs.
    pub fn error_name(&self, code: i32) -> String {
        let Some(get_error_name) = self.lib.get_error_name else {
            return format!("CUresult {code}");
        };
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: `cuGetErrorName(CUresult, const char**)` writes a pointer to a static string.
        let status = unsafe { get_error_name(code, &mut name) };
        if status != sys::CUDA_SUCCESS || name.is_null() {
            return format!("CUresult {code}");
        }
        // SAFETY: non-NULL, NUL-terminated and static, as documented.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// `cuInit`'s failure, if it failed (every device query reports it).
    fn initialized(&self) -> Result<(), HipError> {
        check("cuInit", self.init_status)
    }

    fn device_attribute(&self, device: i32, attribute: c_int) -> Result<i32, HipError> {
        let handle = self.device_handle(device)?;
        let mut value: c_int = 0;
        // SAFETY: `cuDeviceGetAttribute(int*, CUdevice_attribute, CUdevice)` writes our local.
        check("cuDeviceGetAttribute", unsafe {
            (self.lib.device_get_attribute)(&mut value, attribute, handle)
        })?;
        Ok(value)
    }

    /// The `CUdevice` of ordinal `device`.
    fn device_handle(&self, device: i32) -> Result<CuDevice, HipError> {
        self.initialized()?;
        let mut handle: CuDevice = 0;
        // SAFETY: `cuDeviceGet(CUdevice*, int)` validates the ordinal and writes our local.
        check("cuDeviceGet", unsafe {
            (self.lib.device_get)(&mut handle, device)
        })?;
        Ok(handle)
    }

    /// The primary context of `device`, retained on first use.
    fn context(&self, device: i32) -> Result<Arc<PrimaryContext>, HipError> {
        if let Some(ctx) = self.contexts.lock().get(&device) {
            return Ok(ctx.clone());
        }
        let handle = self.device_handle(device)?;
        let mut raw: RawContext = std::ptr::null_mut();
        // SAFETY: `cuDevicePrimaryCtxRetain(CUcontext*, CUdevice)` writes our local and takes one
        // reference, which `PrimaryContext`'s drop gives back.
        check("cuDevicePrimaryCtxRetain", unsafe {
            (self.lib.primary_ctx_retain)(&mut raw, handle)
        })?;
        let retained = Arc::new(PrimaryContext {
            lib: self.lib.clone(),
            device: handle,
            raw,
        });
        // Another thread may have retained it meanwhile: keep the first, release ours.
        Ok(self
            .contexts
            .lock()
            .entry(device)
            .or_insert(retained)
            .clone())
    }

    /// Run `f` in `device`'s primary context, then restore the thread's context stack.
    fn on_device<T>(
        &self,
        device: i32,
        f: impl FnOnce() -> Result<T, HipError>,
    ) -> Result<T, HipError> {
        let ctx = self.context(device)?;
        let _current = ctx.enter()?;
        f()
    }

    /// Run `f` in the primary context of the calling thread's current device (device 0 when the
    /// thread has no context, as the CUDA runtime does).
    fn on_current_device<T>(&self, f: impl FnOnce() -> Result<T, HipError>) -> Result<T, HipError> {
        self.on_device(self.current_device()?, f)
    }

    /// Our stream on `device`, whose context must be current.
    fn stream_for(&self, device: i32) -> Result<Arc<OwnedStream>, HipError> {
        if let Some(stream) = self.streams.lock().get(&device) {
            return Ok(stream.clone());
        }
        let ctx = self.context(device)?;
        let mut raw: sys::RawStream = std::ptr::null_mut();
        // SAFETY: `cuStreamCreate(CUstream*, unsigned)` writes the new stream to our local, in
        // the current context (`device`'s, by the caller's contract).
        check("cuStreamCreate", unsafe {
            (self.lib.stream_create)(&mut raw, sys::CU_STREAM_NON_BLOCKING)
        })?;
        let created = Arc::new(OwnedStream { raw, ctx });
        Ok(self.streams.lock().entry(device).or_insert(created).clone())
    }

    /// A fresh completion event in `device`'s context, which must be current.
    fn create_event(&self, device: i32) -> Result<OwnedEvent, HipError> {
        let ctx = self.context(device)?;
        let mut raw: sys::RawEvent = std::ptr::null_mut();
        // SAFETY: `cuEventCreate(CUevent*, unsigned)` writes the new event to our local.
        check("cuEventCreate", unsafe {
            (self.lib.event_create)(&mut raw, sys::CU_EVENT_DISABLE_TIMING)
        })?;
        Ok(OwnedEvent { raw, ctx })
    }

    /// Queue the copy on our stream; `device`'s context must be current.
    ///
    /// # Safety
    /// As `GpuRuntime::start_copy`.
    unsafe fn queue_copy(
        &self,
        stream: &OwnedStream,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<(), HipError> {
        match direction {
            // SAFETY: the caller guarantees `src` is device memory and `dst` host memory, both
            // valid for `len` bytes until the copy finishes; the stream is live.
            CopyDirection::DeviceToHost => check("cuMemcpyDtoHAsync", unsafe {
                (self.lib.memcpy_dtoh_async)(
                    dst as *mut c_void,
                    src as CuDevicePtr,
                    len,
                    stream.raw,
                )
            }),
            // SAFETY: as above, with the roles swapped.
            CopyDirection::HostToDevice => check("cuMemcpyHtoDAsync", unsafe {
                (self.lib.memcpy_htod_async)(
                    dst as CuDevicePtr,
                    src as *const c_void,
                    len,
                    stream.raw,
                )
            }),
        }
    }

    /// A marker on our own stream: `cuEventRecord` + `cuEventSynchronize`.
    fn stream_marker(&self, device: i32) -> Result<(), HipError> {
        let stream = self.stream_for(device)?;
        let event = self.create_event(device)?;
        // SAFETY: a live event and a live stream of the current context.
        check("cuEventRecord", unsafe {
            (self.lib.event_record)(event.raw, stream.raw)
        })?;
        // SAFETY: a live, recorded event.
        check("cuEventSynchronize", unsafe {
            (self.lib.event_synchronize)(event.raw)
        })
    }

    fn record_visibility(&self, method: VisibilityMethod) {
        self.visibility.store(method.raw(), Ordering::Relaxed);
    }
}

impl VisibilityMethod {
    // Discriminants for the atomic; `None` is 0.
    const fn raw(self) -> u8 {
        match self {
            VisibilityMethod::None => 0,
            VisibilityMethod::FlushRdmaWrites => 1,
            VisibilityMethod::StreamMarker => 2,
            VisibilityMethod::ContextSynchronize => 3,
        }
    }
}

/// A stream of ours, destroyed on drop (in its context, which it keeps retained).
struct OwnedStream {
    raw: sys::RawStream,
    ctx: Arc<PrimaryContext>,
}

// SAFETY: a CUstream is a handle into the thread-safe CUDA driver: any thread may enqueue on,
// synchronise or destroy it. We never touch the pointee ourselves.
unsafe impl Send for OwnedStream {}
// SAFETY: as above; shared use only passes the handle to thread-safe driver calls.
unsafe impl Sync for OwnedStream {}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        let _current = self.ctx.enter();
        // SAFETY: we created this stream and nothing else destroys it. The driver releases a
        // stream that still has work once the work completes.
        let status = unsafe { (self.ctx.lib.stream_destroy)(self.raw) };
        if status != sys::CUDA_SUCCESS {
            tracing::warn!(code = status, "cuStreamDestroy failed");
        }
    }
}

/// An event of ours, destroyed on drop. It holds its context (and so the library): a
/// `CopyInFlight` can outlive the `CudaRuntime` that started it.
struct OwnedEvent {
    raw: sys::RawEvent,
    ctx: Arc<PrimaryContext>,
}

// SAFETY: a CUevent is a handle into the thread-safe CUDA driver; querying or destroying it from
// another thread is allowed.
unsafe impl Send for OwnedEvent {}

impl Drop for OwnedEvent {
    fn drop(&mut self) {
        let _current = self.ctx.enter();
        // SAFETY: we created this event and nothing else destroys it. Destroying an event whose
        // work hasn't completed is allowed; the copy itself isn't cancelled.
        let status = unsafe { (self.ctx.lib.event_destroy)(self.raw) };
        if status != sys::CUDA_SUCCESS {
            tracing::warn!(code = status, "cuEventDestroy failed");
        }
    }
}

/// Polls a copy's completion event.
struct CudaCopyProbe {
    event: OwnedEvent,
}

impl CopyProbe for CudaCopyProbe {
    fn probe(&mut self) -> CopyStatus {
        // SAFETY: a live, recorded event of ours.
        match unsafe { (self.event.ctx.lib.event_query)(self.event.raw) } {
            sys::CUDA_SUCCESS => CopyStatus::Done,
            sys::CUDA_ERROR_NOT_READY => CopyStatus::Pending,
            code => CopyStatus::Failed(code),
        }
    }
}

/// Frees pinned host memory in the context it was allocated in.
struct PinnedHostOwner {
    ctx: Arc<PrimaryContext>,
}

impl HostMemoryOwner for PinnedHostOwner {
    unsafe fn free_host(&self, ptr: NonNull<u8>) {
        let _current = self.ctx.enter();
        // SAFETY: the caller guarantees `ptr` came from `cuMemHostAlloc` in this context and is
        // not used again.
        let status = unsafe { (self.ctx.lib.mem_free_host)(ptr.as_ptr().cast()) };
        if status != sys::CUDA_SUCCESS {
            tracing::warn!(code = status, "cuMemFreeHost failed");
        }
    }
}

/// The page-aligned range that holds `[ptr, ptr + len)`: (start, length), or `None` on overflow.
fn page_span(ptr: usize, len: usize, page: usize) -> Option<(usize, usize)> {
    let start = ptr & !(page - 1);
    let end = ptr.checked_add(len)?.checked_add(page - 1)? & !(page - 1);
    Some((start, end - start))
}

impl GpuRuntime for CudaRuntime {
    fn platform(&self) -> GpuPlatform {
        GpuPlatform::Cuda
    }

    /// `cuDriverGetVersion` (e.g. 13000), not a `HIP_VERSION`.
    fn runtime_version(&self) -> Option<i32> {
        self.driver_version
    }

    /// `cuDeviceGetCount`; no device (or `cuInit` failing with `CUDA_ERROR_NO_DEVICE`) is the
    /// error 100, as HIP reports it.
    fn device_count(&self) -> Result<i32, HipError> {
        self.initialized()?;
        let mut count: c_int = 0;
        // SAFETY: `cuDeviceGetCount(int*)` writes one int to our local.
        check("cuDeviceGetCount", unsafe {
            (self.lib.device_get_count)(&mut count)
        })?;
        if count == 0 {
            return Err(HipError::new("cuDeviceGetCount", sys::CUDA_ERROR_NO_DEVICE));
        }
        Ok(count)
    }

    /// The device of the thread's current context; device 0 when it has none (the CUDA
    /// runtime's `cudaGetDevice` answer).
    fn current_device(&self) -> Result<i32, HipError> {
        self.initialized()?;
        let mut current: RawContext = std::ptr::null_mut();
        // SAFETY: `cuCtxGetCurrent(CUcontext*)` writes our local.
        check("cuCtxGetCurrent", unsafe {
            (self.lib.ctx_get_current)(&mut current)
        })?;
        if current.is_null() {
            self.device_count()?;
            return Ok(0);
        }
        let mut handle: CuDevice = -1;
        // SAFETY: `cuCtxGetDevice(CUdevice*)` writes our local for the current context.
        check("cuCtxGetDevice", unsafe {
            (self.lib.ctx_get_device)(&mut handle)
        })?;
        for ordinal in 0..self.device_count()? {
            if self.device_handle(ordinal)? == handle {
                return Ok(ordinal);
            }
        }
        Err(HipError::new(
            "cuCtxGetDevice",
            sys::CUDA_ERROR_INVALID_DEVICE,
        ))
    }

    /// Make `device`'s primary context the thread's current one (what `cudaSetDevice` does).
    fn set_device(&self, device: i32) -> Result<(), HipError> {
        let ctx = self.context(device)?;
        // SAFETY: a live context that this runtime keeps retained.
        check("cuCtxSetCurrent", unsafe {
            (self.lib.ctx_set_current)(ctx.raw)
        })
    }

    fn pci_bus_id(&self, device: i32) -> Result<String, HipError> {
        let handle = self.device_handle(device)?;
        let mut buf = [0u8; 64];
        let len = (buf.len() - 1) as c_int;
        // SAFETY: `cuDeviceGetPCIBusId(char*, int len, CUdevice)` writes at most `len` bytes, NUL
        // included, into our buffer, which has one more byte that stays 0.
        check("cuDeviceGetPCIBusId", unsafe {
            (self.lib.device_get_pci_bus_id)(buf.as_mut_ptr().cast(), len, handle)
        })?;
        let id = CStr::from_bytes_until_nul(&buf)
            .map_err(|_| HipError::new("cuDeviceGetPCIBusId", sys::CUDA_ERROR_INVALID_VALUE))?;
        Ok(id.to_string_lossy().to_ascii_lowercase())
    }

    /// `cuPointerGetAttributes(MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL)`: device memory is
    /// `Device`, pinned or unknown-to-CUDA host memory is `Host`, managed memory and arrays are
    /// `Unknown` (as for HIP).
    fn classify_pointer(&self, ptr: usize) -> PointerKind {
        if ptr == 0 {
            return PointerKind::Unknown;
        }
        let mut memory_type: c_uint = u32::MAX;
        let mut is_managed: u64 = 0;
        let mut ordinal: c_int = -1;
        let mut attributes = [
            sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            sys::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            sys::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        let mut data: [*mut c_void; 3] = [
            (&mut memory_type as *mut c_uint).cast(),
            (&mut is_managed as *mut u64).cast(),
            (&mut ordinal as *mut c_int).cast(),
        ];
        let status = self.on_current_device(|| {
            // SAFETY: three attributes, each with a local big enough for its value (an unsigned
            // int, a bool/unsigned int written into a zeroed u64, an int); `ptr` is only looked
            // up.
            check("cuPointerGetAttributes", unsafe {
                (self.lib.pointer_get_attributes)(
                    attributes.len() as c_uint,
                    attributes.as_mut_ptr(),
                    data.as_mut_ptr(),
                    ptr as CuDevicePtr,
                )
            })
        });
        if let Err(err) = status {
            tracing::trace!(ptr = format_args!("{ptr:#x}"), %err, "pointer attributes failed");
            return PointerKind::Unknown;
        }
        match memory_type {
            _ if is_managed != 0 => PointerKind::Unknown,
            sys::CU_MEMORYTYPE_DEVICE if ordinal >= 0 => PointerKind::Device { device: ordinal },
            sys::CU_MEMORYTYPE_HOST | sys::CU_MEMORYTYPE_UNREGISTERED => PointerKind::Host,
            _ => PointerKind::Unknown,
        }
    }

    /// `cuMemGetAddressRange`.
    fn address_range(&self, ptr: usize) -> Result<AddressRange, HipError> {
        let mut base: CuDevicePtr = 0;
        let mut len: usize = 0;
        self.on_current_device(|| {
            // SAFETY: `cuMemGetAddressRange(CUdeviceptr*, size_t*, CUdeviceptr)` writes our two
            // locals and only looks `ptr` up.
            check("cuMemGetAddressRange", unsafe {
                (self.lib.mem_get_address_range)(&mut base, &mut len, ptr as CuDevicePtr)
            })
        })?;
        Ok(AddressRange {
            base: base as usize,
            len,
        })
    }

    /// `cuMemGetHandleForAddressRange(DMA_BUF_FD)` over the pages holding the range, in the
    /// context of the device that owns `ptr`.
    fn export_dmabuf(&self, ptr: usize, len: usize) -> Result<DmabufExport, HipError> {
        const CALL: &str = "cuMemGetHandleForAddressRange";
        let Some(get_handle) = self.lib.mem_get_handle_for_address_range else {
            return Err(HipError::new(CALL, sys::CUDA_ERROR_NOT_SUPPORTED));
        };
        let PointerKind::Device { device } = self.classify_pointer(ptr) else {
            return Err(HipError::new(CALL, sys::CUDA_ERROR_INVALID_VALUE));
        };
        let (start, span) = page_span(ptr, len, crate::verbs::page_size())
            .ok_or(HipError::new(CALL, sys::CUDA_ERROR_INVALID_VALUE))?;
        let mut fd: c_int = -1;
        self.on_device(device, || {
            // SAFETY: with CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD the handle out-parameter is an
            // `int*`; the page-aligned range is only looked up.
            check(CALL, unsafe {
                get_handle(
                    (&mut fd as *mut c_int).cast(),
                    start as CuDevicePtr,
                    span,
                    sys::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            })
        })?;
        if fd < 0 {
            return Err(HipError::new(CALL, sys::CUDA_ERROR_NOT_SUPPORTED));
        }
        // SAFETY: a fresh descriptor the driver created for us; nobody else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(DmabufExport {
            fd,
            offset: (ptr - start) as u64,
        })
    }

    /// `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)` in the current device's primary context.
    fn alloc_host(&self, len: usize) -> Result<HostBuffer, HipError> {
        if len == 0 {
            return Err(HipError::new(
                "cuMemHostAlloc",
                sys::CUDA_ERROR_INVALID_VALUE,
            ));
        }
        let ctx = self.context(self.current_device()?)?;
        let mut raw: *mut c_void = std::ptr::null_mut();
        {
            let _current = ctx.enter()?;
            // SAFETY: `cuMemHostAlloc(void**, size_t, unsigned)` writes the allocation to our
            // local.
            check("cuMemHostAlloc", unsafe {
                (self.lib.mem_host_alloc)(&mut raw, len, sys::CU_MEMHOSTALLOC_PORTABLE)
            })?;
        }
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or(HipError::new(
            "cuMemHostAlloc",
            sys::CUDA_ERROR_OUT_OF_MEMORY,
        ))?;
        let owner: Arc<dyn HostMemoryOwner> = Arc::new(PinnedHostOwner { ctx });
        // SAFETY: a fresh `len`-byte allocation of that context, owned by nobody else.
        Ok(unsafe { HostBuffer::from_raw(ptr, len, owner) })
    }

    /// Asynchronous on our own stream, tracked by an event. An `Err` means no copy is running.
    unsafe fn start_copy(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<CopyInFlight, HipError> {
        self.on_device(device, || {
            let stream = self.stream_for(device)?;
            let event = self.create_event(device)?;
            // SAFETY: the caller's guarantees are passed on unchanged.
            unsafe { self.queue_copy(&stream, dst, src, len, direction) }?;
            // SAFETY: a live event and a live stream of the current context.
            let status = unsafe { (self.lib.event_record)(event.raw, stream.raw) };
            if status != sys::CUDA_SUCCESS {
                // The copy is queued but can't be tracked: wait for it rather than return with an
                // untracked copy still writing.
                tracing::warn!(
                    code = status,
                    "cuEventRecord failed after a queued copy; waiting for it"
                );
                // SAFETY: a live stream of ours.
                check("cuStreamSynchronize", unsafe {
                    (self.lib.stream_synchronize)(stream.raw)
                })?;
                return Ok(CopyInFlight::finished(Ok(())));
            }
            Ok(CopyInFlight::running(Box::new(CudaCopyProbe { event })))
        })
    }

    /// `cuMemAlloc` in `device`'s primary context.
    fn alloc_device(&self, device: i32, len: usize) -> Result<usize, HipError> {
        if len == 0 {
            return Err(HipError::new("cuMemAlloc", sys::CUDA_ERROR_INVALID_VALUE));
        }
        let mut ptr: CuDevicePtr = 0;
        self.on_device(device, || {
            // SAFETY: `cuMemAlloc(CUdeviceptr*, size_t)` writes the allocation to our local.
            check("cuMemAlloc", unsafe { (self.lib.mem_alloc)(&mut ptr, len) })
        })?;
        Ok(ptr as usize)
    }

    /// `cuMemFree` in `device`'s primary context, where `cuMemAlloc` made it.
    unsafe fn free_device(&self, device: i32, ptr: usize) -> Result<(), HipError> {
        self.on_device(device, || {
            // SAFETY: the caller guarantees an allocation of this context that nothing uses.
            check("cuMemFree", unsafe {
                (self.lib.mem_free)(ptr as CuDevicePtr)
            })
        })
    }

    /// Queued on our own stream, then `cuStreamSynchronize`: unlike `cuMemcpyHtoD` from pageable
    /// memory, which may return before the DMA reached the device, this returns only once the
    /// bytes are there (a NIC may read them next), and it waits for nothing of the application's.
    unsafe fn copy_blocking(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<(), HipError> {
        self.on_device(device, || {
            let stream = self.stream_for(device)?;
            // SAFETY: the caller's guarantees are passed on; the copy has finished when the
            // synchronisation below returns, before the caller's memory can go away.
            unsafe { self.queue_copy(&stream, dst, src, len, direction) }?;
            // SAFETY: a live stream of ours.
            check("cuStreamSynchronize", unsafe {
                (self.lib.stream_synchronize)(stream.raw)
            })
        })
    }

    /// `cuFlushGPUDirectRDMAWrites`, else a marker on our stream, else `cuCtxSynchronize`; see the
    /// module documentation.
    fn make_visible_after_rdma_write(&self, device: i32) -> Result<(), HipError> {
        self.on_device(device, || {
            if let Some(flush) = self.lib.flush_gpu_direct_rdma_writes {
                // SAFETY: plain enum arguments; flushes for the current (device's) context.
                let status = unsafe {
                    flush(
                        sys::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                        sys::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER,
                    )
                };
                if status == sys::CUDA_SUCCESS {
                    self.record_visibility(VisibilityMethod::FlushRdmaWrites);
                    return Ok(());
                }
                tracing::debug!(code = status, "cuFlushGPUDirectRDMAWrites refused; using a stream marker");
            }
            match self.stream_marker(device) {
                Ok(()) => {
                    self.record_visibility(VisibilityMethod::StreamMarker);
                    return Ok(());
                }
                Err(err) => tracing::warn!(%err, device, "stream marker failed; falling back to cuCtxSynchronize"),
            }
            // SAFETY: no arguments; synchronises the current (device's) context.
            check("cuCtxSynchronize", unsafe { (self.lib.ctx_synchronize)() })?;
            self.record_visibility(VisibilityMethod::ContextSynchronize);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_span_covers_the_range() {
        assert_eq!(page_span(0x1000, 0x1000, 0x1000), Some((0x1000, 0x1000)));
        assert_eq!(page_span(0x1064, 5000, 0x1000), Some((0x1000, 0x2000)));
        assert_eq!(page_span(0x1fff, 2, 0x1000), Some((0x1000, 0x2000)));
        assert_eq!(page_span(usize::MAX - 10, 100, 0x1000), None);
    }

    #[test]
    fn visibility_method_round_trips() {
        for method in [
            VisibilityMethod::None,
            VisibilityMethod::FlushRdmaWrites,
            VisibilityMethod::StreamMarker,
            VisibilityMethod::ContextSynchronize,
        ] {
            assert_eq!(VisibilityMethod::from_u8(method.raw()), method);
        }
    }

    #[test]
    fn bogus_names_fail_with_a_typed_error() {
        let names = ["libcuda-does-not-exist.so.1", "/nonexistent/libcuda.so.1"];
        match CudaRuntime::load_from(&names) {
            Err(HipLoadError::LibraryNotFound { tried, reason }) => {
                assert_eq!(tried, names);
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("loaded a library that doesn't exist"),
        }
    }

    #[test]
    fn a_library_without_cuda_symbols_is_missing_a_required_symbol() {
        match CudaRuntime::load_from(&["libc.so.6"]) {
            Err(HipLoadError::MissingSymbol { library, symbol }) => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(symbol, "cuInit");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("libc taken for a CUDA driver"),
        }
    }
}
