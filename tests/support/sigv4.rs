//! SigV4 signing for the tests' own small HTTP clients, with the `aws-sigv4` crate: header form
//! (`Authorization`, `x-amz-date`, `x-amz-content-sha256`) or presigned query. Every header
//! handed in is signed; a test that wants a header left out of `SignedHeaders` adds it after
//! signing. Shared (`#[path]`) by the root crate's tests and the server's tests.
#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
    SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;

/// The identity every test server knows (see `TEST_CREDENTIALS`).
pub const TEST_ACCESS_KEY: &str = "hipobj-test";
pub const TEST_SECRET_KEY: &str = "hipobj-test-secret-0123456789";
/// A second identity, for tests of other identities' buckets and pairings.
pub const OTHER_ACCESS_KEY: &str = "hipobj-other";
pub const OTHER_SECRET_KEY: &str = "hipobj-other-secret-9876543210";

/// The credentials file the test servers are started with.
pub const TEST_CREDENTIALS: &str = "\
# identities of the hipObject tests
hipobj-test hipobj-test-secret-0123456789
hipobj-other hipobj-other-secret-9876543210
";

/// An access key and its secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signer {
    pub access_key: &'static str,
    pub secret_key: &'static str,
}

pub const TEST_SIGNER: Signer = Signer {
    access_key: TEST_ACCESS_KEY,
    secret_key: TEST_SECRET_KEY,
};

pub const OTHER_SIGNER: Signer = Signer {
    access_key: OTHER_ACCESS_KEY,
    secret_key: OTHER_SECRET_KEY,
};

/// Where the signature goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `Authorization` header.
    Header,
    /// Presigned URL (`X-Amz-Signature` in the query), payload unsigned.
    Query,
}

/// Bodies larger than this are sent as `UNSIGNED-PAYLOAD` (header form): hashing many MiB in a
/// debug build under the lane's emulated CPU takes longer than the tests' timeouts. The headers,
/// the token among them, are signed either way.
pub const SIGNED_BODY_MAX: usize = 1 << 20;

/// What to send: the request target (path and query) and the headers to add.
pub struct Signed {
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Signer {
    /// Sign `method host target` with `headers` (all of them signed) and `body`.
    pub fn sign(
        &self,
        placement: Placement,
        method: &str,
        host: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Signed {
        let identity =
            Credentials::new(self.access_key, self.secret_key, None, None, "hipobj-tests").into();
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let signable_body = match placement {
            Placement::Header => {
                settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
                if body.len() > SIGNED_BODY_MAX {
                    SignableBody::UnsignedPayload
                } else {
                    SignableBody::Bytes(body)
                }
            }
            Placement::Query => {
                settings.signature_location = SignatureLocation::QueryParams;
                settings.expires_in = Some(Duration::from_secs(600));
                SignableBody::UnsignedPayload
            }
        };
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region("us-east-1")
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .expect("signing parameters")
            .into();
        let url = format!("http://{host}{target}");
        let mut all = vec![("host", host)];
        all.extend_from_slice(headers);
        let signable = SignableRequest::new(method, url.as_str(), all.into_iter(), signable_body)
            .expect("signable request");
        let (instructions, _signature) = sign(signable, &params).expect("sign").into_parts();
        let mut req = http::Request::builder()
            .method(method)
            .uri(url.as_str())
            .body(())
            .expect("request");
        instructions.apply_to_request_http1x(&mut req);
        let target = req
            .uri()
            .path_and_query()
            .map(|pq| pq.as_str().to_string())
            .unwrap_or_else(|| target.to_string());
        let headers = req
            .headers()
            .iter()
            .filter(|(name, _)| *name != http::header::HOST)
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    v.to_str().expect("ascii header").to_string(),
                )
            })
            .collect();
        Signed { target, headers }
    }
}
