//! hipObject through its Rust API (`hipobj::runtime`): one initialised runtime per command, and
//! registered buffers (host memory, or GPU memory with `--gpu`).

use crate::failure::Failure;
use crate::gpu::Gpu;
use hipobj::engine::Slice;
use hipobj::error::{Error, OpError};
use hipobj::hip::DeviceBuffer;
use hipobj::runtime::{self, InitConfig, MemoryKind, Runtime};
use std::sync::Arc;

/// An initialised hipObject; shut down on drop.
pub struct Session {
    runtime: Arc<Runtime>,
    gpu: Option<Arc<Gpu>>,
}

/// What a failed library call means for the user.
pub fn library_failure(e: &Error, what: &str) -> Failure {
    match e.code {
        OpError::NicNotFound => Failure::NoNic(format!("{what}: {}", e.detail)),
        _ => Failure::Transfer(format!("{what}: {e}")),
    }
}

impl Session {
    /// `hipObjInit` with `nicHint` = `nic`, `gpuDevice` = `gpu` (-1 without) and `max_transfers`
    /// RDMA connections (None: `HIPOBJ_MAX_TRANSFERS`'s).
    pub fn open_with(
        nic: Option<&str>,
        gpu: Option<i32>,
        max_transfers: Option<usize>,
    ) -> Result<Session, Failure> {
        // the library checks too; this says why in the user's terms
        let device = gpu.map(Gpu::open).transpose()?.map(Arc::new);
        let mut env = hipobj::env::EnvConfig::from_env();
        if let Some(n) = max_transfers {
            env.max_transfers = n;
        }
        let cfg = InitConfig::with_nics(nic, gpu, env);
        // Without --gpu every buffer is host memory; with named NICs nothing is left to choose
        // by a GPU's place either, so HIP is never loaded (its start took 0.3-1.6 s of a copy in
        // the lane).
        let started = if gpu.is_none() && runtime::names_one_nic(cfg.nic_hint.as_deref()) {
            runtime::init_without_gpu(cfg)
        } else {
            runtime::init(cfg)
        };
        if let Err(e) = started {
            let mut f = library_failure(&e, "hipObject init");
            if let (Failure::NoNic(m), None) = (&mut f, nic) {
                m.push_str(" (give --nic DEVICE; `hipobj info` lists them)");
            }
            return Err(f);
        }
        let runtime = runtime::current()
            .ok_or_else(|| Failure::Transfer("hipObject did not stay initialised".into()))?;
        Ok(Session {
            runtime,
            gpu: device,
        })
    }

    /// The initialised runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// RDMA connections (transfers at once).
    pub fn max_transfers(&self) -> usize {
        self.runtime.env().max_transfers
    }

    /// The RDMA devices in use, the preferred first (`rxe0,rxe2`).
    pub fn nic(&self) -> String {
        self.runtime.device_names()
    }

    /// The devices in use and, with several, what each carried and the failovers between them.
    pub fn nic_text(&self) -> String {
        let summary = runtime::RailStats::summary(&self.runtime.rail_stats());
        match summary.is_empty() {
            true => self.nic(),
            false => format!("{} [{summary}]", self.nic()),
        }
    }

    /// A registered buffer of `len` bytes (GPU memory with `--gpu`).
    pub fn buffer(&self, len: usize) -> Result<Registered, Failure> {
        let memory = match &self.gpu {
            Some(gpu) => Memory::Gpu(gpu.clone(), gpu.alloc(len)?),
            None => Memory::Host(vec![0u8; len]),
        };
        let (ptr, kind) = match &memory {
            Memory::Host(v) => (v.as_ptr() as usize, MemoryKind::Host),
            Memory::Gpu(_, d) => (d.addr(), MemoryKind::Device),
        };
        self.runtime
            .register(ptr, len, kind)
            .map_err(|e| library_failure(&e, "register buffer"))?;
        Ok(Registered {
            runtime: self.runtime.clone(),
            memory,
            ptr,
            len,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = runtime::shutdown() {
            eprintln!("hipobj: shutdown: {e}");
        }
    }
}

enum Memory {
    Host(Vec<u8>),
    Gpu(Arc<Gpu>, DeviceBuffer),
}

/// Memory registered with hipObject; deregistered on drop (before it is freed).
pub struct Registered {
    runtime: Arc<Runtime>,
    memory: Memory,
    ptr: usize,
    len: usize,
}

impl Registered {
    pub fn len(&self) -> usize {
        self.len
    }

    /// The registration's base address.
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// One RDMA transfer of `size` bytes at `offset` of this buffer.
    pub fn transfer(
        &self,
        offset: usize,
        size: usize,
        req: &mut crate::rdma::RdmaRequest<'_>,
    ) -> Result<(), Error> {
        let slice = Slice {
            base: self.ptr,
            offset,
            len: size,
        };
        crate::rdma::transfer(&self.runtime, slice, req)
    }

    /// Fill the start of the buffer from `data`.
    pub fn fill(&mut self, data: &[u8]) -> Result<(), Failure> {
        match &mut self.memory {
            Memory::Host(v) => {
                let dst = v
                    .get_mut(..data.len())
                    .ok_or_else(|| Failure::Transfer("data larger than the buffer".into()))?;
                dst.copy_from_slice(data);
                Ok(())
            }
            Memory::Gpu(gpu, d) => gpu.upload(d, data),
        }
    }

    /// The first `len` bytes of the buffer, on the host.
    pub fn read(&self, len: usize) -> Result<Vec<u8>, Failure> {
        match &self.memory {
            Memory::Host(v) => v
                .get(..len)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| Failure::Transfer("read past the buffer".into())),
            Memory::Gpu(gpu, d) => gpu.download(d, len),
        }
    }

    /// The host bytes without copying (host memory only).
    pub fn host_bytes(&self, len: usize) -> Option<&[u8]> {
        match &self.memory {
            Memory::Host(v) => v.get(..len),
            Memory::Gpu(..) => None,
        }
    }

    /// The host bytes to fill without copying (host memory only).
    pub fn host_bytes_mut(&mut self, len: usize) -> Option<&mut [u8]> {
        match &mut self.memory {
            Memory::Host(v) => v.get_mut(..len),
            Memory::Gpu(..) => None,
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Err(e) = self.runtime.deregister(self.ptr) {
            tracing::warn!("deregistering a buffer failed: {e}");
        }
    }
}
