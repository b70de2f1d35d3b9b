//! A pool connection double for the hand-back and recovery models: a QP ([`Resource`]: loom sees a
//! use after release) that a transfer can leave failed, and whose renewal (the library's "replace
//! the QP", docs/protocol.md rule 5.5) fails a set number of times before a fresh QP exists.

use crate::resource::Resource;
use hipobj_actors::recovery::Renew;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc as StdArc, Mutex as StdMutex};

/// Every QP the connections of a model created, and the renewal attempts: bookkeeping for the
/// assertions at the end of a model (plain std, not explored by loom).
#[derive(Default)]
pub struct QpProbe {
    qps: StdMutex<Vec<StdArc<Resource>>>,
    attempts: AtomicUsize,
}

impl QpProbe {
    fn create(&self) -> StdArc<Resource> {
        let qp = Resource::new("QP");
        self.qps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(qp.clone());
        qp
    }

    /// Renewals tried (failed or not).
    pub fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }

    /// QPs created.
    pub fn created(&self) -> usize {
        self.qps.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Every QP was released exactly once (replaced ones by their renewal, the last ones with
    /// the pool).
    pub fn assert_all_released_once(&self) {
        for qp in self.qps.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            assert_eq!(qp.frees(), 1, "QP releases");
        }
    }
}

/// A pool connection of the models.
pub struct Connection {
    qp: StdArc<Resource>,
    failed: bool,
    /// Renewals that fail (no fresh QP yet) before one succeeds.
    failures_left: usize,
    probe: StdArc<QpProbe>,
}

impl Connection {
    /// A fresh connection whose renewals fail `failures` times before a fresh QP exists.
    pub fn new(probe: &StdArc<QpProbe>, failures: usize) -> Connection {
        Connection {
            qp: probe.create(),
            failed: false,
            failures_left: failures,
            probe: probe.clone(),
        }
    }

    /// A transfer on the leased connection: uses the QP exclusively; `fails` leaves it failed
    /// (it must then be renewed before anyone uses it again).
    pub fn transfer(&mut self, fails: bool) {
        assert!(!self.failed, "a failed connection was leased");
        self.qp.write();
        self.failed = fails;
    }

    pub fn is_failed(&self) -> bool {
        self.failed
    }
}

impl Renew for Connection {
    type Error = &'static str;

    fn renew(&mut self) -> Result<(), &'static str> {
        self.probe.attempts.fetch_add(1, Ordering::SeqCst);
        if self.failures_left > 0 {
            self.failures_left -= 1;
            return Err("no fresh QP yet");
        }
        let fresh = self.probe.create();
        std::mem::replace(&mut self.qp, fresh).free();
        self.failed = false;
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.qp.free();
    }
}
