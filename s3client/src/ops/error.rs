//! The error an operation's answer stands for, read once by the one S3 error parser
//! (`hipobj::s3error`) and classified once for a retry by the AWS SDKs' standard mode
//! (`hipobj::engine::ErrorClass`): the command line's retries and the gateway's read the same
//! class from the same answer.

use std::fmt;
use std::time::Duration;

use crate::class::{Classify, ErrorClass};
use crate::s3error::S3ErrorReply;

use crate::http::Answer;

/// An answer's S3 error and its retry class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorAnswer {
    pub reply: S3ErrorReply,
    pub class: ErrorClass,
}

impl ErrorAnswer {
    /// The error of a non-2xx answer; `None` for a 2xx, whose body (an object's bytes, a
    /// result) is not looked at.
    pub fn of_failure(answer: &Answer) -> Option<ErrorAnswer> {
        if answer.is_success() {
            return None;
        }
        let reply = answer.error()?;
        let class = reply.class();
        Some(ErrorAnswer { reply, class })
    }

    /// The error of an answer to an operation that S3 may fail after it has begun a `200 OK`
    /// (CompleteMultipartUpload: the status goes first, the assembly takes a while, and an error
    /// found meanwhile comes as an error document in the body): a non-2xx as
    /// [`ErrorAnswer::of_failure`], and a 2xx whose root element is `<Error>`, classified by its
    /// code ([`class_of_late_failure`]).
    pub fn of_late_failure(answer: &Answer) -> Option<ErrorAnswer> {
        if !answer.is_success() {
            return ErrorAnswer::of_failure(answer);
        }
        let reply = answer.error()?;
        let class = class_of_late_failure(reply.code.as_deref());
        Some(ErrorAnswer { reply, class })
    }

    /// The code the store named (`SlowDown`, `InvalidPart`), if any.
    pub fn code(&self) -> Option<&str> {
        self.reply.code.as_deref()
    }
}

/// The retry class of an error S3 sent inside a 2xx. The status says only that the answer had
/// begun, so the code decides, as the SDKs' code lists read it: `SlowDown` is throttling,
/// `InternalError` and `RequestTimeout` are transient. `ServiceUnavailable`, in neither list, is
/// the code S3 sends with a 503 and is read with that status (throttling). No code at all reads
/// as a 500, as botocore reads such an answer (transient). Every other code (`InvalidPart`,
/// `NoSuchUpload`, `EntityTooSmall`) is final: sending the same request again cannot help.
pub fn class_of_late_failure(code: Option<&str>) -> ErrorClass {
    match code {
        None => ErrorClass::of_status(500, None),
        Some("ServiceUnavailable") => ErrorClass::of_status(503, code),
        Some(_) => ErrorClass::of_status(200, code),
    }
}

impl Classify for ErrorAnswer {
    fn class(&self) -> ErrorClass {
        self.class
    }

    fn retry_after(&self) -> Option<Duration> {
        self.reply.retry_after
    }
}

/// The server's error as `hipobj::s3error` writes it (`SlowDown: message (200)`).
impl fmt::Display for ErrorAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.reply.fmt(f)
    }
}

impl std::error::Error for ErrorAnswer {}

#[cfg(test)]
mod tests {
    use super::super::test_answers::{answer, document};
    use super::*;
    use reqwest::header::HeaderValue;

    fn late_class(code: &str) -> Option<ErrorClass> {
        ErrorAnswer::of_late_failure(&answer(200, &document(code))).map(|e| e.class)
    }

    #[test]
    fn an_error_inside_a_200_is_classified_by_its_code() {
        assert_eq!(late_class("SlowDown"), Some(ErrorClass::Throttling));
        assert_eq!(
            late_class("ServiceUnavailable"),
            Some(ErrorClass::Throttling)
        );
        assert_eq!(late_class("InternalError"), Some(ErrorClass::Transient));
        assert_eq!(late_class("RequestTimeout"), Some(ErrorClass::Transient));
        for permanent in [
            "InvalidPart",
            "InvalidPartOrder",
            "NoSuchUpload",
            "EntityTooSmall",
        ] {
            assert_eq!(
                late_class(permanent),
                Some(ErrorClass::Fatal),
                "{permanent}"
            );
        }
        let no_code = answer(200, "<Error><Message>m</Message></Error>");
        assert_eq!(
            ErrorAnswer::of_late_failure(&no_code).map(|e| e.class),
            Some(ErrorClass::Transient)
        );
    }

    #[test]
    fn the_error_keeps_the_servers_words() {
        let mut slow = answer(200, &document("SlowDown"));
        slow.headers
            .insert("retry-after", HeaderValue::from_static("1"));
        let e = ErrorAnswer::of_late_failure(&slow).expect("an error document");
        assert_eq!(e.code(), Some("SlowDown"));
        assert_eq!(e.to_string(), "SlowDown: m (200)");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_success_is_read_as_a_failure_only_where_the_operation_allows_it() {
        let ok = answer(200, "<CompleteMultipartUploadResult/>");
        assert_eq!(ErrorAnswer::of_late_failure(&ok), None);
        // An object's bytes that happen to be an error document are no error.
        let object = answer(200, &document("InternalError"));
        assert_eq!(ErrorAnswer::of_failure(&object), None);
        assert!(ErrorAnswer::of_late_failure(&object).is_some());
    }

    #[test]
    fn a_failed_status_is_classified_as_the_sdks_do() {
        let class =
            |status, body: &str| ErrorAnswer::of_failure(&answer(status, body)).map(|e| e.class);
        assert_eq!(
            class(503, &document("SlowDown")),
            Some(ErrorClass::Throttling)
        );
        assert_eq!(class(500, ""), Some(ErrorClass::Transient));
        assert_eq!(
            class(400, &document("RequestTimeout")),
            Some(ErrorClass::Transient)
        );
        assert_eq!(
            class(400, &document("InvalidPart")),
            Some(ErrorClass::Fatal)
        );
        assert_eq!(class(404, ""), Some(ErrorClass::Fatal));
        // The same code in a failed status and in a 200 reads the same.
        let late = ErrorAnswer::of_late_failure(&answer(400, &document("InvalidPart")));
        assert_eq!(late.map(|e| e.class), Some(ErrorClass::Fatal));
    }
}
