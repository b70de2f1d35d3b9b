//! What hipObject keeps for each registered buffer: the NIC registration (its access rights are
//! `pool::Protection::registration_access`) and, for a device buffer
//! that the NIC cannot reach directly, the host staging buffer that stands in for it. The set of
//! registrations itself is `hipobj_actors::registry::Registry<Buffer>`.

use crate::error::{Error, OpError, Result};
use crate::hip::HostBuffer;
use crate::verbs::{Access, Device, Mr};
use hipobj_actors::registry::{Entry, UseError, UseGuard};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Live registrations of this process (tests check nothing leaks across init/shutdown).
pub static LIVE_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// Start a call's use of a registration: `hipObjBufNotRegistered` once it is retired,
/// `hipObjBusy` while a staging copy of it that timed out is still running.
pub fn start_use<E>(entry: &Arc<Entry<E>>) -> Result<UseGuard<E>> {
    Entry::try_use(entry).map_err(|e| match e {
        UseError::Retired => Error::new(
            OpError::BufNotRegistered,
            format!("{:#x} is not the base of a registered buffer", entry.base()),
        ),
        UseError::Pending => {
            Error::busy("a staging copy of this buffer that timed out is still running")
        }
    })
}

/// How a buffer is reached by the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// Host memory registered as it is (`hipObjBufRegisterHost`, or host memory given to
    /// `hipObjBufRegister`).
    Host,
    /// Device memory registered directly through dmabuf.
    DeviceDirect,
    /// Device memory staged through a host buffer that the NIC reaches instead.
    DeviceStaged,
}

/// A dma-buf a device registration was made from, kept open while registered.
pub struct Dmabuf {
    pub fd: OwnedFd,
    /// Where the registration starts in the dma-buf.
    pub offset: u64,
}

/// One registration: made on the runtime's first device at once, and on each other device the
/// first time a transfer uses that device (`mr_on`). Fields drop in order: the NIC registrations
/// go before the memory they cover.
pub struct Buffer {
    kind: BufferKind,
    base: usize,
    mr: Mr,
    /// The registrations on the runtime's other devices (index 0: its second device), made on
    /// first use.
    more: Box<[OnceLock<Mr>]>,
    staging: Option<HostBuffer>,
    dmabuf: Option<Dmabuf>,
}

impl Buffer {
    /// `mr` is the registration on the runtime's first device; `devices` how many it uses.
    pub fn new(
        kind: BufferKind,
        base: usize,
        mr: Mr,
        staging: Option<HostBuffer>,
        dmabuf: Option<Dmabuf>,
        devices: usize,
    ) -> Buffer {
        LIVE_BUFFERS.fetch_add(1, Ordering::Relaxed);
        let more = (1..devices.max(1)).map(|_| OnceLock::new()).collect();
        Buffer {
            kind,
            base,
            mr,
            more,
            staging,
            dmabuf,
        }
    }

    pub fn kind(&self) -> BufferKind {
        self.kind
    }

    /// The caller's address of the registration (device memory for a staged one).
    pub fn base(&self) -> usize {
        self.base
    }

    /// The registration's own rkey on the first device: it grants remote access only on a
    /// device without memory windows (`pool::Protection`).
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// The NIC registration on the first device.
    pub fn mr(&self) -> &Mr {
        &self.mr
    }

    /// The registration on the runtime's device number `rail` (`device`, registered with
    /// `access` now if this is the first transfer of the buffer there). Registering on a device
    /// costs what registering did (pinning is shared, the translation tables are not), so it is
    /// paid only on devices a transfer uses.
    pub fn mr_on(&self, rail: usize, device: &Arc<Device>, access: Access) -> Result<&Mr> {
        let Some(index) = rail.checked_sub(1) else {
            return Ok(&self.mr);
        };
        let slot = self
            .more
            .get(index)
            .ok_or_else(|| Error::internal(format!("no device {rail} for this registration")))?;
        if let Some(mr) = slot.get() {
            return Ok(mr);
        }
        let mr = self.register_on(device, access)?;
        tracing::debug!(
            device = device.name(),
            base = self.base,
            "registered on another device"
        );
        // Another transfer may have registered it meanwhile: then ours is dropped here.
        let _ = slot.set(mr);
        slot.get()
            .ok_or_else(|| Error::internal("a registration vanished while it was made"))
    }

    /// Register the memory the first device's registration covers again, on `device`.
    fn register_on(&self, device: &Arc<Device>, access: Access) -> Result<Mr> {
        let len = self.mr.len();
        let registered = match &self.dmabuf {
            // SAFETY: the dma-buf stays open, and its memory allocated, while this buffer lives
            // (the application's contract until it deregisters); the MR is dropped with the
            // buffer, before `dmabuf`.
            Some(d) => unsafe {
                device.register_dmabuf(d.offset, len, self.base as u64, d.fd.as_raw_fd(), access)
            },
            // SAFETY: the same bytes the first registration covers (the caller's host memory or
            // our staging buffer), alive while this buffer lives; the MR is dropped first.
            None => unsafe { device.register(self.remote_addr(0) as usize, len, access) },
        };
        registered.map_err(Error::from)
    }

    /// The address a token names for `offset` bytes into the registration: the caller's pointer for a
    /// direct registration, the staging buffer for a staged one.
    pub fn remote_addr(&self, offset: usize) -> u64 {
        let start = match &self.staging {
            Some(s) => s.addr(),
            None => self.base,
        };
        (start as u64).wrapping_add(offset as u64)
    }

    /// For a staged buffer: (device address, staging address) at `offset`.
    pub fn staging_pair(&self, offset: usize) -> Option<(usize, usize)> {
        self.staging
            .as_ref()
            .map(|s| (self.base + offset, s.addr() + offset))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        LIVE_BUFFERS.fetch_sub(1, Ordering::Relaxed);
    }
}
