//! Whether a hipobj-rc-v2 PUT waits between writing READY and posting its WRITE_WITH_IMM, decided
//! per peer from what the peer showed (issue 39).
//!
//! Rule 10.5 has the server post the receive for the client's WRITE before it answers PREPARE
//! (`hipobj-server` does), so no wait is needed; elbencho's s3rdma-server connects its QP and
//! posts its receive only when READY arrives, so a WRITE sent at once is dropped and RC resends it
//! one ACK timeout later (67 ms, `verbs::rc::RC_TIMEOUT`; 6 tries), and a busy peer slower than
//! that would fail the transfer. The wire has no field that says which kind a peer is, so the
//! client learns it, per server GID (the PREPARE answer's token), for the process:
//!
//! ```text
//! peer unknown, PUT of at most LEARN_MAX_BYTES:  no wait; the WRITE's completion timed from its
//!     post: within LATE_WRITE (well under one ACK timeout, so nothing was resent) -> ready;
//!     later, or the data phase failed                                        -> late
//! peer unknown, larger PUT:                      the grace (its WRITE time says nothing)
//! peer ready:                                    no wait; a small PUT's WRITE that completes late
//!                                                after all makes it late
//! peer late:                                     the grace (`client::put_grace`) from then on
//! ```
//!
//! The cost of learning a late peer is one small PUT that completes one ACK timeout later (or,
//! against a peer slower than RC's retries, one failed transfer that the caller's retry repeats
//! with the grace). Two servers behind one GID share what was learned; a wrong "ready" is
//! corrected by the first late WRITE.

use hipobj_actors::sync::Mutex;
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

/// PUTs up to this size teach whether a peer needs the wait: their WRITE takes far less than one
/// ACK timeout on any NIC this runs on (1 MiB at 100 MB/s: 10 ms).
pub const LEARN_MAX_BYTES: u64 = 1 << 20;

/// A learning WRITE that completes later than this after its post was (probably) resent: the
/// peer was not ready. One ACK timeout is 67 ms.
pub const LATE_WRITE: Duration = Duration::from_millis(30);

/// What a peer was found to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Its receive is posted before it answers PREPARE: no wait.
    Ready,
    /// It posts its receive only after READY: the grace.
    Late,
}

/// How one PUT goes: the wait before its WRITE, and whether its WRITE's time teaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub wait: Duration,
    pub learns: bool,
}

/// What the PUTs of this process found about each peer (thread-safe).
#[derive(Debug, Default)]
pub struct Peers {
    known: Mutex<HashMap<[u8; 16], Readiness>>,
}

/// The process's memory of its peers.
pub static PEERS: LazyLock<Peers> = LazyLock::new(Peers::default);

impl Peers {
    /// The plan of a PUT of `size` bytes to the peer `gid`, whose grace would be `grace`.
    pub fn plan(&self, gid: &[u8; 16], size: u64, grace: Duration) -> Plan {
        let small = size <= LEARN_MAX_BYTES;
        match self.readiness(gid) {
            Some(Readiness::Late) => Plan {
                wait: grace,
                learns: false,
            },
            Some(Readiness::Ready) => Plan {
                wait: Duration::ZERO,
                learns: small,
            },
            None if small => Plan {
                wait: Duration::ZERO,
                learns: true,
            },
            None => Plan {
                wait: grace,
                learns: false,
            },
        }
    }

    /// A PUT planned as `plan` ended: its WRITE completed `write` after its post (None: the data
    /// phase failed).
    pub fn learn(&self, gid: &[u8; 16], plan: Plan, write: Option<Duration>) {
        if !plan.learns {
            return;
        }
        let found = match write {
            Some(t) if t <= LATE_WRITE => Readiness::Ready,
            _ => Readiness::Late,
        };
        let mut known = self.known.lock();
        // Late stays late: a peer that once needed the wait keeps it.
        if known.get(gid) != Some(&Readiness::Late) && known.insert(*gid, found) != Some(found) {
            tracing::debug!(peer = %hex::encode(gid), ?found, "hipobj-rc-v2 PUT: learned the peer");
        }
    }

    /// What `gid` was found to be, if a PUT found out.
    pub fn readiness(&self, gid: &[u8; 16]) -> Option<Readiness> {
        self.known.lock().get(gid).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_millis(3);
    const OURS: [u8; 16] = [1; 16];
    const ELBENCHO: [u8; 16] = [2; 16];

    #[test]
    fn a_peer_whose_first_small_put_lands_at_once_gets_no_wait() {
        let peers = Peers::default();
        let first = peers.plan(&OURS, 4096, GRACE);
        assert_eq!(
            first,
            Plan {
                wait: Duration::ZERO,
                learns: true
            }
        );
        peers.learn(&OURS, first, Some(Duration::from_micros(200)));
        assert_eq!(peers.readiness(&OURS), Some(Readiness::Ready));
        // Large PUTs to it do not wait either, and teach nothing.
        assert_eq!(
            peers.plan(&OURS, 64 << 20, GRACE),
            Plan {
                wait: Duration::ZERO,
                learns: false
            }
        );
    }

    #[test]
    fn a_peer_whose_write_was_resent_waits_from_then_on() {
        let peers = Peers::default();
        let first = peers.plan(&ELBENCHO, 4096, GRACE);
        peers.learn(&ELBENCHO, first, Some(Duration::from_millis(68)));
        assert_eq!(peers.readiness(&ELBENCHO), Some(Readiness::Late));
        assert_eq!(
            peers.plan(&ELBENCHO, 4096, GRACE),
            Plan {
                wait: GRACE,
                learns: false
            }
        );
        // A failed data phase teaches the same.
        let other = [3; 16];
        let p = peers.plan(&other, 1, GRACE);
        peers.learn(&other, p, None);
        assert_eq!(peers.readiness(&other), Some(Readiness::Late));
    }

    #[test]
    fn an_unknown_peer_waits_before_a_large_put_and_late_stays_late() {
        let peers = Peers::default();
        let big = peers.plan(&ELBENCHO, LEARN_MAX_BYTES + 1, GRACE);
        assert_eq!(
            big,
            Plan {
                wait: GRACE,
                learns: false
            }
        );
        peers.learn(&ELBENCHO, big, Some(Duration::from_micros(1)));
        assert_eq!(peers.readiness(&ELBENCHO), None);

        let small = peers.plan(&OURS, 1, GRACE);
        peers.learn(&OURS, small, Some(Duration::from_micros(1)));
        let again = peers.plan(&OURS, 1, GRACE);
        peers.learn(&OURS, again, Some(Duration::from_millis(70)));
        assert_eq!(peers.readiness(&OURS), Some(Readiness::Late));
        peers.learn(&OURS, small, Some(Duration::from_micros(1)));
        assert_eq!(peers.readiness(&OURS), Some(Readiness::Late));
    }
}
