//! Faults the server injects on purpose, for tests only (cargo feature `fault-injection`; the
//! shipped build refuses the flags, config.rs). `--inject-rdma-failures` lives in the engine (it
//! acts on a pairing's QP); this is `--inject-write-offset`: a GET whose RDMA WRITE lands at the
//! wrong offset of the client's memory and is still answered 200, as a server with an offset bug
//! would. Only the client's end-to-end checksum (docs/protocol.md section 15) can catch it.

use super::transfer::{Plan, Remote};

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
