//! Remote invalidation, client side (docs/protocol.md section 11 and 11.A): the zero-length receives a pool connection keeps posted, and reading the one a
//! server's `SEND_WITH_INV` consumed.
//!
//! A connection with a [`RecvRing`] says so in every token (`PORT_FLAG_REMOTE_INV`); a server of
//! revision 4 then ends each transfer with a zero-length SEND_WITH_INV of the window's rkey and
//! says so in its `200` reply, and the client looks for the receive's completion instead of
//! posting a local invalidation. Receives complete in the order they were posted (one receive
//! queue), so the next completion's work-request id is known. The ring is refilled in batches
//! (`ibv_post_recv` only queues: no system call on rxe or hardware providers), never below
//! [`REFILL_BELOW`] outstanding, so a server SEND always finds a receive.

use crate::verbs::{RcQp, VerbsError, WC_FLAG_WITH_INV, WC_FLAG_WITH_INV_KERNEL_ABI, WC_RECV};
use std::time::Duration;

/// Receives posted on a fresh QP and after each refill.
pub const RING: u32 = 16;
/// Refill when fewer than this many are outstanding (each transfer consumes at most one).
pub const REFILL_BELOW: u32 = 8;
/// How long the client looks for the SEND_WITH_INV's receive after a `200` that announced it.
/// A revision-4 server waits for the SEND's completion (the client NIC's acknowledgement, sent
/// after the receive completed) before it answers, so the completion is normally there at the
/// first poll; the bound only matters for a peer that answers earlier.
pub const RECV_WAIT: Duration = Duration::from_millis(200);
// Each transfer consumes at most one receive and refills below REFILL_BELOW: at least
// REFILL_BELOW - 1 stay posted whenever a server SEND may arrive.
const _: () = assert!(REFILL_BELOW >= 2 && REFILL_BELOW <= RING);

/// Work-request ids of receives have this bit set (binds and invalidations count up from 1).
const RECV_WR_TAG: u64 = 1 << 63;

/// What the client found after a `200` that announced a remote invalidation.
#[derive(Debug, PartialEq, Eq)]
pub enum RemoteInv {
    /// The receive completed with `IBV_WC_WITH_INV` of the window's rkey: the window is invalid.
    Invalidated,
    /// No completion within [`RECV_WAIT`]: invalidate locally, and retire the QP (a late SEND
    /// would otherwise consume a receive meant for a later transfer).
    NotSeen,
    /// The receive completed with an error status (flushed: the QP went to ERR, e.g. after the
    /// server's access was refused): no SEND consumed it; the QP is replaced.
    Failed(String),
    /// A successful completion that is not a SEND_WITH_INV of this rkey (another rkey, no
    /// invalidation): a protocol error; the QP goes to ERR and is replaced.
    Wrong(String),
}

/// The zero-length receives of one QP: how many are posted and which completes next.
#[derive(Debug)]
pub struct RecvRing {
    /// Receives posted and not yet consumed.
    outstanding: u32,
    /// Sequence number of the next receive to post / to complete.
    next_post: u64,
    next_done: u64,
}

impl RecvRing {
    /// Post [`RING`] receives on `qp` (any state from INIT on).
    pub fn fill(qp: &mut RcQp) -> Result<RecvRing, VerbsError> {
        let mut ring = RecvRing {
            outstanding: 0,
            next_post: 0,
            next_done: 0,
        };
        ring.top_up(qp)?;
        Ok(ring)
    }

    /// Receives posted and not yet consumed.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Post receives until [`RING`] are outstanding.
    fn top_up(&mut self, qp: &mut RcQp) -> Result<(), VerbsError> {
        while self.outstanding < RING {
            qp.post_recv(RECV_WR_TAG | self.next_post, None)?;
            self.next_post += 1;
            self.outstanding += 1;
        }
        Ok(())
    }

    /// Refill in a batch once fewer than [`REFILL_BELOW`] are outstanding.
    pub fn refill(&mut self, qp: &mut RcQp) -> Result<(), VerbsError> {
        if self.outstanding < REFILL_BELOW {
            self.top_up(qp)?;
        }
        Ok(())
    }

    /// Look for the completion of the next receive (bounded by `limit`) and check that it is the
    /// SEND_WITH_INV of `rkey`.
    pub fn await_inv(&mut self, qp: &mut RcQp, rkey: u32, limit: Duration) -> RemoteInv {
        let wr_id = RECV_WR_TAG | self.next_done;
        let done = match qp.wait_completion(wr_id, limit) {
            Ok(done) => done,
            Err(e) if e.errno == libc::ETIMEDOUT => return RemoteInv::NotSeen,
            Err(e) => return RemoteInv::Wrong(format!("polling for the remote invalidation: {e}")),
        };
        self.next_done += 1;
        self.outstanding = self.outstanding.saturating_sub(1);
        judge(done.status, done.opcode, done.wc_flags, done.imm_data, rkey)
    }
}

/// Rule 11.2: is a receive completion the SEND_WITH_INV of `rkey`?
fn judge(status: u32, opcode: u32, wc_flags: u32, invalidated: u32, rkey: u32) -> RemoteInv {
    if status != crate::verbs::WC_SUCCESS {
        return RemoteInv::Failed(format!(
            "the receive for the remote invalidation completed with {}",
            crate::verbs::wc_status_name(status)
        ));
    }
    // libibverbs' IBV_WC_WITH_INV, or the kernel's bit as rxe hands it over. The rkey check
    // below is what makes the second safe: a receive without an invalidation carries no rkey
    // (an immediate would set WITH_IMM, refused here).
    let with_inv = wc_flags & (WC_FLAG_WITH_INV | WC_FLAG_WITH_INV_KERNEL_ABI) != 0;
    if opcode != WC_RECV || !with_inv || wc_flags & crate::verbs::WC_FLAG_WITH_IMM != 0 {
        return RemoteInv::Wrong(format!(
            "the server sent opcode {opcode} (flags {wc_flags:#x}), not a SEND_WITH_INV"
        ));
    }
    if invalidated != rkey {
        return RemoteInv::Wrong(format!(
            "the server invalidated rkey {invalidated:#x}, not the window's {rkey:#x}"
        ));
    }
    RemoteInv::Invalidated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_send_with_inv_of_the_window_counts() {
        assert_eq!(
            judge(0, WC_RECV, WC_FLAG_WITH_INV, 0x1234_5601, 0x1234_5601),
            RemoteInv::Invalidated
        );
        // rxe: GRH + the kernel's IB_WC_WITH_INVALIDATE (measured in the lane).
        assert_eq!(
            judge(0, WC_RECV, 0x5, 0x1234_5601, 0x1234_5601),
            RemoteInv::Invalidated
        );
        assert!(matches!(
            judge(0, WC_RECV, 0x5 | crate::verbs::WC_FLAG_WITH_IMM, 1, 1),
            RemoteInv::Wrong(_)
        ));
        assert!(matches!(
            judge(0, WC_RECV, 0x5, 0, 0x1234_5601),
            RemoteInv::Wrong(_)
        ));
        let other_rkey = judge(0, WC_RECV, WC_FLAG_WITH_INV, 0x1234_5602, 0x1234_5601);
        assert!(matches!(other_rkey, RemoteInv::Wrong(w) if w.contains("0x12345602")));
        assert!(matches!(
            judge(0, WC_RECV, 0, 0x1234_5601, 0x1234_5601),
            RemoteInv::Wrong(_)
        ));
        assert!(matches!(
            judge(
                0,
                crate::verbs::WC_RECV_RDMA_WITH_IMM,
                WC_FLAG_WITH_INV,
                1,
                1
            ),
            RemoteInv::Wrong(_)
        ));
        assert!(matches!(
            judge(
                crate::verbs::WC_WR_FLUSH_ERR,
                WC_RECV,
                WC_FLAG_WITH_INV,
                1,
                1
            ),
            RemoteInv::Failed(_)
        ));
    }
}
