//! The one place where failures become S3 errors.
//!
//! How a reply header travels with a non-2xx status through s3s: the `S3` method returns an
//! [`S3Error`] on which we call `set_status_code` (400/404/416/428/500/501/503) and
//! `set_headers` (`x-amz-rdma-reply`, plus `Content-Type` for the XML error body). s3s's
//! `serialize_error` uses that status and replaces the response headers by ours, so the client
//! sees e.g. `HTTP 428` + `x-amz-rdma-reply: 428:<server token>` + a small `<Error>` XML body.
//! No fork of s3s and no custom route is needed. A 428 is not a failure, but it is the only
//! non-2xx answer carrying a token, and it goes the same way.

//! The one error model of the server ([`Fault`]) and the one place where failures become S3
//! errors, for every route: the S3 front, v1 token requests, hipobj-rc-v2 control requests and
//! the gateway's pass-through.
//!
//! A [`Fault`] maps once to (HTTP status, S3 code, message) ([`Fault::status`],
//! [`Fault::code`], [`Fault::message`]) and becomes an [`S3Error`], whose XML body s3s renders
//! (`S3Error::to_http_response` for the pass-through, which runs outside s3s): one renderer.
//! [`Fault::starts_nothing`] decides which refusals leave the pairing as it was (protocol
//! revision 5, docs/protocol.md section 12).
//!
//! How a reply header travels with a non-2xx status through s3s: the `S3` method returns an
//! [`S3Error`] on which we call `set_status_code` (400/404/416/428/500/501/503) and
//! `set_headers` (`x-amz-rdma-reply`, plus `Content-Type` for the XML error body). s3s's
//! `serialize_error` uses that status and replaces the response headers by ours, so the client
//! sees e.g. `HTTP 428` + `x-amz-rdma-reply: 428:<server token>` + a small `<Error>` XML body.
//! No fork of s3s and no custom route is needed. A 428 is not a failure, but it is the only
//! non-2xx answer carrying a token, and it goes the same way.

use std::borrow::Cow;

use hipobj::reply::Reply;
use hipobj::token::Token;
use s3s::{HttpResponse, S3Error, S3ErrorCode};
use tracing::warn;

use crate::backend::{ChecksumAlgo, StorageError};
use crate::rdma::RdmaOutcome;
use crate::stats::Stats;

pub const RDMA_TOKEN: &str = "x-amz-rdma-token";
pub const RDMA_REPLY: &str = "x-amz-rdma-reply";
pub const RDMA_BYTES: &str = "x-amz-rdma-bytes-transferred";

/// A fault's message: fixed text, or one built for the case.
pub type Why = Cow<'static, str>;

/// Every refusal and failure the server answers on its own behalf (S3 operations that s3s
/// validates, such as a failed precondition, stay s3s's [`S3Error`]s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 400 `InvalidArgument`: a malformed token or header, a buffer too small for the selected
    /// bytes, a request this route does not take.
    BadRequest(Why),
    /// 400 `BadDigest`: a digest the client sent does not match the bytes (the algorithm's, or
    /// `None` for `Content-MD5`). Nothing was stored.
    BadDigest(Option<ChecksumAlgo>),
    /// 400 `InvalidDigest`: a digest the client sent is malformed. Nothing was stored.
    InvalidDigest,
    /// 400 `InvalidBucketName`.
    InvalidBucketName,
    /// 400 `KeyTooLongError`: the key is empty or too long for this store.
    InvalidKey,
    /// 400 `InvalidPart`: a listed part is missing or its ETag differs.
    InvalidPart,
    /// 400 `InvalidPartOrder`.
    InvalidPartOrder,
    /// 400 `EntityTooSmall`: a part other than the last is below the minimum size.
    EntityTooSmall,
    /// 403 `AccessDenied`.
    Forbidden(Why),
    /// 404 `NoSuchBucket`.
    NoSuchBucket,
    /// 404 `NoSuchKey`.
    NoSuchKey,
    /// 404 `NoSuchUpload`: an unknown or finished multipart upload.
    NoSuchUpload,
    /// 404 `NoSuchSession`: no hipobj-rc-v2 session of the requester's by that id.
    NoSuchSession,
    /// 408 `RequestTimeout`: a hipobj-rc-v2 data phase did not finish in time.
    Timeout(Why),
    /// 409 `BucketAlreadyOwnedByYou`.
    BucketExists,
    /// 409 `BucketNotEmpty`.
    BucketNotEmpty,
    /// 409 `Conflict`: a hipobj-rc-v2 session not in the state the request needs.
    Conflict(Why),
    /// 413 `EntityTooLarge`.
    TooLarge(Why),
    /// 416 `InvalidRange`: the range (or offset) selects nothing of the object.
    RangeNotSatisfiable(Why),
    /// 500 `InternalError`: an RDMA operation failed (the pairing was dropped), or the server
    /// failed on its own.
    Failed(Why),
    /// 501 `NotImplemented`: no RDMA here, a DC token, an operation the store cannot do.
    NotImplemented(Why),
    /// 503 `SlowDown` with `Retry-After`: too many transfers or sessions at once.
    Busy(Why),
    /// 503 `ServiceUnavailable` with `Retry-After`: the store behind the server (a gateway's
    /// backend) refused the connection, timed out or answered 5xx; the message says which.
    Unavailable(String),
    /// 503 `ServiceUnavailable` with `Retry-After`: every RDMA device of this server that faces
    /// the client's GID has its port down (`rdma::rails`); nothing started, the pairing stays.
    RailDown(Why),
    /// 507 `StorageFull` (as MinIO answers): the disk is full; nothing was stored.
    StorageFull,
}

/// The replies that start nothing (protocol revision 5, rule 1): answered before any work
/// request of the request was posted, with the pairing left as it was. Every other error status
/// (500, 507, ...) tells the client to replace its QP, and the server drops the pairing.
pub const STARTS_NOTHING: [u16; 8] = [400, 403, 404, 409, 412, 416, 501, 503];

/// `Retry-After` of a 503: a place frees up within a transfer's time; one second is plenty.
pub const RETRY_AFTER_SECS: &str = "1";

impl Fault {
    /// An RDMA operation of the request failed, or its QP could not be made or fed: the
    /// server dropped the pairing (rule 5.5: the client replaces its QP).
    pub const RDMA_FAILED: Fault = Fault::Failed(Cow::Borrowed(
        "the RDMA operation failed; the server dropped the pairing",
    ));
    /// Too many token transfers at once, or the request's pairing key busy.
    pub const BUSY: Fault = Fault::Busy(Cow::Borrowed("too many transfers at once"));
    /// RDMA is off on this server, or the token names DC.
    pub const NO_RDMA: Fault = Fault::NotImplemented(Cow::Borrowed(
        "no RDMA for this token here (RDMA is off, or the token is not RC)",
    ));
    /// The token does not parse.
    pub const BAD_TOKEN: Fault = Fault::BadRequest(Cow::Borrowed("malformed x-amz-rdma-token"));
    /// The client's buffer is smaller than the bytes the GET selects.
    pub const BUFFER_TOO_SMALL: Fault = Fault::BadRequest(Cow::Borrowed(
        "the token's buffer is smaller than the selected bytes",
    ));
    /// The range (or offset) selects nothing of the object.
    pub const RANGE_OUTSIDE: Fault =
        Fault::RangeNotSatisfiable(Cow::Borrowed("the range selects nothing of the object"));

    pub fn status(&self) -> u16 {
        match self {
            Fault::BadRequest(_)
            | Fault::BadDigest(_)
            | Fault::InvalidDigest
            | Fault::InvalidBucketName
            | Fault::InvalidKey
            | Fault::InvalidPart
            | Fault::InvalidPartOrder
            | Fault::EntityTooSmall => 400,
            Fault::Forbidden(_) => 403,
            Fault::NoSuchBucket | Fault::NoSuchKey | Fault::NoSuchUpload | Fault::NoSuchSession => {
                404
            }
            Fault::Timeout(_) => 408,
            Fault::BucketExists | Fault::BucketNotEmpty | Fault::Conflict(_) => 409,
            Fault::TooLarge(_) => 413,
            Fault::RangeNotSatisfiable(_) => 416,
            Fault::Failed(_) => 500,
            Fault::NotImplemented(_) => 501,
            Fault::Busy(_) | Fault::Unavailable(_) | Fault::RailDown(_) => 503,
            Fault::StorageFull => 507,
        }
    }

    pub fn code(&self) -> S3ErrorCode {
        match self {
            Fault::BadRequest(_) => S3ErrorCode::InvalidArgument,
            Fault::BadDigest(_) => S3ErrorCode::BadDigest,
            Fault::InvalidDigest => S3ErrorCode::InvalidDigest,
            Fault::InvalidBucketName => S3ErrorCode::InvalidBucketName,
            Fault::InvalidKey => S3ErrorCode::KeyTooLongError,
            Fault::InvalidPart => S3ErrorCode::InvalidPart,
            Fault::InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
            Fault::EntityTooSmall => S3ErrorCode::EntityTooSmall,
            Fault::Forbidden(_) => S3ErrorCode::AccessDenied,
            Fault::NoSuchBucket => S3ErrorCode::NoSuchBucket,
            Fault::NoSuchKey => S3ErrorCode::NoSuchKey,
            Fault::NoSuchUpload => S3ErrorCode::NoSuchUpload,
            Fault::NoSuchSession => S3ErrorCode::Custom("NoSuchSession".into()),
            Fault::Timeout(_) => S3ErrorCode::RequestTimeout,
            Fault::BucketExists => S3ErrorCode::BucketAlreadyOwnedByYou,
            Fault::BucketNotEmpty => S3ErrorCode::BucketNotEmpty,
            Fault::Conflict(_) => S3ErrorCode::Custom("Conflict".into()),
            Fault::TooLarge(_) => S3ErrorCode::EntityTooLarge,
            Fault::RangeNotSatisfiable(_) => S3ErrorCode::InvalidRange,
            Fault::Failed(_) => S3ErrorCode::InternalError,
            Fault::NotImplemented(_) => S3ErrorCode::NotImplemented,
            Fault::Busy(_) => S3ErrorCode::SlowDown,
            Fault::Unavailable(_) | Fault::RailDown(_) => S3ErrorCode::ServiceUnavailable,
            Fault::StorageFull => S3ErrorCode::Custom("StorageFull".into()),
        }
    }

    pub fn message(&self) -> Why {
        match self {
            Fault::BadRequest(why)
            | Fault::Forbidden(why)
            | Fault::Timeout(why)
            | Fault::Conflict(why)
            | Fault::TooLarge(why)
            | Fault::RangeNotSatisfiable(why)
            | Fault::Failed(why)
            | Fault::NotImplemented(why)
            | Fault::Busy(why)
            | Fault::RailDown(why) => why.clone(),
            Fault::BadDigest(None) => {
                "the Content-MD5 you specified did not match what we received".into()
            }
            Fault::BadDigest(Some(algo)) => format!(
                "the {} you specified did not match the calculated checksum",
                algo.as_str()
            )
            .into(),
            Fault::InvalidDigest => "the Content-MD5 or checksum you specified is not valid".into(),
            Fault::InvalidBucketName => "the bucket name is not valid".into(),
            Fault::InvalidKey => "the key is empty or too long".into(),
            Fault::InvalidPart => "a listed part is missing or its ETag differs".into(),
            Fault::InvalidPartOrder => "the parts are not in ascending order".into(),
            Fault::EntityTooSmall => "a part other than the last is smaller than 5 MiB".into(),
            Fault::NoSuchBucket => "the specified bucket does not exist".into(),
            Fault::NoSuchKey => "the specified key does not exist".into(),
            Fault::NoSuchUpload => "the specified multipart upload does not exist".into(),
            Fault::NoSuchSession => "no such session".into(),
            Fault::BucketExists => "the bucket exists and is yours".into(),
            Fault::BucketNotEmpty => "the bucket is not empty".into(),
            Fault::Unavailable(why) => format!("backend store unavailable: {why}").into(),
            Fault::StorageFull => "the server's storage is full; nothing was stored".into(),
        }
    }

    /// Whether this refusal starts nothing (see [`STARTS_NOTHING`]): the pairing stays.
    pub fn starts_nothing(&self) -> bool {
        STARTS_NOTHING.contains(&self.status())
    }

    /// The fault to answer when this one happens after the request's RDMA operations completed
    /// (a PUT's commit): a digest refusal and a full disk stay as they are (nothing was stored,
    /// nothing is in flight); anything else is a failure of the transfer (500, rule 1).
    pub fn after_transfer(self) -> Fault {
        match self {
            Fault::BadDigest(_) | Fault::InvalidDigest | Fault::StorageFull => self,
            other => {
                Fault::Failed(format!("storing the moved bytes failed: {}", other.message()).into())
            }
        }
    }
}

impl From<StorageError> for Fault {
    /// The one mapping of storage failures, for every route.
    #[track_caller]
    fn from(e: StorageError) -> Fault {
        match e {
            StorageError::NoSuchBucket => Fault::NoSuchBucket,
            StorageError::NoSuchKey => Fault::NoSuchKey,
            StorageError::BucketAlreadyExists => Fault::BucketExists,
            StorageError::BucketNotEmpty => Fault::BucketNotEmpty,
            StorageError::InvalidKey => Fault::InvalidKey,
            StorageError::InvalidBucketName => Fault::InvalidBucketName,
            StorageError::InvalidRange => Fault::RANGE_OUTSIDE,
            StorageError::NoSuchUpload => Fault::NoSuchUpload,
            StorageError::InvalidPart => Fault::InvalidPart,
            StorageError::InvalidPartOrder => Fault::InvalidPartOrder,
            StorageError::EntityTooSmall => Fault::EntityTooSmall,
            StorageError::BadDigest => Fault::BadDigest(None),
            StorageError::ChecksumMismatch(algo) => Fault::BadDigest(Some(algo)),
            StorageError::InvalidDigest => Fault::InvalidDigest,
            StorageError::AccessDenied => Fault::Forbidden("access denied by the store".into()),
            e @ StorageError::UnknownIdentity(_) => Fault::Forbidden(e.to_string().into()),
            StorageError::Unavailable(why) => {
                warn!(%why, "backend store unavailable");
                Fault::Unavailable(why)
            }
            StorageError::Io(io) if io.kind() == std::io::ErrorKind::Unsupported => {
                Fault::NotImplemented(io.to_string().into())
            }
            StorageError::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
                warn!(error = %io, "storage full; nothing stored");
                Fault::StorageFull
            }
            StorageError::Io(io) => {
                let at = std::panic::Location::caller();
                warn!(error = %io, %at, "storage i/o failed");
                Fault::Failed("the server's storage failed".into())
            }
        }
    }
}

impl From<Fault> for S3Error {
    fn from(f: Fault) -> S3Error {
        let mut err = S3Error::with_message(f.code(), f.message());
        if let Ok(status) = http::StatusCode::from_u16(f.status()) {
            err.set_status_code(status);
        }
        err.set_headers(error_headers(f.status()));
        err
    }
}

/// The headers of an error answer: `Content-Type` of the XML body, `Retry-After` on a 503.
fn error_headers(status: u16) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    if status == 503 {
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static(RETRY_AFTER_SECS),
        );
    }
    headers
}

/// A storage failure on the plain-HTTP path.
#[track_caller]
pub fn storage_error(e: StorageError) -> S3Error {
    Fault::from(e).into()
}

/// Any other internal failure (a blocking task that died, ...).
#[track_caller]
pub fn internal<E: std::error::Error + Send + Sync + 'static>(e: E) -> S3Error {
    let at = std::panic::Location::caller();
    warn!(error = %e, %at, "internal error");
    Fault::Failed("internal error".into()).into()
}

/// An answer outside s3s (the gateway's pass-through): status, headers and the XML body as
/// s3s renders every other error.
pub fn http_response(err: S3Error) -> HttpResponse {
    match err.to_http_response() {
        Ok(resp) => resp,
        Err(e) => {
            warn!(error = %e, "rendering an error answer failed");
            let mut resp = HttpResponse::new(s3s::Body::empty());
            *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
            resp
        }
    }
}

/// A token request answered with a bare code: status = code, `x-amz-rdma-reply: <code>`, the
/// fault's S3 code and message (a digest refusal keeps S3's, docs/protocol.md rule 4.9).
pub fn rejected(fault: Fault, stats: &Stats) -> S3Error {
    let n = fault.status();
    with_reply(fault.into(), n, &Reply::Code(i32::from(n)), stats)
}

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
    let mut headers = error_headers(status);
    // The encoded reply is ASCII (digits, ':' and hex) by construction.
    if let Ok(v) = http::HeaderValue::from_str(&reply.encode()) {
        headers.insert(RDMA_REPLY, v);
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
        RdmaOutcome::Rejected(fault) => rejected(fault, stats),
        RdmaOutcome::Fetched { .. } | RdmaOutcome::Stored { .. } => rejected(
            Fault::Failed("the RDMA job ended in the other kind of success".into()),
            stats,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipobj::token::Transport;

    /// Every fault's (status, S3 code), and whether the pairing stays (revision 5, rule 1).
    #[test]
    fn each_fault_maps_once_to_status_code_and_pairing_rule() {
        let cases: [(Fault, u16, &str, bool); 15] = [
            (Fault::BAD_TOKEN, 400, "InvalidArgument", true),
            (Fault::BadDigest(None), 400, "BadDigest", true),
            (Fault::Forbidden("x".into()), 403, "AccessDenied", true),
            (Fault::NoSuchBucket, 404, "NoSuchBucket", true),
            (Fault::NoSuchKey, 404, "NoSuchKey", true),
            (Fault::NoSuchUpload, 404, "NoSuchUpload", true),
            (Fault::NoSuchSession, 404, "NoSuchSession", true),
            (Fault::Timeout("x".into()), 408, "RequestTimeout", false),
            (Fault::Conflict("x".into()), 409, "Conflict", true),
            (Fault::RANGE_OUTSIDE, 416, "InvalidRange", true),
            (Fault::RDMA_FAILED, 500, "InternalError", false),
            (Fault::NO_RDMA, 501, "NotImplemented", true),
            (Fault::BUSY, 503, "SlowDown", true),
            (
                Fault::Unavailable("down".into()),
                503,
                "ServiceUnavailable",
                true,
            ),
            (Fault::StorageFull, 507, "StorageFull", false),
        ];
        for (fault, status, code, keeps) in cases {
            assert_eq!(fault.status(), status, "{fault:?}");
            assert_eq!(fault.code().as_str(), code, "{fault:?}");
            assert_eq!(fault.starts_nothing(), keeps, "{fault:?}");
            let e = S3Error::from(fault.clone());
            assert_eq!(e.status_code().map(|s| s.as_u16()), Some(status));
            assert_eq!(e.message(), Some(&*fault.message()));
            let retry_after = e.headers().and_then(|h| h.get(http::header::RETRY_AFTER));
            assert_eq!(
                retry_after.is_some(),
                status == 503,
                "Retry-After only on 503"
            );
        }
    }

    /// A storage failure maps to the same fault on every route; a missing bucket is never a
    /// missing key.
    #[test]
    fn storage_errors_map_once() {
        assert_eq!(Fault::from(StorageError::NoSuchBucket), Fault::NoSuchBucket);
        assert_eq!(Fault::from(StorageError::NoSuchKey), Fault::NoSuchKey);
        let down = Fault::from(StorageError::Unavailable("it answered 502".into()));
        assert_eq!(down.status(), 503);
        assert!(down.message().contains("it answered 502"), "{down:?}");
        // After the RDMA READs completed, an unavailable store is a failed transfer.
        assert_eq!(down.after_transfer().status(), 500);
        assert_eq!(Fault::BadDigest(None).after_transfer().status(), 400);
        assert_eq!(Fault::StorageFull.after_transfer().status(), 507);
    }

    #[test]
    fn rejections_carry_status_and_reply() {
        let stats = Stats::default();
        for fault in [
            Fault::BAD_TOKEN,
            Fault::Forbidden("x".into()),
            Fault::NoSuchKey,
            Fault::NoSuchUpload,
            Fault::RANGE_OUTSIDE,
            Fault::RDMA_FAILED,
            Fault::NO_RDMA,
            Fault::BUSY,
            Fault::StorageFull,
        ] {
            let n = fault.status();
            let e = rejected(fault, &stats);
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
        let e = rejected(Fault::BadDigest(Some(ChecksumAlgo::Crc32)), &stats);
        assert_eq!(*e.code(), S3ErrorCode::BadDigest);
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(400));
        assert!(e.message().is_some_and(|m| m.contains("CRC32")));
        let e = rejected(Fault::BadDigest(None), &stats);
        assert!(e.message().is_some_and(|m| m.contains("Content-MD5")));
        let e = rejected(Fault::InvalidDigest, &stats);
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
