//! Token transfers failed on purpose (`--inject-rdma-failures`), for tests only: compiled with the
//! cargo feature `fault-injection`, which the shipped build does not enable.

use std::sync::atomic::{AtomicU64, Ordering};

use hipobj::token::Token;
use tracing::warn;

use super::port::RdmaQp;
use crate::stats::Stats;

/// How many token transfers are still to fail.
#[derive(Debug)]
pub struct InjectedFailures {
    left: AtomicU64,
}

impl InjectedFailures {
    pub fn new(count: u64) -> Self {
        InjectedFailures {
            left: AtomicU64::new(count),
        }
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
