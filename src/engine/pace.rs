//! How many requests of a copy are in flight at once: up to the configured concurrency, cut in
//! half when a transfer fails in a way a retry may fix, and grown back by one per window of
//! successes (additive increase, multiplicative decrease, as TCP and the AWS SDKs' adaptive retry
//! mode back off from a store or a fabric that is overloaded). Every attempt, retries included,
//! takes a place first.
//!
//! Why: one RDMA READ or WRITE that gets no answer within RC's retry window (docs/protocol.md rule
//! 4.3: timeout 14, retry_cnt 6, about 0.5 s) fails its transfer. A host whose CPUs also run the
//! NIC (Soft-RoCE) or a server shared by many clients answers late when too many transfers are
//! in flight, and retrying at the same concurrency only repeats that. Measured in the lane
//! (docs/perf.md, issue 21): 16 in flight failed a 4.5 GiB upload, 4 did not.
//!
//! One cut per congestion event: an attempt that started before the last cut does not cut again
//! when it fails (it was sent at the old limit).

use hipobj_actors::sync::{Condvar, Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The shared limit on requests in flight.
pub(super) struct Pace {
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Debug)]
struct State {
    /// Requests that may be in flight now (1 ..= max).
    limit: usize,
    /// The configured concurrency.
    max: usize,
    in_flight: usize,
    /// Successes since the limit last changed.
    window: usize,
    /// Cuts so far (an attempt remembers the count it started under).
    cuts: u64,
}

/// One attempt's place in flight; freed when dropped. Its outcome goes back through
/// [`Place::succeeded`] or [`Place::failed`].
pub(super) struct Place<'a> {
    pace: &'a Pace,
    /// `cuts` when the attempt started.
    epoch: u64,
}

/// How often a waiting attempt looks whether the copy was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(50);

impl Pace {
    pub(super) fn new(max: usize) -> Pace {
        let max = max.max(1);
        Pace {
            state: Mutex::new(State {
                limit: max,
                max,
                in_flight: 0,
                window: 0,
                cuts: 0,
            }),
            freed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Wait for a place under the limit. Once `cancel` is set nobody waits: the attempt goes
    /// at once (over the limit) and the copy winds down as it would without a pace.
    pub(super) fn enter(&self, cancel: &AtomicBool) -> Place<'_> {
        let mut state = self.state();
        while state.in_flight >= state.limit && !cancel.load(Ordering::Relaxed) {
            state = self.freed.wait_timeout(state, CANCEL_POLL);
        }
        state.in_flight += 1;
        Place {
            pace: self,
            epoch: state.cuts,
        }
    }

    /// Times the limit was cut.
    pub(super) fn cuts(&self) -> u64 {
        self.state().cuts
    }

    #[cfg(test)]
    fn limit(&self) -> usize {
        self.state().limit
    }
}

impl Place<'_> {
    /// The attempt succeeded: a full window of successes grows the limit by one.
    pub(super) fn succeeded(self) {
        let mut state = self.pace.state();
        state.window += 1;
        if state.window >= state.limit && state.limit < state.max {
            state.limit += 1;
            state.window = 0;
            self.pace.freed.notify_one();
        }
    }

    /// The attempt failed and may be retried: halve the limit, unless it was sent before the
    /// last cut.
    pub(super) fn failed(self) {
        let mut state = self.pace.state();
        if self.epoch != state.cuts {
            return;
        }
        let was = state.limit;
        state.limit = (was / 2).max(1);
        state.window = 0;
        state.cuts += 1;
        tracing::info!(
            from = was,
            to = state.limit,
            "a transfer failed: fewer requests in flight"
        );
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut state = self.pace.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        self.pace.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_failure_halves_the_limit_once_per_event_and_successes_grow_it_back() {
        let pace = Pace::new(16);
        let go = AtomicBool::new(false);
        let sent: Vec<Place<'_>> = (0..16).map(|_| pace.enter(&go)).collect();
        for place in sent {
            place.failed();
        }
        assert_eq!(
            (pace.limit(), pace.cuts()),
            (8, 1),
            "16 failures of one event: one cut"
        );
        for _ in 0..8 {
            pace.enter(&go).succeeded();
        }
        assert_eq!(pace.limit(), 9, "a window of successes adds one");
        let old = pace.enter(&go);
        pace.enter(&go).failed();
        assert_eq!(
            (pace.limit(), pace.cuts()),
            (4, 2),
            "a failure sent after the cut cuts"
        );
        old.failed();
        assert_eq!(pace.limit(), 4, "one sent before it does not");
        let mut successes = 0;
        while pace.limit() < 16 {
            pace.enter(&go).succeeded();
            successes += 1;
        }
        assert_eq!(successes, (4..16).sum::<usize>(), "one per window");
        for _ in 0..100 {
            pace.enter(&go).succeeded();
        }
        assert_eq!(pace.limit(), 16, "never above the configured concurrency");
    }

    #[test]
    fn never_below_one() {
        let pace = Pace::new(3);
        let go = AtomicBool::new(false);
        for _ in 0..10 {
            pace.enter(&go).failed();
        }
        assert_eq!(pace.limit(), 1);
        let _one = pace.enter(&go);
    }

    #[test]
    fn no_more_than_the_limit_in_flight() {
        let pace = Pace::new(8);
        let go = AtomicBool::new(false);
        pace.enter(&go).failed(); // 4
        let peak = AtomicUsize::new(0);
        let now = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..20 {
                        let place = pace.enter(&go);
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(300));
                        now.fetch_sub(1, Ordering::SeqCst);
                        drop(place);
                    }
                });
            }
        });
        let peak = peak.load(Ordering::SeqCst);
        assert!(
            (2..=4).contains(&peak),
            "at most the limit in flight: {peak}"
        );
    }

    /// Once the copy is cancelled an attempt goes at once, over the limit, and says so in the
    /// count in flight. Run on its own thread with a bounded wait for its answer: a pace that
    /// made it wait fails the test instead of hanging it.
    #[test]
    fn a_cancelled_copy_does_not_wait() {
        let pace = std::sync::Arc::new(Pace::new(2));
        let go = AtomicBool::new(false);
        pace.enter(&go).failed(); // limit 1
        let held = pace.enter(&go);
        assert_eq!(pace.limit(), 1);
        let (entered, answer) = std::sync::mpsc::channel();
        let waiter = std::sync::Arc::clone(&pace);
        let over = std::thread::spawn(move || {
            let cancel = AtomicBool::new(true);
            let place = waiter.enter(&cancel);
            entered
                .send(waiter.state().in_flight)
                .expect("the test waits");
            drop(place);
        });
        let in_flight = answer
            .recv_timeout(Duration::from_secs(10))
            .expect("a cancelled copy's attempt waited for a place");
        assert_eq!(
            in_flight, 2,
            "the held place and the cancelled one, over the limit of 1"
        );
        over.join().expect("the attempt's thread");
        drop(held);
        assert_eq!(pace.state().in_flight, 0);
    }
}
