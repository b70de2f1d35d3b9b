//! The gateway's blocking S3 client to the store: one endpoint, requests signed (SigV4 with
//! `aws-sigv4`) as the identity the gateway acts for, or unsigned when serving anonymously;
//! streaming bodies both ways (`reqwest`'s blocking client, the one the command line uses).

use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::blocking::{Body, Client, Response};
use tracing::debug;

use super::super::StorageError;
use super::endpoint::Endpoint;
use crate::tls::error_chain;

/// Characters S3 leaves unescaped in a key segment (RFC 3986 unreserved).
const KEY_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

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

/// A request body.
pub enum Payload<'a> {
    Empty,
    Bytes(&'a [u8]),
    /// Streamed, exactly `len` bytes, payload unsigned (`UNSIGNED-PAYLOAD`).
    Stream {
        len: u64,
        reader: Box<dyn Read + Send + 'static>,
    },
}

/// One request to the store.
pub struct StoreRequest<'a> {
    pub method: &'a str,
    /// The encoded path with an optional query (`/b/k?uploads`).
    pub target: &'a str,
    pub headers: &'a [(String, String)],
    pub payload: Payload<'a>,
}

pub struct StoreClient {
    endpoint: Endpoint,
    region: String,
    http: Client,
}

/// The store as one identity reaches it: the shared client and that identity's keys (`None`:
/// unsigned requests, when the gateway serves anonymously).
#[derive(Clone)]
pub struct StoreSession {
    pub client: Arc<StoreClient>,
    pub keys: Option<StoreKeys>,
}

impl StoreSession {
    /// One request: `target` is the encoded path with an optional query (`/b/k?uploads`).
    pub fn send(
        &self,
        method: &str,
        target: &str,
        headers: &[(String, String)],
        payload: Payload<'_>,
    ) -> Result<Response, StorageError> {
        let req = StoreRequest {
            method,
            target,
            headers,
            payload,
        };
        self.client.send(self.keys.as_ref(), req)
    }
}

/// `/bucket` or `/bucket/key`, percent-encoded (slashes in the key kept).
pub fn object_path(bucket: &str, key: &str) -> String {
    let mut path = format!("/{}", utf8_percent_encode(bucket, KEY_SEGMENT));
    if !key.is_empty() {
        path.push('/');
        let segments: Vec<String> = key
            .split('/')
            .map(|s| utf8_percent_encode(s, KEY_SEGMENT).to_string())
            .collect();
        path.push_str(&segments.join("/"));
    }
    path
}

/// A query value, percent-encoded.
pub fn query_value(v: &str) -> String {
    utf8_percent_encode(v, KEY_SEGMENT).to_string()
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

    /// Send one request; a non-2xx answer becomes the `StorageError` its S3 error code names.
    pub fn send(
        &self,
        keys: Option<&StoreKeys>,
        req: StoreRequest<'_>,
    ) -> Result<Response, StorageError> {
        let StoreRequest {
            method,
            target,
            headers,
            payload,
        } = req;
        let url = format!("{}{}", self.endpoint.base_url(), target);
        let mut all: Vec<(String, String)> = headers.to_vec();
        all.push(("host".into(), self.endpoint.authority().to_string()));
        if let Payload::Stream { len, .. } = &payload {
            all.push(("content-length".into(), len.to_string()));
        }
        if let Some(keys) = keys {
            let body = match &payload {
                Payload::Empty => SignableBody::Bytes(&[]),
                Payload::Bytes(b) => SignableBody::Bytes(b),
                Payload::Stream { .. } => SignableBody::UnsignedPayload,
            };
            let signature = sign_headers(keys, &self.region, method, &url, &all, body)?;
            all.extend(signature);
        }
        let m = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|e| StorageError::Io(io::Error::other(format!("method {method}: {e}"))))?;
        let mut builder = self.http.request(m, &url);
        for (n, v) in &all {
            if n != "host" && n != "content-length" {
                builder = builder.header(n, v);
            }
        }
        builder = match payload {
            Payload::Empty => builder,
            Payload::Bytes(b) => builder.body(b.to_vec()),
            Payload::Stream { len, reader } => builder.body(Body::sized(reader, len)),
        };
        let resp = builder.send().map_err(|e| unreachable_store(&url, &e))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            Ok(resp)
        } else {
            Err(status_error(method, status, resp))
        }
    }
}

/// The SigV4 headers (`authorization`, `x-amz-date`, `x-amz-content-sha256`) for a request
/// with the headers `all`.
fn sign_headers(
    keys: &StoreKeys,
    region: &str,
    method: &str,
    url: &str,
    all: &[(String, String)],
    body: SignableBody<'_>,
) -> Result<Vec<(String, String)>, StorageError> {
    let identity: Identity = Credentials::new(
        &keys.access_key,
        &keys.secret_key,
        None,
        None,
        "hipobj-gateway",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| signing_error(&e))?
        .into();
    let signable = SignableRequest::new(
        method,
        url,
        all.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        body,
    )
    .map_err(|e| signing_error(&e))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| signing_error(&e))?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect())
}

fn signing_error(e: &dyn std::fmt::Display) -> StorageError {
    StorageError::Io(io::Error::other(format!("cannot sign for the store: {e}")))
}

/// The S3 error code of an error body (`<Error><Code>...</Code>`), if any.
fn error_code(body: &str) -> Option<&str> {
    let start = body.find("<Code>")? + "<Code>".len();
    let end = body[start..].find("</Code>")? + start;
    Some(&body[start..end])
}

/// A non-2xx answer of the store as the seam's error.
fn status_error(method: &str, status: u16, resp: Response) -> StorageError {
    let body = if method == "HEAD" {
        String::new()
    } else {
        resp.text().unwrap_or_default()
    };
    storage_error_of(status, error_code(&body).unwrap_or(""))
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
    fn paths_are_encoded_per_segment() {
        assert_eq!(object_path("b", ""), "/b");
        assert_eq!(object_path("b", "a/b c+d"), "/b/a/b%20c%2Bd");
        assert_eq!(object_path("b", "x~y_z.-"), "/b/x~y_z.-");
    }

    #[test]
    fn error_codes_are_read_from_the_body() {
        let body =
            "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>m</Message></Error>";
        assert_eq!(error_code(body), Some("NoSuchKey"));
        assert_eq!(error_code("<html/>"), None);
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
