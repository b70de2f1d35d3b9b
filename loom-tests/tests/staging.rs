//! Model 5: a staging copy that times out, then finishes, racing deregister and shutdown.
#![cfg(hipobj_loom)]

use hipobj_actors::sync::channel::unbounded;
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::library::{self as api, ApiError, CopyJob, Deadline, Library, Spec};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc as StdArc;

const BUF: usize = 0x1000;

fn spec() -> Spec {
    Spec {
        generation: 1,
        connections: 1,
        buffers: &[BUF],
    }
}

/// Start the copier thread and the call whose deadline passes at an arbitrary point. The flag
/// (bookkeeping, not explored) is raised when the copier starts to report the end of the copy.
fn start_sync(
    lib: &Arc<Library>,
    finishing: &StdArc<AtomicBool>,
    deadline: Deadline,
) -> (
    thread::JoinHandle<Result<(), ApiError>>,
    thread::JoinHandle<()>,
) {
    let (jobs, incoming) = unbounded::<CopyJob>();
    let finishing = finishing.clone();
    let copier = thread::spawn(move || {
        if let Ok(job) = incoming.recv() {
            job.copy();
            finishing.store(true, Ordering::SeqCst);
            job.finish();
        }
    });
    let call_lib = lib.clone();
    let call = thread::spawn(move || api::buf_sync(&call_lib, BUF, &jobs, deadline));
    (call, copier)
}

/// Deregister racing the copy: Busy while the call uses the buffer or the timed-out copy is
/// pending, and then a later deregister (after `finish`) succeeds. The staging memory is
/// released exactly once and never while the copy may still write it (the resource double and
/// loom's cell see a release not ordered after the copy's write).
#[test]
fn timed_out_copy_keeps_deregister_busy_until_it_finishes() {
    check(
        "timed_out_copy_keeps_deregister_busy_until_it_finishes",
        2,
        // "removed after the sync" (everything sequential) needs a preemption bound of 3.
        &[
            "removed first",
            "removed after the timed-out copy finished",
            "busy, sync finished",
            "busy, sync timed out",
        ],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let finishing = StdArc::new(AtomicBool::new(false));
            let (call, copier) = start_sync(&lib, &finishing, Deadline::AnyTime);

            let removed = api::deregister(&lib, BUF);
            let finishing_when_removed = finishing.load(Ordering::SeqCst);
            let synced = call.join().unwrap();
            let busy = match (removed, synced) {
                // Deregister first: the call finds no buffer.
                (Ok(()), Err(ApiError::BufNotRegistered)) => {
                    seen.record("removed first");
                    false
                }
                // Deregister after the call and its copy were over.
                (Ok(()), Ok(())) => {
                    seen.record("removed after the sync");
                    false
                }
                // The call timed out, so the copy was pending: deregister could only succeed
                // once the copier was reporting the end of the copy.
                (Ok(()), Err(ApiError::StagingTimedOut)) => {
                    assert!(finishing_when_removed, "deregistered under a pending copy");
                    seen.record("removed after the timed-out copy finished");
                    false
                }
                // Busy: the call was using the buffer or its copy was pending.
                (Err(ApiError::Busy), Ok(())) => {
                    seen.record("busy, sync finished");
                    true
                }
                (Err(ApiError::Busy), Err(ApiError::StagingTimedOut)) => {
                    seen.record("busy, sync timed out");
                    true
                }
                other => panic!("unexpected outcome {other:?}"),
            };
            copier.join().unwrap();
            if busy {
                assert_eq!(api::deregister(&lib, BUF), Ok(()), "idle after finish");
            }
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}

/// Shutdown racing the copy: the instance goes when the call returns, but a pending copy keeps
/// the staging memory until it finishes; it is released exactly once, after the copy's write.
#[test]
fn timed_out_copy_outlives_shutdown() {
    check(
        "timed_out_copy_outlives_shutdown",
        2,
        &["sync finished", "sync timed out", "no instance"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let finishing = StdArc::new(AtomicBool::new(false));
            let (call, copier) = start_sync(&lib, &finishing, Deadline::AnyTime);

            assert!(api::shutdown(&lib));
            let synced = call.join().unwrap();
            seen.record(match synced {
                Ok(()) => "sync finished",
                Err(ApiError::StagingTimedOut) => "sync timed out",
                Err(ApiError::NotInitialized) => "no instance",
                other => panic!("sync: {other:?}"),
            });
            copier.join().unwrap();
            probe.assert_all_released_once();
        },
    );
}

/// A call that waits for its copy (the deadline never passes) is woken by `finish` (loom reports
/// a deadlock if it is not), gets `Ok`, and keeps deregister Busy until it returns.
#[test]
fn finished_copy_wakes_the_waiting_call() {
    check(
        "finished_copy_wakes_the_waiting_call",
        2,
        &["removed first", "busy, sync finished"],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let finishing = StdArc::new(AtomicBool::new(false));
            let (call, copier) = start_sync(&lib, &finishing, Deadline::AfterTheCopy);

            let removed = api::deregister(&lib, BUF);
            let synced = call.join().unwrap();
            copier.join().unwrap();
            match (removed, synced) {
                (Ok(()), Err(ApiError::BufNotRegistered)) => seen.record("removed first"),
                (Ok(()), Ok(())) => seen.record("removed after the sync"),
                (Err(ApiError::Busy), Ok(())) => {
                    seen.record("busy, sync finished");
                    assert_eq!(api::deregister(&lib, BUF), Ok(()));
                }
                other => panic!("unexpected outcome {other:?}"),
            }
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}

/// After a staging copy timed out, a GET of the buffer (whose server writes the staging memory the
/// copy still writes) is Busy until the copy has ended; once it has, the GET runs, ordered after
/// the copy (loom's cell sees a GET's write concurrent with the copy's).
#[test]
fn a_pending_copy_makes_new_transfers_busy() {
    check(
        "a_pending_copy_makes_new_transfers_busy",
        2,
        &[
            "busy while the copy runs",
            "ran after the copy",
            "sync finished",
        ],
        |seen| {
            let lib = Arc::new(Library::new());
            let probe = api::init(&lib, &spec()).unwrap();
            let finishing = StdArc::new(AtomicBool::new(false));
            let (call, copier) = start_sync(&lib, &finishing, Deadline::AnyTime);
            match call.join().unwrap() {
                Err(ApiError::StagingTimedOut) => match api::get(&lib, BUF) {
                    Err(ApiError::Busy) => seen.record("busy while the copy runs"),
                    Ok(1) => seen.record("ran after the copy"),
                    other => panic!("GET under a pending copy: {other:?}"),
                },
                Ok(()) => {
                    seen.record("sync finished");
                    assert_eq!(api::get(&lib, BUF), Ok(1));
                }
                other => panic!("sync: {other:?}"),
            }
            copier.join().unwrap();
            assert_eq!(api::get(&lib, BUF), Ok(1), "idle once the copy ended");
            assert!(api::shutdown(&lib));
            probe.assert_all_released_once();
        },
    );
}
