//! The library's running state and its lifecycle.
//!
//! A process-wide **supervisor** actor (`hipobj-sup`) owns the lifecycle: it builds a [`Runtime`] on
//! `hipObjInit`, unpublishes it on `hipObjShutdown`, and is the only writer of each runtime's registry
//! snapshot. Calls find the current runtime without a lock ([`current`]) and hold an `Arc` to it until
//! they return, so a shutdown never waits for them: the runtime's QPs, registrations and threads are
//! released when the last `Arc` goes, and a new `hipObjInit` can publish a fresh runtime meanwhile.

use crate::env::EnvConfig;
use crate::error::{Error, OpError, Result};
use crate::hip::{self, CopyDirection, GpuRuntime, GpuSelection, PointerKind};
use crate::pool::{AcquireError, ConnectionHandle, PairOutcome, Pool, Wait};
use crate::registry::{mr_access, Buffer, BufferKind};
use crate::reply::{Reply, REPLY_BUFFER_LEN};
use crate::stager::StagerHandle;
use crate::verbs::{self, Device};
use hipobj_actors::answer::{request, Answer};
use hipobj_actors::callback::{in_callback, CallbackGuard};
use hipobj_actors::lifecycle::{InitError, Lifecycle};
use hipobj_actors::registry::{Entry, Registry, RemoveError, UseError, UseGuard};
use hipobj_actors::sync::channel::{unbounded, Receiver, Sender};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

/// What `hipObjInit` passes to the core after validating `hipObjConfig_t`.
#[derive(Clone, Debug, Default)]
pub struct InitConfig {
    /// HIP device index, or -1 for the calling thread's current device.
    pub gpu_device: i32,
    /// Comma-separated RDMA device names, `None` for any.
    pub nic_hint: Option<String>,
    pub env: EnvConfig,
}

/// Which way a transfer moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferKind {
    /// Server RDMA WRITEs into our buffer.
    Get,
    /// Server RDMA READs from our buffer.
    Put,
}

/// `hipObjBufSync` direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncDirection {
    ToHost,
    ToDevice,
}

/// Where a registration's memory lives, as the caller says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// `hipObjBufRegisterHost`.
    Host,
    /// `hipObjBufRegister`: device memory (or host memory, which is then registered as such).
    Device,
}

/// The application's S3 client, as the `hipObjOps_t` callbacks or a Rust implementation.
pub trait S3Ops {
    /// Send the request carrying `token` (88 hex digits). 0 on success.
    fn send_request(&mut self, token: &str) -> i32;
    /// Copy the `x-amz-rdma-reply` value into `buf`; the number of bytes written, or the
    /// callback's non-zero status.
    fn recv_reply(&mut self, buf: &mut [u8]) -> std::result::Result<usize, i32>;
}

/// Largest registration (4 GiB, inclusive).
pub const MAX_REGISTRATION: usize = 4 << 30;
/// A transfer never sends more than this many requests (PROTOCOL.md rule 5.3).
const MAX_REQUESTS: usize = 3;

/// The GPU that an initialised runtime stages through and chose its NIC by.
struct Gpu {
    runtime: Arc<dyn GpuRuntime>,
    device: i32,
    pci_bus_id: Option<String>,
}

/// One initialised library instance.
pub struct Runtime {
    env: EnvConfig,
    // Field order is drop order: connections and buffers go before the device they were made on.
    pool: Arc<Pool>,
    connections: Vec<ConnectionHandle>,
    app_connection: ConnectionHandle,
    registry: Registry<Buffer>,
    stager: Option<StagerHandle>,
    gpu: Option<Gpu>,
    device: Arc<Device>,
}

static LIFECYCLE: LazyLock<Lifecycle<Runtime>> = LazyLock::new(Lifecycle::new);

/// The current runtime, if hipObject is initialised.
pub fn current() -> Option<Arc<Runtime>> {
    LIFECYCLE.current()
}

/// Initialise (the checks on `hipObjConfig_t` itself are done by the caller).
pub fn init(cfg: InitConfig) -> Result<()> {
    init_inner(cfg, None)
}

/// Initialise with a GPU runtime supplied by the caller instead of the HIP runtime loaded from the
/// system (for Rust users with their own GPU layer, and for tests with a simulated device).
pub fn init_with_gpu(cfg: InitConfig, gpu: Arc<dyn GpuRuntime>) -> Result<()> {
    init_inner(cfg, Some(gpu))
}

fn init_inner(cfg: InitConfig, gpu: Option<Arc<dyn GpuRuntime>>) -> Result<()> {
    crate::log::init_from_env();
    if current().is_some() {
        return Err(Error::new(
            OpError::AlreadyInitialized,
            "hipObject is already initialized",
        ));
    }
    let lib = verbs::Lib::load().map_err(|e| Error::rdma(format!("libibverbs: {e}")))?;
    // The GPU is resolved on the calling thread: `-1` means this thread's current HIP device.
    let gpu = resolve_gpu(&cfg, gpu)?;
    supervisor()?.ask(|answer| SupMsg::Init {
        cfg,
        lib,
        gpu,
        answer,
    })?
}

/// Shut down; a no-op when not initialised. Does not wait for calls in progress.
pub fn shutdown() {
    let Ok(sup) = supervisor() else { return };
    let _ = sup.ask(|answer| SupMsg::Shutdown { answer });
}

/// `nicHint`, if it names anything (NULL, "" and blanks allow every device).
fn nic_hint(cfg: &InitConfig) -> Option<&str> {
    cfg.nic_hint.as_deref().filter(|h| !h.trim().is_empty())
}

/// REFERENCE.md section 7, `gpuDevice` handling (the rules live in `hip::select_gpu`).
fn resolve_gpu(cfg: &InitConfig, injected: Option<Arc<dyn GpuRuntime>>) -> Result<Option<Gpu>> {
    let runtime = match injected {
        Some(r) => Some(r),
        None => match hip::load() {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::debug!("no HIP runtime: {e}");
                None
            }
        },
    };
    match hip::select_gpu(runtime.as_deref(), cfg.gpu_device).map_err(|e| e.into_error())? {
        GpuSelection::Gpu { device, pci_bus_id } => match runtime {
            Some(runtime) => Ok(Some(Gpu {
                runtime,
                device,
                pci_bus_id,
            })),
            None => Err(Error::internal("a GPU was selected without a GPU runtime")),
        },
        GpuSelection::NoGpu { .. } if nic_hint(cfg).is_some() => Ok(None),
        GpuSelection::NoGpu { hip_error: 0 } => Err(Error::new(
            OpError::NicNotFound,
            "no GPU to choose a NIC by: set nicHint to the RDMA device to use",
        )),
        GpuSelection::NoGpu { hip_error } => Err(Error::with_hip(
            OpError::RdmaError,
            hip_error,
            "no usable GPU (hipGetDevice failed) and no nicHint",
        )),
    }
}

/// Choose the NIC: the hinted device closest to the GPU by PCIe distance; without a GPU (or without a
/// topology) the single device that `nicHint` names.
fn choose_nic(lib: &Arc<verbs::Lib>, cfg: &InitConfig, gpu: Option<&Gpu>) -> Result<String> {
    let hint = nic_hint(cfg);
    let candidates = verbs::list_devices(lib, hint).map_err(Error::from)?;
    let gpu_bus = gpu.and_then(|g| g.pci_bus_id.clone());
    if let Some(bus) = gpu_bus {
        let best = candidates
            .iter()
            .filter_map(|d| {
                d.pci_bus_id
                    .as_deref()
                    .map(|b| (verbs::pci_distance(&bus, b), d))
            })
            .min_by_key(|(dist, _)| *dist);
        if let Some((dist, d)) = best {
            tracing::info!(nic = %d.name, gpu_bus = %bus, dist, "NIC chosen by PCIe distance");
            return Ok(d.name.clone());
        }
    }
    let Some(hint) = hint else {
        return Err(Error::new(
            OpError::NicNotFound,
            "no GPU to choose a NIC by: set nicHint to the RDMA device to use",
        ));
    };
    let names: Vec<&str> = hint
        .split(',')
        .map(|s| s.trim_start_matches([' ', '\t']))
        .collect();
    if names.len() != 1 {
        return Err(Error::new(
            OpError::NicNotFound,
            "without a GPU, nicHint must name a single RDMA device",
        ));
    }
    match candidates.iter().find(|d| d.name == names[0]) {
        Some(d) => Ok(d.name.clone()),
        None => Err(Error::new(
            OpError::NicNotFound,
            format!("RDMA device {:?} not found or has no active port", names[0]),
        )),
    }
}

impl Runtime {
    fn build(cfg: InitConfig, lib: Arc<verbs::Lib>, gpu: Option<Gpu>) -> Result<Arc<Runtime>> {
        let nic = choose_nic(&lib, &cfg, gpu.as_ref())?;
        let device = Device::open(&lib, &nic).map_err(Error::from)?;
        let n = cfg.env.max_transfers;
        let mut connections = Vec::with_capacity(n);
        for i in 0..n {
            connections.push(ConnectionHandle::spawn(
                format!("hipobj-qp-{i:02}"),
                &device,
            )?);
        }
        let app_connection = ConnectionHandle::spawn("hipobj-qp-app".into(), &device)?;
        let stager = match &gpu {
            Some(g) => Some(StagerHandle::spawn(g.runtime.clone(), g.device)?),
            None => None,
        };
        tracing::info!(nic = %nic, connections = n, gpu = gpu.as_ref().map(|g| g.device), "hipObject initialized");
        Ok(Arc::new(Runtime {
            env: cfg.env,
            pool: Pool::new(n),
            connections,
            app_connection,
            registry: Registry::new(),
            stager,
            gpu,
            device,
        }))
    }

    /// The RDMA device in use.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Settings read from the environment at init.
    pub fn env(&self) -> &EnvConfig {
        &self.env
    }

    /// Register `[ptr, ptr + size)`; arguments already checked for NULL, 0, size and wrap.
    pub fn register(self: &Arc<Self>, ptr: usize, size: usize, kind: MemoryKind) -> Result<()> {
        if self.registry.contains(ptr) {
            return Err(already_registered(ptr));
        }
        let buffer = match kind {
            MemoryKind::Host => self.register_host(ptr, size)?,
            MemoryKind::Device => self.register_device(ptr, size)?,
        };
        let entry = Entry::new(ptr, size, buffer);
        supervisor()?.ask(|answer| SupMsg::Publish {
            runtime: self.clone(),
            entry,
            answer,
        })?
    }

    fn register_host(&self, ptr: usize, size: usize) -> Result<Buffer> {
        // SAFETY: the application keeps [ptr, ptr + size) allocated until it deregisters the buffer
        // (the API's documented contract); the MR is dropped at deregistration or shutdown.
        let mr = unsafe { self.device.register(ptr, size, mr_access()) }.map_err(Error::from)?;
        Ok(Buffer::new(BufferKind::Host, ptr, mr, None, None))
    }

    fn register_device(&self, ptr: usize, size: usize) -> Result<Buffer> {
        let Some(gpu) = &self.gpu else {
            // No GPU runtime: the pointer can only be host memory.
            return self.register_host(ptr, size);
        };
        match gpu.runtime.classify_pointer(ptr) {
            PointerKind::Device { .. } => {}
            PointerKind::Host | PointerKind::Unknown => return self.register_host(ptr, size),
        }
        let range = gpu
            .runtime
            .address_range(ptr)
            .map_err(|e| e.to_error(OpError::InvalidValue))?;
        if !range.contains(ptr, size) {
            return Err(Error::invalid(
                "the buffer runs past the end of its HIP allocation",
            ));
        }
        // Direct: dmabuf export + ibv_reg_dmabuf_mr.
        match gpu.runtime.export_dmabuf(ptr, size) {
            Ok(hip::DmabufExport { fd, offset }) => {
                use std::os::fd::AsRawFd;
                // SAFETY: the dmabuf covers [ptr, ptr + size) of a live HIP allocation that the
                // application keeps until it deregisters; the fd stays open while the MR lives.
                let mr = unsafe {
                    self.device.register_dmabuf(
                        offset,
                        size,
                        ptr as u64,
                        fd.as_raw_fd(),
                        mr_access(),
                    )
                };
                match mr {
                    Ok(mr) => {
                        return Ok(Buffer::new(
                            BufferKind::DeviceDirect,
                            ptr,
                            mr,
                            None,
                            Some(fd),
                        ))
                    }
                    Err(e) => tracing::debug!("ibv_reg_dmabuf_mr failed: {e}"),
                }
            }
            Err(e) => tracing::debug!("dmabuf export failed: {e}"),
        }
        if self.env.require_gpu_direct {
            return Err(Error::rdma(
                "GPU-direct registration failed and HIPOBJ_REQUIRE_GPU_DIRECT forbids host staging",
            ));
        }
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                "GPU-direct registration failed; device buffers are staged through host memory (not GPU-direct)"
            )
        });
        let staging = gpu
            .runtime
            .alloc_host(size)
            .map_err(|e| e.to_error(OpError::RdmaError))?;
        // SAFETY: the staging buffer is owned by the Buffer built below, whose fields drop the MR
        // before the staging memory.
        let mr = unsafe { self.device.register(staging.addr(), size, mr_access()) }
            .map_err(Error::from)?;
        Ok(Buffer::new(
            BufferKind::DeviceStaged,
            ptr,
            mr,
            Some(staging),
            None,
        ))
    }

    /// Deregister the registration whose base is `ptr`.
    pub fn deregister(self: &Arc<Self>, ptr: usize) -> Result<()> {
        supervisor()?.ask(|answer| SupMsg::Retire {
            runtime: self.clone(),
            base: ptr,
            answer,
        })?
    }

    /// Find `[ptr + offset, + size)` inside a registration and start using it.
    fn use_range(&self, ptr: usize, size: usize, offset: u64) -> Result<UseGuard<Buffer>> {
        let entry = self
            .registry
            .lookup(ptr)
            .ok_or_else(|| not_registered(ptr))?;
        let fits = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(size))
            .is_some_and(|end| end <= entry.len());
        if !fits {
            return Err(Error::invalid(format!(
                "bytes {offset}..{offset}+{size} are not inside the {}-byte registration",
                entry.len()
            )));
        }
        Entry::try_use(&entry).map_err(|e| match e {
            UseError::Retired => not_registered(ptr),
            UseError::Pending => {
                Error::busy("a staging copy of this buffer that timed out is still running")
            }
        })
    }

    fn stage(
        &self,
        guard: UseGuard<Buffer>,
        dir: CopyDirection,
        offset: usize,
        size: usize,
    ) -> Result<UseGuard<Buffer>> {
        if guard.entry().payload().kind() != BufferKind::DeviceStaged {
            return Ok(guard);
        }
        let stager = self
            .stager
            .as_ref()
            .ok_or_else(|| Error::internal("staged buffer without a stager"))?;
        stager.copy(
            guard,
            dir,
            offset,
            size,
            Duration::from_millis(self.env.stage_timeout_ms),
        )
    }

    /// `hipObjGet`/`hipObjPut` after the argument checks of the ffi layer.
    pub fn transfer(
        &self,
        kind: TransferKind,
        ptr: usize,
        size: usize,
        offset: u64,
        ops: &mut dyn S3Ops,
    ) -> Result<()> {
        let guard = self.use_range(ptr, size, offset)?;
        let offset = offset as usize; // fits: use_range checked offset + size <= len
        let wait = if in_callback() { Wait::No } else { Wait::Block };
        let lease = Pool::acquire(&self.pool, wait).map_err(|e| match e {
            AcquireError::Busy => {
                Error::busy("every RDMA connection is in use and a callback may not wait")
            }
            AcquireError::Closed => Error::not_initialized(),
        })?;
        let guard = match kind {
            TransferKind::Put => self.stage(guard, CopyDirection::DeviceToHost, offset, size)?,
            TransferKind::Get => guard,
        };
        let conn = self
            .connections
            .get(lease.slot())
            .ok_or_else(|| Error::internal("lease out of range"))?;
        let buffer = guard.entry().payload();
        let outcome = exchange(
            conn,
            buffer.rkey(),
            buffer.remote_addr(offset),
            size as u64,
            ops,
        );
        if let Err(e) = &outcome {
            tracing::debug!(
                slot = lease.slot(),
                "transfer failed ({e}); replacing its QP"
            );
            if let Err(re) = conn.replace() {
                tracing::warn!("could not replace a failed connection's QP: {re}");
            }
        }
        drop(lease);
        outcome?;
        match (kind, buffer.kind()) {
            (TransferKind::Get, BufferKind::DeviceStaged) => {
                self.stage(guard, CopyDirection::HostToDevice, offset, size)?;
            }
            (TransferKind::Get, BufferKind::DeviceDirect) => {
                if let Some(gpu) = &self.gpu {
                    gpu.runtime
                        .make_visible_after_rdma_write(gpu.device)
                        .map_err(|e| e.to_error(OpError::RdmaError))?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `hipObjBufSync` after the argument checks of the ffi layer.
    pub fn sync(&self, ptr: usize, size: usize, offset: u64, dir: SyncDirection) -> Result<()> {
        let guard = self.use_range(ptr, size, offset)?;
        let dir = match dir {
            SyncDirection::ToHost => CopyDirection::DeviceToHost,
            SyncDirection::ToDevice => CopyDirection::HostToDevice,
        };
        self.stage(guard, dir, offset as usize, size).map(drop)
    }

    /// `hipObjGetRdmaToken`: the 88-hex token for `[ptr, ptr + size)` on the dedicated connection.
    pub fn mint_token(&self, ptr: usize, size: usize) -> Result<String> {
        let guard = self.use_range(ptr, size, 0)?;
        let buffer = guard.entry().payload();
        let token = self
            .app_connection
            .mint(buffer.rkey(), buffer.remote_addr(0), size as u64)?;
        Ok(token.encode_hex())
    }

    /// `hipObjParseRdmaReply` with a `428:<token>` reply: pair the dedicated connection (rule 5.3).
    pub fn apply_reply(&self, reply: &Reply) -> Result<()> {
        match reply {
            Reply::PairingNeeded(server) => self.app_connection.pair(*server).map(drop),
            _ => Ok(()),
        }
    }

    /// Connections not leased now (for tests and diagnostics).
    pub fn free_connections(&self) -> usize {
        self.pool.free_count()
    }

    /// How the registration based at `ptr` is reached by the NIC, if there is one.
    pub fn buffer_kind(&self, ptr: usize) -> Option<BufferKind> {
        self.registry.lookup(ptr).map(|e| e.payload().kind())
    }

    /// Registrations now.
    pub fn registrations(&self) -> usize {
        self.registry.len()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        tracing::debug!("hipObject runtime released");
    }
}

/// One transfer's request/reply exchange on a leased connection (PROTOCOL.md section 5).
fn exchange(
    conn: &ConnectionHandle,
    rkey: u32,
    addr: u64,
    len: u64,
    ops: &mut dyn S3Ops,
) -> Result<()> {
    let mut paired_here = false;
    let mut reply_buf = [0u8; REPLY_BUFFER_LEN];
    for _request in 0..MAX_REQUESTS {
        let token = conn.mint(rkey, addr, len)?.encode_hex();
        let status = {
            let _cb = CallbackGuard::enter();
            ops.send_request(&token)
        };
        if status != 0 {
            return Err(Error::s3(format!("sendRequest failed ({status})")));
        }
        let n = {
            let _cb = CallbackGuard::enter();
            ops.recv_reply(&mut reply_buf)
        }
        .map_err(|status| Error::s3(format!("recvReply failed ({status})")))?;
        let raw = reply_buf
            .get(..n)
            .ok_or_else(|| Error::s3("recvReply reported more bytes than the buffer holds"))?;
        let reply = Reply::parse(raw).map_err(|_| {
            Error::s3(format!(
                "malformed x-amz-rdma-reply {:?}",
                String::from_utf8_lossy(raw)
            ))
        })?;
        match reply {
            Reply::PairingNeeded(server) => {
                if paired_here {
                    return Err(Error::rdma(
                        "the server asked to pair again a QP it paired in this transfer",
                    ));
                }
                if conn.pair(server)? == PairOutcome::Paired {
                    paired_here = true;
                }
            }
            Reply::Done(server) => {
                return if conn.matches(server)? {
                    Ok(())
                } else {
                    Err(Error::s3("the 200 reply names another QP or pairing"))
                };
            }
            Reply::Code(200 | 204 | 206) => return Ok(()),
            Reply::Code(code) => return Err(Error::s3(format!("the server answered {code}"))),
        }
    }
    Err(Error::rdma("no transfer after three requests"))
}

fn not_registered(ptr: usize) -> Error {
    Error::new(
        OpError::BufNotRegistered,
        format!("{ptr:#x} is not the base of a registered buffer"),
    )
}

fn already_registered(ptr: usize) -> Error {
    Error::new(
        OpError::BufAlreadyRegistered,
        format!("{ptr:#x} is already registered"),
    )
}

// ---------------------------------------------------------------------------------------------
// The supervisor actor.

enum SupMsg {
    Init {
        cfg: InitConfig,
        lib: Arc<verbs::Lib>,
        gpu: Option<Gpu>,
        answer: Answer<Result<()>>,
    },
    Shutdown {
        answer: Answer<()>,
    },
    Publish {
        runtime: Arc<Runtime>,
        entry: Arc<Entry<Buffer>>,
        answer: Answer<Result<()>>,
    },
    Retire {
        runtime: Arc<Runtime>,
        base: usize,
        answer: Answer<Result<()>>,
    },
}

struct SupervisorHandle {
    inbox: Sender<SupMsg>,
}

impl SupervisorHandle {
    fn ask<T>(&self, make: impl FnOnce(Answer<T>) -> SupMsg) -> Result<T> {
        request(&self.inbox, make).map_err(|_| Error::internal("the supervisor has stopped"))
    }
}

fn supervisor() -> Result<&'static SupervisorHandle> {
    static SUPERVISOR: OnceLock<std::result::Result<SupervisorHandle, String>> = OnceLock::new();
    SUPERVISOR
        .get_or_init(|| {
            let (tx, rx) = unbounded();
            std::thread::Builder::new()
                .name("hipobj-sup".into())
                .spawn(move || Supervisor.run(rx))
                .map(|_| SupervisorHandle { inbox: tx })
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::internal(format!("cannot start the supervisor thread: {e}")))
}

struct Supervisor;

impl Supervisor {
    fn run(self, inbox: Receiver<SupMsg>) {
        while let Ok(msg) = inbox.recv() {
            match msg {
                SupMsg::Init {
                    cfg,
                    lib,
                    gpu,
                    answer,
                } => {
                    let r = LIFECYCLE
                        .init(|| Runtime::build(cfg, lib, gpu))
                        .map(drop)
                        .map_err(|e| match e {
                            InitError::AlreadyInitialized => Error::new(
                                OpError::AlreadyInitialized,
                                "hipObject is already initialized",
                            ),
                            InitError::Failed(e) => e,
                        });
                    answer.send(r);
                }
                SupMsg::Shutdown { answer } => {
                    if let Some(old) = LIFECYCLE.shutdown() {
                        old.pool.close();
                        tracing::info!(
                            "hipObject shut down; resources go when the last call returns"
                        );
                    }
                    answer.send(());
                }
                SupMsg::Publish {
                    runtime,
                    entry,
                    answer,
                } => {
                    let r = runtime
                        .registry
                        .insert(entry)
                        .map_err(|e| already_registered(e.base()));
                    answer.send(r);
                }
                SupMsg::Retire {
                    runtime,
                    base,
                    answer,
                } => {
                    let r = runtime
                        .registry
                        .remove(base)
                        .map(drop)
                        .map_err(|e| match e {
                            RemoveError::NotRegistered => not_registered(base),
                            RemoveError::Busy => Error::busy(
                                "the buffer is in use or a staging copy of it still runs",
                            ),
                        });
                    answer.send(r);
                }
            }
        }
    }
}
