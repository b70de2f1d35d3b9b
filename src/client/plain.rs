//! Plain-HTTP copies through the same transfer engine as RDMA copies (issue 39): the command
//! line's S3 client as an [`ObjectStore`] whose parts are ranged GETs and PUTs or UploadParts
//! with their bodies, and a ring of plain host buffers (nothing to register). A copy over HTTP
//! thus gets what an RDMA copy gets: parts in flight (`--concurrency`), retries, multipart
//! uploads past the part size, the end-to-end check as parts land, memory bounded by the ring.

use crate::checksum::{CrcAlgo, ObjectChecksum};
use crate::client::failure::Retryable;
use crate::client::s3::{ObjectPath, S3};
use crate::engine::{CompletedPart, ObjectStore, PartHead, PutTarget, Slice};
use hipobj_s3client::ops::multipart::part_query;

/// One object of one endpoint over plain HTTP. Only ever run with [`crate::engine::PlainBuffers`]: the slices
/// the engine passes are then parts of a [`PlainSlot`]'s memory.
pub struct HttpStore<'a> {
    pub s3: &'a S3,
    pub object: &'a ObjectPath,
}

impl ObjectStore for HttpStore<'_> {
    type Error = Retryable;

    fn get(&self, slice: Slice, first: u64) -> std::result::Result<u64, Retryable> {
        let last = first + slice.len as u64 - 1;
        let body = self.s3.get_range(self.object, first, last)?;
        let n = body.len().min(slice.len);
        // SAFETY: the engine passes a slice of one of its ring's slots, made by PlainBuffers
        // (HttpStore runs with no other ring): `len` bytes of a live Vec at `base + offset`, which
        // the worker that owns the slot does not touch while this call runs (engine/ring.rs).
        // `body` is a separate allocation, and at most `slice.len` bytes are copied.
        unsafe {
            std::ptr::copy_nonoverlapping(body.as_ptr(), (slice.base + slice.offset) as *mut u8, n)
        };
        Ok(n as u64)
    }

    fn put(
        &self,
        slice: Slice,
        target: PutTarget<'_>,
        checksum: Option<ObjectChecksum>,
    ) -> std::result::Result<Option<String>, Retryable> {
        // SAFETY: as in `get`: `len` initialised bytes of a PlainSlot's Vec, only read here.
        let bytes = unsafe {
            std::slice::from_raw_parts((slice.base + slice.offset) as *const u8, slice.len)
        };
        let query = match target {
            PutTarget::Object => String::new(),
            PutTarget::Part { upload_id, number } => part_query(upload_id, number),
        };
        self.s3
            .put_body(self.object, &query, bytes.to_vec(), checksum)
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
