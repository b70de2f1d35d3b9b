//! The ring: a few reusable buffers, one per worker, each as large as one part: registered with
//! the runtime for RDMA ([`HostBuffers`]), or plain host memory for plain HTTP ([`PlainBuffers`]).

use super::io::{Sink, Source};
use super::Slice;
use crate::error::Result;
use crate::runtime::{MemoryKind, Runtime};
use std::io;
use std::sync::Arc;

/// One registered buffer a worker moves parts through.
pub trait Slot: Send {
    /// The base address of its registration (its bytes start there).
    fn base(&self) -> usize;
    /// Its first `len` bytes, as the slice of one transfer.
    fn slice(&self, len: usize) -> Slice {
        Slice {
            base: self.base(),
            offset: 0,
            len,
        }
    }
    /// Fill its first `len` bytes from `src` at `pos` (before an upload's transfer).
    fn load(&mut self, src: &dyn Source, pos: u64, len: usize) -> io::Result<()>;
    /// Write its first `len` bytes to `sink` at `pos` (after a download's transfer).
    fn store(&self, sink: &dyn Sink, pos: u64, len: usize) -> io::Result<()>;
}

/// Makes the ring's buffers (host memory here; the command line adds GPU memory).
pub trait Buffers: Sync {
    fn slot(&self, len: usize) -> Result<Box<dyn Slot>>;
}

/// Host memory registered with the runtime; deregistered on drop.
pub struct HostSlot {
    runtime: Arc<Runtime>,
    memory: Vec<u8>,
}

impl HostSlot {
    pub fn new(runtime: &Arc<Runtime>, len: usize) -> Result<HostSlot> {
        let memory = vec![0u8; len];
        runtime.register(memory.as_ptr() as usize, len, MemoryKind::Host)?;
        Ok(HostSlot {
            runtime: runtime.clone(),
            memory,
        })
    }

    fn bytes(&self, len: usize) -> io::Result<&[u8]> {
        bytes(&self.memory, len)
    }
}

/// The first `len` bytes of `memory`.
fn bytes(memory: &[u8], len: usize) -> io::Result<&[u8]> {
    memory
        .get(..len)
        .ok_or_else(|| io::Error::other("a part larger than its buffer"))
}

impl Slot for HostSlot {
    fn base(&self) -> usize {
        self.memory.as_ptr() as usize
    }

    fn load(&mut self, src: &dyn Source, pos: u64, len: usize) -> io::Result<()> {
        load(&mut self.memory, src, pos, len)
    }

    fn store(&self, sink: &dyn Sink, pos: u64, len: usize) -> io::Result<()> {
        sink.write_at(self.bytes(len)?, pos)
    }
}

/// Fill the first `len` bytes of `memory` from `src` at `pos`.
fn load(memory: &mut [u8], src: &dyn Source, pos: u64, len: usize) -> io::Result<()> {
    let buf = memory
        .get_mut(..len)
        .ok_or_else(|| io::Error::other("a part larger than its buffer"))?;
    src.read_at(buf, pos)
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        if let Err(e) = self.runtime.deregister(self.memory.as_ptr() as usize) {
            tracing::warn!("deregistering a ring buffer failed: {e}");
        }
    }
}

/// Host buffers of one runtime.
pub struct HostBuffers(pub Arc<Runtime>);

impl Buffers for HostBuffers {
    fn slot(&self, len: usize) -> Result<Box<dyn Slot>> {
        Ok(Box::new(HostSlot::new(&self.0, len)?))
    }
}

/// A ring buffer of plain host memory, registered with nothing.
struct PlainSlot {
    memory: Vec<u8>,
}

impl Slot for PlainSlot {
    fn base(&self) -> usize {
        self.memory.as_ptr() as usize
    }

    fn load(&mut self, src: &dyn Source, pos: u64, len: usize) -> io::Result<()> {
        load(&mut self.memory, src, pos, len)
    }

    fn store(&self, sink: &dyn Sink, pos: u64, len: usize) -> io::Result<()> {
        sink.write_at(bytes(&self.memory, len)?, pos)
    }
}

/// The ring of a plain-HTTP copy: host memory, unregistered (no RDMA runtime needed). A store run
/// with it gets slices of plain `Vec`s, which its worker alone touches while a request runs.
pub struct PlainBuffers;

impl Buffers for PlainBuffers {
    fn slot(&self, len: usize) -> Result<Box<dyn Slot>> {
        Ok(Box::new(PlainSlot {
            memory: vec![0u8; len],
        }))
    }
}
