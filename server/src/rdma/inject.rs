//! Faults the server injects on purpose, for tests only: compiled with the cargo feature
//! `fault-injection`, which the shipped build does not enable (config.rs refuses the flags
//! without it).
//! - `--inject-rdma-failures N`: the next N token transfers fail (their QP goes to ERR first).
//! - `--inject-write-offset N`: every GET's RDMA WRITE lands N bytes past the client's address and
//!   is still answered 200, as a server with an offset bug would; only the client's end-to-end
//!   checksum (docs/protocol.md section 15) can catch it. v1 and v2 GETs alike.

use std::sync::atomic::{AtomicU64, Ordering};

use hipobj::token::Token;
use tracing::warn;

use super::port::RdmaQp;
use super::transfer::{Plan, Remote};
use crate::stats::Stats;

/// The faults to inject: how many token transfers are still to fail, and the GETs' write offset.
#[derive(Debug)]
pub struct Injections {
    left: AtomicU64,
    write_offset: u64,
}

impl Injections {
    pub fn new(failures: u64, write_offset: u64) -> Self {
        Injections {
            left: AtomicU64::new(failures),
            write_offset,
        }
    }

    /// A GET's WRITE plan as `--inject-write-offset` makes it ([`shifted_write`]); unchanged
    /// without the flag.
    pub fn write_plan(&self, plan: Plan) -> Plan {
        if self.write_offset == 0 {
            return plan;
        }
        warn!(
            by = self.write_offset,
            "injected fault: this GET's RDMA WRITE lands at the wrong offset"
        );
        shifted_write(plan, self.write_offset)
    }

    /// Fail this transfer when any failure is left (counts it down): `qp` goes to ERR before
    /// the first work request, so the transfer takes the real failure path.
    pub fn maybe_fail<Q: RdmaQp>(&self, qp: &mut Q, token: &Token, stats: &Stats) {
        let take = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if take.is_err() {
            return;
        }
        warn!(
            client_qpn = token.qp_num,
            "injected RDMA failure: QP moved to ERR"
        );
        Stats::bump(&stats.injected_failures);
        if let Err(e) = qp.to_error() {
            warn!(error = %e, "moving the QP to ERR failed");
        }
    }
}

/// A GET's WRITE plan moved `by` bytes into the client's memory: the object's first bytes land at
/// the destination's byte `by`, and its last `by` bytes are not sent, so every WRITE stays inside
/// the memory the client exposed (its MR or memory window) and completes without an error. At
/// least one byte is still written (an object shorter than `by` + 1 moves by its length - 1).
pub fn shifted_write(plan: Plan, by: u64) -> Plan {
    let by = by.min(plan.total.saturating_sub(1));
    Plan {
        total: plan.total - by,
        remote: Remote {
            addr: plan.remote.addr + by,
            ..plan.remote
        },
        ..plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::port::RdmaOp;
    use crate::rdma::transfer::Shape;

    fn plan(total: u64) -> Plan {
        Plan {
            shape: Shape::new(RdmaOp::Write, 1000, 1 << 20, 4, 16),
            total,
            remote: Remote {
                addr: 0x1000,
                rkey: 7,
            },
            last_imm: Some(9),
            send_inv: None,
        }
    }

    #[test]
    fn injected_write_offset_moves_the_destination_and_stays_inside_it() {
        let p = shifted_write(plan(3000), 100);
        assert_eq!(
            (p.remote.addr, p.total, p.remote.rkey),
            (0x1000 + 100, 2900, 7)
        );
        assert_eq!(p.last_imm, Some(9), "the rest of the plan is kept");
        // the end of the WRITE is where the client's memory ends: inside its MR or window
        assert_eq!(p.remote.addr + p.total, 0x1000 + 3000);
        // a shorter object still writes one byte; an empty one nothing
        let short = shifted_write(plan(10), 100);
        assert_eq!((short.remote.addr, short.total), (0x1000 + 9, 1));
        assert_eq!(shifted_write(plan(0), 100).total, 0);
        assert_eq!(shifted_write(plan(3000), 0).remote.addr, 0x1000);
    }
}
