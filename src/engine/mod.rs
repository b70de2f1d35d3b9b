//! The transfer engine: one object of any size moved between S3 and a file (or a registered
//! buffer) as many RDMA transfers at once, the way `aws s3 cp` and boto3's transfer manager move
//! objects over HTTP.
//!
//! A [`Plan`] cuts the bytes into parts (ranged GETs, or the parts of a multipart upload). Workers,
//! `concurrency` of them, each own a reusable registered buffer of a small ring ([`Slot`]: never
//! the whole object), take the next part and move it with one RDMA transfer; each worker's disk
//! thread writes a part that arrived (or reads the next one to send) at its own offset in the file
//! (positional I/O) meanwhile, in the worker's second buffer. A failed transfer is retried as the AWS
//! SDKs' standard mode retries ([`RetryPolicy`]), each time as a new library transfer with a
//! fresh token. A multipart upload is completed when every part arrived and aborted when the copy
//! fails or is cancelled.
//!
//! An upload's bytes may also lie in memory already ([`upload_from`]: host bytes and registered
//! memory, a checkpoint's): a part that lies whole in registered memory is sent from there, with
//! no ring buffer and no copy.
//!
//! The S3 side stays the caller's: the engine calls an [`ObjectStore`] (the command line's own
//! client, or boto3 callbacks in the Python package) for each RDMA transfer of a buffer slice and
//! for the multipart bookkeeping.

mod disk;
mod io;
mod pace;
mod plan;
mod retry;
mod ring;
mod run;
mod segments;
mod verify;

pub use io::{FileSink, FileSource, Sink, Source};
pub use plan::{Part, Plan, MAX_PARTS, MAX_PART_SIZE, MIN_PART_SIZE};
pub use retry::{class_of_library, Classify, ErrorClass, Retrier, RetryPolicy};
pub use ring::{Buffers, HostBuffers, HostSlot, PlainBuffers, Slot};
pub use run::{download, download_into, upload};
pub use segments::{upload_from, RegisteredMemory, Segment};

use crate::checksum::{CrcAlgo, Mismatch, ObjectChecksum, StoredChecksum, Unchecked, Verdict};
use std::fmt;
use std::sync::atomic::AtomicBool;

/// Part size when the caller names none (boto3's `multipart_chunksize`).
pub const DEFAULT_PART_SIZE: u64 = 8 << 20;

/// How a copy is cut and run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Bytes per part (a ranged GET, or an UploadPart).
    pub part_size: u64,
    /// Transfers in flight (and workers: each with one or two buffers of the ring).
    pub concurrency: usize,
    /// Uploads larger than this go as a multipart upload; smaller ones as one PUT.
    pub multipart_threshold: u64,
    pub retry: RetryPolicy,
    /// A download's end-to-end check (docs/protocol.md section 15): `None`, none asked for;
    /// `Some(Ok(stored))`, the bytes that land must have the object's stored checksum;
    /// `Some(Err(Unchecked::Composite(..)))`, each part of a COMPOSITE multipart object must
    /// have its stored checksum (asked with [`ObjectStore::head_part`]; unchecked when the store
    /// cannot ask); `Some(Err(why))`, asked for but impossible (the report says why).
    pub checksum: Option<Result<ObjectChecksum, Unchecked>>,
    /// An upload's checksum (docs/protocol.md rule 4.9 and section 15): each PUT or UploadPart
    /// carries this CRC of the bytes it moves (the server refuses a mismatch with BadDigest and
    /// stores nothing), a multipart upload is created with it as its FULL_OBJECT algorithm and
    /// completed with the whole object's value. `None`: none sent.
    pub upload_checksum: Option<CrcAlgo>,
}

impl Settings {
    /// boto3's part size and threshold, `concurrency` transfers in flight (the library's
    /// `max_transfers` is the natural choice: one connection each).
    pub fn with_concurrency(concurrency: usize) -> Settings {
        Settings {
            part_size: DEFAULT_PART_SIZE,
            concurrency: concurrency.max(1),
            multipart_threshold: DEFAULT_PART_SIZE,
            retry: RetryPolicy::standard(),
            checksum: None,
            upload_checksum: Some(CrcAlgo::Crc64Nvme),
        }
    }
}

/// What the caller sees of a copy in progress, and how it stops one.
pub struct Job<'a> {
    pub settings: Settings,
    /// Called with the bytes of each part once they have arrived (by any worker thread).
    pub progress: &'a (dyn Fn(u64) + Sync),
    /// Set (e.g. on Ctrl-C) to stop: no new part starts, a multipart upload is aborted.
    pub cancel: &'a AtomicBool,
}

/// A slice of registered memory: the buffer of one RDMA transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Base address of the registration.
    pub base: usize,
    /// Offset of the slice in the registration.
    pub offset: usize,
    pub len: usize,
}

/// One uploaded part of a multipart upload, for CompleteMultipartUpload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletedPart {
    pub number: u32,
    pub etag: String,
}

/// Where an upload goes: the whole object, or one part of a multipart upload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutTarget<'a> {
    Object,
    Part { upload_id: &'a str, number: u32 },
}

/// The caller's S3 client, as the engine uses it. Each `get`/`put` is ONE library transfer
/// (`Runtime::transfer`, a fresh token): a retry calls it again.
pub trait ObjectStore: Sync {
    type Error: Classify + Send + fmt::Display;
    /// RDMA GET of object bytes `first ..= first + slice.len - 1` into `slice`: the number of
    /// bytes the server wrote.
    fn get(&self, slice: Slice, first: u64) -> Result<u64, Self::Error>;
    /// [`ObjectStore::get`], with the stored checksum its reply named for exactly these bytes
    /// (`x-amz-rdma-checksum`, docs/protocol.md rule 16.2) when it named one. The default names
    /// none; a store that reads its replies overrides it (the engine then calls only this).
    fn get_named(
        &self,
        slice: Slice,
        first: u64,
    ) -> Result<(u64, Option<StoredChecksum>), Self::Error> {
        self.get(slice, first).map(|n| (n, None))
    }
    /// RDMA PUT (or UploadPart) of `slice`, with the checksum of its bytes to send
    /// (`x-amz-checksum-<algorithm>`): the ETag the server answered, if any.
    fn put(
        &self,
        slice: Slice,
        target: PutTarget<'_>,
        checksum: Option<ObjectChecksum>,
    ) -> Result<Option<String>, Self::Error>;
    /// CreateMultipartUpload, naming `checksum` as the upload's FULL_OBJECT algorithm: the
    /// upload id.
    fn create_upload(&self, checksum: Option<CrcAlgo>) -> Result<String, Self::Error>;
    /// CompleteMultipartUpload, with the whole object's checksum when known.
    fn complete_upload(
        &self,
        upload_id: &str,
        parts: &[CompletedPart],
        checksum: Option<ObjectChecksum>,
    ) -> Result<(), Self::Error>;
    fn abort_upload(&self, upload_id: &str) -> Result<(), Self::Error>;
    /// HEAD of part `number` (1-based) of the multipart object with its checksums asked for
    /// (`partNumber=N`, `x-amz-checksum-mode: ENABLED`): the part's length and its stored
    /// checksum ([`ObjectChecksum::of_part`]). `None`: this store does not ask for parts (a
    /// COMPOSITE object's download is then unchecked, and says so).
    fn head_part(&self, _number: u32) -> Result<Option<PartHead>, Self::Error> {
        Ok(None)
    }
}

/// What a HEAD of one part of a multipart object says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartHead {
    /// The part's length (its `Content-Length`).
    pub len: u64,
    /// The part's stored checksum, or why it has none.
    pub checksum: Result<ObjectChecksum, Unchecked>,
}

/// What a finished copy did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Bytes moved (all of them: the copy succeeded).
    pub bytes: u64,
    /// RDMA transfers that succeeded (parts, or 1 for a single PUT).
    pub parts: usize,
    /// Requests sent again after a retryable failure, over the whole copy.
    pub retries: u64,
    /// Whether an upload went as a multipart upload.
    pub multipart: bool,
    /// Times a failure cut the parts in flight (`pace`: halved, then grown back by successes).
    pub cuts: u64,
    /// What the end-to-end check of a download found.
    pub checksum: Verdict,
    /// Downloads run again because what landed did not have the stored checksum (at most 1).
    pub checksum_retries: u64,
}

/// Why a copy failed. Nothing of a failed upload remains on the server (its multipart upload was
/// aborted); a failed download may have written part of the file.
#[derive(Debug)]
pub enum EngineError<E> {
    /// The store's last answer, after the retries it allowed.
    Store { error: E, retries: u64 },
    /// A local file could not be read or written.
    Io(std::io::Error),
    /// The library refused (registration of the ring, bad settings).
    Library(crate::error::Error),
    /// The server wrote another number of bytes than the part asked for (the object changed).
    Short { first: u64, want: u64, got: u64 },
    /// A GET's reply named (`x-amz-rdma-checksum`) another stored checksum for its bytes than
    /// the one the download checks against (the object changed after its HEAD).
    Changed {
        first: u64,
        checked: String,
        named: String,
    },
    /// `Job::cancel` was set.
    Cancelled { retries: u64 },
    /// What landed did not have the object's stored checksum, twice (the download was run again
    /// once, with fresh tokens).
    Checksum(Mismatch),
}

impl<E: fmt::Display> fmt::Display for EngineError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Store { error, retries } => write!(f, "{error} (after {retries} retries)"),
            EngineError::Io(e) => write!(f, "local file: {e}"),
            EngineError::Library(e) => write!(f, "{e}"),
            EngineError::Short { first, want, got } => write!(
                f,
                "the server wrote {got} bytes for the {want} bytes at {first} (did the object change?)"
            ),
            EngineError::Changed {
                first,
                checked,
                named,
            } => write!(
                f,
                "the object changed during the download: the GET at {first} names the stored checksum {named}, the download checks against {checked}"
            ),
            EngineError::Cancelled { .. } => f.write_str("cancelled"),
            EngineError::Checksum(m) => write!(f, "{m} (read twice)"),
        }
    }
}

#[cfg(test)]
mod tests;
