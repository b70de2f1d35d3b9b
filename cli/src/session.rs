//! hipObject through its Rust API (`hipobj::runtime`): one initialised runtime per command, and
//! registered buffers (host memory, or GPU memory with `--gpu`).

use crate::gpu::Gpu;
use hipobj::client::failure::Failure;
use hipobj::client::rdma;
use hipobj::engine::Slice;
use hipobj::engine::{Buffers, Sink, Slot, Source};
use hipobj::error::Error;
use hipobj::hip::DeviceBuffer;
use hipobj::runtime::{self, InitConfig, MemoryKind, Runtime};
use std::io;
use std::sync::Arc;

/// An initialised hipObject; shut down on drop.
pub struct Session {
    runtime: Arc<Runtime>,
    gpu: Option<Arc<Gpu>>,
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
            let mut f = Failure::of_library(&e, "hipObject init");
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
            .map_err(|e| Failure::of_library(&e, "register buffer"))?;
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
        req: &mut rdma::RdmaRequest<'_>,
    ) -> Result<(), Error> {
        let slice = Slice {
            base: self.ptr,
            offset,
            len: size,
        };
        rdma::transfer(&self.runtime, slice, req)
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

/// A buffer of the command line as a slot of the engine's ring.
fn failure_to_io(f: Failure) -> io::Error {
    io::Error::other(f.to_string())
}

impl Slot for Registered {
    fn base(&self) -> usize {
        self.ptr()
    }

    fn load(&mut self, src: &dyn Source, pos: u64, len: usize) -> io::Result<()> {
        match self.host_bytes_mut(len) {
            Some(buf) => src.read_at(buf, pos),
            None => {
                let mut host = vec![0u8; len];
                src.read_at(&mut host, pos)?;
                self.fill(&host).map_err(failure_to_io)
            }
        }
    }

    fn store(&self, sink: &dyn Sink, pos: u64, len: usize) -> io::Result<()> {
        match self.host_bytes(len) {
            Some(b) => sink.write_at(b, pos),
            None => sink.write_at(&self.read(len).map_err(failure_to_io)?, pos),
        }
    }
}

impl Buffers for Session {
    fn slot(&self, len: usize) -> hipobj::error::Result<Box<dyn Slot>> {
        self.buffer(len)
            .map(|b| Box::new(b) as Box<dyn Slot>)
            .map_err(|f| Error::invalid(f.to_string()))
    }
}
