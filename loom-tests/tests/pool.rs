//! Model: a connection given back wakes the transfer waiting for it (the pool notifies only
//! when someone waits, so a give-back that missed its waiter would leave it blocked for good).
#![cfg(hipobj_loom)]

use hipobj_actors::sync::channel::unbounded;
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::library::{self as api, Library, Spec};

const BUF: usize = 0x1000;

/// The holder leases the only connection; once it has it, a second transfer asks for one and
/// may block until the holder gives it back. Whatever the order both run, and the instance is
/// released exactly once after them.
#[test]
fn a_released_connection_wakes_its_waiter() {
    check(
        "a_released_connection_wakes_its_waiter",
        2,
        &["both ran"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(
                &lib,
                &Spec {
                    generation: 1,
                    connections: 1,
                    buffers: &[BUF],
                },
            )
            .unwrap();
            let (leased, has_lease) = unbounded::<()>();
            let holder_lib = lib.clone();
            let holder = thread::spawn(move || {
                api::transfer_with(&holder_lib, BUF, &mut || leased.send(()).unwrap())
                    .map_err(|r| r.answer)
            });
            has_lease.recv().unwrap();
            let waiter = api::transfer(&lib, BUF);
            assert_eq!(holder.join().unwrap(), Ok(1), "the holder runs");
            assert_eq!(waiter, Ok(1), "the waiter gets the connection back");
            seen.record("both ran");
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}
