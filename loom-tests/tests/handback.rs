//! Model: the hand-back of a pool connection, by value. A lease moves the connection to the
//! caller's thread; it comes back either from the caller (a transfer that succeeded drops its
//! lease) or from the connection's recovery worker (a failed transfer hands the lease over, and
//! the worker returns it once renewed). Drives `hipobj_actors::pool` and
//! `hipobj_actors::recovery` themselves; the connection is the double of
//! `hipobj_loom_tests::connection`.
#![cfg(hipobj_loom)]

use hipobj_actors::pool::{AcquireError, Pool, Wait};
use hipobj_actors::recovery::RecoveryHandle;
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::connection::{Connection, QpProbe};
use hipobj_loom_tests::harness::check;
use std::sync::Arc as StdArc;
use std::time::Duration;

/// Its pause between renewals is no time under loom: a retry is an arbitrary later moment.
const RETRY: Duration = Duration::from_millis(100);

fn worker() -> RecoveryHandle<Connection> {
    RecoveryHandle::spawn("hipobj-qp-00".into(), RETRY).unwrap()
}

/// One connection, whose first renewal fails. A transfer that fails hands it to the worker while
/// another transfer (main) waits for it, or leased it first and drops its lease itself. Whatever
/// the order: every lease gets a usable connection (never the failed one, never one in use:
/// loom sees the QP's uses), a waiter is woken by the worker's give-back, the connection ends in
/// the pool, nothing else holds the pool, and every QP is released exactly once.
#[test]
fn a_connection_comes_back_from_its_caller_or_renewed_from_its_worker() {
    check(
        "a_connection_comes_back_from_its_caller_or_renewed_from_its_worker",
        2,
        &[
            "main leased it before the failed transfer",
            "main leased it renewed by the worker",
        ],
        |seen| {
            let probe = StdArc::new(QpProbe::default());
            let pool = Pool::new(vec![Connection::new(&probe, 1)]);
            let recovery = Arc::new(worker());

            let (failing_pool, failing_recovery) = (pool.clone(), recovery.clone());
            let failing = thread::spawn(move || {
                let mut lease = Pool::acquire(&failing_pool, Wait::Block).unwrap();
                lease.transfer(true);
                failing_recovery.release(lease, false);
            });

            let mut lease = Pool::acquire(&pool, Wait::Block).unwrap();
            seen.record(if probe.attempts() == 0 {
                "main leased it before the failed transfer"
            } else {
                "main leased it renewed by the worker"
            });
            lease.transfer(false);
            recovery.release(lease, true);
            failing.join().unwrap();

            // Whoever had it last, it comes back usable.
            let lease = Pool::acquire(&pool, Wait::Block).unwrap();
            assert!(!lease.is_failed(), "a failed connection rejoined the pool");
            drop(lease);
            drop(Arc::try_unwrap(recovery).ok().expect("one recovery handle"));
            assert_eq!(pool.free_count(), 1, "the connection is back in the pool");
            assert_eq!(Arc::strong_count(&pool), 1, "no lease outlives the worker");
            assert_eq!(probe.created(), 2, "one renewal replaced the QP");
            drop(pool);
            probe.assert_all_released_once();
        },
    );
}

/// Two connections; the pool closes while one is leased by main and the other may be at the
/// worker (its first renewal fails). The closed pool refuses new leases, and yet both connections
/// come back to it: main's from main, the failed one from the worker, renewed, or as it is when
/// the worker stops first; then every QP is released exactly once, with the pool.
#[test]
fn close_while_leases_are_out() {
    check(
        "close_while_leases_are_out",
        2,
        &[
            "the failing transfer was refused",
            "returned renewed",
            "returned as it was when the worker stopped",
        ],
        |seen| {
            let probe = StdArc::new(QpProbe::default());
            let pool = Pool::new(vec![Connection::new(&probe, 1), Connection::new(&probe, 1)]);
            let recovery = Arc::new(worker());
            let held = Pool::acquire(&pool, Wait::No).unwrap();

            let (failing_pool, failing_recovery) = (pool.clone(), recovery.clone());
            let failing = thread::spawn(move || match Pool::acquire(&failing_pool, Wait::Block) {
                Ok(mut lease) => {
                    lease.transfer(true);
                    failing_recovery.release(lease, false);
                    true
                }
                Err(e) => {
                    assert_eq!(e, AcquireError::Closed);
                    false
                }
            });

            pool.close();
            assert_eq!(
                Pool::acquire(&pool, Wait::Block).err(),
                Some(AcquireError::Closed)
            );
            drop(held);
            let leased = failing.join().unwrap();
            drop(Arc::try_unwrap(recovery).ok().expect("one recovery handle"));
            assert_eq!(pool.free_count(), 2, "every connection came back");
            assert_eq!(Arc::strong_count(&pool), 1, "no lease outlives the worker");
            seen.record(match (leased, probe.created()) {
                (false, _) => "the failing transfer was refused",
                (true, 3) => "returned renewed",
                (true, _) => "returned as it was when the worker stopped",
            });
            drop(pool);
            probe.assert_all_released_once();
        },
    );
}
