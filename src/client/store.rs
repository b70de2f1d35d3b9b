//! The library's S3 client as the transfer engine's [`ObjectStore`] for one object: RDMA
//! transfers through [`rdma::transfer`], the multipart and HEAD requests through [`S3`].

use crate::checksum::{CrcAlgo, ObjectChecksum, StoredChecksum};
use crate::client::failure::Retryable;
use crate::client::rdma::{self, RdmaRequest};
use crate::client::s3::{ObjectPath, S3};
use crate::engine::{CompletedPart, ObjectStore, PartHead, PutTarget, Slice};
use crate::runtime::{Runtime, TransferKind};

/// One object of one endpoint.
pub struct S3ObjectStore<'a> {
    pub s3: &'a S3,
    pub runtime: &'a Runtime,
    pub object: &'a ObjectPath,
}

impl S3ObjectStore<'_> {
    /// One RDMA transfer of `slice` with `req`; a failure says what the server answered and
    /// whether to retry.
    fn rdma(&self, slice: Slice, req: &mut RdmaRequest<'_>) -> std::result::Result<(), Retryable> {
        rdma::transfer(self.runtime, slice, req).map_err(|e| Retryable {
            class: req.class(&e),
            retry_after: req.retry_after(),
            server: req.server_error().map(Box::new),
            failure: req.failure(&e),
        })
    }
}

impl ObjectStore for S3ObjectStore<'_> {
    type Error = Retryable;

    fn get(&self, slice: Slice, first: u64) -> std::result::Result<u64, Retryable> {
        self.get_named(slice, first).map(|(bytes, _)| bytes)
    }

    fn get_named(
        &self,
        slice: Slice,
        first: u64,
    ) -> std::result::Result<(u64, Option<StoredChecksum>), Retryable> {
        let last = first + slice.len as u64 - 1;
        let mut req =
            RdmaRequest::new(self.s3, TransferKind::Get, self.object, Some((first, last)));
        self.rdma(slice, &mut req)?;
        let bytes = req.bytes_transferred().unwrap_or(slice.len as u64);
        Ok((bytes, req.named_checksum()))
    }

    fn put(
        &self,
        slice: Slice,
        target: PutTarget<'_>,
        checksum: Option<ObjectChecksum>,
    ) -> std::result::Result<Option<String>, Retryable> {
        let req =
            RdmaRequest::new(self.s3, TransferKind::Put, self.object, None).checksum(checksum);
        let mut req = match target {
            PutTarget::Object => req,
            PutTarget::Part { upload_id, number } => req.part(upload_id, number),
        };
        self.rdma(slice, &mut req)?;
        Ok(req.etag())
    }

    fn create_upload(&self, checksum: Option<CrcAlgo>) -> std::result::Result<String, Retryable> {
        self.s3.create_upload(self.object, checksum)
    }

    fn complete_upload(
        &self,
        upload_id: &str,
        parts: &[CompletedPart],
        checksum: Option<ObjectChecksum>,
    ) -> std::result::Result<(), Retryable> {
        self.s3
            .complete_upload(self.object, upload_id, parts, checksum)
    }

    fn abort_upload(&self, upload_id: &str) -> std::result::Result<(), Retryable> {
        self.s3.abort_upload(self.object, upload_id)
    }

    fn head_part(&self, number: u32) -> std::result::Result<Option<PartHead>, Retryable> {
        self.s3.part_head(self.object, number).map(Some)
    }
}
