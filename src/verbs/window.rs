//! One memory window bound on one QP, and the one policy for a window the NIC did not confirm
//! (docs/protocol.md 9.6-9.8, 10.4, 11.2).
//!
//! A [`Window`] owns a type-2 window ([`super::Mw`]) and what is known of it: nothing bound, a
//! bind posted, bound with an rkey, an invalidation posted, or fenced. It binds
//! (`IBV_WR_BIND_MW`), waits for the bind to complete before its rkey counts, and ends the bind:
//! by a local invalidation (`IBV_WR_LOCAL_INV`) it waits for, or after the peer's remote
//! invalidation was seen (`SEND_WITH_INV`, read by `crate::remote_inv`).
//!
//! **The policy.** Whenever a bind or an invalidation is not confirmed (the post fails, the
//! completion is an error or does not come in time), the window may still grant access. Its QP
//! is then fenced: moved to ERR (no remote access through it from then on, through any window)
//! and marked so that its owner replaces it before any later transfer ([`QpFence`]). A window
//! dropped while it may still grant access (a bind or an invalidation outstanding, or bound and
//! never ended) fences its QP the same way. The client pool, the hipobj-rc-v2 client and
//! hipobj-server all use this type; none decides this for itself.
//!
//! The QP side is the [`WindowQp`] trait: [`RcQp`] over libibverbs, and a double in the tests.

use std::time::Duration;

use super::error::VerbsError;
use super::mw::{BindRange, Mw, WC_BIND_MW, WC_LOCAL_INV};
use super::qp::{wc_status_name, Completion, QpFence, RcQp, WaitEffort};

/// What a [`Window`] needs of the QP it is bound on.
pub trait WindowQp {
    /// The memory window object.
    type Mw;
    /// What a bind covers.
    type Range<'a>;
    /// What a window keeps of its QP to fence it, even from its `Drop`.
    type Fence: Fence;
    /// The fence of this QP.
    fn fence_handle(&self) -> Self::Fence;
    /// Whether `fence` is this QP's.
    fn owns(&self, fence: &Self::Fence) -> bool;
    /// Post a signaled bind of `mw` over `range` with a new rkey; that rkey.
    fn post_bind(
        &mut self,
        wr_id: u64,
        mw: &Self::Mw,
        range: &Self::Range<'_>,
    ) -> Result<u32, VerbsError>;
    /// Record that the bind with `rkey` completed: it is `mw`'s rkey now.
    fn record_bind(&mut self, mw: &mut Self::Mw, rkey: u32);
    /// Post a signaled local invalidation of `rkey`.
    fn post_local_inv(&mut self, wr_id: u64, rkey: u32) -> Result<(), VerbsError>;
    /// Wait up to `limit` for the completion of `wr_id` (`ETIMEDOUT` otherwise).
    fn wait(&mut self, wr_id: u64, limit: Duration)
        -> Result<(Completion, WaitEffort), VerbsError>;
}

/// Fencing a QP: [`QpFence`] for an [`RcQp`].
pub trait Fence {
    /// Move the QP to ERR and mark it for replacement.
    fn fence(&self);
    fn is_fenced(&self) -> bool;
}

impl Fence for QpFence {
    fn fence(&self) {
        QpFence::fence(self)
    }

    fn is_fenced(&self) -> bool {
        QpFence::is_fenced(self)
    }
}

impl WindowQp for RcQp {
    type Mw = Mw;
    type Range<'a> = BindRange<'a>;
    type Fence = QpFence;

    fn fence_handle(&self) -> QpFence {
        RcQp::fence_handle(self)
    }

    fn owns(&self, fence: &QpFence) -> bool {
        fence.is_of(self)
    }

    fn post_bind(&mut self, wr_id: u64, mw: &Mw, range: &BindRange<'_>) -> Result<u32, VerbsError> {
        self.post_bind_mw(wr_id, mw, range)
    }

    fn record_bind(&mut self, mw: &mut Mw, rkey: u32) {
        self.bound(mw, rkey)
    }

    fn post_local_inv(&mut self, wr_id: u64, rkey: u32) -> Result<(), VerbsError> {
        RcQp::post_local_inv(self, wr_id, rkey)
    }

    fn wait(
        &mut self,
        wr_id: u64,
        limit: Duration,
    ) -> Result<(Completion, WaitEffort), VerbsError> {
        self.wait_completion_with_effort(wr_id, limit)
    }
}

/// What is known of a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Grants nothing: never bound, or its last bind ended and that was confirmed.
    Idle,
    /// A bind to `rkey` posted, its completion not yet seen.
    BindPosted { wr_id: u64, rkey: u32 },
    /// Bound with `rkey` (the bind completed successfully).
    Bound { rkey: u32 },
    /// An invalidation of `rkey` posted, its completion not yet seen.
    InvPosted { wr_id: u64, rkey: u32 },
    /// A bind or invalidation was not confirmed: the QP was fenced; the window is never used
    /// again.
    Fenced,
}

/// A type-2 memory window of one QP, with the one policy for what the NIC did not confirm (see
/// the module). Fields drop in order: the window (deallocated) before its QP's fence (which may
/// hold the last reference to the QP).
pub struct Window<Q: WindowQp = RcQp> {
    mw: Q::Mw,
    state: State,
    fence: Q::Fence,
}

impl<Q: WindowQp> std::fmt::Debug for Window<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("state", &self.state)
            .finish()
    }
}

impl Window<RcQp> {
    /// Allocate a window (`ibv_alloc_mw`, type 2) for binding on `qp` only.
    pub fn alloc(qp: &RcQp) -> Result<Window<RcQp>, VerbsError> {
        Ok(Window::new(qp.device().alloc_mw()?, qp))
    }
}

impl<Q: WindowQp> Window<Q> {
    /// `mw`, not bound, for binding on `qp` only.
    pub fn new(mw: Q::Mw, qp: &Q) -> Window<Q> {
        Window {
            mw,
            state: State::Idle,
            fence: qp.fence_handle(),
        }
    }

    /// The rkey the server may use: that of a confirmed bind, or of a posted one (the rkey is
    /// ours to choose; it grants nothing to rely on until [`Window::confirm_bind`]).
    pub fn rkey(&self) -> Option<u32> {
        match self.state {
            State::BindPosted { rkey, .. } | State::Bound { rkey } => Some(rkey),
            State::Idle | State::InvPosted { .. } | State::Fenced => None,
        }
    }

    /// Whether the window was bound and its bind confirmed (not yet ended).
    pub fn is_bound(&self) -> bool {
        matches!(self.state, State::Bound { .. })
    }

    /// Whether this window is for binding on `qp`.
    pub fn is_on(&self, qp: &Q) -> bool {
        qp.owns(&self.fence)
    }

    /// Whether this window's QP was fenced (by this window or any other way).
    pub fn is_fenced(&self) -> bool {
        self.state == State::Fenced || self.fence.is_fenced()
    }

    /// Fence the QP: the window is dead from now on.
    pub fn fence(&mut self) {
        self.state = State::Fenced;
        self.fence.fence();
    }

    fn check(&self, qp: &Q, want: &str) -> Result<(), VerbsError> {
        if !qp.owns(&self.fence) {
            return Err(VerbsError::invalid(
                "memory window",
                format!("{want} on another QP than the window's"),
            ));
        }
        if self.is_fenced() {
            return Err(VerbsError::invalid(
                "memory window",
                format!("{want} on a fenced QP"),
            ));
        }
        Ok(())
    }

    /// A step that was not confirmed: fence, and hand the error on.
    fn unconfirmed(&mut self, what: &str, e: VerbsError) -> VerbsError {
        tracing::debug!(%e, "{what} not confirmed; fencing the QP");
        self.fence();
        e
    }

    /// Post a bind over `range` on `qp` (the window's own; nothing bound, or the last bind
    /// ended). Its rkey is known at once; nothing may rely on it before
    /// [`Window::confirm_bind`]. A failed post fences the QP.
    pub fn post_bind(
        &mut self,
        qp: &mut Q,
        wr_id: u64,
        range: &Q::Range<'_>,
    ) -> Result<u32, VerbsError> {
        self.check(qp, "a bind")?;
        if self.state != State::Idle {
            return Err(VerbsError::invalid(
                "memory window",
                "a bind of a window whose last bind has not ended",
            ));
        }
        match qp.post_bind(wr_id, &self.mw, range) {
            Ok(rkey) => {
                self.state = State::BindPosted { wr_id, rkey };
                Ok(rkey)
            }
            Err(e) => Err(self.unconfirmed("memory window bind", e)),
        }
    }

    /// Wait up to `limit` for the posted bind; once it completed successfully its rkey is the
    /// window's. Not confirmed: the QP is fenced and the error returned.
    pub fn confirm_bind(
        &mut self,
        qp: &mut Q,
        limit: Duration,
    ) -> Result<(u32, WaitEffort), VerbsError> {
        self.check(qp, "a bind confirmation")?;
        let State::BindPosted { wr_id, rkey } = self.state else {
            return Err(VerbsError::invalid(
                "memory window",
                "confirming a bind that was not posted",
            ));
        };
        match await_ok(qp, wr_id, WC_BIND_MW, limit, "memory window bind") {
            Ok(effort) => {
                qp.record_bind(&mut self.mw, rkey);
                self.state = State::Bound { rkey };
                Ok((rkey, effort))
            }
            Err(e) => Err(self.unconfirmed("memory window bind", e)),
        }
    }

    /// [`Window::post_bind`] then [`Window::confirm_bind`]: the window's new rkey.
    pub fn bind(
        &mut self,
        qp: &mut Q,
        wr_id: u64,
        range: &Q::Range<'_>,
        limit: Duration,
    ) -> Result<(u32, WaitEffort), VerbsError> {
        self.post_bind(qp, wr_id, range)?;
        self.confirm_bind(qp, limit)
    }

    /// Post the local invalidation of the bound window. Nothing bound: nothing to do. A failed
    /// post fences the QP.
    pub fn post_invalidate(&mut self, qp: &mut Q, wr_id: u64) -> Result<(), VerbsError> {
        self.check(qp, "an invalidation")?;
        let rkey = match self.state {
            State::Idle => return Ok(()),
            State::Bound { rkey } => rkey,
            // Whether that bind or invalidation took effect is unknown: only the fence ends it.
            State::BindPosted { .. } | State::InvPosted { .. } | State::Fenced => {
                let e = VerbsError::invalid(
                    "memory window",
                    "invalidating a window whose last step is unconfirmed",
                );
                return Err(self.unconfirmed("memory window invalidation", e));
            }
        };
        match qp.post_local_inv(wr_id, rkey) {
            Ok(()) => {
                self.state = State::InvPosted { wr_id, rkey };
                Ok(())
            }
            Err(e) => Err(self.unconfirmed("memory window invalidation", e)),
        }
    }

    /// Wait up to `limit` for the posted invalidation; once it completed the window grants
    /// nothing. Not confirmed: the QP is fenced and the error returned.
    pub fn confirm_invalidate(
        &mut self,
        qp: &mut Q,
        limit: Duration,
    ) -> Result<WaitEffort, VerbsError> {
        let State::InvPosted { wr_id, .. } = self.state else {
            return match self.state {
                State::Idle => Ok(WaitEffort::default()),
                _ => Err(VerbsError::invalid(
                    "memory window",
                    "confirming an invalidation that was not posted",
                )),
            };
        };
        self.check(qp, "an invalidation confirmation")?;
        match await_ok(qp, wr_id, WC_LOCAL_INV, limit, "memory window invalidation") {
            Ok(effort) => {
                self.state = State::Idle;
                Ok(effort)
            }
            Err(e) => Err(self.unconfirmed("memory window invalidation", e)),
        }
    }

    /// [`Window::post_invalidate`] then [`Window::confirm_invalidate`].
    pub fn invalidate(
        &mut self,
        qp: &mut Q,
        wr_id: u64,
        limit: Duration,
    ) -> Result<WaitEffort, VerbsError> {
        self.post_invalidate(qp, wr_id)?;
        self.confirm_invalidate(qp, limit)
    }

    /// The peer's SEND_WITH_INV of the bound rkey was seen (`crate::remote_inv` checked it): the
    /// window grants nothing, and is never invalidated locally (rxe of Linux 6.1 dereferences
    /// NULL when a window invalidated remotely is invalidated again).
    pub fn invalidated_remotely(&mut self) {
        if let State::Bound { .. } = self.state {
            self.state = State::Idle;
        }
    }
}

impl<Q: WindowQp> Drop for Window<Q> {
    /// A window that may still grant access fences its QP before it is deallocated.
    fn drop(&mut self) {
        match self.state {
            State::Idle | State::Fenced => {}
            State::BindPosted { .. } | State::Bound { .. } | State::InvPosted { .. } => {
                tracing::debug!(state = ?self.state, "a window dropped while it may grant access; fencing its QP");
                self.fence();
            }
        }
    }
}

/// Wait for `wr_id` to complete successfully as `opcode`.
fn await_ok<Q: WindowQp>(
    qp: &mut Q,
    wr_id: u64,
    opcode: u32,
    limit: Duration,
    what: &str,
) -> Result<WaitEffort, VerbsError> {
    let (done, effort) = qp.wait(wr_id, limit)?;
    if !done.is_success() || done.opcode != opcode {
        return Err(VerbsError::new(
            "ibv_poll_cq",
            libc::EIO,
            format!(
                "{what} completed with {} (vendor error {:#x}), opcode {}",
                wc_status_name(done.status),
                done.vendor_err,
                done.opcode
            ),
        ));
    }
    Ok(effort)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{inc_rkey, WC_SUCCESS, WC_WR_FLUSH_ERR};
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// What the double's NIC answers to the next wait: a completion of this status, or nothing.
    #[derive(Clone, Copy, Debug)]
    enum Answer {
        Done(u32),
        Nothing,
    }

    /// A QP double: posts succeed unless `fail_posts`, waits answer from `answers` (success by
    /// default), and its fence is a flag the test reads.
    struct DoubleQp {
        fenced: Arc<AtomicBool>,
        fail_posts: bool,
        answers: VecDeque<Answer>,
        /// (wr_id, opcode it will complete as) of each post, in order.
        posted: Vec<(u64, u32)>,
        /// rkeys recorded as bound.
        recorded: Vec<u32>,
    }

    #[derive(Clone)]
    struct DoubleFence(Arc<AtomicBool>);

    impl Fence for DoubleFence {
        fn fence(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
        fn is_fenced(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// The double's window object: its rkey.
    struct DoubleMw(u32);

    impl DoubleQp {
        fn new() -> DoubleQp {
            DoubleQp {
                fenced: Arc::new(AtomicBool::new(false)),
                fail_posts: false,
                answers: VecDeque::new(),
                posted: Vec::new(),
                recorded: Vec::new(),
            }
        }

        fn fenced(&self) -> bool {
            self.fenced.load(Ordering::SeqCst)
        }
    }

    impl WindowQp for DoubleQp {
        type Mw = DoubleMw;
        type Range<'a> = ();
        type Fence = DoubleFence;

        fn fence_handle(&self) -> DoubleFence {
            DoubleFence(Arc::clone(&self.fenced))
        }

        fn owns(&self, fence: &DoubleFence) -> bool {
            Arc::ptr_eq(&self.fenced, &fence.0)
        }

        fn post_bind(&mut self, wr_id: u64, mw: &DoubleMw, _: &()) -> Result<u32, VerbsError> {
            if self.fail_posts {
                return Err(VerbsError::new("ibv_post_send", libc::EINVAL, "double"));
            }
            self.posted.push((wr_id, WC_BIND_MW));
            Ok(inc_rkey(mw.0))
        }

        fn record_bind(&mut self, mw: &mut DoubleMw, rkey: u32) {
            mw.0 = rkey;
            self.recorded.push(rkey);
        }

        fn post_local_inv(&mut self, wr_id: u64, _rkey: u32) -> Result<(), VerbsError> {
            if self.fail_posts {
                return Err(VerbsError::new("ibv_post_send", libc::EINVAL, "double"));
            }
            self.posted.push((wr_id, WC_LOCAL_INV));
            Ok(())
        }

        fn wait(
            &mut self,
            wr_id: u64,
            _limit: Duration,
        ) -> Result<(Completion, WaitEffort), VerbsError> {
            let opcode = self
                .posted
                .iter()
                .find(|(id, _)| *id == wr_id)
                .map(|(_, op)| *op)
                .ok_or_else(|| VerbsError::new("ibv_poll_cq", libc::ETIMEDOUT, "never posted"))?;
            match self.answers.pop_front().unwrap_or(Answer::Done(WC_SUCCESS)) {
                Answer::Nothing => Err(VerbsError::new("ibv_poll_cq", libc::ETIMEDOUT, "double")),
                Answer::Done(status) => Ok((
                    Completion {
                        wr_id,
                        status,
                        opcode,
                        byte_len: 0,
                        vendor_err: 0,
                        wc_flags: 0,
                        imm_data: 0,
                    },
                    WaitEffort::default(),
                )),
            }
        }
    }

    const LIMIT: Duration = Duration::from_millis(10);

    #[test]
    fn a_confirmed_bind_and_invalidation_fence_nothing() {
        let mut qp = DoubleQp::new();
        let mut w = Window::new(DoubleMw(0x100), &qp);
        let (rkey, _) = w.bind(&mut qp, 1, &(), LIMIT).expect("bind");
        assert_eq!(rkey, 0x101);
        assert_eq!((w.rkey(), w.is_bound()), (Some(0x101), true));
        assert_eq!(qp.recorded, [0x101]);
        w.invalidate(&mut qp, 2, LIMIT).expect("invalidate");
        assert_eq!((w.rkey(), w.is_bound()), (None, false));
        // Bound again, with the next rkey.
        assert_eq!(w.bind(&mut qp, 3, &(), LIMIT).expect("rebind").0, 0x102);
        w.invalidate(&mut qp, 4, LIMIT).expect("invalidate");
        drop(w);
        assert!(!qp.fenced(), "nothing unconfirmed: the QP stays usable");
    }

    #[test]
    fn an_unconfirmed_bind_fences_the_qp() {
        for answer in [Answer::Done(WC_WR_FLUSH_ERR), Answer::Nothing] {
            let mut qp = DoubleQp::new();
            qp.answers.push_back(answer);
            let mut w = Window::new(DoubleMw(0x100), &qp);
            assert_eq!(w.post_bind(&mut qp, 1, &()).expect("post"), 0x101);
            assert!(w.confirm_bind(&mut qp, LIMIT).is_err(), "{answer:?}");
            assert!(qp.fenced(), "{answer:?}: an unconfirmed bind fences its QP");
            assert!(w.is_fenced() && w.rkey().is_none());
            assert!(
                qp.recorded.is_empty(),
                "an unconfirmed rkey is never the window's"
            );
            assert!(
                w.bind(&mut qp, 2, &(), LIMIT).is_err(),
                "a fenced QP binds nothing more"
            );
        }
        let mut qp = DoubleQp::new();
        qp.fail_posts = true;
        let mut w = Window::new(DoubleMw(0x100), &qp);
        assert!(w.post_bind(&mut qp, 1, &()).is_err());
        assert!(qp.fenced(), "a bind that could not be posted fences too");
    }

    #[test]
    fn an_unconfirmed_invalidation_fences_the_qp() {
        for answer in [Answer::Done(WC_WR_FLUSH_ERR), Answer::Nothing] {
            let mut qp = DoubleQp::new();
            let mut w = Window::new(DoubleMw(0x100), &qp);
            w.bind(&mut qp, 1, &(), LIMIT).expect("bind");
            qp.answers.push_back(answer);
            assert!(w.invalidate(&mut qp, 2, LIMIT).is_err(), "{answer:?}");
            assert!(
                qp.fenced(),
                "{answer:?}: an unconfirmed invalidation fences its QP"
            );
            assert!(w.is_fenced());
        }
        let mut qp = DoubleQp::new();
        let mut w = Window::new(DoubleMw(0x100), &qp);
        w.bind(&mut qp, 1, &(), LIMIT).expect("bind");
        qp.fail_posts = true;
        assert!(w.invalidate(&mut qp, 2, LIMIT).is_err());
        assert!(
            qp.fenced(),
            "an invalidation that could not be posted fences too"
        );
    }

    #[test]
    fn a_window_dropped_while_it_may_grant_access_fences_its_qp() {
        // A bind posted, never confirmed.
        let mut qp = DoubleQp::new();
        let mut w = Window::new(DoubleMw(0x100), &qp);
        w.post_bind(&mut qp, 1, &()).expect("post");
        drop(w);
        assert!(qp.fenced(), "dropped with its bind unconfirmed");
        // Bound and never ended.
        let mut qp = DoubleQp::new();
        let mut w = Window::new(DoubleMw(0x100), &qp);
        w.bind(&mut qp, 1, &(), LIMIT).expect("bind");
        drop(w);
        assert!(qp.fenced(), "dropped while bound");
        // An invalidation posted, never confirmed.
        let mut qp = DoubleQp::new();
        let mut w = Window::new(DoubleMw(0x100), &qp);
        w.bind(&mut qp, 1, &(), LIMIT).expect("bind");
        w.post_invalidate(&mut qp, 2).expect("post");
        drop(w);
        assert!(qp.fenced(), "dropped with its invalidation unconfirmed");
        // Never bound.
        let qp = DoubleQp::new();
        drop(Window::new(DoubleMw(0x100), &qp));
        assert!(!qp.fenced());
    }

    #[test]
    fn a_remote_invalidation_ends_the_bind_without_a_local_one() {
        let mut qp = DoubleQp::new();
        let mut w = Window::new(DoubleMw(0x100), &qp);
        w.bind(&mut qp, 1, &(), LIMIT).expect("bind");
        w.invalidated_remotely();
        assert_eq!(w.rkey(), None);
        w.invalidate(&mut qp, 2, LIMIT)
            .expect("nothing left to invalidate");
        assert_eq!(
            qp.posted,
            [(1, WC_BIND_MW)],
            "no local invalidation was posted"
        );
        drop(w);
        assert!(!qp.fenced());
    }

    #[test]
    fn a_window_binds_only_on_its_own_qp() {
        let mut qp = DoubleQp::new();
        let mut other = DoubleQp::new();
        let mut w = Window::new(DoubleMw(0x100), &qp);
        assert!(w.post_bind(&mut other, 1, &()).is_err());
        assert!(other.posted.is_empty() && !other.fenced() && !qp.fenced());
        w.bind(&mut qp, 1, &(), LIMIT).expect("bind on its own QP");
        w.invalidate(&mut qp, 2, LIMIT).expect("invalidate");
    }
}

/// The same policy over real verbs (the lane's rxe): a bind the NIC refuses fences the QP.
#[cfg(test)]
mod rxe_tests {
    use super::*;
    use crate::verbs::lane_tests::{self, TestMemory};
    use crate::verbs::{Access, QpCaps};

    const LIMIT: Duration = Duration::from_secs(2);

    fn rts_qp(device: &std::sync::Arc<crate::verbs::Device>) -> RcQp {
        let mut qp = device
            .create_rc_qp(QpCaps {
                max_send_wr: 4,
                max_recv_wr: 1,
                cq_depth: 8,
            })
            .expect("create_rc_qp");
        qp.to_init(Access::REMOTE_WRITE).expect("to INIT");
        let own = qp.qp_num();
        lane_tests::to_rts(&mut qp, device, own);
        qp
    }

    #[test]
    #[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
    fn a_bind_the_nic_refuses_fences_the_qp_and_a_confirmed_one_does_not() {
        let device = lane_tests::open();
        let good = TestMemory::new(&device, 4096, Access::LOCAL_WRITE | Access::MW_BIND);
        let mut qp = rts_qp(&device);
        let mut w = Window::alloc(&qp).expect("alloc_mw");
        let range = |mr| BindRange {
            mr,
            addr: good.mr.addr() as u64,
            len: 4096,
            access: Access::REMOTE_WRITE,
        };
        let (rkey, _) = w.bind(&mut qp, 1, &range(&good.mr), LIMIT).expect("bind");
        assert_eq!(w.rkey(), Some(rkey));
        w.invalidate(&mut qp, 2, LIMIT).expect("invalidate");
        assert!(
            !qp.is_fenced(),
            "a confirmed bind and invalidation fence nothing"
        );
        drop(w);
        assert!(!qp.is_fenced());

        // An MR without MW_BIND: the NIC completes the bind with an error (C10-75).
        let no_bind = TestMemory::new(&device, 4096, Access::LOCAL_WRITE);
        let mut qp = rts_qp(&device);
        let mut w = Window::alloc(&qp).expect("alloc_mw");
        let bad = BindRange {
            mr: &no_bind.mr,
            addr: no_bind.mr.addr() as u64,
            len: 4096,
            access: Access::REMOTE_WRITE,
        };
        assert!(w.bind(&mut qp, 1, &bad, LIMIT).is_err());
        assert!(qp.is_fenced(), "the unconfirmed bind fenced its QP");
        assert!(w.is_fenced() && w.rkey().is_none());
    }
}
