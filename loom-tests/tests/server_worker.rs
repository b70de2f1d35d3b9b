//! Model: hipobj-server's RDMA worker hand-off (server/src/rdma/worker.rs over the real
//! `hipobj_actors::handoff::serve`). A request takes an admission place (the server allows
//! `--max-rdma-transfers` at once; here one), hands its job with the place to a worker thread and
//! waits for the answer; as soon as it has it, it sends its next request, which must find the
//! place free (a client never has two requests of one connection in flight, so a busy place
//! would be a 503 for nothing). Closing the job channel ends the worker.
#![cfg(hipobj_loom)]

use hipobj_actors::handoff::{serve, Handoff};
use hipobj_actors::sync::channel::{unbounded, Sender};
use hipobj_actors::sync::{thread, Arc, Mutex};
use hipobj_loom_tests::harness::check;

/// Admission with one place (the server's is a tokio semaphore; this double counts free places).
struct Admission {
    free: Mutex<usize>,
}

/// A place taken; dropping it frees it.
struct Place(Arc<Admission>);

impl Drop for Place {
    fn drop(&mut self) {
        *self.0.free.lock() += 1;
    }
}

fn try_acquire(admission: &Arc<Admission>) -> Option<Place> {
    let mut free = admission.free.lock();
    (*free > 0).then(|| {
        *free -= 1;
        Place(admission.clone())
    })
}

/// A job: its number, and where its answer goes.
type Job = (u32, Sender<u32>);

#[test]
fn an_answered_requester_finds_its_place_free() {
    check(
        "an_answered_requester_finds_its_place_free",
        3,
        &["both requests admitted and answered"],
        |seen| {
            let admission = Arc::new(Admission {
                free: Mutex::new(1),
            });
            let (jobs, to_worker) = unbounded::<Handoff<Job, Place>>();
            let worker = thread::spawn(move || {
                serve(&to_worker, |(n, answer): Job| {
                    let outcome = n * 10;
                    move || {
                        let _ = answer.send(outcome);
                    }
                })
            });
            for n in 1..=2 {
                let place = try_acquire(&admission).expect("the place is free: 503 for nothing");
                let (answer, answered) = unbounded();
                let sent = jobs.send(Handoff {
                    work: (n, answer),
                    place,
                });
                assert!(sent.is_ok(), "the worker is gone");
                assert_eq!(answered.recv().unwrap(), n * 10);
            }
            seen.record("both requests admitted and answered");
            drop(jobs);
            worker.join().unwrap();
            assert_eq!(*admission.free.lock(), 1, "the place is free at the end");
        },
    );
}
