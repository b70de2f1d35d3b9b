//! Model 6: two registrations of the same base racing, and a registration racing shutdown.
#![cfg(hipobj_loom)]

use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::library::{self as api, ApiError, Library, Spec};

const NEW: usize = 0x2000;

fn spec() -> Spec {
    Spec {
        generation: 1,
        connections: 1,
        buffers: &[],
    }
}

/// The supervisor reserves the base before the pinning (which runs on the caller's thread): one
/// registration wins, the other is AlreadyRegistered without pinning anything; the winner's MR
/// and staging memory are released once, at deregistration.
#[test]
fn register_races_register_on_one_base() {
    check(
        "register_races_register_on_one_base",
        2,
        &["first won", "second won"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let calls: Vec<_> = (0..2)
                .map(|_| {
                    let lib = lib.clone();
                    thread::spawn(move || api::register(&lib, NEW))
                })
                .collect();
            let results: Vec<_> = calls.into_iter().map(|c| c.join().unwrap()).collect();
            let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
            assert_eq!(winners.len(), 1, "exactly one registration wins");
            let loser = results.iter().position(|r| r.is_err()).unwrap_or(0);
            assert_eq!(
                results[loser].as_ref().err(),
                Some(&ApiError::BufAlreadyRegistered)
            );
            seen.record(["second won", "first won"][loser]);
            let (mr, staging) = winners[0].clone();
            assert_eq!(api::transfer(&lib, NEW), Ok(1));
            assert_eq!(api::deregister(&lib, NEW), Ok(()));
            assert_eq!((mr.frees(), staging.frees()), (1, 1), "unpinned once");
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}

/// A registration racing shutdown: it is published on the instance and released with it, or
/// refused (NotInitialized) and released at once; never left pinned.
#[test]
fn register_races_shutdown() {
    check(
        "register_races_shutdown",
        2,
        &["registered, released with the instance", "refused"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let call_lib = lib.clone();
            let call = thread::spawn(move || api::register(&call_lib, NEW));
            assert!(api::shutdown(&lib));
            match call.join().unwrap() {
                Ok((mr, staging)) => {
                    seen.record("registered, released with the instance");
                    probe.assert_all_released_once();
                    assert_eq!((mr.frees(), staging.frees()), (1, 1));
                }
                Err(ApiError::NotInitialized) => {
                    seen.record("refused");
                    probe.assert_all_released_once();
                }
                Err(e) => panic!("register: {e:?}"),
            }
        },
    );
}
