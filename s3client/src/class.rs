//! The AWS SDKs' standard-mode retry classes: what an answer's status and S3 error code, or a
//! failure, mean for another try. The one classification of the project: the library's retrier
//! (`hipobj::engine`, which re-exports these), the Python package (through the extension) and the
//! gateway read it.

use std::time::Duration;

/// What a failure means for a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// 500/502/504, a connection that failed or dropped, an RDMA operation that failed.
    Transient,
    /// The server asked to slow down (429, 503, a Throttling code such as SlowDown).
    Throttling,
    /// The request timed out.
    Timeout,
    /// Anything else (403, 404, a bad request, a local error): retrying will not help.
    Fatal,
}

impl ErrorClass {
    /// The SDKs' classification of an HTTP answer: its status and its S3 error code (if known).
    pub fn of_status(status: u16, code: Option<&str>) -> ErrorClass {
        match (status, code) {
            (_, Some(c)) if Self::THROTTLING_CODES.contains(&c) => ErrorClass::Throttling,
            (429 | 503, _) => ErrorClass::Throttling,
            (_, Some(c)) if Self::TRANSIENT_CODES.contains(&c) => ErrorClass::Transient,
            (500 | 502 | 504, _) => ErrorClass::Transient,
            _ => ErrorClass::Fatal,
        }
    }

    /// The S3 error codes that mean "slow down" whatever the status.
    pub const THROTTLING_CODES: [&'static str; 9] = [
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "SlowDown",
    ];

    /// The S3 error codes that are worth another try whatever the status.
    pub const TRANSIENT_CODES: [&'static str; 4] = [
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
    ];

    /// The class's name as the Python package spells it ("transient", "throttling", "timeout",
    /// "fatal").
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Throttling => "throttling",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Fatal => "fatal",
        }
    }

    pub fn retryable(self) -> bool {
        self != ErrorClass::Fatal
    }
}

/// How an error of the caller's store is classified.
pub trait Classify {
    fn class(&self) -> ErrorClass;
    /// The server's `Retry-After`, if it sent one: the retry waits at least that.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}
