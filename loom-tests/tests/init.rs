//! Model 3: init racing init, init and shutdown arriving during a build, and init after shutdown
//! while an old call still runs.
#![cfg(hipobj_loom)]

use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::library::{self as api, ApiError, Library, Spec, Stage};

const BUF: usize = 0x1000;

/// An instance without registrations.
fn bare(generation: u32) -> Spec {
    Spec {
        generation,
        connections: 1,
        buffers: &[],
    }
}

fn spec(generation: u32) -> Spec {
    Spec {
        generation,
        connections: 1,
        buffers: &[BUF],
    }
}

/// Exactly one of two racing inits publishes its instance; the other gets AlreadyInitialized. The
/// winner's instance is the current one and is released once at shutdown.
#[test]
fn init_races_init() {
    check(
        "init_races_init",
        2,
        &["instance 1 won", "instance 2 won"],
        |seen| {
            let lib = Arc::new(Library::new());
            let inits: Vec<_> = [1, 2]
                .into_iter()
                .map(|generation| {
                    let lib = lib.clone();
                    thread::spawn(move || api::init(&lib, &bare(generation)))
                })
                .collect();
            let results: Vec<_> = inits.into_iter().map(|h| h.join().unwrap()).collect();
            let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
            assert_eq!(winners.len(), 1, "exactly one init wins");
            let losers = results
                .iter()
                .filter(|r| matches!(r, Err(ApiError::AlreadyInitialized)))
                .count();
            assert_eq!(losers, 1, "the other is AlreadyInitialized");
            let winner = winners[0];
            seen.record(["instance 1 won", "instance 2 won"][winner.generation as usize - 1]);
            let (mr, staging) = api::register(&lib, BUF).expect("register on the winner");
            assert_eq!(api::transfer(&lib, BUF), Ok(winner.generation));
            assert!(api::shutdown(&lib));
            winner.assert_all_released_once();
            assert_eq!(
                (mr.frees(), staging.frees()),
                (1, 1),
                "released with the instance"
            );
            assert!(!api::shutdown(&lib));
        },
    );
}

/// A second init and a shutdown start while a build is in progress (the build starts them, then
/// ends; either may reach the supervisor before or after the build ends). Every order agrees with
/// one sequential history: the build publishes instance 1; the shutdown always finds an instance
/// (it waits for the build if it came during it) and retires instance 1, which is released exactly
/// once; the second init is AlreadyInitialized if it came before the shutdown, else it builds
/// instance 2, the current one at the end.
#[test]
fn init_and_shutdown_wait_for_a_build_in_progress() {
    check(
        "init_and_shutdown_wait_for_a_build_in_progress",
        2,
        &[
            "second init refused",
            "second init built after the shutdown",
        ],
        |seen| {
            let lib = Arc::new(Library::new());
            let mut started = None;
            let first = api::init_with(&lib, &bare(1), || {
                let second = {
                    let lib = lib.clone();
                    thread::spawn(move || api::init(&lib, &bare(2)))
                };
                let shut = {
                    let lib = lib.clone();
                    thread::spawn(move || api::shutdown(&lib))
                };
                started = Some((second, shut));
            })
            .expect("the build in progress publishes");
            let (second, shut) = started.expect("the build ran");
            let second = second.join().unwrap();
            assert!(
                shut.join().unwrap(),
                "the shutdown found an instance to shut down"
            );
            first.assert_all_released_once();
            match second {
                Err(ApiError::AlreadyInitialized) => {
                    seen.record("second init refused");
                    assert!(
                        lib.current().is_none(),
                        "nothing published after the shutdown"
                    );
                }
                Ok(second) => {
                    seen.record("second init built after the shutdown");
                    assert_eq!(lib.current().map(|r| r.generation), Some(2));
                    assert!(api::shutdown(&lib));
                    second.assert_all_released_once();
                }
                Err(other) => panic!("second init: {other:?}"),
            }
            assert!(!api::shutdown(&lib));
        },
    );
}

/// An old call that took instance 1 keeps it while shutdown and a new init run: it works on
/// instance 1 (or gets NotInitialized from its closed pool, or finds no instance, or finds
/// instance 2); instance 2 is independent and usable at once; instance 1 is released exactly
/// once, after the old call (its `Drop` asserts no call in flight), instance 2 at the final
/// shutdown.
#[test]
fn init_after_shutdown_while_an_old_call_runs() {
    check(
        "init_after_shutdown_while_an_old_call_runs",
        2,
        &[
            "old call ran on instance 1",
            "old call ran on instance 2",
            "old call: no instance",
            "old call: instance 1's pool closed",
        ],
        |seen| {
            let lib = Arc::new(Library::new());
            let first = api::init(&lib, &spec(1)).unwrap();
            let old_lib = lib.clone();
            let old_call = thread::spawn(move || api::transfer_explained(&old_lib, BUF));

            assert!(api::shutdown(&lib));
            let second = api::init(&lib, &spec(2)).expect("init after shutdown");
            assert_eq!(api::transfer(&lib, BUF), Ok(2), "the new instance works");

            seen.record(match old_call.join().unwrap() {
                Ok(1) => "old call ran on instance 1",
                Ok(2) => "old call ran on instance 2",
                // Instance 2 is published before its buffer is registered.
                Err(r) if r.answer == ApiError::BufNotRegistered && r.stage == Stage::Buffer => {
                    "old call: instance 2 before its registration"
                }
                Err(r) if r.answer == ApiError::NotInitialized && r.stage == Stage::Instance => {
                    "old call: no instance"
                }
                Err(r) if r.answer == ApiError::NotInitialized && r.stage == Stage::Connection => {
                    "old call: instance 1's pool closed"
                }
                other => panic!("old call: {other:?}"),
            });
            first.assert_all_released_once();
            assert_eq!(second.releases(), 0, "instance 2 is still published");
            assert!(api::shutdown(&lib));
            second.assert_all_released_once();
        },
    );
}
