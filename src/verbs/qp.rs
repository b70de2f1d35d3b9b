//! RC queue pairs: `RcQp` (one QP with its own CQ), its state transitions, RDMA WRITE/READ posts
//! and completion polling. `ibv_post_send` and `ibv_poll_cq` are `static inline` in verbs.h, so
//! they are called through `ibv_context->ops`, as the header does.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::device::{Device, Mtu};
use super::error::VerbsError;
use super::mr::{Access, Mr};
use super::sys;

/// Largest packet sequence number (24 bits).
pub const MAX_PSN: u32 = 0x00ff_ffff;

/// `IBV_WC_SEND`: completion of a SEND (here only the zero-length SEND_WITH_INV of docs/protocol.md
/// section 11).
pub const WC_SEND: u32 = 0;
/// `IBV_WC_RDMA_WRITE` and `IBV_WC_RDMA_READ`, the `Completion::opcode` of this module's posts.
pub const WC_RDMA_WRITE: u32 = 1;
pub const WC_RDMA_READ: u32 = 2;
/// `IBV_WC_RECV` and `IBV_WC_RECV_RDMA_WITH_IMM`: completions of posted receives.
pub const WC_RECV: u32 = 128;
pub const WC_RECV_RDMA_WITH_IMM: u32 = 129;
/// `enum ibv_wc_flags`: the completion carries an immediate / invalidated an rkey.
pub const WC_FLAG_WITH_IMM: u32 = 1 << 1;
pub const WC_FLAG_WITH_INV: u32 = 1 << 3;
/// The kernel's `IB_WC_WITH_INVALIDATE`. Providers whose completions are the kernel's
/// `ib_uverbs_wc` copied as they are (rxe) report this bit where libibverbs has
/// `IBV_WC_IP_CSUM_OK`; measured in the lane: a receive consumed by a SEND_WITH_INV completed with
/// flags `0x5` (GRH + this bit) on rxe. Read it only together with an opcode and a value that say
/// the same ([`crate::remote_inv`]).
pub const WC_FLAG_WITH_INV_KERNEL_ABI: u32 = 1 << 2;
/// `IBV_WC_SUCCESS`, `IBV_WC_WR_FLUSH_ERR`, `IBV_WC_RETRY_EXC_ERR`.
pub const WC_SUCCESS: u32 = 0;
pub const WC_WR_FLUSH_ERR: u32 = 5;
pub const WC_RETRY_EXC_ERR: u32 = 12;

/// Work-request and completion-queue sizes of a new QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    /// CQ entries; keep it >= the signaled work requests that can be outstanding.
    pub cq_depth: u32,
}

/// RTR attributes. The address vector is always global (GRH): `dgid = dest_gid`, `sgid_index` =
/// the device's GID index, `hop_limit` 64, `port_num` = the device's port, `dlid` 0, `sl` 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtrParams {
    pub dest_qp_num: u32,
    pub dest_gid: [u8; 16],
    /// Expected first PSN from the peer (24 bits).
    pub rq_psn: u32,
    pub path_mtu: Mtu,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
}

/// RTS attributes. There is no default: `retry_cnt` 7 means "retry forever" on rxe
/// (docs/protocol.md section 8) and is rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtsParams {
    /// First PSN sent (24 bits).
    pub sq_psn: u32,
    /// Local ACK timeout exponent: 4.096 µs * 2^timeout (0..=31).
    pub timeout: u8,
    /// Transport retries, 0..=6.
    pub retry_cnt: u8,
    /// RNR retries, 0..=7 (7 = infinite, per the IBA spec).
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RdmaOp {
    /// Local memory -> remote memory.
    Write,
    /// Local memory -> remote memory, then the immediate (host order; sent big-endian) in the
    /// completion of a receive the peer posted.
    WriteWithImm(u32),
    /// Remote memory -> local memory.
    Read,
}

/// One work completion.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub wr_id: u64,
    /// `enum ibv_wc_status`; 0 = success (see [`wc_status_name`]).
    pub status: u32,
    /// `enum ibv_wc_opcode` (valid only for successful completions).
    pub opcode: u32,
    pub byte_len: u32,
    pub vendor_err: u32,
    /// `enum ibv_wc_flags` ([`WC_FLAG_WITH_IMM`], [`WC_FLAG_WITH_INV`]).
    pub wc_flags: u32,
    /// The immediate in host order (`ntohl` applied) when `wc_flags` has [`WC_FLAG_WITH_IMM`];
    /// the invalidated rkey when it has [`WC_FLAG_WITH_INV`].
    pub imm_data: u32,
}

impl Completion {
    pub fn is_success(&self) -> bool {
        self.status == WC_SUCCESS
    }
}

/// The name of an `ibv_wc_status` value (as `ibv_wc_status_str` would give, for logs).
pub fn wc_status_name(status: u32) -> &'static str {
    const NAMES: [&str; 24] = [
        "success",
        "local length error",
        "local QP operation error",
        "local EE context operation error",
        "local protection error",
        "Work Request Flushed Error",
        "memory management operation error",
        "bad response error",
        "local access error",
        "remote invalid request error",
        "remote access error",
        "remote operation error",
        "transport retry counter exceeded",
        "RNR retry counter exceeded",
        "local RDD violation error",
        "remote invalid RD request",
        "aborted error",
        "invalid EE context number",
        "invalid EE context state",
        "fatal error",
        "response timeout error",
        "general error",
        "TM error",
        "TM rendezvous incomplete",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("unknown")
}

/// A completion queue; `Drop` destroys it (after the QP using it, see `RcQp`).
struct Cq {
    cq: NonNull<sys::ibv_cq>,
    device: Arc<Device>,
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created in `create_rc_qp`, destroyed once, after its QP (field order in QpCore).
        let rc = unsafe { (self.device.lib().destroy_cq)(self.cq.as_ptr()) };
        if rc != 0 {
            let e = VerbsError::from_rc("ibv_destroy_cq", rc, "");
            tracing::warn!(error = %e, "destroying a completion queue failed");
        }
    }
}

/// The QP itself and its CQ, shared by the [`RcQp`] that posts and polls on it and by the
/// [`QpFence`] of each memory window bound on it (a child holds its parent: a window that must
/// fence its QP when dropped finds it alive). The last holder destroys the QP, then the CQ.
struct QpCore {
    qp: NonNull<sys::ibv_qp>,
    qp_num: u32,
    /// Set by [`QpFence::fence`]: the QP was moved to ERR because a window bound on it may still
    /// grant access; it must be replaced before any further use.
    fenced: AtomicBool,
    // Dropped after `QpCore::drop` has destroyed the QP.
    cq: Cq,
    device: Arc<Device>,
}

// SAFETY: libibverbs lets any thread use a QP and CQ (verbs(7), thread safety: every verb may be
// called from any thread), so the core may move between threads: a pool connection's `RcQp`
// moves from the pool to the thread that leases it, to its recovery worker after a failure, and
// back. Posting and polling take `&mut RcQp` (one owner at a time).
unsafe impl Send for QpCore {}
// SAFETY: through a shared `&QpCore` only two things are reached: the plain fields (never written
// after creation) and the atomic flag, and `ibv_modify_qp` to ERR (a [`QpFence`]), a verb that
// libibverbs lets any thread call on a QP while another posts or polls on it (verbs(7)). In
// practice a window and its QP have the same owner, so the fence runs on that owner's thread.
unsafe impl Sync for QpCore {}

impl QpCore {
    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: libc::c_int,
        step: &str,
    ) -> Result<(), VerbsError> {
        // SAFETY: live QP; `attr` is a valid ibv_qp_attr whose masked fields are set.
        let rc = unsafe { (self.device.lib().modify_qp)(self.qp.as_ptr(), attr, mask) };
        if rc != 0 {
            return Err(VerbsError::from_rc(
                "ibv_modify_qp",
                rc,
                format!("QP {:#x} to {step}", self.qp_num),
            ));
        }
        Ok(())
    }

    fn to_error(&self) -> Result<(), VerbsError> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut attr, sys::IBV_QP_STATE, "ERR")
    }
}

impl Drop for QpCore {
    fn drop(&mut self) {
        // SAFETY: created in `create_rc_qp`, destroyed exactly once, by the last holder; the CQ
        // is destroyed after (field drop order).
        let rc = unsafe { (self.device.lib().destroy_qp)(self.qp.as_ptr()) };
        if rc != 0 {
            let e = VerbsError::from_rc("ibv_destroy_qp", rc, "");
            tracing::warn!(qp_num = self.qp_num, error = %e, "destroying a queue pair failed");
        }
    }
}

/// An RC queue pair with its own CQ (used for send and receive completions). Holds its
/// `Device`. The QP is destroyed, then the CQ, when this and every [`QpFence`] of it are gone.
/// Deliberately not `Sync`: posting and polling take `&mut self`, so whichever thread owns it
/// at the moment is the only one that posts and polls.
pub struct RcQp {
    core: Arc<QpCore>,
    _not_sync: PhantomData<Cell<()>>,
}

/// What a memory window holds of the QP it is bound on: enough to fence that QP (move it to ERR
/// and mark it for replacement) from anywhere, even from the window's `Drop`, and it keeps the QP
/// alive until then.
#[derive(Clone)]
pub struct QpFence {
    core: Arc<QpCore>,
}

impl QpFence {
    /// Move the QP to ERR (from then on it grants no remote access at all, through any window)
    /// and mark it fenced: its owner must replace it before using it again.
    pub fn fence(&self) {
        self.core.fenced.store(true, Ordering::Release);
        if let Err(e) = self.core.to_error() {
            tracing::warn!(qpn = self.core.qp_num, "could not move a QP to ERR: {e}");
        }
    }

    /// Whether the QP was fenced.
    pub fn is_fenced(&self) -> bool {
        self.core.fenced.load(Ordering::Acquire)
    }

    /// Whether this is the fence of `qp`.
    pub fn is_of(&self, qp: &RcQp) -> bool {
        Arc::ptr_eq(&self.core, &qp.core)
    }
}

impl std::fmt::Debug for RcQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcQp")
            .field("qp_num", &format_args!("{:#x}", self.core.qp_num))
            .finish()
    }
}

impl Device {
    /// Creates an RC QP (one SGE per work request, no inline data, completions only for
    /// signaled work requests) with its own CQ of `caps.cq_depth` entries, in RESET.
    pub fn create_rc_qp(self: &Arc<Self>, caps: QpCaps) -> Result<RcQp, VerbsError> {
        let Ok(cqe) = libc::c_int::try_from(caps.cq_depth) else {
            return Err(VerbsError::invalid(
                "ibv_create_cq",
                "cq_depth out of range",
            ));
        };
        if cqe < 1 {
            return Err(VerbsError::invalid(
                "ibv_create_cq",
                "cq_depth must be at least 1",
            ));
        }
        let lib = self.lib();
        // SAFETY: live context; no completion channel, no CQ context.
        let cq = unsafe {
            (lib.create_cq)(
                self.ctx.ctx.as_ptr(),
                cqe,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let Some(cq) = NonNull::new(cq) else {
            return Err(VerbsError::last_os(
                "ibv_create_cq",
                format!("{cqe} entries"),
            ));
        };
        let cq = Cq {
            cq,
            device: Arc::clone(self),
        };
        let mut init = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.cq.as_ptr(),
            recv_cq: cq.cq.as_ptr(),
            srq: std::ptr::null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQ; `init` is a valid ibv_qp_init_attr.
        let qp = unsafe { (lib.create_qp)(self.pd.as_ptr(), &mut init) };
        let Some(qp) = NonNull::new(qp) else {
            return Err(VerbsError::last_os(
                "ibv_create_qp",
                format!(
                    "RC, {} send / {} recv work requests",
                    caps.max_send_wr, caps.max_recv_wr
                ),
            ));
        };
        // SAFETY: the QP was just created; qp_num is set by libibverbs and never changes.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        tracing::debug!(device = %self.name(), qp_num, "RC QP created");
        Ok(RcQp {
            core: Arc::new(QpCore {
                qp,
                qp_num,
                fenced: AtomicBool::new(false),
                cq,
                device: Arc::clone(self),
            }),
            _not_sync: PhantomData,
        })
    }
}

fn check_psn(verb_step: &'static str, what: &str, psn: u32) -> Result<(), VerbsError> {
    if psn > MAX_PSN {
        return Err(VerbsError::invalid(
            verb_step,
            format!("{what} {psn:#x} exceeds 24 bits"),
        ));
    }
    Ok(())
}

fn check_max(verb_step: &'static str, what: &str, value: u8, max: u8) -> Result<(), VerbsError> {
    if value > max {
        return Err(VerbsError::invalid(
            verb_step,
            format!("{what} {value} exceeds {max}"),
        ));
    }
    Ok(())
}

impl RcQp {
    pub fn qp_num(&self) -> u32 {
        self.core.qp_num
    }

    /// The device the QP was created on.
    pub fn device(&self) -> &Arc<Device> {
        &self.core.device
    }

    fn modify(
        &mut self,
        attr: &mut sys::ibv_qp_attr,
        mask: libc::c_int,
        step: &str,
    ) -> Result<(), VerbsError> {
        self.core.modify(attr, mask, step)
    }

    /// RESET -> INIT: pkey index 0, the device's port, remote `access`.
    pub fn to_init(&mut self, access: Access) -> Result<(), VerbsError> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: self.core.device.port().port,
            qp_access_flags: access.bits(),
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_PORT
            | sys::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut attr, mask, "INIT")
    }

    /// INIT -> RTR, aimed at `p.dest_qp_num` / `p.dest_gid` (global address vector, hop limit 64).
    pub fn to_rtr(&mut self, p: &RtrParams) -> Result<(), VerbsError> {
        check_psn("ibv_modify_qp", "rq_psn", p.rq_psn)?;
        check_max("ibv_modify_qp", "min_rnr_timer", p.min_rnr_timer, 31)?;
        if p.dest_qp_num > MAX_PSN {
            return Err(VerbsError::invalid(
                "ibv_modify_qp",
                format!("dest_qp_num {:#x} exceeds 24 bits", p.dest_qp_num),
            ));
        }
        let port = self.core.device.port();
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            path_mtu: p.path_mtu as u32,
            dest_qp_num: p.dest_qp_num,
            rq_psn: p.rq_psn,
            max_dest_rd_atomic: p.max_dest_rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            ah_attr: sys::ibv_ah_attr {
                grh: sys::ibv_global_route {
                    dgid: sys::ibv_gid { raw: p.dest_gid },
                    flow_label: 0,
                    sgid_index: port.gid_index,
                    hop_limit: 64,
                    traffic_class: 0,
                },
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                static_rate: 0,
                is_global: 1,
                port_num: port.port,
            },
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_AV
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_DEST_QPN
            | sys::IBV_QP_RQ_PSN
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut attr, mask, "RTR")
    }

    /// RTR -> RTS. `retry_cnt` must be 0..=6 (7 retries forever on rxe).
    pub fn to_rts(&mut self, p: &RtsParams) -> Result<(), VerbsError> {
        check_psn("ibv_modify_qp", "sq_psn", p.sq_psn)?;
        check_max("ibv_modify_qp", "timeout", p.timeout, 31)?;
        check_max(
            "ibv_modify_qp",
            "retry_cnt (7 retries forever on rxe)",
            p.retry_cnt,
            6,
        )?;
        check_max("ibv_modify_qp", "rnr_retry", p.rnr_retry, 7)?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            sq_psn: p.sq_psn,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            max_rd_atomic: p.max_rd_atomic,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_SQ_PSN
            | sys::IBV_QP_TIMEOUT
            | sys::IBV_QP_RETRY_CNT
            | sys::IBV_QP_RNR_RETRY
            | sys::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask, "RTS")
    }

    /// Any state -> ERR: outstanding work requests complete with `WC_WR_FLUSH_ERR`.
    pub fn to_error(&mut self) -> Result<(), VerbsError> {
        self.core.to_error()
    }

    /// The handle a memory window keeps of this QP to fence it ([`QpFence`]).
    pub fn fence_handle(&self) -> QpFence {
        QpFence {
            core: Arc::clone(&self.core),
        }
    }

    /// Move the QP to ERR and mark it fenced ([`QpFence::fence`]).
    pub fn fence(&mut self) {
        QpFence {
            core: Arc::clone(&self.core),
        }
        .fence()
    }

    /// Whether the QP was fenced (by its owner or by a window bound on it): it must be replaced
    /// before any further use.
    pub fn is_fenced(&self) -> bool {
        self.core.fenced.load(Ordering::Acquire)
    }

    /// Posts one RDMA WRITE (`local` -> remote) or READ (remote -> `local`) of `len` bytes at
    /// `local_offset` of `local`. Checked in this order: `len` must not exceed the port's
    /// `max_msg_sz` (`EMSGSIZE`; 6.1's rxe itself does not enforce it, hardware does), `local`
    /// must be registered on this QP's device, and the range must lie inside it. An unsignaled
    /// work request frees its send-queue slot only when a later signaled one completes: signal at
    /// least every `max_send_wr`-th.
    #[allow(clippy::too_many_arguments)] // the contract's signature
    pub fn post_rdma(
        &mut self,
        op: RdmaOp,
        wr_id: u64,
        local: &Mr,
        local_offset: usize,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let max_msg_sz = self.core.device.port().max_msg_sz;
        let target = (remote_addr, rkey);
        self.post_rdma_upto(
            op,
            wr_id,
            local,
            local_offset,
            len,
            target,
            signaled,
            max_msg_sz,
        )
    }

    /// As [`RcQp::post_rdma`], for a message a peer protocol needs whole: hipobj-rc-v2's PUT is
    /// one WRITE_WITH_IMM of the transfer's size (the receiver checks its byte count), up to
    /// 2^31 - 1 bytes, the RC limit. rxe in the lane's kernel (6.1) advertises a `max_msg_sz` of
    /// 8 MiB that it does not enforce; a provider that does enforce its limit fails the post or the
    /// completion.
    #[allow(clippy::too_many_arguments)] // post_rdma's signature
    pub fn post_rdma_whole(
        &mut self,
        op: RdmaOp,
        wr_id: u64,
        local: &Mr,
        local_offset: usize,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        const RC_MAX_MESSAGE: u32 = 0x7fff_ffff;
        let target = (remote_addr, rkey);
        self.post_rdma_upto(
            op,
            wr_id,
            local,
            local_offset,
            len,
            target,
            signaled,
            RC_MAX_MESSAGE,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn post_rdma_upto(
        &mut self,
        op: RdmaOp,
        wr_id: u64,
        local: &Mr,
        local_offset: usize,
        len: u32,
        (remote_addr, rkey): (u64, u32),
        signaled: bool,
        max_msg_sz: u32,
    ) -> Result<(), VerbsError> {
        const VERB: &str = "ibv_post_send";
        // The message size first: it depends on `len` alone, and a test of it needs no
        // registration of more than the limit (6.12's rxe advertises 2 GiB).
        if len > max_msg_sz {
            return Err(VerbsError::new(
                VERB,
                libc::EMSGSIZE,
                format!("{len} bytes > max_msg_sz {max_msg_sz}"),
            ));
        }
        let mut sge = self.local_sge(VERB, local, local_offset, len)?;
        let mut wr = sys::ibv_send_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: match op {
                RdmaOp::Write => sys::IBV_WR_RDMA_WRITE,
                RdmaOp::WriteWithImm(_) => sys::IBV_WR_RDMA_WRITE_WITH_IMM,
                RdmaOp::Read => sys::IBV_WR_RDMA_READ,
            },
            send_flags: if signaled { sys::IBV_SEND_SIGNALED } else { 0 },
            // verbs.h: `imm_data` is in network byte order.
            imm_data: match op {
                RdmaOp::WriteWithImm(imm) => imm.to_be(),
                RdmaOp::Write | RdmaOp::Read => 0,
            },
            wr: sys::ibv_send_wr_wr {
                rdma: sys::ibv_send_wr_rdma { remote_addr, rkey },
            },
            qp_type: 0,
            bind_mw_or_tso: sys::ibv_send_wr_bind_mw_or_tso { _zeroed: [0; 6] },
        };
        // The local range lies inside a live MR of this device (checked above).
        self.post_send(&mut wr, || format!("{op:?} of {len} bytes"))
    }

    /// `ibv_post_send` of one work request through `ibv_context->ops` (verbs.h's inline
    /// `ibv_post_send` calls the same pointer). `wr` must name only live objects of this device.
    pub(super) fn post_send(
        &mut self,
        wr: &mut sys::ibv_send_wr,
        what: impl FnOnce() -> String,
    ) -> Result<(), VerbsError> {
        const VERB: &str = "ibv_post_send";
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        let qp = self.core.qp.as_ptr();
        // SAFETY: live QP; its context pointer is set by libibverbs at creation and stays valid
        // while the device is open (we hold it).
        let post_send = unsafe { (*(*qp).context).ops.post_send };
        let Some(post_send) = post_send else {
            return Err(VerbsError::new(
                VERB,
                libc::ENOSYS,
                "provider has no post_send",
            ));
        };
        // SAFETY: `wr` and what it points to are valid for the call (the provider copies them
        // into its send queue); the callers check that it names live objects of this device.
        let rc = unsafe { post_send(qp, wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::from_rc(
                VERB,
                rc,
                format!("{} on QP {:#x}", what(), self.core.qp_num),
            ));
        }
        Ok(())
    }

    /// The SGE of `len` bytes at `offset` of `mr`: the MR must be of this QP's device and the
    /// range inside it (checked here for every post, send or receive).
    fn local_sge(
        &self,
        verb: &'static str,
        mr: &Mr,
        offset: usize,
        len: u32,
    ) -> Result<sys::ibv_sge, VerbsError> {
        if !Arc::ptr_eq(&mr.device, &self.core.device) {
            return Err(VerbsError::invalid(
                verb,
                "MR is registered on another device",
            ));
        }
        let len_usize = usize::try_from(len).unwrap_or(usize::MAX);
        let in_range = matches!(offset.checked_add(len_usize), Some(end) if end <= mr.len());
        let addr = mr.addr().checked_add(offset).filter(|_| in_range);
        let Some(addr) = addr else {
            return Err(VerbsError::invalid(
                verb,
                format!(
                    "{len} bytes at offset {offset} exceed the {}-byte MR",
                    mr.len()
                ),
            ));
        };
        Ok(sys::ibv_sge {
            addr: addr as u64,
            length: len,
            lkey: mr.lkey(),
        })
    }

    /// Posts one receive: `local` is `(mr, offset, len)` of a registered range on this device, or
    /// `None` for a zero-length receive (enough for an RDMA WRITE with immediate, which consumes a
    /// receive but places its data by the sender's address).
    pub fn post_recv(
        &mut self,
        wr_id: u64,
        local: Option<(&Mr, usize, u32)>,
    ) -> Result<(), VerbsError> {
        const VERB: &str = "ibv_post_recv";
        let mut sge = sys::ibv_sge::default();
        let mut num_sge = 0;
        if let Some((mr, offset, len)) = local {
            sge = self.local_sge(VERB, mr, offset, len)?;
            num_sge = 1;
        }
        let mut wr = sys::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: if num_sge == 1 {
                &mut sge
            } else {
                std::ptr::null_mut()
            },
            num_sge,
        };
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        let qp = self.core.qp.as_ptr();
        // SAFETY: live QP; its context pointer is valid while the device is open (we hold it).
        let post_recv = unsafe { (*(*qp).context).ops.post_recv };
        let Some(post_recv) = post_recv else {
            return Err(VerbsError::new(
                VERB,
                libc::ENOSYS,
                "provider has no post_recv",
            ));
        };
        // SAFETY: `wr` and its SGE (checked above to lie inside a live MR of this device) are
        // valid for the call; the provider copies them into its receive queue.
        let rc = unsafe { post_recv(qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::from_rc(
                VERB,
                rc,
                format!("receive on QP {:#x}", self.core.qp_num),
            ));
        }
        Ok(())
    }

    /// Non-blocking poll: appends up to `max` completions to `out` and returns how many.
    pub fn poll(&mut self, max: usize, out: &mut Vec<Completion>) -> Result<usize, VerbsError> {
        const BATCH: usize = 16;
        let mut wc = [sys::ibv_wc::default(); BATCH];
        let mut total = 0;
        while total < max {
            let want = (max - total).min(BATCH);
            let n = self.poll_into(&mut wc[..want])?;
            out.extend(wc[..n].iter().map(Completion::from));
            total += n;
            if n < want {
                break;
            }
        }
        Ok(total)
    }

    /// One `ibv_poll_cq` of up to `wc.len()` completions into `wc`; how many it returned.
    fn poll_into(&mut self, wc: &mut [sys::ibv_wc]) -> Result<usize, VerbsError> {
        let cq = self.core.cq.cq.as_ptr();
        // SAFETY: live CQ; its context pointer is valid while the device is open. `ops.poll_cq`
        // is what verbs.h's inline ibv_poll_cq calls.
        let poll_cq = unsafe { (*(*cq).context).ops.poll_cq };
        let Some(poll_cq) = poll_cq else {
            return Err(VerbsError::new(
                "ibv_poll_cq",
                libc::ENOSYS,
                "provider has no poll_cq",
            ));
        };
        let want = libc::c_int::try_from(wc.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `wc` has room for `want` entries.
        let n = unsafe { poll_cq(cq, want, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::from_rc(
                "ibv_poll_cq",
                n,
                format!("QP {:#x}", self.core.qp_num),
            ));
        }
        Ok(usize::try_from(n).unwrap_or(0).min(wc.len()))
    }

    /// Drain the CQ (a few completions per `ibv_poll_cq`, on the stack) looking for `wr_id`;
    /// completions of other work requests are dropped.
    fn poll_for(&mut self, wr_id: u64) -> Result<Option<Completion>, VerbsError> {
        let mut wc = [sys::ibv_wc::default(); WAIT_BATCH];
        loop {
            let n = self.poll_into(&mut wc)?;
            if let Some(w) = wc[..n].iter().find(|w| w.wr_id == wr_id) {
                return Ok(Some(Completion::from(w)));
            }
            if n < WAIT_BATCH {
                return Ok(None);
            }
        }
    }
}

impl From<&sys::ibv_wc> for Completion {
    fn from(w: &sys::ibv_wc) -> Completion {
        Completion {
            wr_id: w.wr_id,
            status: w.status,
            opcode: w.opcode,
            byte_len: w.byte_len,
            vendor_err: w.vendor_err,
            wc_flags: w.wc_flags,
            imm_data: if w.wc_flags & WC_FLAG_WITH_IMM != 0 {
                u32::from_be(w.imm_data)
            } else {
                w.imm_data
            },
        }
    }
}

/// Completions taken per `ibv_poll_cq` while waiting for one work request.
const WAIT_BATCH: usize = 4;
/// Empty polls of a completion wait before it starts giving the CPU up between polls (a
/// hardware NIC completes a local operation within a few polls; rxe's completer may need this
/// CPU).
const SPINS_BEFORE_YIELD: u32 = 16;

/// What a completion wait did before the completion arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitEffort {
    /// Polls that found nothing.
    pub empty_polls: u32,
    /// Times the thread gave its CPU up (`sched_yield`) between polls.
    pub yields: u32,
}

impl RcQp {
    /// Polls until the completion of `wr_id` arrives or `limit` has passed (`ETIMEDOUT`; the
    /// work request may then still be outstanding: destroy the QP before reusing anything it
    /// names). Completions of other work requests are dropped.
    ///
    /// The first poll reads no clock and allocates nothing: on rxe the completion of a local
    /// operation (bind, invalidation) is there by then (measured: 0 empty polls per warm GET in
    /// benches/transfer_overhead). When it is not, a few polls spin; after that the wait gives
    /// the CPU up (`sched_yield`) between polls, since rxe's completer runs as a tasklet that may
    /// be waiting for this very CPU (ksoftirqd).
    pub fn wait_completion(
        &mut self,
        wr_id: u64,
        limit: std::time::Duration,
    ) -> Result<Completion, VerbsError> {
        self.wait_completion_with_effort(wr_id, limit)
            .map(|(c, _)| c)
    }

    /// [`RcQp::wait_completion`], and what the wait cost (for a caller that measures it).
    pub fn wait_completion_with_effort(
        &mut self,
        wr_id: u64,
        limit: std::time::Duration,
    ) -> Result<(Completion, WaitEffort), VerbsError> {
        let mut effort = WaitEffort::default();
        if let Some(c) = self.poll_for(wr_id)? {
            return Ok((c, effort));
        }
        let deadline = std::time::Instant::now() + limit;
        loop {
            effort.empty_polls = effort.empty_polls.saturating_add(1);
            if effort.empty_polls < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
                effort.yields = effort.yields.saturating_add(1);
            }
            if let Some(c) = self.poll_for(wr_id)? {
                return Ok((c, effort));
            }
            if std::time::Instant::now() >= deadline {
                return Err(VerbsError::new(
                    "ibv_poll_cq",
                    libc::ETIMEDOUT,
                    format!(
                        "no completion of work request {wr_id} on QP {:#x}",
                        self.core.qp_num
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wc_status_names() {
        assert_eq!(wc_status_name(WC_SUCCESS), "success");
        assert_eq!(
            wc_status_name(WC_WR_FLUSH_ERR),
            "Work Request Flushed Error"
        );
        assert_eq!(
            wc_status_name(WC_RETRY_EXC_ERR),
            "transport retry counter exceeded"
        );
        assert_eq!(wc_status_name(23), "TM rendezvous incomplete");
        assert_eq!(wc_status_name(24), "unknown");
        assert_eq!(wc_status_name(u32::MAX), "unknown");
    }

    #[test]
    fn parameter_checks() {
        assert!(check_psn("v", "psn", MAX_PSN).is_ok());
        assert_eq!(
            check_psn("v", "psn", MAX_PSN + 1).map_err(|e| e.errno),
            Err(libc::EINVAL)
        );
        assert!(check_max("v", "retry_cnt", 6, 6).is_ok());
        assert!(check_max("v", "retry_cnt", 7, 6).is_err());
    }
}
