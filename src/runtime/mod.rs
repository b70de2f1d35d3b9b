//! The library's running state and its lifecycle.
//!
//! A process-wide **supervisor** actor (`hipobj-sup`) owns the lifecycle: it builds a [`Runtime`] on
//! `hipObjInit`, unpublishes it on `hipObjShutdown`, and is the only writer of each runtime's registry
//! snapshot. Calls find the current runtime without a lock ([`current`]) and hold an `Arc` to it until
//! they return, so a shutdown never waits for them: the runtime's QPs, registrations and threads are
//! released when the last `Arc` goes, and a new `hipObjInit` can publish a fresh runtime meanwhile.

mod rails;
mod registration;
mod select;
mod supervisor;
mod transfer;
mod v2;

use crate::env::EnvConfig;
use crate::error::{Error, OpError, Result};
use crate::hip::GpuRuntime;
use crate::pool::{AppConnection, PoolConnections, Protection};
use crate::registry::{Buffer, BufferKind};
use crate::stager::StagerHandle;
use crate::verbs::{self, Device};
use hipobj_actors::registry::{Entry, Registry};
use hipobj_actors::supervisor::InitError;
use rails::{Rail, Rails};
pub use rails::{RailStats, PORT_RECHECK};
pub use select::names_one_nic;
use select::{choose_nics, resolve_gpu, NicChoice};
use std::sync::Arc;
use supervisor::{fault, running_supervisor, supervisor, PUBLISHED};
pub use transfer::{release_token, reply_code};

/// What `hipObjInit` passes to the core after validating `hipObjConfig_t`.
#[derive(Clone, Debug, Default)]
pub struct InitConfig {
    /// HIP device index, or -1 for the calling thread's current device.
    pub gpu_device: i32,
    /// Comma-separated RDMA device names, `None` for any.
    pub nic_hint: Option<String>,
    pub env: EnvConfig,
}

impl InitConfig {
    /// A configuration that names the RDMA devices to use as one comma-separated list (the CLI's
    /// `--nic rxe0,rxe2`, Python's `Session(nic="rxe0,rxe2")`). With a GPU (`gpu_device` given)
    /// the list is `nicHint`: the set the GPU's nearest is chosen from, the others taking over
    /// when it fails. Without one, `nicHint` must name a single device (include/hipobj.h), so it
    /// names the first and the rest go ahead of `HIPOBJ_NICS`'s devices in `env.nics`.
    pub fn with_nics(
        nics: Option<&str>,
        gpu_device: Option<i32>,
        mut env: EnvConfig,
    ) -> InitConfig {
        let listed = crate::env::parse_nics(nics);
        let nic_hint = match (gpu_device, listed.split_first()) {
            (None, Some((first, rest))) => {
                let mut more = rest.to_vec();
                more.extend(env.nics.iter().filter(|n| !listed.contains(n)).cloned());
                env.nics = more;
                Some(first.clone())
            }
            _ => nics.map(str::to_owned),
        };
        InitConfig {
            gpu_device: gpu_device.unwrap_or(-1),
            nic_hint,
            env,
        }
    }
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

/// The GPU that an initialised runtime stages through and chose its NIC by.
struct Gpu {
    runtime: Arc<dyn GpuRuntime>,
    device: i32,
    pci_bus_id: Option<String>,
}

/// One initialised library instance.
pub struct Runtime {
    env: EnvConfig,
    // Field order is drop order: the buffers go before the devices they were registered on.
    registry: Registry<Buffer>,
    /// The RDMA devices, each with its connections (`rails`); the first is the preferred one.
    rails: Rails,
    stager: Option<StagerHandle>,
    gpu: Option<Gpu>,
}

/// The current runtime, if hipObject is initialised.
pub fn current() -> Option<Arc<Runtime>> {
    PUBLISHED.load()
}

/// Where `init` finds its GPU runtime.
pub(super) enum GpuSource {
    /// HIP (or CUDA) loaded from the system, as `hipObjInit` does.
    System,
    /// One the caller supplies.
    Given(Arc<dyn GpuRuntime>),
    /// None: host memory only.
    Without,
}

/// Initialise (the checks on `hipObjConfig_t` itself are done by the caller).
pub fn init(cfg: InitConfig) -> Result<()> {
    init_inner(cfg, GpuSource::System)
}

/// Initialise with a GPU runtime supplied by the caller instead of the HIP runtime loaded from the
/// system (for Rust users with their own GPU layer, and for tests with a simulated device).
pub fn init_with_gpu(cfg: InitConfig, gpu: Arc<dyn GpuRuntime>) -> Result<()> {
    init_inner(cfg, GpuSource::Given(gpu))
}

/// Initialise for host memory only, without loading a GPU runtime: loading and starting HIP took
/// 0.3-1.6 s of a `hipobj cp` in the lane, which a copy through host memory never needs.
/// `cfg.nic_hint` must name one device ([`names_one_nic`]: there is no GPU to choose a NIC by);
/// a `gpu_device` other than -1, and later any device memory, is refused as on a host without a
/// GPU.
pub fn init_without_gpu(cfg: InitConfig) -> Result<()> {
    init_inner(cfg, GpuSource::Without)
}

fn init_inner(cfg: InitConfig, gpu: GpuSource) -> Result<()> {
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
    // The runtime (16 QPs and their threads by default) is built on this thread; the supervisor
    // only hands out the build permit and publishes the result.
    supervisor()?
        .init(|| Runtime::build(cfg, lib, gpu))
        .map(drop)
        .map_err(|e| match e {
            InitError::AlreadyInitialized => Error::new(
                OpError::AlreadyInitialized,
                "hipObject is already initialized",
            ),
            InitError::Failed(e) => e,
            InitError::Supervisor(f) => fault(f),
        })
}

/// The RDMA device `init` would prefer for `nic_hint` and a GPU at `gpu_pci_bus_id` (`None`: no
/// GPU): the first of the same choice (`choose_nics`), without opening it (`hipobj info`).
pub fn nic_choice(
    lib: &Arc<verbs::Lib>,
    nic_hint: Option<&str>,
    gpu_pci_bus_id: Option<&str>,
) -> Result<String> {
    let cfg = InitConfig {
        gpu_device: -1,
        nic_hint: nic_hint.map(str::to_owned),
        env: EnvConfig::default(),
    };
    choose_nics(lib, &cfg, gpu_pci_bus_id)?
        .into_iter()
        .next()
        .map(|c| c.name)
        .ok_or_else(|| Error::new(OpError::NicNotFound, "no RDMA device to choose"))
}

/// Every RDMA device `init` would open, the preferred first, for the device list `nics` (as
/// [`InitConfig::with_nics`] takes it, and `HIPOBJ_NICS`) on a host without a GPU, by the same
/// rules, without opening them (`hipobj info`).
pub fn nic_choices(lib: &Arc<verbs::Lib>, nics: Option<&str>) -> Result<Vec<String>> {
    let cfg = InitConfig::with_nics(nics, None, EnvConfig::from_env());
    Ok(choose_nics(lib, &cfg, None)?
        .into_iter()
        .map(|c| c.name)
        .collect())
}

/// Shut down; a no-op when not initialised (nothing is started then). Does not wait for calls in
/// progress: the runtime is released here, or by the last call in flight when it returns.
pub fn shutdown() -> Result<()> {
    let Some(sup) = running_supervisor() else {
        return Ok(());
    };
    if let Some(retired) = sup.shutdown().map_err(fault)? {
        tracing::info!("hipObject shut down; resources go when the last call returns");
        drop(retired);
    }
    Ok(())
}

impl Runtime {
    fn build(cfg: InitConfig, lib: Arc<verbs::Lib>, gpu: Option<Gpu>) -> Result<Arc<Runtime>> {
        let gpu_bus = gpu.as_ref().and_then(|g| g.pci_bus_id.as_deref());
        let nics = choose_nics(&lib, &cfg, gpu_bus)?;
        let mut rails = Vec::with_capacity(nics.len());
        let mut first_error = None;
        for nic in &nics {
            match Self::open_rail(&lib, &cfg.env, nic) {
                Ok(rail) => rails.push(rail),
                // A device that cannot be opened (its port down now, say) is left out while
                // another can carry the transfers; with none, the first one's error is the call's.
                Err(e) => {
                    tracing::warn!(nic = %nic.name, "RDMA device not used: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        if rails.is_empty() {
            return Err(first_error.unwrap_or_else(|| Error::internal("no RDMA device chosen")));
        }
        let rails = Rails::new(rails)?;
        let stager = match &gpu {
            Some(g) => Some(StagerHandle::spawn(g.runtime.clone(), g.device)?),
            None => None,
        };
        let devices: Vec<&str> = rails.all().iter().map(|r| r.device.name()).collect();
        tracing::info!(
            nic = %devices.join(","),
            connections = cfg.env.max_transfers,
            gpu = gpu.as_ref().map(|g| g.device),
            gpu_platform = gpu.as_ref().map(|g| g.runtime.platform().to_string()),
            "hipObject initialized"
        );
        Ok(Arc::new(Runtime {
            env: cfg.env,
            registry: Registry::new(),
            rails,
            stager,
            gpu,
        }))
    }

    /// Open one device with its pool of `max_transfers` connections and its application
    /// connection.
    fn open_rail(lib: &Arc<verbs::Lib>, env: &EnvConfig, nic: &NicChoice) -> Result<Rail> {
        let device = Device::open(lib, &nic.name).map_err(Error::from)?;
        let protection = Protection::choose(&device, env)?;
        let n = env.max_transfers;
        let connections = PoolConnections::open(&device, protection, n, env.remote_inv)?;
        let app_connection = AppConnection::new(&device, protection)?;
        Ok(Rail::new(
            device,
            protection,
            connections,
            app_connection,
            nic.distance,
        ))
    }

    /// The preferred RDMA device (the first of [`Runtime::rail_stats`]).
    pub fn device(&self) -> &Arc<Device> {
        &self.rails.first().device
    }

    /// The names of the RDMA devices in use, the preferred first, comma-separated (`rxe0,rxe2`):
    /// what the CLI and Python say they use.
    pub fn device_names(&self) -> String {
        let names: Vec<&str> = self.rails.all().iter().map(|r| r.device.name()).collect();
        names.join(",")
    }

    /// How many RDMA devices this runtime uses.
    pub fn device_count(&self) -> usize {
        self.rails.all().len()
    }

    /// What each device has carried, its port state and its failovers, the preferred first.
    pub fn rail_stats(&self) -> Vec<RailStats> {
        self.rails.stats()
    }

    /// How transfers grant the server access on the preferred device (memory windows, or the
    /// registration's rkey).
    pub fn protection(&self) -> Protection {
        self.rails.first().protection
    }

    /// Settings read from the environment at init.
    pub fn env(&self) -> &EnvConfig {
        &self.env
    }

    /// Connections not leased now (for tests and diagnostics).
    pub fn free_connections(&self) -> usize {
        self.rails
            .all()
            .iter()
            .map(|r| r.connections.pool().free_count())
            .sum()
    }

    /// Calls blocked waiting for a free connection now (for tests and diagnostics).
    pub fn connection_waiters(&self) -> usize {
        self.rails
            .all()
            .iter()
            .map(|r| r.connections.pool().waiters())
            .sum()
    }

    /// How the registration based at `ptr` is reached by the NIC, if there is one.
    pub fn buffer_kind(&self, ptr: usize) -> Option<BufferKind> {
        self.registry.lookup(ptr).map(|e| e.payload().kind())
    }

    /// The length of the registration based at `ptr`, if there is one.
    pub fn registered_len(&self, ptr: usize) -> Option<usize> {
        self.registry.lookup(ptr).map(|e| e.payload().mr().len())
    }

    /// Bytes `offset .. offset + len` of the registration based at `ptr`: the registration (held,
    /// it stays registered while held) and the address of the bytes; refused when they leave it.
    fn registered_bytes(
        &self,
        ptr: usize,
        offset: usize,
        len: usize,
    ) -> Result<(Arc<Entry<Buffer>>, usize)> {
        let entry = self.registry.lookup(ptr).ok_or_else(|| {
            Error::new(OpError::BufNotRegistered, "no registration at this address")
        })?;
        let buffer = entry.payload();
        offset
            .checked_add(len)
            .filter(|end| *end <= buffer.mr().len())
            .ok_or_else(|| Error::invalid(format!("{len} bytes at {offset} exceed the buffer")))?;
        let at = buffer.base() + offset;
        Ok((entry, at))
    }

    /// The GPU whose device memory a registration that is not host memory is.
    fn gpu_of_device_memory(&self) -> Result<&Gpu> {
        self.gpu
            .as_ref()
            .ok_or_else(|| Error::invalid("device memory registered without a GPU runtime"))
    }

    /// The CRC (`algo`) of `len` bytes at `offset` of the registration based at `ptr`, read where
    /// they are: host memory in place, device memory (direct or staged) on the GPU itself,
    /// through a host bounce (`checksum::of_device_memory`). The check of one GET's landed bytes
    /// (docs/protocol.md section 15), and the checksum of an upload's part sent from there.
    pub fn crc_of_registered(
        &self,
        ptr: usize,
        offset: usize,
        len: usize,
        algo: crate::checksum::CrcAlgo,
    ) -> Result<u64> {
        let (entry, at) = self.registered_bytes(ptr, offset, len)?;
        if entry.payload().kind() == BufferKind::Host {
            // SAFETY: `at .. at + len` lies inside the registered host memory (checked by
            // `registered_bytes`), which the entry we hold keeps registered, hence alive, for
            // this call; the bytes are plain data, readable whatever they hold.
            let landed = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
            return Ok(algo.of(landed));
        }
        let gpu = self.gpu_of_device_memory()?;
        // SAFETY: `at .. + len` lies inside the registered device memory of the GPU this runtime
        // stages through (checked above), which the entry we hold keeps registered for this call.
        unsafe {
            crate::checksum::of_device_memory(
                gpu.runtime.as_ref(),
                gpu.device,
                at,
                len,
                algo,
                crate::checksum::DEVICE_BOUNCE,
            )
        }
        .map_err(|e| e.to_error(OpError::RdmaError))
    }

    /// Copy `dst.len()` bytes at `offset` of the registration based at `ptr` into `dst`: host
    /// memory by memcpy, device memory (direct or staged) by the GPU runtime's device-to-host
    /// copy (`hip::read_device_memory`). An upload's bytes that go through its ring.
    pub fn read_registered(&self, ptr: usize, offset: usize, dst: &mut [u8]) -> Result<()> {
        let len = dst.len();
        let (entry, at) = self.registered_bytes(ptr, offset, len)?;
        if entry.payload().kind() == BufferKind::Host {
            // SAFETY: as in `crc_of_registered`: `at .. at + len` is registered host memory,
            // kept alive by the entry we hold; `dst` is ours, so the two do not overlap.
            let src = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
            dst.copy_from_slice(src);
            return Ok(());
        }
        let gpu = self.gpu_of_device_memory()?;
        // SAFETY: `at .. + len` lies inside the registered device memory of the GPU this runtime
        // stages through (checked above), which the entry we hold keeps registered for this call.
        unsafe { crate::hip::read_device_memory(gpu.runtime.as_ref(), gpu.device, at, dst) }
            .map_err(|e| e.to_error(OpError::RdmaError))
    }

    /// The GPU runtime in use and the device it stages through (`None` without a GPU), for
    /// `hipobj info`.
    pub fn gpu(&self) -> Option<(crate::hip::GpuPlatform, i32)> {
        self.gpu.as_ref().map(|g| (g.runtime.platform(), g.device))
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
