//! The gateway's blocking S3 client to the store: one endpoint, requests signed (SigV4) as the
//! identity the gateway acts for, or unsigned when serving anonymously; streaming bodies both
//! ways. Signing, key encoding, the HTTP stack and the shared operations are the project's S3
//! client (`hipobj-s3client`, the one the command line uses); an answer's S3 error is read and
//! classified there (`hipobj_s3client::ops::error`) and mapped to the seam's error here.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hipobj::engine::{Classify, ErrorClass};
use hipobj_s3client::http::{build, Answer, Body, Outgoing};
use hipobj_s3client::ops::error::ErrorAnswer;
use hipobj_s3client::ops::xml::XmlError;
use hipobj_s3client::ops::OpRequest;
pub use hipobj_s3client::path::{object_path, query_value};
use hipobj_s3client::reqwest;
use hipobj_s3client::reqwest::blocking::{Client, Response};
use hipobj_s3client::sign::Signer;
use tracing::debug;

use super::super::StorageError;
use super::endpoint::Endpoint;
use crate::tls::error_chain;

/// How long to wait for the store to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the store's answer, and for each read of its body (a streamed PUT body is
/// cut off sooner by the RDMA data path's own deadlines when the client stalls).
const IO_TIMEOUT: Duration = Duration::from_secs(120);

/// The keys one request to the store is signed with: those of the identity the gateway acts
/// for (the same identity, with the same secret, as at the store: docs/gateway.md).
#[derive(Clone)]
pub struct StoreKeys {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for StoreKeys {
    // Never print the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreKeys")
            .field("access_key", &self.access_key)
            .finish()
    }
}

pub struct StoreClient {
    endpoint: Endpoint,
    region: String,
    http: Client,
}

/// How the requests of one [`StoreSession`] reach the store.
#[derive(Clone, Debug)]
pub enum Signing {
    /// Signed (SigV4) with the keys of the identity the gateway acts for.
    As(StoreKeys),
    /// Unsigned: the gateway serves anonymously, or acts for no identity yet.
    Unsigned,
    /// Refused before any byte leaves the gateway: the identity it would act for (named here,
    /// its access key) is not in its credentials table, so it holds no keys to sign with.
    UnknownIdentity(String),
}

/// The store as one identity reaches it: the shared client and how its requests are signed.
#[derive(Clone)]
pub struct StoreSession {
    pub client: Arc<StoreClient>,
    pub signing: Signing,
}

impl StoreSession {
    /// The signer of this session's requests (`None`: unsigned); a session for an identity the
    /// gateway does not know sends nothing (403 `AccessDenied`).
    fn signer(&self) -> Result<Option<Signer<'_>>, StorageError> {
        match &self.signing {
            Signing::As(keys) => Ok(Some(Signer {
                access_key: &keys.access_key,
                secret_key: &keys.secret_key,
                session_token: None,
                region: &self.client.region,
            })),
            Signing::Unsigned => Ok(None),
            Signing::UnknownIdentity(identity) => {
                Err(StorageError::UnknownIdentity(identity.clone()))
            }
        }
    }

    /// One request: `target` is the encoded path with an optional query (`/b/k?uploads`); a
    /// non-2xx answer becomes the `StorageError` its S3 error code names. The body of a 2xx
    /// answer is left to the caller to stream. Refused before anything is sent when the session
    /// acts for an identity the gateway does not know.
    pub fn send(
        &self,
        method: &str,
        target: &str,
        headers: &[(String, String)],
        body: Body,
    ) -> Result<Response, StorageError> {
        let resp = self.start(method, target, headers, body)?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(status_error(method, resp))
        }
    }

    /// One request of the shared operations (`hipobj_s3client::ops`), its answer read whole
    /// whatever its status: only a store that cannot be reached, or a request that cannot be
    /// signed (an identity the gateway does not know: refused unsent), is an error here.
    pub fn exchange(&self, request: &OpRequest) -> Result<Answer, StorageError> {
        let body = match request.body.is_empty() {
            true => Body::Empty,
            false => Body::Bytes {
                data: request.body.clone(),
                hashed: true,
            },
        };
        let resp = self.start(request.method, &request.target, &request.headers, body)?;
        Answer::read(resp).map_err(|e| {
            StorageError::Io(io::Error::other(format!(
                "reading the store's answer: {}",
                error_chain(&e)
            )))
        })
    }

    /// [`StoreSession::exchange`] with a non-2xx answer as the seam's error.
    pub fn call(&self, request: &OpRequest) -> Result<Answer, StorageError> {
        let answer = self.exchange(request)?;
        match ErrorAnswer::of_failure(&answer) {
            Some(error) => Err(storage_error_of(&error)),
            None => Ok(answer),
        }
    }

    /// One attempt at `request`, its answer judged by the operation (`hipobj_s3client::ops`):
    /// the error, classified for a retry, when it failed.
    pub fn attempt<T>(
        &self,
        request: &OpRequest,
        judge: impl FnOnce(&Answer) -> Result<T, ErrorAnswer>,
    ) -> Result<T, StoreFailure> {
        let answer = self.exchange(request).map_err(StoreFailure::Unanswered)?;
        judge(&answer).map_err(StoreFailure::Answered)
    }

    /// The request signed and sent: its answer, whatever the status. Nothing is sent for an
    /// identity the gateway does not know ([`StoreSession::signer`]).
    fn start(
        &self,
        method: &str,
        target: &str,
        headers: &[(String, String)],
        body: Body,
    ) -> Result<Response, StorageError> {
        let signer = self.signer()?;
        let url = format!("{}{}", self.client.endpoint.base_url(), target);
        let authority = self.client.endpoint.authority().to_string();
        let mut all: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        all.push(("host", &authority));
        let out = Outgoing {
            method,
            url: &url,
            headers: &all,
            body,
        };
        let builder = build(&self.client.http, signer.as_ref(), out).map_err(|e| {
            StorageError::Io(io::Error::other(format!("cannot sign for the store: {e}")))
        })?;
        builder.send().map_err(|e| unreachable_store(&url, &e))
    }
}

/// A request to the store that failed: the error its answer stands for, classified (the SDKs'
/// standard mode) for a retry, or the seam's error when there was no answer to classify. The
/// latter is not retried here: the store was not reached, the client is answered 503 and
/// retries the whole request itself.
#[derive(Debug)]
pub enum StoreFailure {
    Answered(ErrorAnswer),
    Unanswered(StorageError),
}

impl Classify for StoreFailure {
    fn class(&self) -> ErrorClass {
        match self {
            StoreFailure::Answered(error) => error.class,
            StoreFailure::Unanswered(_) => ErrorClass::Fatal,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            StoreFailure::Answered(error) => error.retry_after(),
            StoreFailure::Unanswered(_) => None,
        }
    }
}

impl fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreFailure::Answered(error) => write!(f, "the store answered {error}"),
            StoreFailure::Unanswered(error) => error.fmt(f),
        }
    }
}

impl From<StoreFailure> for StorageError {
    fn from(failure: StoreFailure) -> StorageError {
        match failure {
            StoreFailure::Answered(error) => storage_error_of(&error),
            StoreFailure::Unanswered(error) => error,
        }
    }
}

/// An S3 answer that is not the XML it should be.
impl From<XmlError> for StorageError {
    fn from(e: XmlError) -> StorageError {
        StorageError::Io(io::Error::other(format!("backend store sent {e}")))
    }
}

/// The store could not be reached (refused, timed out before answering, or its TLS certificate
/// refused): unavailable (503), with the whole chain of causes, so that a refused certificate
/// says so.
fn unreachable_store(url: &str, e: &reqwest::Error) -> StorageError {
    let why = error_chain(e);
    debug!(error = %why, %url, "store unreachable");
    StorageError::Unavailable(format!("unreachable: {why}"))
}

impl StoreClient {
    pub fn new(endpoint: Endpoint, region: String) -> io::Result<StoreClient> {
        let mut builder = Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(IO_TIMEOUT)
            .tcp_nodelay(true);
        if let Some(tls) = endpoint.tls_config().map_err(io::Error::other)? {
            builder = builder.use_preconfigured_tls((*tls).clone());
        }
        let http = builder
            .build()
            .map_err(|e| io::Error::other(format!("cannot build the store's HTTP client: {e}")))?;
        Ok(StoreClient {
            endpoint,
            region,
            http,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// A non-2xx answer of the store as the seam's error (a HEAD's answer has no body to read; a
/// body that cannot be read leaves the status to decide).
fn status_error(method: &str, resp: Response) -> StorageError {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = match method {
        "HEAD" => Vec::new(),
        _ => resp.bytes().map(|b| b.to_vec()).unwrap_or_default(),
    };
    let answer = Answer {
        status,
        headers,
        body,
    };
    match ErrorAnswer::of_failure(&answer) {
        Some(error) => storage_error_of(&error),
        None => StorageError::Io(io::Error::other(format!(
            "backend store answered {status} as a failure"
        ))),
    }
}

/// The seam's error for the store's classified error: by its S3 code, else by its status, else
/// by its retry class (an error the SDKs retry is the store unable to serve now: 503 to the
/// client, which retries).
fn storage_error_of(error: &ErrorAnswer) -> StorageError {
    let status = error.reply.status;
    let code = error.code().unwrap_or("");
    match (status, code) {
        (_, "NoSuchBucket") => StorageError::NoSuchBucket,
        (_, "NoSuchKey") => StorageError::NoSuchKey,
        (_, "NoSuchUpload") => StorageError::NoSuchUpload,
        (_, "BucketAlreadyExists" | "BucketAlreadyOwnedByYou") => StorageError::BucketAlreadyExists,
        (_, "BucketNotEmpty") => StorageError::BucketNotEmpty,
        (_, "InvalidBucketName") => StorageError::InvalidBucketName,
        (_, "KeyTooLongError") => StorageError::InvalidKey,
        (_, "InvalidPart") => StorageError::InvalidPart,
        (_, "InvalidPartOrder") => StorageError::InvalidPartOrder,
        (_, "EntityTooSmall") => StorageError::EntityTooSmall,
        (_, "BadDigest") => StorageError::BadDigest,
        (_, "InvalidDigest") => StorageError::InvalidDigest,
        (416, _) | (_, "InvalidRange") => StorageError::InvalidRange,
        // The store refused the identity the gateway acts for (its own access rules).
        (403, _) => StorageError::AccessDenied,
        // HEAD answers carry no body: 404 on a HEAD object means the key is missing.
        (404, "") => StorageError::NoSuchKey,
        // The store is there but cannot serve (revision 5, rule 2: 503, never 500).
        (500..=599, _) => StorageError::Unavailable(format!("it answered {status} {code}")),
        _ if error.class.retryable() => {
            StorageError::Unavailable(format!("it answered {status} {code}"))
        }
        _ => StorageError::Io(io::Error::other(format!(
            "backend store answered {status} {code}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipobj_s3client::reqwest::header::HeaderMap;

    /// The store's error in an answer of `status` with `body` (an error document also in a 200).
    fn error_answer(status: u16, body: &str) -> ErrorAnswer {
        let answer = Answer {
            status,
            headers: HeaderMap::new(),
            body: body.as_bytes().to_vec(),
        };
        ErrorAnswer::of_late_failure(&answer).expect("an error answer")
    }

    fn seam_error(status: u16, body: &str) -> StorageError {
        storage_error_of(&error_answer(status, body))
    }

    fn document(code: &str) -> String {
        format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>")
    }

    #[test]
    fn error_codes_map_to_the_seams_errors() {
        assert!(matches!(
            seam_error(404, &document("NoSuchBucket")),
            StorageError::NoSuchBucket
        ));
        // No S3 error document: the status alone decides.
        assert!(matches!(
            seam_error(404, "<html/>"),
            StorageError::NoSuchKey
        ));
        assert!(matches!(seam_error(405, "<html/>"), StorageError::Io(_)));
        assert!(matches!(seam_error(404, ""), StorageError::NoSuchKey));
        assert!(matches!(
            seam_error(403, &document("SignatureDoesNotMatch")),
            StorageError::AccessDenied
        ));
        assert!(matches!(
            seam_error(503, &document("SlowDown")),
            StorageError::Unavailable(why) if why == "it answered 503 SlowDown"
        ));
        assert!(matches!(seam_error(500, ""), StorageError::Unavailable(_)));
        assert!(matches!(seam_error(405, ""), StorageError::Io(_)));
        // A store throttling with 429 is unable to serve now, as with 503.
        assert!(matches!(seam_error(429, ""), StorageError::Unavailable(_)));
    }

    #[test]
    fn an_error_inside_a_200_maps_by_its_code_and_class() {
        assert!(matches!(
            seam_error(200, &document("InvalidPart")),
            StorageError::InvalidPart
        ));
        assert!(matches!(
            seam_error(200, &document("SlowDown")),
            StorageError::Unavailable(why) if why == "it answered 200 SlowDown"
        ));
        assert!(matches!(
            seam_error(200, &document("InternalError")),
            StorageError::Unavailable(_)
        ));
        assert!(matches!(
            seam_error(200, &document("SomethingElse")),
            StorageError::Io(_)
        ));
    }

    #[test]
    fn only_an_answered_error_the_sdks_retry_is_retried() {
        let answered = |status, body: &str| StoreFailure::Answered(error_answer(status, body));
        assert!(answered(200, &document("SlowDown")).class().retryable());
        assert!(!answered(200, &document("InvalidPart")).class().retryable());
        let unreached = StoreFailure::Unanswered(StorageError::Unavailable("refused".into()));
        assert!(!unreached.class().retryable());
        assert!(matches!(
            StorageError::from(unreached),
            StorageError::Unavailable(_)
        ));
    }
}
