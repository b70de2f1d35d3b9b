//! What hipObject keeps for each registered buffer: the NIC registration (its access rights are
//! `pool::Protection::registration_access`) and, for a device buffer
//! that the NIC cannot reach directly, the host staging buffer that stands in for it. The set of
//! registrations itself is `hipobj_actors::registry::Registry<Buffer>`.

use crate::error::{Error, OpError, Result};
use crate::hip::HostBuffer;
use crate::verbs::Mr;
use hipobj_actors::registry::{Entry, UseError, UseGuard};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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

/// One registration. Fields drop in order: the NIC registration goes before the memory it covers.
pub struct Buffer {
    kind: BufferKind,
    base: usize,
    mr: Mr,
    staging: Option<HostBuffer>,
    _dmabuf: Option<OwnedFd>,
}

impl Buffer {
    pub fn new(
        kind: BufferKind,
        base: usize,
        mr: Mr,
        staging: Option<HostBuffer>,
        dmabuf: Option<OwnedFd>,
    ) -> Buffer {
        LIVE_BUFFERS.fetch_add(1, Ordering::Relaxed);
        Buffer {
            kind,
            base,
            mr,
            staging,
            _dmabuf: dmabuf,
        }
    }

    pub fn kind(&self) -> BufferKind {
        self.kind
    }

    /// The caller's address of the registration (device memory for a staged one).
    pub fn base(&self) -> usize {
        self.base
    }

    /// The registration's own rkey: it grants remote access only on a device without memory
    /// windows (`pool::Protection`).
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// The NIC registration (windows are bound over it).
    pub fn mr(&self) -> &Mr {
        &self.mr
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
