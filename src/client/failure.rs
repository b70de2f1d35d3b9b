//! Every way a command can fail, each with its own exit status and a message that says what to do.

use crate::engine::{Classify, ErrorClass};
use crate::s3error::S3ErrorReply;
use hipobj_s3client::ops::error::ErrorAnswer;
use hipobj_s3client::ops::xml::XmlError;
use std::fmt;
use std::time::Duration;

/// A failure of one S3 request, and whether sending it again may help (AWS SDK standard mode).
#[derive(Debug)]
pub struct Retryable {
    pub failure: Failure,
    pub class: ErrorClass,
    /// The server's `Retry-After` (a retry waits at least that).
    pub retry_after: Option<Duration>,
    /// The S3 error the server answered, when it answered one (the batch API's events carry
    /// its status and code).
    pub server: Option<Box<S3ErrorReply>>,
}

impl Retryable {
    /// A failure of `class` without a `Retry-After`.
    pub fn new(failure: Failure, class: ErrorClass) -> Retryable {
        Retryable {
            failure,
            class,
            retry_after: None,
            server: None,
        }
    }

    /// The failure the server's error answer stands for, with the class it was given
    /// (`hipobj_s3client::ops::error`) and its `Retry-After`.
    pub fn of_error(error: &ErrorAnswer, what: &str) -> Retryable {
        Retryable {
            failure: Failure::of_reply(&error.reply, what),
            class: error.class,
            retry_after: error.reply.retry_after,
            server: Some(Box::new(error.reply.clone())),
        }
    }
}

impl Classify for Retryable {
    fn class(&self) -> ErrorClass {
        self.class
    }

    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for Retryable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.failure.fmt(f)
    }
}

/// A failed command. `code()` is the process exit status (see `hipobj --help`).
#[derive(Debug)]
pub enum Failure {
    /// Bad arguments (clap's own usage errors also exit 2).
    Usage(String),
    /// No usable RDMA device (none at all, none active, or `--nic` names none).
    NoNic(String),
    /// The server answered 501: it has no RDMA for this request.
    RdmaDeclined(String),
    /// The server answered 403: credentials or signature refused.
    AuthRefused(String),
    /// The server answered 404: no such bucket or object.
    NotFound(String),
    /// Any other HTTP status, or the server could not be reached.
    Http(String),
    /// `--gpu N` cannot be used (no HIP or CUDA runtime, no GPU, no such device, out of memory).
    Gpu(String),
    /// A local file could not be read or written.
    Io(String),
    /// A transfer failed for another reason (RDMA error, bad reply, ...).
    Transfer(String),
}

impl Failure {
    /// What a failed library call means for the user.
    pub fn of_library(e: &crate::error::Error, what: &str) -> Failure {
        match e.code {
            crate::error::OpError::NicNotFound => Failure::NoNic(format!("{what}: {}", e.detail)),
            _ => Failure::Transfer(format!("{what}: {e}")),
        }
    }

    /// The command line's exit status for this failure (`hipobj --help`).
    pub fn code(&self) -> u8 {
        match self {
            Failure::Transfer(_) => 1,
            Failure::Usage(_) => 2,
            Failure::NoNic(_) => 3,
            Failure::RdmaDeclined(_) => 4,
            Failure::AuthRefused(_) => 5,
            Failure::NotFound(_) => 6,
            Failure::Http(_) => 7,
            Failure::Gpu(_) => 8,
            Failure::Io(_) => 9,
        }
    }

    /// The failure the server's error answer stands for (`what` names the request): the exit
    /// status by its HTTP status, the message with the server's code and message.
    pub fn of_reply(reply: &S3ErrorReply, what: &str) -> Failure {
        let said = |otherwise: &str| match &reply.code {
            Some(_) => reply.to_string(),
            None => otherwise.to_owned(),
        };
        match reply.status {
            403 => Failure::AuthRefused(format!(
                "{what}: {}: check the access key, secret key and region",
                said("access denied (403)")
            )),
            404 => Failure::NotFound(format!(
                "{what}: {}",
                said("no such bucket or object (404)")
            )),
            501 => Failure::RdmaDeclined(format!(
                "{what}: {}; --transport auto copies over plain HTTP instead",
                said("the server declines RDMA (501)")
            )),
            _ => Failure::Http(format!("{what}: {reply}")),
        }
    }
}

/// An S3 answer that is not the XML it should be.
impl From<XmlError> for Failure {
    fn from(e: XmlError) -> Failure {
        Failure::Http(format!("the server sent {e}"))
    }
}

/// The exit statuses, for `--help`.
pub const EXIT_CODES: &str =
    "Exit status: 0 success, 1 transfer failed, 2 usage error, 3 no usable RDMA device, \
4 server declines RDMA (501), 5 access denied (403), 6 no such bucket or object (404), \
7 other HTTP error or server unreachable, 8 GPU not usable, 9 local file error.";

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, msg) = match self {
            Failure::Usage(m) => ("usage", m),
            Failure::NoNic(m) => ("no RDMA device", m),
            Failure::RdmaDeclined(m) => ("RDMA declined", m),
            Failure::AuthRefused(m) => ("access denied", m),
            Failure::NotFound(m) => ("not found", m),
            Failure::Http(m) => ("HTTP", m),
            Failure::Gpu(m) => ("GPU", m),
            Failure::Io(m) => ("file", m),
            Failure::Transfer(m) => ("transfer failed", m),
        };
        write!(f, "{kind}: {msg}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> S3ErrorReply {
        S3ErrorReply::parse(status, |_| None, body.as_bytes()).expect("an error answer")
    }

    #[test]
    fn statuses_map_to_distinct_codes() {
        let codes: Vec<u8> = [403, 404, 501, 500]
            .iter()
            .map(|&s| Failure::of_reply(&answer(s, ""), "x").code())
            .collect();
        assert_eq!(codes, vec![5, 6, 4, 7]);
        assert!(S3ErrorReply::parse(206, |_| None, b"").is_none());
    }

    #[test]
    fn the_message_is_the_servers() {
        let body = "<Error><Code>NoSuchBucket</Code>\
                    <Message>The specified bucket does not exist</Message></Error>";
        let f = Failure::of_reply(&answer(404, body), "GET s3://b/k");
        assert_eq!(f.code(), 6);
        assert_eq!(
            f.to_string(),
            "not found: GET s3://b/k: NoSuchBucket: The specified bucket does not exist (404)"
        );
        let body = "<Error><Code>InvalidBucketName</Code>\
                    <Message>The specified bucket is not valid.</Message></Error>";
        let f = Failure::of_reply(&answer(400, body), "create bucket b");
        assert_eq!(
            f.to_string(),
            "HTTP: create bucket b: InvalidBucketName: The specified bucket is not valid. (400)"
        );
        let f = Failure::of_reply(&answer(404, ""), "GET s3://b/k");
        assert_eq!(
            f.to_string(),
            "not found: GET s3://b/k: no such bucket or object (404)"
        );
    }
}
