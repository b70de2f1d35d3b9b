//! Request headers to stored metadata and back: the standard object headers, user metadata,
//! checksums, and the refusal of server-side encryption (which this server does not do: an object
//! must never be stored in plaintext when the client asked for encryption).

use s3s::dto::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, Metadata, ServerSideEncryption, Timestamp,
    TimestampFormat,
};
use s3s::{s3_error, S3Result};

use crate::backend::checksum::empty_digest;
use crate::backend::{ChecksumAlgo, Checksums, ObjectInfo, ObjectMeta, WriteOptions};

/// The standard headers and `x-amz-meta-*` of a PUT, CreateMultipartUpload or REPLACE copy.
pub struct MetaFields {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    pub expires: Option<Timestamp>,
    pub metadata: Option<Metadata>,
}

impl MetaFields {
    pub fn into_meta(self) -> ObjectMeta {
        ObjectMeta {
            content_type: self.content_type,
            content_encoding: self
                .content_encoding
                .and_then(|e| stored_content_encoding(&e)),
            content_disposition: self.content_disposition,
            content_language: self.content_language,
            cache_control: self.cache_control,
            expires: self.expires.and_then(|t| format_http_date(&t)),
            user: self
                .metadata
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
            tags: Vec::new(),
        }
    }
}

fn format_http_date(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// The stored `Expires` as a timestamp again.
pub fn expires_of(meta: &ObjectMeta) -> Option<Timestamp> {
    let text = meta.expires.as_deref()?;
    Timestamp::parse(TimestampFormat::HttpDate, text).ok()
}

/// User metadata for a response (`None` when there is none).
pub fn metadata_of(meta: &ObjectMeta) -> Option<Metadata> {
    if meta.user.is_empty() {
        return None;
    }
    Some(
        meta.user
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// The SSE fields of a request.
pub struct SseFields<'a> {
    pub sse: Option<&'a ServerSideEncryption>,
    pub customer_algorithm: Option<&'a String>,
    pub customer_key: Option<&'a String>,
    pub kms_key_id: Option<&'a String>,
}

/// Server-side encryption is not implemented: refuse any request that asks for it (SSE-C,
/// SSE-KMS, SSE-S3) instead of storing or serving plaintext as if it were encrypted.
pub fn refuse_sse(f: SseFields<'_>) -> S3Result<()> {
    if f.sse.is_some()
        || f.customer_algorithm.is_some()
        || f.customer_key.is_some()
        || f.kms_key_id.is_some()
    {
        return Err(s3_error!(
            NotImplemented,
            "server-side encryption (SSE-C, SSE-KMS, SSE-S3) is not supported by this server"
        ));
    }
    Ok(())
}

/// The Content-Encoding an object keeps: the request's, without `aws-chunked`, which describes
/// how the request's body was framed (SigV4 streaming, trailing checksums), not the object. S3
/// drops it the same way; `None` when nothing else is left.
pub fn stored_content_encoding(sent: &str) -> Option<String> {
    let kept: Vec<&str> = sent
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

/// The checksum values a request carries.
pub fn expected_checksums(
    crc32: Option<String>,
    crc32c: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
    crc64nvme: Option<String>,
) -> Checksums {
    Checksums {
        crc32,
        crc32c,
        sha1,
        sha256,
        crc64nvme,
        composite: false,
    }
}

/// Base64 MD5 of zero bytes: the `Content-MD5` of an empty body.
const EMPTY_MD5: &str = "1B2M2Y8AsgTpgAmY7PhCfg==";

/// The digests of a token PUT or UploadPart of `token_len` bytes (docs/protocol.md rule 4.9): they
/// describe the bytes RDMA moves and are checked against them, except a value equal to its
/// algorithm's digest of zero bytes on a token of non-zero length. That is the SDK's digest of
/// the empty HTTP body: it is not compared, and that algorithm's checksum of the moved bytes is
/// computed and stored instead (as for `x-amz-sdk-checksum-algorithm`).
pub fn token_digests(mut options: WriteOptions, token_len: u64) -> WriteOptions {
    if token_len == 0 {
        return options;
    }
    if options.content_md5.as_deref() == Some(EMPTY_MD5) {
        options.content_md5 = None;
    }
    let empty: Vec<ChecksumAlgo> = options
        .expected
        .algos()
        .filter(|a| options.expected.get(*a).cloned() == empty_digest(*a))
        .collect();
    for algo in empty {
        options.expected.set(algo, None);
        match options.compute {
            None => options.compute = Some(algo),
            Some(c) if c == algo => {}
            // One computed algorithm per write: the one the request or upload named wins.
            Some(c) => tracing::debug!(
                sent = algo.as_str(),
                computed = c.as_str(),
                "an empty-body checksum beside another algorithm: only the latter is stored"
            ),
        }
    }
    options
}

/// `x-amz-checksum-type` for stored checksums (none without checksums).
pub fn checksum_type(c: &Checksums) -> Option<ChecksumType> {
    if c.is_empty() {
        return None;
    }
    Some(ChecksumType::from_static(if c.composite {
        ChecksumType::COMPOSITE
    } else {
        ChecksumType::FULL_OBJECT
    }))
}

/// `x-amz-checksum-algorithm` / `x-amz-sdk-checksum-algorithm` as ours.
pub fn algorithm(a: Option<&ChecksumAlgorithm>) -> S3Result<Option<ChecksumAlgo>> {
    match a {
        None => Ok(None),
        Some(a) => ChecksumAlgo::parse(a.as_str())
            .map(Some)
            .ok_or_else(|| s3_error!(InvalidArgument, "unknown checksum algorithm")),
    }
}

pub fn algorithm_dto(a: ChecksumAlgo) -> ChecksumAlgorithm {
    ChecksumAlgorithm::from(a.as_str().to_string())
}

/// Whether GET/HEAD asked for checksums (`x-amz-checksum-mode: ENABLED`).
pub fn wants_checksums(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case("ENABLED"))
}

/// The checksums to report for these bytes: only for the whole object.
pub fn reported_checksums(info: &ObjectInfo, whole: bool, wanted: bool) -> Checksums {
    if whole && wanted {
        info.checksums.clone()
    } else {
        Checksums::default()
    }
}

/// `<md5 hex>` or `<md5 hex>-<parts>` as an S3 ETag.
pub fn etag(value: &str) -> s3s::dto::ETag {
    s3s::dto::ETag::Strong(value.to_string())
}

/// Percent-encode a key for `encoding-type=url` (everything but unreserved characters and `/`).
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_is_refused() {
        let key = "k".to_string();
        let refused = refuse_sse(SseFields {
            sse: None,
            customer_algorithm: Some(&key),
            customer_key: None,
            kms_key_id: None,
        });
        assert!(refused.is_err());
        assert!(refuse_sse(SseFields {
            sse: None,
            customer_algorithm: None,
            customer_key: None,
            kms_key_id: None,
        })
        .is_ok());
    }

    #[test]
    fn url_encoding_keeps_slashes() {
        assert_eq!(url_encode("a b/c+d"), "a%20b/c%2Bd");
    }

    #[test]
    fn expires_round_trips() {
        let t = Timestamp::parse(TimestampFormat::HttpDate, "Wed, 21 Oct 2015 07:28:00 GMT")
            .expect("date");
        let meta = MetaFields {
            content_type: None,
            content_encoding: None,
            content_disposition: None,
            content_language: None,
            cache_control: None,
            expires: Some(t.clone()),
            metadata: None,
        }
        .into_meta();
        assert_eq!(
            meta.expires.as_deref(),
            Some("Wed, 21 Oct 2015 07:28:00 GMT")
        );
        assert_eq!(expires_of(&meta), Some(t));
    }
}

#[cfg(test)]
mod content_encoding_tests {
    use super::*;

    /// NIXL's OBJ plugin (aws-sdk-cpp) uploads with `Content-Encoding: aws-chunked`: the object
    /// keeps no encoding, or only the ones that describe it.
    #[test]
    fn aws_chunked_is_the_requests_framing_and_is_not_stored() {
        assert_eq!(stored_content_encoding("aws-chunked"), None);
        assert_eq!(stored_content_encoding("AWS-Chunked"), None);
        assert_eq!(
            stored_content_encoding("aws-chunked,gzip").as_deref(),
            Some("gzip")
        );
        assert_eq!(
            stored_content_encoding("gzip, aws-chunked").as_deref(),
            Some("gzip")
        );
        assert_eq!(
            stored_content_encoding("gzip,br").as_deref(),
            Some("gzip,br")
        );
        assert_eq!(stored_content_encoding(" , "), None);
        let meta = MetaFields {
            content_type: None,
            content_encoding: Some("aws-chunked".into()),
            content_disposition: None,
            content_language: None,
            cache_control: None,
            expires: None,
            metadata: None,
        }
        .into_meta();
        assert_eq!(
            meta.content_encoding, None,
            "nothing stored for a PUT sent aws-chunked"
        );
    }
}

#[cfg(test)]
mod token_digest_tests {
    use super::*;
    use md5::{Digest, Md5};

    fn with(md5: Option<&str>, crc32: Option<&str>) -> WriteOptions {
        WriteOptions {
            content_md5: md5.map(str::to_owned),
            expected: expected_checksums(crc32.map(str::to_owned), None, None, None, None),
            ..Default::default()
        }
    }

    #[test]
    fn empty_digests_are_the_known_values() {
        let md5 = base64_simd::STANDARD.encode_to_string(Md5::digest(b""));
        assert_eq!(md5, EMPTY_MD5);
        assert_eq!(
            empty_digest(ChecksumAlgo::Crc32).as_deref(),
            Some("AAAAAA==")
        );
        assert_eq!(
            empty_digest(ChecksumAlgo::Sha256).as_deref(),
            Some("47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
        );
        assert_eq!(
            empty_digest(ChecksumAlgo::Sha1).as_deref(),
            Some("2jmj7l5rSw0yVb/vlWAYkK/YBwk=")
        );
    }

    #[test]
    fn the_sdk_empty_body_digest_becomes_a_computed_checksum() {
        let o = token_digests(with(Some(EMPTY_MD5), Some("AAAAAA==")), 4096);
        assert_eq!(o.content_md5, None);
        assert!(o.expected.is_empty());
        assert_eq!(o.compute, Some(ChecksumAlgo::Crc32));
    }

    #[test]
    fn real_digests_stay_to_be_compared() {
        let o = token_digests(with(Some("XrY7u+Ae7tCTyyK7j1rNww=="), Some("DUoRhQ==")), 11);
        assert_eq!(o.content_md5.as_deref(), Some("XrY7u+Ae7tCTyyK7j1rNww=="));
        assert_eq!(o.expected.crc32.as_deref(), Some("DUoRhQ=="));
        assert_eq!(o.compute, None);
    }

    #[test]
    fn a_zero_length_token_compares_the_empty_digest() {
        let o = token_digests(with(Some(EMPTY_MD5), Some("AAAAAA==")), 0);
        assert_eq!(o.content_md5.as_deref(), Some(EMPTY_MD5));
        assert_eq!(o.expected.crc32.as_deref(), Some("AAAAAA=="));
    }

    #[test]
    fn the_named_algorithm_wins_over_an_empty_digest_of_another() {
        let mut opts = with(None, Some("AAAAAA=="));
        opts.compute = Some(ChecksumAlgo::Sha256);
        let o = token_digests(opts, 10);
        assert!(o.expected.is_empty());
        assert_eq!(o.compute, Some(ChecksumAlgo::Sha256));
    }
}
