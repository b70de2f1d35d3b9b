//! Answers to actor requests: the requester learns the answer, or that the actor is gone.
#![cfg(hipobj_loom)]

use hipobj_actors::answer::{answer, NoAnswer};
use hipobj_actors::sync::thread;
use hipobj_loom_tests::harness::check;

/// An actor that answers a request, or stops (dropping it) without answering: the waiting
/// requester gets the answer or `Disconnected`, never hangs.
#[test]
fn requester_gets_the_answer_or_a_disconnect() {
    check(
        "requester_gets_the_answer_or_a_disconnect",
        2,
        &["answered", "actor stopped"],
        |seen| {
            let (first_reply, first_wait) = answer::<u32>();
            let (second_reply, second_wait) = answer::<u32>();
            let actor = thread::spawn(move || {
                first_reply.send(7);
                drop(second_reply);
            });
            assert_eq!(first_wait.wait(), Ok(7));
            seen.record("answered");
            assert_eq!(second_wait.wait(), Err(NoAnswer::Disconnected));
            seen.record("actor stopped");
            actor.join().unwrap();
        },
    );
}

/// A requester that gave up (dropped its half) does not block the actor's answer.
#[test]
fn answer_to_a_requester_that_left_is_ignored() {
    check(
        "answer_to_a_requester_that_left_is_ignored",
        2,
        &["sent"],
        |seen| {
            let (reply, waiting) = answer::<u32>();
            let requester = thread::spawn(move || drop(waiting));
            reply.send(1);
            seen.record("sent");
            requester.join().unwrap();
        },
    );
}
