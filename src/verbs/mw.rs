//! Type-2 memory windows (docs/protocol.md 9.6-9.8): `Mw` (deallocated on drop), and the two work
//! requests that use it on an RC QP, `IBV_WR_BIND_MW` and `IBV_WR_LOCAL_INV`.
//!
//! A type-2 window is bound by a work request on one QP and is then reachable only through that
//! QP (its paired peer), with the access and range of the bind, until it is invalidated. Every
//! bind gives the window a new rkey (`ibv_inc_rkey`: the low 8 bits are a tag), so an rkey that
//! was invalidated never becomes valid again by the next bind.
//!
//! `ibv_alloc_mw` and `ibv_dealloc_mw` are `static inline` in verbs.h: they are called through
//! `ibv_context->ops`, as the header does.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::device::Device;
use super::error::VerbsError;
use super::mr::{Access, Mr};
use super::qp::RcQp;
use super::sys;

/// `IBV_WC_BIND_MW` and `IBV_WC_LOCAL_INV`, the `Completion::opcode` of this module's posts.
pub const WC_BIND_MW: u32 = 5;
pub const WC_LOCAL_INV: u32 = 6;

/// `ibv_inc_rkey`: the same key with its low 8 bits (the tag) incremented.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// Live memory windows of this process (tests check nothing leaks across init/shutdown).
pub static LIVE_WINDOWS: AtomicUsize = AtomicUsize::new(0);

/// A type-2 memory window of the device's PD. `Drop` deallocates it (which also invalidates it).
pub struct Mw {
    mw: NonNull<sys::ibv_mw>,
    /// The rkey of the last successful bind (or the allocation's).
    rkey: u32,
    device: Arc<Device>,
}

// SAFETY: libibverbs lets any thread use a memory window (verbs(7), thread safety); `Mw` is not
// `Sync`: binding and invalidating take `&mut`, so one owner at a time posts for it.
unsafe impl Send for Mw {}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw")
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
}

impl Device {
    /// `ibv_alloc_mw(pd, IBV_MW_TYPE_2)`. `EOPNOTSUPP` when the provider has no windows.
    pub fn alloc_mw(self: &Arc<Self>) -> Result<Mw, VerbsError> {
        const VERB: &str = "ibv_alloc_mw";
        // SAFETY: live context (we hold it); `ops` is filled in by the provider at open.
        let alloc = unsafe { (*self.ctx.ctx.as_ptr()).ops.alloc_mw };
        // SAFETY: as above.
        let dealloc = unsafe { (*self.ctx.ctx.as_ptr()).ops.dealloc_mw };
        let (Some(alloc), Some(_)) = (alloc, dealloc) else {
            return Err(VerbsError::new(
                VERB,
                libc::EOPNOTSUPP,
                "provider has no memory windows",
            ));
        };
        // SAFETY: live PD of this context; type 2 is a valid `enum ibv_mw_type`.
        let mw = unsafe { alloc(self.pd.as_ptr(), sys::IBV_MW_TYPE_2) };
        let Some(mw) = NonNull::new(mw) else {
            return Err(VerbsError::last_os(VERB, "type 2"));
        };
        // SAFETY: just returned by the provider, not yet shared.
        let rkey = unsafe { (*mw.as_ptr()).rkey };
        LIVE_WINDOWS.fetch_add(1, Ordering::Relaxed);
        Ok(Mw {
            mw,
            rkey,
            device: Arc::clone(self),
        })
    }
}

impl Mw {
    /// The rkey of the last successful bind.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        LIVE_WINDOWS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: live context; `alloc_mw` checked that the provider has `dealloc_mw`.
        let dealloc = unsafe { (*self.device.ctx.ctx.as_ptr()).ops.dealloc_mw };
        let Some(dealloc) = dealloc else { return };
        // SAFETY: allocated by `alloc_mw`, deallocated exactly once.
        let rc = unsafe { dealloc(self.mw.as_ptr()) };
        if rc != 0 {
            let e = VerbsError::from_rc("ibv_dealloc_mw", rc, "");
            tracing::warn!(rkey = self.rkey, error = %e, "deallocating a memory window failed");
        }
    }
}

/// What a bind covers: `len` bytes at `addr` (the MR's address space) of `mr`, with `access`
/// (`REMOTE_WRITE` and/or `REMOTE_READ`).
#[derive(Clone, Copy, Debug)]
pub struct BindRange<'a> {
    pub mr: &'a Mr,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
}

impl RcQp {
    /// Posts a signaled `IBV_WR_BIND_MW` of `mw` over `range` with a new rkey and returns that
    /// rkey. The QP must be in RTS, the range inside the MR, and the MR registered with
    /// `MW_BIND` on this QP's device. The rkey is valid once the bind completes
    /// (`WC_BIND_MW`); only then is it recorded as the window's ([`RcQp::bound`]).
    pub fn post_bind_mw(
        &mut self,
        wr_id: u64,
        mw: &Mw,
        range: &BindRange<'_>,
    ) -> Result<u32, VerbsError> {
        const VERB: &str = "ibv_post_send";
        if !Arc::ptr_eq(&range.mr.device, self.device()) || !Arc::ptr_eq(&mw.device, self.device())
        {
            return Err(VerbsError::invalid(
                VERB,
                "window or MR belongs to another device",
            ));
        }
        let mr_start = range.mr.addr() as u64;
        let mr_end = mr_start.saturating_add(range.mr.len() as u64);
        let inside = range.addr >= mr_start
            && range
                .addr
                .checked_add(range.len)
                .is_some_and(|end| end <= mr_end);
        if !inside {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "window of {} bytes at {:#x} leaves the {}-byte MR at {mr_start:#x}",
                    range.len,
                    range.addr,
                    range.mr.len()
                ),
            ));
        }
        let rkey = inc_rkey(mw.rkey);
        let bind = sys::ibv_send_wr_bind_mw {
            mw: mw.mw.as_ptr(),
            rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr: range.mr.raw(),
                addr: range.addr,
                length: range.len,
                mw_access_flags: range.access.bits(),
            },
        };
        let mut wr = sys::ibv_send_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
            opcode: sys::IBV_WR_BIND_MW,
            send_flags: sys::IBV_SEND_SIGNALED,
            imm_data: 0,
            wr: sys::ibv_send_wr_wr { _atomic: [0; 4] },
            qp_type: 0,
            bind_mw_or_tso: sys::ibv_send_wr_bind_mw_or_tso { bind_mw: bind },
        };
        self.post_send(&mut wr, || "bind memory window".into())?;
        Ok(rkey)
    }

    /// Records that the bind with `rkey` completed successfully: it is the window's rkey now.
    pub fn bound(&self, mw: &mut Mw, rkey: u32) {
        mw.rkey = rkey;
        // SAFETY: live window; libibverbs' own `ibv_bind_mw` keeps `mw->rkey` current the same
        // way, and nothing else writes it while we own the window.
        unsafe { (*mw.mw.as_ptr()).rkey = rkey };
    }

    /// Posts a signaled `IBV_WR_LOCAL_INV` of `rkey`; after its successful completion
    /// (`WC_LOCAL_INV`) the window grants nothing.
    pub fn post_local_inv(&mut self, wr_id: u64, rkey: u32) -> Result<(), VerbsError> {
        let mut wr = sys::ibv_send_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
            opcode: sys::IBV_WR_LOCAL_INV,
            send_flags: sys::IBV_SEND_SIGNALED,
            imm_data: rkey,
            wr: sys::ibv_send_wr_wr { _atomic: [0; 4] },
            qp_type: 0,
            bind_mw_or_tso: sys::ibv_send_wr_bind_mw_or_tso { _zeroed: [0; 6] },
        };
        self.post_send(&mut wr, || "invalidate memory window".into())
    }

    /// Posts a signaled zero-length `IBV_WR_SEND_WITH_INV` of `rkey` (docs/protocol.md section 11):
    /// the peer's next posted receive completes with `IBV_WC_WITH_INV` and `rkey`, and the
    /// peer's window `rkey` grants nothing from then on. RC ordering puts it after every WRITE
    /// posted before it; after READs only once they completed (post it then). Only to a peer that
    /// keeps receives posted: an unexpected SEND ends in RNR and both QPs in ERR.
    pub fn post_send_with_inv(&mut self, wr_id: u64, rkey: u32) -> Result<(), VerbsError> {
        let mut wr = sys::ibv_send_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
            opcode: sys::IBV_WR_SEND_WITH_INV,
            send_flags: sys::IBV_SEND_SIGNALED,
            imm_data: rkey,
            wr: sys::ibv_send_wr_wr { _atomic: [0; 4] },
            qp_type: 0,
            bind_mw_or_tso: sys::ibv_send_wr_bind_mw_or_tso { _zeroed: [0; 6] },
        };
        self.post_send(&mut wr, || {
            format!("send with invalidate of rkey {rkey:#x}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_changes_only_the_tag() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
        for k in [0u32, 7, 0xabcd_ef12, u32::MAX] {
            assert_eq!(inc_rkey(k) & 0xffff_ff00, k & 0xffff_ff00);
            assert_ne!(inc_rkey(k), k);
        }
    }
}
