//! Guard removal for `loom-tests/break-guards`: under `--cfg hipobj_loom` only, the guard named by
//! `HIPOBJ_BREAK_GUARD` is skipped so that its loom model can be shown to fail without it. In every
//! other build [`broken`] is a constant `false` and the guards always hold.
//!
//! The guards, each checked where it is enforced:
//! - `retire-checks-users`: deregistration retires a buffer only when no call uses it
//!   ([`crate::registry`]);
//! - `use-checks-pending`: a call may not use a buffer whose timed-out staging copy still runs;
//! - `pending-before-use-ends`: a timed-out copy's pending mark is taken before the call's use ends;
//! - `finish-releases-abandoned`: a copy that ends after its caller gave up frees the buffer
//!   ([`crate::staging`]);
//! - `lease-checks-close`: a closed pool refuses and wakes its waiters ([`crate::pool`]);
//! - `shutdown-closes`: shutdown closes the instance it unpublishes ([`crate::supervisor`]);
//! - `one-build-at-a-time`: an init that arrives during a build waits for it;
//! - `shutdown-waits-for-build`: a shutdown that arrives during a build waits for it, then shuts
//!   the new instance down;
//! - `reserve-checks-base`: a base being registered or registered is not reserved again;
//! - `callback-never-waits`: a transfer from a callback does not wait for a connection
//!   ([`crate::transfer`]);
//! - `give-back-wakes-a-waiter`: a connection given back wakes a transfer waiting for one
//!   ([`crate::pool`]);
//! - `recovery-returns-only-fresh`: a connection handed to its recovery worker goes back to the
//!   pool only once renewed ([`crate::recovery`]);
//! - `slot-take-removes`: a slot handed out leaves the free list ([`crate::slots`]);
//! - `slot-drop-returns`: a dropped slot ticket puts its slot back for reuse;
//! - `checkout-refuses-busy`: a key held by a lease is not leased again ([`crate::keyed`]);
//! - `checkout-skips-retired`: a checkout that reached an entry retired meanwhile looks the key
//!   up again;
//! - `cancel-waits-for-worker`: a cancel of a running batch operation returns only once its
//!   worker has finished it ([`crate::batch`]);
//! - `place-freed-before-answer`: a worker frees a job's admission place before it answers
//!   ([`crate::handoff`]).

/// The guards `HIPOBJ_BREAK_GUARD` may name.
pub const GUARDS: [&str; 18] = [
    "cancel-waits-for-worker",
    "retire-checks-users",
    "use-checks-pending",
    "pending-before-use-ends",
    "finish-releases-abandoned",
    "lease-checks-close",
    "shutdown-closes",
    "one-build-at-a-time",
    "shutdown-waits-for-build",
    "reserve-checks-base",
    "callback-never-waits",
    "give-back-wakes-a-waiter",
    "recovery-returns-only-fresh",
    "slot-take-removes",
    "slot-drop-returns",
    "checkout-refuses-busy",
    "checkout-skips-retired",
    "place-freed-before-answer",
];

/// Whether `guard` was removed for this loom run.
#[cfg(hipobj_loom)]
pub fn broken(guard: &'static str) -> bool {
    static REMOVED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let removed = REMOVED.get_or_init(|| {
        let name = std::env::var("HIPOBJ_BREAK_GUARD").unwrap_or_default();
        assert!(
            name.is_empty() || GUARDS.contains(&name.as_str()),
            "HIPOBJ_BREAK_GUARD={name:?} names no guard (one of {GUARDS:?})"
        );
        name
    });
    debug_assert!(GUARDS.contains(&guard), "unknown guard {guard}");
    removed == guard
}

/// Whether `guard` was removed: never, outside loom.
#[cfg(not(hipobj_loom))]
#[inline(always)]
pub const fn broken(_guard: &'static str) -> bool {
    false
}
