//! A batch queue's bookkeeping (`hipobj_actors::batch`, docs/batch.md): submit, a worker and
//! cancel (or close) racing. Every operation ends exactly once, and a cancel or close that
//! returned leaves no worker touching the operation's buffer.
#![cfg(hipobj_loom)]

use hipobj_actors::batch::{BatchState, CancelError, NoSignal};
use hipobj_actors::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;

type Queue = BatchState<u32, &'static str>;

/// The worker of one operation: claims it, "touches its buffer" while it runs (stopping early
/// when asked to), finishes it.
fn run_one(queue: &Queue, seq: u64, touching: &AtomicBool, claimed: &AtomicBool) {
    let Some((_payload, cancel)) = queue.claim(seq) else {
        return;
    };
    claimed.store(true, Ordering::SeqCst);
    touching.store(true, Ordering::SeqCst);
    let _asked = cancel.load(Ordering::Acquire);
    touching.store(false, Ordering::SeqCst);
    queue.finish(seq, |asked| if asked { "cancelled" } else { "complete" });
}

/// Submit vs cancel vs completion: the operation's one event is polled once; when cancel
/// returns, the worker no longer touches the buffer (guard `cancel-waits-for-worker`).
#[test]
fn cancel_returns_once_the_worker_let_go_and_the_operation_ends_once() {
    check(
        "cancel_returns_once_the_worker_let_go_and_the_operation_ends_once",
        2,
        &[
            "cancelled while queued",
            "cancelled while running",
            "finished before the cancel",
        ],
        |seen| {
            let queue: Arc<Queue> = Arc::new(BatchState::new(4, Box::new(NoSignal)));
            let seqs = queue.submit(vec![(7, 70)]).expect("submit");
            let touching = Arc::new(AtomicBool::new(false));
            let claimed = Arc::new(AtomicBool::new(false));
            let worker = {
                let (q, t, c) = (queue.clone(), touching.clone(), claimed.clone());
                thread::spawn(move || run_one(&q, seqs[0], &t, &c))
            };
            queue.cancel(7, || "cancelled").expect("cancel");
            assert!(
                !touching.load(Ordering::SeqCst),
                "cancel returned while the worker still touches the buffer"
            );
            worker.join().unwrap();
            let events = queue.poll(1, 8, None);
            assert_eq!(events.len(), 1, "one event: {events:?}");
            assert_eq!(events[0].0, 7, "the cookie comes back untouched");
            match (events[0].1, claimed.load(Ordering::SeqCst)) {
                ("cancelled", false) => seen.record("cancelled while queued"),
                ("cancelled", true) => seen.record("cancelled while running"),
                ("complete", _) => seen.record("finished before the cancel"),
                other => panic!("unexpected outcome {other:?}"),
            }
            assert!(
                queue.poll(0, 8, None).is_empty(),
                "an event is handed out once"
            );
            assert_eq!(
                queue.cancel(7, || "cancelled"),
                Err(CancelError::Unknown(7))
            );
        },
    );
}

/// Close (destroy, shutdown) vs a queue with a queued and a running operation: close returns
/// with nothing in flight and no worker touching a buffer; a submit after it is refused.
#[test]
fn close_ends_every_operation_before_it_returns() {
    check(
        "close_ends_every_operation_before_it_returns",
        2,
        &["closed"],
        |seen| {
            let queue: Arc<Queue> = Arc::new(BatchState::new(4, Box::new(NoSignal)));
            let seqs = queue.submit(vec![(1, 10), (2, 20)]).expect("submit");
            let touching = Arc::new(AtomicBool::new(false));
            let ran = Arc::new(AtomicUsize::new(0));
            let worker = {
                let (q, t, r) = (queue.clone(), touching.clone(), ran.clone());
                thread::spawn(move || {
                    for seq in seqs {
                        let claimed = AtomicBool::new(false);
                        run_one(&q, seq, &t, &claimed);
                        if claimed.load(Ordering::SeqCst) {
                            r.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            };
            queue.close();
            assert!(
                !touching.load(Ordering::SeqCst),
                "close returned while a worker runs"
            );
            assert_eq!(queue.in_flight(), 0);
            assert!(
                queue.submit(vec![(3, 30)]).is_err(),
                "a closed queue takes nothing"
            );
            worker.join().unwrap();
            assert!(
                queue.poll(0, 8, None).is_empty(),
                "a closed queue's events are dropped"
            );
            seen.record("closed");
        },
    );
}
