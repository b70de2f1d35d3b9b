//! Every way a command can fail, each with its own exit status and a message that says what to do.

use hipobj::engine::{Classify, ErrorClass};
use std::fmt;

/// A failure of one S3 request, and whether sending it again may help (AWS SDK standard mode).
#[derive(Debug)]
pub struct Retryable {
    pub failure: Failure,
    pub class: ErrorClass,
}

impl Classify for Retryable {
    fn class(&self) -> ErrorClass {
        self.class
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

    /// The failure an HTTP status stands for (`what` names the request), `None` for 2xx.
    pub fn from_status(status: u16, what: &str) -> Option<Failure> {
        match status {
            200..=299 => None,
            403 => Some(Failure::AuthRefused(format!(
                "{what}: access denied (403): check the access key, secret key and region"
            ))),
            404 => Some(Failure::NotFound(format!(
                "{what}: no such bucket or object (404)"
            ))),
            501 => Some(Failure::RdmaDeclined(format!(
                "{what}: the server declines RDMA (501); --http-fallback copies over plain HTTP instead"
            ))),
            s => Some(Failure::Http(format!("{what}: HTTP {s}"))),
        }
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

    #[test]
    fn statuses_map_to_distinct_codes() {
        let codes: Vec<u8> = [403, 404, 501, 500]
            .iter()
            .map(|&s| Failure::from_status(s, "x").map(|f| f.code()).unwrap_or(0))
            .collect();
        assert_eq!(codes, vec![5, 6, 4, 7]);
        assert!(Failure::from_status(206, "x").is_none());
    }
}
