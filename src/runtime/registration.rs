//! Registering and deregistering buffers, and finding the registration a call names.

use super::supervisor::{fault, supervisor};
use super::{MemoryKind, Runtime};
use crate::error::{Error, OpError, Result};
use crate::hip::{self, PointerKind};
use crate::registry::{Buffer, BufferKind, Dmabuf};
use hipobj_actors::registry::UseGuard;
use hipobj_actors::supervisor::{DeregisterError, RegisterError};
use hipobj_actors::transfer::{self, Refused};
use std::sync::Arc;

impl Runtime {
    /// Register `[ptr, ptr + size)`; arguments already checked for NULL, 0, size and wrap.
    pub fn register(self: &Arc<Self>, ptr: usize, size: usize, kind: MemoryKind) -> Result<()> {
        if self.registry.contains(ptr) {
            return Err(already_registered(ptr));
        }
        // The supervisor reserves the base; the pinning runs here, on the caller's thread.
        supervisor()?
            .register(self, ptr, size, || match kind {
                MemoryKind::Host => self.register_host(ptr, size),
                MemoryKind::Device => self.register_device(ptr, size),
            })
            .map_err(|e| match e {
                RegisterError::AlreadyRegistered => already_registered(ptr),
                RegisterError::NotInitialized => Error::not_initialized(),
                RegisterError::Pin(e) => e,
                RegisterError::Supervisor(f) => fault(f),
            })
    }

    fn register_host(&self, ptr: usize, size: usize) -> Result<Buffer> {
        let rail = self.rails.first();
        // SAFETY: the application keeps [ptr, ptr + size) allocated until it deregisters the buffer
        // (the API's documented contract); the MR is dropped at deregistration or shutdown.
        let mr = unsafe {
            rail.device
                .register(ptr, size, rail.protection.registration_access())
        }
        .map_err(Error::from)?;
        Ok(Buffer::new(
            BufferKind::Host,
            ptr,
            mr,
            None,
            None,
            self.device_count(),
        ))
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
        hip::check_inside_allocation(gpu.runtime.as_ref(), ptr, size)?;
        // Direct: dmabuf export + ibv_reg_dmabuf_mr.
        match gpu.runtime.export_dmabuf(ptr, size) {
            Ok(hip::DmabufExport { fd, offset }) => {
                use std::os::fd::AsRawFd;
                let rail = self.rails.first();
                // SAFETY: the dmabuf covers [ptr, ptr + size) of a live HIP allocation that the
                // application keeps until it deregisters; the fd stays open while the MR lives.
                let mr = unsafe {
                    rail.device.register_dmabuf(
                        offset,
                        size,
                        ptr as u64,
                        fd.as_raw_fd(),
                        rail.protection.registration_access(),
                    )
                };
                match mr {
                    Ok(mr) => {
                        return Ok(Buffer::new(
                            BufferKind::DeviceDirect,
                            ptr,
                            mr,
                            None,
                            Some(Dmabuf { fd, offset }),
                            self.device_count(),
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
        let rail = self.rails.first();
        // SAFETY: the staging buffer is owned by the Buffer built below, whose fields drop the MR
        // before the staging memory.
        let mr = unsafe {
            rail.device
                .register(staging.addr(), size, rail.protection.registration_access())
        }
        .map_err(Error::from)?;
        Ok(Buffer::new(
            BufferKind::DeviceStaged,
            ptr,
            mr,
            Some(staging),
            None,
            self.device_count(),
        ))
    }

    /// Deregister the registration whose base is `ptr`.
    pub fn deregister(self: &Arc<Self>, ptr: usize) -> Result<()> {
        let retired = supervisor()?.deregister(self, ptr).map_err(|e| match e {
            DeregisterError::NotRegistered => not_registered(ptr),
            DeregisterError::Busy => {
                Error::busy("the buffer is in use or a staging copy of it still runs")
            }
            DeregisterError::NotInitialized => Error::not_initialized(),
            DeregisterError::Supervisor(f) => fault(f),
        })?;
        // The unpinning (ibv_dereg_mr, the dmabuf and staging memory) happens here, on the caller's
        // thread, when this was the last reference.
        drop(retired);
        Ok(())
    }

    /// Find `[ptr + offset, + size)` inside a registration and start using it.
    pub(super) fn use_range(
        &self,
        ptr: usize,
        size: usize,
        offset: u64,
    ) -> Result<UseGuard<Buffer>> {
        let on_first = super::transfer::OnRail::new(self, 0, self.rails.first());
        transfer::use_range(&on_first, ptr, size, offset)
    }
}

/// The error of a call that the transfer composition (`hipobj_actors::transfer`) refused.
pub(super) fn refusal(why: Refused, ptr: usize, size: usize, offset: u64) -> Error {
    match why {
        Refused::NotRegistered => not_registered(ptr),
        Refused::OutOfRange => Error::invalid(format!(
            "bytes {offset}..{offset}+{size} are not inside the registration at {ptr:#x}"
        )),
        Refused::Pending => {
            Error::busy("a staging copy of this buffer that timed out is still running")
        }
        Refused::Busy => Error::busy("every RDMA connection is in use and a callback may not wait"),
        Refused::Closed => Error::not_initialized(),
    }
}

pub(super) fn not_registered(ptr: usize) -> Error {
    Error::new(
        OpError::BufNotRegistered,
        format!("{ptr:#x} is not the base of a registered buffer"),
    )
}

pub(super) fn already_registered(ptr: usize) -> Error {
    Error::new(
        OpError::BufAlreadyRegistered,
        format!("{ptr:#x} is already registered"),
    )
}
