//! Where the time of one transfer goes, stage by stage: for benchmarks only.
//!
//! With the cargo feature `stage-timing` (never in the shipped library: only the
//! `transfer_overhead` benchmark's second build turns it on), each [`mark`] adds the time since
//! the previous mark of this thread to its stage, and [`take`] hands a thread's totals to the
//! benchmark. Without the feature [`start`], [`mark`] and [`take`] are empty inline functions, so
//! the product path reads no clock and touches no thread-local.
//!
//! A stage is the time from the previous mark to its own, so the marks of one call must come in
//! the order of [`Stage`]; a stage hit twice (a transfer of several requests) sums.

/// The stages of a warm GET or PUT, in the order their marks are reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Stage {
    /// Registry lookup, range check and the buffer's use count.
    Lookup,
    /// Leasing a connection from the pool.
    Lease,
    /// From the lease to the connection in hand (its guard, the grant).
    Connection,
    /// Posting the memory-window bind (`ibv_post_send`).
    BindPost,
    /// Building the token while the bind may still complete.
    Token,
    /// Waiting for the bind's completion.
    BindWait,
    /// The two callbacks (`sendRequest`, `recvReply`): application time, not library time.
    Callbacks,
    /// Parsing the reply.
    ReplyParse,
    /// Posting the invalidation.
    InvalidatePost,
    /// Waiting for the invalidation's completion.
    InvalidateWait,
    /// The `200` check against the published pairing.
    Check,
    /// Giving the lease back (or handing it to the recovery worker).
    Release,
    /// After the lease: making a GET's data visible, dropping the buffer use.
    Finish,
}

/// How many stages there are.
pub const STAGES: usize = Stage::Finish as usize + 1;

/// Every stage, in order, with a short name (benchmark output).
pub const ALL: [(Stage, &str); STAGES] = [
    (Stage::Lookup, "lookup"),
    (Stage::Lease, "lease"),
    (Stage::Connection, "connection"),
    (Stage::BindPost, "bind post"),
    (Stage::Token, "token"),
    (Stage::BindWait, "bind wait"),
    (Stage::Callbacks, "callbacks"),
    (Stage::ReplyParse, "reply parse"),
    (Stage::InvalidatePost, "inval post"),
    (Stage::InvalidateWait, "inval wait"),
    (Stage::Check, "200 check"),
    (Stage::Release, "release"),
    (Stage::Finish, "finish"),
];

/// One call's time per stage, and how it waited for its completions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    /// Nanoseconds per stage, indexed by `Stage as usize`.
    pub ns: [u64; STAGES],
    /// Completion-queue polls that found nothing (while waiting for a bind or an invalidation).
    pub empty_polls: u32,
    /// Times the waiting thread gave up its CPU (`sched_yield`) while waiting.
    pub yields: u32,
}

#[cfg(all(feature = "stage-timing", not(hipobj_loom)))]
mod clock {
    use super::{Breakdown, Stage, STAGES};
    use std::cell::Cell;
    use std::time::Instant;

    const ZERO: Breakdown = Breakdown {
        ns: [0; STAGES],
        empty_polls: 0,
        yields: 0,
    };

    std::thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
        static TOTALS: Cell<Breakdown> = const { Cell::new(ZERO) };
    }

    pub fn start() {
        TOTALS.with(|t| t.set(ZERO));
        LAST.with(|l| l.set(Some(Instant::now())));
    }

    pub fn waited(empty_polls: u32, yields: u32) {
        if LAST.with(Cell::get).is_none() {
            return;
        }
        TOTALS.with(|t| {
            let mut totals = t.get();
            totals.empty_polls = totals.empty_polls.saturating_add(empty_polls);
            totals.yields = totals.yields.saturating_add(yields);
            t.set(totals);
        });
    }

    pub fn mark(stage: Stage) {
        let Some(last) = LAST.with(Cell::get) else {
            return;
        };
        let now = Instant::now();
        LAST.with(|l| l.set(Some(now)));
        let ns = u64::try_from(now.duration_since(last).as_nanos()).unwrap_or(u64::MAX);
        TOTALS.with(|t| {
            let mut totals = t.get();
            totals.ns[stage as usize] = totals.ns[stage as usize].saturating_add(ns);
            t.set(totals);
        });
    }

    pub fn take() -> Option<Breakdown> {
        LAST.with(|l| l.set(None));
        Some(TOTALS.with(|t| t.replace(ZERO)))
    }
}

#[cfg(not(all(feature = "stage-timing", not(hipobj_loom))))]
mod clock {
    use super::{Breakdown, Stage};

    #[inline(always)]
    pub fn start() {}

    #[inline(always)]
    pub fn waited(_empty_polls: u32, _yields: u32) {}

    #[inline(always)]
    pub fn mark(_stage: Stage) {}

    #[inline(always)]
    pub fn take() -> Option<Breakdown> {
        None
    }
}

/// Start timing a call on this thread (clears its totals).
#[inline(always)]
pub fn start() {
    clock::start()
}

/// The end of `stage` on this thread (a no-op before [`start`] or without the feature).
#[inline(always)]
pub fn mark(stage: Stage) {
    clock::mark(stage)
}

/// Add what a completion wait cost (empty polls, CPU yields) to this thread's call being timed
/// (a no-op otherwise). The verbs layer only returns these counts; the runtime reports them.
#[inline(always)]
pub fn waited(empty_polls: u32, yields: u32) {
    clock::waited(empty_polls, yields)
}

/// This thread's totals since [`start`], and stop timing; `None` without the feature.
#[inline(always)]
pub fn take() -> Option<Breakdown> {
    clock::take()
}

#[cfg(all(test, feature = "stage-timing", not(hipobj_loom)))]
mod tests {
    use super::*;

    #[test]
    fn marks_sum_into_their_stages() {
        assert_eq!(take(), Some(Breakdown::default()), "nothing before start");
        waited(0, 1);
        start();
        waited(1, 0);
        std::thread::sleep(std::time::Duration::from_millis(2));
        mark(Stage::Lookup);
        mark(Stage::Lease);
        std::thread::sleep(std::time::Duration::from_millis(1));
        mark(Stage::Lookup);
        let b = take().expect("feature on");
        assert!(b.ns[Stage::Lookup as usize] >= 3_000_000, "{b:?}");
        assert!(b.ns[Stage::Lease as usize] < 1_000_000, "{b:?}");
        assert_eq!((b.empty_polls, b.yields), (1, 0), "{b:?}");
        mark(Stage::Lease);
        waited(0, 1);
        assert_eq!(
            take(),
            Some(Breakdown::default()),
            "nothing counts after take"
        );
    }
}
