//! Model 4: a transfer started from a callback when every connection is taken.
#![cfg(hipobj_loom)]

use hipobj_actors::callback::in_callback;
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::library::{self as api, ApiError, Library, Spec};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc as StdArc;

const BUF: usize = 0x1000;

/// The outer transfer holds the only connection and its callback deregisters its buffer (Busy:
/// in use) and starts another transfer: Busy at once instead of waiting for the connection its own thread holds (which would deadlock,
/// and loom would say so). Another thread's ordinary transfer, racing, is not in a callback: it
/// waits for the connection and runs. Nothing leaks.
#[test]
fn callback_transfer_is_busy_when_all_connections_are_taken() {
    check(
        "callback_transfer_is_busy_when_all_connections_are_taken",
        2,
        &[
            "outer held the connection first",
            "other held the connection first",
        ],
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
            // Which thread got the connection first (bookkeeping, not explored).
            let order = StdArc::new(AtomicUsize::new(0));

            let (outer_lib, outer_order) = (lib.clone(), order.clone());
            let outer = thread::spawn(move || {
                let (mut first, mut inner) = (false, None);
                api::transfer_with(&outer_lib, BUF, &mut || {
                    assert!(in_callback());
                    first = outer_order.fetch_add(1, Ordering::SeqCst) == 0;
                    // The callback may not deregister the buffer its own transfer uses either.
                    assert_eq!(api::deregister(&outer_lib, BUF), Err(ApiError::Busy));
                    inner = Some(api::transfer(&outer_lib, BUF));
                })
                .map_err(|r| r.answer)?;
                assert!(!in_callback(), "the marker ends with the callback");
                Ok::<_, ApiError>((first, inner.expect("the callback ran")))
            });
            let (other_lib, other_order) = (lib.clone(), order.clone());
            let other = thread::spawn(move || {
                api::transfer_with(&other_lib, BUF, &mut || {
                    other_order.fetch_add(1, Ordering::SeqCst);
                })
                .map_err(|r| r.answer)
            });

            let (outer_first, inner) = outer.join().unwrap().expect("outer transfer");
            assert_eq!(inner, Err(ApiError::Busy), "callback transfer");
            assert_eq!(other.join().unwrap(), Ok(1));
            seen.record(if outer_first {
                "outer held the connection first"
            } else {
                "other held the connection first"
            });
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}

/// A callback shuts hipObject down while another thread's transfer waits for the connection the
/// callback's own transfer holds: shutdown does not wait for that transfer (no deadlock), the
/// waiter gets NotInitialized, the outer transfer finishes on its instance, which is released
/// exactly once, after it.
#[test]
fn callback_shuts_down_while_another_transfer_waits() {
    check(
        "callback_shuts_down_while_another_transfer_waits",
        2,
        &["other ran first", "other refused"],
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
            let outer_lib = lib.clone();
            let outer = thread::spawn(move || {
                api::transfer_with(&outer_lib, BUF, &mut || {
                    assert!(api::shutdown(&outer_lib));
                })
                .map_err(|r| r.answer)
            });
            let other_lib = lib.clone();
            let other = thread::spawn(move || api::transfer(&other_lib, BUF));

            let outer = outer.join().unwrap();
            let other = other.join().unwrap();
            match (outer, other) {
                // The other transfer ran before the outer one began; then shutdown came.
                (Ok(1), Ok(1)) => seen.record("other ran first"),
                (Ok(1), Err(ApiError::NotInitialized)) => seen.record("other refused"),
                other => panic!("unexpected outcome {other:?}"),
            }
            assert!(lib.current().is_none());
            probe.assert_all_released_once();
        },
    );
}
