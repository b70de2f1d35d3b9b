//! Model 2: deregister racing transfers on the same buffer.
#![cfg(hipobj_loom)]

use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::library::{self as api, ApiError, Library, Spec};

const BUF: usize = 0x1000;

fn spec() -> Spec {
    Spec {
        generation: 1,
        connections: 2,
        buffers: &[BUF],
    }
}

/// Either the transfer runs on a live registration (and deregister comes after it or is Busy),
/// or it finds the buffer gone; never a retired buffer in use (the transfer asserts it, and the
/// MR double catches a release concurrent with the transfer's use). A Busy deregister succeeds
/// once the transfer is over; everything is released once.
#[test]
fn deregister_races_a_transfer() {
    check(
        "deregister_races_a_transfer",
        2,
        &["ran, then removed", "removed, not registered", "busy"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let call_lib = lib.clone();
            let call = thread::spawn(move || api::transfer(&call_lib, BUF));
            let removed = api::deregister(&lib, BUF);
            let transferred = call.join().unwrap();
            match (transferred, removed) {
                (Ok(1), Ok(())) => seen.record("ran, then removed"),
                (Err(ApiError::BufNotRegistered), Ok(())) => seen.record("removed, not registered"),
                (Ok(1), Err(ApiError::Busy)) => {
                    seen.record("busy");
                    assert_eq!(api::deregister(&lib, BUF), Ok(()), "deregister once idle");
                }
                other => panic!("unexpected outcome {other:?}"),
            }
            assert_eq!(api::deregister(&lib, BUF), Err(ApiError::BufNotRegistered));
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}

/// Two transfers on the buffer and a deregister: same guarantees with two users in the word.
#[test]
fn deregister_races_two_transfers() {
    check(
        "deregister_races_two_transfers",
        2,
        &["removed, 0 ran", "removed, 1 ran", "removed, 2 ran", "busy"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let calls: Vec<_> = (0..2)
                .map(|_| {
                    let lib = lib.clone();
                    thread::spawn(move || api::transfer(&lib, BUF))
                })
                .collect();
            let removed = api::deregister(&lib, BUF);
            let results: Vec<_> = calls.into_iter().map(|c| c.join().unwrap()).collect();
            for r in &results {
                assert!(
                    matches!(r, Ok(1) | Err(ApiError::BufNotRegistered)),
                    "transfer: {r:?}"
                );
            }
            let ran = results.iter().filter(|r| r.is_ok()).count();
            match removed {
                Ok(()) => seen.record(["removed, 0 ran", "removed, 1 ran", "removed, 2 ran"][ran]),
                Err(ApiError::Busy) => {
                    seen.record("busy");
                    assert!(ran > 0, "Busy with no user");
                    assert_eq!(api::deregister(&lib, BUF), Ok(()));
                }
                Err(e) => panic!("deregister: {e:?}"),
            }
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}
