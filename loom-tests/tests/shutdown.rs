//! Model 1: shutdown racing a transfer that holds a connection and a transfer waiting for one.
#![cfg(hipobj_loom)]

use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::runtime_double::{self as api, ApiError, Library, Spec, Transfer};

const BUF: usize = 0x1000;

fn one_connection(generation: u32) -> Spec {
    Spec {
        generation,
        connections: 1,
        buffers: &[BUF],
    }
}

/// The holder keeps its connection until the waiter has answered (a transfer stuck on an
/// unreachable server, say), so only shutdown can end the waiter's wait. Whatever the order: no
/// use after release, the waiter gets NotInitialized (the closed pool or no instance), and the
/// instance is released exactly once, after the last call.
#[test]
fn shutdown_wakes_a_waiter_while_a_holder_runs() {
    check("shutdown_wakes_a_waiter_while_a_holder_runs", 2, || {
        let lib = Arc::new(Library::new());
        let probe = api::init(&lib, &one_connection(1)).unwrap();

        // The holder's lease is taken before the others start; the thread that owns it follows.
        let held = Transfer::begin(&lib, BUF).expect("the first transfer gets the only connection");
        let waiter_lib = lib.clone();
        let waiter = thread::spawn(move || api::transfer(&waiter_lib, BUF));
        let holder = thread::spawn(move || {
            let waited = waiter.join().unwrap();
            held.run();
            drop(held);
            waited
        });

        assert!(api::shutdown(&lib));
        let waited = holder.join().unwrap();
        assert_eq!(waited, Err(ApiError::NotInitialized));
        assert!(lib.current().is_none());
        probe.assert_all_released_once();
        assert_eq!(Arc::strong_count(&lib), 1);
    });
}

/// Two ordinary transfers on one connection racing shutdown: each either runs on the live
/// instance or gets NotInitialized; the instance is released exactly once, after both.
#[test]
fn shutdown_races_two_transfers() {
    check("shutdown_races_two_transfers", 2, || {
        let lib = Arc::new(Library::new());
        let probe = api::init(&lib, &one_connection(1)).unwrap();
        let calls: Vec<_> = (0..2)
            .map(|_| {
                let lib = lib.clone();
                thread::spawn(move || api::transfer(&lib, BUF))
            })
            .collect();
        assert!(api::shutdown(&lib));
        for call in calls {
            let r = call.join().unwrap();
            assert!(
                matches!(r, Ok(1) | Err(ApiError::NotInitialized)),
                "transfer: {r:?}"
            );
        }
        probe.assert_all_released_once();
    });
}
