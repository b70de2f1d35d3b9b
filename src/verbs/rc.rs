//! The one RC connection setup of this project: the attributes docs/protocol.md sections 4 and 5 fix,
//! the INIT -> RTR -> RTS assembly, and the starting PSNs. The client pool, the server's pairings
//! and hipobj-rc-v2's per-transfer QPs all connect through [`RcQp::connect`].

use super::error::VerbsError;
use super::qp::{RcQp, RtrParams, RtsParams, MAX_PSN};

/// Local ACK timeout exponent: 4.096 us * 2^14 = 67 ms (docs/protocol.md rule 4.3).
pub const RC_TIMEOUT: u8 = 14;
/// Transport retries. Never 7: rxe retries forever on 7 (docs/protocol.md section 8).
pub const RC_RETRY_CNT: u8 = 6;
/// RNR retries, finite for the same reason.
pub const RC_RNR_RETRY: u8 = 6;
/// Minimum RNR NAK timer (12: 0.64 ms).
pub const RC_MIN_RNR_TIMER: u8 = 12;

/// The remote end of an RC connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcPeer {
    pub qp_num: u32,
    pub gid: [u8; 16],
}

/// A random starting PSN, 1..=0xffffff: unpredictable per connection (docs/protocol.md section 8), and
/// never 0, which hipobj-rc-v2 peers reject.
pub fn random_psn() -> u32 {
    loop {
        let psn = crate::random::psn() & MAX_PSN;
        if psn != 0 {
            return psn;
        }
    }
}

impl RcQp {
    /// INIT -> RTR -> RTS aimed at `peer`: `rq_psn` is the first PSN the peer sends, `sq_psn` our
    /// own; path MTU = the port's active MTU, `max_dest_rd_atomic` = the device's
    /// `max_qp_rd_atom`, `max_rd_atomic` = the READs this side keeps in flight (1 for a side that
    /// posts none), and the RC constants above.
    pub fn connect(
        &mut self,
        peer: &RcPeer,
        rq_psn: u32,
        sq_psn: u32,
        max_rd_atomic: u8,
    ) -> Result<(), VerbsError> {
        let device = std::sync::Arc::clone(self.device());
        self.to_rtr(&RtrParams {
            dest_qp_num: peer.qp_num,
            dest_gid: peer.gid,
            rq_psn,
            path_mtu: device.port().active_mtu,
            max_dest_rd_atomic: device.caps().max_qp_rd_atom.max(1),
            min_rnr_timer: RC_MIN_RNR_TIMER,
        })?;
        self.to_rts(&RtsParams {
            sq_psn,
            timeout: RC_TIMEOUT,
            retry_cnt: RC_RETRY_CNT,
            rnr_retry: RC_RNR_RETRY,
            max_rd_atomic: max_rd_atomic.max(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_psns_are_24_bit_and_never_zero() {
        for _ in 0..10_000 {
            let psn = random_psn();
            assert!((1..=MAX_PSN).contains(&psn), "{psn:#x}");
        }
    }

    #[test]
    fn the_retry_count_is_never_the_infinite_seven() {
        const { assert!(RC_RETRY_CNT < 7 && RC_RNR_RETRY < 7) };
    }
}
