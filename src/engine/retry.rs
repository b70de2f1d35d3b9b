//! Retries as the AWS SDKs' standard mode does them: at most 3 attempts, exponential backoff
//! with full jitter (`rand * min(1 s * 2^(retry-1), 20 s)`), on transient errors (500, 502, 504,
//! connection errors), throttling (429, 503, `SlowDown`, ...) and timeouts, limited by a retry
//! quota (500 tokens; a retry costs 5, after a timeout 10; a success after retries gives its
//! cost back). After a `503` with `Retry-After` the wait is at least that (revision 5, rule 4:
//! docs/protocol.md section 12; the retry reuses the connection's pairing, which a `503` left as
//! it was).
//!
//! This is the one classification of the project: the Python package asks it through the
//! extension (`hipobj._core.retry_class`) and keeps only botocore's exception mapping.

use super::pace::Pace;
use crate::error::{Error, OpError};
use hipobj_actors::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub use hipobj_s3client::class::{Classify, ErrorClass};

/// The class of a library error: a failed RDMA operation (the pairing is dropped and the next
/// transfer pairs again) and a busy pool are worth another try.
pub fn class_of_library(e: &Error) -> ErrorClass {
    match e.code {
        OpError::RdmaError => ErrorClass::Transient,
        OpError::Busy => ErrorClass::Throttling,
        _ => ErrorClass::Fatal,
    }
}

/// The standard mode's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included (standard mode: 3).
    pub max_attempts: u32,
    /// The backoff's base (1 s) and cap (20 s).
    pub base: Duration,
    pub max_backoff: Duration,
    /// Whether a copy cuts its requests in flight when one fails and grows them back as they
    /// succeed (`pace`, in the spirit of the SDKs' adaptive mode; on by default).
    pub paced: bool,
}

impl RetryPolicy {
    pub fn standard() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            base: Duration::from_secs(1),
            max_backoff: Duration::from_secs(20),
            paced: true,
        }
    }

    /// No retries.
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::standard()
        }
    }

    /// The wait before retry number `retry` (1-based): full jitter over the exponential bound.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16));
        exp.min(self.max_backoff).mul_f64(jitter())
    }

    /// The wait before retry number `retry` after an answer with `retry_after`: the backoff,
    /// and at least `Retry-After` plus up to half of it again (jitter, so that the clients a
    /// busy server turned away do not all come back at once).
    pub fn wait(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self.backoff(retry);
        match retry_after {
            Some(at_least) => backoff.max(at_least.mul_f64(1.0 + jitter() / 2.0)),
            None => backoff,
        }
    }
}

/// A uniform random number in [0, 1).
fn jitter() -> f64 {
    let mut b = [0u8; 8];
    crate::random::fill(&mut b);
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

const QUOTA_TOKENS: u32 = 500;
const RETRY_COST: u32 = 5;
const TIMEOUT_COST: u32 = 10;

/// The retry quota of one copy (standard mode: retries stop when a burst of failures spent it).
pub(super) struct Quota {
    tokens: Mutex<u32>,
}

impl Quota {
    pub(super) fn new() -> Quota {
        Quota {
            tokens: Mutex::new(QUOTA_TOKENS),
        }
    }

    /// Take the cost of one retry after a failure of `class`: `None` when the quota is spent.
    fn acquire(&self, class: ErrorClass) -> Option<u32> {
        let cost = if class == ErrorClass::Timeout {
            TIMEOUT_COST
        } else {
            RETRY_COST
        };
        let mut tokens = self.tokens.lock();
        if *tokens < cost {
            return None;
        }
        *tokens -= cost;
        Some(cost)
    }

    fn release(&self, cost: u32) {
        let mut tokens = self.tokens.lock();
        *tokens = (*tokens + cost).min(QUOTA_TOKENS);
    }
}

/// The retry state a copy's workers share (and the command line's benchmark threads).
pub struct Retrier<'a> {
    policy: &'a RetryPolicy,
    quota: Quota,
    pub(super) cancel: &'a AtomicBool,
    /// Retries so far.
    retries: AtomicU64,
    /// A copy's limit on requests in flight: each attempt takes a place, and its outcome tells it.
    pub(super) pace: Option<Pace>,
}

impl<'a> Retrier<'a> {
    /// Retries by `policy` with a fresh quota, until `cancel` is set.
    pub fn with_policy(policy: &'a RetryPolicy, cancel: &'a AtomicBool) -> Retrier<'a> {
        Retrier {
            policy,
            quota: Quota::new(),
            cancel,
            retries: AtomicU64::new(0),
            pace: None,
        }
    }

    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Run `op` (one request, sent anew each time) until it succeeds, fails for good, the
    /// attempts or the quota are spent, or the copy is cancelled. `what` names it in the log.
    pub fn run<T, E: Classify + std::fmt::Display>(
        &self,
        what: &dyn Fn() -> String,
        mut op: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut spent = 0;
        let mut attempt = 1;
        loop {
            let place = self.pace.as_ref().map(|pace| pace.enter(self.cancel));
            let err = match op() {
                Ok(v) => {
                    if let Some(place) = place {
                        place.succeeded();
                    }
                    if spent > 0 {
                        self.quota.release(spent);
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            let class = err.class();
            if let (Some(place), true) = (place, class.retryable()) {
                place.failed();
            }
            if !class.retryable()
                || attempt >= self.policy.max_attempts
                || self.cancel.load(Ordering::Relaxed)
            {
                return Err(err);
            }
            let Some(cost) = self.quota.acquire(class) else {
                tracing::warn!("{}: {err}; the retry quota is spent", what());
                return Err(err);
            };
            spent += cost;
            let wait = self.policy.wait(attempt, err.retry_after());
            tracing::info!(
                attempt,
                wait_ms = wait.as_millis() as u64,
                "{}: {err} ({class:?}); retrying",
                what()
            );
            self.retries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(wait);
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(ErrorClass);
    impl Classify for E {
        fn class(&self) -> ErrorClass {
            self.0
        }
    }
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0)
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_millis(1),
            ..RetryPolicy::standard()
        }
    }

    #[test]
    fn statuses_classify_as_the_sdks_do() {
        assert_eq!(ErrorClass::of_status(500, None), ErrorClass::Transient);
        assert_eq!(ErrorClass::of_status(502, None), ErrorClass::Transient);
        assert_eq!(ErrorClass::of_status(504, None), ErrorClass::Transient);
        assert_eq!(
            ErrorClass::of_status(503, Some("SlowDown")),
            ErrorClass::Throttling
        );
        // Revision 5, rule 4: a 503 is throttling whatever its code.
        assert_eq!(ErrorClass::of_status(503, None), ErrorClass::Throttling);
        assert_eq!(
            ErrorClass::of_status(503, Some("ServiceUnavailable")),
            ErrorClass::Throttling
        );
        assert_eq!(ErrorClass::of_status(429, None), ErrorClass::Throttling);
        assert_eq!(
            ErrorClass::of_status(400, Some("RequestTimeout")),
            ErrorClass::Transient
        );
        for s in [400, 403, 404, 416, 501] {
            assert_eq!(ErrorClass::of_status(s, None), ErrorClass::Fatal, "{s}");
        }
        assert!(class_of_library(&Error::rdma("x")).retryable());
        assert!(!class_of_library(&Error::invalid("x")).retryable());
    }

    #[test]
    fn backoff_is_jittered_under_the_exponential_cap() {
        let p = RetryPolicy::standard();
        for retry in 1..8 {
            let cap = Duration::from_secs(1 << (retry - 1)).min(Duration::from_secs(20));
            for _ in 0..50 {
                assert!(p.backoff(retry) < cap);
            }
        }
        let waits: Vec<Duration> = (0..20).map(|_| p.backoff(3)).collect();
        assert!(waits.iter().any(|w| *w != waits[0]), "jitter varies");
    }

    #[test]
    fn a_retry_after_503_waits_at_least_retry_after_with_jitter() {
        let p = fast();
        let at_least = Duration::from_millis(200);
        let waits: Vec<Duration> = (0..20).map(|_| p.wait(1, Some(at_least))).collect();
        for w in &waits {
            assert!(*w >= at_least && *w <= at_least.mul_f64(1.5), "{w:?}");
        }
        assert!(waits.iter().any(|w| *w != waits[0]), "jitter varies");
        assert!(p.wait(1, None) < Duration::from_millis(1));
    }

    #[test]
    fn three_attempts_then_the_last_error() {
        let cancel = AtomicBool::new(false);
        let policy = fast();
        let r = Retrier {
            policy: &policy,
            quota: Quota::new(),
            cancel: &cancel,
            retries: AtomicU64::new(0),
            pace: None,
        };
        let mut calls = 0;
        let out: Result<(), E> = r.run(&|| "op".into(), || {
            calls += 1;
            Err(E(ErrorClass::Transient))
        });
        assert!(out.is_err());
        assert_eq!((calls, r.retries()), (3, 2));

        let mut calls = 0;
        let out = r.run(&|| "op".into(), || {
            calls += 1;
            if calls < 3 {
                Err(E(ErrorClass::Throttling))
            } else {
                Ok(7)
            }
        });
        assert_eq!(out.ok(), Some(7));
        assert_eq!(r.retries(), 4);

        let mut calls = 0;
        let out: Result<(), E> = r.run(&|| "op".into(), || {
            calls += 1;
            Err(E(ErrorClass::Fatal))
        });
        assert!(out.is_err());
        assert_eq!(calls, 1, "a fatal error is not retried");
    }

    #[test]
    fn the_quota_runs_out_and_comes_back() {
        let q = Quota::new();
        let mut n = 0;
        while q.acquire(ErrorClass::Transient).is_some() {
            n += 1;
        }
        assert_eq!(n, QUOTA_TOKENS / RETRY_COST);
        q.release(TIMEOUT_COST);
        assert!(q.acquire(ErrorClass::Timeout).is_some());
        assert!(q.acquire(ErrorClass::Timeout).is_none());
    }
}
