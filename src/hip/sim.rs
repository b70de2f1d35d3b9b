//! `SimGpu`: a SIMULATED GPU for tests. Compiled only with the crate feature `sim-gpu`, which the
//! shipped library never enables.
//!
//! It is a test double behind [`GpuRuntime`], not an emulator: "device memory" is host memory the
//! sim allocates and tracks itself, so pointer classification and allocation ranges answer as HIP
//! would; devices have made-up PCI bus ids; dmabuf export always fails with
//! `hipErrorNotSupported`, as on a system without GPU-direct RDMA, so registrations take the
//! host-staging path; copies run on a background thread of the sim and can be delayed
//! ([`SimGpu::set_copy_delay`]), held back until the test lets them go
//! ([`SimGpu::stall_copies`] / [`SimGpu::release_copies`]) or made to fail
//! ([`SimGpu::fail_next_copy`]), which is how the staging-timeout path is tested; blocking copies
//! ([`GpuRuntime::copy_blocking`]) run at once on the caller's thread (only `fail_next_copy` applies
//! to them) and take any host memory outside the sim's allocations on the host side, as
//! `hipMemcpy` takes pageable memory; every trait call is counted ([`SimGpu::calls`]).
//!
//! Differences from HIP, on purpose: staging copies are only allowed between memory the sim allocated
//! (device memory of the named device on one side, sim host memory on the other), and a copy whose
//! memory was freed before it ran fails with `hipErrorInvalidValue` instead of touching freed
//! memory. Without devices, `device_count` fails with `hipErrorNoDevice` (100) and
//! `current_device` with `hipErrorInvalidDevice` (101), which is what ROCm 5.2 returns on a host
//! without a GPU.

use super::copy::{CopyDirection, CopyInFlight, CopyProbe, CopyStatus};
use super::error::{
    HipError, HIP_ERROR_INVALID_DEVICE, HIP_ERROR_INVALID_VALUE, HIP_ERROR_NOT_SUPPORTED,
    HIP_ERROR_NO_DEVICE, HIP_ERROR_OUT_OF_MEMORY,
};
use super::host_buffer::{HostBuffer, HostMemoryOwner};
use super::{AddressRange, DmabufExport, GpuPlatform, GpuRuntime, PointerKind};
use crossbeam_channel::{Receiver, Sender};
use hipobj_actors::sync::{Condvar, Mutex};
use std::alloc::Layout;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Alignment of sim allocations, like `hipMalloc`'s 256 bytes.
const SIM_ALIGN: usize = 256;

static NEXT_SIM_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The current device of this thread, per sim (HIP's current device is per thread).
    static CURRENT_DEVICE: RefCell<HashMap<u64, i32>> = RefCell::new(HashMap::new());
}

/// How many times each trait entry point was called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimCalls {
    pub device_count: u64,
    pub current_device: u64,
    pub set_device: u64,
    pub pci_bus_id: u64,
    pub classify_pointer: u64,
    pub address_range: u64,
    pub export_dmabuf: u64,
    pub alloc_device: u64,
    pub free_device: u64,
    pub copy_blocking: u64,
    pub alloc_host: u64,
    pub free_host: u64,
    pub start_copy: u64,
    pub copies_finished: u64,
    /// Times a running copy was asked whether it finished (`hipEventQuery`).
    pub copy_queries: u64,
    pub make_visible: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SimMemoryKind {
    Device(i32),
    Host,
}

/// One allocation of the sim, freed on drop.
struct SimAllocation {
    ptr: NonNull<u8>,
    layout: Layout,
    kind: SimMemoryKind,
}

// SAFETY: the allocation is plain heap memory owned by this value; it is only read or written
// while the sim's memory lock is held.
unsafe impl Send for SimAllocation {}

impl SimAllocation {
    fn new(len: usize, kind: SimMemoryKind) -> Result<SimAllocation, HipError> {
        if len == 0 {
            return Err(HipError::new("hipMalloc", HIP_ERROR_INVALID_VALUE));
        }
        // A size no allocation can have is out of memory, as HIP answers it.
        let layout = Layout::from_size_align(len, SIM_ALIGN)
            .map_err(|_| HipError::new("hipMalloc", HIP_ERROR_OUT_OF_MEMORY))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(HipError::new("hipMalloc", HIP_ERROR_OUT_OF_MEMORY))?;
        Ok(SimAllocation { ptr, layout, kind })
    }

    fn base(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for SimAllocation {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout and freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// All live allocations, by base address.
#[derive(Default)]
struct SimMemory {
    allocations: BTreeMap<usize, SimAllocation>,
}

impl SimMemory {
    /// The allocation that holds `[ptr, ptr + len)` entirely.
    fn find(&self, ptr: usize, len: usize) -> Option<&SimAllocation> {
        let (_, allocation) = self.allocations.range(..=ptr).next_back()?;
        AddressRange {
            base: allocation.base(),
            len: allocation.len(),
        }
        .contains(ptr, len.max(1))
        .then_some(allocation)
    }

    /// Whether `[ptr, ptr + len)` touches any allocation.
    fn overlaps(&self, ptr: usize, len: usize) -> bool {
        let Some(end) = ptr.checked_add(len) else {
            return true;
        };
        self.allocations
            .range(..end)
            .next_back()
            .is_some_and(|(_, a)| a.base() + a.len() > ptr)
    }

    /// Whether one side of a copy is memory of `kind`: inside one allocation of that kind, or,
    /// for the host side with `host` = [`HostSide::Any`], outside every sim allocation.
    fn side_fits(&self, ptr: usize, len: usize, kind: SimMemoryKind, host: HostSide) -> bool {
        match self.find(ptr, len) {
            Some(allocation) => allocation.kind == kind,
            None => {
                kind == SimMemoryKind::Host && host == HostSide::Any && !self.overlaps(ptr, len)
            }
        }
    }

    /// Whether `copy` has memory of the kinds it names on each side.
    fn copy_fits(&self, copy: &SimCopy) -> bool {
        let SimCopy { dst, src, len, .. } = *copy;
        len > 0
            && self.side_fits(dst, len, copy.kinds.0, copy.host)
            && self.side_fits(src, len, copy.kinds.1, copy.host)
    }

    /// Run the copy, or fail it with `hipErrorInvalidValue` when it doesn't fit.
    fn copy(&self, copy: &SimCopy) -> CopyStatus {
        if !self.copy_fits(copy) {
            return CopyStatus::Failed(HIP_ERROR_INVALID_VALUE);
        }
        // SAFETY: the device side lies inside a live sim allocation, and so does the host side of
        // a staging copy (checked under the memory lock, which the caller holds for the copy, so
        // neither can be freed meanwhile); the host side of a blocking copy lies outside every
        // allocation and is valid by `copy_blocking`'s contract. The two sides are in different
        // memory, so they don't overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(copy.src as *const u8, copy.dst as *mut u8, copy.len)
        };
        CopyStatus::Done
    }
}

/// The memory kinds of a copy's (destination, source).
type CopyKinds = (SimMemoryKind, SimMemoryKind);

/// What the host side of a copy may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostSide {
    /// Sim host memory only (`alloc_host`): staging copies.
    Sim,
    /// Any host memory outside the sim's allocations too: blocking copies, whose caller passes
    /// its own buffers (as `hipMemcpy` takes pageable memory).
    Any,
}

/// One copy: `len` bytes to `dst` from `src`, the kinds of memory each side must be, and what the
/// host side may be.
#[derive(Clone, Copy, Debug)]
struct SimCopy {
    dst: usize,
    src: usize,
    len: usize,
    kinds: CopyKinds,
    host: HostSide,
}

impl SimCopy {
    /// A copy on `device` in `direction`.
    fn new(
        device: i32,
        (dst, src, len): (usize, usize, usize),
        direction: CopyDirection,
        host: HostSide,
    ) -> SimCopy {
        let kinds = match direction {
            CopyDirection::HostToDevice => (SimMemoryKind::Device(device), SimMemoryKind::Host),
            CopyDirection::DeviceToHost => (SimMemoryKind::Host, SimMemoryKind::Device(device)),
        };
        SimCopy {
            dst,
            src,
            len,
            kinds,
            host,
        }
    }
}

/// What the copy thread waits on.
struct CopyGate {
    stalled: bool,
    delay: Duration,
    fail_next: Option<i32>,
}

#[derive(Default)]
struct Counters {
    device_count: AtomicU64,
    current_device: AtomicU64,
    set_device: AtomicU64,
    pci_bus_id: AtomicU64,
    classify_pointer: AtomicU64,
    address_range: AtomicU64,
    export_dmabuf: AtomicU64,
    alloc_device: AtomicU64,
    free_device: AtomicU64,
    copy_blocking: AtomicU64,
    alloc_host: AtomicU64,
    free_host: AtomicU64,
    start_copy: AtomicU64,
    copies_finished: AtomicU64,
    copy_queries: AtomicU64,
    make_visible: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The state the sim and its copy thread share.
struct SimShared {
    bus_ids: Vec<String>,
    memory: Mutex<SimMemory>,
    gate: Mutex<CopyGate>,
    gate_changed: Condvar,
    closing: AtomicBool,
    calls: Counters,
}

impl HostMemoryOwner for SimShared {
    unsafe fn free_host(&self, ptr: NonNull<u8>) {
        bump(&self.calls.free_host);
        if self
            .memory
            .lock()
            .allocations
            .remove(&(ptr.as_ptr() as usize))
            .is_none()
        {
            tracing::warn!(ptr = ?ptr, "sim: free of host memory the sim doesn't own");
        }
    }
}

/// One queued copy.
struct CopyJob {
    copy: SimCopy,
    result: Arc<Mutex<CopyStatus>>,
}

impl SimShared {
    /// Wait out the configured delay, then any stall; both end early when the sim is dropped.
    /// Returns the failure to inject, if one was armed.
    fn pass_gate(&self) -> Option<i32> {
        let mut gate = self.gate.lock();
        let delay = gate.delay;
        if !delay.is_zero() {
            let deadline = std::time::Instant::now() + delay;
            while !self.closing.load(Ordering::Acquire) {
                let now = std::time::Instant::now();
                if now >= deadline {
                    break;
                }
                gate = self.gate_changed.wait_timeout(gate, deadline - now);
            }
        }
        while gate.stalled && !self.closing.load(Ordering::Acquire) {
            gate = self.gate_changed.wait(gate);
        }
        gate.fail_next.take()
    }

    fn execute(&self, job: &CopyJob) -> CopyStatus {
        if let Some(code) = self.pass_gate() {
            return CopyStatus::Failed(code);
        }
        self.memory.lock().copy(&job.copy)
    }

    fn run_copies(self: Arc<Self>, jobs: Receiver<CopyJob>) {
        while let Ok(job) = jobs.recv() {
            let status = self.execute(&job);
            *job.result.lock() = status;
            bump(&self.calls.copies_finished);
        }
    }
}

/// Polls a sim copy's result slot.
struct SimCopyProbe {
    result: Arc<Mutex<CopyStatus>>,
    shared: Arc<SimShared>,
}

impl CopyProbe for SimCopyProbe {
    fn probe(&mut self) -> CopyStatus {
        bump(&self.shared.calls.copy_queries);
        *self.result.lock()
    }
}

/// A simulated GPU runtime for tests (see the module documentation).
pub struct SimGpu {
    id: u64,
    shared: Arc<SimShared>,
    // Declared before `copy_thread`: dropped first, so the copy thread's `recv` fails and it ends
    // before `Drop` joins it.
    jobs: Option<Sender<CopyJob>>,
    copy_thread: Option<JoinHandle<()>>,
}

impl SimGpu {
    /// A sim with `devices` GPUs whose PCI bus ids are `0000:NN:00.0` with NN = 0x10 + index.
    pub fn new(devices: usize) -> Arc<SimGpu> {
        SimGpu::with_bus_ids(
            (0..devices)
                .map(|i| format!("0000:{:02x}:00.0", 0x10 + i))
                .collect(),
        )
    }

    /// A sim with one GPU per given PCI bus id.
    pub fn with_bus_ids(bus_ids: Vec<String>) -> Arc<SimGpu> {
        let shared = Arc::new(SimShared {
            bus_ids,
            memory: Mutex::new(SimMemory::default()),
            gate: Mutex::new(CopyGate {
                stalled: false,
                delay: Duration::ZERO,
                fail_next: None,
            }),
            gate_changed: Condvar::new(),
            closing: AtomicBool::new(false),
            calls: Counters::default(),
        });
        let (sender, receiver) = crossbeam_channel::unbounded();
        let worker_state = shared.clone();
        let copy_thread = std::thread::Builder::new()
            .name("hipobj-simgpu".into())
            .spawn(move || worker_state.run_copies(receiver))
            .map_err(|err| tracing::error!(%err, "sim: could not start the copy thread; copies will fail"))
            .ok();
        Arc::new(SimGpu {
            id: NEXT_SIM_ID.fetch_add(1, Ordering::Relaxed),
            shared,
            jobs: copy_thread.as_ref().map(|_| sender),
            copy_thread,
        })
    }

    fn device_valid(&self, device: i32) -> bool {
        usize::try_from(device).is_ok_and(|d| d < self.shared.bus_ids.len())
    }

    /// Allocate `len` bytes of simulated device memory on `device` (the sim's `hipMalloc`).
    pub fn alloc_device(&self, device: i32, len: usize) -> Result<usize, HipError> {
        bump(&self.shared.calls.alloc_device);
        if !self.device_valid(device) {
            return Err(HipError::new("hipMalloc", HIP_ERROR_INVALID_DEVICE));
        }
        let allocation = SimAllocation::new(len, SimMemoryKind::Device(device))?;
        let base = allocation.base();
        self.shared
            .memory
            .lock()
            .allocations
            .insert(base, allocation);
        Ok(base)
    }

    /// Free simulated device memory (the sim's `hipFree`); `ptr` must be an allocation's base.
    pub fn free_device(&self, ptr: usize) -> Result<(), HipError> {
        bump(&self.shared.calls.free_device);
        let mut memory = self.shared.memory.lock();
        match memory.allocations.get(&ptr).map(|a| a.kind) {
            Some(SimMemoryKind::Device(_)) => {
                memory.allocations.remove(&ptr);
                Ok(())
            }
            _ => Err(HipError::new("hipFree", HIP_ERROR_INVALID_VALUE)),
        }
    }

    /// Write bytes into sim memory (device or host), as a kernel or memcpy would.
    pub fn write(&self, ptr: usize, bytes: &[u8]) -> Result<(), HipError> {
        let memory = self.shared.memory.lock();
        memory
            .find(ptr, bytes.len())
            .ok_or(HipError::new("sim write", HIP_ERROR_INVALID_VALUE))?;
        // SAFETY: the range lies inside a live allocation, which the held lock keeps alive.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr as *mut u8, bytes.len()) };
        Ok(())
    }

    /// Read bytes from sim memory (device or host).
    pub fn read(&self, ptr: usize, len: usize) -> Result<Vec<u8>, HipError> {
        let memory = self.shared.memory.lock();
        memory
            .find(ptr, len)
            .ok_or(HipError::new("sim read", HIP_ERROR_INVALID_VALUE))?;
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside a live allocation, which the held lock keeps alive.
        unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, out.as_mut_ptr(), len) };
        Ok(out)
    }

    /// Number of live allocations (device and host), for leak checks.
    pub fn live_allocations(&self) -> usize {
        self.shared.memory.lock().allocations.len()
    }

    /// Delay every copy that starts executing from now on by `delay`.
    pub fn set_copy_delay(&self, delay: Duration) {
        self.shared.gate.lock().delay = delay;
        self.shared.gate_changed.notify_all();
    }

    /// Hold back every copy that hasn't finished yet until [`SimGpu::release_copies`]: they stay
    /// `Pending`.
    pub fn stall_copies(&self) {
        self.shared.gate.lock().stalled = true;
    }

    /// Let stalled copies run.
    pub fn release_copies(&self) {
        self.shared.gate.lock().stalled = false;
        self.shared.gate_changed.notify_all();
    }

    /// Make the next copy that runs fail with `code` instead of copying.
    pub fn fail_next_copy(&self, code: i32) {
        self.shared.gate.lock().fail_next = Some(code);
    }

    /// The calls counted so far.
    pub fn calls(&self) -> SimCalls {
        let c = &self.shared.calls;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        SimCalls {
            device_count: get(&c.device_count),
            current_device: get(&c.current_device),
            set_device: get(&c.set_device),
            pci_bus_id: get(&c.pci_bus_id),
            classify_pointer: get(&c.classify_pointer),
            address_range: get(&c.address_range),
            export_dmabuf: get(&c.export_dmabuf),
            alloc_device: get(&c.alloc_device),
            free_device: get(&c.free_device),
            copy_blocking: get(&c.copy_blocking),
            alloc_host: get(&c.alloc_host),
            free_host: get(&c.free_host),
            start_copy: get(&c.start_copy),
            copies_finished: get(&c.copies_finished),
            copy_queries: get(&c.copy_queries),
            make_visible: get(&c.make_visible),
        }
    }

    fn device_or_err(&self, call: &'static str, device: i32) -> Result<(), HipError> {
        if self.device_valid(device) {
            Ok(())
        } else {
            Err(HipError::new(call, HIP_ERROR_INVALID_DEVICE))
        }
    }
}

impl Drop for SimGpu {
    fn drop(&mut self) {
        // Let delayed and stalled copies through, close the queue, and wait for the thread to
        // drain it. The thread holds only `SimShared`, never `SimGpu`, so this never runs on it.
        self.shared.closing.store(true, Ordering::Release);
        {
            let _gate = self.shared.gate.lock();
            self.shared.gate_changed.notify_all();
        }
        self.jobs.take();
        if let Some(thread) = self.copy_thread.take() {
            if thread.join().is_err() {
                tracing::error!("sim: the copy thread panicked");
            }
        }
        CURRENT_DEVICE.with(|current| current.borrow_mut().remove(&self.id));
    }
}

impl GpuRuntime for SimGpu {
    fn platform(&self) -> GpuPlatform {
        GpuPlatform::Simulated
    }

    fn runtime_version(&self) -> Option<i32> {
        None
    }

    fn device_count(&self) -> Result<i32, HipError> {
        bump(&self.shared.calls.device_count);
        match self.shared.bus_ids.len() {
            0 => Err(HipError::new("hipGetDeviceCount", HIP_ERROR_NO_DEVICE)),
            n => i32::try_from(n)
                .map_err(|_| HipError::new("hipGetDeviceCount", HIP_ERROR_INVALID_VALUE)),
        }
    }

    fn current_device(&self) -> Result<i32, HipError> {
        bump(&self.shared.calls.current_device);
        if self.shared.bus_ids.is_empty() {
            return Err(HipError::new("hipGetDevice", HIP_ERROR_INVALID_DEVICE));
        }
        Ok(CURRENT_DEVICE.with(|current| current.borrow().get(&self.id).copied().unwrap_or(0)))
    }

    fn set_device(&self, device: i32) -> Result<(), HipError> {
        bump(&self.shared.calls.set_device);
        self.device_or_err("hipSetDevice", device)?;
        CURRENT_DEVICE.with(|current| current.borrow_mut().insert(self.id, device));
        Ok(())
    }

    fn pci_bus_id(&self, device: i32) -> Result<String, HipError> {
        bump(&self.shared.calls.pci_bus_id);
        usize::try_from(device)
            .ok()
            .and_then(|d| self.shared.bus_ids.get(d).cloned())
            .ok_or(HipError::new(
                "hipDeviceGetPCIBusId",
                HIP_ERROR_INVALID_DEVICE,
            ))
    }

    /// Sim device memory → `Device`, sim host memory → `Host`, anything else → `Unknown` (as
    /// ROCm 5's failing `hipPointerGetAttributes` on memory it doesn't track).
    fn classify_pointer(&self, ptr: usize) -> PointerKind {
        bump(&self.shared.calls.classify_pointer);
        match self.shared.memory.lock().find(ptr, 1).map(|a| a.kind) {
            Some(SimMemoryKind::Device(device)) => PointerKind::Device { device },
            Some(SimMemoryKind::Host) => PointerKind::Host,
            None => PointerKind::Unknown,
        }
    }

    fn address_range(&self, ptr: usize) -> Result<AddressRange, HipError> {
        bump(&self.shared.calls.address_range);
        self.shared
            .memory
            .lock()
            .find(ptr, 1)
            .map(|a| AddressRange {
                base: a.base(),
                len: a.len(),
            })
            .ok_or(HipError::new(
                "hipMemGetAddressRange",
                HIP_ERROR_INVALID_VALUE,
            ))
    }

    /// Always fails: the sim has no GPU-direct path.
    fn export_dmabuf(&self, _ptr: usize, _len: usize) -> Result<DmabufExport, HipError> {
        bump(&self.shared.calls.export_dmabuf);
        Err(HipError::new(
            "hipMemGetHandleForAddressRange",
            HIP_ERROR_NOT_SUPPORTED,
        ))
    }

    fn alloc_host(&self, len: usize) -> Result<HostBuffer, HipError> {
        bump(&self.shared.calls.alloc_host);
        let allocation = SimAllocation::new(len, SimMemoryKind::Host)
            .map_err(|e| HipError::new("hipHostMalloc", e.code))?;
        let ptr = allocation.ptr;
        self.shared
            .memory
            .lock()
            .allocations
            .insert(allocation.base(), allocation);
        let owner: Arc<dyn HostMemoryOwner> = self.shared.clone();
        // SAFETY: a fresh `len`-byte allocation, tracked by `owner`, owned by nobody else.
        Ok(unsafe { HostBuffer::from_raw(ptr, len, owner) })
    }

    /// Queues the copy on the sim's copy thread. Both sides must be sim memory: device memory of
    /// `device` on the device side, sim host memory on the other.
    unsafe fn start_copy(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<CopyInFlight, HipError> {
        bump(&self.shared.calls.start_copy);
        self.device_or_err("hipMemcpyAsync", device)?;
        let copy = SimCopy::new(device, (dst, src, len), direction, HostSide::Sim);
        if !self.shared.memory.lock().copy_fits(&copy) {
            return Err(HipError::new("hipMemcpyAsync", HIP_ERROR_INVALID_VALUE));
        }
        let result = Arc::new(Mutex::new(CopyStatus::Pending));
        let job = CopyJob {
            copy,
            result: result.clone(),
        };
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            return Err(HipError::new("hipMemcpyAsync", HIP_ERROR_NOT_SUPPORTED));
        }
        Ok(CopyInFlight::running(Box::new(SimCopyProbe {
            result,
            shared: self.shared.clone(),
        })))
    }

    /// [`SimGpu::alloc_device`].
    fn alloc_device(&self, device: i32, len: usize) -> Result<usize, HipError> {
        SimGpu::alloc_device(self, device, len)
    }

    /// [`SimGpu::free_device`], for an allocation of `device` only.
    unsafe fn free_device(&self, device: i32, ptr: usize) -> Result<(), HipError> {
        let kind = self
            .shared
            .memory
            .lock()
            .allocations
            .get(&ptr)
            .map(|a| a.kind);
        if kind != Some(SimMemoryKind::Device(device)) {
            bump(&self.shared.calls.free_device);
            return Err(HipError::new("hipFree", HIP_ERROR_INVALID_VALUE));
        }
        SimGpu::free_device(self, ptr)
    }

    /// At once, on the caller's thread, with the checks of `start_copy` but any host memory outside
    /// the sim's allocations allowed on the host side; a failure armed with
    /// [`SimGpu::fail_next_copy`] is returned instead of copying.
    unsafe fn copy_blocking(
        &self,
        device: i32,
        dst: usize,
        src: usize,
        len: usize,
        direction: CopyDirection,
    ) -> Result<(), HipError> {
        bump(&self.shared.calls.copy_blocking);
        self.device_or_err("hipMemcpy", device)?;
        if let Some(code) = self.shared.gate.lock().fail_next.take() {
            return Err(HipError::new("hipMemcpy", code));
        }
        let copy = SimCopy::new(device, (dst, src, len), direction, HostSide::Any);
        match self.shared.memory.lock().copy(&copy) {
            CopyStatus::Failed(code) => Err(HipError::new("hipMemcpy", code)),
            _ => Ok(()),
        }
    }

    fn make_visible_after_rdma_write(&self, device: i32) -> Result<(), HipError> {
        bump(&self.shared.calls.make_visible);
        self.device_or_err("hipEventSynchronize", device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_is_bounded_by_the_allocation() {
        let sim = SimGpu::new(1);
        let base = sim.alloc_device(0, 1000).unwrap_or(0);
        assert_ne!(base, 0);
        let memory = sim.shared.memory.lock();
        assert!(memory.find(base, 1000).is_some());
        assert!(memory.find(base + 999, 1).is_some());
        assert!(memory.find(base + 1000, 1).is_none());
        assert!(memory.find(base + 1, 1000).is_none());
        assert!(memory.find(base.wrapping_sub(1), 1).is_none());
        assert!(memory.find(base, usize::MAX).is_none());
    }

    #[test]
    fn current_device_is_per_thread() {
        let sim = SimGpu::new(2);
        assert_eq!(sim.set_device(1), Ok(()));
        assert_eq!(sim.current_device(), Ok(1));
        let other = std::thread::scope(|s| s.spawn(|| sim.current_device()).join());
        assert_eq!(other.ok(), Some(Ok(0)));
    }
}
