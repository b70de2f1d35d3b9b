//! Model: recovery of a failed pool connection on its worker (docs/protocol.md rule 5.5: replace the
//! QP, retrying until a fresh one exists). Drives `hipobj_actors::recovery` and
//! `hipobj_actors::pool`; the connection is the double of `hipobj_loom_tests::connection`.
#![cfg(hipobj_loom)]

use hipobj_actors::pool::{AcquireError, Pool, Wait};
use hipobj_actors::recovery::RecoveryHandle;
use hipobj_actors::sync::thread;
use hipobj_loom_tests::connection::{Connection, QpProbe};
use hipobj_loom_tests::harness::check;
use std::sync::Arc as StdArc;
use std::time::Duration;

/// One connection whose first two renewals fail. A transfer fails on it and hands it to the
/// worker; a transfer from a callback (Wait::No) meanwhile finds the pool empty (Busy) for as
/// long as the worker retries, or the connection renewed, never failed. Then a waiting transfer
/// gets it renewed, after exactly three attempts, and every QP is released exactly once.
#[test]
fn recovery_retries_and_keeps_the_connection_out_of_the_pool() {
    check(
        "recovery_retries_and_keeps_the_connection_out_of_the_pool",
        2,
        &[
            "busy while it recovers",
            "renewed before the callback asked",
        ],
        |seen| {
            let probe = StdArc::new(QpProbe::default());
            let pool = Pool::new(vec![Connection::new(&probe, 2)]);
            let recovery = RecoveryHandle::spawn("hipobj-qp-00".into(), Duration::ZERO).unwrap();

            let mut lease = Pool::acquire(&pool, Wait::No).unwrap();
            lease.transfer(true);
            recovery.release(lease, false);

            let callback_pool = pool.clone();
            let callback = thread::spawn(move || match Pool::acquire(&callback_pool, Wait::No) {
                Ok(lease) => {
                    assert!(!lease.is_failed(), "a failed connection rejoined the pool");
                    "renewed before the callback asked"
                }
                Err(e) => {
                    assert_eq!(e, AcquireError::Busy);
                    "busy while it recovers"
                }
            });
            seen.record(callback.join().unwrap());

            let lease = Pool::acquire(&pool, Wait::Block).unwrap();
            assert!(!lease.is_failed(), "a failed connection rejoined the pool");
            assert_eq!(probe.attempts(), 3, "two failed renewals, then a fresh QP");
            drop(lease);
            drop(recovery);
            assert_eq!(pool.free_count(), 1);
            drop(pool);
            probe.assert_all_released_once();
        },
    );
}
