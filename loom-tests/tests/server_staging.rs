//! Model: hipobj-server's staging slots (server/src/rdma/staging.rs `SlotPool`, over the real
//! `hipobj_actors::slots::SlotLedger`). A transfer's poller takes a slot and moves its token with
//! a job to the file thread (server/src/rdma/local_end.rs `Threaded`), which fills the slot and,
//! stopped, drops the token; meanwhile the poller takes slots for the next chunks. A slot is never
//! held by two tokens at once (each slot's bytes are a loom cell: two holders writing one slot
//! race, and loom reports it), and a slot whose token was dropped is taken again.
#![cfg(hipobj_loom)]

use hipobj_actors::slots::SlotLedger;
use hipobj_actors::sync::channel::unbounded;
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::resource::Resource;
use std::sync::Arc as StdArc;

/// Two slots (a transfer of depth 1 has twice as many slots as work requests in flight). The
/// first chunk's slot goes to the file thread, which fills it and drops its token; the poller
/// takes slots for the next chunks while that runs: the other slot, or the first one once its
/// token is gone, never one the file thread still holds. After the file thread ended, both slots
/// are free and handed out again.
#[test]
fn slots_move_between_threads_one_holder_each_and_come_back() {
    check(
        "slots_move_between_threads_one_holder_each_and_come_back",
        3,
        &[
            "next chunk got the other slot",
            "the dropped slot was reused",
        ],
        |seen| {
            let ledger = Arc::new(SlotLedger::new(2));
            let bytes = StdArc::new([
                Resource::new("staging slot 0"),
                Resource::new("staging slot 1"),
            ]);
            let (jobs, to_file) = unbounded();
            let job = SlotLedger::take(&ledger).expect("a free slot for the first chunk");
            let job_index = job.index();
            jobs.send(job).unwrap();
            let file_bytes = bytes.clone();
            let file = thread::spawn(move || {
                let token = to_file.recv().unwrap();
                file_bytes[token.index()].write();
                // Stopped after this job: its token is dropped here, and the slot freed.
                drop(token);
            });
            // The poller, meanwhile: slots for the next chunks (at most as many as there are),
            // each written by its holder.
            let mut held = Vec::new();
            while let Some(t) = (held.len() < 2)
                .then(|| SlotLedger::take(&ledger))
                .flatten()
            {
                bytes[t.index()].write();
                seen.record(if t.index() == job_index {
                    "the dropped slot was reused"
                } else {
                    "next chunk got the other slot"
                });
                held.push(t);
            }
            drop(held);
            file.join().unwrap();
            // Every token is gone: both slots are free and handed out again.
            let a = SlotLedger::take(&ledger).expect("a slot free again");
            let b = SlotLedger::take(&ledger).expect("the other slot free again");
            assert_ne!(a.index(), b.index(), "one slot held twice");
            assert!(SlotLedger::take(&ledger).is_none(), "only two slots");
        },
    );
}
