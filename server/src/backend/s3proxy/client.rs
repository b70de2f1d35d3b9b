//! The gateway's blocking S3 client to the store: one endpoint, requests signed (SigV4) as the
//! identity the gateway acts for, or unsigned when serving anonymously; streaming bodies both
//! ways. Signing, key encoding and the HTTP stack are the project's S3 client
//! (`hipobj-s3client`, the one the command line uses); a refused request's S3 error is read by
//! `hipobj::s3error`.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use hipobj::s3error::S3ErrorReply;
use hipobj_s3client::http::{build, Body, Outgoing};
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
    /// non-2xx answer becomes the `StorageError` its S3 error code names. Refused before anything
    /// is sent when the session acts for an identity the gateway does not know.
    pub fn send(
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
        let resp = builder.send().map_err(|e| unreachable_store(&url, &e))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            Ok(resp)
        } else {
            Err(status_error(method, status, resp))
        }
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

/// A non-2xx answer of the store as the seam's error (its S3 error read by `hipobj::s3error`).
fn status_error(method: &str, status: u16, resp: Response) -> StorageError {
    let headers = resp.headers().clone();
    let body = if method == "HEAD" {
        Vec::new()
    } else {
        resp.bytes().map(|b| b.to_vec()).unwrap_or_default()
    };
    answer_error(
        status,
        |n| headers.get(n).and_then(|v| v.to_str().ok()),
        &body,
    )
}

/// The seam's error for a refused answer: its status, headers (by lowercase name) and body.
fn answer_error<'a>(
    status: u16,
    get: impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
) -> StorageError {
    let code = S3ErrorReply::parse(status, get, body).and_then(|e| e.code);
    storage_error_of(status, code.as_deref().unwrap_or(""))
}

fn storage_error_of(status: u16, code: &str) -> StorageError {
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
        _ => StorageError::Io(io::Error::other(format!(
            "backend store answered {status} {code}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_map_to_the_seams_errors() {
        let body =
            b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>m</Message></Error>";
        assert!(matches!(
            answer_error(404, |_| None, body),
            StorageError::NoSuchBucket
        ));
        // No S3 error document: the status alone decides.
        assert!(matches!(
            answer_error(404, |_| None, b"<html/>"),
            StorageError::NoSuchKey
        ));
        assert!(matches!(
            answer_error(405, |_| None, b"<html/>"),
            StorageError::Io(_)
        ));
        assert!(matches!(
            answer_error(404, |_| None, b""),
            StorageError::NoSuchKey
        ));
        assert!(matches!(storage_error_of(404, ""), StorageError::NoSuchKey));
        assert!(matches!(
            storage_error_of(403, "SignatureDoesNotMatch"),
            StorageError::AccessDenied
        ));
        assert!(matches!(
            storage_error_of(503, "SlowDown"),
            StorageError::Unavailable(why) if why == "it answered 503 SlowDown"
        ));
        assert!(matches!(
            storage_error_of(500, ""),
            StorageError::Unavailable(_)
        ));
        assert!(matches!(storage_error_of(405, ""), StorageError::Io(_)));
    }
}
