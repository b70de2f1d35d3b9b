//! Memory regions: `Access` flags and `Mr` (deregistered on drop).

use std::ops::{BitOr, BitOrAssign};
use std::ptr::NonNull;
use std::sync::Arc;

use super::device::Device;
use super::error::VerbsError;
use super::sys;

/// `ibv_access_flags` for MRs and QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(2);
    pub const REMOTE_READ: Access = Access(4);
    /// `IBV_ACCESS_MW_BIND`: memory windows may be bound over the region.
    pub const MW_BIND: Access = Access(16);

    pub const fn empty() -> Access {
        Access(0)
    }
    pub const fn bits(self) -> u32 {
        self.0
    }
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

/// The host's page size: what a registration pins, and what file mappings and dmabuf export
/// ranges are aligned to (4096 where sysconf does not say).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// A registered memory region. Holds its `Device`; `Drop` deregisters it.
pub struct Mr {
    mr: NonNull<sys::ibv_mr>,
    addr: usize,
    len: usize,
    lkey: u32,
    rkey: u32,
    pub(crate) device: Arc<Device>,
}

// SAFETY: an MR is immutable after registration (keys and range are copied out); libibverbs
// allows `ibv_dereg_mr` from any thread (verbs(7), thread safety), and it is called once, in Drop.
unsafe impl Send for Mr {}
// SAFETY: `&Mr` only reads the copied keys and range.
unsafe impl Sync for Mr {}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .finish()
    }
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// The region's start as seen by RDMA (the iova for dmabuf regions).
    pub fn addr(&self) -> usize {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The device the region is registered on.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The `struct ibv_mr` (for binding memory windows over it).
    pub(crate) fn raw(&self) -> *mut sys::ibv_mr {
        self.mr.as_ptr()
    }

    fn from_raw(device: &Arc<Device>, mr: NonNull<sys::ibv_mr>, addr: usize, len: usize) -> Mr {
        // SAFETY: `mr` was just returned by a successful registration and is not yet shared.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Mr {
            mr,
            addr,
            len,
            lkey,
            rkey,
            device: Arc::clone(device),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by `Device::register*`, deregistered exactly once.
        let rc = unsafe { (self.device.lib().dereg_mr)(self.mr.as_ptr()) };
        if rc != 0 {
            let e = VerbsError::from_rc("ibv_dereg_mr", rc, "");
            tracing::warn!(addr = self.addr, len = self.len, error = %e, "deregistering memory failed");
        }
    }
}

impl Device {
    /// Registers `[addr, addr+len)` with `ibv_reg_mr`.
    ///
    /// # Safety
    /// `[addr, addr+len)` must stay valid (mapped, not freed) until the returned `Mr` is dropped;
    /// with REMOTE_WRITE (or a local READ target) the NIC writes it at any time while registered.
    pub unsafe fn register(
        self: &Arc<Self>,
        addr: usize,
        len: usize,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        if len == 0 {
            return Err(VerbsError::invalid(
                "ibv_reg_mr",
                "zero-length registration",
            ));
        }
        let Ok(c_access) = libc::c_int::try_from(access.bits()) else {
            return Err(VerbsError::invalid(
                "ibv_reg_mr",
                "access flags out of range",
            ));
        };
        // SAFETY: live PD; the caller guarantees the range (see above).
        let mr = unsafe {
            (self.lib().reg_mr)(self.pd.as_ptr(), addr as *mut libc::c_void, len, c_access)
        };
        match NonNull::new(mr) {
            Some(mr) => Ok(Mr::from_raw(self, mr, addr, len)),
            None => Err(VerbsError::last_os(
                "ibv_reg_mr",
                format!("{len} bytes at {addr:#x}"),
            )),
        }
    }

    /// Registers `len` bytes at `offset` of dma-buf `fd`, mapped at `iova`, with
    /// `ibv_reg_dmabuf_mr`. `Err` with errno `EOPNOTSUPP` when libibverbs lacks the symbol or the
    /// provider does not support it. The fd stays the caller's (the kernel holds its own
    /// reference to the dma-buf while registered).
    ///
    /// # Safety
    /// `fd` must be a dma-buf whose `[offset, offset+len)` stays allocated until the `Mr` drops.
    pub unsafe fn register_dmabuf(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        let Some(reg_dmabuf_mr) = self.lib().reg_dmabuf_mr else {
            return Err(VerbsError::new(
                "ibv_reg_dmabuf_mr",
                libc::EOPNOTSUPP,
                "libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34)",
            ));
        };
        if len == 0 {
            return Err(VerbsError::invalid(
                "ibv_reg_dmabuf_mr",
                "zero-length registration",
            ));
        }
        let Ok(addr) = usize::try_from(iova) else {
            return Err(VerbsError::invalid(
                "ibv_reg_dmabuf_mr",
                "iova does not fit usize",
            ));
        };
        let Ok(c_access) = libc::c_int::try_from(access.bits()) else {
            return Err(VerbsError::invalid(
                "ibv_reg_dmabuf_mr",
                "access flags out of range",
            ));
        };
        // SAFETY: live PD; the caller guarantees the dma-buf range (see above).
        let mr = unsafe { reg_dmabuf_mr(self.pd.as_ptr(), offset, len, iova, fd, c_access) };
        match NonNull::new(mr) {
            Some(mr) => Ok(Mr::from_raw(self, mr, addr, len)),
            None => Err(VerbsError::last_os(
                "ibv_reg_dmabuf_mr",
                format!("fd {fd}, {len} bytes at offset {offset}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_have_ibv_values() {
        assert_eq!(Access::LOCAL_WRITE.bits(), 1);
        assert_eq!(Access::REMOTE_WRITE.bits(), 2);
        assert_eq!(Access::REMOTE_READ.bits(), 4);
        let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        assert_eq!(all.bits(), 7);
        assert!(all.contains(Access::REMOTE_READ));
        assert!(!Access::REMOTE_WRITE.contains(Access::REMOTE_READ));
        let mut a = Access::empty();
        a |= Access::REMOTE_READ;
        assert_eq!(a, Access::REMOTE_READ);
    }
}
