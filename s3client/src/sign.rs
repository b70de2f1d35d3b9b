//! SigV4 for S3 with `aws-sigv4`: every header handed in is signed (a header to be left out of
//! `SignedHeaders` is added after signing), the path is signed as sent (S3: single encoding, no
//! normalisation), and the payload is either hashed or `UNSIGNED-PAYLOAD` (large and streamed
//! bodies: hashing them would read them twice).

use std::fmt;
use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{
    sign as sigv4_sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
    SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

/// The keys a request is signed with, and the region it is signed for.
#[derive(Clone, Copy)]
pub struct Signer<'a> {
    pub access_key: &'a str,
    pub secret_key: &'a str,
    /// `x-amz-security-token` (temporary credentials), signed.
    pub session_token: Option<&'a str>,
    pub region: &'a str,
}

impl fmt::Debug for Signer<'_> {
    // Never print the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("access_key", &self.access_key)
            .field("region", &self.region)
            .finish()
    }
}

/// What the signature covers of the body.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// The body's SHA-256 (`x-amz-content-sha256: <hex>`).
    Hashed(&'a [u8]),
    /// `UNSIGNED-PAYLOAD`: a large or streamed body.
    Unsigned,
}

/// Bodies larger than this are `UNSIGNED-PAYLOAD` in [`Payload::of`].
pub const HASHED_BODY_MAX: usize = 1 << 20;

impl<'a> Payload<'a> {
    /// Hashed up to [`HASHED_BODY_MAX`] bytes, unsigned above.
    pub fn of(body: &'a [u8]) -> Payload<'a> {
        if body.len() > HASHED_BODY_MAX {
            Payload::Unsigned
        } else {
            Payload::Hashed(body)
        }
    }

    pub fn is_unsigned(&self) -> bool {
        matches!(self, Payload::Unsigned)
    }
}

/// Where the signature goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `Authorization`, `x-amz-date` and `x-amz-content-sha256` headers.
    Header,
    /// A presigned URL (`X-Amz-Signature` in the query), valid this long; payload unsigned.
    Query(Duration),
}

/// One request to sign.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The absolute URL, path and query encoded as they will be sent.
    pub url: &'a str,
    /// Headers sent with the request, every one signed (`host` from the URL when not given).
    pub headers: &'a [(&'a str, &'a str)],
    pub payload: Payload<'a>,
}

/// The signature of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// The URL to send: the request's, plus the signature's query parameters when presigned.
    pub url: String,
    /// Headers to add (lowercase names; never `host`).
    pub headers: Vec<(String, String)>,
}

impl Signed {
    /// The request target to send (path and query of [`Signed::url`]).
    pub fn target(&self) -> &str {
        let rest = self
            .url
            .split_once("://")
            .map_or(self.url.as_str(), |(_, r)| r);
        match rest.find('/') {
            Some(i) => &rest[i..],
            None => "/",
        }
    }

    /// The value of the signature header `name` (lowercase), if it has one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be signed (a bad URL, method or header; never the keys' fault).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignError(pub String);

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SignError {}

/// Sign `req` as `signer` at `time` (the caller's clock: `SystemTime::now()` but in tests).
pub fn sign(
    signer: &Signer<'_>,
    req: &Request<'_>,
    placement: Placement,
    time: SystemTime,
) -> Result<Signed, SignError> {
    let fail =
        |e: &dyn fmt::Display| SignError(format!("cannot sign {} {}: {e}", req.method, req.url));
    let identity: Identity = aws_credential_types::Credentials::new(
        signer.access_key,
        signer.secret_key,
        signer.session_token.map(str::to_owned),
        None,
        "hipobj",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let body = match placement {
        Placement::Header => {
            settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
            match req.payload {
                Payload::Hashed(b) => SignableBody::Bytes(b),
                Payload::Unsigned => SignableBody::UnsignedPayload,
            }
        }
        Placement::Query(expires) => {
            settings.signature_location = SignatureLocation::QueryParams;
            settings.expires_in = Some(expires);
            SignableBody::UnsignedPayload
        }
    };
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(signer.region)
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| fail(&e))?
        .into();
    let signable = SignableRequest::new(req.method, req.url, req.headers.iter().copied(), body)
        .map_err(|e| fail(&e))?;
    let (instructions, _) = sigv4_sign(signable, &params)
        .map_err(|e| fail(&e))?
        .into_parts();
    let headers: Vec<(String, String)> = instructions
        .headers()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("host"))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .collect();
    let url = if instructions.params().is_empty() {
        req.url.to_owned()
    } else {
        let mut with_params = http::Request::builder()
            .method(req.method)
            .uri(req.url)
            .body(())
            .map_err(|e| fail(&e))?;
        instructions.apply_to_request_http1x(&mut with_params);
        with_params.uri().to_string()
    };
    Ok(Signed { url, headers })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example keys of AWS's SigV4 documentation for S3 ("Signature Calculations for the
    /// Authorization Header", examples for bucket `examplebucket`, 2013-05-24 00:00:00 UTC).
    const AWS_DOC_SIGNER: Signer<'static> = Signer {
        access_key: "AKIAIOSFODNN7EXAMPLE",
        secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        session_token: None,
        region: "us-east-1",
    };

    fn may_24_2013() -> SystemTime {
        // 2013-05-24T00:00:00Z
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600)
    }

    /// AWS's "GET Object" example: a ranged GET, empty payload hashed.
    #[test]
    fn the_aws_get_object_example_has_its_documented_signature() {
        let req = Request {
            method: "GET",
            url: "https://examplebucket.s3.amazonaws.com/test.txt",
            headers: &[
                ("host", "examplebucket.s3.amazonaws.com"),
                ("range", "bytes=0-9"),
            ],
            payload: Payload::Hashed(b""),
        };
        let s = sign(&AWS_DOC_SIGNER, &req, Placement::Header, may_24_2013()).expect("signed");
        assert_eq!(
            s.header("authorization"),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
                 SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
                 Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
            )
        );
        assert_eq!(s.header("x-amz-date"), Some("20130524T000000Z"));
        assert_eq!(
            s.header("x-amz-content-sha256"),
            Some("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        );
        assert_eq!(s.url, req.url);
        assert_eq!(s.target(), "/test.txt");
    }

    #[test]
    fn an_unsigned_payload_is_named_and_a_session_token_signed() {
        let signer = Signer {
            session_token: Some("tok"),
            ..AWS_DOC_SIGNER
        };
        let req = Request {
            method: "PUT",
            url: "http://127.0.0.1:9000/b/k",
            headers: &[("x-amz-rdma-token", "00ff")],
            payload: Payload::Unsigned,
        };
        let s = sign(&signer, &req, Placement::Header, may_24_2013()).expect("signed");
        assert_eq!(s.header("x-amz-content-sha256"), Some("UNSIGNED-PAYLOAD"));
        assert_eq!(s.header("x-amz-security-token"), Some("tok"));
        let auth = s.header("authorization").expect("authorization");
        assert!(
            auth.contains(
                "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-rdma-token;x-amz-security-token,"
            ),
            "{auth}"
        );
        assert!(Payload::of(&[0; HASHED_BODY_MAX + 1]).is_unsigned());
        assert!(!Payload::of(&[0; 16]).is_unsigned());
    }

    #[test]
    fn a_presigned_url_carries_the_signature_in_its_query() {
        let req = Request {
            method: "GET",
            url: "http://127.0.0.1:9000/b/a%20b?x-id=GetObject",
            headers: &[],
            payload: Payload::Unsigned,
        };
        let s = sign(
            &AWS_DOC_SIGNER,
            &req,
            Placement::Query(Duration::from_secs(600)),
            may_24_2013(),
        )
        .expect("signed");
        assert!(s.headers.is_empty(), "{:?}", s.headers);
        let target = s.target();
        assert!(target.starts_with("/b/a%20b?x-id=GetObject&"), "{target}");
        for part in [
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Date=20130524T000000Z",
            "X-Amz-Expires=600",
            "X-Amz-Signature=",
        ] {
            assert!(target.contains(part), "{part} in {target}");
        }
    }

    #[test]
    fn a_bad_url_is_an_error() {
        let req = Request {
            method: "GET",
            url: "not a url",
            headers: &[],
            payload: Payload::Unsigned,
        };
        let e = sign(&AWS_DOC_SIGNER, &req, Placement::Header, may_24_2013()).expect_err("bad");
        assert!(e.0.starts_with("cannot sign GET not a url: "), "{e}");
    }
}
