//! Plain-HTTP object operations: GET, HEAD, PUT, DELETE, DeleteObjects, CopyObject.

use std::io::Read;

use futures::StreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::conditions::{self, Conditions};
use super::headers::{self, MetaFields, SseFields};
use super::tagging;
use super::HipobjS3;
use crate::backend::{ObjectInfo, ObjectReader, ObjectWriter, StorageError, WriteOptions};
use crate::error;
use crate::identity::Identity;
use crate::stats::Stats;

/// Most keys one DeleteObjects request may name.
const MAX_DELETE_KEYS: usize = 1000;

/// Bytes per body chunk on the plain-HTTP GET path.
const BODY_CHUNK: usize = 256 * 1024;

/// Copy the checksum slots of `c` into an output struct with `checksum_*` fields.
macro_rules! put_checksums {
    ($out:expr, $c:expr) => {{
        let c = $c;
        $out.checksum_crc32 = c.crc32;
        $out.checksum_crc32c = c.crc32c;
        $out.checksum_sha1 = c.sha1;
        $out.checksum_sha256 = c.sha256;
        $out.checksum_crc64nvme = c.crc64nvme;
    }};
}
pub(super) use put_checksums;

pub(super) fn timestamp(info: &ObjectInfo) -> Timestamp {
    Timestamp::from(info.last_modified)
}

pub(super) fn content_range(range: &std::ops::Range<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{}",
        range.start,
        range.end.saturating_sub(1),
        size
    )
}

/// A plain-HTTP GET body: a blocking task reads the object and feeds a small channel.
struct ReaderBody {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
}

impl futures::Stream for ReaderBody {
    type Item = std::io::Result<bytes::Bytes>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

pub(super) fn reader_body(mut reader: ObjectReader) -> StreamingBlob {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        let mut left = reader.len();
        while left > 0 {
            let n = left.min(BODY_CHUNK as u64) as usize;
            let mut buf = vec![0u8; n];
            if let Err(e) = reader.read_exact(&mut buf) {
                let _ = tx.blocking_send(Err(e));
                return;
            }
            // The client went away: stop reading.
            if tx.blocking_send(Ok(bytes::Bytes::from(buf))).is_err() {
                return;
            }
            left -= n as u64;
        }
    });
    StreamingBlob::wrap(ReaderBody { rx })
}

/// Stream an HTTP body into a writer (on the blocking pool), then commit it.
pub(super) async fn write_body(
    mut writer: ObjectWriter,
    body: Option<StreamingBlob>,
) -> S3Result<ObjectInfo> {
    if let Some(mut body) = body {
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    writer.abort();
                    return Err(S3Error::with_source(S3ErrorCode::IncompleteBody, e));
                }
            };
            writer = tokio::task::spawn_blocking(move || writer.append(&chunk).map(|()| writer))
                .await
                .map_err(error::internal)?
                .map_err(|e| error::storage_error(StorageError::Io(e)))?;
        }
    }
    tokio::task::spawn_blocking(move || writer.commit())
        .await
        .map_err(error::internal)?
        .map_err(error::storage_error)
}

/// Stream an object's selected bytes into a writer and commit it (blocking).
pub(super) fn copy_into(
    mut reader: ObjectReader,
    mut writer: ObjectWriter,
) -> Result<ObjectInfo, StorageError> {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                writer.abort();
                return Err(e.into());
            }
        };
        if n == 0 {
            break;
        }
        if let Err(e) = writer.append(&buf[..n]) {
            writer.abort();
            return Err(e.into());
        }
    }
    writer.commit()
}

/// Checksums a GET/HEAD reports: the part's for `partNumber` of a multipart object (reported
/// with the object's checksum type), the object's for the whole object, none for a range (as
/// S3: even one that covers the whole object, which SDKs would otherwise validate).
fn part_or_object_checksums(
    info: &ObjectInfo,
    part_number: Option<i32>,
    whole: bool,
    wanted: bool,
) -> crate::backend::Checksums {
    if let Some(n) = part_number.filter(|_| !info.part_checksums.is_empty()) {
        let mut part = info
            .part_checksums
            .get((n.max(1) - 1) as usize)
            .cloned()
            .unwrap_or_default();
        part.composite = info.checksums.composite;
        return if wanted || !info.checksums.is_empty() {
            part
        } else {
            Default::default()
        };
    }
    headers::reported_checksums(info, whole, wanted)
}

/// A `partNumber` the object does not have: 400 InvalidPart.
fn invalid_part_number() -> S3Error {
    s3_error!(InvalidPart, "The requested partnumber is not satisfiable")
}

/// The bytes GET/HEAD select: `partNumber` or `Range` (not both).
pub(super) fn selection(
    info: &ObjectInfo,
    part_number: Option<i32>,
    range: Option<&Range>,
) -> S3Result<Option<std::ops::Range<u64>>> {
    let Some(n) = part_number else {
        return match range {
            None => Ok(None),
            Some(r) => r
                .check(info.size)
                .map(Some)
                .map_err(|_| s3_error!(InvalidRange)),
        };
    };
    if range.is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "Range and partNumber cannot both be given"
        ));
    }
    if n < 1 {
        return Err(s3_error!(InvalidArgument, "partNumber must be at least 1"));
    }
    let n = n as usize;
    if info.part_sizes.is_empty() {
        return if n == 1 {
            Ok(None)
        } else {
            Err(invalid_part_number())
        };
    }
    let Some(size) = info.part_sizes.get(n - 1) else {
        return Err(invalid_part_number());
    };
    let start: u64 = info.part_sizes[..n - 1].iter().sum();
    Ok(Some(start..start + size))
}

impl HipobjS3 {
    pub(super) async fn get_plain(
        &self,
        input: GetObjectInput,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        headers::refuse_sse(SseFields {
            sse: None,
            customer_algorithm: input.sse_customer_algorithm.as_ref(),
            customer_key: input.sse_customer_key.as_ref(),
            kms_key_id: None,
        })?;
        let (b, k) = (input.bucket.clone(), input.key.clone());
        let mut object = self.blocking(move |s| s.open_read(&b, &k, None)).await?;
        let info = object.info.clone();
        conditions::check_read(
            &Conditions {
                if_match: input.if_match.as_ref(),
                if_none_match: input.if_none_match.as_ref(),
                if_modified_since: input.if_modified_since.as_ref(),
                if_unmodified_since: input.if_unmodified_since.as_ref(),
            },
            &info,
        )?;
        let selected = selection(&info, input.part_number, input.range.as_ref())?;
        if let Some(r) = &selected {
            object.narrow(r.clone());
        }
        let len = object.len();
        Stats::bump(&self.stats.http_gets);
        let wanted = headers::wants_checksums(input.checksum_mode.as_ref());
        let meta = &info.meta;
        let mut output = GetObjectOutput {
            body: Some(reader_body(object)),
            content_length: Some(len as i64),
            accept_ranges: Some("bytes".into()),
            content_range: selected.as_ref().map(|r| content_range(r, info.size)),
            e_tag: Some(headers::etag(&info.etag)),
            last_modified: Some(timestamp(&info)),
            content_type: input
                .response_content_type
                .or_else(|| meta.content_type.clone()),
            content_encoding: input
                .response_content_encoding
                .or_else(|| meta.content_encoding.clone()),
            content_disposition: input
                .response_content_disposition
                .or_else(|| meta.content_disposition.clone()),
            content_language: input
                .response_content_language
                .or_else(|| meta.content_language.clone()),
            cache_control: input
                .response_cache_control
                .or_else(|| meta.cache_control.clone()),
            expires: input.response_expires.or_else(|| headers::expires_of(meta)),
            metadata: headers::metadata_of(meta),
            tag_count: tagging::count(&meta.tags),
            parts_count: info
                .parts
                .filter(|_| input.part_number.is_some())
                .map(|p| p as i32),
            ..Default::default()
        };
        let reported =
            part_or_object_checksums(&info, input.part_number, selected.is_none(), wanted);
        output.checksum_type = headers::checksum_type(&reported);
        put_checksums!(output, reported);
        Ok(S3Response::new(output))
    }

    pub(super) async fn head(
        &self,
        input: HeadObjectInput,
        who: Option<&Identity>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        headers::refuse_sse(SseFields {
            sse: None,
            customer_algorithm: input.sse_customer_algorithm.as_ref(),
            customer_key: input.sse_customer_key.as_ref(),
            kms_key_id: None,
        })?;
        let (b, k) = (input.bucket.clone(), input.key.clone());
        let info = self
            .blocking_as(who, move |s| s.head_object(&b, &k))
            .await?;
        conditions::check_read(
            &Conditions {
                if_match: input.if_match.as_ref(),
                if_none_match: input.if_none_match.as_ref(),
                if_modified_since: input.if_modified_since.as_ref(),
                if_unmodified_since: input.if_unmodified_since.as_ref(),
            },
            &info,
        )?;
        let selected = selection(&info, input.part_number, input.range.as_ref())?;
        let len = selected.as_ref().map_or(info.size, |r| r.end - r.start);
        let wanted = headers::wants_checksums(input.checksum_mode.as_ref());
        let meta = &info.meta;
        let mut output = HeadObjectOutput {
            content_length: Some(len as i64),
            accept_ranges: Some("bytes".into()),
            content_range: selected.as_ref().map(|r| content_range(r, info.size)),
            e_tag: Some(headers::etag(&info.etag)),
            last_modified: Some(timestamp(&info)),
            content_type: meta.content_type.clone(),
            content_encoding: meta.content_encoding.clone(),
            content_disposition: meta.content_disposition.clone(),
            content_language: meta.content_language.clone(),
            cache_control: meta.cache_control.clone(),
            expires: headers::expires_of(meta),
            metadata: headers::metadata_of(meta),
            parts_count: info
                .parts
                .filter(|_| input.part_number.is_some())
                .map(|p| p as i32),
            ..Default::default()
        };
        let reported =
            part_or_object_checksums(&info, input.part_number, selected.is_none(), wanted);
        output.checksum_type = headers::checksum_type(&reported);
        put_checksums!(output, reported);
        // HeadObjectOutput has no tag count field; S3 sends the header on HEAD too.
        let mut extra = http::HeaderMap::new();
        if let Some(n) = tagging::count(&meta.tags) {
            extra.insert(tagging::TAG_COUNT_HEADER, http::HeaderValue::from(n));
        }
        Ok(S3Response::with_headers(output, extra))
    }

    /// The object under `key` if there is one (for write conditions).
    /// The object now stored under `key`, if any (asked as `who` behind a gateway).
    async fn existing(
        &self,
        bucket: &str,
        key: &str,
        who: Option<&Identity>,
    ) -> S3Result<Option<ObjectInfo>> {
        let (b, k) = (bucket.to_string(), key.to_string());
        match self.blocking_as(who, move |s| s.head_object(&b, &k)).await {
            Ok(info) => Ok(Some(info)),
            Err(e) if *e.code() == S3ErrorCode::NoSuchKey => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What a PutObject stores besides its bytes, from its headers, after its checks (SSE
    /// refused, tagging parsed, If-Match / If-None-Match against the current object): the same for
    /// a body and for an RDMA token (`who`: its requester). The size is the caller's to set.
    pub(super) async fn put_write(
        &self,
        input: &PutObjectInput,
        who: Option<&Identity>,
    ) -> S3Result<WriteOptions> {
        headers::refuse_sse(SseFields {
            sse: input.server_side_encryption.as_ref(),
            customer_algorithm: input.sse_customer_algorithm.as_ref(),
            customer_key: input.sse_customer_key.as_ref(),
            kms_key_id: input.ssekms_key_id.as_ref(),
        })?;
        let tags = tagging::from_header(input.tagging.as_deref())?;
        let conditional = input.if_match.is_some() || input.if_none_match.is_some();
        if conditional {
            let existing = self.existing(&input.bucket, &input.key, who).await?;
            conditions::check_write(
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
                existing.as_ref(),
            )?;
        }
        let mut meta = MetaFields {
            content_type: input.content_type.clone(),
            content_encoding: input.content_encoding.clone(),
            content_disposition: input.content_disposition.clone(),
            content_language: input.content_language.clone(),
            cache_control: input.cache_control.clone(),
            expires: input.expires.clone(),
            metadata: input.metadata.clone(),
        }
        .into_meta();
        meta.tags = tags;
        Ok(WriteOptions {
            meta,
            content_md5: input.content_md5.clone(),
            expected: headers::expected_checksums(
                input.checksum_crc32.clone(),
                input.checksum_crc32c.clone(),
                input.checksum_sha1.clone(),
                input.checksum_sha256.clone(),
                input.checksum_crc64nvme.clone(),
            ),
            compute: headers::algorithm(input.checksum_algorithm.as_ref())?,
            size: None,
        })
    }

    pub(super) async fn put_plain(
        &self,
        input: PutObjectInput,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let mut options = self.put_write(&input, None).await?;
        options.size = input.content_length.and_then(|n| u64::try_from(n).ok());
        let (b, k) = (input.bucket.clone(), input.key.clone());
        let writer = self
            .blocking(move |s| s.create_write(&b, &k, options))
            .await?;
        let info = write_body(writer, input.body).await?;
        Stats::bump(&self.stats.http_puts);
        let mut output = PutObjectOutput {
            e_tag: Some(headers::etag(&info.etag)),
            size: Some(info.size as i64),
            ..Default::default()
        };
        put_checksums!(output, info.checksums);
        Ok(S3Response::new(output))
    }

    pub(super) async fn delete(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        if let Some(v) = &input.version_id {
            if v != "null" {
                return Err(s3_error!(NoSuchVersion));
            }
        }
        if input.if_match.is_some()
            || input.if_match_last_modified_time.is_some()
            || input.if_match_size.is_some()
        {
            let existing = self.existing(&input.bucket, &input.key, None).await?;
            conditions::check_delete(
                input.if_match.as_ref(),
                input.if_match_last_modified_time.as_ref(),
                input.if_match_size,
                existing.as_ref(),
            )?;
        }
        let DeleteObjectInput { bucket, key, .. } = input;
        self.blocking(move |s| s.delete_object(&bucket, &key))
            .await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    pub(super) async fn delete_many(
        &self,
        input: DeleteObjectsInput,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let objects = input.delete.objects;
        if objects.len() > MAX_DELETE_KEYS {
            return Err(s3_error!(
                MalformedXML,
                "a DeleteObjects request names at most 1000 keys"
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let bucket = input.bucket.clone();
        self.blocking({
            let b = bucket.clone();
            move |s| s.head_bucket(&b)
        })
        .await?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for obj in objects {
            if obj.version_id.as_deref().is_some_and(|v| v != "null") {
                errors.push(Error {
                    key: Some(obj.key),
                    version_id: obj.version_id,
                    code: Some("NoSuchVersion".into()),
                    message: Some("versioning is not enabled on this bucket".into()),
                });
                continue;
            }
            if let Err(e) = self.check_delete_one(&bucket, &obj).await {
                errors.push(Error {
                    key: Some(obj.key),
                    version_id: obj.version_id,
                    code: Some(e.code().as_str().to_string()),
                    message: e.message().map(str::to_string),
                });
                continue;
            }
            let (b, k) = (bucket.clone(), obj.key.clone());
            match self.blocking(move |s| s.delete_object(&b, &k)).await {
                Ok(()) => {
                    if !quiet {
                        deleted.push(DeletedObject {
                            key: Some(obj.key),
                            version_id: obj.version_id,
                            ..Default::default()
                        });
                    }
                }
                Err(e) => errors.push(Error {
                    key: Some(obj.key),
                    version_id: obj.version_id,
                    code: Some(e.code().as_str().to_string()),
                    message: e.message().map(str::to_string),
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    /// The per-object conditions of a DeleteObjects entry.
    async fn check_delete_one(&self, bucket: &str, obj: &ObjectIdentifier) -> S3Result<()> {
        if obj.e_tag.is_none() && obj.last_modified_time.is_none() && obj.size.is_none() {
            return Ok(());
        }
        let existing = self.existing(bucket, &obj.key, None).await?;
        let etag = obj.e_tag.clone().map(ETagCondition::ETag);
        conditions::check_delete(
            etag.as_ref(),
            obj.last_modified_time.as_ref(),
            obj.size,
            existing.as_ref(),
        )
    }

    pub(super) async fn copy(
        &self,
        input: CopyObjectInput,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        headers::refuse_sse(SseFields {
            sse: input.server_side_encryption.as_ref(),
            customer_algorithm: input
                .sse_customer_algorithm
                .as_ref()
                .or(input.copy_source_sse_customer_algorithm.as_ref()),
            customer_key: input
                .sse_customer_key
                .as_ref()
                .or(input.copy_source_sse_customer_key.as_ref()),
            kms_key_id: input.ssekms_key_id.as_ref(),
        })?;
        let (src_bucket, src_key) = copy_source(&input.copy_source)?;
        let (sb, sk) = (src_bucket.clone(), src_key.clone());
        let reader = self.blocking(move |s| s.open_read(&sb, &sk, None)).await?;
        let src = reader.info.clone();
        conditions::check_copy_source(
            &Conditions {
                if_match: input.copy_source_if_match.as_ref(),
                if_none_match: input.copy_source_if_none_match.as_ref(),
                if_modified_since: input.copy_source_if_modified_since.as_ref(),
                if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
            },
            &src,
        )?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str().eq_ignore_ascii_case("REPLACE"));
        if src_bucket == input.bucket && src_key == input.key && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself \
                 without changing the object's metadata, storage class, website redirect \
                 location or encryption attributes."
            ));
        }
        let replace_tags = input
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str().eq_ignore_ascii_case("REPLACE"));
        let tags = if replace_tags {
            tagging::from_header(input.tagging.as_deref())?
        } else {
            src.meta.tags.clone()
        };
        let mut meta = if replace {
            MetaFields {
                content_type: input.content_type,
                content_encoding: input.content_encoding,
                content_disposition: input.content_disposition,
                content_language: input.content_language,
                cache_control: input.cache_control,
                expires: input.expires,
                metadata: input.metadata,
            }
            .into_meta()
        } else {
            src.meta.clone()
        };
        meta.tags = tags;
        let compute = match headers::algorithm(input.checksum_algorithm.as_ref())? {
            Some(a) => Some(a),
            None => src.checksums.algos().next(),
        };
        let options = WriteOptions {
            meta,
            compute,
            ..Default::default()
        };
        let (b, k) = (input.bucket.clone(), input.key.clone());
        let info = self
            .blocking(move |s| {
                let writer = s.create_write(&b, &k, options)?;
                copy_into(reader, writer)
            })
            .await?;
        let mut result = CopyObjectResult {
            e_tag: Some(headers::etag(&info.etag)),
            last_modified: Some(timestamp(&info)),
            ..Default::default()
        };
        put_checksums!(result, info.checksums);
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(result),
            ..Default::default()
        }))
    }
}

/// `(bucket, key)` of a copy source; versions other than `null` do not exist here.
pub(super) fn copy_source(src: &CopySource) -> S3Result<(String, String)> {
    match src {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => {
            if version_id.as_deref().is_some_and(|v| v != "null") {
                return Err(s3_error!(NoSuchVersion));
            }
            Ok((bucket.to_string(), key.to_string()))
        }
        _ => Err(s3_error!(
            NotImplemented,
            "access point copy sources are not supported"
        )),
    }
}
