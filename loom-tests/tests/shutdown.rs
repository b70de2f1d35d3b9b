//! Model 1: shutdown racing a transfer that holds a connection and a transfer waiting for one.
#![cfg(hipobj_loom)]

use hipobj_actors::sync::channel::unbounded;
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::library::{self as api, ApiError, Library, Spec, Stage};

const BUF: usize = 0x1000;

fn one_connection() -> Spec {
    Spec {
        generation: 1,
        connections: 1,
        buffers: &[BUF],
    }
}

/// The holder keeps its connection until the waiter has answered (a transfer stuck on an
/// unreachable server, say), so only shutdown can end the waiter's wait. Whatever the order: no
/// use after release, the waiter gets NotInitialized (the closed pool, or no instance), and the
/// instance is released exactly once, after the last call (its `Drop` asserts no call in flight).
#[test]
fn shutdown_wakes_a_waiter_while_a_holder_runs() {
    check(
        "shutdown_wakes_a_waiter_while_a_holder_runs",
        2,
        &["waiter: no instance", "waiter: pool closed"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &one_connection()).unwrap();
            // The holder's callback (it holds the only connection) starts the waiter and waits
            // for it to answer; main shuts down once the holder has its connection.
            let (leased, has_lease) = unbounded::<()>();
            let holder_lib = lib.clone();
            let holder = thread::spawn(move || {
                let mut waited = None;
                let ran = api::transfer_with(&holder_lib, BUF, &mut || {
                    leased.send(()).unwrap();
                    let waiter_lib = holder_lib.clone();
                    let waiter = thread::spawn(move || api::transfer_explained(&waiter_lib, BUF));
                    waited = Some(waiter.join().unwrap());
                });
                assert_eq!(ran, Ok(1), "the holder runs on its instance");
                waited.expect("the callback ran")
            });

            has_lease.recv().unwrap();
            assert!(api::shutdown(&lib));
            let waited = holder.join().unwrap().expect_err("the holder never let go");
            assert_eq!(waited.answer, ApiError::NotInitialized);
            seen.record(match waited.stage {
                Stage::Instance => "waiter: no instance",
                Stage::Connection => "waiter: pool closed",
                Stage::Buffer => panic!("refused by the registry: {waited:?}"),
            });
            assert!(lib.current().is_none());
            probe.assert_all_released_once();
            assert_eq!(Arc::strong_count(&lib), 1);
        },
    );
}

/// Two ordinary transfers on one connection racing shutdown: each either runs on the live
/// instance or gets NotInitialized; the instance is released exactly once, after both.
#[test]
fn shutdown_races_two_transfers() {
    check(
        "shutdown_races_two_transfers",
        2,
        &["2 ran", "1 ran", "0 ran", "refused by the closed pool"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &one_connection()).unwrap();
            let calls: Vec<_> = (0..2)
                .map(|_| {
                    let lib = lib.clone();
                    thread::spawn(move || api::transfer_explained(&lib, BUF))
                })
                .collect();
            assert!(api::shutdown(&lib));
            let mut ran = 0;
            for call in calls {
                match call.join().unwrap() {
                    Ok(1) => ran += 1,
                    Err(r) if r.answer == ApiError::NotInitialized => {
                        if r.stage == Stage::Connection {
                            seen.record("refused by the closed pool");
                        }
                    }
                    other => panic!("transfer: {other:?}"),
                }
            }
            seen.record(["0 ran", "1 ran", "2 ran"][ran]);
            probe.assert_all_released_once();
        },
    );
}
