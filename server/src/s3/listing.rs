//! ListObjects v1 and v2 and ListObjectVersions (an unversioned store: every object is its own
//! only version, id `null`), over `backend::listing::paginate`.

use s3s::dto::*;
use s3s::{s3_error, S3Response, S3Result};

use super::headers;
use super::objects::timestamp;
use super::HipobjS3;
use crate::backend::listing::{paginate, ListPage};
use crate::backend::ObjectInfo;

/// `max-keys` (default and ceiling 1000); negative is an error.
pub(super) fn max_keys(requested: Option<i32>) -> S3Result<usize> {
    match requested {
        None => Ok(1000),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

/// RGW's `allow-unordered=true` extension (listings here are always ordered, which satisfies
/// it) cannot be combined with a delimiter: RGW answers 400 InvalidArgument, and so do we.
pub(super) fn check_unordered(uri: &http::Uri, delimiter: Option<&str>) -> S3Result<()> {
    let unordered = uri.query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes())
            .any(|(n, v)| n == "allow-unordered" && v.eq_ignore_ascii_case("true"))
    });
    if unordered && delimiter.is_some_and(|d| !d.is_empty()) {
        return Err(s3_error!(
            InvalidArgument,
            "allow-unordered cannot be combined with a delimiter"
        ));
    }
    Ok(())
}

/// An empty marker means none.
pub(super) fn page_marker(marker: Option<&str>) -> Option<&str> {
    marker.filter(|m| !m.is_empty())
}

/// The key encoding a listing asked for: URL-encoded with `encoding-type=url`, else as stored.
pub(super) fn key_encoder(e: Option<&EncodingType>) -> impl Fn(String) -> String {
    let url = e.is_some_and(|e| e.as_str() == EncodingType::URL);
    move |s| if url { headers::url_encode(&s) } else { s }
}

/// Objects and common prefixes of a page, keys encoded by `enc`.
fn entries(
    page: ListPage<ObjectInfo>,
    enc: &impl Fn(String) -> String,
    owner: &Owner,
) -> (Vec<Object>, Vec<CommonPrefix>) {
    let objects = page
        .items
        .iter()
        .map(|o| Object {
            key: Some(enc(o.key.clone())),
            size: Some(o.size as i64),
            e_tag: Some(headers::etag(&o.etag)),
            last_modified: Some(timestamp(o)),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            owner: Some(owner.clone()),
            ..Default::default()
        })
        .collect();
    let prefixes = page
        .common_prefixes
        .iter()
        .map(|p| CommonPrefix {
            prefix: Some(enc(p.clone())),
        })
        .collect();
    (objects, prefixes)
}

impl HipobjS3 {
    /// One page of a bucket's objects under `prefix`, grouped by `delimiter`, after `marker`.
    async fn object_page(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        marker: Option<&str>,
        max: usize,
    ) -> S3Result<ListPage<ObjectInfo>> {
        let (b, p) = (bucket.to_string(), prefix.to_string());
        let all = self.blocking(move |s| s.list_objects(&b, &p)).await?;
        Ok(paginate(
            all,
            |o| o.key.as_str(),
            prefix,
            delimiter,
            page_marker(marker),
            max,
        ))
    }

    pub(super) async fn list_v1(
        &self,
        input: ListObjectsInput,
        owner: Owner,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let max = max_keys(input.max_keys)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let page = self
            .object_page(
                &input.bucket,
                &prefix,
                input.delimiter.as_deref(),
                input.marker.as_deref(),
                max,
            )
            .await?;
        let enc = key_encoder(input.encoding_type.as_ref());
        // S3 returns NextMarker only with a delimiter (without one, the last key is the marker).
        let next_marker = page
            .next_after
            .clone()
            .filter(|_| page.is_truncated && input.delimiter.is_some())
            .map(&enc);
        let truncated = page.is_truncated;
        let (contents, common_prefixes) = entries(page, &enc, &owner);
        // v1 encodes Delimiter, Marker, NextMarker and the keys, not the top-level Prefix.
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(prefix),
            marker: Some(enc(input.marker.unwrap_or_default())),
            max_keys: Some(max as i32),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(&enc),
            is_truncated: Some(truncated),
            next_marker,
            encoding_type: input.encoding_type,
            contents: Some(contents),
            common_prefixes: Some(common_prefixes),
            ..Default::default()
        }))
    }

    pub(super) async fn list_v2(
        &self,
        input: ListObjectsV2Input,
        owner: Owner,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let max = max_keys(input.max_keys)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let after = match &input.continuation_token {
            Some(t) => {
                let raw = hex::decode(t).map_err(|_| {
                    s3_error!(
                        InvalidArgument,
                        "The continuation token provided is incorrect"
                    )
                })?;
                Some(String::from_utf8(raw).map_err(|_| {
                    s3_error!(
                        InvalidArgument,
                        "The continuation token provided is incorrect"
                    )
                })?)
            }
            None => input.start_after.clone(),
        };
        let page = self
            .object_page(
                &input.bucket,
                &prefix,
                input.delimiter.as_deref(),
                after.as_deref(),
                max,
            )
            .await?;
        let enc = key_encoder(input.encoding_type.as_ref());
        let key_count = (page.items.len() + page.common_prefixes.len()) as i32;
        let truncated = page.is_truncated;
        let next = page.next_after.clone().map(hex::encode);
        let (mut contents, common_prefixes) = entries(page, &enc, &owner);
        if input.fetch_owner != Some(true) {
            for o in &mut contents {
                o.owner = None;
            }
        }
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(enc(prefix)),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(&enc),
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            is_truncated: Some(truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: next,
            start_after: input.start_after.map(&enc),
            encoding_type: input.encoding_type,
            contents: Some(contents),
            common_prefixes: Some(common_prefixes),
            ..Default::default()
        }))
    }

    pub(super) async fn list_versions(
        &self,
        input: ListObjectVersionsInput,
        owner: Owner,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let max = max_keys(input.max_keys)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let page = self
            .object_page(
                &input.bucket,
                &prefix,
                input.delimiter.as_deref(),
                input.key_marker.as_deref(),
                max,
            )
            .await?;
        let enc = key_encoder(input.encoding_type.as_ref());
        let truncated = page.is_truncated;
        let next_key = page.next_after.clone().filter(|_| truncated);
        let versions = page
            .items
            .iter()
            .map(|o| ObjectVersion {
                key: Some(enc(o.key.clone())),
                version_id: Some("null".into()),
                is_latest: Some(true),
                size: Some(o.size as i64),
                e_tag: Some(headers::etag(&o.etag)),
                last_modified: Some(timestamp(o)),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                owner: Some(owner.clone()),
                ..Default::default()
            })
            .collect();
        let common_prefixes = page
            .common_prefixes
            .into_iter()
            .map(|p| CommonPrefix {
                prefix: Some(enc(p)),
            })
            .collect();
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(enc(prefix)),
            delimiter: input.delimiter,
            key_marker: input.key_marker,
            version_id_marker: input.version_id_marker,
            max_keys: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: next_key.clone(),
            next_version_id_marker: next_key.map(|_| "null".to_string()),
            encoding_type: input.encoding_type,
            versions: Some(versions),
            common_prefixes: Some(common_prefixes),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_keys_rules() {
        assert_eq!(max_keys(None).expect("default"), 1000);
        assert_eq!(max_keys(Some(5000)).expect("capped"), 1000);
        assert_eq!(max_keys(Some(0)).expect("zero"), 0);
        assert!(max_keys(Some(-1)).is_err());
    }

    #[test]
    fn unordered_listing_refuses_a_delimiter() {
        let unordered: http::Uri = "/b?allow-unordered=true".parse().expect("uri");
        assert!(check_unordered(&unordered, None).is_ok());
        assert!(check_unordered(&unordered, Some("")).is_ok());
        let err = check_unordered(&unordered, Some("/")).expect_err("refused");
        assert_eq!(*err.code(), s3s::S3ErrorCode::InvalidArgument);
        let ordered: http::Uri = "/b?delimiter=%2F".parse().expect("uri");
        assert!(check_unordered(&ordered, Some("/")).is_ok());
    }
}
