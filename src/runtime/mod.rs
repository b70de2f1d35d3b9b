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
use hipobj_actors::registry::{Registry, UseGuard};
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
    // The batch queues first: each cancels what is left and waits for its workers, which use
    // this runtime's connections.
    crate::batch::table::close_all();
    if let Some(retired) = sup.shutdown().map_err(fault)? {
        tracing::info!("hipObject shut down; resources go when the last call returns");
        drop(retired);
    }
    Ok(())
}

/// A use of part of a registration ([`Runtime::use_registered`]); the use ends on drop.
pub struct RegistrationUse(#[allow(dead_code)] UseGuard<Buffer>);

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

    /// Bytes `offset .. offset + len` of the registration based at `ptr`: a use of the
    /// registration and the address of the bytes; refused when they leave it. While the use is
    /// held, `hipObjBufDeregister` of the buffer fails with `hipObjBusy`: it stays registered, so
    /// by the C API's contract (include/hipobj.h) its memory stays allocated.
    fn registered_bytes(
        &self,
        ptr: usize,
        offset: usize,
        len: usize,
    ) -> Result<(UseGuard<Buffer>, usize)> {
        let entry = self.registry.lookup(ptr).ok_or_else(|| {
            Error::new(OpError::BufNotRegistered, "no registration at this address")
        })?;
        let in_use = crate::registry::start_use(&entry)?;
        let buffer = entry.payload();
        offset
            .checked_add(len)
            .filter(|end| *end <= buffer.mr().len())
            .ok_or_else(|| Error::invalid(format!("{len} bytes at {offset} exceed the buffer")))?;
        let at = buffer.base() + offset;
        Ok((in_use, at))
    }

    /// A use of bytes `offset .. offset + len` of the registration based at `ptr`, held while
    /// a batch operation is queued or running: deregistering the buffer meanwhile answers
    /// `hipObjBusy`, so the memory the NIC may write stays registered until the operation ends.
    pub fn use_registered(&self, ptr: usize, offset: usize, len: usize) -> Result<RegistrationUse> {
        self.registered_bytes(ptr, offset, len)
            .map(|(in_use, _)| RegistrationUse(in_use))
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
        let (in_use, at) = self.registered_bytes(ptr, offset, len)?;
        if in_use.entry().payload().kind() == BufferKind::Host {
            // SAFETY: `at .. at + len` lies inside the registered host memory (checked by
            // `registered_bytes`). hipObject does not own that memory: the application keeps it
            // allocated while it is registered (hipObjBufRegisterHost's contract in
            // include/hipobj.h), the use we hold keeps it registered for this call, and by the
            // header's rule for concurrent calls no thread writes the bytes a call reads.
            return unsafe { crc_of_host_memory(at, len, algo) };
        }
        let gpu = self.gpu_of_device_memory()?;
        // SAFETY: `at .. + len` lies inside the registered device memory of the GPU this runtime
        // stages through (checked above). The application keeps that allocation alive while it
        // is registered (hipObjBufRegister's contract), and the use we hold keeps it registered.
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
        let (in_use, at) = self.registered_bytes(ptr, offset, len)?;
        if in_use.entry().payload().kind() == BufferKind::Host {
            // SAFETY: as in `crc_of_registered`: `at .. at + len` is registered host memory that
            // the application keeps allocated while registered, and the use we hold keeps it
            // registered for this call.
            return unsafe { copy_from_host_memory(at, dst) };
        }
        let gpu = self.gpu_of_device_memory()?;
        // SAFETY: as in `crc_of_registered`: `at .. + len` is registered device memory of the GPU
        // this runtime stages through, allocated while registered, registered while we use it.
        unsafe { crate::hip::read_device_memory(gpu.runtime.as_ref(), gpu.device, at, dst) }
            .map_err(|e| e.to_error(OpError::RdmaError))
    }

    /// Copy `src` into the registration based at `ptr`, from `offset`: host memory by memcpy,
    /// device memory (direct or staged) by the GPU runtime's host-to-device copy
    /// (`hip::write_device_memory`). A batch operation's bytes that came over plain HTTP.
    pub fn write_registered(&self, ptr: usize, offset: usize, src: &[u8]) -> Result<()> {
        let len = src.len();
        let (in_use, at) = self.registered_bytes(ptr, offset, len)?;
        if in_use.entry().payload().kind() == BufferKind::Host {
            // SAFETY: as in `crc_of_registered`: `at .. at + len` is registered host memory that
            // the application keeps allocated while registered, and the use we hold keeps it
            // registered for this call; by the batch API's rule the operation owns those bytes
            // until its event, so nothing else writes them meanwhile.
            return unsafe { copy_to_host_memory(src, at) };
        }
        let gpu = self.gpu_of_device_memory()?;
        // SAFETY: as in `read_registered`: registered device memory of the GPU this runtime
        // stages through, allocated while registered, registered while we use it, and the
        // operation's own until its event.
        unsafe { crate::hip::write_device_memory(gpu.runtime.as_ref(), gpu.device, at, src) }
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

/// Registered host bytes the CRC copies at a time (a cache-sized bounce).
const HOST_BOUNCE: usize = 256 << 10;

/// Copy the `dst.len()` bytes of host memory at `at` into `dst` through raw pointers. No reference
/// is formed over that memory: it is the application's, not ours, and a NIC may write it by DMA
/// meanwhile (which leaves plain bytes, whatever they are).
///
/// # Safety
/// `at .. at + dst.len()` must be host memory that stays allocated for the whole call, and no
/// thread may write it meanwhile (the C rule include/hipobj.h states for concurrent calls).
unsafe fn copy_from_host_memory(at: usize, dst: &mut [u8]) -> Result<()> {
    let len = dst.len();
    let dst_at = dst.as_mut_ptr() as usize;
    if at < dst_at.saturating_add(len) && dst_at < at.saturating_add(len) {
        return Err(Error::invalid(
            "the destination overlaps the registered bytes it would receive",
        ));
    }
    // SAFETY: the source is `len` bytes of allocated host memory that no thread writes meanwhile
    // (the caller's contract), read as plain bytes, valid whatever they hold; `dst` is an
    // exclusive borrow valid for `len` writes; the two do not overlap (checked above).
    unsafe { std::ptr::copy_nonoverlapping(at as *const u8, dst.as_mut_ptr(), len) };
    Ok(())
}

/// Copy `src` to `len` bytes of host memory at `at` that are not `src`'s.
///
/// # Safety
/// `at .. at + src.len()` must be allocated host memory that no other thread reads or writes
/// meanwhile.
unsafe fn copy_to_host_memory(src: &[u8], at: usize) -> Result<()> {
    let len = src.len();
    let src_at = src.as_ptr() as usize;
    if at < src_at.saturating_add(len) && src_at < at.saturating_add(len) {
        return Err(Error::invalid(
            "the source overlaps the registered bytes it would fill",
        ));
    }
    // SAFETY: the destination is `len` bytes of allocated host memory that nothing else touches
    // meanwhile (the caller's contract); `src` is a live slice of `len` bytes; the two do not
    // overlap (checked above).
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), at as *mut u8, len) };
    Ok(())
}

/// The CRC (`algo`) of `len` bytes of host memory at `at`, read through a bounce of at most
/// [`HOST_BOUNCE`] bytes at a time ([`copy_from_host_memory`]), never as a slice over that memory.
///
/// # Safety
/// As for [`copy_from_host_memory`], over `at .. at + len`.
unsafe fn crc_of_host_memory(at: usize, len: usize, algo: crate::checksum::CrcAlgo) -> Result<u64> {
    let mut bounce = vec![0u8; HOST_BOUNCE.min(len)];
    let mut digest = algo.digest();
    let mut done = 0usize;
    while done < len {
        let n = bounce.len().min(len - done);
        // SAFETY: `at + done .. + n` lies inside `at .. at + len` (the caller's contract covers
        // it); the bounce is ours.
        unsafe { copy_from_host_memory(at + done, &mut bounce[..n])? };
        digest.update(&bounce[..n]);
        done += n;
    }
    Ok(digest.finalize())
}

impl Drop for Runtime {
    fn drop(&mut self) {
        tracing::debug!("hipObject runtime released");
    }
}

#[cfg(test)]
mod host_memory_tests {
    use super::*;
    use crate::checksum::CrcAlgo;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn the_crc_through_the_bounce_is_the_crc_of_the_bytes() {
        // Several bounces and a partial last one, one bounce exactly, and nothing.
        for len in [2 * HOST_BOUNCE + 12_345, HOST_BOUNCE, 1, 0] {
            let bytes = pattern(len);
            for algo in CrcAlgo::PREFERRED {
                // SAFETY: `bytes` is allocated for the call and nothing else uses it.
                let crc = unsafe { crc_of_host_memory(bytes.as_ptr() as usize, len, algo) };
                assert_eq!(crc.ok(), Some(algo.of(&bytes)), "{algo} of {len} bytes");
            }
        }
    }

    #[test]
    fn a_copy_from_host_memory_is_byte_exact_and_never_overlapping() {
        let src = pattern(4096);
        let mut dst = vec![0u8; 1000];
        // SAFETY: `src` is allocated for the call; `dst` is another allocation.
        let copied = unsafe { copy_from_host_memory(src.as_ptr() as usize + 7, &mut dst) };
        assert!(copied.is_ok());
        assert_eq!(dst, src[7..1007]);
        let mut same = pattern(64);
        let at = same.as_ptr() as usize + 8;
        // SAFETY: `at .. + 32` lies inside `same`, allocated for the call; the overlap is
        // refused before anything is copied.
        let refused = unsafe { copy_from_host_memory(at, &mut same[..32]) };
        assert!(refused.is_err(), "an overlapping copy was made");
    }
}
