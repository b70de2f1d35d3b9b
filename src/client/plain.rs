//! Plain-HTTP copies through the same transfer engine as RDMA copies (issue 39): the library's S3
//! client as an [`ObjectStore`] whose parts are ranged GETs and PUTs or UploadParts with their
//! bodies. A copy over HTTP thus gets what an RDMA copy gets: parts in flight (`--concurrency`),
//! retries, multipart uploads past the part size, the end-to-end check as parts land, memory
//! bounded by the ring. Where the bodies land and come from is [`BodyMemory`]: the engine's plain
//! ring ([`PlainRing`], the command line), or registered memory ([`Runtime`], host or device:
//! a batch operation that the queue's transport sent over HTTP).

use crate::checksum::{CrcAlgo, ObjectChecksum};
use crate::client::failure::{Failure, Retryable};
use crate::client::s3::{ObjectPath, S3};
use crate::engine::{CompletedPart, ErrorClass, ObjectStore, PartHead, PutTarget, Slice};
use crate::error::Result;
use crate::runtime::Runtime;
use hipobj_s3client::ops::multipart::part_query;

/// Memory that HTTP bodies are copied into and out of.
pub trait BodyMemory: Sync {
    /// Copy `body` (at most `slice.len` bytes) to the start of `slice`.
    fn fill(&self, slice: Slice, body: &[u8]) -> Result<()>;
    /// `slice`'s bytes, as a request body.
    fn body(&self, slice: Slice) -> Result<Vec<u8>>;
}

/// The slots of the engine's plain ring ([`crate::engine::PlainBuffers`]): live `Vec`s whose
/// slices the engine hands to one worker at a time.
pub struct PlainRing;

impl BodyMemory for PlainRing {
    fn fill(&self, slice: Slice, body: &[u8]) -> Result<()> {
        let n = body.len().min(slice.len);
        // SAFETY: the engine passes a slice of one of its ring's slots, made by PlainBuffers
        // (PlainRing serves no other ring): `len` bytes of a live Vec at `base + offset`, which
        // the worker that owns the slot does not touch while this call runs (engine/ring.rs).
        // `body` is a separate allocation, and at most `slice.len` bytes are copied.
        unsafe {
            std::ptr::copy_nonoverlapping(body.as_ptr(), (slice.base + slice.offset) as *mut u8, n)
        };
        Ok(())
    }

    fn body(&self, slice: Slice) -> Result<Vec<u8>> {
        // SAFETY: as in `fill`: `len` initialised bytes of a PlainSlot's Vec, only read here.
        let bytes = unsafe {
            std::slice::from_raw_parts((slice.base + slice.offset) as *const u8, slice.len)
        };
        Ok(bytes.to_vec())
    }
}

impl BodyMemory for Runtime {
    fn fill(&self, slice: Slice, body: &[u8]) -> Result<()> {
        let n = body.len().min(slice.len);
        self.write_registered(slice.base, slice.offset, &body[..n])
    }

    fn body(&self, slice: Slice) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; slice.len];
        self.read_registered(slice.base, slice.offset, &mut bytes)?;
        Ok(bytes)
    }
}

/// One object of one endpoint over plain HTTP, its bodies in `memory`.
pub struct HttpStore<'a> {
    pub s3: &'a S3,
    pub object: &'a ObjectPath,
    pub memory: &'a dyn BodyMemory,
}

impl HttpStore<'_> {
    /// A copy into or out of `memory` that failed: the library's error, not retried.
    fn memory_failure(&self, e: &crate::error::Error) -> Retryable {
        let what = format!("{}: copying the body", self.object);
        Retryable::new(Failure::of_library(e, &what), ErrorClass::Fatal)
    }
}

impl ObjectStore for HttpStore<'_> {
    type Error = Retryable;

    fn get(&self, slice: Slice, first: u64) -> std::result::Result<u64, Retryable> {
        let last = first + slice.len as u64 - 1;
        let body = self.s3.get_range(self.object, first, last)?;
        self.memory
            .fill(slice, &body)
            .map_err(|e| self.memory_failure(&e))?;
        Ok(body.len().min(slice.len) as u64)
    }

    fn put(
        &self,
        slice: Slice,
        target: PutTarget<'_>,
        checksum: Option<ObjectChecksum>,
    ) -> std::result::Result<Option<String>, Retryable> {
        let body = self
            .memory
            .body(slice)
            .map_err(|e| self.memory_failure(&e))?;
        let query = match target {
            PutTarget::Object => String::new(),
            PutTarget::Part { upload_id, number } => part_query(upload_id, number),
        };
        self.s3.put_body(self.object, &query, body, checksum)
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
