//! The storage seam: what the S3 layer and the RDMA data path need from a store, as one trait.
//!
//! [`Backend`] is implemented by the embedded filesystem store ([`fs::FsBackend`], the default)
//! and by the proxy to another S3 store ([`s3proxy::S3ProxyBackend`], gateway mode, issue 14). All calls are blocking: the
//! async S3 layer runs them on tokio's blocking pool, RDMA workers call them on their own threads.
//!
//! Streaming, so no object is ever held in memory:
//! - reads: [`Backend::open_read`] gives an [`ObjectReader`] over the selected byte range with the
//!   object's metadata; it reads positionally ([`ObjectReader::read_at`]) or as a plain
//!   [`std::io::Read`] over the range. The object it opened stays readable even if the key is
//!   replaced meanwhile.
//! - writes: [`Backend::create_write`] (an object) and [`Backend::create_part_write`] (one part of
//!   a multipart upload, by HTTP body or by RDMA token) give an [`ObjectWriter`]: `write_at` /
//!   `append`, then `commit` (verifies the digests it was given, then makes the bytes visible at
//!   once: a reader never sees a partial object) or `abort` (stores nothing; so does a drop).

pub mod checksum;
pub mod fs;
mod keys;
pub mod listing;
mod meta;
mod multipart;
mod reaper;
pub mod s3proxy;

use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

pub use self::checksum::{ChecksumAlgo, Checksums, DefaultChecksum, EtagAlgo};
pub use self::fs::FsBackend;
pub use self::s3proxy::S3ProxyBackend;

use crate::identity::Identity;

/// Why a backend call failed.
#[derive(Debug)]
pub enum StorageError {
    NoSuchBucket,
    NoSuchKey,
    BucketAlreadyExists,
    BucketNotEmpty,
    /// The key is empty or too long for this store.
    InvalidKey,
    /// The bucket name breaks S3's naming rules.
    InvalidBucketName,
    /// The requested range starts past the end of the object.
    InvalidRange,
    NoSuchUpload,
    /// A part named in CompleteMultipartUpload is missing or its ETag differs.
    InvalidPart,
    /// CompleteMultipartUpload parts not in ascending order.
    InvalidPartOrder,
    /// A part other than the last is smaller than the minimum part size.
    EntityTooSmall,
    /// Content-MD5 differs from the bytes received.
    BadDigest,
    /// A checksum (CRC32, CRC32C, SHA1, SHA256, CRC64NVME) differs from the bytes received.
    ChecksumMismatch(ChecksumAlgo),
    /// A digest value that cannot be decoded (bad base64 or length).
    InvalidDigest,
    /// The store refused the identity (gateway mode: the store's own access rules).
    AccessDenied,
    /// Gateway mode: the identity to act for (its access key, never its secret) is not in the
    /// gateway's credentials table, so nothing was sent to the store.
    UnknownIdentity(String),
    /// The store behind this one (a gateway's backend) could not serve the request: it refused
    /// the connection, timed out before answering, or answered 5xx. The reason, for the message.
    Unavailable(String),
    Io(io::Error),
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageError::NoSuchBucket => f.write_str("no such bucket"),
            StorageError::NoSuchKey => f.write_str("no such key"),
            StorageError::BucketAlreadyExists => f.write_str("bucket already exists"),
            StorageError::BucketNotEmpty => f.write_str("bucket not empty"),
            StorageError::InvalidKey => f.write_str("invalid or too long key"),
            StorageError::InvalidBucketName => f.write_str("invalid bucket name"),
            StorageError::InvalidRange => f.write_str("range not satisfiable"),
            StorageError::NoSuchUpload => f.write_str("no such multipart upload"),
            StorageError::InvalidPart => f.write_str("a listed part is missing or differs"),
            StorageError::InvalidPartOrder => f.write_str("parts not in ascending order"),
            StorageError::EntityTooSmall => f.write_str("a part is smaller than 5 MiB"),
            StorageError::BadDigest => f.write_str("Content-MD5 does not match the body"),
            StorageError::ChecksumMismatch(a) => write!(f, "{a:?} checksum does not match"),
            StorageError::InvalidDigest => f.write_str("malformed digest"),
            StorageError::AccessDenied => f.write_str("access denied by the store"),
            StorageError::UnknownIdentity(identity) => write!(
                f,
                "identity {identity:?} is unknown to the gateway; nothing was sent to the store"
            ),
            StorageError::Unavailable(why) => write!(f, "backend store unavailable: {why}"),
            StorageError::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<io::Error> for StorageError {
    fn from(e: io::Error) -> Self {
        StorageError::Io(e)
    }
}

pub type StorageResult<T> = Result<T, StorageError>;

/// The standard object headers and user metadata, stored with the object and returned by
/// GET/HEAD exactly as given at upload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    /// `Expires` as the client sent it (an HTTP date).
    pub expires: Option<String>,
    /// `x-amz-meta-*` without the prefix.
    pub user: BTreeMap<String, String>,
    /// The object's tag set (key, value), sorted by key (`x-amz-tagging`, PutObjectTagging).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<(String, String)>,
}

/// What HEAD and listings report about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    /// MD5 of the content (or the multipart ETag `<md5 of part md5s>-<parts>`), lowercase hex,
    /// without quotes.
    pub etag: String,
    pub last_modified: SystemTime,
    pub meta: ObjectMeta,
    /// Checksums computed at upload (those the client asked for or sent).
    pub checksums: Checksums,
    /// Number of parts when the object was assembled by CompleteMultipartUpload.
    pub parts: Option<u32>,
    /// Their sizes in order (GET/HEAD `partNumber`); empty for a plain object.
    pub part_sizes: Vec<u64>,
    /// Their checksums in order (GET `partNumber` with checksums); empty for a plain object.
    pub part_checksums: Vec<Checksums>,
}

/// A bucket in ListBuckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketInfo {
    pub name: String,
    pub created: SystemTime,
}

/// What a write must check and compute before it may commit.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub meta: ObjectMeta,
    /// `Content-MD5` (base64) to verify.
    pub content_md5: Option<String>,
    /// Checksums the client sent (base64), each verified at commit and stored.
    pub expected: Checksums,
    /// An algorithm to compute and store even without an expected value
    /// (`x-amz-checksum-algorithm`, `x-amz-sdk-checksum-algorithm`).
    pub compute: Option<ChecksumAlgo>,
    /// The length the caller will write, when known (an RDMA token's length). A backend that
    /// streams into another store needs it before the first byte (`Content-Length`).
    pub size: Option<u64>,
}

/// A readable source of object bytes, positioned by absolute object offsets.
pub trait ObjectSource: Send {
    /// Read up to `buf.len()` bytes at object offset `pos`; 0 only at the end of the object.
    /// Callers read forward; a streaming backend may answer a backward seek with
    /// `ErrorKind::Unsupported`.
    fn read_at(&mut self, buf: &mut [u8], pos: u64) -> io::Result<usize>;
    /// The bytes that will be read (a streaming backend asks its store for no more).
    fn select(&mut self, _range: Range<u64>) {}
    /// The file that holds the object's bytes at their object offsets, when the backend keeps
    /// one whose bytes never change once committed (the fs store: every placement is a
    /// rename): a GET may then register its pages instead of reading them.
    fn file(&self) -> Option<&std::fs::File> {
        None
    }
}

/// An object opened for reading: metadata, the selected range and the bytes.
pub struct ObjectReader {
    pub info: ObjectInfo,
    /// The selected bytes (the whole object without a range).
    pub range: Range<u64>,
    /// Next offset the `Read` impl returns.
    cursor: u64,
    source: Box<dyn ObjectSource>,
}

impl ObjectReader {
    pub fn new(info: ObjectInfo, range: Range<u64>, mut source: Box<dyn ObjectSource>) -> Self {
        source.select(range.clone());
        ObjectReader {
            info,
            cursor: range.start,
            range,
            source,
        }
    }

    /// Bytes in the selected range.
    pub fn len(&self) -> u64 {
        self.range.end - self.range.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The object's file, when the backend has one ([`ObjectSource::file`]).
    pub fn file(&self) -> Option<&std::fs::File> {
        self.source.file()
    }

    /// Select a narrower range (clipped to the current one); the `Read` impl starts at its start.
    pub fn narrow(&mut self, range: Range<u64>) {
        let start = range.start.clamp(self.range.start, self.range.end);
        let end = range.end.clamp(start, self.range.end);
        self.range = start..end;
        self.cursor = start;
        self.source.select(self.range.clone());
    }

    /// Positional read at absolute object offset `pos`, clipped to the selected range.
    pub fn read_at(&mut self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        if pos >= self.range.end {
            return Ok(0);
        }
        let left = (self.range.end - pos).min(buf.len() as u64) as usize;
        self.source.read_at(&mut buf[..left], pos)
    }
}

impl io::Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.cursor)?;
        self.cursor += n as u64;
        Ok(n)
    }
}

/// Bytes being written: an object or one part. Dropped without commit it stores nothing.
pub trait ObjectWrite: Send {
    /// Write `data` at `offset` (from the start of this object or part). Out-of-order writes are
    /// allowed; holes read as zeros.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Write right after the furthest byte written so far.
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let end = self.len();
        self.write_at(end, data)
    }
    /// Furthest byte written so far (the length it would commit).
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Verify the digests of [`WriteOptions`], then make the bytes visible at once (for a part:
    /// record it in its upload, replacing an older part of that number).
    fn commit(self: Box<Self>) -> StorageResult<ObjectInfo>;
    /// Discard everything written; nothing is stored.
    fn abort(self: Box<Self>);
}

pub type ObjectWriter = Box<dyn ObjectWrite>;

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadInfo {
    pub bucket: String,
    pub key: String,
    pub upload_id: String,
    pub initiated: SystemTime,
    pub options: UploadOptions,
}

/// What CreateMultipartUpload fixed for the final object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadOptions {
    pub meta: ObjectMeta,
    /// Checksum algorithm every part must carry (and the object reports), if any.
    pub checksum: Option<ChecksumAlgo>,
    /// The object's checksum covers the whole object (FULL_OBJECT) rather than being the
    /// COMPOSITE of the part checksums. Always so for CRC64NVME.
    #[serde(default)]
    pub full_object: bool,
}

/// One stored part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartInfo {
    pub part_number: u32,
    pub size: u64,
    /// MD5 hex of the part, without quotes.
    pub etag: String,
    pub last_modified: SystemTime,
    pub checksums: Checksums,
}

/// A part as CompleteMultipartUpload names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletedPart {
    pub part_number: u32,
    /// ETag as the client sent it (quotes allowed).
    pub etag: String,
    /// Part checksums as the client sent them; checked against the stored part.
    pub checksums: Checksums,
}

/// Smallest size of every part but the last (S3's rule).
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
/// Highest part number S3 accepts.
pub const MAX_PART_NUMBER: u32 = 10_000;

/// The storage seam. Object-safe: the server holds an `Arc<dyn Backend>`.
pub trait Backend: Send + Sync + 'static {
    /// This store as `identity` reaches it, when that differs from `self`: a proxy signs its
    /// requests to the store as that identity. `None` (the fs backend): one view for everyone,
    /// bucket ownership is checked by the access hook instead.
    fn acting_for(&self, _identity: &Identity) -> Option<Arc<dyn Backend>> {
        None
    }
    /// Whether bucket ownership is this server's to record and check (rule 9.1). A proxy
    /// leaves it to the store, which applies its own access rules to the identity it acts for.
    fn records_owners(&self) -> bool {
        true
    }

    fn create_bucket(&self, bucket: &str) -> StorageResult<()>;
    fn head_bucket(&self, bucket: &str) -> StorageResult<()>;
    /// Refused with `BucketNotEmpty` while it holds objects.
    fn delete_bucket(&self, bucket: &str) -> StorageResult<()>;
    /// Sorted by name.
    fn list_buckets(&self) -> StorageResult<Vec<BucketInfo>>;
    /// The identity recorded as the bucket's owner (`None`: the bucket names no owner).
    fn bucket_owner(&self, bucket: &str) -> StorageResult<Option<String>>;
    /// Record the bucket's owner once (a second call fails with `BucketAlreadyExists`).
    fn set_bucket_owner(&self, bucket: &str, owner: &str) -> StorageResult<()>;

    /// A bucket configuration document (`name`: `lifecycle`, ...) as last stored, if any. A
    /// store that keeps none answers [`unsupported`] (the S3 layer answers 501).
    fn bucket_config(&self, _bucket: &str, _name: &str) -> StorageResult<Option<Vec<u8>>> {
        Err(unsupported("bucket configuration documents"))
    }
    /// Store (`Some`, replacing any) or remove (`None`) a bucket configuration document.
    fn set_bucket_config(
        &self,
        _bucket: &str,
        _name: &str,
        _doc: Option<&[u8]>,
    ) -> StorageResult<()> {
        Err(unsupported("bucket configuration documents"))
    }

    /// Open an object; `range` selects bytes (`InvalidRange` if unsatisfiable).
    fn open_read(
        &self,
        bucket: &str,
        key: &str,
        range: Option<&s3s::dto::Range>,
    ) -> StorageResult<ObjectReader>;
    /// Metadata only.
    fn head_object(&self, bucket: &str, key: &str) -> StorageResult<ObjectInfo>;
    /// Start writing an object; nothing is visible until commit.
    fn create_write(
        &self,
        bucket: &str,
        key: &str,
        options: WriteOptions,
    ) -> StorageResult<ObjectWriter>;
    /// A missing key is not an error (S3 semantics); a missing bucket is.
    fn delete_object(&self, bucket: &str, key: &str) -> StorageResult<()>;
    /// Replace the tag set of an existing object, leaving its bytes and other metadata as they
    /// are (PutObjectTagging, DeleteObjectTagging). Default: [`unsupported`].
    fn set_tags(
        &self,
        _bucket: &str,
        _key: &str,
        _tags: Vec<(String, String)>,
    ) -> StorageResult<()> {
        Err(unsupported("object tags"))
    }
    /// All objects whose key starts with `prefix`, sorted by key (see [`listing::paginate`]).
    fn list_objects(&self, bucket: &str, prefix: &str) -> StorageResult<Vec<ObjectInfo>>;

    /// Start a multipart upload; returns its id.
    fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        options: UploadOptions,
    ) -> StorageResult<String>;
    /// Write one part (by HTTP body, by RDMA token or by copy: all the same API).
    fn create_part_write(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        options: WriteOptions,
    ) -> StorageResult<ObjectWriter>;
    fn upload_info(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<UploadInfo>;
    /// Stored parts, ascending by number.
    fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<Vec<PartInfo>>;
    /// Assemble the named parts into the object (atomic, like a commit) and end the upload.
    /// `expected`: the object checksum the client sent, verified before anything is placed.
    fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
        expected: &Checksums,
    ) -> StorageResult<ObjectInfo>;
    /// Drop an upload and its parts.
    fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<()>;
    /// Uploads in progress whose key starts with `prefix`, sorted by (key, initiated).
    fn list_uploads(&self, bucket: &str, prefix: &str) -> StorageResult<Vec<UploadInfo>>;
}

/// What a store answers for a feature it does not keep: an `Unsupported` i/o error, which the
/// S3 layer turns into 501 NotImplemented.
pub fn unsupported(what: &str) -> StorageError {
    StorageError::Io(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} are not supported by this store"),
    ))
}

/// Whether a failure is [`unsupported`].
pub fn is_unsupported(e: &StorageError) -> bool {
    matches!(e, StorageError::Io(io) if io.kind() == io::ErrorKind::Unsupported)
}

/// `storage` as `identity` reaches it (see [`Backend::acting_for`]).
pub fn acting_for(storage: &Arc<dyn Backend>, identity: &Identity) -> Arc<dyn Backend> {
    storage
        .acting_for(identity)
        .unwrap_or_else(|| Arc::clone(storage))
}

/// Resolve an HTTP range against an object size.
pub fn select_range(range: Option<&s3s::dto::Range>, size: u64) -> StorageResult<Range<u64>> {
    match range {
        None => Ok(0..size),
        Some(r) => r.check(size).map_err(|_| StorageError::InvalidRange),
    }
}
