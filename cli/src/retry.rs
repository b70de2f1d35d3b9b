//! The standard-mode retry rule (as the AWS SDKs' `standard` mode): an operation whose failure is
//! transient (the server answered 5xx, could not be reached, or the RDMA operation failed and the
//! pairing was dropped) is tried again, at most `ATTEMPTS` times in all, after a full-jitter
//! exponential backoff; a lasting failure (4xx, 501, local errors) is returned at once. Every retry
//! is counted, so a run can say how many transient failures a retry fixed.

use crate::failure::Failure;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Attempts in all, the first one included.
pub const ATTEMPTS: u32 = 3;
/// The backoff before retry `n` (1-based) is uniform in `[0, min(BASE * 2^n, MAX))`.
const BASE: Duration = Duration::from_millis(100);
const MAX: Duration = Duration::from_secs(20);

/// A failed attempt, and whether another attempt may succeed.
#[derive(Debug)]
pub struct Attempt {
    pub failure: Failure,
    pub transient: bool,
}

impl Attempt {
    /// A failure no retry can fix.
    pub fn lasting(failure: Failure) -> Attempt {
        Attempt {
            failure,
            transient: false,
        }
    }
}

impl From<Failure> for Attempt {
    fn from(failure: Failure) -> Attempt {
        Attempt::lasting(failure)
    }
}

/// Retries shared by the threads of one run; `retried()` counts them all.
#[derive(Debug, Default)]
pub struct Retry {
    retried: AtomicUsize,
}

impl Retry {
    /// Runs `op` until it succeeds, fails for good, or has been tried `ATTEMPTS` times.
    pub fn run<T>(&self, mut op: impl FnMut() -> Result<T, Attempt>) -> Result<T, Failure> {
        let mut tried = 1;
        loop {
            match op() {
                Ok(v) => return Ok(v),
                Err(a) if !a.transient || tried == ATTEMPTS => return Err(a.failure),
                Err(a) => {
                    tracing::debug!(
                        attempt = tried,
                        "transient failure, retrying: {}",
                        a.failure
                    );
                    self.retried.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(backoff(tried));
                    tried += 1;
                }
            }
        }
    }

    /// Retries so far (each one an attempt after a transient failure).
    pub fn retried(&self) -> usize {
        self.retried.load(Ordering::Relaxed)
    }
}

/// Full jitter: uniform in `[0, min(BASE * 2^retry, MAX))`.
fn backoff(retry: u32) -> Duration {
    let cap = BASE.saturating_mul(1 << retry.min(16)).min(MAX);
    // RandomState is seeded per instance from the OS: a random u64 without a crate for it.
    let r = RandomState::new().build_hasher().finish();
    cap.mul_f64((r >> 11) as f64 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn transient() -> Attempt {
        Attempt {
            failure: Failure::Http("HTTP 500".into()),
            transient: true,
        }
    }

    #[test]
    fn a_transient_failure_is_retried_and_counted() {
        let retry = Retry::default();
        let calls = Cell::new(0);
        let r = retry.run(|| {
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                Err(transient())
            } else {
                Ok(7)
            }
        });
        assert_eq!(r.ok(), Some(7));
        assert_eq!((calls.get(), retry.retried()), (3, 2));
    }

    #[test]
    fn attempts_are_bounded() {
        let retry = Retry::default();
        let calls = Cell::new(0);
        let r: Result<(), _> = retry.run(|| {
            calls.set(calls.get() + 1);
            Err(transient())
        });
        assert!(matches!(r, Err(Failure::Http(_))));
        assert_eq!(
            (calls.get(), retry.retried()),
            (ATTEMPTS, ATTEMPTS as usize - 1)
        );
    }

    #[test]
    fn a_lasting_failure_is_not_retried() {
        let retry = Retry::default();
        let calls = Cell::new(0);
        let r: Result<(), _> = retry.run(|| {
            calls.set(calls.get() + 1);
            Err(Attempt::lasting(Failure::NotFound("404".into())))
        });
        assert!(matches!(r, Err(Failure::NotFound(_))));
        assert_eq!((calls.get(), retry.retried()), (1, 0));
    }

    #[test]
    fn backoff_stays_under_its_cap() {
        for n in 1..40 {
            let cap = BASE.saturating_mul(1 << n.min(16)).min(MAX);
            assert!(backoff(n) < cap);
        }
    }
}
