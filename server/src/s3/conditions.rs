//! Conditional requests as S3 evaluates them (RFC 7232 precedence): If-Match / If-Unmodified-Since
//! fail with 412, If-None-Match / If-Modified-Since with 304 on GET/HEAD; on a copy source every
//! failed condition is 412; on PUT, If-None-Match and If-Match guard the overwrite.

use std::time::{SystemTime, UNIX_EPOCH};

use s3s::dto::{ETagCondition, Timestamp};
use s3s::{s3_error, S3Error, S3Result};

use crate::backend::ObjectInfo;

/// The four conditional headers of a read (or of a copy source).
#[derive(Default)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

fn matches(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value().trim_matches('"') == etag,
    }
}

/// Whole seconds (HTTP dates carry no fraction).
fn secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

fn ts_secs(t: &Timestamp) -> i64 {
    let odt: time::OffsetDateTime = t.clone().into();
    odt.unix_timestamp()
}

/// What a failed read condition answers.
enum Failed {
    Precondition,
    NotModified,
}

fn evaluate(c: &Conditions<'_>, info: &ObjectInfo) -> Option<Failed> {
    let modified = secs(info.last_modified);
    match c.if_match {
        Some(cond) if !matches(cond, &info.etag) => return Some(Failed::Precondition),
        Some(_) => {}
        None => {
            if let Some(t) = c.if_unmodified_since {
                if modified > ts_secs(t) {
                    return Some(Failed::Precondition);
                }
            }
        }
    }
    match c.if_none_match {
        Some(cond) if matches(cond, &info.etag) => return Some(Failed::NotModified),
        Some(_) => {}
        None => {
            if let Some(t) = c.if_modified_since {
                if modified <= ts_secs(t) {
                    return Some(Failed::NotModified);
                }
            }
        }
    }
    None
}

/// GET/HEAD: 412 or 304 (with the object's ETag and Last-Modified) when a condition fails.
pub fn check_read(c: &Conditions<'_>, info: &ObjectInfo) -> S3Result<()> {
    match evaluate(c, info) {
        None => Ok(()),
        Some(Failed::Precondition) => Err(s3_error!(PreconditionFailed)),
        Some(Failed::NotModified) => Err(not_modified(info)),
    }
}

fn not_modified(info: &ObjectInfo) -> S3Error {
    let mut err = s3_error!(NotModified);
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", info.etag)) {
        headers.insert(http::header::ETAG, v);
    }
    let date = httpdate::fmt_http_date(info.last_modified);
    if let Ok(v) = http::HeaderValue::from_str(&date) {
        headers.insert(http::header::LAST_MODIFIED, v);
    }
    err.set_headers(headers);
    err
}

/// CopyObject / UploadPartCopy source conditions: every failure is 412.
pub fn check_copy_source(c: &Conditions<'_>, info: &ObjectInfo) -> S3Result<()> {
    match evaluate(c, info) {
        None => Ok(()),
        Some(_) => Err(s3_error!(PreconditionFailed)),
    }
}

/// PUT / CompleteMultipartUpload over `existing` (`None`: no object under the key).
pub fn check_write(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    existing: Option<&ObjectInfo>,
) -> S3Result<()> {
    if let Some(cond) = if_match {
        let Some(info) = existing else {
            return Err(s3_error!(NoSuchKey));
        };
        if !matches(cond, &info.etag) {
            return Err(s3_error!(PreconditionFailed));
        }
    }
    if let (Some(cond), Some(info)) = (if_none_match, existing) {
        if matches(cond, &info.etag) {
            return Err(s3_error!(PreconditionFailed));
        }
    }
    Ok(())
}

/// DeleteObject / DeleteObjects conditions (`If-Match`, `x-amz-if-match-last-modified-time`,
/// `x-amz-if-match-size`): 412 when the object exists and one differs; deleting a missing object
/// is never an error.
pub fn check_delete(
    if_match: Option<&ETagCondition>,
    last_modified: Option<&Timestamp>,
    size: Option<i64>,
    existing: Option<&ObjectInfo>,
) -> S3Result<()> {
    let Some(info) = existing else {
        return Ok(());
    };
    let etag_differs = if_match.is_some_and(|c| !matches(c, &info.etag));
    let time_differs = last_modified.is_some_and(|t| ts_secs(t) != secs(info.last_modified));
    let size_differs = size.is_some_and(|s| s != info.size as i64);
    if etag_differs || time_differs || size_differs {
        return Err(s3_error!(PreconditionFailed));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::ETag;
    use std::time::Duration;

    fn info() -> ObjectInfo {
        ObjectInfo {
            key: "k".into(),
            size: 1,
            etag: "abc".into(),
            last_modified: UNIX_EPOCH + Duration::from_secs(1_000_000),
            meta: Default::default(),
            checksums: Default::default(),
            parts: None,
            part_sizes: Vec::new(),
            part_checksums: Vec::new(),
        }
    }

    fn ts(secs: u64) -> Timestamp {
        Timestamp::from(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[test]
    fn read_conditions_follow_rfc_precedence() {
        let good = ETagCondition::ETag(ETag::Strong("abc".into()));
        let bad = ETagCondition::ETag(ETag::Strong("xyz".into()));
        let i = info();
        let c = Conditions {
            if_match: Some(&bad),
            ..Default::default()
        };
        assert!(matches!(evaluate(&c, &i), Some(Failed::Precondition)));
        let c = Conditions {
            if_none_match: Some(&good),
            ..Default::default()
        };
        assert!(matches!(evaluate(&c, &i), Some(Failed::NotModified)));
        // If-Match true overrides a failing If-Unmodified-Since.
        let before = ts(999_000);
        let c = Conditions {
            if_match: Some(&good),
            if_unmodified_since: Some(&before),
            ..Default::default()
        };
        assert!(evaluate(&c, &i).is_none());
        let after = ts(1_000_500);
        let c = Conditions {
            if_modified_since: Some(&after),
            ..Default::default()
        };
        assert!(matches!(evaluate(&c, &i), Some(Failed::NotModified)));
        let c = Conditions {
            if_modified_since: Some(&before),
            ..Default::default()
        };
        assert!(evaluate(&c, &i).is_none());
    }

    #[test]
    fn delete_conditions() {
        let i = info();
        let bad = ETagCondition::ETag(ETag::Strong("xyz".into()));
        assert!(check_delete(Some(&bad), None, None, Some(&i)).is_err());
        assert!(check_delete(Some(&bad), None, None, None).is_ok());
        assert!(check_delete(None, None, Some(2), Some(&i)).is_err());
        assert!(check_delete(None, None, Some(1), Some(&i)).is_ok());
        assert!(check_delete(None, Some(&ts(1_000_000)), None, Some(&i)).is_ok());
        assert!(check_delete(None, Some(&ts(5)), None, Some(&i)).is_err());
    }

    #[test]
    fn write_conditions() {
        let i = info();
        let any = ETagCondition::Any;
        assert!(check_write(Some(&any), None, None).is_err());
        assert!(check_write(Some(&any), None, Some(&i)).is_ok());
        assert!(check_write(None, Some(&any), Some(&i)).is_err());
        assert!(check_write(None, Some(&any), None).is_ok());
    }
}
