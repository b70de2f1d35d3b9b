//! Bucket lifecycle rules: PutBucketLifecycleConfiguration, GetBucketLifecycleConfiguration,
//! DeleteBucketLifecycle, and the sweep that applies them (expire objects, abort incomplete
//! multipart uploads).
//!
//! What a rule may do here: `Expiration` (`Days` or `Date`) and `AbortIncompleteMultipartUpload`,
//! filtered by prefix, tags and object size. Buckets are unversioned, so
//! `NoncurrentVersionExpiration` and `ExpiredObjectDeleteMarker` are accepted and have nothing
//! to act on. Transitions name storage classes this server does not have: refused (400
//! InvalidStorageClass), never stored and ignored.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use s3s::dto::*;
use s3s::{s3_error, S3Response, S3Result};
use tracing::{debug, info, warn};

use super::HipobjS3;
use crate::backend::{Backend, ObjectInfo, StorageError, StorageResult};

/// The bucket configuration document the rules are stored in (JSON of the s3s type).
const CONFIG_NAME: &str = "lifecycle";
/// S3's limits.
const MAX_RULES: usize = 1000;
const MAX_ID_CHARS: usize = 255;
const DAY_SECS: u64 = 24 * 3600;

fn malformed(msg: &'static str) -> s3s::S3Error {
    s3_error!(MalformedXML, "{msg}")
}

/// Check a configuration as S3 does, and give every rule an ID. Nothing is stored on error.
pub fn validated(
    mut config: BucketLifecycleConfiguration,
) -> S3Result<BucketLifecycleConfiguration> {
    if config.rules.is_empty() || config.rules.len() > MAX_RULES {
        return Err(malformed("a lifecycle configuration has 1 to 1000 rules"));
    }
    for (i, rule) in config.rules.iter_mut().enumerate() {
        check_rule(rule)?;
        if rule.id.as_deref().is_none_or(str::is_empty) {
            rule.id = Some(generated_id(i));
        }
    }
    for (i, rule) in config.rules.iter().enumerate() {
        if config.rules[..i].iter().any(|r| r.id == rule.id) {
            return Err(s3_error!(InvalidArgument, "Rule ID must be unique"));
        }
    }
    Ok(config)
}

/// An ID for a rule that came without one (S3 makes one up too).
fn generated_id(index: usize) -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return format!("rule-{index}");
    }
    format!("rule-{}", hex::encode(bytes))
}

fn check_rule(rule: &LifecycleRule) -> S3Result<()> {
    if rule
        .id
        .as_ref()
        .is_some_and(|id| id.chars().count() > MAX_ID_CHARS)
    {
        return Err(s3_error!(
            InvalidArgument,
            "ID length should not exceed allowed limit of 255"
        ));
    }
    let status = rule.status.as_str();
    if status != ExpirationStatus::ENABLED && status != ExpirationStatus::DISABLED {
        return Err(malformed("Status is Enabled or Disabled"));
    }
    if rule.prefix.is_some() && rule.filter.is_some() {
        return Err(malformed("a rule has a Prefix or a Filter, not both"));
    }
    if rule.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || rule
            .noncurrent_version_transitions
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        return Err(s3_error!(
            InvalidStorageClass,
            "lifecycle transitions have no storage class to go to: this server has one (STANDARD)"
        ));
    }
    let has_action = rule.expiration.is_some()
        || rule.abort_incomplete_multipart_upload.is_some()
        || rule.noncurrent_version_expiration.is_some();
    if !has_action {
        return Err(s3_error!(
            InvalidRequest,
            "At least one action needs to be specified in a rule"
        ));
    }
    if let Some(e) = &rule.expiration {
        check_expiration(e)?;
    }
    if let Some(a) = &rule.abort_incomplete_multipart_upload {
        if a.days_after_initiation.is_none_or(|d| d <= 0) {
            return Err(s3_error!(
                InvalidArgument,
                "DaysAfterInitiation must be a positive integer"
            ));
        }
        if !tags_of(rule).is_empty() {
            return Err(s3_error!(
                InvalidRequest,
                "AbortIncompleteMultipartUpload cannot be specified with Tags"
            ));
        }
    }
    Ok(())
}

fn check_expiration(e: &LifecycleExpiration) -> S3Result<()> {
    let given = [
        e.days.is_some(),
        e.date.is_some(),
        e.expired_object_delete_marker.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(malformed(
            "Expiration has one of Days, Date or ExpiredObjectDeleteMarker",
        ));
    }
    if e.days.is_some_and(|d| d <= 0) {
        return Err(s3_error!(
            InvalidArgument,
            "'Days' for Expiration action must be a positive integer"
        ));
    }
    if let Some(date) = &e.date {
        let at = time::OffsetDateTime::from(date.clone());
        if at.time() != time::Time::MIDNIGHT {
            return Err(s3_error!(InvalidArgument, "'Date' must be at midnight GMT"));
        }
    }
    Ok(())
}

/// The key prefix a rule selects ("" for every key).
fn prefix_of(rule: &LifecycleRule) -> &str {
    let filter = rule.filter.as_ref();
    filter
        .and_then(|f| f.prefix.as_deref())
        .or_else(|| {
            filter
                .and_then(|f| f.and.as_ref())
                .and_then(|a| a.prefix.as_deref())
        })
        .or(rule.prefix.as_deref())
        .unwrap_or("")
}

/// The tags an object must carry for the rule to apply.
fn tags_of(rule: &LifecycleRule) -> Vec<(String, String)> {
    let Some(filter) = &rule.filter else {
        return Vec::new();
    };
    let pair = |t: &Tag| {
        (
            t.key.clone().unwrap_or_default(),
            t.value.clone().unwrap_or_default(),
        )
    };
    let mut tags: Vec<(String, String)> = filter.tag.iter().map(pair).collect();
    if let Some(and) = &filter.and {
        tags.extend(and.tags.iter().flatten().map(pair));
    }
    tags
}

/// Object-size bounds (exclusive) of a rule's filter.
fn size_bounds(rule: &LifecycleRule) -> (Option<i64>, Option<i64>) {
    let Some(filter) = &rule.filter else {
        return (None, None);
    };
    let and = filter.and.as_ref();
    (
        filter
            .object_size_greater_than
            .or(and.and_then(|a| a.object_size_greater_than)),
        filter
            .object_size_less_than
            .or(and.and_then(|a| a.object_size_less_than)),
    )
}

/// Whether a rule's filter selects this object.
fn selects(rule: &LifecycleRule, object: &ObjectInfo) -> bool {
    if !object.key.starts_with(prefix_of(rule)) {
        return false;
    }
    let (above, below) = size_bounds(rule);
    let size = object.size as i64;
    if above.is_some_and(|n| size <= n) || below.is_some_and(|n| size >= n) {
        return false;
    }
    tags_of(rule).iter().all(|t| object.meta.tags.contains(t))
}

/// `start` plus `days`, rounded up to the next midnight UTC (S3's rule for `Days`).
fn due_after(start: SystemTime, days: i32) -> SystemTime {
    let secs = start
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        + days.max(0) as u64 * DAY_SECS;
    let midnight = secs.div_ceil(DAY_SECS) * DAY_SECS;
    SystemTime::UNIX_EPOCH + Duration::from_secs(midnight)
}

fn expired(e: &LifecycleExpiration, object: &ObjectInfo, now: SystemTime) -> bool {
    if let Some(days) = e.days {
        return now >= due_after(object.last_modified, days);
    }
    if let Some(date) = &e.date {
        let at = time::OffsetDateTime::from(date.clone());
        return time::OffsetDateTime::from(now) >= at;
    }
    false
}

fn load(
    storage: &dyn Backend,
    bucket: &str,
) -> StorageResult<Option<BucketLifecycleConfiguration>> {
    let doc = match storage.bucket_config(bucket, CONFIG_NAME) {
        Ok(Some(doc)) => doc,
        Ok(None) => return Ok(None),
        // A store without configuration documents has no rules to apply.
        Err(e) if crate::backend::is_unsupported(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    serde_json::from_slice(&doc)
        .map(Some)
        .map_err(|e| StorageError::Io(std::io::Error::other(e)))
}

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub expired: usize,
    pub aborted: usize,
}

/// Apply every enabled rule of every bucket once, as of `now`.
pub fn sweep(storage: &dyn Backend, now: SystemTime) -> StorageResult<Swept> {
    let mut done = Swept::default();
    for bucket in storage.list_buckets()? {
        let Some(config) = load(storage, &bucket.name)? else {
            continue;
        };
        for rule in &config.rules {
            if rule.status.as_str() != ExpirationStatus::ENABLED {
                continue;
            }
            done.expired += expire_objects(storage, &bucket.name, rule, now)?;
            done.aborted += abort_uploads(storage, &bucket.name, rule, now)?;
        }
    }
    Ok(done)
}

fn expire_objects(
    storage: &dyn Backend,
    bucket: &str,
    rule: &LifecycleRule,
    now: SystemTime,
) -> StorageResult<usize> {
    let Some(expiration) = &rule.expiration else {
        return Ok(0);
    };
    let mut n = 0;
    for object in storage.list_objects(bucket, prefix_of(rule))? {
        if selects(rule, &object) && expired(expiration, &object, now) {
            debug!(bucket, key = %object.key, "lifecycle: object expired");
            storage.delete_object(bucket, &object.key)?;
            n += 1;
        }
    }
    Ok(n)
}

fn abort_uploads(
    storage: &dyn Backend,
    bucket: &str,
    rule: &LifecycleRule,
    now: SystemTime,
) -> StorageResult<usize> {
    let Some(days) = rule
        .abort_incomplete_multipart_upload
        .as_ref()
        .and_then(|a| a.days_after_initiation)
    else {
        return Ok(0);
    };
    let mut n = 0;
    for upload in storage.list_uploads(bucket, prefix_of(rule))? {
        if now >= due_after(upload.initiated, days) {
            debug!(bucket, key = %upload.key, "lifecycle: incomplete upload aborted");
            match storage.abort_upload(bucket, &upload.key, &upload.upload_id) {
                Ok(()) | Err(StorageError::NoSuchUpload) => n += 1,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(n)
}

/// Sweep every `every`, for the life of the server.
pub async fn run_sweeps(storage: Arc<dyn Backend>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let s = Arc::clone(&storage);
        match tokio::task::spawn_blocking(move || sweep(s.as_ref(), SystemTime::now())).await {
            Ok(Ok(done)) if done != Swept::default() => {
                info!(
                    expired = done.expired,
                    aborted = done.aborted,
                    "lifecycle sweep"
                )
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!(error = %e, "lifecycle sweep failed"),
            Err(e) => warn!(error = %e, "lifecycle sweep task failed"),
        }
    }
}

impl HipobjS3 {
    pub(super) async fn put_lifecycle(
        &self,
        input: PutBucketLifecycleConfigurationInput,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        let config = input
            .lifecycle_configuration
            .ok_or_else(|| malformed("the request has no LifecycleConfiguration"))?;
        let config = validated(config)?;
        let doc = serde_json::to_vec(&config).map_err(crate::error::internal)?;
        let bucket = input.bucket;
        self.blocking(move |s| s.set_bucket_config(&bucket, CONFIG_NAME, Some(&doc)))
            .await?;
        Ok(S3Response::new(
            PutBucketLifecycleConfigurationOutput::default(),
        ))
    }

    pub(super) async fn get_lifecycle(
        &self,
        input: GetBucketLifecycleConfigurationInput,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        let bucket = input.bucket;
        let config = self.blocking(move |s| load(s, &bucket)).await?;
        let Some(config) = config else {
            return Err(s3_error!(NoSuchLifecycleConfiguration));
        };
        Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
            rules: Some(config.rules),
            ..Default::default()
        }))
    }

    pub(super) async fn delete_lifecycle(
        &self,
        input: DeleteBucketLifecycleInput,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        let bucket = input.bucket;
        self.blocking(move |s| s.set_bucket_config(&bucket, CONFIG_NAME, None))
            .await?;
        Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FsBackend, UploadOptions, WriteOptions};

    fn rule(id: &str, prefix: &str) -> LifecycleRule {
        LifecycleRule {
            abort_incomplete_multipart_upload: None,
            expiration: Some(LifecycleExpiration {
                days: Some(2),
                ..Default::default()
            }),
            filter: Some(LifecycleRuleFilter {
                prefix: Some(prefix.into()),
                ..Default::default()
            }),
            id: Some(id.into()),
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            prefix: None,
            status: ExpirationStatus::from_static(ExpirationStatus::ENABLED),
            transitions: None,
        }
    }

    fn config(rules: Vec<LifecycleRule>) -> BucketLifecycleConfiguration {
        BucketLifecycleConfiguration { rules }
    }

    fn code(r: S3Result<BucketLifecycleConfiguration>) -> s3s::S3ErrorCode {
        r.expect_err("refused").code().clone()
    }

    #[test]
    fn rules_are_checked_as_s3_does() {
        use s3s::S3ErrorCode as C;
        assert!(validated(config(vec![rule("a", "x/"), rule("b", "y/")])).is_ok());
        assert_eq!(code(validated(config(vec![]))), C::MalformedXML);
        assert_eq!(
            code(validated(config(vec![rule("a", "x/"), rule("a", "y/")]))),
            C::InvalidArgument
        );
        assert_eq!(
            code(validated(config(vec![rule(&"i".repeat(256), "x/")]))),
            C::InvalidArgument
        );
        let mut lower = rule("a", "x/");
        lower.status = ExpirationStatus::from("enabled".to_string());
        assert_eq!(code(validated(config(vec![lower]))), C::MalformedXML);
        let mut zero = rule("a", "x/");
        zero.expiration = Some(LifecycleExpiration {
            days: Some(0),
            ..Default::default()
        });
        assert_eq!(code(validated(config(vec![zero]))), C::InvalidArgument);
        let mut none = rule("a", "x/");
        none.expiration = None;
        assert_eq!(code(validated(config(vec![none]))), C::InvalidRequest);
        let mut transition = rule("a", "x/");
        transition.transitions = Some(vec![Transition::default()]);
        assert_eq!(
            code(validated(config(vec![transition]))),
            C::InvalidStorageClass
        );
        let mut both = rule("a", "x/");
        both.prefix = Some("x/".into());
        assert_eq!(code(validated(config(vec![both]))), C::MalformedXML);
    }

    #[test]
    fn a_rule_without_id_gets_one() {
        let mut r = rule("", "x/");
        r.id = None;
        let c = validated(config(vec![r])).expect("valid");
        assert!(c.rules[0].id.as_deref().is_some_and(|id| !id.is_empty()));
    }

    #[test]
    fn days_round_up_to_midnight() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(DAY_SECS + 5);
        assert_eq!(
            due_after(start, 2),
            SystemTime::UNIX_EPOCH + Duration::from_secs(4 * DAY_SECS)
        );
    }

    fn put(s: &FsBackend, key: &str, tags: &[(&str, &str)]) {
        let mut options = WriteOptions::default();
        options.meta.tags = tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut w = s.create_write("b", key, options).expect("writer");
        w.append(b"data").expect("write");
        w.commit().expect("commit");
    }

    #[test]
    fn sweeps_expire_selected_objects_and_abort_old_uploads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FsBackend::open(dir.path()).expect("store");
        s.create_bucket("b").expect("bucket");
        put(&s, "old/a", &[]);
        put(&s, "old/tagged", &[("keep", "no")]);
        put(&s, "new/b", &[]);
        let upload = s
            .create_upload("b", "up/x", UploadOptions::default())
            .expect("upload");
        let mut tagged = rule("t", "old/");
        tagged.filter = Some(LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: Some("old/".into()),
                tags: Some(vec![Tag {
                    key: Some("keep".into()),
                    value: Some("no".into()),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut abort = rule("u", "up/");
        abort.expiration = None;
        abort.abort_incomplete_multipart_upload = Some(AbortIncompleteMultipartUpload {
            days_after_initiation: Some(1),
        });
        let doc = serde_json::to_vec(&validated(config(vec![tagged, abort])).expect("valid"))
            .expect("json");
        s.set_bucket_config("b", CONFIG_NAME, Some(&doc))
            .expect("store");

        // Nothing is due yet.
        assert_eq!(
            sweep(&s, SystemTime::now()).expect("sweep"),
            Swept::default()
        );
        let later = SystemTime::now() + Duration::from_secs(3 * DAY_SECS);
        let done = sweep(&s, later).expect("sweep");
        assert_eq!(
            done,
            Swept {
                expired: 1,
                aborted: 1
            }
        );
        let keys: Vec<String> = s
            .list_objects("b", "")
            .expect("list")
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(keys, ["new/b", "old/a"]);
        assert!(s.upload_info("b", "up/x", &upload).is_err());
    }
}
