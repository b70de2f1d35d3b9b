//! GetObjectAttributes: ETag, checksum, parts, storage class and size without the body.

use s3s::dto::*;
use s3s::{S3Response, S3Result};

use super::headers::{self, SseFields};
use super::objects::{put_checksums, timestamp};
use super::HipobjS3;

impl HipobjS3 {
    pub(super) async fn attributes(
        &self,
        input: GetObjectAttributesInput,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        headers::refuse_sse(SseFields {
            sse: None,
            customer_algorithm: input.sse_customer_algorithm.as_ref(),
            customer_key: input.sse_customer_key.as_ref(),
            kms_key_id: None,
        })?;
        if input.version_id.as_deref().is_some_and(|v| v != "null") {
            return Err(s3s::s3_error!(NoSuchVersion));
        }
        let (b, k) = (input.bucket.clone(), input.key.clone());
        let info = self.blocking(move |s| s.head_object(&b, &k)).await?;
        // One header may carry several comma-separated names.
        let wants = |name: &str| {
            input
                .object_attributes
                .iter()
                .flat_map(|a| a.as_str().split(','))
                .any(|a| a.trim() == name)
        };
        let mut output = GetObjectAttributesOutput {
            last_modified: Some(timestamp(&info)),
            ..Default::default()
        };
        if wants(ObjectAttributes::ETAG) {
            // Without quotes, as S3 answers here.
            output.e_tag = Some(headers::etag(&info.etag));
        }
        if wants(ObjectAttributes::OBJECT_SIZE) {
            output.object_size = Some(info.size as i64);
        }
        if wants(ObjectAttributes::STORAGE_CLASS) {
            output.storage_class = Some(StorageClass::from_static(StorageClass::STANDARD));
        }
        if wants(ObjectAttributes::CHECKSUM) && !info.checksums.is_empty() {
            let mut c = Checksum {
                checksum_type: headers::checksum_type(&info.checksums),
                ..Default::default()
            };
            put_checksums!(c, info.checksums.clone());
            output.checksum = Some(c);
        }
        if wants(ObjectAttributes::OBJECT_PARTS) && !info.part_sizes.is_empty() {
            let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
            let after = input.part_number_marker.unwrap_or(0).max(0) as usize;
            let all: Vec<ObjectPart> = info
                .part_sizes
                .iter()
                .enumerate()
                .map(|(i, size)| {
                    let mut part = ObjectPart {
                        part_number: Some(i as i32 + 1),
                        size: Some(*size as i64),
                        ..Default::default()
                    };
                    if let Some(c) = info.part_checksums.get(i) {
                        put_checksums!(part, c.clone());
                    }
                    part
                })
                .skip(after)
                .collect();
            let truncated = all.len() > max;
            let parts: Vec<ObjectPart> = all.into_iter().take(max).collect();
            let next = parts.last().and_then(|p| p.part_number);
            output.object_parts = Some(GetObjectAttributesParts {
                total_parts_count: Some(info.part_sizes.len() as i32),
                max_parts: Some(max as i32),
                part_number_marker: input.part_number_marker,
                next_part_number_marker: if truncated { next } else { None },
                is_truncated: Some(truncated),
                parts: Some(parts),
            });
        }
        Ok(S3Response::new(output))
    }
}
