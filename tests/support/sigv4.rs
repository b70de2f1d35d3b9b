//! The tests' identities, and SigV4 signing for the tests' own small HTTP clients through the
//! project's S3 client (`hipobj_s3client::sign`): header form (`Authorization`, `x-amz-date`,
//! `x-amz-content-sha256`) or presigned query. Every header handed in is signed; a test that
//! wants a header left out of `SignedHeaders` adds it after signing. Shared (`#[path]`) by the
//! root crate's tests and the server's tests.
#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use hipobj_s3client::sign::{self, Payload};

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

/// What to send: the request target (path and query) and the headers to add.
pub struct Signed {
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Signer {
    /// Sign `method host target` with `headers` (all of them signed) and `body` (hashed up to
    /// 1 MiB, `UNSIGNED-PAYLOAD` above: hashing many MiB in a debug build under the lane's
    /// emulated CPU takes longer than the tests' timeouts).
    pub fn sign(
        &self,
        placement: Placement,
        method: &str,
        host: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Signed {
        let url = format!("http://{host}{target}");
        let mut all = vec![("host", host)];
        all.extend_from_slice(headers);
        let req = sign::Request {
            method,
            url: &url,
            headers: &all,
            payload: Payload::of(body),
        };
        let signer = sign::Signer {
            access_key: self.access_key,
            secret_key: self.secret_key,
            session_token: None,
            region: "us-east-1",
        };
        let placement = match placement {
            Placement::Header => sign::Placement::Header,
            Placement::Query => sign::Placement::Query(Duration::from_secs(600)),
        };
        let signed = sign::sign(&signer, &req, placement, SystemTime::now()).expect("sign");
        Signed {
            target: signed.target().to_string(),
            headers: signed.headers,
        }
    }
}

/// The test identity as the library's own client takes it (`hipobj::batch::Config`).
pub fn test_credential_sources() -> hipobj::client::credentials::CredentialSources {
    hipobj::client::credentials::CredentialSources {
        access_key: Some(TEST_ACCESS_KEY.into()),
        secret_key: Some(TEST_SECRET_KEY.into()),
        region: Some("us-east-1".into()),
        ..Default::default()
    }
}
