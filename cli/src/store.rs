//! The command line's side of the transfer engine: its S3 client as the engine's
//! [`ObjectStore`] for one object, and its registered buffers (host, or GPU with `--gpu`) as the
//! engine's ring.

use crate::failure::{Failure, Retryable};
use crate::rdma::{self, RdmaRequest};
use crate::s3::{ObjectPath, S3};
use crate::session::{Registered, Session};
use hipobj::checksum::{CrcAlgo, ObjectChecksum, StoredChecksum};
use hipobj::engine::{
    Buffers, CompletedPart, ObjectStore, PartHead, PutTarget, Sink, Slice, Slot, Source,
};
use hipobj::error::{Error, Result};
use hipobj::runtime::{Runtime, TransferKind};
use std::io;

/// One object of one endpoint.
pub struct ObjectStoreCli<'a> {
    pub s3: &'a S3,
    pub runtime: &'a Runtime,
    pub object: &'a ObjectPath,
}

impl ObjectStoreCli<'_> {
    /// One RDMA transfer of `slice` with `req`; a failure says what the server answered and
    /// whether to retry.
    fn rdma(&self, slice: Slice, req: &mut RdmaRequest<'_>) -> std::result::Result<(), Retryable> {
        rdma::transfer(self.runtime, slice, req).map_err(|e| Retryable {
            class: req.class(&e),
            retry_after: req.retry_after(),
            failure: req.failure(&e),
        })
    }
}

impl ObjectStore for ObjectStoreCli<'_> {
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

fn failure_to_io(f: Failure) -> io::Error {
    io::Error::other(f.to_string())
}

impl Slot for Registered {
    fn base(&self) -> usize {
        self.ptr()
    }

    fn load(&mut self, src: &dyn Source, pos: u64, len: usize) -> io::Result<()> {
        match self.host_bytes_mut(len) {
            Some(buf) => src.read_at(buf, pos),
            None => {
                let mut host = vec![0u8; len];
                src.read_at(&mut host, pos)?;
                self.fill(&host).map_err(failure_to_io)
            }
        }
    }

    fn store(&self, sink: &dyn Sink, pos: u64, len: usize) -> io::Result<()> {
        match self.host_bytes(len) {
            Some(b) => sink.write_at(b, pos),
            None => sink.write_at(&self.read(len).map_err(failure_to_io)?, pos),
        }
    }
}

impl Buffers for Session {
    fn slot(&self, len: usize) -> Result<Box<dyn Slot>> {
        self.buffer(len)
            .map(|b| Box::new(b) as Box<dyn Slot>)
            .map_err(|f| Error::invalid(f.to_string()))
    }
}
