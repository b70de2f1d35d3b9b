//! The embedded filesystem backend: one directory per bucket, one file per object.
//!
//! Layout under the data directory:
//! - `<bucket>/<encoded key>`: the object's bytes (see `keys` for the encoding).
//! - `<bucket>/.meta/<encoded key>`: its [`Sidecar`] (ETag, metadata, checksums; JSON).
//! - `<bucket>/.uploads/<upload id>/`: a multipart upload (see `multipart`).
//! - `<bucket>/.owner`: the identity that owns the bucket (one line).
//! - `<bucket>/.config/<name>`: a bucket configuration document (lifecycle rules, ...).
//! - `.tmp/`: bytes being written (named `<pid>-<n>` after the writing server); a commit renames
//!   the file into place (atomic replace), an abort or a drop removes it, and what a server that
//!   died mid-write left there is removed when a server opens the directory.

use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
// The placing lock is poison-free: a panic elsewhere while holding it leaves nothing half-done
// that the next holder could trip over (every placement is rename-based).
use hipobj_actors::sync::{Mutex, MutexGuard};
use std::sync::Arc;
use std::time::SystemTime;

use md5::{Digest, Md5};

use super::checksum::{ChecksumComputer, DefaultChecksum, EtagAlgo};
use super::keys::{decode_key, encode_key};
use super::meta::{md5_of, Sidecar};
use super::reaper::Reaper;
use super::{
    select_range, Backend, BucketInfo, CompletedPart, ObjectInfo, ObjectReader, ObjectSource,
    ObjectWrite, ObjectWriter, PartInfo, StorageError, StorageResult, UploadInfo, UploadOptions,
    WriteOptions,
};
use hipobj::checksum::{CrcAlgo, CrcPieces};

pub(super) const META_DIR: &str = ".meta";
pub(super) const UPLOADS_DIR: &str = ".uploads";
const TMP_DIR: &str = ".tmp";
const OWNER_FILE: &str = ".owner";
const CONFIG_DIR: &str = ".config";

/// The filesystem store.
#[derive(Debug)]
pub struct FsBackend {
    root: PathBuf,
    tmp_seq: AtomicU64,
    /// Held while a sidecar and its object are placed, and while a sidecar is rewritten in place
    /// (`set_tags`), so a rewrite never puts an old object's sidecar over a new one's.
    placing: Arc<Mutex<()>>,
    /// Closes the replaced and deleted files (frees their bytes) off the request's path.
    reaper: Arc<Reaper>,
    /// What new objects' ETags are.
    etag: EtagAlgo,
    /// What new objects whose writer named no checksum get.
    default_checksum: DefaultChecksum,
}

/// Remove the files under `tmp` whose writer (the `<pid>` of `<pid>-<n>`) is neither this process
/// nor a live one: a server killed mid-PUT (a client can never see them, they were never placed).
/// Names of another shape are left alone. Returns how many were removed.
fn sweep_dead_writers(tmp: &Path) -> io::Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(tmp)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists();
        if !alive && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

impl FsBackend {
    /// Use `root` (created if missing) as the data directory.
    pub fn open(root: &Path) -> io::Result<FsBackend> {
        fs::create_dir_all(root.join(TMP_DIR))?;
        let swept = sweep_dead_writers(&root.join(TMP_DIR))?;
        if swept > 0 {
            tracing::info!(
                files = swept,
                "removed the unfinished writes of a server that stopped"
            );
        }
        Ok(FsBackend {
            root: root.to_path_buf(),
            tmp_seq: AtomicU64::new(0),
            placing: Arc::new(Mutex::new(())),
            reaper: Arc::new(Reaper::start()?),
            etag: EtagAlgo::Md5,
            default_checksum: DefaultChecksum::Crc64nvme,
        })
    }

    /// New objects (and parts) get ETags of `etag` (`--etag`).
    pub fn with_etag(mut self, etag: EtagAlgo) -> FsBackend {
        self.etag = etag;
        self
    }

    /// New objects (and completed multipart uploads) whose writer named no checksum get
    /// `checksum` (`--default-checksum`).
    pub fn with_default_checksum(mut self, checksum: DefaultChecksum) -> FsBackend {
        self.default_checksum = checksum;
        self
    }

    /// Whether a completed multipart upload with no checksum of its own gets the full-object
    /// CRC64NVME.
    pub(super) fn default_crc64(&self) -> bool {
        self.default_checksum == DefaultChecksum::Crc64nvme
    }

    /// See [`FsBackend::placing`].
    pub(super) fn placing(&self) -> MutexGuard<'_, ()> {
        self.placing.lock()
    }

    fn bucket_dir(&self, bucket: &str) -> StorageResult<PathBuf> {
        // s3s validates bucket names (S3's rules) before any call; check again so no name can
        // escape the data directory.
        if bucket.is_empty() || bucket.starts_with('.') || bucket.contains('/') {
            return Err(StorageError::InvalidBucketName);
        }
        Ok(self.root.join(bucket))
    }

    pub(crate) fn existing_bucket_dir(&self, bucket: &str) -> StorageResult<PathBuf> {
        let dir = self
            .bucket_dir(bucket)
            .map_err(|_| StorageError::NoSuchBucket)?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(StorageError::NoSuchBucket)
        }
    }

    /// Where bucket configuration document `name` lives (names are lowercase words).
    fn config_path(&self, bucket: &str, name: &str) -> StorageResult<PathBuf> {
        let dir = self.existing_bucket_dir(bucket)?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') {
            return Err(StorageError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad bucket configuration name",
            )));
        }
        Ok(dir.join(CONFIG_DIR).join(name))
    }

    /// A fresh path under `.tmp/`.
    pub(super) fn tmp_path(&self) -> PathBuf {
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        self.root
            .join(TMP_DIR)
            .join(format!("{}-{seq}", std::process::id()))
    }

    /// Start writing bytes that `dest` will place on commit.
    pub(super) fn writer(&self, dest: Dest, options: WriteOptions) -> StorageResult<ObjectWriter> {
        let tmp = self.tmp_path();
        // Readable too: out-of-order writes are hashed back from the file at commit.
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let checksums = ChecksumComputer::new(&options.expected, options.compute);
        Ok(Box::new(FsWriter {
            file,
            tmp: Some(tmp),
            side_tmp: self.tmp_path(),
            dest,
            md5: self.md5_needed(&options).then(Md5::new),
            etag: self.etag,
            crc64: self
                .crc64_chunks_needed(&checksums)
                .then(|| CrcPieces::new(CrcAlgo::Crc64Nvme)),
            checksums,
            hashed_upto: 0,
            in_order: true,
            len: 0,
            options,
            placing: Arc::clone(&self.placing),
            reaper: Arc::clone(&self.reaper),
        }))
    }

    /// MD5 is computed for an MD5 ETag or to check a `Content-MD5`, else not at all.
    fn md5_needed(&self, options: &WriteOptions) -> bool {
        self.etag == EtagAlgo::Md5 || options.content_md5.is_some()
    }

    /// A CRC64NVME (for the ETag, or the default checksum of a write that named none) is
    /// computed per piece as the pieces land, in any order, unless the client's own checksums
    /// already include CRC64NVME (computed in order with them).
    fn crc64_chunks_needed(&self, client: &ChecksumComputer) -> bool {
        let default = self.default_crc64() && client.computes_nothing();
        (self.etag == EtagAlgo::Crc64nvme || default) && !client.computes_crc64nvme()
    }

    fn keys_of(&self, dir: &Path) -> StorageResult<Vec<String>> {
        let mut keys = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !entry.file_type()?.is_file() {
                continue;
            }
            if let Some(key) = decode_key(name) {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    /// Open `path` and describe it with its sidecar.
    fn open_file(&self, dir: &Path, key: &str) -> StorageResult<(File, ObjectInfo)> {
        let name = encode_key(key)?;
        let mut file = match File::open(dir.join(&name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(StorageError::NoSuchKey),
            Err(e) => return Err(e.into()),
        };
        let stat = file.metadata()?;
        let side =
            match Sidecar::load_matching(&dir.join(META_DIR).join(&name), stat.ino(), stat.len()) {
                Some(side) => side,
                None => {
                    let etag = md5_of(&mut file)?;
                    file.seek(SeekFrom::Start(0))?;
                    Sidecar {
                        etag,
                        ..Default::default()
                    }
                }
            };
        let info = ObjectInfo {
            key: key.to_string(),
            size: stat.len(),
            etag: side.etag,
            last_modified: stat.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            meta: side.meta,
            checksums: side.checksums,
            parts: side.parts,
            part_sizes: side.part_sizes,
            part_checksums: side.part_checksums,
        };
        Ok((file, info))
    }
}

/// Positional reads from an opened object file.
struct FileSource(File);

impl ObjectSource for FileSource {
    fn read_at(&mut self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        FileExt::read_at(&self.0, buf, pos)
    }

    fn file(&self) -> Option<&File> {
        Some(&self.0)
    }
}

impl Backend for FsBackend {
    fn create_bucket(&self, bucket: &str) -> StorageResult<()> {
        let dir = self.bucket_dir(bucket)?;
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StorageError::BucketAlreadyExists)
            }
            Err(e) => return Err(e.into()),
        }
        fs::create_dir_all(dir.join(META_DIR))?;
        fs::create_dir_all(dir.join(UPLOADS_DIR))?;
        Ok(())
    }

    fn head_bucket(&self, bucket: &str) -> StorageResult<()> {
        self.existing_bucket_dir(bucket).map(|_| ())
    }

    fn delete_bucket(&self, bucket: &str) -> StorageResult<()> {
        let dir = self.existing_bucket_dir(bucket)?;
        if !self.keys_of(&dir)?.is_empty() {
            return Err(StorageError::BucketNotEmpty);
        }
        fs::remove_dir_all(dir)?;
        Ok(())
    }

    fn list_buckets(&self) -> StorageResult<Vec<BucketInfo>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata()?;
            if name.starts_with('.') || !meta.is_dir() {
                continue;
            }
            out.push(BucketInfo {
                name,
                created: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn bucket_owner(&self, bucket: &str) -> StorageResult<Option<String>> {
        let path = self.existing_bucket_dir(bucket)?.join(OWNER_FILE);
        match fs::read_to_string(path) {
            Ok(text) => Ok(Some(text.trim().to_string()).filter(|o| !o.is_empty())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn set_bucket_owner(&self, bucket: &str, owner: &str) -> StorageResult<()> {
        let path = self.existing_bucket_dir(bucket)?.join(OWNER_FILE);
        let mut file = match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StorageError::BucketAlreadyExists)
            }
            Err(e) => return Err(e.into()),
        };
        use std::io::Write;
        writeln!(file, "{owner}")?;
        file.sync_all()?;
        Ok(())
    }

    fn bucket_config(&self, bucket: &str, name: &str) -> StorageResult<Option<Vec<u8>>> {
        let path = self.config_path(bucket, name)?;
        match fs::read(path) {
            Ok(doc) => Ok(Some(doc)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn set_bucket_config(&self, bucket: &str, name: &str, doc: Option<&[u8]>) -> StorageResult<()> {
        let path = self.config_path(bucket, name)?;
        let Some(doc) = doc else {
            return match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            };
        };
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let tmp = self.tmp_path();
        fs::write(&tmp, doc)?;
        fs::rename(&tmp, &path).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            StorageError::Io(e)
        })
    }

    fn open_read(
        &self,
        bucket: &str,
        key: &str,
        range: Option<&s3s::dto::Range>,
    ) -> StorageResult<ObjectReader> {
        let dir = self.existing_bucket_dir(bucket)?;
        let (file, info) = self.open_file(&dir, key)?;
        let selected = select_range(range, info.size)?;
        Ok(ObjectReader::new(
            info,
            selected,
            Box::new(FileSource(file)),
        ))
    }

    fn head_object(&self, bucket: &str, key: &str) -> StorageResult<ObjectInfo> {
        let dir = self.existing_bucket_dir(bucket)?;
        self.open_file(&dir, key).map(|(_, info)| info)
    }

    fn create_write(
        &self,
        bucket: &str,
        key: &str,
        options: WriteOptions,
    ) -> StorageResult<ObjectWriter> {
        let dir = self.existing_bucket_dir(bucket)?;
        let name = encode_key(key)?;
        let dest = Dest::Object {
            data: dir.join(&name),
            sidecar: dir.join(META_DIR).join(&name),
            key: key.to_string(),
        };
        self.writer(dest, options)
    }

    fn delete_object(&self, bucket: &str, key: &str) -> StorageResult<()> {
        let dir = self.existing_bucket_dir(bucket)?;
        let name = encode_key(key)?;
        let data = dir.join(&name);
        let removed = Reaper::hold(&data);
        for path in [data, dir.join(META_DIR).join(&name)] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.reaper.release(removed);
        Ok(())
    }

    fn set_tags(&self, bucket: &str, key: &str, tags: Vec<(String, String)>) -> StorageResult<()> {
        let dir = self.existing_bucket_dir(bucket)?;
        let name = encode_key(key)?;
        let _placing = self.placing();
        let (file, _) = self.open_file(&dir, key)?;
        let stat = file.metadata()?;
        let path = dir.join(META_DIR).join(&name);
        let mut side = match Sidecar::load_matching(&path, stat.ino(), stat.len()) {
            Some(side) => side,
            // No sidecar (or a stale one): describe the file as it is.
            None => {
                let mut file = file;
                Sidecar {
                    ino: stat.ino(),
                    size: stat.len(),
                    etag: md5_of(&mut file)?,
                    ..Default::default()
                }
            }
        };
        side.meta.tags = tags;
        side.store(&self.tmp_path(), &path)?;
        Ok(())
    }

    fn list_objects(&self, bucket: &str, prefix: &str) -> StorageResult<Vec<ObjectInfo>> {
        let dir = self.existing_bucket_dir(bucket)?;
        let mut out = Vec::new();
        for key in self.keys_of(&dir)? {
            if !key.starts_with(prefix) {
                continue;
            }
            match self.open_file(&dir, &key) {
                Ok((_, info)) => out.push(info),
                // Deleted since the directory was read.
                Err(StorageError::NoSuchKey) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        options: UploadOptions,
    ) -> StorageResult<String> {
        super::multipart::create(self, bucket, key, options)
    }

    fn create_part_write(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        options: WriteOptions,
    ) -> StorageResult<ObjectWriter> {
        super::multipart::part_writer(self, bucket, key, upload_id, part_number, options)
    }

    fn upload_info(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<UploadInfo> {
        super::multipart::info(self, bucket, key, upload_id)
    }

    fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<Vec<PartInfo>> {
        super::multipart::parts(self, bucket, key, upload_id)
    }

    fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
        expected: &super::Checksums,
    ) -> StorageResult<ObjectInfo> {
        super::multipart::complete(self, bucket, key, upload_id, parts, expected)
    }

    fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<()> {
        super::multipart::abort(self, bucket, key, upload_id)
    }

    fn list_uploads(&self, bucket: &str, prefix: &str) -> StorageResult<Vec<UploadInfo>> {
        super::multipart::list(self, bucket, prefix)
    }
}

/// Where committed bytes go.
pub(super) enum Dest {
    Object {
        data: PathBuf,
        sidecar: PathBuf,
        key: String,
    },
    /// Part `number` inside an upload's directory.
    Part { dir: PathBuf, number: u32 },
}

impl Dest {
    fn paths(&self) -> (PathBuf, PathBuf) {
        match self {
            Dest::Object { data, sidecar, .. } => (data.clone(), sidecar.clone()),
            Dest::Part { dir, number } => (
                dir.join(number.to_string()),
                dir.join(format!("{number}.json")),
            ),
        }
    }
}

/// Bytes on their way into a temp file.
struct FsWriter {
    file: File,
    /// `None` once committed or aborted.
    tmp: Option<PathBuf>,
    side_tmp: PathBuf,
    dest: Dest,
    /// `None` when neither the ETag nor a `Content-MD5` needs it.
    md5: Option<Md5>,
    etag: EtagAlgo,
    /// The CRC64NVME ETag's pieces (`None` unless [`FsBackend::crc64_chunks_needed`]).
    crc64: Option<CrcPieces>,
    /// The client's checksums (in order).
    checksums: ChecksumComputer,
    /// Bytes `[0, hashed_upto)` went through the in-order hashers (MD5, the client's checksums).
    hashed_upto: u64,
    /// False once a write landed anywhere but at `hashed_upto`: rehash from the file at commit.
    in_order: bool,
    len: u64,
    options: WriteOptions,
    placing: Arc<Mutex<()>>,
    reaper: Arc<Reaper>,
}

impl FsWriter {
    /// MD5 hex and checksums of the whole temp file, verified against the options.
    fn digests(&mut self) -> StorageResult<(String, super::Checksums)> {
        let ordered = self.md5.is_some() || !self.checksums.computes_nothing();
        if ordered && (!self.in_order || self.hashed_upto != self.len) {
            self.rehash()?;
        }
        let md5 = self.md5.take().map(Md5::finalize);
        if let Some(want) = &self.options.content_md5 {
            let md5 = md5.ok_or(StorageError::InvalidDigest)?;
            let want = base64_simd::STANDARD
                .decode_to_vec(want.trim())
                .map_err(|_| StorageError::InvalidDigest)?;
            if want.len() != 16 {
                return Err(StorageError::InvalidDigest);
            }
            if want[..] != md5[..] {
                return Err(StorageError::BadDigest);
            }
        }
        let computer = std::mem::replace(
            &mut self.checksums,
            ChecksumComputer::new(&Default::default(), None),
        );
        let mut checksums = computer.finish(&self.options.expected)?;
        if let Some(pieces) = self.crc64.take() {
            let crc = match pieces.value(self.len) {
                Some(crc) => crc,
                None => self.crc64_of_file()?,
            };
            checksums.crc64nvme = Some(CrcAlgo::Crc64Nvme.encode(crc));
        }
        let etag = match md5 {
            Some(md5) if self.etag == EtagAlgo::Md5 => hex::encode(md5),
            _ => checksums
                .crc64nvme_etag()
                .ok_or(StorageError::InvalidDigest)?,
        };
        Ok((etag, checksums))
    }

    /// The in-order digests again, from the file (after out-of-order writes).
    fn rehash(&mut self) -> io::Result<()> {
        let mut md5 = self.md5.as_ref().map(|_| Md5::new());
        let mut checksums = ChecksumComputer::new(&self.options.expected, self.options.compute);
        let read = self.read_file(|_, bytes| {
            if let Some(md5) = &mut md5 {
                md5.update(bytes);
            }
            checksums.update(bytes);
        })?;
        self.md5 = md5;
        self.checksums = checksums;
        self.hashed_upto = read;
        self.in_order = true;
        Ok(())
    }

    /// The CRC64NVME of the file (its pieces overlapped or left a hole).
    fn crc64_of_file(&self) -> io::Result<u64> {
        let mut pieces = CrcPieces::new(CrcAlgo::Crc64Nvme);
        let read = self.read_file(|pos, bytes| pieces.add(pos, bytes))?;
        pieces
            .value(read)
            .ok_or_else(|| io::Error::other("the temp file changed while it was read"))
    }

    /// Hand `[0, len)` of the temp file to `each` (offset, bytes) in order; the bytes read.
    fn read_file(&self, mut each: impl FnMut(u64, &[u8])) -> io::Result<u64> {
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0;
        while pos < self.len {
            let n = FileExt::read_at(&self.file, &mut buf, pos)?;
            if n == 0 {
                break;
            }
            each(pos, &buf[..n]);
            pos += n as u64;
        }
        Ok(pos)
    }

    fn place(&mut self, etag: String, checksums: super::Checksums) -> StorageResult<ObjectInfo> {
        let tmp = self
            .tmp
            .take()
            .ok_or_else(|| StorageError::Io(io::Error::other("already committed")))?;
        let stat = self.file.metadata()?;
        let side = Sidecar {
            ino: stat.ino(),
            size: stat.len(),
            etag,
            meta: self.options.meta.clone(),
            checksums,
            parts: None,
            part_sizes: Vec::new(),
            part_checksums: Vec::new(),
        };
        let (data, sidecar) = self.dest.paths();
        // Sidecar first: a reader that sees it with the old file notices the inode differs.
        let replaced = Reaper::hold(&data);
        let placed = {
            let _placing = self.placing.lock();
            side.store(&self.side_tmp, &sidecar)
                .and_then(|()| fs::rename(&tmp, &data))
        };
        self.reaper.release(replaced);
        if let Err(e) = placed {
            let _ = fs::remove_file(&tmp);
            // A part whose upload was aborted meanwhile.
            if e.kind() == io::ErrorKind::NotFound {
                if let Dest::Part { .. } = self.dest {
                    return Err(StorageError::NoSuchUpload);
                }
            }
            return Err(e.into());
        }
        let key = match &self.dest {
            Dest::Object { key, .. } => key.clone(),
            Dest::Part { number, .. } => number.to_string(),
        };
        Ok(ObjectInfo {
            key,
            size: side.size,
            etag: side.etag,
            last_modified: stat.modified().unwrap_or_else(|_| SystemTime::now()),
            meta: side.meta,
            checksums: side.checksums,
            parts: None,
            part_sizes: Vec::new(),
            part_checksums: Vec::new(),
        })
    }
}

impl ObjectWrite for FsWriter {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)?;
        if let Some(pieces) = &mut self.crc64 {
            pieces.add(offset, data);
        }
        if self.in_order && offset == self.hashed_upto {
            if let Some(md5) = &mut self.md5 {
                md5.update(data);
            }
            self.checksums.update(data);
            self.hashed_upto += data.len() as u64;
        } else {
            self.in_order = false;
        }
        self.len = self.len.max(offset + data.len() as u64);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn commit(mut self: Box<Self>) -> StorageResult<ObjectInfo> {
        let (etag, checksums) = self.digests()?;
        self.place(etag, checksums)
    }

    fn abort(self: Box<Self>) {
        // Drop removes the temp file.
    }
}

impl Drop for FsWriter {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn store() -> (tempfile::TempDir, FsBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FsBackend::open(dir.path()).expect("open");
        (dir, s)
    }

    /// A store with CRC64NVME ETags and a bucket `b`.
    fn crc64nvme_store() -> (tempfile::TempDir, FsBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FsBackend::open(dir.path())
            .expect("open")
            .with_etag(EtagAlgo::Crc64nvme);
        s.create_bucket("b").expect("bucket");
        (dir, s)
    }

    #[test]
    fn crc64nvme_etags_need_no_md5_but_still_check_content_md5() {
        let (_dir, s) = crc64nvme_store();
        // CRC-64/NVME of "123456789" (its check value), big-endian as S3 encodes it.
        let info = put(&s, "k", b"123456789");
        assert_eq!(info.etag, "ae8b14860a799888");
        assert_eq!(info.checksums.crc64nvme.as_deref(), Some("rosUhgp5mIg="));
        assert_eq!(
            s.open_read("b", "k", None).expect("read").info.etag,
            info.etag
        );
        let with_md5 = |md5: &str| {
            let options = WriteOptions {
                content_md5: Some(md5.into()),
                ..WriteOptions::default()
            };
            let mut w = s.create_write("b", "m", options).expect("put");
            w.append(b"123456789").expect("write");
            w.commit()
        };
        // MD5("123456789") = 25f9e794323b453885f5181f1b624d0b
        let good = with_md5("JfnnlDI7RTiF9RgfG2JNCw==").expect("a matching Content-MD5");
        assert_eq!(good.etag, "ae8b14860a799888");
        assert!(matches!(
            with_md5("AAAAAAAAAAAAAAAAAAAAAA=="),
            Err(StorageError::BadDigest)
        ));
        // The default stays S3's MD5 ETag.
        let (_dir, md5_store) = store();
        md5_store.create_bucket("b").expect("bucket");
        assert_eq!(
            put(&md5_store, "k", b"123456789").etag,
            "25f9e794323b453885f5181f1b624d0b"
        );
    }

    /// The CRC-64/NVME check value ("123456789"), base64 of its big-endian bytes, as S3 sends it.
    const CRC64NVME_OF_DIGITS: &str = "rosUhgp5mIg=";

    #[test]
    fn every_new_object_gets_a_full_object_crc64nvme_unless_its_writer_named_a_checksum() {
        let (_dir, s) = store();
        s.create_bucket("b").expect("bucket");
        let info = put(&s, "k", b"123456789");
        assert_eq!(
            info.checksums.crc64nvme.as_deref(),
            Some(CRC64NVME_OF_DIGITS)
        );
        assert!(!info.checksums.composite);
        assert_eq!(
            info.etag, "25f9e794323b453885f5181f1b624d0b",
            "the ETag stays MD5"
        );
        // Pieces landing out of order (as RDMA chunks do) give the same value.
        let mut w = s
            .create_write("b", "o", WriteOptions::default())
            .expect("put");
        w.write_at(4, b"56789").expect("second half");
        w.write_at(0, b"1234").expect("first half");
        let info = w.commit().expect("commit");
        assert_eq!(
            info.checksums.crc64nvme.as_deref(),
            Some(CRC64NVME_OF_DIGITS)
        );
        // The stored value comes back with the object.
        let read = s.open_read("b", "o", None).expect("read");
        assert_eq!(
            read.info.checksums.crc64nvme.as_deref(),
            Some(CRC64NVME_OF_DIGITS)
        );
        // A writer that names its own checksum gets that one only, as in S3.
        let options = WriteOptions {
            compute: Some(crate::backend::ChecksumAlgo::Sha256),
            ..WriteOptions::default()
        };
        let mut w = s.create_write("b", "sha", options).expect("put");
        w.append(b"123456789").expect("write");
        let info = w.commit().expect("commit");
        assert!(info.checksums.sha256.is_some());
        assert_eq!(info.checksums.crc64nvme, None);
        // The operator's option turns the default off.
        let (_dir, off) = store();
        let off = off.with_default_checksum(DefaultChecksum::None);
        off.create_bucket("b").expect("bucket");
        assert!(put(&off, "k", b"123456789").checksums.is_empty());
    }

    fn put(s: &FsBackend, key: &str, data: &[u8]) -> ObjectInfo {
        let mut w = s
            .create_write("b", key, WriteOptions::default())
            .expect("put");
        w.append(data).expect("write");
        w.commit().expect("commit")
    }

    #[test]
    fn opening_removes_only_the_unfinished_writes_of_dead_servers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tmp = dir.path().join(TMP_DIR);
        fs::create_dir_all(&tmp).expect("tmp");
        // pid_max is at most 2^22: no process has this pid
        let dead = tmp.join("4294967295-3");
        let ours = tmp.join(format!("{}-0", std::process::id()));
        let live = tmp.join("1-7"); // init
        let other = tmp.join("notes");
        for f in [&dead, &ours, &live, &other] {
            fs::write(f, b"partial").expect("write");
        }
        let _s = FsBackend::open(dir.path()).expect("open");
        assert!(!dead.exists(), "a dead writer's file is removed");
        for kept in [&ours, &live, &other] {
            assert!(kept.exists(), "{} kept", kept.display());
        }
    }

    #[test]
    fn put_get_delete_round_trip() {
        let (dir, s) = store();
        assert!(matches!(
            s.create_write("b", "k", WriteOptions::default()),
            Err(StorageError::NoSuchBucket)
        ));
        s.create_bucket("b").expect("create");
        assert!(matches!(
            s.create_bucket("b"),
            Err(StorageError::BucketAlreadyExists)
        ));
        let mut w = s
            .create_write("b", "dir/k", WriteOptions::default())
            .expect("put");
        w.append(b"hello ").expect("write");
        w.append(b"world").expect("write");
        let info = w.commit().expect("commit");
        assert_eq!(info.size, 11);
        assert_eq!(info.etag, "5eb63bbbe01eeed093cb22bb8f5acdc3");
        let mut o = s.open_read("b", "dir/k", None).expect("get");
        let mut body = String::new();
        o.read_to_string(&mut body).expect("read");
        assert_eq!(body, "hello world");
        assert_eq!(o.info.etag, info.etag);
        // Dropped and aborted writers leave nothing.
        let mut w = s
            .create_write("b", "gone", WriteOptions::default())
            .expect("put");
        w.append(b"x").expect("write");
        drop(w);
        let mut w = s
            .create_write("b", "gone", WriteOptions::default())
            .expect("put");
        w.append(b"x").expect("write");
        w.abort();
        assert!(matches!(
            s.open_read("b", "gone", None),
            Err(StorageError::NoSuchKey)
        ));
        assert_eq!(
            fs::read_dir(dir.path().join(TMP_DIR)).expect("tmp").count(),
            0
        );
        assert!(matches!(
            s.delete_bucket("b"),
            Err(StorageError::BucketNotEmpty)
        ));
        s.delete_object("b", "dir/k").expect("delete");
        s.delete_object("b", "dir/k").expect("delete twice is fine");
        assert!(matches!(
            s.head_object("b", "dir/k"),
            Err(StorageError::NoSuchKey)
        ));
        s.delete_bucket("b").expect("empty bucket deletes");
    }

    #[test]
    fn set_tags_keeps_bytes_and_metadata() {
        let (_d, s) = store();
        s.create_bucket("b").expect("bucket");
        let mut options = WriteOptions::default();
        options.meta.content_type = Some("text/plain".into());
        let mut w = s.create_write("b", "k", options).expect("writer");
        w.append(b"hello").expect("write");
        let before = w.commit().expect("commit");
        let tags = vec![("a".to_string(), "1".to_string())];
        s.set_tags("b", "k", tags.clone()).expect("tags");
        let after = s.head_object("b", "k").expect("head");
        assert_eq!(after.meta.tags, tags);
        assert_eq!(after.meta.content_type.as_deref(), Some("text/plain"));
        assert_eq!((after.etag, after.size), (before.etag, before.size));
        s.set_tags("b", "k", Vec::new()).expect("no tags");
        assert!(s.head_object("b", "k").expect("head").meta.tags.is_empty());
        assert!(matches!(
            s.set_tags("b", "missing", tags),
            Err(StorageError::NoSuchKey)
        ));
    }

    #[test]
    fn bucket_config_documents_round_trip() {
        let (_d, s) = store();
        s.create_bucket("b").expect("bucket");
        assert_eq!(s.bucket_config("b", "lifecycle").expect("read"), None);
        s.set_bucket_config("b", "lifecycle", Some(b"{}"))
            .expect("store");
        assert_eq!(
            s.bucket_config("b", "lifecycle").expect("read").as_deref(),
            Some(&b"{}"[..])
        );
        // Not an object: listings and the emptiness check do not see it.
        assert!(s.list_objects("b", "").expect("list").is_empty());
        s.set_bucket_config("b", "lifecycle", None).expect("remove");
        s.set_bucket_config("b", "lifecycle", None)
            .expect("remove twice");
        assert_eq!(s.bucket_config("b", "lifecycle").expect("read"), None);
        assert!(s.set_bucket_config("b", "../x", Some(b"x")).is_err());
        assert!(matches!(
            s.bucket_config("nobucket", "lifecycle"),
            Err(StorageError::NoSuchBucket)
        ));
        s.delete_bucket("b")
            .expect("a bucket with a config document is empty");
    }

    #[test]
    fn bucket_owner_is_recorded_once() {
        let (_dir, s) = store();
        s.create_bucket("b").expect("create");
        assert_eq!(s.bucket_owner("b").expect("owner"), None);
        s.set_bucket_owner("b", "AKIA1").expect("set");
        assert!(matches!(
            s.set_bucket_owner("b", "AKIA2"),
            Err(StorageError::BucketAlreadyExists)
        ));
        assert_eq!(
            s.bucket_owner("b").expect("owner").as_deref(),
            Some("AKIA1")
        );
        // The owner file is no object and does not keep the bucket from being deleted.
        assert!(s.list_objects("b", "").expect("list").is_empty());
        s.delete_bucket("b").expect("delete");
        assert!(matches!(
            s.bucket_owner("b"),
            Err(StorageError::NoSuchBucket)
        ));
    }

    #[test]
    fn ranged_and_positional_reads() {
        let (_dir, s) = store();
        s.create_bucket("b").expect("create");
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        put(&s, "k", &data);
        let range = s3s::dto::Range::Int {
            first: 100,
            last: Some(199),
        };
        let mut r = s.open_read("b", "k", Some(&range)).expect("open");
        assert_eq!(r.range, 100..200);
        let mut got = Vec::new();
        r.read_to_end(&mut got).expect("read");
        assert_eq!(got, &data[100..200]);
        let mut buf = [0u8; 50];
        assert_eq!(r.read_at(&mut buf, 180).expect("read_at"), 20);
        assert_eq!(&buf[..20], &data[180..200]);
        let past = s3s::dto::Range::Int {
            first: 1000,
            last: None,
        };
        assert!(matches!(
            s.open_read("b", "k", Some(&past)),
            Err(StorageError::InvalidRange)
        ));
    }

    #[test]
    fn out_of_order_writes_commit_the_right_digest() {
        let (_dir, s) = store();
        s.create_bucket("b").expect("create");
        let mut w = s
            .create_write("b", "k", WriteOptions::default())
            .expect("put");
        w.write_at(6, b"world").expect("write");
        w.write_at(0, b"hello ").expect("write");
        let info = w.commit().expect("commit");
        assert_eq!(info.etag, "5eb63bbbe01eeed093cb22bb8f5acdc3");
    }

    #[test]
    fn crc64nvme_etag_of_pieces_in_any_order_with_a_hole_or_an_overlap() {
        let (_dir, s) = crc64nvme_store();
        let write = |key: &str, pieces: &[(u64, &[u8])]| {
            let mut w = s
                .create_write("b", key, WriteOptions::default())
                .expect("put");
            for (offset, data) in pieces {
                w.write_at(*offset, data).expect("write");
            }
            w.commit().expect("commit")
        };
        // CRC-64/NVME of "123456789", whatever order its pieces land in.
        let reversed = write("r", &[(6, b"789"), (3, b"456"), (0, b"123")]);
        assert_eq!(reversed.etag, "ae8b14860a799888");
        assert_eq!(
            reversed.checksums.crc64nvme.as_deref(),
            Some("rosUhgp5mIg=")
        );
        // Overlapping pieces: the file's bytes count, checksummed from the file.
        let overlap = write("o", &[(0, b"12345"), (3, b"xx6789"), (3, b"45")]);
        assert_eq!(overlap.etag, "ae8b14860a799888");
        // A hole reads as zeros, as the stored file does.
        let hole = write("h", &[(0, b"a"), (2, b"c")]);
        let expected = write("z", &[(0, b"a\0c")]);
        assert_eq!(hole.etag, expected.etag);
        assert_ne!(hole.etag, write("n", &[(0, b"ac")]).etag);
    }

    #[test]
    fn bad_digest_stores_nothing_and_keeps_the_old_object() {
        let (_dir, s) = store();
        s.create_bucket("b").expect("create");
        put(&s, "k", b"old");
        let options = WriteOptions {
            // MD5 of "something else".
            content_md5: Some("AAAAAAAAAAAAAAAAAAAAAA==".into()),
            ..Default::default()
        };
        let mut w = s.create_write("b", "k", options).expect("put");
        w.append(b"new").expect("write");
        assert!(matches!(w.commit(), Err(StorageError::BadDigest)));
        let mut r = s.open_read("b", "k", None).expect("open");
        let mut got = Vec::new();
        r.read_to_end(&mut got).expect("read");
        assert_eq!(got, b"old");
    }

    #[test]
    fn metadata_is_stored_and_stale_sidecars_ignored() {
        let (dir, s) = store();
        s.create_bucket("b").expect("create");
        let mut options = WriteOptions::default();
        options.meta.content_type = Some("text/plain".into());
        options.meta.user.insert("color".into(), "blue".into());
        let mut w = s.create_write("b", "k", options).expect("put");
        w.append(b"hello world").expect("write");
        w.commit().expect("commit");
        let info = s.head_object("b", "k").expect("head");
        assert_eq!(info.meta.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            info.meta.user.get("color").map(String::as_str),
            Some("blue")
        );
        // Replace the file behind the store's back: the sidecar no longer matches its inode.
        let path = dir.path().join("b").join("k");
        fs::remove_file(&path).expect("rm");
        fs::write(&path, b"abc").expect("write");
        let info = s.head_object("b", "k").expect("info");
        assert_eq!(info.etag, "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(info.size, 3);
        assert_eq!(info.meta, Default::default());
    }
}
