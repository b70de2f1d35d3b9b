//! Multipart upload operations over the backend's part-write API. An UploadPart by RDMA token
//! goes through the same `Backend::create_part_write` (the RDMA engine drives the writer).

use s3s::dto::*;
use s3s::{s3_error, S3Response, S3Result};

use super::conditions::{self, Conditions};
use super::headers::{self, MetaFields, SseFields};
use super::listing::{key_encoder, max_keys, page_marker};
use super::objects::{copy_into, copy_source, put_checksums, timestamp, write_body};
use super::tagging;
use super::{reply_headers, CheckedToken, HipobjS3};
use crate::backend::listing::paginate;
use crate::backend::{
    CompletedPart as Named, ObjectInfo, UploadOptions, WriteOptions, MAX_PART_NUMBER,
};
use crate::error;
use crate::identity::Identity;
use crate::rdma::{JobKind, RdmaOutcome};
use hipobj::reply::Reply;

/// `bytes=<first>-<last>` of an UploadPartCopy, checked against the source size.
fn copy_range(range: &str, size: u64) -> S3Result<std::ops::Range<u64>> {
    let bad = || {
        s3_error!(InvalidArgument, "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy")
    };
    let spec = range.strip_prefix("bytes=").ok_or_else(bad)?;
    let (first, last) = spec.split_once('-').ok_or_else(bad)?;
    let first: u64 = first.trim().parse().map_err(|_| bad())?;
    let last: u64 = last.trim().parse().map_err(|_| bad())?;
    if first > last {
        return Err(bad());
    }
    if last >= size {
        return Err(s3_error!(
            InvalidRange,
            "The requested range is not satisfiable"
        ));
    }
    Ok(first..last + 1)
}

fn part_number(n: i32) -> S3Result<u32> {
    if n < 1 || n as u32 > MAX_PART_NUMBER {
        return Err(s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive"
        ));
    }
    Ok(n as u32)
}

impl HipobjS3 {
    pub(super) async fn create_upload(
        &self,
        input: CreateMultipartUploadInput,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        headers::refuse_sse(SseFields {
            sse: input.server_side_encryption.as_ref(),
            customer_algorithm: input.sse_customer_algorithm.as_ref(),
            customer_key: input.sse_customer_key.as_ref(),
            kms_key_id: input.ssekms_key_id.as_ref(),
        })?;
        let checksum = headers::algorithm(input.checksum_algorithm.as_ref())?;
        let mut meta = MetaFields {
            content_type: input.content_type,
            content_encoding: input.content_encoding,
            content_disposition: input.content_disposition,
            content_language: input.content_language,
            cache_control: input.cache_control,
            expires: input.expires,
            metadata: input.metadata,
        }
        .into_meta();
        meta.tags = tagging::from_header(input.tagging.as_deref())?;
        let options = UploadOptions {
            meta,
            checksum,
            full_object: input
                .checksum_type
                .as_ref()
                .is_some_and(|t| t.as_str() == ChecksumType::FULL_OBJECT),
        };
        let (b, k) = (input.bucket.clone(), input.key.clone());
        let id = self
            .blocking(move |s| s.create_upload(&b, &k, options))
            .await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            checksum_algorithm: checksum.map(headers::algorithm_dto),
            checksum_type: input.checksum_type,
            ..Default::default()
        }))
    }

    /// What every UploadPart checks before it writes (SSE refused, part number in range, the
    /// upload exists) and the options its part is written with, by HTTP body or by RDMA alike:
    /// the digests the client sent, and the upload's checksum algorithm (or the request's).
    /// `who`: the token request's requester, as whom a store behind a gateway is asked.
    pub(super) async fn part_write(
        &self,
        input: &UploadPartInput,
        who: Option<&Identity>,
    ) -> S3Result<(u32, WriteOptions)> {
        headers::refuse_sse(SseFields {
            sse: None,
            customer_algorithm: input.sse_customer_algorithm.as_ref(),
            customer_key: input.sse_customer_key.as_ref(),
            kms_key_id: None,
        })?;
        let number = part_number(input.part_number)?;
        let (b, k, id) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id.clone(),
        );
        let upload = self
            .blocking_as(who, move |s| s.upload_info(&b, &k, &id))
            .await?;
        let options = WriteOptions {
            content_md5: input.content_md5.clone(),
            expected: headers::expected_checksums(
                input.checksum_crc32.clone(),
                input.checksum_crc32c.clone(),
                input.checksum_sha1.clone(),
                input.checksum_sha256.clone(),
                input.checksum_crc64nvme.clone(),
            ),
            compute: upload
                .options
                .checksum
                .or(headers::algorithm(input.checksum_algorithm.as_ref())?),
            ..Default::default()
        };
        Ok((number, options))
    }

    pub(super) async fn upload_part_plain(
        &self,
        input: UploadPartInput,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let (number, options) = self.part_write(&input, None).await?;
        let (b, k, id) = (input.bucket, input.key, input.upload_id);
        let writer = self
            .blocking(move |s| s.create_part_write(&b, &k, &id, number, options))
            .await?;
        let info = write_body(writer, input.body).await?;
        Ok(S3Response::new(part_output(&info)))
    }

    /// UploadPart with a token: the same checks and options as by HTTP body, then the RDMA
    /// engine READs the client's buffer into `Backend::create_part_write`'s writer. Nothing is
    /// stored when the transfer fails; an error before the transfer carries its reply code.
    pub(super) async fn upload_part_rdma(
        &self,
        input: UploadPartInput,
        checked: CheckedToken<'_>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let (number, options) = self
            .part_write(&input, Some(&checked.requester.identity))
            .await
            .map_err(|e| error::token_error(e, &self.stats))?;
        let kind = JobKind::Part {
            upload_id: input.upload_id,
            part_number: number,
            options: Box::new(headers::token_digests(options, checked.token.length)),
        };
        match checked.submit(&input.bucket, &input.key, kind).await {
            RdmaOutcome::Stored { server, info } => Ok(S3Response::with_headers(
                part_output(&info),
                reply_headers(&Reply::Done(server)),
            )),
            other => Err(error::unfinished(other, &self.stats)),
        }
    }

    pub(super) async fn upload_part_copy(
        &self,
        input: UploadPartCopyInput,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        headers::refuse_sse(SseFields {
            sse: None,
            customer_algorithm: input
                .sse_customer_algorithm
                .as_ref()
                .or(input.copy_source_sse_customer_algorithm.as_ref()),
            customer_key: input
                .sse_customer_key
                .as_ref()
                .or(input.copy_source_sse_customer_key.as_ref()),
            kms_key_id: None,
        })?;
        let number = part_number(input.part_number)?;
        let (src_bucket, src_key) = copy_source(&input.copy_source)?;
        let (b, k, id) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id.clone(),
        );
        let upload = self.blocking(move |s| s.upload_info(&b, &k, &id)).await?;
        let mut reader = self
            .blocking(move |s| s.open_read(&src_bucket, &src_key, None))
            .await?;
        conditions::check_copy_source(
            &Conditions {
                if_match: input.copy_source_if_match.as_ref(),
                if_none_match: input.copy_source_if_none_match.as_ref(),
                if_modified_since: input.copy_source_if_modified_since.as_ref(),
                if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
            },
            &reader.info,
        )?;
        if let Some(range) = &input.copy_source_range {
            let selected = copy_range(range, reader.info.size)?;
            reader.narrow(selected);
        }
        let options = WriteOptions {
            compute: upload.options.checksum,
            ..Default::default()
        };
        let (b, k, id) = (input.bucket, input.key, input.upload_id);
        let info = self
            .blocking(move |s| {
                let writer = s.create_part_write(&b, &k, &id, number, options)?;
                copy_into(reader, writer)
            })
            .await?;
        let mut result = CopyPartResult {
            e_tag: Some(headers::etag(&info.etag)),
            last_modified: Some(timestamp(&info)),
            ..Default::default()
        };
        put_checksums!(result, info.checksums);
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(result),
            ..Default::default()
        }))
    }

    pub(super) async fn complete_upload(
        &self,
        input: CompleteMultipartUploadInput,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let parts = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        let mut named = Vec::with_capacity(parts.len());
        for p in parts {
            let (Some(n), Some(etag)) = (p.part_number, p.e_tag) else {
                return Err(s3_error!(
                    InvalidPart,
                    "each part needs a PartNumber and an ETag"
                ));
            };
            named.push(Named {
                part_number: part_number(n)?,
                etag: etag.value().to_string(),
                checksums: headers::expected_checksums(
                    p.checksum_crc32,
                    p.checksum_crc32c,
                    p.checksum_sha1,
                    p.checksum_sha256,
                    p.checksum_crc64nvme,
                ),
            });
        }
        if named.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "You must specify at least one part"
            ));
        }
        if input.if_match.is_some() || input.if_none_match.is_some() {
            let (b, k) = (input.bucket.clone(), input.key.clone());
            let existing = match self.blocking(move |s| s.head_object(&b, &k)).await {
                Ok(info) => Some(info),
                Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchKey => None,
                Err(e) => return Err(e),
            };
            conditions::check_write(
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
                existing.as_ref(),
            )?;
        }
        let expected = headers::expected_checksums(
            input.checksum_crc32,
            input.checksum_crc32c,
            input.checksum_sha1,
            input.checksum_sha256,
            input.checksum_crc64nvme,
        );
        let (b, k, id) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id.clone(),
        );
        let info = self
            .blocking(move |s| s.complete_upload(&b, &k, &id, &named, &expected))
            .await?;
        let mut output = CompleteMultipartUploadOutput {
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(headers::etag(&info.etag)),
            checksum_type: headers::checksum_type(&info.checksums),
            ..Default::default()
        };
        put_checksums!(output, info.checksums);
        Ok(S3Response::new(output))
    }

    pub(super) async fn abort_upload(
        &self,
        input: AbortMultipartUploadInput,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let (b, k, id) = (input.bucket, input.key, input.upload_id);
        self.blocking(move |s| s.abort_upload(&b, &k, &id)).await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    pub(super) async fn parts(
        &self,
        input: ListPartsInput,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let (b, k, id) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id.clone(),
        );
        let (upload, parts) = self
            .blocking(move |s| Ok((s.upload_info(&b, &k, &id)?, s.list_parts(&b, &k, &id)?)))
            .await?;
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let after = input.part_number_marker.unwrap_or(0).max(0) as u32;
        let mut selected: Vec<_> = parts
            .into_iter()
            .filter(|p| p.part_number > after)
            .collect();
        let truncated = selected.len() > max;
        selected.truncate(max);
        let next = selected.last().map(|p| p.part_number as i32);
        let list = selected
            .into_iter()
            .map(|p| {
                let mut part = Part {
                    part_number: Some(p.part_number as i32),
                    size: Some(p.size as i64),
                    e_tag: Some(headers::etag(&p.etag)),
                    last_modified: Some(Timestamp::from(p.last_modified)),
                    ..Default::default()
                };
                put_checksums!(part, p.checksums);
                part
            })
            .collect();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: if truncated { next } else { None },
            is_truncated: Some(truncated),
            checksum_algorithm: upload.options.checksum.map(headers::algorithm_dto),
            parts: Some(list),
            ..Default::default()
        }))
    }

    pub(super) async fn uploads(
        &self,
        input: ListMultipartUploadsInput,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let prefix = input.prefix.clone().unwrap_or_default();
        let (b, p) = (input.bucket.clone(), prefix.clone());
        let all = self.blocking(move |s| s.list_uploads(&b, &p)).await?;
        let max = max_keys(input.max_uploads)?;
        // Uploads sort by (key, initiated); the key marker skips keys up to it.
        let after = page_marker(input.key_marker.as_deref());
        let page = paginate(
            all,
            |u| u.key.as_str(),
            &prefix,
            input.delimiter.as_deref(),
            after,
            max,
        );
        let enc = key_encoder(input.encoding_type.as_ref());
        let next_key = page.items.last().map(|u| u.key.clone());
        let next_id = page.items.last().map(|u| u.upload_id.clone());
        let uploads = page
            .items
            .into_iter()
            .map(|u| MultipartUpload {
                key: Some(enc(u.key)),
                upload_id: Some(u.upload_id),
                initiated: Some(Timestamp::from(u.initiated)),
                checksum_algorithm: u.options.checksum.map(headers::algorithm_dto),
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
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: Some(enc(prefix)),
            delimiter: input.delimiter,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(page.is_truncated),
            next_key_marker: if page.is_truncated { next_key } else { None },
            next_upload_id_marker: if page.is_truncated { next_id } else { None },
            encoding_type: input.encoding_type,
            uploads: Some(uploads),
            common_prefixes: Some(common_prefixes),
            ..Default::default()
        }))
    }
}

/// The answer to a stored part: its ETag and checksums.
fn part_output(info: &ObjectInfo) -> UploadPartOutput {
    let mut output = UploadPartOutput {
        e_tag: Some(headers::etag(&info.etag)),
        ..Default::default()
    };
    put_checksums!(output, info.checksums.clone());
    output
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges() {
        assert_eq!(copy_range("bytes=0-9", 10).expect("ok"), 0..10);
        assert!(copy_range("bytes=0-10", 10).is_err());
        assert!(copy_range("bytes=5-2", 10).is_err());
        assert!(copy_range("0-2", 10).is_err());
        assert!(copy_range("bytes=-2", 10).is_err());
    }
}
