//! Object tags: PutObjectTagging, GetObjectTagging, DeleteObjectTagging, the `x-amz-tagging`
//! header of PUT, CreateMultipartUpload and CopyObject (`x-amz-tagging-directive`), and
//! `x-amz-tagging-count` on GET/HEAD. Tags are stored with the object's metadata.

use s3s::dto::*;
use s3s::{s3_error, S3Response, S3Result};

use super::HipobjS3;

/// S3's limits on an object's tag set.
const MAX_TAGS: usize = 10;
const MAX_KEY_CHARS: usize = 128;
const MAX_VALUE_CHARS: usize = 256;

/// The response header that counts an object's tags.
pub const TAG_COUNT_HEADER: &str = "x-amz-tagging-count";

/// A tag set within S3's limits: at most 10 tags, keys of 1 to 128 characters, values of at
/// most 256, no key twice. Anything else is 400 InvalidTag. Sorted by key, the order S3
/// answers GetObjectTagging in.
pub fn checked(mut tags: Vec<(String, String)>) -> S3Result<Vec<(String, String)>> {
    if tags.len() > MAX_TAGS {
        return Err(s3_error!(
            InvalidTag,
            "Object tags cannot be greater than 10"
        ));
    }
    for (i, (k, v)) in tags.iter().enumerate() {
        if k.is_empty() || k.chars().count() > MAX_KEY_CHARS {
            return Err(s3_error!(
                InvalidTag,
                "The TagKey you have provided is invalid"
            ));
        }
        if v.chars().count() > MAX_VALUE_CHARS {
            return Err(s3_error!(
                InvalidTag,
                "The TagValue you have provided is invalid"
            ));
        }
        if tags[..i].iter().any(|(other, _)| other == k) {
            return Err(s3_error!(
                InvalidTag,
                "Cannot provide multiple Tags with the same key"
            ));
        }
    }
    tags.sort();
    Ok(tags)
}

/// The tags of an `x-amz-tagging` header (URL query encoding: `k1=v1&k2=v2`); none without one.
pub fn from_header(header: Option<&str>) -> S3Result<Vec<(String, String)>> {
    let Some(header) = header else {
        return Ok(Vec::new());
    };
    let tags = form_urlencoded::parse(header.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    checked(tags)
}

fn from_tag_set(set: TagSet) -> S3Result<Vec<(String, String)>> {
    let tags = set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect();
    checked(tags)
}

fn to_tag_set(tags: &[(String, String)]) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// `x-amz-tagging-count` for a GET/HEAD (`None` when the object has no tags, as S3 answers).
pub fn count(tags: &[(String, String)]) -> Option<i32> {
    (!tags.is_empty()).then_some(tags.len() as i32)
}

/// Versions other than `null` do not exist here.
fn check_version(version_id: Option<&str>) -> S3Result<()> {
    if version_id.is_some_and(|v| v != "null") {
        return Err(s3_error!(NoSuchVersion));
    }
    Ok(())
}

impl HipobjS3 {
    pub(super) async fn get_tags(
        &self,
        input: GetObjectTaggingInput,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        check_version(input.version_id.as_deref())?;
        let (b, k) = (input.bucket, input.key);
        let info = self.blocking(move |s| s.head_object(&b, &k)).await?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: to_tag_set(&info.meta.tags),
            version_id: None,
        }))
    }

    pub(super) async fn put_tags(
        &self,
        input: PutObjectTaggingInput,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        check_version(input.version_id.as_deref())?;
        let tags = from_tag_set(input.tagging.tag_set)?;
        let (b, k) = (input.bucket, input.key);
        self.blocking(move |s| s.set_tags(&b, &k, tags)).await?;
        Ok(S3Response::new(PutObjectTaggingOutput::default()))
    }

    pub(super) async fn delete_tags(
        &self,
        input: DeleteObjectTaggingInput,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        check_version(input.version_id.as_deref())?;
        let (b, k) = (input.bucket, input.key);
        self.blocking(move |s| s.set_tags(&b, &k, Vec::new()))
            .await?;
        Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n_tags(n: usize) -> Vec<(String, String)> {
        (0..n).map(|i| (i.to_string(), format!("v{i}"))).collect()
    }

    #[test]
    fn limits_are_s3s() {
        assert_eq!(checked(n_tags(10)).expect("ten").len(), 10);
        assert!(checked(n_tags(11)).is_err());
        let long_key = vec![("k".repeat(128), "v".repeat(256))];
        assert!(checked(long_key).is_ok());
        assert!(checked(vec![("k".repeat(129), String::new())]).is_err());
        assert!(checked(vec![("k".into(), "v".repeat(257))]).is_err());
        assert!(checked(vec![(String::new(), "v".into())]).is_err());
        let twice = vec![("a".into(), "1".into()), ("a".into(), "2".into())];
        let err = checked(twice).expect_err("duplicate key");
        assert_eq!(*err.code(), s3s::S3ErrorCode::InvalidTag);
    }

    #[test]
    fn header_is_url_query_encoded() {
        let tags = from_header(Some("foo=bar%20baz&Hello=World&bar")).expect("tags");
        assert_eq!(
            tags,
            vec![
                ("Hello".to_string(), "World".to_string()),
                ("bar".to_string(), String::new()),
                ("foo".to_string(), "bar baz".to_string())
            ]
        );
        assert!(from_header(None).expect("none").is_empty());
        assert_eq!(count(&tags), Some(3));
        assert_eq!(count(&[]), None);
    }
}
