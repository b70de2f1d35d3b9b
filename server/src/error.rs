//! The one place where failures become S3 errors.
//!
//! How a reply header travels with a non-2xx status through s3s: the `S3` method returns an
//! [`S3Error`] on which we call `set_status_code` (400/404/416/428/500/501/503) and
//! `set_headers` (`x-amz-rdma-reply`, plus `Content-Type` for the XML error body). s3s's
//! `serialize_error` uses that status and replaces the response headers by ours, so the client
//! sees e.g. `HTTP 428` + `x-amz-rdma-reply: 428:<server token>` + a small `<Error>` XML body.
//! No fork of s3s and no custom route is needed. A 428 is not a failure, but it is the only
//! non-2xx answer carrying a token, and it goes the same way.

use hipobj::reply::Reply;
use hipobj::token::Token;
use s3s::{S3Error, S3ErrorCode};
use tracing::warn;

use crate::backend::StorageError;
use crate::rdma::{RdmaOutcome, RejectCode};
use crate::stats::Stats;

pub const RDMA_TOKEN: &str = "x-amz-rdma-token";
pub const RDMA_REPLY: &str = "x-amz-rdma-reply";
pub const RDMA_BYTES: &str = "x-amz-rdma-bytes-transferred";

/// A storage failure on the plain-HTTP path.
#[track_caller]
pub fn storage_error(e: StorageError) -> S3Error {
    match e {
        StorageError::NoSuchBucket => S3Error::new(S3ErrorCode::NoSuchBucket),
        StorageError::NoSuchKey => S3Error::new(S3ErrorCode::NoSuchKey),
        StorageError::BucketAlreadyExists => S3Error::new(S3ErrorCode::BucketAlreadyOwnedByYou),
        StorageError::BucketNotEmpty => S3Error::new(S3ErrorCode::BucketNotEmpty),
        StorageError::InvalidKey => S3Error::new(S3ErrorCode::KeyTooLongError),
        StorageError::InvalidBucketName => S3Error::new(S3ErrorCode::InvalidBucketName),
        StorageError::InvalidRange => S3Error::new(S3ErrorCode::InvalidRange),
        StorageError::NoSuchUpload => S3Error::new(S3ErrorCode::NoSuchUpload),
        StorageError::InvalidPart => S3Error::new(S3ErrorCode::InvalidPart),
        StorageError::InvalidPartOrder => S3Error::new(S3ErrorCode::InvalidPartOrder),
        StorageError::EntityTooSmall => S3Error::new(S3ErrorCode::EntityTooSmall),
        StorageError::BadDigest => S3Error::with_message(
            S3ErrorCode::BadDigest,
            "the Content-MD5 you specified did not match what we received",
        ),
        StorageError::ChecksumMismatch(algo) => S3Error::with_message(
            S3ErrorCode::BadDigest,
            format!(
                "the {} you specified did not match the calculated checksum",
                algo.as_str()
            ),
        ),
        StorageError::InvalidDigest => S3Error::with_message(
            S3ErrorCode::InvalidDigest,
            "the Content-MD5 or checksum you specified is not valid",
        ),
        StorageError::Io(io) if io.kind() == std::io::ErrorKind::Unsupported => {
            S3Error::with_message(S3ErrorCode::NotImplemented, io.to_string())
        }
        StorageError::AccessDenied => S3Error::new(S3ErrorCode::AccessDenied),
        StorageError::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => storage_full(),
        StorageError::Io(io) => {
            let at = std::panic::Location::caller();
            warn!(error = %io, %at, "storage i/o failed");
            S3Error::with_source(S3ErrorCode::InternalError, Box::new(io))
        }
    }
}

/// The disk is full (ENOSPC): 507 Insufficient Storage, S3 code `StorageFull` (MinIO answers
/// the same status), with a message saying that nothing was stored; a client may try later.
pub fn storage_full() -> S3Error {
    let mut err = S3Error::with_message(
        S3ErrorCode::Custom("StorageFull".into()),
        "the server's storage is full; nothing was stored",
    );
    err.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
    err
}

/// Any other internal failure (a blocking task that died, ...).
#[track_caller]
pub fn internal<E: std::error::Error + Send + Sync + 'static>(e: E) -> S3Error {
    let at = std::panic::Location::caller();
    warn!(error = %e, %at, "internal error");
    S3Error::with_source(S3ErrorCode::InternalError, Box::new(e))
}

/// A token request answered with a bare code: status = code, `x-amz-rdma-reply: <code>`. A
/// digest refusal keeps S3's code and message (docs/protocol.md rule 4.9).
pub fn rejected(code: RejectCode, stats: &Stats) -> S3Error {
    let n = code.http_code();
    let err = match code {
        RejectCode::BadDigest(None) => storage_error(StorageError::BadDigest),
        RejectCode::BadDigest(Some(algo)) => storage_error(StorageError::ChecksumMismatch(algo)),
        RejectCode::InvalidDigest => storage_error(StorageError::InvalidDigest),
        RejectCode::BadRequest => S3Error::new(S3ErrorCode::InvalidArgument),
        RejectCode::Forbidden => S3Error::new(S3ErrorCode::AccessDenied),
        RejectCode::NotFound => S3Error::new(S3ErrorCode::NoSuchKey),
        RejectCode::NoSuchUpload => S3Error::new(S3ErrorCode::NoSuchUpload),
        RejectCode::RangeNotSatisfiable => S3Error::new(S3ErrorCode::InvalidRange),
        RejectCode::Failed => S3Error::new(S3ErrorCode::InternalError),
        RejectCode::NotImplemented => S3Error::new(S3ErrorCode::NotImplemented),
        RejectCode::Busy => S3Error::new(S3ErrorCode::SlowDown),
        RejectCode::StorageFull => storage_full(),
    };
    with_reply(err, n, &Reply::Code(i32::from(n)), stats)
}

/// `Retry-After` of a 503: a place frees up within a transfer's time; one second is plenty.
pub const RETRY_AFTER_SECS: &str = "1";
/// A refusal of the access check: for a token request, status 403 and `x-amz-rdma-reply: 403`
/// on the given error (its S3 code and message stay); otherwise the error as it is.
pub fn refused(err: S3Error, token_request: bool, stats: &Stats) -> S3Error {
    if token_request {
        with_reply(err, 403, &Reply::Code(403), stats)
    } else {
        err
    }
}

/// An S3 error of a token request answered before any pairing or RDMA (no such upload, a bad
/// part number, ...): its status and S3 code stay, `x-amz-rdma-reply` mirrors the status.
pub fn token_error(err: S3Error, stats: &Stats) -> S3Error {
    let status = err
        .status_code()
        .map(|s| s.as_u16())
        .filter(|s| (100..=599).contains(s))
        .unwrap_or(500);
    with_reply(err, status, &Reply::Code(i32::from(status)), stats)
}

/// 428 + `x-amz-rdma-reply: 428:<server token>`.
pub fn pairing_needed(server: Token, stats: &Stats) -> S3Error {
    let err = S3Error::with_message(
        S3ErrorCode::Custom("RdmaPairingNeeded".into()),
        "connect your QP to the server QP in x-amz-rdma-reply, then send the request again",
    );
    with_reply(err, 428, &Reply::PairingNeeded(server), stats)
}

fn with_reply(mut err: S3Error, status: u16, reply: &Reply, stats: &Stats) -> S3Error {
    stats.count_reply(status);
    if let Ok(status) = http::StatusCode::from_u16(status) {
        err.set_status_code(status);
    }
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    // The encoded reply is ASCII (digits, ':' and hex) by construction.
    if let Ok(v) = http::HeaderValue::from_str(&reply.encode()) {
        headers.insert(RDMA_REPLY, v);
    }
    if status == 503 {
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static(RETRY_AFTER_SECS),
        );
    }
    err.set_headers(headers);
    err
}

/// The answer to an RDMA job that did not end in the success its request expects: a `428` with
/// the server token, the rejection's error, or a failure (the other kind of success: a GET that
/// stored or a PUT that fetched, which the engine never does). The one place where an outcome
/// becomes an S3 error, for GetObject, PutObject and UploadPart alike.
pub fn unfinished(outcome: RdmaOutcome, stats: &Stats) -> S3Error {
    match outcome {
        RdmaOutcome::PairingNeeded { server } => pairing_needed(server, stats),
        RdmaOutcome::Rejected(code) => rejected(code, stats),
        RdmaOutcome::Fetched { .. } | RdmaOutcome::Stored { .. } => {
            rejected(RejectCode::Failed, stats)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ChecksumAlgo;
    use hipobj::token::Transport;

    #[test]
    fn rejections_carry_status_and_reply() {
        let stats = Stats::default();
        for (code, n) in [
            (RejectCode::BadRequest, 400),
            (RejectCode::Forbidden, 403),
            (RejectCode::NotFound, 404),
            (RejectCode::NoSuchUpload, 404),
            (RejectCode::RangeNotSatisfiable, 416),
            (RejectCode::Failed, 500),
            (RejectCode::NotImplemented, 501),
            (RejectCode::Busy, 503),
            (RejectCode::StorageFull, 507),
        ] {
            let e = rejected(code, &stats);
            assert_eq!(e.status_code().map(|s| s.as_u16()), Some(n));
            let reply = e
                .headers()
                .and_then(|h| h.get(RDMA_REPLY))
                .expect("reply header");
            assert_eq!(reply.as_bytes(), format!("{n}").as_bytes());
            assert_eq!(
                Reply::parse(reply.as_bytes()),
                Ok(Reply::Code(i32::from(n)))
            );
            let retry_after = e.headers().and_then(|h| h.get(http::header::RETRY_AFTER));
            assert_eq!(retry_after.is_some(), n == 503, "Retry-After only on 503");
        }
        assert!(stats.to_json().contains("\"replies_503\":1"));
    }

    /// Issue 22: a full disk is a clear S3 error (507, `StorageFull`), on both paths.
    #[test]
    fn a_full_disk_is_507_storage_full() {
        let full = std::io::Error::from_raw_os_error(28); // ENOSPC
        let e = storage_error(StorageError::Io(full));
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(507));
        assert_eq!(*e.code(), S3ErrorCode::Custom("StorageFull".into()));
        assert!(e
            .message()
            .is_some_and(|m| m.contains("nothing was stored")));
        let other = storage_error(StorageError::Io(std::io::Error::other("broken")));
        assert_eq!(*other.code(), S3ErrorCode::InternalError);
    }

    #[test]
    fn digest_rejections_keep_s3_codes_and_say_why() {
        let stats = Stats::default();
        let e = rejected(RejectCode::BadDigest(Some(ChecksumAlgo::Crc32)), &stats);
        assert_eq!(*e.code(), S3ErrorCode::BadDigest);
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(400));
        assert!(e.message().is_some_and(|m| m.contains("CRC32")));
        let e = rejected(RejectCode::BadDigest(None), &stats);
        assert!(e.message().is_some_and(|m| m.contains("Content-MD5")));
        let e = rejected(RejectCode::InvalidDigest, &stats);
        assert_eq!(*e.code(), S3ErrorCode::InvalidDigest);
        let reply = e.headers().and_then(|h| h.get(RDMA_REPLY)).expect("reply");
        assert_eq!(reply.as_bytes(), b"400");
    }

    #[test]
    fn a_token_error_keeps_its_code_and_mirrors_its_status() {
        let stats = Stats::default();
        let e = token_error(storage_error(StorageError::NoSuchUpload), &stats);
        assert_eq!(*e.code(), S3ErrorCode::NoSuchUpload);
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(404));
        let reply = e.headers().and_then(|h| h.get(RDMA_REPLY)).expect("reply");
        assert_eq!(reply.as_bytes(), b"404");
        assert!(stats.to_json().contains("\"replies_404\":1"));
    }

    #[test]
    fn pairing_needed_carries_the_server_token() {
        let t = Token {
            transport: Transport::Rc,
            qp_num: 0x42,
            gid: [9; 16],
            rkey: 0xabcdef,
            remote_addr: 0,
            length: 0,
            port: 1,
            lid: 77,
        };
        let e = pairing_needed(t, &Stats::default());
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(428));
        let reply = e
            .headers()
            .and_then(|h| h.get(RDMA_REPLY))
            .expect("reply header");
        assert_eq!(Reply::parse(reply.as_bytes()), Ok(Reply::PairingNeeded(t)));
    }
}
